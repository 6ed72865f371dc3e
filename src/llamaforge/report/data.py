"""Load one stored run into the shape every renderer uses (no measuring, no formatting).

A run's points are grouped into **series**: one line on a plot, one points table. A series is one
(build, engine, label): for a sweep that is one backend; for a compare run the A/B labels split a
build's points; for a bisect the label is the commit. Series are ordered by the fixed backend order
(cuda, vulkan, cpu, then others), which is also the order of every ratio (earlier over later, e.g.
CUDA/Vulkan).

The plan, the environment, the model facts and each point's memory breakdown are read as typed
records (:mod:`llamaforge.records`): a missing field is ``None`` and the section that needs it says
why it is absent.
"""

from __future__ import annotations

import contextlib
import math
import shlex
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .. import backends
from .. import metrics as registry
from ..errors import LlamaforgeError, StoreError
from ..findings.labels import display_name, is_infeasible, is_sentinel
from ..findings.reproduction import verdict_for
from ..judge import Estimate, Spread, Starts, conservative, estimate, pooled
from ..judge.metric_starts import groups, shortfall
from ..metrics import LABELS, pick_test
from ..records import Environment, FleetSummary, MemoryBreakdown, MemRow, ModelFacts, RunPlan
from ..store import Point, Probe, Run, Store


class ReportError(LlamaforgeError):
    """A run cannot be reported (no points, nothing measured, bad output folder)."""


def backend_rank(backend: str | None) -> int:
    """Where a backend's series go (GPU backends first, the CPU last): the backends' own order."""
    return backends.rank(backend)


@dataclass
class MemSplit:
    """Memory of one side (GPU devices summed, or the host) split as llama.cpp reports it, MiB."""

    model: float = 0.0
    context: float = 0.0
    compute: float = 0.0

    @property
    def total(self) -> float:
        return self.model + self.context + self.compute


def failed_count(rows: list[Row]) -> str:
    """``2 failed`` — and ``, 1 infeasible`` where a combination could not run (not a failure)."""
    bad = [r for r in rows if not r.ok]
    k = sum(1 for r in bad if is_infeasible("failed", r.failure_class))
    return f"{len(bad) - k} failed" + (f", {k} infeasible" if k else "")


