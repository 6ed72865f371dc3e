"""``bench --launches auto`` in the sweep runner: more server starts only where a verdict is still open.

After the plan's first K starts per point (3), each round asks the judge (:func:`llamaforge.judge.point_stop`)
which points still need a start: a point whose 95 % CI is wider than ``--precision``, or that takes part
in an inconclusive comparison the run's conclusions need, and that more starts could settle — the same point on two builds (CUDA vs
Vulkan at ncmoe 0), judged at the per-look α of :class:`~llamaforge.judge.Policy`. Those points get one
more start each, interleaved (:func:`~.sweep.measure_points` over just them); the others stop. At
``--max-launches`` an open point stops **unresolved**. Every point records where and why it stopped
(``detail.sequential``: K, status, reason), which the report's Replication table shows.

Drift sentinels run in the first K rounds only (their launch numbering belongs to the fixed schedule).
Resuming an auto run re-derives everything from the stored starts, so it continues where it stopped.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

from ..findings.labels import is_sentinel
from ..judge import INCONCLUSIVE, Policy, Starts, estimate, judge, point_stop
from ..judge.sequential import UNRESOLVED, Stop
from ..metrics import FIELDS, pick_test
from ..store import Point, Store
from ..variants.build import series_label

Item = tuple  # (build, PointSpec, engine), as in bench.sweep


def policy_of(plan: object) -> Policy | None:
    """The sequential policy of a plan with ``--launches auto`` (``None`` for a fixed K)."""
    seq = getattr(plan, "sequential", None)
    if not seq:
        return None
    return Policy(min_starts=int(getattr(plan, "launches", 3)), max_starts=int(seq.get("max_launches", 10)),
                  precision=float(seq.get("precision", 0.05)))


def _starts(p: Point, metric: str) -> Starts:
    return Starts.of(p.launch_groups(FIELDS[metric], pick_test(p, metric)))


def _point_of(items: Sequence[Item], points: Sequence[Point]) -> dict[int, Point]:
    by_key = {p.key: p for p in points if not is_sentinel(p.label)}
    out = {}
    for i, (b, spec, e) in enumerate(items):
        p = by_key.get((b.key, e, spec.ncmoe, spec.ngl, series_label(b)))
        if p is not None:
            out[i] = p
    return out


def open_comparisons(items: Sequence[Item], have: dict[int, Point], policy: Policy,
                     min_effect: float) -> tuple[dict[int, list[str]], dict[int, list[str]]]:
    """Per item: the inconclusive comparisons it takes part in (the same point and engine on two builds) that
    more starts could still settle: one whose verdict would need far more starts than ``--max-launches`` allows
    even if the truth were a standard error kinder than measured (:meth:`llamaforge.judge.needs.Needs.futile`)
    holds no point open; it is said in the point's stop as what it would need. Returns (open, beyond the budget)."""
    out: dict[int, list[str]] = {}
    futile: dict[int, list[str]] = {}
    groups: dict[tuple, list[int]] = {}
    for i, (_b, spec, e) in enumerate(items):
        if i in have and have[i].status == "ok":
            groups.setdefault((spec.ncmoe, spec.ngl, e), []).append(i)
    for idx in groups.values():
        for n, i in enumerate(idx):
            for j in idx[n + 1:]:
                for metric in FIELDS:
                    jd = judge(_starts(have[i], metric), _starts(have[j], metric), min_effect=min_effect,
                               alpha=policy.look_alpha)
                    if jd is not None and jd.verdict == INCONCLUSIVE:
                        what = f"{_who(items[i][0])}/{_who(items[j][0])} {metric}"
                        needs = jd.needs
                        if needs is not None and needs.futile(policy.max_starts):
                            futile.setdefault(i, []).append(f"{what} {needs.text()}")
                            futile.setdefault(j, []).append(f"{what} {needs.text()}")
                            continue
                        out.setdefault(i, []).append(what)
                        out.setdefault(j, []).append(what)
    return out, futile


def _who(build: object) -> str:
    return series_label(build) or str(getattr(build, "backend", "?"))


def stops(items: Sequence[Item], points: Sequence[Point], policy: Policy, min_effect: float) -> dict[int, Stop]:
    """Where every measured, ok item stands (failed points are not extended)."""
    have = _point_of(items, points)
    opened, beyond = open_comparisons(items, have, policy, min_effect)
    out = {}
    for i, p in have.items():
        if p.status != "ok":
            continue
        est = estimate(_starts(p, "tg")) or estimate(_starts(p, "pp"))
        st = point_stop(est, policy, open_comparisons=opened.get(i, []))
        if beyond.get(i) and not st.more:    # precise enough, but a comparison it is in cannot settle in the budget
            st = dataclasses.replace(st, status=UNRESOLVED, reason=f"{st.reason}; inconclusive, and more starts than "
                                     f"--max-launches {policy.max_starts} allows would not settle it: "
                                     + "; ".join(beyond[i]))
        out[i] = st
    return out


MeasureFn = Callable[[Sequence[Item], object], object]


def extend(items: Sequence[Item], plan: object, store: Store, run_id: str, measure: MeasureFn) -> dict[int, Stop]:
    """Rounds of one more start for every open item until none is open; records each point's stop."""
    policy = policy_of(plan)
    if policy is None:
        return {}
    min_effect = float((getattr(plan, "sequential", None) or {}).get("min_effect", 0.05))
    while True:
        current = stops(items, store.points(run_id), policy, min_effect)
        want = sorted(i for i, st in current.items() if st.more)
        if not want:
            break
        have = _point_of(items, store.points(run_id, with_samples=False))
        by_k: dict[int, list[int]] = {}
        for i in want:
            by_k.setdefault(len(have[i].launches) or 1, []).append(i)
        for k, idx in sorted(by_k.items()):
            round_plan = dataclasses.replace(plan, launches=k + 1, sentinel_every=0)   # type: ignore[type-var]
            measure([items[i] for i in idx], round_plan)
    _record(store, _point_of(items, store.points(run_id)), current)
    return current


def _record(store: Store, have: dict[int, Point], current: dict[int, Stop]) -> None:
    for i, st in current.items():
        p = have.get(i)
        if p is not None:
            p.detail.sequential = st.to_dict()
            store.record_point(p)
