"""``history.run``: build and measure commits into the store as a ``history`` run (see :mod:`llamaforge.history`).

Per commit, every backend is built (release pins from their own sources; commits of a range with the
incremental builder bisect uses, so a later bisect of a step reuses its build tree) and every point is
measured in **sequential starts** (:mod:`llamaforge.judge.sequential`): at least ``--min-launches``
starts, interleaved across the commit's backends and points, then one more while the commit's pp or tg
cannot be told from the previous measured commit of its series ("inconclusive" against the minimum
effect) or its interval is wider than the precision, up to ``--max-launches``. Starts of one commit
run back to back: drift between commits is not separated from the commits' own difference here; a
step's bisect re-measures its two ends interleaved (ABBA), which is where that is checked.

A commit that does not build, or whose start fails, is recorded (``HistorySummary.failed``) and
skipped; the run goes on. The plan lists every commit it means to measure before it starts, and the
summary is written after each commit, so an interrupted run is resumed by ``--continue``.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..bench.fit import resolve_fit
from ..bench.plan import FitOptions, Plan, PointSpec, make_plan, read_facts, resolve_model
from ..bench.sweep import measure_launch
from ..bisect.quiet import QuietRequest, settings
from ..builds import BuildOptions, build
from ..builds.incremental import IncrementalBuilder, build_facts
from ..config import Pins
from ..console import console, esc, notice
from ..envinfo import collect_env
from ..errors import BenchError, BuildError, ConfigError, SourceError
from ..files import file_lock
from ..judge import Policy, Starts, judge, point_stop
from ..judge.estimate import estimate
from ..judge.sequential import DEFAULT_MAX_STARTS, DEFAULT_MIN_STARTS, DEFAULT_PRECISION
from ..judge.verdict import DIFFERS, INCONCLUSIVE, MIN_EFFECT
from ..llamacpp.options import build_options
from ..options.table import default_of
from ..records import HistorySection, HistorySummary, build_manifest
from ..store import Point, Store
from .load import PRIMARY, Filter, load_history, machine_of, metric_starts
from .model import METRICS
from .select import Chosen, Selection, choose

ENGINES = ("server", "llama-bench")


@dataclass(frozen=True)
class HistoryRequest:
    selection: Selection
    backends: tuple[str, ...] = ("cpu",)
    model: str = "synth:tiny-qwen35moe"
    ncmoe: tuple[int, ...] = (0,)
    engine: str = "server"
    repeats: int = 3
    # the pp/tg requests of one start: history.run's own defaults in the options table (a series' key holds them)
    prompt_tokens: int = default_of("history.run", "prompt_tokens")
    n_predict: int = default_of("history.run", "n_predict")
    threads: int | None = None
    quiet: bool = True
    min_starts: int = DEFAULT_MIN_STARTS
    max_starts: int = DEFAULT_MAX_STARTS
    precision: float = DEFAULT_PRECISION
    min_effect: float = MIN_EFFECT
    resume: bool = False                 # --continue
    bisect: bool = False
    bisect_max_starts: int | None = None  # starts per commit a step's bisect may use (default: --max-launches)
    vram_budget: float | None = None      # GiB of VRAM left usable per device (emulates a smaller card)
    ctx: int | None = None                # -c for every start (else llama.cpp fits it)

    def __post_init__(self) -> None:
        if self.engine not in ENGINES:
            raise ConfigError(f"--engine {self.engine!r} is not one of {', '.join(ENGINES)}",
                              "server (pp, tg, time to first token, memory) or llama-bench (pp, tg)")
        if not self.backends or len(set(self.backends)) != len(self.backends):
            raise ConfigError(f"--backend {','.join(self.backends)}: give each backend once", "e.g. --backend cuda,vulkan")
        for name, v, lo in (("--repeats", self.repeats, 1), ("--min-launches", self.min_starts, 2),
                            ("--prompt-tokens", self.prompt_tokens, 1), ("--n-predict", self.n_predict, 1)):
            if v < lo:
                raise ConfigError(f"{name} must be at least {lo} (got {v})", f"e.g. {name} {max(lo, 3)}")
        if self.max_starts < self.min_starts:
            raise ConfigError(f"--max-launches {self.max_starts} is below --min-launches {self.min_starts}",
                              "give a maximum at least as large as the minimum")

    @property
    def bisect_budget(self) -> int:
        return self.bisect_max_starts or self.max_starts

    @property
    def policy(self) -> Policy:
        return Policy(self.min_starts, self.max_starts, self.precision)

    @property
    def setup(self) -> str:
        """How one start measures: part of every series' key (a different setup is a different series)."""
        budget = f" vram{self.vram_budget:g}" if self.vram_budget else ""
        return f"{self.engine} p{self.prompt_tokens} n{self.n_predict} r{self.repeats}{budget}" + \
            (f" c{self.ctx}" if self.ctx else "")


