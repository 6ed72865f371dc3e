"""Run a plan: every point on every build, one fresh llama-server per point, into the store.

Per point (server engine): start llama-server with ``-np 1 -ncmoe N`` and no ``-c`` (llama.cpp
fits the context), wait for ``/health``, read the fitted context from ``/props``, send one
discarded warm-up ``/completion`` (stored with ``warmup=1``), then ``repeats`` measured ones, stop
the server gracefully (its final ``fit_memory_breakdown`` is parsed from the JSONL log). Memory is
sampled throughout by :class:`~llamaforge.bench.monitor.Monitor`. A point and its samples are
written in one transaction when it finishes, so an interrupted sweep loses at most the point in
flight; ``resume_run`` measures only what is missing. A failing point is stored with its failure
class and log tail, and the sweep goes on.

Public API (used by ``bench``/``demo``/``compare``/``bisect``):

* :func:`run_sweep` — a whole plan → run id.
* :func:`measure_point` — one point on one build into an existing run (compare/bisect interleave
  A/B points with it, distinguishing sides by ``label``).
* :func:`point_summary` — medians / IQR / CI of a stored point.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table

from ..console import console, notice
from ..errors import BenchError
from ..gpu import free_vram_mib, other_gpu_processes
from ..hostlock import HostLock, describe, holder
from ..stats import summarize
from ..store import Point, Sample, Store
from .monitor import Monitor, MonitorResult
from .plan import BuildLike, FitOptions, Plan, PointSpec
from .prompts import Prompt, build_prompt
from .server import PointFailure, ServerSession, parse_memory_breakdown, read_log_tail, supported_flags
from .telemetry import describe as describe_telemetry
from .telemetry import flags as telemetry_flags

PhaseFn = Callable[[str], None]
_NO_GPU_BACKENDS = ("cpu",)


@dataclass
class SweepState:
    """Per-run caches shared by the points of a run."""

    prompts: dict[str, Prompt] = field(default_factory=dict)   # by build key (tokenizers may differ)


# ----------------------------------------------------------------------------------------- fit


#: llama.cpp's own default ``-fitt`` margin (MiB per device)
LLAMA_DEFAULT_FIT_MARGIN_MIB = 1024


def budget_margins(free_mib: Sequence[float], budget_gib: float) -> list[int]:
    """``-fitt`` margins that make each device behave like a card of ``budget_gib``.

    A real card of that size would still get llama.cpp's default 1 GiB margin and lose some
    memory to the driver context, so the margin is free − budget + 1 GiB: the model, context and
    compute buffers then get budget − 1 GiB, and the process (CUDA context included) ends near
    the budget. (Until 2026-11-29 the margin was free − budget, which let a "24 GiB card" use
    about 25.3 GiB in all — the committed H200 report says which it used.)"""
    budget = budget_gib * 1024
    return [max(0, int(f - budget + LLAMA_DEFAULT_FIT_MARGIN_MIB)) for f in free_mib]


def resolve_fit(fit: FitOptions, backends: Sequence[str]) -> FitOptions:
    """Turn ``vram_budget_gib`` into per-device ``-fitt`` margins (see :func:`budget_margins`)."""
    if fit.vram_budget_gib is None or fit.margins_mib is not None:
        return fit
    if fit.fitt_mib is not None:
        raise BenchError("--vram-budget and --fitt both set the fit margin", "give only one of them")
    if all(b in _NO_GPU_BACKENDS for b in backends):
        fit.notice = "--vram-budget ignored: only CPU builds in this run"
        notice(fit.notice)
        return fit
    free = free_vram_mib()
    if not free:
        fit.notice = "--vram-budget ignored: no NVIDIA GPU visible through NVML"
        notice(fit.notice)
        return fit
    budget = fit.vram_budget_gib * 1024
    fit.margins_mib = budget_margins(free, fit.vram_budget_gib)
    small = [i for i, f in enumerate(free) if f < budget]
    if small:
        fit.notice = (f"device(s) {small} have less free memory than the {fit.vram_budget_gib:g} GiB budget; "
                      "they use all their free memory")
        notice(fit.notice)
    return fit


def fitt_for(build: BuildLike, plan: Plan) -> str | None:
    """The ``-fitt`` argument for a build (budget-derived margins only apply to GPU backends)."""
    if plan.fit.fitt_mib is not None:
        return str(plan.fit.fitt_mib)
    if plan.fit.margins_mib and build.backend not in _NO_GPU_BACKENDS:
        return plan.fit.fitt_arg()
    return None


# ------------------------------------------------------------------------------ server engine


def server_args(build: BuildLike, model_path: Path, spec: PointSpec, plan: Plan) -> list[str]:
    """The llama-server arguments of a point (without host/port), checked against ``--help``."""
    binary = build.binary("llama-server")
    flags = supported_flags(binary, build.env)
    args = ["-m", str(model_path), "-np", "1"]
    if "--no-mmproj" in flags:
        args.append("--no-mmproj")
    if "--log-jsonl" in flags:
        args.append("--log-jsonl")
    if "--no-webui" in flags:
        args.append("--no-webui")
    if spec.ncmoe:
        if "--n-cpu-moe" not in flags:
            raise PointFailure("error", "this llama-server has no --n-cpu-moe option")
        args += ["--n-cpu-moe", str(spec.ncmoe)]
    if spec.ngl != -1:
        args += ["-ngl", str(spec.ngl)]
    fitt = fitt_for(build, plan)
    if fitt is not None:
        if "--fit-target" not in flags:
            raise PointFailure("error", "this llama-server has no --fit-target option")
        args += ["--fit-target", fitt]
    if plan.threads:
        args += ["-t", str(plan.threads)]
    return args + list(plan.extra_args) + list(spec.extra_args)


def _sample(idx: int, warmup: bool, resp: dict) -> Sample:
    t = resp.get("timings") or {}
    raw = {k: v for k, v in resp.items() if k not in ("prompt", "tokens")}  # the prompt echo is large
    return Sample(idx=idx, warmup=warmup, prompt_n=t.get("prompt_n"), prompt_ms=t.get("prompt_ms"),
                  pp_tps=t.get("prompt_per_second"), predicted_n=t.get("predicted_n"),
                  predicted_ms=t.get("predicted_ms"), tg_tps=t.get("predicted_per_second"), raw=raw)


def _log_path(log_dir: Path, build: BuildLike, spec: PointSpec, engine: str, label: str) -> Path:
    name = f"{build.key}-{engine}-ncmoe{spec.ncmoe}-ngl{spec.ngl}" + (f"-{label}" if label else "")
    return log_dir / ("".join(c if c.isalnum() or c in "-_." else "_" for c in name) + ".log")


def store_monitor(point: Point, mres: MonitorResult) -> None:
    """Memory, host-memory split and telemetry of a Monitor into a point (``extra``: host_mem, telemetry)."""
    point.rss_peak_mib = mres.rss_peak_mib
    point.vram_used_mib = mres.vram_used_mib
    point.vram_total_mib = mres.vram_total_mib
    point.vram_self_mib = mres.vram_self_mib
    extra = dict(point.extra or {})
    if mres.host_mem() is not None:
        extra["host_mem"] = mres.host_mem()
    if mres.telemetry is not None:
        extra["telemetry"] = mres.telemetry
    point.extra = extra


def _measure_server(point: Point, build: BuildLike, model_path: Path, spec: PointSpec, plan: Plan,
                    log_path: Path, state: SweepState, on_phase: PhaseFn) -> None:
    """Fill ``point`` (raises PointFailure after filling what it could)."""
    on_phase("starting")
    args = server_args(build, model_path, spec, plan)
    point.command = [str(build.binary("llama-server")), *args]
    monitor = Monitor(pid=0)
    session: ServerSession | None = None

    def spawned(pid: int) -> None:
        monitor.pid = pid
        if not monitor.is_alive():
            monitor.start()

    try:
        session = ServerSession.start(build.binary("llama-server"), args, log_path, env=build.env,
                                      load_timeout_s=plan.load_timeout_s, on_phase=on_phase, on_spawn=spawned)
        point.command = session.args
        point.t_load_s = session.t_load_s
        props = session.props()
        point.n_ctx = (props.get("default_generation_settings") or {}).get("n_ctx")
        point.build_info = props.get("build_info")
        meta = session.model_meta()
        point.n_ctx_train = meta.get("n_ctx_train") or (plan.model_facts.get("n_ctx_train") or None)
        prompt = state.prompts.get(build.key)
        if prompt is None:
            on_phase("prompt")
            prompt = build_prompt(plan.prompt_tokens, tokenize=session.tokenize, apply_template=session.apply_template)
            state.prompts[build.key] = prompt
        point.prompt_tokens = prompt.n_tokens
        extra: dict[str, Any] = {"prompt": prompt.to_dict(), "model_meta": meta}
        point.extra = extra
        if point.n_ctx and prompt.n_tokens + plan.n_predict > point.n_ctx:
            raise PointFailure("fit", f"the fitted context ({point.n_ctx}) is smaller than prompt + n_predict "
                               f"({prompt.n_tokens} + {plan.n_predict})")
        if plan.warmup:
            on_phase("warm-up")
            t0 = time.monotonic()
            resp = session.complete(prompt.tokens, plan.n_predict, timeout=plan.request_timeout_s)
            point.t_warmup_s = time.monotonic() - t0
            point.samples.append(_sample(0, True, resp))
        t0 = time.monotonic()
        for i in range(plan.repeats):
            on_phase(f"measuring {i + 1}/{plan.repeats}")
            resp = session.complete(prompt.tokens, plan.n_predict, timeout=plan.request_timeout_s)
            s = _sample(i + 1, False, resp)
            point.samples.append(s)
            if s.predicted_n is not None and s.predicted_n != plan.n_predict:
                extra.setdefault("warnings", []).append(
                    f"request {i + 1} generated {s.predicted_n} tokens, not {plan.n_predict}")
        point.t_measure_s = time.monotonic() - t0
    finally:
        on_phase("stopping")
        if session is not None:
            session.stop()
        mres = monitor.stop() if monitor.is_alive() else monitor.result
        store_monitor(point, mres)
        point.mem_breakdown = parse_memory_breakdown(log_path)
        devs = (point.mem_breakdown or {}).get("devices") or []
        if point.vram_self_mib is None and devs:
            # no NVML (e.g. a Vulkan device of another vendor): take what llama.cpp itself reports
            point.vram_self_mib = float(sum(d.get("self", 0) for d in devs))
            point.extra = {**(point.extra or {}), "vram_self_source": "fit_memory_breakdown"}


def measure_point(build: BuildLike, model_path: Path, point_spec: PointSpec, plan: Plan, store: Store, run_id: str,
                  label: str = "", *, log_dir: Path | None = None, on_phase: PhaseFn | None = None,
                  state: SweepState | None = None, engine: str | None = None, busy: dict | None = None) -> Point:
    """Measure one point on one build and store it (also when it fails). Returns the stored Point.

    ``engine`` overrides the plan's (``--engine both`` measures each point with both);
    ``busy`` (what ``--allow-busy`` let through) is recorded in the point's ``extra``."""
    on_phase = on_phase or (lambda _s: None)
    state = state or SweepState()
    log_dir = log_dir or (store.path.parent / "logs" / run_id)
    engine = engine or plan.engine
    if engine == "both":
        engine = "server"
    log_path = _log_path(log_dir, build, point_spec, engine, label)
    point = Point(run_id=run_id, build_key=build.key, engine=engine, ncmoe=point_spec.ncmoe, ngl=point_spec.ngl,
                  label=label, n_predict=plan.n_predict, started=time.time())
    try:
        if engine == "server":
            _measure_server(point, build, model_path, point_spec, plan, log_path, state, on_phase)
        else:
            from .llamabench import measure_llamabench

            bplan = plan
            if plan.engine == "both":  # the cross-check: tg at a depth equal to the prompt, like the server's
                bplan = dataclasses.replace(plan, bench_depths=sorted({*plan.bench_depths, plan.prompt_tokens}))
            measure_llamabench(point, build, model_path, point_spec, bplan, log_path, on_phase)
        point.status = "ok"
    except PointFailure as e:
        point.status = "failed"
        point.failure_class = e.cls
        point.failure_detail = e.detail
        point.log_tail = e.log_tail if e.log_tail is not None else read_log_tail(log_path)
    if busy:
        point.extra = {**(point.extra or {}), "busy": busy}
    point.finished = time.time()
    store.record_point(point)
    return point


