"""``bench --ncmoe auto`` / ``--ngl auto``: the threshold's fits, then the adaptive sweep (:mod:`.adaptive`).

1. :func:`fit_threshold` finds every build's native-context threshold by bisection over
   llama-fit-params fits (:mod:`.threshold`: about a second a fit, no weights loaded, at most
   ``2 + ceil(log2(n - 1))`` fits for n points instead of n) and stores those fits as a ``fitmap`` run.
   The measured points need no fit of their own: llama-server fits itself and reports its context.
2. :func:`run_auto` starts an ordinary ``sweep`` run and lets :func:`adaptive_sweep` choose its
   points along the :class:`Axis` (``-ncmoe``, or ``-ngl`` for a dense model); each chosen point is
   measured by ``sweep.measure_points`` (the host and run locks, the busy-GPU check, ``--launches``
   server starts, every launch stored as usual). A suspect (a point the judge finds faster than its
   trend, :mod:`.adaptive`) gets one more launch.
   One drift sentinel per build ends the run (the plan's ``sentinel_every`` is not used: an adaptive
   run's length is not known in advance), at the build's cheapest measured point (least wall time
   per server start): a sentinel only watches the machine, so it should cost as little as possible.
3. The run's plan records, as it goes, ``adaptive``: the axis, the options, the fit-map run, the
   fitted contexts, every chosen point with the reason, confirmations, the interpolated points with
   their values (never stored as points) and the conclusions, all in the option's own values;
   ``points`` lists the measured points. ``--resume`` replays the loop: stored launches are not
   measured again, so it continues where it stopped.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from rich.table import Table

from ..console import console, esc
from ..errors import BenchError
from ..findings.labels import anomaly_text, threshold_heading
from ..judge import Starts, estimate, point_stop
from ..pathsafe import run_log_dir
from ..records import AdaptiveSection, PlanNotes
from ..store import Store
from ..variants.build import series_key, series_label
from .adaptive import AdaptiveOptions, AdaptiveResult, PointSummary, adaptive_sweep
from .auto_launches import policy_of
from .fitmap import fit_point, fitting, open_fitmap, spec_text
from .plan import BuildLike, Plan, PointSpec
from .sweep import Item, MeasureItems, engines_of, run_sweep
from .threshold import bisect_threshold

#: the sentinel interval that puts one sentinel at the end of a call only
_END_ONLY = 10**9


def sentinel_x(series: str, measured: Any, cost: dict[tuple[str, int], float | None]) -> int | None:
    """Where a build's end sentinel goes: its measured point with the least wall time per server start
    (the least offload where times are unknown or tie). None when nothing was measured."""
    xs = sorted(measured)
    if not xs:
        return None
    known = [(c, x) for x in xs if (c := cost.get((series, x))) is not None]
    return min(known)[1] if known else xs[0]


@dataclass(frozen=True)
class Axis:
    """The option an adaptive run sweeps; x = 0, 1, … counts "more offload" along it.

    ``ncmoe``: x is ``-ncmoe`` (the experts of the first x layers on the host), 0..n_layers.
    ``ngl``: x = ``n_layers + 1 - ngl`` (0: every layer and the output on the device; llama.cpp keeps
    layers ``n_layers - ngl`` and up there, so x = 1 moves the output, x = k + 1 the first k layers),
    0..n_layers + 1. Records and reports show the option's own value (:meth:`value`)."""

    name: str
    n_layers: int

    @property
    def domain(self) -> list[int]:
        return list(range(self.n_layers + (1 if self.name == "ncmoe" else 2)))

    def value(self, x: int) -> int:
        """x as the option's value, and back (the map is its own inverse)."""
        return x if self.name == "ncmoe" else self.n_layers + 1 - x

    def spec(self, x: int) -> PointSpec:
        return PointSpec(x) if self.name == "ncmoe" else PointSpec(0, self.value(x))

    def x_of(self, ncmoe: int, ngl: int) -> int:
        """The x of a stored point (the inverse of :meth:`spec`); an ``-ngl`` of -1 ("all") or beyond
        ``n_layers + 1`` puts everything on the device: x = 0."""
        if self.name == "ncmoe":
            return ncmoe
        return self.value(ngl if 0 <= ngl <= self.n_layers + 1 else self.n_layers + 1)

    def boundaries(self, full_attention_layers: Sequence[int]) -> list[int]:
        """The x at which a full-attention layer L moves to the host: its experts at ncmoe L + 1, the whole
        layer at x = L + 2 (ngl = n_layers - 1 - L)."""
        return [layer + (1 if self.name == "ncmoe" else 2) for layer in full_attention_layers]


