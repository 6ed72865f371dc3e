"""A sweep point that crashed in llama.cpp's CPU weight-repacking path, on a build with no recorded quirk.

The smoke run records the ``no-repack`` quirk when a build dies on load (:mod:`llamaforge.builds.smoke`).
A GPU build can pass it and still die later: its smoke run sends the CPU experts only single-token
decodes, and on an AMX CPU with a gcc-12 build the repacked (AMX) matrix multiplication of some prompt
batches dies with SIGSEGV. Seen on this project's 2-vCPU VMs: the Vulkan build with ``--n-cpu-moe 4``
and a 63- or 64-token prompt, every start; 32, 106 or 160 tokens ran.

So a point whose start died of a fault (SIGSEGV, SIGILL, SIGBUS), on a build without a recorded quirk and
with quirks on (``--no-quirks`` turns this off), is started once more with the quirk, as the smoke run
tries it on any crash; unless its log names another cause (lavapipe, out of memory). llama-bench prints
no buffer lines, so a dying llama-bench start names no cause at all.
When that start runs, the quirk is recorded on the build (its manifest, with the evidence, as the smoke
run records one) and in the run's plan, and every later start of the build carries it. A retry that dies
too changes nothing: the first failure stands, the retry's is noted beside it.
"""

from __future__ import annotations

from typing import Any

from ..llamacpp.options import build_options
from ..llamacpp.quirks import Applied, Quirk, exit_status_in, get_quirk, likely_cause, recorded, signal_name
from ..store import Point
from . import adjust
from .plan import Plan

#: the deaths the repacking path dies of (AMX: a general-protection fault at ldtilecfg, an illegal instruction)
FAULTS = ("SIGSEGV", "SIGILL", "SIGBUS")
#: the causes in a dying start's log that the no-repack quirk avoids
CAUSES = ("AMX", "CPU_REPACK")
BINARY = {"server": "llama-server", "llama-bench": "llama-bench"}


def needed(point: Point, build: Any, plan: Plan) -> Quirk | None:
    """The quirk to retry ``point`` with, or None (not a repack crash, quirks off, or one already recorded)."""
    if point.status != "failed" or point.failure_class != "crash" or not plan.quirks or recorded(build.manifest):
        return None
    rc = exit_status_in(point.failure_detail or "")
    if signal_name(rc) not in FAULTS:          # an abort (GGML_ASSERT), a kill (ours, the OOM killer), an exit
        return None
    cause = likely_cause(point.log_tail or "", rc)
    if cause is not None and cause[0] not in CAUSES:        # e.g. lavapipe, out of memory: not this quirk's
        return None
    q = get_quirk("no-repack")
    binary = BINARY.get(point.engine, "llama-server")
    if q is None or q.lacking(binary, build_options(build).of(binary)):
        return None      # the binary cannot take it: adjust.blocked_reason says so where it matters
    return q


def applied(q: Quirk, build: Any, point: Point) -> Applied:
    """The record of ``q`` for ``build``, with the crash of ``point`` as its evidence."""
    opts = build_options(build)
    lacking = {b: q.lacking(b, opts.of(b)) for b in q.args if b != "llama-fit-params" or opts.fit_params}
    lacking = {b: v for b, v in lacking.items() if v}
    rc = exit_status_in(point.failure_detail or "")
    cause = likely_cause(point.log_tail or "", rc)
    where = f"a sweep point (ncmoe {point.ncmoe}, ngl {point.ngl}, {point.engine}) of run {point.run_id}"
    ev = {"failed": [BINARY.get(point.engine, "llama-server")], "returncode": rc, "signal": signal_name(rc),
          "detail": (point.failure_detail or "")[:300], "cause": cause[0] if cause else None,
          "log_lines": cause[2] if cause else [], "seen_in": where}
    return Applied(q.name, q.summary, {b: list(v) for b, v in q.args.items() if b not in lacking}, ev,
                   {b: list(q.args[b]) for b in lacking})


def use(build: Any, plan: Plan, quirks: list[dict]) -> tuple[list, dict | None]:
    """Make ``build`` run with ``quirks`` in this process (its manifest in memory, the plan's runtime for it);
    returns what it had, for :func:`restore`."""
    before = (list(build.manifest.get("quirks") or []), plan.runtime.get(build.key))
    build.manifest["quirks"] = quirks
    plan.runtime[build.key] = adjust.compute(build, plan).to_dict()
    return before


def restore(build: Any, plan: Plan, before: tuple[list, dict | None]) -> None:
    build.manifest["quirks"] = before[0]
    if before[1] is None:
        plan.runtime.pop(build.key, None)
    else:
        plan.runtime[build.key] = before[1]
