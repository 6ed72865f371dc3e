"""``bench --ncmoe auto``: the fit map, then the adaptive sweep (:mod:`.adaptive`) through the sweep.

1. :func:`fit_curve` stores a ``fitmap`` run over every ``-ncmoe`` of the model (llama-fit-params,
   about a second a point, no weights loaded): the context curve of every build, hence the
   native-context threshold, exactly.
2. :func:`run_auto` starts an ordinary ``sweep`` run and lets :func:`adaptive_sweep` choose its
   points; each chosen point is measured by ``sweep.measure_points`` (the host and run locks, the
   busy-GPU check, ``--launches`` server starts, every launch stored as usual). A point that breaks the
   trend gets one more launch. One drift sentinel per build ends the run (the plan's
   ``sentinel_every`` is not used: an adaptive run's length is not known in advance).
3. The run's plan records, as it goes, ``adaptive``: the options, the fit-map run, the context curve,
   every chosen point with the reason, confirmations, the interpolated points with their values
   (never stored as points) and the conclusions; ``points`` lists the measured points. ``--resume``
   replays the loop: stored launches are not measured again, so it continues where it stopped.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from typing import Any

from rich.table import Table

from ..console import console, esc
from ..errors import BenchError
from ..stats import cluster_summary
from ..store import Store
from .adaptive import AdaptiveOptions, AdaptiveResult, PointSummary, adaptive_sweep, anomaly_text
from .fitmap import run_fitmap
from .plan import BuildLike, Plan, PointSpec
from .sweep import Item, MeasureItems, engines_of, run_sweep

#: the sentinel interval that puts one sentinel at the end of a call only
_END_ONLY = 10**9


def auto_domain(plan: Plan, model: str = "the model") -> list[int]:
    """Every ``-ncmoe`` of a MoE model: 0..n_layers."""
    n_layers, n_experts = plan.n_layers, plan.model_facts.get("n_experts")
    if n_experts == 0:
        raise BenchError(f"{model} is not a MoE model, so --ncmoe auto has nothing to offload",
                         "sweep the layers on the GPU with --ngl instead, e.g. --ngl 0:N")
    if not n_layers:
        raise BenchError(f"the layer count of {model} is unknown, so --ncmoe auto cannot choose points",
                         "give the points, e.g. --ncmoe 0:40:2")
    return list(range(int(n_layers) + 1))


def fit_curve(plan: Plan, builds: list[BuildLike], store: Store, *, command: str | None = None,
              progress: bool = True) -> tuple[str, dict[str, dict[int, int | None]]]:
    """The fit map of every point of the plan: (its run id, fitted context per build key and ncmoe)."""
    fit_plan = dataclasses.replace(plan, points=[PointSpec(x) for x in auto_domain(plan)])
    run_id = run_fitmap(fit_plan, builds, store, command=command, progress=progress)
    ctx: dict[str, dict[int, int | None]] = {b.key: {} for b in builds}
    for p in store.points(run_id, with_samples=False):
        ctx.setdefault(p.build_key, {})[p.ncmoe] = p.n_ctx if p.status == "ok" else None
    return run_id, ctx


def tg_summary(p: Any) -> PointSummary | None:
    """Median tg of a stored point with its 95 % cluster-bootstrap CI (``None``: failed or no tg)."""
    if p is None or p.status != "ok":
        return None
    cs = cluster_summary(p.launch_groups("tg_tps"))
    return PointSummary(cs.median, cs.ci_low, cs.ci_high, cs.n_launches, cs.launch_medians) if cs else None


@dataclasses.dataclass
class AutoDriver:
    """The sweep's ``driver`` for an adaptive run (see the module doc)."""

    plan: Plan
    builds: list[BuildLike]
    store: Store
    ctx: dict[str, dict[int, int | None]]
    options: AdaptiveOptions
    fitmap_run: str | None
    clock: Callable[[], float] = time.monotonic
    started: float = dataclasses.field(default_factory=time.monotonic)
    result: AdaptiveResult | None = None

    def __call__(self, measure_items: MeasureItems, run_id: str) -> None:
        launches: dict[tuple[str, int], int] = {}
        by_key = {b.key: b for b in self.builds}
        engines = engines_of(self.plan)

        def measure(series: str, x: int) -> PointSummary | None:
            k = launches[(series, x)] = launches.get((series, x), 0) + (1 if (series, x) in launches
                                                                         else self.plan.launches)
            items: list[Item] = [(by_key[series], PointSpec(x), e) for e in engines]
            pts = measure_items(items, dataclasses.replace(self.plan, launches=k, sentinel_every=0))
            summary = tg_summary(next((p for p in pts if p.engine == engines[0] and not p.label), None))
            self._record(run_id, launches)
            return summary

        facts = self.plan.model_facts
        self.result = adaptive_sweep(
            [b.key for b in self.builds], auto_domain(self.plan), measure, ctx=self.ctx,
            native=facts.get("n_ctx_train"), full_attention_layers=facts.get("full_attention_layers") or (),
            options=self.options, clock=lambda: self.clock() - self.started)
        refs = [(b, PointSpec(x), engines[0]) for b in self.builds
                for x in sorted(self.result.measured.get(b.key) or {})[:1]]
        if refs:
            measure_items(refs, dataclasses.replace(self.plan, sentinel_every=_END_ONLY))
        self._record(run_id, launches)

    def record(self) -> dict:
        """What the run's plan keeps under ``adaptive``."""
        r = self.result
        out: dict[str, Any] = {"options": self.options.to_dict(), "fitmap_run": self.fitmap_run,
                               "ctx": {k: {str(x): c for x, c in v.items()} for k, v in self.ctx.items()},
                               "sentinels": "one per build at the end"}
        if r is not None:
            out.update(r.to_dict())
            out["interpolated"] = {s: {str(x): round(v, 3) for x, v in vals.items()}
                                   for s, vals in r.interpolated.items()}
        return out

    def _record(self, run_id: str, launches: dict[tuple[str, int], int]) -> None:
        plan = dict(self.store.get_run(run_id).plan)
        plan["points"] = [PointSpec(x).to_dict() for x in sorted({x for _s, x in launches})]
        adaptive = self.record()
        if self.result is None:
            adaptive["chosen_so_far"] = [{"series": s, "ncmoe": x, "launches": k} for (s, x), k in launches.items()]
        plan["adaptive"] = adaptive
        self.store.update_run_plan(run_id, plan)