def auto_axis(plan: Plan, name: str = "ncmoe", model: str = "the model") -> Axis:
    """The axis of ``--ncmoe auto`` (a MoE model) or ``--ngl auto`` (a dense model)."""
    n_layers, n_experts = plan.n_layers, plan.facts.n_experts
    if name == "ncmoe" and n_experts == 0:
        raise BenchError(f"{model} is not a MoE model, so --ncmoe auto has nothing to offload",
                         "sweep the layers on the GPU instead: --ngl auto")
    if name == "ngl" and n_experts:
        raise BenchError(f"{model} is a MoE model: --ngl auto moves whole layers, attention included, off the GPU",
                         "offload experts instead: --ncmoe auto")
    if not n_layers:
        raise BenchError(f"the layer count of {model} is unknown, so --{name} auto cannot choose points",
                         "give the points, e.g. " + ("--ncmoe 0:40:2" if name == "ncmoe" else "--ngl 0,8,16,-1"))
    return Axis(name, int(n_layers))


def fit_threshold(plan: Plan, builds: list[BuildLike], store: Store, axis: Axis, *, command: str | None = None,
                  progress: bool = True) -> tuple[str, dict[str, dict[int, int | None]]]:
    """Every build's native-context threshold by bisection over fits (:mod:`.threshold`), stored as a
    ``fitmap`` run that holds only the points fitted: (its run id, fitted context per build key and x)."""
    native = plan.facts.n_ctx_train
    fit_plan = dataclasses.replace(plan, points=[axis.spec(x) for x in axis.domain])
    run_id = open_fitmap(fit_plan, builds, store, command=command)
    log_dir = run_log_dir(store.path, run_id)
    ctx: dict[str, dict[int, int | None]] = {}
    with fitting(store, run_id, progress) as show:
        for b in builds:
            def fit(x: int, b: BuildLike = b) -> int | None:
                spec = axis.spec(x)
                show(f"fitting {series_label(b, b.backend)} {spec_text(spec)} (bisection for the native-context threshold)")
                p = fit_point(b, fit_plan, spec, run_id, log_dir, label=series_label(b))
                store.record_point(p)
                return p.n_ctx if p.status == "ok" else None

            ctx[series_key(b)] = bisect_threshold(axis.domain, fit, native).probes
    js = store.get_run(run_id).plan
    js.points = [axis.spec(x) for x in sorted({x for v in ctx.values() for x in v})]
    js.notes = (js.notes or PlanNotes()).replace(search="bisection for the native-context threshold")
    store.update_run_plan(run_id, js)
    return run_id, ctx


def tg_summary(p: Any) -> PointSummary | None:
    """A stored point's tg as the judge sees it, from its requests grouped by server start
    (:meth:`PointSummary.of`; ``None``: failed or no tg)."""
    if p is None or p.status != "ok":
        return None
    return PointSummary.of(p.launch_groups("tg_tps"), p.n_ctx)