# ----------------------------------------------------------------------------------- summaries


def point_summary(p: Point) -> dict:
    """Median/IQR/CI (``stats.summarize``) of pp and tg per test, warm-ups excluded."""
    tests = sorted({s.test for s in p.samples if not s.warmup}) or [""]
    out: dict[str, Any] = {}
    for test in tests:
        pp = summarize(p.measured("pp_tps", test))
        tg = summarize(p.measured("tg_tps", test))
        key = test or "server"
        out[key] = {"pp": pp.to_dict() if pp else None, "tg": tg.to_dict() if tg else None}
    out["unstable"] = any((v or {}).get(m) and v[m]["unstable"] for v in out.values() if isinstance(v, dict)
                          for m in ("pp", "tg"))
    return out


def _fmt_metric(p: Point, metric: str, *, with_n: bool = True) -> str:
    """``median ±IQR/2`` per test (``⚠`` when unstable), with the count unless ``with_n`` is off."""
    tests = sorted({s.test for s in p.samples if not s.warmup and getattr(s, metric) is not None})
    parts = []
    for t in tests or [""]:
        s = summarize(p.measured(metric, t))
        if s:
            txt = s.fmt(1) if with_n else (f"{s.median:,.1f}" + (f" ±{s.iqr / 2:,.1f}" if s.n > 1 else "")
                                          + (" ⚠" if s.unstable else ""))
            parts.append((f"{t}: " if t else "") + txt)
    return "; ".join(parts) or "–"


