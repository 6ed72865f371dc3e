"""Summaries of stored points and runs: medians, IQR and CIs per test (warm-ups excluded), the
nested statistics over launches, and a run's counts and times."""

from __future__ import annotations

from typing import Any

from ..machine import hosts_of, launch_machines
from ..stats import cluster_summary, summarize
from ..store import Point, Store


def point_summary(p: Point) -> dict:
    """Median/IQR/CI (``stats.summarize``) of pp and tg per test, warm-ups excluded, plus the nested
    statistics over launches (``pp_cluster``/``tg_cluster``: ``stats.cluster_summary``)."""
    tests = sorted({s.test for s in p.samples if not s.warmup}) or [""]
    out: dict[str, Any] = {}
    for test in tests:
        pp = summarize(p.measured("pp_tps", test))
        tg = summarize(p.measured("tg_tps", test))
        key = test or "server"
        out[key] = {"pp": pp.to_dict() if pp else None, "tg": tg.to_dict() if tg else None}
        for m, f in (("pp", "pp_tps"), ("tg", "tg_tps")):
            cs = cluster_summary(p.launch_groups(f, test))
            out[key][f"{m}_cluster"] = cs.to_dict() if cs else None
    out["unstable"] = any((v or {}).get(m) and v[m]["unstable"] for v in out.values() if isinstance(v, dict)
                          for m in ("pp", "tg"))
    return out


def fmt_metric(p: Point, metric: str, *, with_n: bool = True) -> str:
    """``median [95 % cluster CI]`` per test (``⚠`` when CV > 10 %), with K×R unless ``with_n`` is off."""
    tests = sorted({s.test for s in p.samples if not s.warmup and getattr(s, metric) is not None})
    parts = []
    for t in tests or [""]:
        s = summarize(p.measured(metric, t))
        cs = cluster_summary(p.launch_groups(metric, t))
        if s and cs:
            txt = f"{cs.median:,.1f}" + (f" [{cs.ci_low:,.1f}, {cs.ci_high:,.1f}]" if cs.n_requests > 1 else "")
            txt += (f" ({cs.shape})" if with_n else "") + (" ⚠" if s.unstable else "")
            parts.append((f"{t}: " if t else "") + txt)
    return "; ".join(parts) or "–"


def shape(p: Point) -> str:
    """``K×R`` (launches × requests per launch) of a point's measured samples."""
    metric = "tg_tps" if any(s.tg_tps is not None for s in p.samples) else "pp_tps"
    test = next((s.test for s in reversed(p.samples) if not s.warmup), "")
    cs = cluster_summary(p.launch_groups(metric, test), n_resamples=1)
    return cs.shape if cs else "–"


def machines_summary(points: list[Point]) -> dict:
    """Machine id → ``{"host", "launches"}`` over every launch of ``points`` (``unknown``: stored before
    machines were recorded), and the points whose launches come from more than one machine."""
    launches = [r for p in points for r in p.launches]
    counts, hosts = launch_machines(launches), hosts_of(launches)
    mixed = [{"build_key": p.build_key, "engine": p.engine, "ncmoe": p.ncmoe, "ngl": p.ngl, "label": p.label,
              "machines": dict(launch_machines(p.launches))} for p in points if len(launch_machines(p.launches)) > 1]
    return {"launches": {m: {"host": hosts.get(m), "launches": n} for m, n in counts.most_common()},
            "mixed_points": mixed}


def run_summary(store: Store, run_id: str, wall_s: float | None = None) -> dict:
    pts = store.points(run_id)
    ok = [p for p in pts if p.status == "ok"]
    t_load = sum(p.t_load_s or 0 for p in pts)
    t_warm = sum(p.t_warmup_s or 0 for p in pts)
    t_meas = sum(p.t_measure_s or 0 for p in pts)
    return {"points": len(pts), "ok": len(ok), "failed": len(pts) - len(ok),
            "failures": {p.failure_class: sum(1 for q in pts if q.failure_class == p.failure_class)
                         for p in pts if p.status != "ok"},
            "unstable_points": sum(1 for p in ok if point_summary(p)["unstable"]),
            "time": {"wall_s": wall_s, "load_s": t_load, "warmup_s": t_warm, "measure_s": t_meas},
            "machines": machines_summary(pts)}
