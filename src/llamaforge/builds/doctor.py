"""``llamaforge doctor``: which backends this machine can build and run, and why not (with fixes). Each backend's
checks are its own (:meth:`~llamaforge.backends.Backend.doctor_checks`); this module adds the host's (gcc × AMX)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from .. import proc
from ..backends import FlagOptions, HostFacts, known
from ..backends.toolchain import Toolchain, discover
from .hostcpu import has_amx, native_cpu


@dataclass
class BackendStatus:
    backend: str
    can_build: bool
    can_run: bool | None           # None = unknown / not checked (untested backends)
    devices: list[str] = field(default_factory=list)
    reasons: list[tuple[str, str]] = field(default_factory=list)   # (problem, fix)
    tested: bool = True


def gcc_major(cc_path: str | None) -> int | None:
    """The major version of a GCC compiler (None for clang/others or when it cannot be run)."""
    if not cc_path:
        return None
    r = proc.run([cc_path, "--version"], timeout=30)
    return parse_gcc_major(r.output)


def parse_gcc_major(version_output: str) -> int | None:
    """``cc (Debian 12.2.0-14+deb12u1) 12.2.0 … Free Software Foundation`` → 12; clang → None."""
    first = (version_output.splitlines() or [""])[0]
    if "clang" in version_output.lower() or "Free Software Foundation" not in version_output:
        return None
    m = re.search(r"(\d+)\.\d+(?:\.\d+)?\s*$", first)
    return int(m.group(1)) if m else None


def amx_gcc_warning(cpu: dict, gcc: int | None) -> tuple[str, str] | None:
    """(problem, fix) when an AMX CPU meets GCC < 13: builds made so crashed on every CPU load
    (GP fault at ldtilecfg in ggml_backend_amx_mul_mat; see llamacpp/quirks.py)."""
    if gcc is None or gcc >= 13 or not has_amx(cpu):
        return None
    return (f"AMX CPU with gcc {gcc}: llama.cpp's AMX path crashed on load in gcc-12 builds",
            "llamaforge detects it in the smoke run and records the no-repack quirk; or build with --no-amx, "
            "or use gcc >= 13 (CC/CXX)")


def host_facts(tc: Toolchain) -> HostFacts:
    """What the backends that run on this CPU report beside their own checks (an AMX CPU × gcc < 13)."""
    warn = amx_gcc_warning(native_cpu(), gcc_major(tc.cc.path if tc.cc else None))
    return HostFacts(cpu_warnings=(warn,) if warn else ())


def check(tc: Toolchain | None = None) -> list[BackendStatus]:
    """Every backend: can it be built here (its build problems), can it run (its doctor checks), and why not."""
    tc = tc or discover()
    host = host_facts(tc)
    out = []
    for b in known():
        reasons = b.build_problems(tc, FlagOptions(cuda_archs="x"))   # archs: judged under "run" below
        run = b.doctor_checks(tc, host)
        out.append(BackendStatus(b.name, not reasons, run.can_run, run.devices, [*reasons, *run.reasons],
                                 tested=b.tested))
    return out