def points_table(points: Sequence[Point], title: str | None = None) -> Table:
    """Finished points: context, memory, speeds as ``median ±IQR/2`` (n = measured requests)."""
    tab = Table(title=title, show_lines=False, caption="t/s: median ±IQR/2 over n measured requests; ⚠ CV > 10 %")
    for col in ("build", "ncmoe", "ngl", "status", "ctx", "RSS MiB", "VRAM MiB", "prompt", "n", "pp t/s", "tg t/s"):
        tab.add_column(col, justify="right" if col not in ("build", "status") else "left",
                       no_wrap=col not in ("pp t/s", "tg t/s", "build"))
    for p in points:
        vram = p.vram_self_mib if p.vram_self_mib is not None else p.vram_used_mib
        status = p.status if p.status == "ok" else f"[red]{p.failure_class}[/]"
        n = len({(s.test, s.idx) for s in p.samples if not s.warmup and s.test == (p.samples[-1].test if p.samples else "")})
        tab.add_row(p.build_key, str(p.ncmoe), "all" if p.ngl == -1 else str(p.ngl), status,
                    f"{p.n_ctx:,}" if p.n_ctx else "–", f"{p.rss_peak_mib:,.0f}" if p.rss_peak_mib else "–",
                    f"{vram:,.0f}" if vram is not None else "–", str(p.prompt_tokens or "–"), str(n or "–"),
                    _fmt_metric(p, "pp_tps", with_n=False), _fmt_metric(p, "tg_tps", with_n=False))
    return tab


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
            "time": {"wall_s": wall_s, "load_s": t_load, "warmup_s": t_warm, "measure_s": t_meas}}