@dataclass
class Row:
    """One point, ready to analyse and render. Analysis functions take these (tests build them by hand)."""

    ncmoe: int
    ok: bool = True
    n_ctx: int | None = None
    pp: list[float] = field(default_factory=list)
    tg: list[float] = field(default_factory=list)
    series: str = ""
    ngl: int = -1
    label: str = ""
    failure_class: str | None = None
    failure_detail: str | None = None
    vram_mib: float | None = None      # peak device memory used (else llama.cpp's own), MiB
    rss_mib: float | None = None       # peak resident host memory of llama.cpp's process tree
    gpu_mem: MemSplit | None = None
    host_mem: MemSplit | None = None
    prompt_tokens: int | None = None
    n_predict: int | None = None
    command: str | None = None
    point: Point | None = None
    pp_test: str | None = None         # llama-bench test the speeds come from (pp512, tg128, ...)
    tg_test: str | None = None
    rss_anon_mib: float | None = None  # peak anonymous resident host memory (RssAnon)
    rss_file_mib: float | None = None  # peak file-backed resident host memory (RssFile: mmapped model, libs)
    telemetry: dict | None = None      # bench.telemetry summary
    busy: dict | None = None           # what --allow-busy let through
    axis: str = "ncmoe"                # the run's sweep axis: ncmoe, or ngl (a layer sweep, e.g. a dense model)
    ngl_all: int | None = None         # where ngl = -1 (all layers) sits on an ngl axis: n_layers + 1
    pp_groups: list[list[float]] = field(default_factory=list)   # pp values per server start (default: one start)
    tg_groups: list[list[float]] = field(default_factory=list)

    def __post_init__(self) -> None:  # estimates are computed once: build a new Row to change samples
        # pp and tg from the row's own lists (tests build rows by hand; llama-bench rows picked one test each);
        # every other metric of the registry from the stored point, through its estimator
        self._starts = {m: Starts.of(g or ([v] if v else [])) for m, g, v in
                        (("pp", self.pp_groups, self.pp), ("tg", self.tg_groups, self.tg))}
        for m in registry.request_metrics():
            if m.name not in self._starts:
                self._starts[m.name] = Starts.of(groups(m, self.point)) if self.point is not None else Starts(())
        self._est = {m: estimate(s) for m, s in self._starts.items()}

    @property
    def x(self) -> int:
        """The point's position on the run's axis (ngl = -1, all layers, sits at ``ngl_all``)."""
        if self.axis != "ngl":
            return self.ncmoe
        return self.ngl if self.ngl >= 0 else (self.ngl_all if self.ngl_all is not None else 999)

    @property
    def x_label(self) -> str:
        return "all" if self.axis == "ngl" and self.ngl < 0 else str(self.x)

    @property
    def offload(self) -> int:
        """Grows as more of the model leaves the device: ncmoe, or minus the layers on the GPU."""
        return -self.x if self.axis == "ngl" else self.ncmoe

    @property
    def other(self) -> int:
        """The coordinate that is not the axis (points are only compared along the axis at equal ``other``)."""
        return self.ncmoe if self.axis == "ngl" else self.ngl

    def starts(self, metric: str) -> Starts:
        """The point's ``metric`` values (a registry name) grouped by server start: the judge's input (a
        percentile metric: one value per start)."""
        return self._starts[metric]

    def estimate(self, metric: str) -> Estimate | None:
        """Centre and interval from the starts (``None`` when nothing was measured)."""
        return self._est[metric]

    def values(self, metric: str) -> list[float]:
        """Every value of ``metric`` the judge sees, flat (per request; per start for a percentile)."""
        if metric in ("pp", "tg") and (self.pp or self.tg):
            return self.pp if metric == "pp" else self.tg
        return [v for g in self._starts[metric].groups for v in g]

    def shortfall(self, metric: str) -> str | None:
        """Why this point has no value of ``metric`` although it measured it (too few requests a start for a
        percentile), else None."""
        return shortfall(registry.get(metric), self.point) if self.point is not None else None

    def median(self, metric: str) -> float | None:
        """The point's centre (geometric mean of its start medians; the start's median with one start)."""
        e = self.estimate(metric)
        return None if e is None else e.centre


@dataclass
class Series:
    """One build (× engine × label): a line on every plot and one points table."""

    key: tuple[str, str, str]          # (build_key, engine, label)
    name: str                          # display name, unique within the report
    backend: str
    build: dict | None
    rows: list[Row]

    @property
    def ok_rows(self) -> list[Row]:
        return [r for r in self.rows if r.ok]

    @property
    def failed_rows(self) -> list[Row]:
        """Points that failed (an infeasible combination is not one: :attr:`infeasible_rows`)."""
        return [r for r in self.rows if not r.ok and not is_infeasible("failed", r.failure_class)]

    @property
    def infeasible_rows(self) -> list[Row]:
        return [r for r in self.rows if not r.ok and is_infeasible("failed", r.failure_class)]

    @property
    def rank(self) -> int:
        return backend_rank(self.backend)

    def prior(self, metric: str) -> Spread:
        """The between-start spread measured for this series' build over its points (``judge.pooled``), else
        the conservative bound (``spread.assumed``): what a verdict on a point with fewer than 3 starts assumes.
        Its basis names the series and the metric, since one report note lists the assumptions of both."""
        what = f"{self.name} {LABELS.get(metric, metric)}"
        return pooled([r.starts(metric) for r in self.ok_rows], what=what) or conservative(what)