@dataclasses.dataclass
class AutoDriver:
    """The sweep's ``driver`` for an adaptive run (see the module doc)."""

    plan: Plan
    builds: list[BuildLike]
    store: Store
    ctx: dict[str, dict[int, int | None]]
    options: AdaptiveOptions
    fitmap_run: str | None
    axis: Axis | None = None          # default: ncmoe over the plan's layers
    clock: Callable[[], float] = time.monotonic
    started: float = dataclasses.field(default_factory=time.monotonic)
    result: AdaptiveResult | None = None

    def __post_init__(self) -> None:
        if self.axis is None:
            self.axis = Axis("ncmoe", int(self.plan.n_layers or 0))

    @property
    def ax(self) -> Axis:
        assert self.axis is not None
        return self.axis

    def __call__(self, measure_items: MeasureItems, run_id: str) -> None:
        launches: dict[tuple[str, int], int] = {}
        cost: dict[tuple[str, int], float | None] = {}
        by_key = {series_key(b): b for b in self.builds}
        engines = engines_of(self.plan)

        def measure(series: str, x: int) -> PointSummary | None:
            k = launches[(series, x)] = launches.get((series, x), 0) + (1 if (series, x) in launches
                                                                         else self.plan.launches)
            items: list[Item] = [(by_key[series], self.ax.spec(x), e) for e in engines]
            pts = measure_items(items, dataclasses.replace(self.plan, launches=k, sentinel_every=0))
            main = next((p for p in pts if p.engine == engines[0] and p.label == series_label(by_key[series])), None)
            main = self._sequential(main, items, measure_items, launches, (series, x), engines[0])
            cost[(series, x)] = main.seconds_per_launch() if main is not None else None
            summary = tg_summary(main)
            self._record(run_id, launches)
            return summary

        facts = self.plan.facts
        self.result = adaptive_sweep(
            [series_key(b) for b in self.builds], self.ax.domain, measure, ctx=self.ctx, native=facts.n_ctx_train,
            boundaries=self.ax.boundaries(facts.full_attention_layers or ()), options=self.options,
            clock=lambda: self.clock() - self.started, show=self.ax.value)
        refs = [(b, self.ax.spec(x), engines[0]) for b in self.builds
                for x in [sentinel_x(series_key(b), self.result.measured.get(series_key(b)) or {}, cost)] if x is not None]
        if refs:
            measure_items(refs, dataclasses.replace(self.plan, sentinel_every=_END_ONLY))
        self._record(run_id, launches)

    def _sequential(self, main: Any, items: list[Item], measure_items: MeasureItems,
                    launches: dict[tuple[str, int], int], key: tuple[str, int], engine: str) -> Any:
        """``--launches auto``: more starts of a newly measured point while the judge's rule wants one (its
        interval wider than --precision, up to --max-launches), as :mod:`.sequential` does for a plain
        sweep; the point records where it stopped and why."""
        pol = policy_of(self.plan)
        while pol is not None and main is not None and main.status == "ok":
            stop = point_stop(estimate(Starts.of(main.launch_groups("tg_tps"))), pol)
            main.detail.sequential = stop.to_dict()
            self.store.record_point(main)
            if not stop.more:
                break
            k = launches[key] = launches[key] + 1
            label = main.label          # the variant's series label ("" without variants)
            pts = measure_items(items, dataclasses.replace(self.plan, launches=k, sentinel_every=0))
            main = next((p for p in pts if p.engine == engine and p.label == label), None)
        return main

    def record(self) -> dict:
        """What the run's plan keeps under ``adaptive``."""
        r, ax = self.result, self.ax
        out: dict[str, Any] = {"axis": ax.name, "options": self.options.to_dict(), "fitmap_run": self.fitmap_run,
                               "ctx": {k: {str(ax.value(x)): c for x, c in v.items()} for k, v in self.ctx.items()},
                               "sentinels": "one per build at the end, at its cheapest measured point"}
        if r is not None:
            out.update(r.to_dict(ax.name, ax.value))
            out["interpolated"] = {s: {str(ax.value(x)): round(v, 3) for x, v in vals.items()}
                                   for s, vals in r.interpolated.items()}
        return out

    def _record(self, run_id: str, launches: dict[tuple[str, int], int]) -> None:
        plan = self.store.get_run(run_id).plan
        plan.points = [self.ax.spec(x) for x in sorted({x for _s, x in launches})]
        adaptive = self.record()
        if self.result is None:
            adaptive["chosen_so_far"] = [{"series": s, self.ax.name: self.ax.value(x), "launches": k}
                                         for (s, x), k in launches.items()]
        plan.adaptive = AdaptiveSection.from_json(adaptive)
        self.store.update_run_plan(run_id, plan)