# --------------------------------------------------------------------------------------- sweep


class _Display:
    """Rich progress (point i/N, phase, ETA) plus one printed row per finished point."""

    def __init__(self, total: int, enabled: bool) -> None:
        self.enabled = enabled
        self.progress = Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(),
                                 MofNCompleteColumn(), TimeElapsedColumn(), TextColumn("ETA"),
                                 TimeRemainingColumn(), console=console, transient=True, disable=not enabled)
        self.task = self.progress.add_task("", total=total)
        self.head = ""

    def __enter__(self) -> _Display:
        self.progress.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.__exit__(*exc)

    def point(self, i: int, n: int, build: BuildLike, spec: PointSpec) -> None:
        self.head = f"point {i}/{n} {build.backend} ncmoe={spec.ncmoe}" + (f" ngl={spec.ngl}" if spec.ngl != -1 else "")

    def phase(self, phase: str) -> None:
        self.progress.update(self.task, description=f"{self.head} [cyan]{phase}[/]")

    def done(self, p: Point) -> None:
        self.progress.advance(self.task)
        if p.status == "ok":
            line = (f"[green]✓[/] {p.build_key[:24]} ncmoe={p.ncmoe:<3} ctx={p.n_ctx or '–':<8} "
                    f"pp {_fmt_metric(p, 'pp_tps')}  tg {_fmt_metric(p, 'tg_tps')}"
                    + (f"  RSS {p.rss_peak_mib:,.0f} MiB" if p.rss_peak_mib else "")
                    + (f"  VRAM {p.vram_self_mib or p.vram_used_mib:,.0f} MiB"
                       if (p.vram_self_mib or p.vram_used_mib) else "")
                    + (f" [dim]({p.engine})[/]" if p.engine != "server" else ""))
            tel = (p.extra or {}).get("telemetry")
            if telemetry_flags(tel):
                line += f"  [yellow]⚑ {describe_telemetry(tel)}[/]"
        else:
            line = f"[red]✗[/] {p.build_key[:24]} ncmoe={p.ncmoe:<3} [red]{p.failure_class}[/]: {p.failure_detail}"
        if self.enabled:
            self.progress.console.print(line, soft_wrap=True)


