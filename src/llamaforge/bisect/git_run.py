"""``bisect-run``: a ``git bisect run`` helper that builds the current checkout of a source dir in
place, measures it in sequential server starts and exits 0 (good) / 1 (bad) / 125 (skip).

**What it can conclude.** ``git bisect`` gives it one commit and two *numbers* (``--good-value`` and
``--bad-value``, or ``--reference`` with ``--threshold``), not the endpoints' starts. So the commit is
measured start by start (one llama-bench process each, up to ``--max-launches``) and judged by where
the interval of its start-level centre lies (:func:`llamaforge.judge.locate.side`): wholly on the bad
side of the boundary (the geometric midpoint of the two values, or the reference less the threshold)
→ bad; wholly on the good side → good. The values are taken as exact, so their own start-to-start
noise is not accounted for (give values measured over several starts: ``llamaforge bisect`` prints
its endpoints' centres). Still open at the maximum, the commit is **not guessed**: it exits 125, and
``git bisect`` skips it (its final answer then says which commits it could not tell apart). For the
full noise-aware search (the endpoints measured here, the refusal up front, the culprit's check)
use ``llamaforge bisect``.

:func:`bisect_run_verdict` is its judgement; setup errors raise, so that ``git bisect`` stops instead
of marking a commit bad.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..bench.plan import PointSpec, resolve_model
from ..bench.sweep import measure_launch
from ..builds import BuildOptions, build
from ..config import Pin
from ..errors import BuildError, LlamaforgeError
from ..judge import Starts
from ..judge.locate import ABOVE, BELOW, OPEN, Side, side, side_alpha
from ..llamacpp.options import build_options
from ..records import BisectRunSection
from ..sources import head_tree
from ..store import Store
from .quiet import settings
from .search import BisectError, check_metric
from .session import BisectRequest, bisect_plan

GOOD, BAD, UNDECIDED = "good", "bad", "undecided"


@dataclass(frozen=True)
class Boundary:
    """The value a commit's level is judged against, and which side of it is good."""

    value: float
    good_above: bool
    text: str


def boundary(*, good_value: float | None = None, bad_value: float | None = None, reference: float | None = None,
             threshold: float = 0.05) -> Boundary:
    """The boundary of :func:`bisect_run_verdict` (a setup error without a usable pair of values)."""
    if good_value is not None and bad_value is not None:
        if good_value <= 0 or bad_value <= 0 or good_value == bad_value:
            raise BisectError(f"--good-value {good_value:g} and --bad-value {bad_value:g} must be two different "
                              "positive t/s values", "e.g. --good-value 900 --bad-value 450")
        mid = math.sqrt(good_value * bad_value)
        return Boundary(mid, good_value > bad_value, f"the midpoint {mid:.1f} t/s of good {good_value:g} and bad {bad_value:g}")
    if reference is not None:
        if reference <= 0:
            raise BisectError(f"--reference {reference:g} must be a positive t/s value", "e.g. --reference 900")
        cut = reference * (1 - threshold)
        return Boundary(cut, True, f"{cut:.1f} t/s ({threshold:.0%} below the reference {reference:g})")
    raise BisectError("bisect-run needs --good-value and --bad-value, or --reference (with --threshold)",
                      "e.g. --good-value 900 --bad-value 45, or --reference 900 --threshold 5%")


def bisect_run_verdict(starts: Sequence[Sequence[float]], bound: Boundary, *, max_starts: int) -> tuple[str, Side]:
    """``good`` / ``bad`` / ``undecided`` for a commit's starts (request values per start) against ``bound``."""
    s = side(Starts.of(starts), bound.value, alpha=side_alpha(max_starts))
    if s.verdict == OPEN:
        return UNDECIDED, s
    above = s.verdict == ABOVE
    assert s.verdict in (ABOVE, BELOW)
    return (GOOD if above == bound.good_above else BAD), s


