"""The kernel's fault line for a dead llama.cpp process (llamacpp.kernel), and the diagnosis it changes
(llamacpp.quirks.describe_failure). The kernel log lines are copied from this project's VM (Mesa 22.3 lavapipe
and a gcc-12 AMX build)."""

from __future__ import annotations

from llamaforge.llamacpp.kernel import fault_report, uptime
from llamaforge.llamacpp.quirks import describe_failure

KLOG = """\
[73119.889689] llama-server[7897]: segfault at e8 ip 00007fe21909c3eb sp 00007fe204ecf530 error 4 in libvulkan_lvp.so[29c3eb,7fe218e53000+317000] likely on CPU 1 (core 1, socket 0)
[73120.000001] llama-server[7898]: some other line
[73283.178781] traps: llama-server[10260] general protection fault ip:556aa85437c1 sp:7fffadc36300 error:0
[73300.000000] llama-server[7897]: segfault at 10 ip 0000000000401000 sp 00007ffd00000000 error 6 in llama-server[401000,400000+100000]
"""
AMX_LOG = "load_tensors:          AMX model buffer size =    12.00 MiB\nload_tensors:   CPU_REPACK model buffer size =    40.00 MiB"


def test_the_last_fault_line_of_the_process_or_its_threads_since_its_start_without_the_timestamp():
    assert fault_report(7897, text=KLOG).startswith("llama-server[7897]: segfault at 10 ")     # the last one
    first = fault_report(7897, since=73000.0, text=KLOG.splitlines()[0])
    assert first.startswith("llama-server[7897]: segfault at e8") and "libvulkan_lvp.so[" in first
    assert fault_report(7897, since=73200.0, text=KLOG.splitlines()[0]) is None      # before this process began
    # the kernel names the faulting thread: a worker's id is above its process's pid, never below
    assert fault_report(7880, since=73000.0, text=KLOG.splitlines()[0]) == first
    assert fault_report(7900, text=KLOG.splitlines()[0]) is None
    assert "general protection fault" in fault_report(10260, text=KLOG)
    assert fault_report(10261, text=KLOG) is None and fault_report(90000, text=KLOG) is None
    assert fault_report(7898, text=KLOG.splitlines()[1]) is None                       # not a fault line
    assert fault_report(7897, text="") is None


def test_a_fault_the_kernel_places_in_lavapipe_is_named_lavapipe_not_the_amx_buffers_of_the_log():
    line = fault_report(7897, since=73000.0, text=KLOG.splitlines()[0])
    d = describe_failure(f"/completion failed: ConnectionError (server exited with status -11); kernel: {line}",
                         AMX_LOG)
    assert "SIGSEGV" in d and "likely cause: Mesa lavapipe" in d and "AMX" not in d.split("likely cause")[1], d
    # without the kernel's word (a user who cannot read the kernel log) the log's buffers decide, as before
    d = describe_failure("/completion failed: ConnectionError (server exited with status -11)", AMX_LOG)
    assert "likely cause: llama.cpp's AMX path" in d
    # a fault in the binary itself (a static build: ggml is inside) leaves the log's evidence standing
    own = fault_report(7897, text=KLOG)
    d = describe_failure(f"llama-server exited with status -11 while loading; kernel: {own}", AMX_LOG)
    assert "likely cause: llama.cpp's AMX path" in d


def test_uptime_is_the_kernel_logs_clock():
    up = uptime()
    assert up is None or up > 0
