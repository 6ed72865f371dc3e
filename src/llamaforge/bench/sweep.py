"""Run a plan: every point on every build, in ``launches`` interleaved launches each, into the store.

A point and its samples are written in one transaction when a launch finishes, so an interrupted
sweep loses at most the launch in flight; ``resume_run`` measures only what is missing. A failing
point is stored with its failure class and log tail, and the sweep goes on. Each launch is
measured by an engine (:mod:`.engines`, picked by name from the registry).

Public API (used by ``bench``/``compare``/``bisect``/``reproduce``):

* :func:`run_sweep` — a whole plan → run id.
* :func:`measure_points` — a list of (build, point, engine) in K interleaved launches each (plus
  drift sentinels) into an existing run: what ``run_sweep`` (and the adaptive sweep) call.
* :func:`measure_point` — one point on one build in one launch into an existing run (compare/bisect
  interleave A/B points with it, distinguishing sides by ``label``).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ..console import notice, warning
from ..envinfo import collect_env
from ..errors import BenchError
from ..findings.conditions import flags as telemetry_flags
from ..findings.drift import drift_flags, print_drift
from ..findings.labels import sentinel_label
from ..gpu import other_gpu_processes
from ..hostlock import HostLock, describe, holder
from ..llamacpp.options import build_options
from ..llamacpp.placement import series_of
from ..llamacpp.quirks import describe_failure
from ..llamacpp.rpc import series_of as split_series
from ..llamacpp.server import PointFailure, read_log_tail
from ..locks import run_lock
from ..machine import current as current_machine
from ..machine import describe_counts, hosts_of, launch_machines
from ..pathsafe import component, run_log_dir
from ..records import UNKNOWN_MACHINE, LaunchRecord, ResumeRecord, build_manifest
from ..store import Point, Store
from ..variants.build import VariantBuild, series_label
from ..variants.observe import observe_log
from . import adjust
from .auto_launches import extend
from .display import SweepDisplay
from .engines import MeasureContext, PhaseFn, SweepState
from .engines import engine as get_engine
from .fit import resolve_fit
from .placed import moved_detail
from .plan import BuildLike, Plan, PointSpec
from .schedule import default_sentinel_every, remaining, sweep_schedule
from .summary import run_summary

Item = tuple[BuildLike, PointSpec, str]   # (build, point, engine)
#: measures a list of items with a plan into the run (see run_sweep's ``driver``)
MeasureItems = Callable[[Sequence[Item], Plan], list[Point]]
Driver = Callable[[MeasureItems, str], None]


def point_label(build: BuildLike, spec: PointSpec, label: str = "") -> str:
    """A point's label: its series (the variant's name, else ``label``), its placement strategy's (``last``;
    ``--place``) and its split settings (``sm=layer ts=3:1``; ``--split``, ``--tensor-split``)."""
    own, place = series_label(build, label), series_of(spec.place)
    return " ".join(x for x in (own, place, split_series(spec.split_mode, spec.tensor_split)) if x)


def _log_path(log_dir: Path, build: BuildLike, spec: PointSpec, engine: str, label: str) -> Path:
    name = f"{build.key}-{engine}-ncmoe{spec.ncmoe}-ngl{spec.ngl}" + (f"-{label}" if label else "")
    return log_dir / (component(name) + ".log")


def measure_point(build: BuildLike, model_path: Path, point_spec: PointSpec, plan: Plan, store: Store, run_id: str,
                  label: str = "", *, log_dir: Path | None = None, on_phase: PhaseFn | None = None,
                  state: SweepState | None = None, engine: str | None = None, busy: dict | None = None) -> Point:
    """Measure one point on one build (one launch) and store it (also when it fails). Returns the stored Point.

    ``engine`` overrides the plan's (``--engine both`` measures each point with both);
    ``busy`` (what ``--allow-busy`` let through) is recorded in the point's ``detail.busy``."""
    log_dir = log_dir or run_log_dir(store.path, run_id)
    point = _measure_once(build, model_path, point_spec, plan, run_id, label, log_dir=log_dir, on_phase=on_phase,
                          state=state, engine=engine, busy=busy)
    store.record_point(point)
    return point


