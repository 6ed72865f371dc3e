"""Less noise where llama.cpp allows it: the llama-bench settings a CPU bisection measures with.

On the CPU backend a bisection runs llama-bench with

* ``-t`` = the machine's **physical** cores (``psutil.cpu_count(logical=False)``) unless ``--threads``
  is given: two threads on one core's hyper-threads contend for its units, and more threads than
  cores leave one waiting for the OS at every barrier of every op;
* ``--cpu-strict 1`` (each compute thread pinned to its own core: no migrations mid-run),
  ``--prio 2`` (compute threads at high priority: SCHED_FIFO where the OS allows it, so other
  processes preempt them less) and ``--poll 50`` (threads spin on work before sleeping; llama-bench's
  own default, written out so the run's command line and plan say it),

each only where that binary's ``--help`` (probed once per build, :mod:`llamaforge.llamacpp.options`)
lists the option. What each buys on a machine is measured by ``benchmarks/bisect_noise.py`` (the
between-start spread with and without); what a run used is recorded in its plan (``bisect.quiet``)
and on every commit's probe where a build lacked an option.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from ..backends import find as find_backend

#: (option, value) in the order they are added; see the module doc
QUIET_OPTIONS: tuple[tuple[str, str], ...] = (("--cpu-strict", "1"), ("--prio", "2"), ("--poll", "50"))


def physical_cores() -> int | None:
    """The machine's physical cores (``None`` where psutil cannot tell)."""
    import psutil

    n = psutil.cpu_count(logical=False)
    return int(n) if n else None


@dataclass(frozen=True)
class Quiet:
    """The noise settings of a bisection: threads, extra llama-bench arguments, and what was left out."""

    threads: int | None
    threads_from: str                      # "--threads" | "physical cores" | "llama.cpp default"
    args: tuple[str, ...] = ()
    missing: tuple[str, ...] = ()          # wanted options this llama-bench lacks
    enabled: bool = True

    def describe(self) -> str:
        t = f"-t {self.threads} ({self.threads_from})" if self.threads else "threads: llama.cpp's default"
        a = " ".join(self.args) if self.args else "no scheduling options"
        miss = f"; this llama-bench has no {', '.join(self.missing)}" if self.missing else ""
        return f"{t}, {a}{miss}" + ("" if self.enabled else " (--no-quiet)")

    def to_dict(self) -> dict:
        return {"threads": self.threads, "threads_from": self.threads_from, "args": list(self.args),
                "missing": list(self.missing), "enabled": self.enabled, "text": self.describe()}


@dataclass(frozen=True)
class QuietRequest:
    backend: str = "cpu"
    threads: int | None = None            # --threads (wins over physical cores)
    enabled: bool = True                  # --no-quiet: only --threads, nothing added
    options: tuple[tuple[str, str], ...] = field(default=QUIET_OPTIONS)


def settings(req: QuietRequest, bench_options: Iterable[str] | None, *, cores: int | None = None) -> Quiet:
    """The settings for a build whose llama-bench lists ``bench_options`` (``None``: not known, nothing added)."""
    backend = find_backend(req.backend)
    on_cpu = backend is not None and not backend.offloads
    if req.threads:
        threads, src = req.threads, "--threads"
    elif req.enabled and on_cpu:
        threads = cores if cores is not None else physical_cores()
        src = "physical cores" if threads else "llama.cpp default"
    else:
        threads, src = None, "llama.cpp default"
    if not (req.enabled and on_cpu):
        return Quiet(threads, src, enabled=req.enabled)
    have = set(bench_options or ())
    args: list[str] = []
    missing: list[str] = []
    for opt, val in req.options:
        if opt in have:
            args += [opt, val]
        else:
            missing.append(opt)
    return Quiet(threads, src, tuple(args), tuple(missing))
