"""Runtime quirks: known workarounds for builds that build but crash, and crash diagnosis.

A :class:`Quirk` is a set of extra arguments per llama.cpp binary that avoids a known crash. The
smoke run (:mod:`llamaforge.builds.smoke`) tries them in registry order when a build crashes; the first
that makes the whole smoke run pass is recorded in the build's manifest (``quirks``: name,
arguments, evidence — exit signal, the log lines that point at the cause) and applied by
``bench`` to that build (with a notice; ``--no-quirks`` disables). A quirk that does not help is
reported and never recorded.

The registry (first entry first):

* ``no-repack`` — llama.cpp's CPU weight repacking (``CPU_REPACK`` / ``AMX`` buffers). Seen on an
  Intel AMX CPU with a Debian 12 gcc 12.2 build: every load died with SIGSEGV (a general-protection
  fault at ``ldtilecfg`` in ``ggml_backend_amx_mul_mat``); ``--no-repack`` (llama-bench
  ``--repack 0``) runs. A build-time alternative is ``llamaforge build --no-amx``.

:func:`likely_cause` names the probable cause of a crash from its log (AMX / CPU_REPACK buffers,
out of memory, fit refused, lavapipe), for failed sweep points and failed smoke runs.
"""

from __future__ import annotations

import re
import signal
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Quirk:
    name: str
    summary: str
    args: dict[str, tuple[str, ...]]          # binary name → extra arguments
    signs: tuple[str, ...] = ()               # lower-case log substrings that point at this cause
    backends: tuple[str, ...] | None = None   # None: every backend
    crash_site: str = ""                      # where a crash this quirk avoids happened ("the CPU repack path")
    known_issue: str = ""                     # the known issue it is, said where ``known_isa`` and gcc < 13 hold
    known_isa: str = ""                       # the CPU flag prefix of the known issue ("amx")
    docs: str = "docs/builds.md#runtime-quirks"   # where the quirk is documented

    def args_for(self, binary: str) -> list[str]:
        return list(self.args.get(binary, ()))

    def lacking(self, binary: str, flags: frozenset[str] | set[str]) -> list[str]:
        """The options of this quirk that ``binary`` (whose ``--help`` declares ``flags``) lacks."""
        return lacking(self.args_for(binary), flags)


def lacking(args: list[str] | tuple[str, ...], flags: frozenset[str] | set[str]) -> list[str]:
    """The options (``-x``/``--xyz``, not their values) in ``args`` that are not in ``flags``."""
    return [a for a in args if a.startswith("-") and a not in flags]


QUIRKS: tuple[Quirk, ...] = (
    Quirk("no-repack",
          "run without llama.cpp's CPU weight repacking (CPU_REPACK/AMX buffers), which crashes on this CPU × toolchain",
          {"llama-server": ("--no-repack",), "llama-bench": ("--repack", "0"), "llama-fit-params": ("--no-repack",)},
          signs=("amx", "cpu_repack"), crash_site="the CPU repack path", known_issue="known AMX + gcc-12 issue",
          known_isa="amx"),
)


def get_quirk(name: str) -> Quirk | None:
    return next((q for q in QUIRKS if q.name == name), None)


@dataclass
class Applied:
    """A quirk recorded for a build (what the manifest's ``quirks`` list holds). ``unsupported``:
    the binaries of this build that lack the quirk's options (e.g. llama-bench before ``--repack``
    existed), with those options — bench refuses to measure through them (they would crash)."""

    name: str
    summary: str
    args: dict[str, list[str]]
    evidence: dict = field(default_factory=dict)
    unsupported: dict[str, list[str]] = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {"name": self.name, "summary": self.summary, "args": self.args, "evidence": self.evidence,
                "unsupported": self.unsupported}


def recorded(manifest: dict | None) -> list[dict]:
    """The quirks recorded in a build manifest (well-formed entries only)."""
    out = []
    for q in (manifest or {}).get("quirks") or []:
        if isinstance(q, dict) and isinstance(q.get("name"), str) and isinstance(q.get("args"), dict):
            out.append(q)
    return out