def measure_launch(build: BuildLike, model_path: Path, point_spec: PointSpec, plan: Plan, store: Store, run_id: str,
                   *, label: str, launch: int, seq: int, acc: Point | None = None,
                   log_dir: Path | None = None) -> Point:
    """One more server start of a point measured start by start (bisect): measured as launch ``launch``,
    folded into ``acc`` (the point with the earlier starts; ``None`` for the first) and stored; returns
    the merged point (its samples of this start carry ``launch``)."""
    log_dir = log_dir or (store.path.parent / "logs" / run_id)
    one = _measure_once(build, model_path, point_spec, plan, run_id, label, log_dir=log_dir, launch=launch)
    merged = merge_launch(acc, one, launch, seq)
    store.record_point(merged)
    return merged


def _measure_once(build: BuildLike, model_path: Path, point_spec: PointSpec, plan: Plan, run_id: str,
                  label: str = "", *, log_dir: Path, on_phase: PhaseFn | None = None, state: SweepState | None = None,
                  engine: str | None = None, busy: dict | None = None, launch: int | None = None) -> Point:
    """One server start (or llama-bench call) of one point → an unstored Point (samples tagged ``launch``)."""
    on_phase = on_phase or (lambda _s: None)
    state = state or SweepState()
    engine = engine or plan.engine
    if engine == "both":
        engine = "server"
    log_path = _log_path(log_dir, build, point_spec, engine, label + (f"-L{launch}" if launch else ""))
    point = Point(run_id=run_id, build_key=build.key, engine=engine, ncmoe=point_spec.ncmoe, ngl=point_spec.ngl,
                  label=label, n_predict=plan.n_predict, started=time.time())
    ctx = MeasureContext(point=point, build=build, model_path=model_path, spec=point_spec, plan=plan,
                         log_path=log_path, state=state, on_phase=on_phase)
    try:
        get_engine(engine).measure(ctx)
        point.status = "ok"
    except PointFailure as e:
        point.status = "failed"
        point.failure_class = e.cls
        point.log_tail = e.log_tail if e.log_tail is not None else read_log_tail(log_path)
        point.failure_detail = describe_failure(e.detail, point.log_tail or "")   # + signal, likely cause
    if isinstance(build, VariantBuild):   # what the binary really ran with: did the variant's knobs take effect
        point.detail.observed = observe_log(log_path)
    if busy:
        point.detail.busy = busy
    if point_spec.place:     # what the placement moved: planned from the model, read back from llama.cpp
        try:
            point.detail.moved = moved_detail(build, model_path, point_spec, plan.threads)
        except PointFailure as e:
            point.status, point.failure_class, point.failure_detail = "failed", e.cls, e.detail
    point.finished = time.time()
    for smp in point.samples:
        smp.launch = launch or 1
    return point


def _launch_record(one: Point, launch: int, seq: int) -> LaunchRecord:
    d = one.detail
    return LaunchRecord(launch=launch, seq=seq, status=one.status, failure_class=one.failure_class,
                        started=one.started, finished=one.finished, n_ctx=one.n_ctx, rss_peak_mib=one.rss_peak_mib,
                        vram_self_mib=one.vram_self_mib, vram_used_mib=one.vram_used_mib, t_load_s=one.t_load_s,
                        telemetry=d.telemetry, host_mem=d.host_mem, busy=d.busy, machine=current_machine(),
                        engine_gap=d.engine_gap).complete()


def _max(a: float | None, b: float | None) -> float | None:
    return b if a is None else a if b is None else max(a, b)


def merge_launch(acc: Point | None, one: Point, launch: int, seq: int) -> Point:
    """Fold one launch into the point that holds the earlier launches (``acc``; ``None`` for the first).

    Samples are appended (tagged with their launch); memory is the maximum over launches; times add
    up; the newest launch's command, log-derived breakdown and build info win; a failed launch
    makes the point failed (its earlier samples are kept). ``detail.launches`` lists every launch
    with its position ``seq`` in the run's schedule (the drift sentinels need it) and its own
    telemetry / host memory; the point-level ``telemetry`` is the first flagged launch's (else the
    newest), so a point shows as throttled/loaded when any of its launches was (:meth:`PointDetail.merge`)."""
    rec = _launch_record(one, launch, seq)
    if acc is None:
        one.detail.launches = [rec]
        return one
    for f in ("rss_peak_mib", "vram_used_mib", "vram_self_mib", "vram_total_mib"):
        setattr(acc, f, _max(getattr(acc, f), getattr(one, f)))
    for f in ("t_load_s", "t_warmup_s", "t_measure_s"):
        a, b = getattr(acc, f), getattr(one, f)
        setattr(acc, f, None if a is None and b is None else (a or 0.0) + (b or 0.0))
    if acc.n_ctx is None:
        acc.n_ctx = one.n_ctx
    elif one.n_ctx is not None and one.n_ctx != acc.n_ctx:
        acc.detail.warnings.append(f"launch {launch} fitted n_ctx {one.n_ctx}, not {acc.n_ctx}")
    acc.n_ctx_train = acc.n_ctx_train or one.n_ctx_train
    acc.prompt_tokens = acc.prompt_tokens or one.prompt_tokens
    acc.command = one.command or acc.command
    acc.build_info = one.build_info or acc.build_info
    acc.mem_breakdown = one.mem_breakdown or acc.mem_breakdown
    acc.finished = one.finished
    acc.detail.merge(one.detail, launch, flagged=bool(telemetry_flags(acc.detail.telemetry)))
    acc.detail.launches = [*acc.detail.launches, rec]
    acc.samples = [*acc.samples, *one.samples]
    if one.status != "ok":
        acc.status, acc.failure_class, acc.failure_detail = one.status, one.failure_class, one.failure_detail
        acc.log_tail = one.log_tail
    return acc