@dataclass
class HistoryOutcome:
    run_id: str | None
    measured: list[str]
    failed: dict[str, dict[str, str]]
    chosen: list[Chosen]
    note: str = ""


Builder = Callable[[Chosen, str], Any]


def default_builder(paths: Any) -> Builder:
    """Release pins from their own sources; other commits with the incremental builder (one tree per backend,
    shared with bisect, under its session lock)."""
    builders: dict[str, IncrementalBuilder] = {}

    def make(c: Chosen, backend: str) -> Any:
        if c.pin is not None:
            return build(paths, c.pin, backend, BuildOptions())
        inc = builders.setdefault(backend, IncrementalBuilder(paths, backend))
        with file_lock(Path(paths.builds) / f"bisect-{backend}.session.lock",
                       f"a bisection uses the {backend} build tree; waiting for it"):
            return inc(c.sha)
    return make


class _Session:
    """One history run in progress: builds, starts and the summary, stored as they happen."""

    def __init__(self, store: Store, run_id: str, req: HistoryRequest, plan: Plan, prev: dict) -> None:
        self.store, self.run_id, self.req, self.plan = store, run_id, req, plan
        # (backend, ncmoe) → the series' measured levels, oldest first: (sha, metric → starts)
        self.prev: dict[tuple[str, int], list[tuple[str, dict[str, list[list[float]]]]]] = prev
        self.plans: dict[str, Plan] = {}
        self.quiet: dict[str, dict] = {}
        self.summary = HistorySummary(starts=0)
        self.seq = 0
        self.partner: dict[str, tuple[Chosen, Any]] = {}     # backend → the previous commit and its build
        self.lost: set[tuple[str, int]] = set()
        self.family = 1                                         # the pairs this run judges (Holm's family)

    def plan_for(self, b: Any) -> Plan:
        if b.key not in self.plans:
            opts = sorted(build_options(b).bench) if self.req.engine == "llama-bench" else None
            q = settings(QuietRequest(backend=b.backend, threads=self.req.threads, enabled=self.req.quiet), opts)
            self.quiet[b.key] = q.to_dict()
            args = list(q.args) if self.req.engine == "llama-bench" else []
            self.plans[b.key] = dataclasses.replace(self.plan, threads=q.threads, extra_args=args)
        return self.plans[b.key]

    def save(self) -> None:
        self.store.set_run_summary(self.run_id, self.summary)

    def fail(self, sha: str, backend: str, why: str) -> None:
        self.summary.failed.setdefault(sha, {})[backend] = why
        notice(f"{sha[:9]} ({backend}): {why}")


def _speeds(p: Point) -> dict[str, list[list[float]]]:
    """A point's pp and tg per start: what the next commit is judged against."""
    return {m: metric_starts(p, m, p.engine) for m in PRIMARY}


