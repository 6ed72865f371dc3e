"""Real llama.cpp on Mesa 22.3 lavapipe: a crash is named from the kernel's fault line, not from the log.

With 4 layers' experts on the CPU and a 64-token prompt, the Vulkan build dies of SIGSEGV inside Mesa's
``libvulkan_lvp.so`` (seen with gdb on this project's VMs, nearly every start of the tiny model with Qwen's
152k tokenizer, ``tiny-qwen35moe-bpe``; the 32,000-token tiny model crashed within 3 starts in only about
half the runs on 2026-12-03; STATUS.md). Its log shows the
AMX buffers of the CPU experts, which used to make the diagnosis say "likely cause: llama.cpp's AMX path".
The kernel's ``segfault … in libvulkan_lvp.so`` line (``dmesg``, readable as root, as in CI) names lavapipe.
"""

from __future__ import annotations

import pytest

from llamaforge import proc
from llamaforge.bench.adjust import is_cpu_vulkan
from llamaforge.bench.plan import PointSpec, Timeouts, make_plan, read_facts
from llamaforge.bench.sweep import measure_point

pytestmark = pytest.mark.slow


def test_a_lavapipe_crash_is_named_lavapipe_from_the_kernels_fault_line(vulkan_build, tiny_bpe_model, store):
    tiny_model = tiny_bpe_model          # the model the crash was characterised with (see above)
    if not is_cpu_vulkan(vulkan_build):
        pytest.skip("the Vulkan device is not lavapipe")
    plan = make_plan(model_ref=str(tiny_model), model_path=tiny_model, model_facts=read_facts(tiny_model),
                     points=[PointSpec(4)], repeats=1, prompt_tokens=64, n_predict=4, threads=2, warmup=False,
                     timeouts=Timeouts(300, 300))
    run = store.new_run("sweep", {})
    for i in range(3):
        p = measure_point(vulkan_build, tiny_model, PointSpec(4), plan, store, run, label=f"try{i}")
        if p.status != "ok":
            break
    else:
        pytest.skip("lavapipe did not crash in 3 starts here (a Mesa other than 22.3?)")
    assert p.failure_class == "crash" and "SIGSEGV" in p.failure_detail, p.failure_detail
    if not proc.run(["dmesg"], timeout=10).ok:
        assert "kernel: " not in p.failure_detail       # nothing invented where the kernel log is closed
        return
    assert "kernel: " in p.failure_detail and "libvulkan_lvp" in p.failure_detail, p.failure_detail
    cause = p.failure_detail.split("likely cause: ")[1]
    assert cause.startswith("Mesa lavapipe") and "AMX" not in cause, p.failure_detail