def engines_of(plan: Plan) -> list[str]:
    """The engines each point is measured with (``both``: the server, then llama-bench)."""
    return ["server", "llama-bench"] if plan.engine == "both" else [plan.engine]


def busy_gpu_check(allow_busy: bool) -> dict | None:
    """Before a point: refuse (BenchError) while another process computes on an NVIDIA GPU; with
    ``allow_busy`` return what was found, for the point's record (``None`` when the GPU is free)."""
    others = other_gpu_processes(exclude={os.getpid()})
    if not others:
        return None
    what = ", ".join(f"PID {o['pid']} ({o.get('command') or '?'}) on GPU {o['device']}" for o in others[:3])
    if not allow_busy:
        raise BenchError(f"another process computes on the GPU: {what}; measuring now would measure both",
                         "wait for it to finish (the sweep resumes with `llamaforge bench --resume RUN`), "
                         "or pass --allow-busy to measure anyway (recorded)")
    return {"gpu_processes": others}


def run_sweep(plan: Plan, builds: list[BuildLike], store: Store, *, resume_run: str | None = None,
              retry_failed: bool = False, command: str | None = None, name: str | None = None,
              progress: bool = True, allow_busy: bool = False, run_extra: dict | None = None,
              driver: Driver | None = None) -> str:
    """Measure every (point, build) of ``plan`` that the run does not have yet. Returns the run id.

    Each (point, build, engine) item is measured in ``plan.launches`` server starts, scheduled by
    :func:`measure_points` (randomised blocks, seed recorded in the plan; drift sentinels per
    ``plan.sentinel_every``, resolved here: None → on for sweeps of more than 10 items). Failed
    points are kept on resume unless ``retry_failed``. The sweep holds the host-wide measurement lock
    (:mod:`llamaforge.hostlock`) and checks before each point that no other process computes on
    the GPU; ``allow_busy`` measures anyway and records it (run summary and each point's
    ``extra["busy"]``). ``run_extra`` sets fields of the stored plan (:class:`records.RunPlan`: ``reproduces``,
    ``adaptive``).

    ``driver`` (the adaptive sweep, :mod:`llamaforge.bench.autosweep`) replaces "every point of the
    plan": it is called once with a function that measures a list of items (with the plan it is given,
    e.g. more launches for one point) into this run, under the same locks and checks."""
    if not builds:
        raise BenchError("no builds to benchmark", "give --backends (and build them with `llamaforge build`)")
    lock = HostLock(resume_run or "sweep")
    host_busy: dict | None = None
    if allow_busy:
        if not lock.try_acquire():
            host_busy = {"host_lock": describe(holder(lock.path))}
            notice(f"--allow-busy: measuring although {host_busy['host_lock']} holds the host lock")
    else:
        lock.acquire()
    try:
        return _run_sweep_locked(plan, builds, store, resume_run=resume_run,
                                 retry_failed=retry_failed, command=command, name=name, progress=progress,
                                 allow_busy=allow_busy, host_busy=host_busy, run_extra=run_extra, driver=driver)
    finally:
        lock.release()


def _run_sweep_locked(plan: Plan, builds: list[BuildLike], store: Store, *, resume_run: str | None,
                      retry_failed: bool, command: str | None, name: str | None, progress: bool,
                      allow_busy: bool, host_busy: dict | None, run_extra: dict | None,
                      driver: Driver | None = None) -> str:
    with contextlib.ExitStack() as held:   # the per-run lock: one process measures a run at a time
        if resume_run:
            run = store.get_run(resume_run)
            _check_same_builds(run, builds)
            held.enter_context(run_lock(store.path, run.id))
        return _run_sweep_body(plan, builds, store, held, resume_run=resume_run,
                               retry_failed=retry_failed, command=command, name=name, progress=progress,
                               allow_busy=allow_busy, host_busy=host_busy, run_extra=run_extra, driver=driver)