AXIS_LABELS = {"ncmoe": "ncmoe (layers whose MoE experts run on the CPU)",
               "ngl": "ngl (layers on the device; 'all' = every layer and the output)"}


def sweep_axis(points: list[Point]) -> str:
    """``ngl`` when the points vary only in -ngl (a layer sweep, the one a dense model has), else ``ncmoe``."""
    if len({p.ncmoe for p in points}) == 1 and len({p.ngl for p in points}) > 1:
        return "ngl"
    return "ncmoe"


@dataclass
class ReportData:
    run: Run
    builds: list[dict]
    series: list[Series]
    facts: ModelFacts
    native_ctx: int | None
    full_attn_layers: list[int]
    probes: list[Probe]
    reproductions: list[dict] = field(default_factory=list)   # findings.reproduction.Verdict.to_dict(), this run as either side
    axis: str = "ncmoe"

    @property
    def axis_label(self) -> str:
        return AXIS_LABELS.get(self.axis, self.axis)
    points: list[Point] = field(default_factory=list)      # every stored point, sentinels included

    @property
    def env(self) -> Environment:
        """The run's environment (a fleet run has one per machine: :attr:`machine_envs`)."""
        return self.run.env

    @property
    def machine_envs(self) -> dict[str, Environment]:
        """A fleet run's environment of each machine (``_fleet_inputs``); empty for other runs."""
        if self.run.kind != "fleet":
            return {}
        return {m: Environment.from_json(e) for m, e in (self.run.env.machines or {}).items() if isinstance(e, dict)}

    @property
    def plan(self) -> RunPlan:
        return self.run.plan

    @property
    def model_ref(self) -> str:
        return self.plan.model_ref

    @property
    def all_rows(self) -> list[Row]:
        return [r for s in self.series for r in s.rows]


def _num(x: Any) -> float | None:
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def split_breakdown(stored: Any) -> tuple[MemSplit | None, MemSplit | None]:
    """(GPU devices summed, host) from a stored ``fit_memory_breakdown`` of any shape
    (:meth:`records.MemoryBreakdown.of`): devices are GPUs; the host and buffer types (CPU_REPACK, ...)
    are host memory."""
    mb = MemoryBreakdown.of(stored)
    if mb is None:
        return None, None

    def add(rows: list[MemRow]) -> MemSplit | None:
        if not rows:
            return None
        return MemSplit(sum(_num(r.model) or 0.0 for r in rows), sum(_num(r.context) or 0.0 for r in rows),
                        sum(_num(r.compute) or 0.0 for r in rows))

    return add(mb.devices), add(([mb.host] if mb.host else []) + mb.other)


def _row(p: Point, series: str, axis: str = "ncmoe", ngl_all: int | None = None) -> Row:
    gpu, host = split_breakdown(p.mem_breakdown)
    pp_test, tg_test = pick_test(p, "pp"), pick_test(p, "tg")
    vram = p.vram_used_mib if p.vram_used_mib is not None else p.vram_self_mib
    hm = p.detail.host_mem or {}
    return Row(rss_anon_mib=_num(hm.get("rss_anon_peak_mib")), rss_file_mib=_num(hm.get("rss_file_peak_mib")),
               telemetry=p.detail.telemetry, busy=p.detail.busy,
               ncmoe=p.ncmoe, ok=p.status == "ok", n_ctx=p.n_ctx, pp=p.measured("pp_tps", pp_test), tg=p.measured("tg_tps", tg_test),
               pp_groups=p.launch_groups("pp_tps", pp_test), tg_groups=p.launch_groups("tg_tps", tg_test),
               series=series, ngl=p.ngl, label=p.label, failure_class=p.failure_class,
               failure_detail=p.failure_detail, vram_mib=vram, rss_mib=p.rss_peak_mib, gpu_mem=gpu, host_mem=host,
               prompt_tokens=p.prompt_tokens, n_predict=p.n_predict,
               command=shlex.join(p.command) if p.command else None, point=p, pp_test=pp_test, tg_test=tg_test,
               axis=axis, ngl_all=ngl_all)