def run_auto(plan: Plan, builds: list[BuildLike], store: Store, paths: Any, *, options: AdaptiveOptions,
             axis: str = "ncmoe", command: str | None = None, name: str | None = None, progress: bool = True,
             allow_busy: bool = False) -> tuple[str, AutoDriver]:
    """The threshold's fits, then the adaptive sweep as a ``sweep`` run; returns its id and the driver."""
    started = time.monotonic()
    ax = auto_axis(plan, axis)
    fitmap_run, ctx = fit_threshold(plan, builds, store, ax, command=command, progress=progress)
    plan.points = [ax.spec(x) for x in ax.domain]
    plan.sentinel_every = 0          # one sentinel per build at the end instead (see the module doc)
    driver = AutoDriver(plan, builds, store, ctx, options, fitmap_run, ax, started=started)
    run_id = run_sweep(plan, builds, store, command=command, name=name, progress=progress,
                       allow_busy=allow_busy, run_extra={"adaptive": AdaptiveSection.from_json(driver.record())},
                       driver=driver)
    return run_id, driver


def resume_auto(run: Any, plan: Plan, builds: list[BuildLike], store: Store, paths: Any, *,
                allow_busy: bool = False) -> tuple[str, AutoDriver]:
    """Continue an adaptive run: the loop again, on the recorded context curve; stored launches are kept."""
    rec = run.plan.adaptive or AdaptiveSection()
    ax = Axis(rec.axis or "ncmoe", int(plan.n_layers or 0))
    ctx = {k: {ax.value(int(x)): c for x, c in v.items()} for k, v in (rec.ctx or {}).items()}
    opts = AdaptiveOptions(**{k: v for k, v in (rec.options or {}).items()
                              if k in {f.name for f in dataclasses.fields(AdaptiveOptions)}})
    driver = AutoDriver(plan, builds, store, ctx, opts, rec.fitmap_run, ax)
    run_id = run_sweep(plan, builds, store, resume_run=run.id, allow_busy=allow_busy, driver=driver)
    return run_id, driver


def adaptive_table(adaptive: dict, names: dict[str, str] | None = None) -> Table:
    """The conclusions of an adaptive run and which points were measured or interpolated."""
    names = names or {}
    c = adaptive.get("conclusions") or {}
    axis = adaptive.get("axis") or "ncmoe"
    tab = Table(title=esc(f"adaptive sweep over {axis}: {adaptive.get('n_measured', 0)} points measured, "
                          f"stopped: {adaptive.get('stopped', '?')}"))
    for col in ("build", threshold_heading(axis), "sweet spot (fastest tg at native)", "anomalies", "measured",
                "interpolated"):
        tab.add_column(col)
    measured: dict[str, list[int]] = {}
    for ch in adaptive.get("chosen") or []:
        measured.setdefault(ch["series"], []).append(ch[axis])
    for s in sorted(measured):
        tab.add_row(esc(names.get(s, s)[:28]), esc((c.get("threshold") or {}).get(s)),
                    esc((c.get("sweet_spot") or {}).get(s)), esc(anomaly_text(c, s)),
                    esc(_span(sorted(set(measured[s])))), esc(_span(sorted(int(x) for x in
                                                                    (adaptive.get("interpolated") or {}).get(s) or {}))))
    return tab


def print_adaptive(store: Store, run_id: str) -> None:
    rec = store.get_run(run_id).plan.adaptive
    adaptive = rec.to_json() if rec is not None else {}
    console.print(adaptive_table(adaptive))
    regions = (adaptive.get("conclusions") or {}).get("regions") or []
    if regions:
        axis = adaptive.get("axis") or "ncmoe"
        console.print("winner per region: " + esc(", ".join(f"{axis} {lo}–{hi}: {w}" for lo, hi, w in regions)))


def _span(xs: list[int]) -> str:
    """``0-3, 8, 12-14`` for a sorted list."""
    runs: list[list[int]] = []
    for x in xs:
        if runs and runs[-1][-1] == x - 1:
            runs[-1].append(x)
        else:
            runs.append([x])
    return ", ".join(f"{r[0]}-{r[-1]}" if len(r) > 1 else str(r[0]) for r in runs) or "–"
