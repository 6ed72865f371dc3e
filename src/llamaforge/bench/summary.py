"""Summaries of stored points and runs: the judge's estimate per test (centre from the server starts,
with what K allows: CI, range or one start; warm-ups excluded), and a run's counts and times."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..findings.labels import is_infeasible
from ..judge import Estimate, Starts, estimate
from ..judge.metric_starts import groups, shortfall
from ..machine import hosts_of, launch_machines
from ..metrics import Metric, measured_in, request_metrics
from ..records import SweepSummary
from ..store import Point, Store

#: a spread (between starts, or within one) above this is flagged ⚠ (the headline names it)
UNSTABLE_SPREAD = 0.10


def unstable(e: Estimate | None) -> bool:
    """More than :data:`UNSTABLE_SPREAD` between starts (≥ 2 starts) or between requests inside a start."""
    if e is None:
        return False
    between = e.spread.sd if e.spread is not None else 0.0
    return max(between, e.within or 0.0) > UNSTABLE_SPREAD


def _estimate(p: Point, field_name: str, test: str) -> Estimate | None:
    return estimate(Starts.of(p.launch_groups(field_name, test)))


def point_summary(p: Point) -> dict:
    """The judge's estimate (:class:`~llamaforge.judge.Estimate`) per test of pp and tg, and of every other
    request metric of the registry the point measured (a percentile a start cannot support: ``None`` and its
    shortfall under ``"needs"``), warm-ups excluded."""
    tests = sorted({s.test for s in p.samples if not s.warmup}) or [""]
    out: dict[str, Any] = {}
    flagged = False
    for test in tests:
        key = test or "server"
        out[key] = {}
        for m in request_metrics():
            if not m.primary and not any(getattr(s, m.field, None) is not None for s in p.samples if not s.warmup):
                continue
            e = estimate(Starts.of(groups(m, p, test or None) if not m.primary else p.launch_groups(m.field, test)))
            out[key][m.name] = e.to_dict() if e else None
            if m.primary:
                flagged = flagged or unstable(e)
            elif e is None and (why := shortfall(m, p)):
                out[key].setdefault("needs", {})[m.name] = why
    out["unstable"] = flagged
    return out


def fmt_latency(p: Point, m: Metric, *, with_n: bool = True) -> str:
    """A latency metric's estimate (``412.3 [398.0, 427.1] (3×20)``), what a percentile would need, or ``–``."""
    e = estimate(Starts.of(groups(m, p)))
    if e is None:
        return f"needs ≥{m.min_requests} req/start" if shortfall(m, p) else "–"
    return e.fmt(1) if with_n and m.quantile is None else f"{e.centre:,.1f}"


def latency_metrics(points: Sequence[Point]) -> list[Metric]:
    """The latency metrics (the registry's request metrics beyond pp and tg) any of ``points`` measured."""
    return [m for m in measured_in(points) if not m.primary]


def fmt_metric(p: Point, metric: str, *, with_n: bool = True) -> str:
    """The estimate per test (``Estimate.fmt``; ``⚠`` above :data:`UNSTABLE_SPREAD`), with K×R unless ``with_n``
    is off."""
    tests = sorted({s.test for s in p.samples if not s.warmup and getattr(s, metric) is not None})
    parts = []
    for t in tests or [""]:
        e = _estimate(p, metric, t)
        if e is None:
            continue
        txt = e.fmt(1) if with_n else f"{e.centre:,.1f}"
        parts.append((f"{t}: " if t else "") + txt + (" ⚠" if unstable(e) else ""))
    return "; ".join(parts) or "–"


def shape(p: Point) -> str:
    """``K×R`` (launches × requests per launch) of a point's measured samples."""
    metric = "tg_tps" if any(s.tg_tps is not None for s in p.samples) else "pp_tps"
    test = next((s.test for s in reversed(p.samples) if not s.warmup), "")
    st = Starts.of(p.launch_groups(metric, test))
    return st.shape if st else "–"


def machines_summary(points: list[Point]) -> dict:
    """Machine id → ``{"host", "launches"}`` over every launch of ``points`` (``unknown``: stored before
    machines were recorded), and the points whose launches come from more than one machine."""
    launches = [r for p in points for r in p.launches]
    counts, hosts = launch_machines(launches), hosts_of(launches)
    mixed = [{"build_key": p.build_key, "engine": p.engine, "ncmoe": p.ncmoe, "ngl": p.ngl, "label": p.label,
              "machines": dict(launch_machines(p.launches))} for p in points if len(launch_machines(p.launches)) > 1]
    return {"launches": {m: {"host": hosts.get(m), "launches": n} for m, n in counts.most_common()},
            "mixed_points": mixed}


def run_summary(store: Store, run_id: str, wall_s: float | None = None) -> SweepSummary:
    pts = store.points(run_id)
    ok = [p for p in pts if p.status == "ok"]
    t_load = sum(p.t_load_s or 0 for p in pts)
    t_warm = sum(p.t_warmup_s or 0 for p in pts)
    t_meas = sum(p.t_measure_s or 0 for p in pts)
    infeasible = sum(1 for p in pts if is_infeasible(p.status, p.failure_class))   # counted apart (failures dict)
    return SweepSummary(points=len(pts), ok=len(ok), failed=len(pts) - len(ok) - infeasible,
                        failures={p.failure_class: sum(1 for q in pts if q.failure_class == p.failure_class)
                                  for p in pts if p.status != "ok"},
                        unstable_points=sum(1 for p in ok if point_summary(p)["unstable"]),
                        time={"wall_s": wall_s, "load_s": t_load, "warmup_s": t_warm, "measure_s": t_meas},
                        machines=machines_summary(pts))