def _stop(p: Point, prev: dict[str, list[list[float]]], req: HistoryRequest, family: int = 1) -> Any:
    """Whether this commit's point needs another start (:func:`llamaforge.judge.point_stop`). A "differs" is
    settled only once its p clears the look's α divided by the run's pairs (``family``): the steps are judged
    with Holm over them, and a pair stopped at a bare "differs" would not survive that."""
    if p.launches and not p.launches[-1].ok:
        return None
    open_ = []
    for metric in PRIMARY:
        cur = metric_starts(p, metric, p.engine)
        if prev.get(metric) and cur:
            j = judge(prev[metric], cur, min_effect=req.min_effect, alpha=req.policy.look_alpha)
            weak = j is not None and j.verdict == DIFFERS and j.p_differs > req.policy.look_alpha / family
            if j is not None and (j.verdict == INCONCLUSIVE or weak):
                open_.append(f"{metric} vs the previous commit")
    return point_stop(estimate(Starts.of(metric_starts(p, "tg", p.engine))), req.policy, open_comparisons=open_)


def _one_start(s: _Session, c: Chosen, b: Any, n: int, acc: dict, item: tuple, model_path: Path) -> None:
    s.seq += 1
    launch = len(acc[item].launches) + 1 if item in acc else 1
    acc[item] = measure_launch(b, model_path, PointSpec(n), s.plan_for(b), s.store, s.run_id, label=c.sha,
                               launch=launch, seq=s.seq, acc=acc.get(item))
    s.summary.starts = (s.summary.starts or 0) + 1


def _round(s: _Session, c: Chosen, builds: dict[str, Any], items: list, acc: dict, pacc: dict, rnd: int,
           model_path: Path) -> None:
    """One start of each open point, interleaved with one start of the previous commit's (ABBA by round)."""
    for item in items:
        partner = s.partner.get(item[0])
        sides = [("cur", c, builds[item[0]])] + ([("prev", *partner)] if partner and item not in s.lost else [])
        for which, ch, b in (sides if rnd % 2 == 0 else sides[::-1]):
            _one_start(s, ch, b, item[1], acc if which == "cur" else pacc, item, model_path)
            if which == "prev" and not pacc[item].launches[-1].ok:
                s.lost.add(item)          # the partner's start failed: this commit is judged without a pair


def _reference(levels: Sequence[tuple[str, dict]], sha: str) -> dict:
    """The newest earlier level of *another* commit (a commit measured again is not compared with itself)."""
    return next((starts for other, starts in reversed(levels) if other != sha), {})


def _measure_commit(s: _Session, c: Chosen, builds: dict[str, Any], model_path: Path) -> None:
    """The commit's starts, each round also a start of the previous commit's build (interleaved: drift of the
    machine falls on both alike), until the judge can tell the two apart or they are alike (see the module doc)."""
    items = [(backend, n) for backend in builds for n in s.req.ncmoe]
    acc: dict[tuple[str, int], Point] = {}
    pacc: dict[tuple[str, int], Point] = {}
    s.lost = set()
    rnd = 0
    while items:
        _round(s, c, builds, items, acc, pacc, rnd, model_path)
        rnd += 1
        for item in list(items):
            partner = pacc.get(item) if item not in s.lost else None
            ref = _speeds(partner) if partner else _reference(s.prev.get(item, []), c.sha)
            st = _stop(acc[item], ref, s.req, s.family)
            tag = f"{c.sha} {item[0]} {item[1]}"
            if st is None:
                s.fail(c.sha, item[0], f"run: start failed ({acc[item].failure_class}: {acc[item].failure_detail})"[:300])
                s.summary.stops[tag] = "a start failed"
                items.remove(item)
            elif not st.more:
                s.summary.stops[tag] = st.reason
                s.prev.setdefault(item, []).append((c.sha, _speeds(acc[item])))
                if partner is not None:
                    s.summary.pairs += pair_rows(s.partner[item[0]][0], c, item, partner, acc[item], s.req)
                items.remove(item)
    for backend, b in builds.items():
        s.partner[backend] = (c, b)


def pair_rows(before: Chosen, after: Chosen, item: tuple[str, int], a: Point, b: Point, req: HistoryRequest) -> list[dict]:
    """The interleaved comparison of two neighbouring commits, per metric: the judge's ratio after/before."""
    out = []
    for metric in METRICS:
        ga, gb = metric_starts(a, metric, a.engine), metric_starts(b, metric, b.engine)
        j = judge(ga, gb, min_effect=req.min_effect) if ga and gb else None
        if j is None:
            continue
        out.append({"backend": item[0], "point": f"ncmoe={item[1]}", "metric": metric, "before": before.sha,
                    "after": after.sha, "ratio": j.ratio, "low": j.low, "high": j.high, "verdict": j.verdict,
                    "p": 1.0 if j.small else j.p_differs, "k_before": j.a.k, "k_after": j.b.k})
    return out