def _label_order(label: str) -> tuple:
    # within one backend, later labels first: a compare's ratio reads B/A (new over baseline)
    return tuple(-ord(c) for c in label)


def load(store: Store, run_id: str) -> ReportData:
    """Everything a report needs from the store. Raises StoreError (unknown run) or ReportError."""
    run, builds, points, machine_of = _inputs(store, store.get_run(run_id))
    by_key = {b.get("key"): b for b in builds if isinstance(b, dict)}
    if not points:
        raise ReportError(f"run {run.id} has no points (status: {run.status})",
                          "measure it first (`llamaforge bench ... --resume`), or pick another run")
    groups = _group_points(points)

    def backend_of(key: str) -> str:
        b = by_key.get(key) or store.get_build(key) or {}
        return str(b.get("backend") or key.split("-")[0] or "?")

    declared = [str(v.get("name")) for v in run.plan.variants if isinstance(v, dict)]
    keys = _series_order(groups, machine_of, declared, backend_of)
    names = _series_names(keys, machine_of, set(declared), by_key, backend_of)
    facts = run.plan.facts
    axis = sweep_axis(points)
    n_layers = facts.n_layers
    ngl_all = (n_layers + 1 if isinstance(n_layers, int) else max(p.ngl for p in points) + 1) if axis == "ngl" else None
    series = []
    for k, name in zip(keys, names, strict=True):
        rows = sorted((_row(p, name, axis, ngl_all) for p in groups[k]), key=lambda r: (r.ncmoe, r.x, r.ngl))
        series.append(Series(key=k, name=name, backend=backend_of(k[0]), build=by_key.get(k[0]), rows=rows))
    native = facts.n_ctx_train
    if not isinstance(native, int):
        native = next((p.n_ctx_train for p in points if p.n_ctx_train), None)
    return ReportData(run=run, builds=builds, series=series, facts=facts, native_ctx=native,
                      full_attn_layers=facts.full_attention_layer_list(), probes=store.probes(run.id), axis=axis,
                      reproductions=_reproductions(store, run), points=points)


SeriesKey = tuple[str, str, str]   # (build key, engine, label)


def _inputs(store: Store, run: Run) -> tuple[Run, list[dict], list[Point], dict[str, str]]:
    """The run to report, its builds, its points and (fleet runs) each series label's machine."""
    if run.kind == "fleet":
        return _fleet_inputs(store, run)
    if run.plan.compare and run.plan.compare.fleet_run:   # compare --base-host/--head-host: the hosts' runs
        import dataclasses

        fleet, builds, points, machine_of = _fleet_inputs(store, store.get_run(run.plan.compare.fleet_run))
        return dataclasses.replace(run, env=fleet.env), builds, points, machine_of
    return run, store.builds_for_run(run.id), store.points(run.id), {}


def _group_points(points: list[Point]) -> dict[SeriesKey, list[Point]]:
    """The points by series (build, engine, label); drift sentinels are a check, not a series (see findings.drift)."""
    groups: dict[SeriesKey, list[Point]] = {}
    for p in points:
        if is_sentinel(p.label):
            continue
        groups.setdefault((p.build_key, p.engine, p.label), []).append(p)
    return groups


def _series_order(groups: dict[SeriesKey, list[Point]], machine_of: dict[str, str], declared: list[str],
                  backend_of: Callable[[str], str]) -> list[SeriesKey]:
    """The series in report order: fleet runs machine by machine (fleet.toml's order), then backends;
    a variant run in the order its variants were given."""
    order = list(dict.fromkeys(machine_of.values()))
    if machine_of:
        keys = sorted(groups, key=lambda k: (order.index(machine_of[k[2]]), backend_rank(backend_of(k[0])),
                                             _label_order(k[2]), k[0], k[1]))
    else:
        keys = sorted(groups, key=lambda k: (backend_rank(backend_of(k[0])), _label_order(k[2]), k[0], k[1]))
    if declared:
        keys = sorted(keys, key=lambda k: (declared.index(k[2]) if k[2] in declared else len(declared), k[1]))
    return keys


