"""``bisect-run``: a ``git bisect run`` helper that builds the current checkout of a source dir in
place, measures it once and exits 0 (good) / 1 (bad) / 125 (does not build). :func:`bisect_run_verdict`
is its judgement; setup errors raise, so that ``git bisect`` stops instead of marking a commit bad.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..bench.plan import resolve_model
from ..bench.sweep import measure_point
from ..builds import BuildOptions, build
from ..config import Pin
from ..errors import BuildError, LlamaforgeError
from ..sources import head_tree
from ..stats import summarize
from ..store import Store
from .search import BisectError, check_metric
from .session import BisectRequest, bisect_plan


def bisect_run_verdict(values: Sequence[float], *, good_value: float | None = None, bad_value: float | None = None,
                       reference: float | None = None, threshold: float = 0.05) -> str:
    """``good`` / ``bad`` for a measured commit: nearer to ``good_value`` or ``bad_value``, or (with a
    ``reference``) bad when the median is more than ``threshold`` below it."""
    s = summarize(values)
    if s is None:
        raise BisectError("no samples were measured", "check the model and the build")
    if good_value is not None and bad_value is not None:
        return "good" if abs(s.median - good_value) <= abs(s.median - bad_value) else "bad"
    if reference is not None:
        return "bad" if s.median < reference * (1 - threshold) else "good"
    raise BisectError("bisect-run needs --good-value and --bad-value, or --reference (with --threshold)",
                      "e.g. --good-value 900 --bad-value 45, or --reference 900 --threshold 5%")


@dataclass
class RunOnce:
    """What ``bisect-run`` found for the checked-out commit: the exit code for ``git bisect run``
    (0 good, 1 bad, 125 skip), the line to print, and the error that made it a skip (if any)."""

    code: int
    line: str
    error: LlamaforgeError | None = None


def bisect_run_once(paths: Any, source: Path, req: BisectRequest, *, good_value: float | None = None,
                    bad_value: float | None = None, reference: float | None = None, threshold: float = 0.05,
                    command: str | None = None) -> RunOnce:
    """Build HEAD of ``source`` in place, measure it once (stored as a ``bisect-run`` run) and judge it
    (:func:`bisect_run_verdict`). A commit that does not build, or whose measurement fails, is a skip
    (125); bad options or setup problems raise (``git bisect`` must stop, not mark the commit bad)."""
    field_name = check_metric(req.metric)
    tree = head_tree(source)
    req = dataclasses.replace(req, good=tree.commit, bad=tree.commit)
    bisect_run_verdict([1.0], good_value=good_value, bad_value=bad_value, reference=reference,
                       threshold=threshold)  # validates the options before building
    model_path = resolve_model(req.model, paths)
    try:
        b = build(paths, Pin(name=tree.commit[:9], commit=tree.commit, sources=()), req.backend, BuildOptions(),
                  tree=tree, build_dir=paths.builds / f"bisect-run-{req.backend}")
    except BuildError as e:
        return RunOnce(125, f"{tree.commit[:12]} does not build: exit 125 (skip)", e)
    plan = bisect_plan(req, model_path)
    with Store(paths.store_db) as store:
        run_id = store.new_run("bisect-run", plan.to_json(), command=command, name=f"bisect-run {tree.commit[:9]}")
        pt = measure_point(b, model_path, plan.points[0], plan, store, run_id, label=tree.commit[:9])
        store.set_run_status(run_id, "done" if pt.status == "ok" else "failed")
    values = pt.measured(field_name)
    if not values:
        return RunOnce(125, f"{tree.commit[:12]}: measurement failed ({pt.failure_class}: {pt.failure_detail}): "
                            "exit 125 (skip)")
    verdict = bisect_run_verdict(values, good_value=good_value, bad_value=bad_value, reference=reference,
                                 threshold=threshold)
    return RunOnce(0 if verdict == "good" else 1,
                   f"{tree.commit[:12]} {req.metric} median {summarize(values).median:.1f} t/s → {verdict}")
