"""The host CPU as a native build sees it: model name and instruction-set flags (``/proc/cpuinfo``).

A ``GGML_NATIVE=ON`` build is compiled with ``-march=native``: its binaries may use every
instruction the build host has (AVX-512, AMX, ...) and die with SIGILL on a CPU without them. So
the key of a native build includes :func:`native_cpu`, and a build whose recorded CPU differs
from this host's is never handed out (:func:`runs_here`) — a shared build folder or cache stays
safe.

Only instruction-set flags are kept (an allow-list of prefixes), not the kernel's bookkeeping
flags (``constant_tsc``, ``hypervisor``, mitigations), which change with kernels and VMs
without changing what the compiler emits.
"""

from __future__ import annotations

import hashlib
import platform
import re
from functools import lru_cache
from pathlib import Path

CPUINFO = Path("/proc/cpuinfo")

# x86 flags that name instruction-set extensions a compiler can target with -march=native
_X86_ISA = re.compile(
    r"^(?:mmx|sse\w*|ssse3|pni|avx\w*|fma\w*|f16c|bmi\d|popcnt|abm|lzcnt|aes|vaes|pclmulqdq|vpclmulqdq|sha_ni|"
    r"gfni|amx\w*|movbe|adx|rdrand|rdseed|xsave\w*|cx8|cx16|cmov|lahf_lm|clflushopt|clwb|3dnow\w*|xop|tbm|"
    r"rdpid|serialize|wbnoinvd|pku|cldemote|movdir\w*|enqcmd|waitpkg|uintr|prefetchw|clzero|mwaitx|"
    r"rtm|hle|sha\w*|vnni\w*|apx\w*|lm)$")


def parse_cpuinfo(text: str, machine: str | None = None) -> dict:
    """``{"arch", "model", "isa": [sorted flags]}`` from ``/proc/cpuinfo`` text (first CPU)."""
    fields: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            if fields:
                break             # the first processor block is enough
            continue
        k, sep, v = line.partition(":")
        if sep:
            fields.setdefault(k.strip().lower(), v.strip())
    arch = machine or platform.machine()
    model = fields.get("model name") or fields.get("cpu") or fields.get("hardware") or ""
    if "flags" in fields:        # x86
        isa = sorted(f for f in fields["flags"].split() if _X86_ISA.match(f))
    elif "features" in fields:   # arm64: every Features entry is an ISA extension
        isa = sorted(fields["features"].split())
        parts = [fields.get(k, "") for k in ("cpu implementer", "cpu part", "cpu variant")]
        model = model or "arm " + "/".join(p for p in parts if p)
    else:
        isa = []
    return {"arch": arch, "model": model or "unknown", "isa": isa}


@lru_cache(maxsize=1)
def native_cpu() -> dict:
    """This host's CPU (``arch``, ``model``, ``isa`` flags, and a short ``id`` hash of the ISA)."""
    try:
        text = CPUINFO.read_text(encoding="utf-8", errors="replace")
    except OSError:
        text = ""
    cpu = parse_cpuinfo(text)
    return {**cpu, "id": cpu_id(cpu)}


def cpu_id(cpu: dict) -> str:
    """A short stable hash of the parts of a CPU that matter to ``-march=native``."""
    blob = "|".join([cpu.get("arch", ""), cpu.get("model", ""), " ".join(cpu.get("isa") or [])])
    return hashlib.sha256(blob.encode()).hexdigest()[:12]


def is_native(flags: dict) -> bool:
    return str(flags.get("GGML_NATIVE", "OFF")).upper() in ("ON", "1", "TRUE", "YES")


def runs_here(manifest: dict) -> tuple[bool, str | None]:
    """Whether a build's binaries were made for this CPU: (ok, why not)."""
    key_content = manifest.get("key_content") or {}
    flags = key_content.get("flags") or manifest.get("flags") or {}
    if not is_native(flags):
        return True, None
    built_for = key_content.get("cpu")
    if not built_for:
        return False, "a GGML_NATIVE build that does not record the CPU it was built for"
    here = native_cpu()
    if built_for.get("id") != here["id"]:
        missing = sorted(set(built_for.get("isa") or []) - set(here["isa"]))
        extra = f"; this CPU lacks {', '.join(missing[:6])}" if missing else ""
        return False, f"a GGML_NATIVE build for another CPU ({built_for.get('model', '?')}{extra})"
    return True, None


def has_amx(cpu: dict | None = None) -> bool:
    return any(f.startswith("amx") for f in (cpu or native_cpu())["isa"])