def _check_same_builds(run: Any, builds: list[BuildLike]) -> None:
    """A resume measures the run's own builds only: another --bin-dir (or other builds) would add a series."""
    keys = list(run.plan.build_keys)
    other = [b.key for b in builds if b.key not in keys]
    if other:
        raise BenchError(f"run {run.id} ({run.status}) was measured with {', '.join(keys) or 'no builds'}; "
                         f"resuming it with {', '.join(other)} would add a series to it",
                         "resume with the run's own builds (the same --bin-dir), or start a new run for these")


def _run_sweep_body(plan: Plan, builds: list[BuildLike], store: Store, held: contextlib.ExitStack, *,
                    resume_run: str | None, retry_failed: bool, command: str | None,
                    name: str | None, progress: bool, allow_busy: bool, host_busy: dict | None,
                    run_extra: dict | None, driver: Driver | None = None) -> str:
    plan.build_keys = list(dict.fromkeys(b.key for b in builds))   # variants of one build share its key
    items: list[Item] = [(b, spec, e) for spec in plan.points for b in builds for e in engines_of(plan)]
    if any(isinstance(b, VariantBuild) for b in builds):
        plan.variants = [b.to_record() for b in builds if isinstance(b, VariantBuild)]
    for b in builds:
        build_options(b)   # a binary whose --help cannot be read stops here, before anything is measured
    if resume_run:
        run = store.get_run(resume_run)
        run_id = run.id
        note_resume(store, run)
        store.set_run_status(run_id, "running")
    else:
        plan.fit = resolve_fit(plan.fit, [b.backend for b in builds])
        if plan.seed is None:
            plan.seed = secrets.randbelow(2**31)
        plan.sentinel_every = default_sentinel_every(len(items), plan.sentinel_every)
        for b in builds:
            adjust.runtime_for(b, plan)      # announced once, recorded in the run's plan
        run_id = store.new_run("sweep", plan.replace(**(run_extra or {})), command=command,
                               env=collect_env(), name=name, parent_run=(run_extra or {}).get("reproduces"))
        held.enter_context(run_lock(store.path, run_id))   # a `--resume latest` meanwhile is refused
    for b in builds:
        store.add_build(build_manifest(b), run_id)
    t0 = time.monotonic()
    status = "interrupted"
    try:
        if driver is None:
            measure_points(items, plan, store, run_id, retry_failed=retry_failed, progress=progress,
                           allow_busy=allow_busy, host_busy=host_busy)
            extend(items, plan, store, run_id,
                   lambda its, pl: measure_points(its, pl, store, run_id, progress=progress, allow_busy=allow_busy,
                                                  host_busy=host_busy))
        else:
            state = SweepState()
            driver(lambda its, pl: measure_points(its, pl, store, run_id, retry_failed=retry_failed,
                                                  progress=progress, allow_busy=allow_busy, host_busy=host_busy,
                                                  state=state), run_id)
        status = "done"
    finally:
        with contextlib.suppress(Exception):
            store.set_run_status(run_id, status)
            summary = run_summary(store, run_id, time.monotonic() - t0)
            if allow_busy:
                summary.allow_busy = True
            store.set_run_summary(run_id, summary)
    if progress:
        print_drift(drift_flags(store.points(run_id)))
    return run_id


def note_resume(store: Store, run: Any) -> ResumeRecord:
    """Record a resume of ``run`` in its environment (``Environment.resumes``), and warn in one line when
    this machine is not the one (or not among those) that measured the run's earlier launches: its points
    would mix two machines' speeds. Resuming is legitimate, so it is a warning, not an error."""
    launches = [r for p in store.points(run.id, with_samples=False) for r in p.launches]
    earlier = launch_machines(launches)
    me = current_machine()
    others = set(earlier) - {me.id, UNKNOWN_MACHINE}
    text = None
    if others:
        text = (f"resuming run {run.id} on machine {me.label()}, but its {sum(earlier.values())} earlier launches came "
                f"from another machine (launches per machine: {describe_counts(earlier, hosts_of(launches))}); points "
                "measured on both will mix machines (the report marks them; `llamaforge reproduce` re-measures on one)")
        warning(text)
    rec = ResumeRecord(at=time.time(), machine=me, earlier=dict(earlier), warning=text)
    env = run.env
    env.resumes.append(rec)
    store.update_run_env(run.id, env)
    return rec