def _build_manifest(b: BuildLike) -> dict:
    return {**(b.manifest or {}), "key": b.key, "backend": b.backend, "pin": b.pin, "commit": b.commit}


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


def run_sweep(plan: Plan, builds: list[BuildLike], store: Store, paths: Any, *, resume_run: str | None = None,
              kind: str = "sweep", label: str = "", retry_failed: bool = False, command: str | None = None,
              name: str | None = None, progress: bool = True, allow_busy: bool = False,
              run_extra: dict | None = None) -> str:
    """Measure every (point, build) of ``plan`` that the run does not have yet. Returns the run id.

    Points are ordered point-major (all builds at ncmoe=0, then at the next N, ...) so builds
    compared side by side are measured close together in time. Failed points are kept on
    resume unless ``retry_failed``. The sweep holds the host-wide measurement lock
    (:mod:`llamaforge.hostlock`) and checks before each point that no other process computes on
    the GPU; ``allow_busy`` measures anyway and records it (run summary and each point's
    ``extra["busy"]``). ``run_extra`` is merged into the stored plan (e.g. ``reproduces``)."""
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
        return _run_sweep_locked(plan, builds, store, resume_run=resume_run, kind=kind, label=label,
                                 retry_failed=retry_failed, command=command, name=name, progress=progress,
                                 allow_busy=allow_busy, host_busy=host_busy, run_extra=run_extra)
    finally:
        lock.release()


def _run_sweep_locked(plan: Plan, builds: list[BuildLike], store: Store, *, resume_run: str | None, kind: str,
                      label: str, retry_failed: bool, command: str | None, name: str | None, progress: bool,
                      allow_busy: bool, host_busy: dict | None, run_extra: dict | None) -> str:
    plan.build_keys = [b.key for b in builds]
    if resume_run:
        run = store.get_run(resume_run)
        run_id = run.id
        done = store.done_keys(run_id, include_failed=not retry_failed)
        store.set_run_status(run_id, "running")
    else:
        from ..envinfo import collect_env

        plan.fit = resolve_fit(plan.fit, [b.backend for b in builds])
        run_id = store.new_run(kind, {**plan.to_json(), **(run_extra or {})}, command=command, env=collect_env(),
                               name=name, parent_run=(run_extra or {}).get("reproduces"))
        done = set()
    for b in builds:
        store.add_build(_build_manifest(b), run_id)
    log_dir = Path(store.path.parent) / "logs" / run_id
    engines = engines_of(plan)
    todo = [(spec, b, e) for spec in plan.points for b in builds for e in engines
            if (b.key, e, spec.ncmoe, spec.ngl, label) not in done]
    total = len(plan.points) * len(builds) * len(engines)
    state = SweepState()
    t0 = time.monotonic()
    status = "interrupted"
    try:
        with _Display(len(todo), progress) as disp:
            for i, (spec, b, e) in enumerate(todo, start=total - len(todo) + 1):
                disp.point(i, total, b, spec)
                busy = busy_gpu_check(allow_busy)
                if host_busy:
                    busy = {**(busy or {}), **host_busy}
                p = measure_point(b, plan.model_path, spec, plan, store, run_id, label, log_dir=log_dir,
                                  on_phase=disp.phase, state=state, engine=e, busy=busy)
                disp.done(p)
        status = "done"
    finally:
        with contextlib.suppress(Exception):
            store.set_run_status(run_id, status)
            summary = run_summary(store, run_id, time.monotonic() - t0)
            if allow_busy:
                summary["allow_busy"] = True
            store.set_run_summary(run_id, summary)
    return run_id


def print_run(store: Store, run_id: str) -> None:
    """The per-point table of a run, with a note on unstable points."""
    run = store.get_run(run_id)
    pts = store.points(run_id)
    console.print(points_table(pts, title=f"run {run.id} ({run.kind}, {run.status})"))
    s = run_summary(store, run_id)
    if s["unstable_points"]:
        notice(f"{s['unstable_points']} point(s) have a coefficient of variation above 10 % (⚠): "
               "raise --repeats or check for background load")
    if s["failed"]:
        notice(f"{s['failed']} point(s) failed: " + ", ".join(f"{k}×{v}" for k, v in s["failures"].items())
               + f" (log tails: `llamaforge runs {run.id}`; logs under results/logs/{run.id}/)")
