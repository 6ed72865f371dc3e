"""What the judge says about a compare run: per point (ncmoe, ngl) and metric, both sides' estimates and
the verdict on B relative to A — a pure function of stored points (each side's server starts are its
replicates; Holm's method over every point and metric of the run). The measuring session
(:mod:`.session`) calls it between rounds and to store the run's summary; ``fleet compare`` calls
:func:`compare_sides` on two hosts' points; the terminal (:mod:`.show`) and the report read what it stored.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..findings.comparison import verdict_word
from ..judge import INCONCLUSIVE, Policy, Starts, estimate, judge
from ..judge.adjusted import controlled
from ..judge.metric_starts import groups
from ..judge.wording import is_far, ratio_text
from ..metrics import Metric, family, get, measured_in, request_metrics
from ..records import CompareSummary
from ..store import Point, Run, Store


def side_of(label: str) -> str:
    return label.split(".", 1)[0]



def _groups(points: Sequence[Point], ncmoe: int, ngl: int, metric: Metric) -> list[list[float]]:
    """One side's values of ``metric`` per server start (one stored point per round, each possibly with
    launches)."""
    out: list[list[float]] = []
    for p in sorted(points, key=lambda q: q.label):
        if p.status == "ok" and p.ncmoe == ncmoe and p.ngl == ngl:
            out += groups(metric, p)
    return out


def _side_dict(groups: list[list[float]]) -> dict | None:
    e = estimate(Starts.of(groups))
    return None if e is None else e.to_dict()


def comparisons(store: Store, run_id: str, min_effect: float = 0.05, *, alpha: float | None = None) -> list[dict]:
    """Per point and metric: side estimates and the judgement (B relative to A)."""
    pts = store.points(run_id)
    return compare_sides([p for p in pts if side_of(p.label) == "A"], [p for p in pts if side_of(p.label) == "B"],
                         min_effect, alpha=alpha)


def compare_sides(pts_a: Sequence[Point], pts_b: Sequence[Point], min_effect: float = 0.05, *,
                  alpha: float | None = None) -> list[dict]:
    """Per point (ncmoe, ngl) and metric: the two sides' estimates and the judge's verdict on B relative to A,
    with Holm's method over every point and metric (each side's server starts are its replicates); the interval
    kept is the one the verdict used, at the level Holm tested it at, named in ``adjusted``."""
    keys = sorted({(p.ncmoe, p.ngl) for p in [*pts_a, *pts_b]})
    shown = {m.name for m in measured_in([*pts_a, *pts_b])}
    cells = []
    for ncmoe, ngl in keys:
        for m in request_metrics():
            if m.name not in shown:
                continue
            ga, gb = _groups(pts_a, ncmoe, ngl, m), _groups(pts_b, ncmoe, ngl, m)
            kw = {"alpha": alpha} if alpha is not None else {}
            cells.append((ncmoe, ngl, m.name, ga, gb, judge(ga, gb, min_effect=min_effect, **kw)))
    # each interval the one its verdict used (Holm's level), within its metric's family (metrics.family)
    judged: list = [None] * len(cells)
    for fam in {family(c[2]) for c in cells}:
        idx = [i for i, c in enumerate(cells) if family(c[2]) == fam]
        for i, j in zip(idx, controlled([cells[i][5] for i in idx]), strict=True):
            judged[i] = j
    return [{"ncmoe": ncmoe, "ngl": ngl, "metric": metric, "A": _side_dict(ga), "B": _side_dict(gb),
             "comparison": _stored(j, metric)}
            for (ncmoe, ngl, metric, ga, gb, _j), j in zip(cells, judged, strict=True)]


def _stored(j: Any, metric: str) -> dict | None:
    """A judgement as stored; a metric where lower is better says so (``better: lower``), so its verdict word
    reads a ratio above 1 as worse (:func:`llamaforge.findings.comparison.verdict_word`)."""
    if j is None:
        return None
    d = j.to_dict()
    if not get(metric).higher_is_better:
        d["better"] = "lower"
    return d


def summarize_run(store: Store, run_id: str, min_effect: float = 0.05, *, policy: Policy | None = None,
                  stops: dict[int, dict] | None = None) -> CompareSummary:
    pts = store.points(run_id)
    alpha = policy.look_alpha if policy is not None else None
    out = CompareSummary(comparisons=comparisons(store, run_id, min_effect, alpha=alpha), min_effect=min_effect,
                         points=len(pts), failed=sum(1 for p in pts if p.status != "ok"))
    if policy is not None:
        out.launches = policy.to_dict() if policy.max_starts > policy.min_starts else policy.max_starts
    if stops:
        out.stops = {str(i): st for i, st in sorted(stops.items())}
    return out


def worse_rows(run: Run) -> list[str]:
    """``"tg at ncmoe 0 (B/A 0.627 [0.605, 0.650])"`` or ``"tg at ncmoe 0 (A 10.3× faster [9.3, 11.4])"`` for every metric and point of a compare run whose verdict is worse."""
    return _rows_judged(run, "worse")


def inconclusive_rows(run: Run) -> list[str]:
    """As :func:`worse_rows`, for every metric and point whose verdict is *inconclusive* (not proven either way:
    neither "same" nor "differs" at the run's margin, after Holm) — what ``compare --fail-on-inconclusive`` names."""
    return _rows_judged(run, INCONCLUSIVE)


def _rows_judged(run: Run, word: str) -> list[str]:
    out = []
    for r in run.summary_as(CompareSummary).comparisons:
        c = r.get("comparison") or {}
        if verdict_word(c) == word:
            where = f"ncmoe {r['ncmoe']}" + ("" if r.get("ngl", -1) == -1 else f" ngl {r['ngl']}")
            if "ratio" not in c:
                out.append(f"{r['metric']} at {where} (no verdict: a side has no measurement)")
                continue
            low, high = (c["low"], c["high"]) if c.get("p_differs") is not None else (None, None)
            text = ratio_text(c["ratio"], low, high, interval="ci" if low is not None else "none", decimals=3, unit="")
            if not is_far(c["ratio"], low, high):
                text = f"B/A {text}"   # a far ratio already says who is faster: "A 10.3× faster [9.3, 11.4]"
            out.append(f"{r['metric']} at {where} ({text}{'' if low is not None else ' (assumed spread)'})")
    return out