def _series_names(keys: list[SeriesKey], machine_of: dict[str, str], variant_names: set[str],
                  by_key: dict, backend_of: Callable[[str], str]) -> list[str]:
    """Each series' display name, unique within the run."""
    engines = {k[1] for k in keys}
    names: list[str] = []
    for k in keys:
        if k[2] in variant_names:      # a variant's series is called by its name (bench --variant)
            names.append(k[2] + (f" {k[1]}" if len(engines) > 1 else ""))
            continue
        base = display_name(backend_of(k[0]))
        machine = machine_of.get(k[2])
        same = [o for o in keys if display_name(backend_of(o[0])) == base and machine_of.get(o[2]) == machine]
        parts = [base]
        if len({o[0] for o in same}) > 1:  # two builds of one backend: tell them apart by pin/commit
            b = by_key.get(k[0]) or {}
            parts.append(str(b.get("pin") or (b.get("commit") or k[0])[:9]))
        label = k[2].partition("/")[2] if machine else k[2]
        if label and not any(x.startswith(label[:9]) or label.startswith(x) for x in parts[1:]):
            # a bisect's point label is its commit's short sha: one name per series; a split's (sm=layer ts=3:1) whole
            parts.append(label if "=" in label else label[:12])
        if len(engines) > 1:
            parts.append(k[1])
        name = (f"{machine} · " if machine else "") + " ".join(parts)
        while name in names:
            name += "'"
        names.append(name)
    return names


def _fleet_inputs(store: Store, run: Run) -> tuple[Run, list[dict], list[Point], dict[str, str]]:
    """A fleet run's hosts' imported runs as one: their builds and points (each point's label prefixed
    with its machine, ``machine/label``, so every machine × build is its own series), a plan taken from
    the first host's run (model, options) plus the fleet's, and an environment per machine."""
    import dataclasses

    from ..findings.runs import fleet_children

    builds: list[dict] = []
    points: list[Point] = []
    machine_of: dict[str, str] = {}
    plan: RunPlan | None = None
    env: dict = {}
    for machine, child_id in fleet_children(store, run.id):
        try:
            child = store.get_run(child_id)
        except StoreError:
            continue
        plan = plan or child.plan
        child_env = child.env.to_json()
        env[machine] = {k: child_env[k] for k in ("host", "cpu_model", "cpu_cores_logical", "ram_total_mib",
                                                  "gpus", "nvidia_driver", "os", "llamaforge") if k in child_env}
        seen = {b.get("key") for b in builds}
        builds += [b for b in store.builds_for_run(child.id) if b.get("key") not in seen]
        for p in store.points(child.id):
            if not is_sentinel(p.label):
                p.label = f"{machine}/{p.label}" if p.label else machine
                machine_of[p.label] = machine
            points.append(p)
    plan = plan or RunPlan()
    plan = plan.replace(fleet=run.plan.fleet, fleet_hosts=run.summary_as(FleetSummary).hosts)
    return dataclasses.replace(run, plan=plan, env=Environment(machines=env)), builds, points, machine_of


def _reproductions(store: Store, run: Run) -> list[dict]:
    """Verdicts of ``llamaforge reproduce`` where this run is the first run or the re-run."""
    pairs: list[tuple[Run, Run]] = []
    if run.parent_run:
        with contextlib.suppress(StoreError):
            pairs.append((store.get_run(run.parent_run), run))
    pairs += [(run, child) for child in store.child_runs(run.id)]
    return [verdict_for(store, a, b).to_dict() for a, b in pairs]