def quirk_args(manifest: dict | None, binary: str) -> list[str]:
    """Extra arguments the build's recorded quirks add to ``binary``."""
    out: list[str] = []
    for q in recorded(manifest):
        out += [str(a) for a in q["args"].get(binary) or []]
    return out


# ---------------------------------------------------------------------------------- diagnosis

def signal_name(returncode: int | None) -> str | None:
    """``-11`` → ``SIGSEGV`` (a child killed by a signal; also 128+N exit codes of shells)."""
    if returncode is None:
        return None
    n = -returncode if returncode < 0 else returncode - 128 if 128 < returncode < 160 else None
    if n is None:
        return None
    try:
        return signal.Signals(n).name
    except ValueError:
        return f"signal {n}"


_CAUSES: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("fit refused", re.compile(r"failed to fit params.*(?:already set by user|not implemented|did not provide)", re.I)),
    ("out of memory", re.compile(r"out of memory|failed to allocate|cudamalloc failed|outofdevicememory|"
                                 r"std::bad_alloc|unable to allocate|not enough memory", re.I)),
    ("AMX", re.compile(r"\bAMX\b|ggml_backend_amx|amx_mul_mat|ldtilecfg")),
    ("lavapipe", re.compile(r"llvmpipe|lavapipe", re.I)),
    ("CPU_REPACK", re.compile(r"CPU_REPACK")),
)

_EXPLAIN = {
    "fit refused": "llama.cpp refused to fit the context (the log says why; e.g. tensor overrides set by the user)",
    "out of memory": "out of memory",
    "AMX": "llama.cpp's AMX path (AMX buffers in the log; known to crash in gcc-12 builds on AMX CPUs — "
           "the no-repack quirk or `build --no-amx` avoids it)",
    "lavapipe": "Mesa lavapipe (a CPU Vulkan device; Mesa 22.3 crashes on long prompts, and on some short ones "
                "with experts on the CPU)",
    "CPU_REPACK": "CPU weight repacking (CPU_REPACK buffers in the log; the no-repack quirk avoids that path)",
}


def likely_cause(log_text: str, returncode: int | None = None) -> tuple[str, str, list[str]] | None:
    """(cause, explanation, evidence lines) for a failed run's log, or None when nothing points anywhere.

    Allocation failures and refused fits are named whatever the exit; AMX / lavapipe / CPU_REPACK
    only for a process that died (a signal or abnormal exit), since their buffers appear in every
    healthy log too."""
    lines = (log_text or "").splitlines()
    died = returncode is not None and returncode != 0
    for cause, pat in _CAUSES:
        if cause in ("AMX", "lavapipe", "CPU_REPACK") and not died:
            continue
        hits = [ln.strip()[:200] for ln in lines if pat.search(ln)]
        if hits:
            return cause, _EXPLAIN[cause], hits[-3:]
    return None


def exit_status_in(detail: str) -> int | None:
    """The exit status a failure message quotes ("exited with status -11")."""
    m = re.search(r"status (-?\d+)", detail or "")
    return int(m.group(1)) if m else None


#: a fault the kernel places in one of these libraries (its ``segfault … in LIB[…]`` line, quoted in a failure's
#: detail as ``kernel: …``; :mod:`llamaforge.llamacpp.kernel`) is that cause, whatever the process's log shows
_LIBRARIES = (("lavapipe", re.compile(r" in (?:libvulkan_lvp|libLLVM|libgallium)[\w.+-]*\[")),)


def _kernel_cause(detail: str) -> tuple[str, str, list[str]] | None:
    for cause, pat in _LIBRARIES:
        if "kernel: " in (detail or "") and pat.search(detail):
            return cause, _EXPLAIN[cause], []
    return None


def describe_failure(detail: str, log_text: str, returncode: int | None = None) -> str:
    """``detail`` plus the signal name and the likely cause, when known (the kernel's fault line, where the
    detail quotes one, before the process's own log)."""
    if returncode is None:
        returncode = exit_status_in(detail)
    sig = signal_name(returncode)
    out = detail
    if sig and sig not in detail:
        out += f" ({sig})"
    found = _kernel_cause(detail) or likely_cause(log_text, returncode)
    if found and "likely cause" not in detail:
        out += f"; likely cause: {found[1]}"
    return out
