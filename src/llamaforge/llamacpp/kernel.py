"""What the kernel logged about a llama.cpp process that died of a fault.

A process killed by a fault leaves a line in the kernel log: ``llama-server[PID]: segfault at … in
libvulkan_lvp.so[…]`` (the library the faulting instruction was in), or ``traps: llama-server[PID] general
protection fault …``. That names where a crash happened when the process's own log cannot. An example is a
Vulkan build on Mesa lavapipe that died inside ``libvulkan_lvp.so``: its log also shows AMX buffers, which
would otherwise make the diagnosis name llama.cpp's AMX path.

The kernel log is read with ``dmesg``. Only root (or CAP_SYSLOG, where ``kernel.dmesg_restrict`` is 1)
can read it. Elsewhere nothing is found, and the diagnosis falls back to the process's own log
(:func:`llamaforge.llamacpp.quirks.likely_cause`). A raised signal (``raise(SIGSEGV)``, an abort) leaves
no such line.
"""

from __future__ import annotations

import re

from .. import proc

_FAULT = re.compile(r"segfault at|general protection|invalid opcode|trap (?:divide|int3|stack)", re.I)
_STAMP = re.compile(r"^\[\s*(\d+(?:\.\d+)?)\]\s*")
_TID = re.compile(r"[\w.+-]\[(\d+)\]")
#: thread ids counted as the process's: from its pid up (ids are handed out in order, up to pid_max)
_THREADS = 1 << 16


def fault_report(pid: int, *, since: float | None = None, text: str | None = None) -> str | None:
    """The kernel's last fault line of process ``pid`` or one of its threads, without the timestamp; None when
    there is none or the kernel log cannot be read.

    The kernel names the faulting *thread* (``llama-server[TID]``: a worker's id, above the process's), so a
    line counts when its id is the pid or a later one and it was logged at or after ``since`` (seconds since
    boot: the process's start). Only one measurement runs on a host at a time (the host lock), so a line in
    that window is the process's. ``text``: the kernel log itself (tests); else ``dmesg`` is run."""
    if text is None:
        try:
            r = proc.run(["dmesg"], timeout=10)
        except OSError:
            return None
        if not r.ok:
            return None
        text = r.output
    found = None
    for line in text.splitlines():
        m = _STAMP.match(line)
        tid = _TID.search(line)
        if not (m and tid and _FAULT.search(line)) or not pid <= int(tid.group(1)) < pid + _THREADS:
            continue
        if since is not None and float(m.group(1)) < since:
            continue
        found = line[m.end():].strip()
    return found[:240] if found else None


def uptime() -> float | None:
    """Seconds since boot (the kernel log's clock), for :func:`fault_report`'s ``since``."""
    try:
        with open("/proc/uptime", encoding="ascii") as f:
            return float(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None