def _build_all(s: _Session, c: Chosen, builder: Builder) -> dict[str, Any]:
    out = {}
    for backend in s.req.backends:
        t0 = time.time()
        try:
            b = builder(c, backend)
        except (BuildError, SourceError) as e:
            s.fail(c.sha, backend, f"build: {e}"[:300])
            continue
        cached, incr, secs = build_facts(b, t0)
        how = "cached" if cached else ("incremental" if incr else "cold")
        s.summary.builds.setdefault(c.sha, {})[backend] = {"key": b.key, "build_s": round(time.time() - t0, 2),
                                                           "compile_s": secs, "how": how}
        s.store.add_build(build_manifest(b), s.run_id)
        out[backend] = b
    return out


def _series_runs(store: Store, machine: str, req: HistoryRequest) -> list[Any]:
    """The history runs of this machine, model and setup (the runs whose series this request extends)."""
    return [run for run in store.list_runs("history") if run.plan.history is not None
            and run.plan.history.setup == req.setup and run.plan.model_ref == req.model and machine_of(run) == machine]


def _previous(store: Store, machine: str, req: HistoryRequest) -> tuple[list[str], list[str], dict]:
    """Commits this machine's series already measured, those an earlier run planned, and per (backend,
    ncmoe) the newest measured commit's pp/tg starts (what a new commit is first compared with)."""
    measured: set[str] = set()
    planned: list[str] = []
    prev: dict = {}
    for run in _series_runs(store, machine, req):
        planned += [c["sha"] for c in run.plan.history.commits]
        if run.summary:                  # a commit that failed is recorded, not measured again by --continue
            measured |= set(run.summary_as(HistorySummary).failed)
    hist = load_history(store, Filter(machine=machine, model=req.model))
    for series in hist.series:
        if series.key.setup != req.setup or series.key.backend not in req.backends:
            continue
        lv = series.measured()
        measured |= {x.sha for x in lv}
        n = int(series.key.point.split("=")[1]) if series.key.point.startswith("ncmoe=") else 0
        if lv and series.key.metric in PRIMARY:
            levels = prev.setdefault((series.key.backend, n), {})
            for x in lv:
                levels.setdefault(x.sha, {})[series.key.metric] = x.starts
    return sorted(measured), planned, {k: list(v.items()) for k, v in prev.items()}


def _tip(store: Store, machine: str, req: HistoryRequest, pins: Pins, measured: Sequence[str]) -> Chosen | None:
    """The newest commit this machine's series measured (what ``--continue`` pairs its first commit with)."""
    done, best = set(measured), None
    for run in _series_runs(store, machine, req):
        for c in run.plan.history.commits:
            if c["sha"] in done and (best is None or int(c.get("order") or 0) >= int(best.get("order") or 0)):
                best = c
    if best is None:
        return None
    pin = pins.pins.get(best["pin"]) if best.get("pin") else None
    return Chosen(best["sha"], int(best.get("order") or 0), best.get("label") or best["sha"][:9],
                  best.get("subject") or "", best.get("date"), pin)


def _pair_with_tip(s: _Session, tip: Chosen | None, builder: Builder) -> None:
    if tip is None:
        return
    for backend in s.req.backends:
        try:
            b = builder(tip, backend)                               # a cached build: published under its key
            s.partner[backend] = (tip, b)
            s.store.add_build(build_manifest(b), s.run_id)
        except (BuildError, SourceError) as e:
            notice(f"{tip.label} ({backend}) cannot be built again to pair with ({e}); the first new commit is "
                   "compared with its stored starts")