def run_auto(plan: Plan, builds: list[BuildLike], store: Store, paths: Any, *, options: AdaptiveOptions,
             command: str | None = None, name: str | None = None, progress: bool = True,
             allow_busy: bool = False) -> tuple[str, AutoDriver]:
    """Fit map, then the adaptive sweep as a ``sweep`` run; returns its id and the driver (its result)."""
    started = time.monotonic()
    fitmap_run, ctx = fit_curve(plan, builds, store, command=command, progress=progress)
    plan.points = [PointSpec(x) for x in auto_domain(plan)]
    plan.sentinel_every = 0          # one sentinel per build at the end instead (see the module doc)
    driver = AutoDriver(plan, builds, store, ctx, options, fitmap_run, started=started)
    run_id = run_sweep(plan, builds, store, command=command, name=name, progress=progress,
                       allow_busy=allow_busy, run_extra={"adaptive": driver.record()}, driver=driver)
    return run_id, driver


def resume_auto(run: Any, plan: Plan, builds: list[BuildLike], store: Store, paths: Any, *,
                allow_busy: bool = False) -> tuple[str, AutoDriver]:
    """Continue an adaptive run: the loop again, on the recorded context curve; stored launches are kept."""
    rec = run.plan.get("adaptive") or {}
    ctx = {k: {int(x): c for x, c in v.items()} for k, v in (rec.get("ctx") or {}).items()}
    opts = AdaptiveOptions(**{k: v for k, v in (rec.get("options") or {}).items()
                              if k in {f.name for f in dataclasses.fields(AdaptiveOptions)}})
    driver = AutoDriver(plan, builds, store, ctx, opts, rec.get("fitmap_run"))
    run_id = run_sweep(plan, builds, store, resume_run=run.id, allow_busy=allow_busy, driver=driver)
    return run_id, driver


def adaptive_table(adaptive: dict, names: dict[str, str] | None = None) -> Table:
    """The conclusions of an adaptive run and which points were measured or interpolated."""
    names = names or {}
    c = adaptive.get("conclusions") or {}
    tab = Table(title=esc(f"adaptive sweep: {adaptive.get('n_measured', 0)} points measured, "
                          f"stopped: {adaptive.get('stopped', '?')}"))
    for col in ("build", "native context from", "sweet spot (fastest tg at native)", "anomalies", "measured",
                "interpolated"):
        tab.add_column(col)
    measured: dict[str, list[int]] = {}
    for ch in adaptive.get("chosen") or []:
        measured.setdefault(ch["series"], []).append(ch["ncmoe"])
    for s in sorted(measured):
        tab.add_row(esc(names.get(s, s)[:28]), esc((c.get("threshold") or {}).get(s)),
                    esc((c.get("sweet_spot") or {}).get(s)), esc(anomaly_text(c, s)),
                    esc(_span(sorted(set(measured[s])))), esc(_span(sorted(int(x) for x in
                                                                    (adaptive.get("interpolated") or {}).get(s) or {}))))
    return tab


def print_adaptive(store: Store, run_id: str) -> None:
    adaptive = store.get_run(run_id).plan.get("adaptive") or {}
    console.print(adaptive_table(adaptive))
    regions = (adaptive.get("conclusions") or {}).get("regions") or []
    if regions:
        console.print("winner per region: " + esc(", ".join(f"ncmoe {lo}–{hi}: {w}" for lo, hi, w in regions)))


def _span(xs: list[int]) -> str:
    """``0-3, 8, 12-14`` for a sorted list."""
    runs: list[list[int]] = []
    for x in xs:
        if runs and runs[-1][-1] == x - 1:
            runs[-1].append(x)
        else:
            runs.append([x])
    return ", ".join(f"{r[0]}-{r[-1]}" if len(r) > 1 else str(r[0]) for r in runs) or "–"