@dataclass
class RunOnce:
    """What ``bisect-run`` found for the checked-out commit: the exit code for ``git bisect run``
    (0 good, 1 bad, 125 skip), the line to print, and the error that made it a skip (if any)."""

    code: int
    line: str
    error: LlamaforgeError | None = None


def _measure(paths: Any, b: Any, req: BisectRequest, tree: Any, bound: Boundary, command: str | None) -> RunOnce:
    """Starts of the build until :func:`bisect_run_verdict` decides (or the maximum)."""
    field_name = check_metric(req.metric)
    model_path = resolve_model(req.model, paths)
    quiet = settings(req.quiet_request(), sorted(build_options(b).bench))
    plan = bisect_plan(req, model_path, quiet)
    max_starts = req.policy.max_starts
    starts: list[list[float]] = []
    with Store(paths.store_db) as store:
        rec = plan.replace(bisect_run=BisectRunSection(boundary=bound.text, max_launches=max_starts,
                                                       quiet=quiet.to_dict()))
        run_id = store.new_run("bisect-run", rec, command=command, name=f"bisect-run {tree.commit[:9]}")
        acc, verdict, where = None, UNDECIDED, None
        while len(starts) < max_starts:
            acc = measure_launch(b, model_path, PointSpec(0), plan, store, run_id, label=tree.commit[:9],
                                 launch=len(starts) + 1, seq=len(starts) + 1, acc=acc)
            vals = [v for s in acc.samples if s.launch == len(starts) + 1 and (v := getattr(s, field_name)) is not None]
            if acc.status != "ok" or not vals:
                store.set_run_status(run_id, "failed")
                return RunOnce(125, f"{tree.commit[:12]}: measurement failed ({acc.failure_class}: "
                                    f"{acc.failure_detail}): exit 125 (skip)")
            starts.append([float(v) for v in vals])
            verdict, where = bisect_run_verdict(starts, bound, max_starts=max_starts)
            if verdict != UNDECIDED:
                break
        store.set_run_status(run_id, "done")
    return _line(tree.commit, req.metric, verdict, where, bound)


def _line(commit: str, metric: str, verdict: str, s: Side | None, bound: Boundary) -> RunOnce:
    lvl = (f"{metric} {s.centre:.1f} t/s [{s.low:.1f}, {s.high:.1f}] over {s.k} starts" if s is not None and s.k >= 2
           else f"{metric} {s.centre if s else math.nan:.1f} t/s")
    if verdict == UNDECIDED:
        return RunOnce(125, f"{commit[:12]} {lvl}: cannot tell it from {bound.text} within --max-launches "
                            f"(its interval spans it): exit 125, git bisect skips it rather than guess")
    return RunOnce(0 if verdict == GOOD else 1, f"{commit[:12]} {lvl} vs {bound.text} → {verdict}")


def bisect_run_once(paths: Any, source: Path, req: BisectRequest, *, good_value: float | None = None,
                    bad_value: float | None = None, reference: float | None = None, threshold: float = 0.05,
                    command: str | None = None) -> RunOnce:
    """Build HEAD of ``source`` in place, measure it in starts (stored as a ``bisect-run`` run) and judge it
    (see the module doc). A commit that does not build, or whose measurement fails, is a skip (125); bad
    options or setup problems raise (``git bisect`` must stop, not mark the commit bad)."""
    check_metric(req.metric)
    bound = boundary(good_value=good_value, bad_value=bad_value, reference=reference, threshold=threshold)
    tree = head_tree(source)
    req = dataclasses.replace(req, good=tree.commit, bad=tree.commit)
    resolve_model(req.model, paths)            # a setup error before building
    try:
        b = build(paths, Pin(name=tree.commit[:9], commit=tree.commit, sources=()), req.backend, BuildOptions(),
                  tree=tree, build_dir=paths.builds / f"bisect-run-{req.backend}")
    except BuildError as e:
        return RunOnce(125, f"{tree.commit[:12]} does not build: exit 125 (skip)", e)
    return _measure(paths, b, req, tree, bound, command)