def history_plan(req: HistoryRequest, model_path: Path) -> Plan:
    """The plan every start of the run measures with; ``--vram-budget`` resolved into per-device ``-fitt``
    margins here, once (as a sweep does), so that every start's llama-server gets them."""
    try:
        facts = read_facts(model_path)
    except Exception:  # noqa: BLE001 - facts are decoration here
        facts = {}
    return make_plan(model_ref=req.model, model_path=model_path, model_facts=facts,
                     points=[PointSpec(n) for n in req.ncmoe], backends=list(req.backends), pins=[], engine=req.engine,
                     repeats=req.repeats, prompt_tokens=req.prompt_tokens, n_predict=req.n_predict, threads=req.threads,
                     fit=resolve_fit(FitOptions(vram_budget_gib=req.vram_budget), list(req.backends)), ctx=req.ctx,
                     stream=False)   # a series keeps its setup: its requests were never streamed


def _section(req: HistoryRequest, chosen: Sequence[Chosen]) -> HistorySection:
    sel = req.selection
    return HistorySection(selection=sel.text(), setup=req.setup, commits=[c.to_dict() for c in chosen],
                          source=str(sel.source) if sel.source else None, min_starts=req.min_starts,
                          max_launches=req.max_starts, precision=req.precision, min_effect=req.min_effect,
                          continues=req.resume, bisect=req.bisect)


def run_history(paths: Any, pins: Pins, store: Store, req: HistoryRequest, *, builder: Builder | None = None,
                command: str | None = None) -> HistoryOutcome:
    """Measure the selected commits (see the module doc); with ``req.bisect`` then locate the steps
    (:func:`llamaforge.history.bisect_steps.locate_steps`). Returns what was measured; everything is stored."""
    model_path = resolve_model(req.model, paths)
    env = collect_env()
    machine = str(env.get("machine") or env.get("host") or "unknown")
    measured, planned, prev = _previous(store, machine, req)
    chosen = choose(paths, pins, req.selection, measured=measured, planned=planned, resume=req.resume)
    if not chosen:
        note = "nothing new to measure: every selected commit is already in this machine's series"
        console.print(esc(note))
        return HistoryOutcome(None, [], {}, [], note)
    plan = history_plan(req, model_path)
    run_id = store.new_run("history", plan.replace(history=_section(req, chosen)), command=command,
                           env=env, name=f"history {req.selection.text()} ({','.join(req.backends)})")
    console.print("[bold]history[/] " + esc(
        f"{len(chosen)} commits × {','.join(req.backends)} × ncmoe {','.join(map(str, req.ncmoe))}, "
        f"{req.min_starts}–{req.max_starts} starts each ({req.setup}) — run {run_id}"))
    s = _Session(store, run_id, req, plan, prev)
    s.family = max(1, len(chosen))
    status = "interrupted"
    try:
        if req.resume:                   # the first new commit is paired with the series' newest one
            _pair_with_tip(s, _tip(store, machine, req, pins, measured), builder or default_builder(paths))
        for c in chosen:
            _one_commit(s, c, builder or default_builder(paths), model_path)
        status = "done"
    finally:
        record = store.get_run(run_id).plan
        store.update_run_plan(run_id, record.replace(history=record.history.replace(quiet=s.quiet)))
        s.save()
        store.set_run_status(run_id, status)
    if req.bisect:
        from .bisect_steps import locate_steps
        locate_steps(paths, store, run_id, req, machine)
    return HistoryOutcome(run_id, s.summary.measured, s.summary.failed, chosen)


def _one_commit(s: _Session, c: Chosen, builder: Builder, model_path: Path) -> None:
    t0 = time.time()
    builds = _build_all(s, c, builder)
    t1 = time.time()
    if builds:
        try:
            _measure_commit(s, c, builds, model_path)
        except BenchError as e:
            for backend in builds:
                s.fail(c.sha, backend, f"run: {e}"[:300])
    s.summary.measure_s[c.sha] = round(time.time() - t1, 2)
    if c.sha not in s.summary.failed or len(s.summary.failed[c.sha]) < len(s.req.backends):
        s.summary.measured.append(c.sha)
    console.print(esc(f"  {c.label:>12} {c.subject[:60]:<60} build {t1 - t0:6.1f} s  measure {time.time() - t1:6.1f} s"))
    s.save()