def reference_items(items: Sequence[Item]) -> list[int]:
    """Index of each series' reference item: its first point (with the first engine) in ``items`` (a series is
    a build, or a variant of one)."""
    first: dict[tuple[str, str], int] = {}
    for i, (b, _spec, _e) in enumerate(items):
        first.setdefault((b.key, series_label(b)), i)
    return list(first.values())


def _stored_progress(store: Store, run_id: str, items: Sequence[Item], label: str, retry_failed: bool,
                     launches: int) -> tuple[dict[tuple[int, bool], Point], set[tuple[int, int, bool]], int]:
    """What a run already holds for ``items``: the stored points (by item, sentinel), the done
    ``(item, launch, sentinel)`` slots and the last schedule position used."""
    by_key = {p.key: p for p in store.points(run_id)}
    have: dict[tuple[int, bool], Point] = {}
    done: set[tuple[int, int, bool]] = set()
    last_seq = 0
    for i, (b, spec, e) in enumerate(items):
        own = point_label(b, spec, label)
        for sentinel in (False, True):
            p = by_key.get((b.key, e, spec.ncmoe, spec.ngl, sentinel_label(own) if sentinel else own))
            if p is None or (p.status != "ok" and retry_failed):
                continue
            have[(i, sentinel)] = p
            recs = p.launches
            last_seq = max([last_seq, *(r.seq or 0 for r in recs)])
            if p.status != "ok" and not sentinel:
                done.update((i, k, False) for k in range(1, launches + 1))   # failed: no more launches of it
            elif recs:
                done.update((i, r.launch, sentinel) for r in recs)
            else:
                done.add((i, 1, sentinel))   # stored before launches existed: one launch
    return have, done, last_seq


def measure_points(items: Sequence[Item], plan: Plan, store: Store, run_id: str, *, label: str = "",
                   retry_failed: bool = False, progress: bool = True, log_dir: Path | None = None,
                   state: SweepState | None = None, allow_busy: bool = False,
                   host_busy: dict | None = None) -> list[Point]:
    """Measure every (build, point, engine) of ``items`` in ``plan.launches`` server starts each,
    interleaved (:func:`~llamaforge.bench.schedule.sweep_schedule` with ``plan.seed``), with drift
    sentinels every ``plan.sentinel_every`` launches (the resolved value; 0 = none), into ``run_id``.

    Each launch is written (the point with all its launches so far, in one transaction) as soon
    as it ends, so an interrupted run loses at most one launch and a second call measures only
    the missing launches. A failed launch marks its point failed and cancels its later launches.
    Before each launch the GPU is checked (:func:`busy_gpu_check`). Returns the stored points."""
    seed = plan.seed if plan.seed is not None else 0
    every = int(plan.sentinel_every or 0)
    schedule = sweep_schedule(len(items), plan.launches, seed, reference_items(items), every)
    have, done, seq = _stored_progress(store, run_id, items, label, retry_failed, plan.launches)
    todo = remaining(schedule, done)
    log_dir = log_dir or run_log_dir(store.path, run_id)
    state = state or SweepState()
    failed_items: set[int] = {i for (i, sent), p in have.items() if not sent and p.status != "ok"}
    with SweepDisplay(len(todo), progress) as disp:
        for n, slot in enumerate(todo, start=len(schedule) - len(todo) + 1):
            b, spec, engine = items[slot.item]
            if slot.item in failed_items:   # a failed launch ends its point (and a failed reference its sentinels)
                disp.skip()
                continue
            disp.point(n, len(schedule), b, spec, slot, plan.launches)
            busy = busy_gpu_check(allow_busy)
            if host_busy:
                busy = {**(busy or {}), **host_busy}
            own = point_label(b, spec, label)
            one = _measure_once(b, plan.model_path, spec, plan, run_id, sentinel_label(own) if slot.sentinel else own,
                                log_dir=log_dir, on_phase=disp.phase, state=state, engine=engine, busy=busy,
                                launch=slot.launch)
            seq += 1
            key = (slot.item, slot.sentinel)
            p = merge_launch(have.get(key), one, slot.launch, seq)
            store.record_point(p)
            have[key] = p
            if p.status != "ok" and not slot.sentinel:
                failed_items.add(slot.item)
            disp.done(one, slot, plan.launches)
    return [have[k] for k in sorted(have, key=lambda k: (k[1], k[0]))]
