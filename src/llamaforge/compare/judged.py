"""What the judge says about a compare run: per point (ncmoe, ngl) and metric, both sides' estimates and
the verdict on B relative to A — a pure function of stored points (each side's server starts are its
replicates; Holm's method over every point and metric of the run). The measuring session
(:mod:`.session`) calls it between rounds and to store the run's summary; ``fleet compare`` calls
:func:`compare_sides` on two hosts' points; the terminal (:mod:`.show`) and the report read what it stored.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..findings.comparison import verdict_word
from ..judge import INCONCLUSIVE, Policy, Starts, estimate, judge
from ..judge.adjusted import controlled
from ..judge.wording import is_far, ratio_text
from ..metrics import FIELDS
from ..records import CompareSummary
from ..store import Point, Run, Store


def side_of(label: str) -> str:
    return label.split(".", 1)[0]



def _groups(points: Sequence[Point], ncmoe: int, ngl: int, field_name: str) -> list[list[float]]:
    """One side's measured values per server start (one stored point per round, each possibly with launches)."""
    out: list[list[float]] = []
    for p in sorted(points, key=lambda q: q.label):
        if p.status == "ok" and p.ncmoe == ncmoe and p.ngl == ngl:
            out += [g for g in p.launch_groups(field_name) if g]
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
    cells = []
    for ncmoe, ngl in keys:
        for metric, fname in FIELDS.items():
            ga, gb = _groups(pts_a, ncmoe, ngl, fname), _groups(pts_b, ncmoe, ngl, fname)
            kw = {"alpha": alpha} if alpha is not None else {}
            cells.append((ncmoe, ngl, metric, ga, gb, judge(ga, gb, min_effect=min_effect, **kw)))
    judged = controlled([c[5] for c in cells])   # each interval the one its verdict used (Holm's level)
    return [{"ncmoe": ncmoe, "ngl": ngl, "metric": metric, "A": _side_dict(ga), "B": _side_dict(gb),
             "comparison": j.to_dict() if j else None}
            for (ncmoe, ngl, metric, ga, gb, _j), j in zip(cells, judged, strict=True)]


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
