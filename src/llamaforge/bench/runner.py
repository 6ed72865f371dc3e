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
* :func:`measure_points` — a list of (build, point, engine) in K interleaved launches each (plus
  drift sentinels) into an existing run: what ``run_sweep`` (and so ``reproduce``) call.
* :func:`measure_point` — one point on one build in one launch into an existing run (compare/bisect
  interleave A/B points with it, distinguishing sides by ``label``).
* :func:`point_summary` — medians / IQR / CI of a stored point.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
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

from ..build.options import build_options
from ..console import console, esc, notice
from ..errors import BenchError, BuildError
from ..gpu import other_gpu_processes
from ..hostlock import HostLock, describe, holder
from ..locks import run_lock
from ..quirks import describe_failure
from ..records import build_manifest
from ..stats import cluster_summary, summarize
from ..store import Point, Sample, Store
from . import adjust
from .fit import fitt_for, resolve_fit
from .fitmap import fit_params
from .monitor import Monitor, store_monitor
from .plan import BuildLike, Plan, PointSpec
from .prompts import Prompt, build_prompt
from .schedule import SENTINEL_LABEL, Slot, default_sentinel_every, remaining, sweep_schedule
from .server import PointFailure, ServerSession, fit_refusal, parse_memory_breakdown, read_log_tail
from .telemetry import describe as describe_telemetry
from .telemetry import flags as telemetry_flags

PhaseFn = Callable[[str], None]
Item = tuple[BuildLike, PointSpec, str]   # (build, point, engine)
#: measures a list of items with a plan into the run (see run_sweep's ``driver``)
MeasureItems = Callable[[Sequence[Item], Plan], list[Point]]
Driver = Callable[[MeasureItems, str], None]


@dataclass
class SweepState:
    """Per-run caches shared by the points of a run."""

    prompts: dict[str, Prompt] = field(default_factory=dict)   # by build key (tokenizers may differ)
    # builds whose server rejects non-UTF-8 output (HTTP 500): token ids banned in their requests
    banned: dict[str, list[int]] = field(default_factory=dict)
    banned_why: dict[str, str] = field(default_factory=dict)


#: what a llama-server whose output parser rejects invalid UTF-8 answers (llama.cpp 78d2f5246 and near it)
_OUTPUT_PARSE_ERROR = re.compile(r"does not match the expected [\w -]+ format")


def _complete(session: ServerSession, build: BuildLike, model_path: Path, prompt: Prompt, plan: Plan,
              state: SweepState, extra: dict) -> dict:
    """One ``/completion``; when the server rejects its own output as malformed (not whole UTF-8),
    retry once with the model's incomplete-UTF-8 tokens banned, and keep them banned for this build."""
    banned = state.banned.get(build.key)
    try:
        resp = session.complete(prompt.tokens, plan.n_predict, timeout=plan.request_timeout_s, banned=banned)
    except PointFailure as e:
        if banned is not None or e.cls != "bad-response" or not _OUTPUT_PARSE_ERROR.search(e.detail):
            raise
        from ..models.utf8 import incomplete_utf8_tokens

        banned = incomplete_utf8_tokens(model_path)
        if not banned:
            raise
        state.banned[build.key] = banned
        state.banned_why[build.key] = e.detail[:300]
        notice(f"{build.key}: llama-server rejected its own non-UTF-8 output ({e.detail[:120]}); "
               f"measuring with the model's {len(banned)} incomplete-UTF-8 tokens banned (logit_bias)")
        resp = session.complete(prompt.tokens, plan.n_predict, timeout=plan.request_timeout_s, banned=banned)
    if banned is not None:
        extra["output_guard"] = {"banned_tokens": len(banned), "why": state.banned_why.get(build.key, ""),
                                 "how": "logit_bias false for tokens that are not whole UTF-8 (models.utf8)"}
    return resp


# ------------------------------------------------------------------------------ server engine


def server_args(build: BuildLike, model_path: Path, spec: PointSpec, plan: Plan, *,
                ctx: int | None = None) -> list[str]:
    """The llama-server arguments of a point (without host/port), built from what this binary
    supports (its ``--help`` options in the build manifest, see :mod:`llamaforge.build.options`):
    ``-ncmoe`` or its ``-ot`` equivalent, ``-fitt`` only where the server can fit, ``-c`` from
    ``ctx`` (a fit-refused re-run) or the plan's ``--ctx``."""
    opts = build_options(build)
    flags = opts.server
    args = ["-m", str(model_path), "-np", "1"]
    for flag in ("--no-mmproj", "--log-jsonl", "--no-webui"):
        if flag in flags:
            args.append(flag)
    if spec.ncmoe:
        try:
            args += opts.ncmoe_args("llama-server", spec.ncmoe)
        except BuildError as e:
            raise PointFailure("error", f"{e.message} ({e.fix})") from e
    if spec.ngl != -1:
        args += ["-ngl", str(spec.ngl)]
    ctx = ctx if ctx is not None else plan.ctx
    if ctx is not None:
        args += ["-c", str(ctx)]
    fitt = fitt_for(build, plan)
    if fitt is not None and opts.server_fit:
        args += ["--fit-target", fitt]
    if plan.threads:
        args += ["-t", str(plan.threads)]
    args += adjust.extra_args(build, plan, "llama-server")     # recorded quirks, CPU-Vulkan defaults
    return args + list(plan.extra_args) + list(spec.extra_args)


def fit_status_of(build: BuildLike, plan: Plan) -> str:
    """How the context of this build's points is chosen before any run: ``fitted`` / ``fixed`` / ``unsupported``."""
    if plan.ctx is not None:
        return "fixed"
    return "fitted" if build_options(build).server_fit else "unsupported"


def _sample(idx: int, warmup: bool, resp: dict) -> Sample:
    t = resp.get("timings") or {}
    raw = {k: v for k, v in resp.items() if k not in ("prompt", "tokens")}  # the prompt echo is large
    return Sample(idx=idx, warmup=warmup, prompt_n=t.get("prompt_n"), prompt_ms=t.get("prompt_ms"),
                  pp_tps=t.get("prompt_per_second"), predicted_n=t.get("predicted_n"),
                  predicted_ms=t.get("predicted_ms"), tg_tps=t.get("predicted_per_second"), raw=raw)


def _log_path(log_dir: Path, build: BuildLike, spec: PointSpec, engine: str, label: str) -> Path:
    name = f"{build.key}-{engine}-ncmoe{spec.ncmoe}-ngl{spec.ngl}" + (f"-{label}" if label else "")
    return log_dir / ("".join(c if c.isalnum() or c in "-_." else "_" for c in name) + ".log")


def _measure_server(point: Point, build: BuildLike, model_path: Path, spec: PointSpec, plan: Plan,
                    log_path: Path, state: SweepState, on_phase: PhaseFn) -> None:
    """Fill ``point`` (raises PointFailure after filling what it could).

    When the server logs that it refused to fit (tensor overrides such as ``-ncmoe`` set, in some
    llama.cpp versions) it has loaded unfitted: that first load is stopped, its log kept beside
    the point's (``.unfitted.log``), and the point is measured again with ``-c`` from
    ``llama-fit-params`` where the build has it (``fit_status`` ``refused``), else measured as
    loaded (``refused-unfitted``)."""
    on_phase("starting")
    args = server_args(build, model_path, spec, plan)
    point.command = [str(build.binary("llama-server")), *args]
    fit_status = fit_status_of(build, plan)
    ctx_info: dict[str, Any] = {"fit_status": fit_status}
    if fitt_for(build, plan) is not None and not build_options(build).server_fit:
        ctx_info["fit_note"] = "--fitt/--vram-budget ignored: this llama-server cannot fit"
    point.extra = dict(ctx_info)
    monitor = Monitor(pid=0)
    session: ServerSession | None = None

    def spawned(pid: int) -> None:
        monitor.pid = pid
        if not monitor.is_alive():
            monitor.start()

    def start(server_argv: list[str]) -> ServerSession:
        return ServerSession.start(build.binary("llama-server"), server_argv, log_path, env=build.env,
                                   load_timeout_s=plan.load_timeout_s, on_phase=on_phase, on_spawn=spawned)

    try:
        session = start(args)
        refused = fit_refusal(log_path) if fit_status == "fitted" else None
        if refused is not None:
            ctx_info.update(fit_status="refused-unfitted", fit_refused=refused)
            if build_options(build).has_fit_params:
                session.stop()
                session = None
                monitor.stop()
                monitor = Monitor(pid=0)
                log_path.replace(log_path.with_suffix(".unfitted.log"))
                on_phase("fitting (llama-fit-params)")
                fit = fit_params(build, model_path, spec, fitt=fitt_for(build, plan), threads=plan.threads,
                                 extra_args=adjust.extra_args(build, plan, "llama-fit-params"))
                ctx_info["fit"] = fit.to_dict()
                if fit.ok and fit.n_ctx:
                    ctx_info["fit_status"] = "refused"
                    args = server_args(build, model_path, spec, plan, ctx=fit.n_ctx)
                else:
                    ctx_info["fit_note"] = "llama-fit-params found no fit either: measured unfitted"
                session = start(args)
            point.extra = dict(ctx_info)
        meta = _server_facts(point, session, plan)
        prompt = state.prompts.get(build.key)
        if prompt is None:
            on_phase("prompt")
            prompt = build_prompt(adjust.prompt_tokens(build, plan), tokenize=session.tokenize,
                                  apply_template=session.apply_template)
            state.prompts[build.key] = prompt
        point.prompt_tokens = prompt.n_tokens
        extra: dict[str, Any] = {**ctx_info, "prompt": prompt.to_dict(), "model_meta": meta}
        point.extra = extra
        if point.n_ctx and prompt.n_tokens + plan.n_predict > point.n_ctx:
            raise PointFailure("fit", f"the fitted context ({point.n_ctx}) is smaller than prompt + n_predict "
                               f"({prompt.n_tokens} + {plan.n_predict})")
        _requests(point, session, build, model_path, prompt, plan, state, extra, on_phase)
    finally:
        on_phase("stopping")
        if session is not None:
            session.stop()
        mres = monitor.stop() if monitor.is_alive() else monitor.result
        store_monitor(point, mres)
        _record_breakdown(point, log_path)


def _server_facts(point: Point, session: ServerSession, plan: Plan) -> dict:
    """What the loaded server says about itself into the point (command, load time, context, build);
    returns the model's metadata."""
    point.command = session.args
    point.t_load_s = session.t_load_s
    props = session.props()
    point.n_ctx = (props.get("default_generation_settings") or {}).get("n_ctx")
    point.build_info = props.get("build_info")
    meta = session.model_meta()
    point.n_ctx_train = meta.get("n_ctx_train") or (plan.model_facts.get("n_ctx_train") or None)
    return meta


def _requests(point: Point, session: ServerSession, build: BuildLike, model_path: Path, prompt: Prompt, plan: Plan,
              state: SweepState, extra: dict, on_phase: PhaseFn) -> None:
    """The warm-up (kept, flagged) and the measured requests of one server start."""
    if plan.warmup:
        on_phase("warm-up")
        t0 = time.monotonic()
        resp = _complete(session, build, model_path, prompt, plan, state, extra)
        point.t_warmup_s = time.monotonic() - t0
        point.samples.append(_sample(0, True, resp))
    t0 = time.monotonic()
    for i in range(plan.repeats):
        on_phase(f"measuring {i + 1}/{plan.repeats}")
        resp = _complete(session, build, model_path, prompt, plan, state, extra)
        s = _sample(i + 1, False, resp)
        point.samples.append(s)
        if s.predicted_n is not None and s.predicted_n != plan.n_predict:
            extra.setdefault("warnings", []).append(
                f"request {i + 1} generated {s.predicted_n} tokens, not {plan.n_predict}")
    point.t_measure_s = time.monotonic() - t0


def _record_breakdown(point: Point, log_path: Path) -> None:
    """llama.cpp's memory breakdown from the server log; its device total where NVML had none."""
    point.mem_breakdown = parse_memory_breakdown(log_path)
    devs = (point.mem_breakdown or {}).get("devices") or []
    if point.vram_self_mib is None and devs:
        # no NVML (e.g. a Vulkan device of another vendor): take what llama.cpp itself reports
        point.vram_self_mib = float(sum(d.get("self", 0) for d in devs))
        point.extra = {**(point.extra or {}), "vram_self_source": "fit_memory_breakdown"}


def measure_point(build: BuildLike, model_path: Path, point_spec: PointSpec, plan: Plan, store: Store, run_id: str,
                  label: str = "", *, log_dir: Path | None = None, on_phase: PhaseFn | None = None,
                  state: SweepState | None = None, engine: str | None = None, busy: dict | None = None) -> Point:
    """Measure one point on one build (one launch) and store it (also when it fails). Returns the stored Point.

    ``engine`` overrides the plan's (``--engine both`` measures each point with both);
    ``busy`` (what ``--allow-busy`` let through) is recorded in the point's ``extra``."""
    log_dir = log_dir or (store.path.parent / "logs" / run_id)
    point = _measure_once(build, model_path, point_spec, plan, run_id, label, log_dir=log_dir, on_phase=on_phase,
                          state=state, engine=engine, busy=busy)
    store.record_point(point)
    return point


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
    try:
        if engine == "server":
            _measure_server(point, build, model_path, point_spec, plan, log_path, state, on_phase)
        else:
            from .llamabench import measure_llamabench

            bplan = plan
            if plan.engine == "both":  # the cross-check: tg at a depth equal to the prompt, like the server's
                depth = adjust.prompt_tokens(build, plan)
                bplan = dataclasses.replace(plan, bench_depths=sorted({*plan.bench_depths, depth}))
            measure_llamabench(point, build, model_path, point_spec, bplan, log_path, on_phase)
        point.status = "ok"
    except PointFailure as e:
        point.status = "failed"
        point.failure_class = e.cls
        point.log_tail = e.log_tail if e.log_tail is not None else read_log_tail(log_path)
        point.failure_detail = describe_failure(e.detail, point.log_tail or "")   # + signal, likely cause
    if busy:
        point.extra = {**(point.extra or {}), "busy": busy}
    point.finished = time.time()
    for smp in point.samples:
        smp.launch = launch or 1
    return point


def _launch_record(one: Point, launch: int, seq: int) -> dict:
    return {"launch": launch, "seq": seq, "status": one.status, "failure_class": one.failure_class,
            "started": one.started, "finished": one.finished, "n_ctx": one.n_ctx, "rss_peak_mib": one.rss_peak_mib,
            "vram_self_mib": one.vram_self_mib, "vram_used_mib": one.vram_used_mib, "t_load_s": one.t_load_s,
            "telemetry": (one.extra or {}).get("telemetry"), "host_mem": (one.extra or {}).get("host_mem"),
            "busy": (one.extra or {}).get("busy")}


def _max(a: float | None, b: float | None) -> float | None:
    return b if a is None else a if b is None else max(a, b)


def merge_launch(acc: Point | None, one: Point, launch: int, seq: int) -> Point:
    """Fold one launch into the point that holds the earlier launches (``acc``; ``None`` for the first).

    Samples are appended (tagged with their launch); memory is the maximum over launches; times add
    up; the newest launch's command, log-derived breakdown and build info win; a failed launch
    makes the point failed (its earlier samples are kept). ``extra.launches`` lists every launch
    with its position ``seq`` in the run's schedule (the drift sentinels need it) and its own
    telemetry / host memory; the point-level ``telemetry`` is the first flagged launch's (else the
    newest), so a point shows as throttled/loaded when any of its launches was."""
    rec = _launch_record(one, launch, seq)
    if acc is None:
        one.extra = {**(one.extra or {}), "launches": [rec]}
        return one
    for f in ("rss_peak_mib", "vram_used_mib", "vram_self_mib", "vram_total_mib"):
        setattr(acc, f, _max(getattr(acc, f), getattr(one, f)))
    for f in ("t_load_s", "t_warmup_s", "t_measure_s"):
        a, b = getattr(acc, f), getattr(one, f)
        setattr(acc, f, None if a is None and b is None else (a or 0.0) + (b or 0.0))
    extra = dict(acc.extra or {})
    if acc.n_ctx is None:
        acc.n_ctx = one.n_ctx
    elif one.n_ctx is not None and one.n_ctx != acc.n_ctx:
        extra.setdefault("warnings", []).append(f"launch {launch} fitted n_ctx {one.n_ctx}, not {acc.n_ctx}")
    acc.n_ctx_train = acc.n_ctx_train or one.n_ctx_train
    acc.prompt_tokens = acc.prompt_tokens or one.prompt_tokens
    acc.command = one.command or acc.command
    acc.build_info = one.build_info or acc.build_info
    acc.mem_breakdown = one.mem_breakdown or acc.mem_breakdown
    acc.finished = one.finished
    new = one.extra or {}
    for k, v in new.items():
        if k == "warnings":
            extra.setdefault("warnings", []).extend(f"launch {launch}: {w}" for w in v)
        elif k == "telemetry":
            if not telemetry_flags(extra.get("telemetry")):
                extra["telemetry"] = v
        elif k in ("host_mem", "busy"):
            extra[k] = v if k == "host_mem" or v else extra.get(k)
        elif k != "launches":
            extra.setdefault(k, v)
    extra["launches"] = [*(extra.get("launches") or []), rec]
    acc.extra = extra
    acc.samples = [*acc.samples, *one.samples]
    if one.status != "ok":
        acc.status, acc.failure_class, acc.failure_detail = one.status, one.failure_class, one.failure_detail
        acc.log_tail = one.log_tail
    return acc


# ----------------------------------------------------------------------------------- summaries


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


def _fmt_metric(p: Point, metric: str, *, with_n: bool = True) -> str:
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


def _shape(p: Point) -> str:
    """``K×R`` (launches × requests per launch) of a point's measured samples."""
    metric = "tg_tps" if any(s.tg_tps is not None for s in p.samples) else "pp_tps"
    test = next((s.test for s in reversed(p.samples) if not s.warmup), "")
    cs = cluster_summary(p.launch_groups(metric, test), n_resamples=1)
    return cs.shape if cs else "–"


def points_table(points: Sequence[Point], title: str | None = None) -> Table:
    """Finished points: context, memory, speeds as ``median [95 % CI]`` (cluster bootstrap over launches;
    n = launches × requests per launch)."""
    tab = Table(title=title, show_lines=False,
                caption="t/s: median [95 % CI, cluster bootstrap over launches]; n = launches×requests; ⚠ CV > 10 %")
    for col in ("build", "ncmoe", "ngl", "status", "ctx", "RSS MiB", "VRAM MiB", "prompt", "n", "pp t/s", "tg t/s"):
        tab.add_column(col, justify="right" if col not in ("build", "status") else "left",
                       no_wrap=col not in ("pp t/s", "tg t/s", "build"))
    for p in points:
        vram = p.vram_self_mib if p.vram_self_mib is not None else p.vram_used_mib
        fit_status = (p.extra or {}).get("fit_status")
        status = p.status if p.status == "ok" else f"[red]{esc(p.failure_class)}[/]"
        if p.status == "ok" and fit_status in ("refused", "refused-unfitted", "unsupported"):
            status = f"[yellow]ok, fit {esc(fit_status)}[/]"
        n = _shape(p) if any(not s.warmup for s in p.samples) else ""
        tab.add_row(esc(p.build_key) + (f" [magenta]{esc(p.label)}[/]" if p.label else ""), str(p.ncmoe),
                    "all" if p.ngl == -1 else str(p.ngl), status,
                    f"{p.n_ctx:,}" if p.n_ctx else "–", f"{p.rss_peak_mib:,.0f}" if p.rss_peak_mib else "–",
                    f"{vram:,.0f}" if vram is not None else "–", str(p.prompt_tokens or "–"), n or "–",
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

    def point(self, i: int, n: int, build: BuildLike, spec: PointSpec, slot: Slot | None = None,
              launches: int = 1) -> None:
        self.head = esc(f"{i}/{n} {build.backend} ncmoe={spec.ncmoe}" + (f" ngl={spec.ngl}" if spec.ngl != -1 else ""))
        if slot is not None and slot.sentinel:
            self.head += f" [magenta]sentinel {slot.launch}[/]"
        elif slot is not None and launches > 1:
            self.head += f" launch {slot.launch}/{launches}"

    def skip(self) -> None:
        self.progress.advance(self.task)

    def phase(self, phase: str) -> None:
        self.progress.update(self.task, description=f"{self.head} [cyan]{esc(phase)}[/]")

    def done(self, p: Point, slot: Slot | None = None, launches: int = 1) -> None:
        self.progress.advance(self.task)
        tag = ""
        if slot is not None and slot.sentinel:
            tag = f" sentinel {slot.launch}"
        elif slot is not None and launches > 1:
            tag = f" L{slot.launch}/{launches}"
        if p.status == "ok":
            line = "[green]✓[/] " + esc(f"{p.build_key[:24]} ncmoe={p.ncmoe:<3}{tag} ctx={p.n_ctx or '–':<8} "
                                        f"pp {_fmt_metric(p, 'pp_tps')}  tg {_fmt_metric(p, 'tg_tps')}"
                                        + (f"  RSS {p.rss_peak_mib:,.0f} MiB" if p.rss_peak_mib else "")
                                        + (f"  VRAM {p.vram_self_mib or p.vram_used_mib:,.0f} MiB"
                                           if (p.vram_self_mib or p.vram_used_mib) else ""))
            line += f" [dim]({esc(p.engine)})[/]" if p.engine != "server" else ""
            tel = (p.extra or {}).get("telemetry")
            if telemetry_flags(tel):
                line += f"  [yellow]⚑ {esc(describe_telemetry(tel))}[/]"
        else:
            line = (f"[red]✗[/] {esc(f'{p.build_key[:24]} ncmoe={p.ncmoe:<3}{tag}')} [red]{esc(p.failure_class)}[/]: "
                    + esc(p.failure_detail))
        if self.enabled:
            self.progress.console.print(line, soft_wrap=True)


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
              run_extra: dict | None = None, driver: Driver | None = None) -> str:
    """Measure every (point, build) of ``plan`` that the run does not have yet. Returns the run id.

    Each (point, build, engine) item is measured in ``plan.launches`` server starts, scheduled by
    :func:`measure_points` (randomised blocks, seed recorded in the plan; drift sentinels per
    ``plan.sentinel_every``, resolved here: None → on for sweeps of more than 10 items). Failed
    points are kept on resume unless ``retry_failed``. The sweep holds the host-wide measurement lock
    (:mod:`llamaforge.hostlock`) and checks before each point that no other process computes on
    the GPU; ``allow_busy`` measures anyway and records it (run summary and each point's
    ``extra["busy"]``). ``run_extra`` is merged into the stored plan (e.g. ``reproduces``).

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
        return _run_sweep_locked(plan, builds, store, resume_run=resume_run, kind=kind, label=label,
                                 retry_failed=retry_failed, command=command, name=name, progress=progress,
                                 allow_busy=allow_busy, host_busy=host_busy, run_extra=run_extra, driver=driver)
    finally:
        lock.release()


def _run_sweep_locked(plan: Plan, builds: list[BuildLike], store: Store, *, resume_run: str | None, kind: str,
                      label: str, retry_failed: bool, command: str | None, name: str | None, progress: bool,
                      allow_busy: bool, host_busy: dict | None, run_extra: dict | None,
                      driver: Driver | None = None) -> str:
    with contextlib.ExitStack() as held:   # the per-run lock: one process measures a run at a time
        if resume_run:
            run = store.get_run(resume_run)
            _check_same_builds(run, builds)
            held.enter_context(run_lock(store.path, run.id))
        return _run_sweep_body(plan, builds, store, held, resume_run=resume_run, kind=kind, label=label,
                               retry_failed=retry_failed, command=command, name=name, progress=progress,
                               allow_busy=allow_busy, host_busy=host_busy, run_extra=run_extra, driver=driver)


def _check_same_builds(run: Any, builds: list[BuildLike]) -> None:
    """A resume measures the run's own builds only: another --bin-dir (or other builds) would add a series."""
    keys = list(run.plan.get("builds") or [])
    other = [b.key for b in builds if b.key not in keys]
    if other:
        raise BenchError(f"run {run.id} ({run.status}) was measured with {', '.join(keys) or 'no builds'}; "
                         f"resuming it with {', '.join(other)} would add a series to it",
                         "resume with the run's own builds (the same --bin-dir), or start a new run for these")


def _run_sweep_body(plan: Plan, builds: list[BuildLike], store: Store, held: contextlib.ExitStack, *,
                    resume_run: str | None, kind: str, label: str, retry_failed: bool, command: str | None,
                    name: str | None, progress: bool, allow_busy: bool, host_busy: dict | None,
                    run_extra: dict | None, driver: Driver | None = None) -> str:
    plan.build_keys = [b.key for b in builds]
    items: list[Item] = [(b, spec, e) for spec in plan.points for b in builds for e in engines_of(plan)]
    for b in builds:
        build_options(b)   # a binary whose --help cannot be read stops here, before anything is measured
    if resume_run:
        run = store.get_run(resume_run)
        run_id = run.id
        store.set_run_status(run_id, "running")
    else:
        import secrets

        from ..envinfo import collect_env

        plan.fit = resolve_fit(plan.fit, [b.backend for b in builds])
        if plan.seed is None:
            plan.seed = secrets.randbelow(2**31)
        plan.sentinel_every = default_sentinel_every(len(items), plan.sentinel_every)
        for b in builds:
            adjust.runtime_for(b, plan)      # announced once, recorded in the run's plan
        run_id = store.new_run(kind, {**plan.to_json(), **(run_extra or {})}, command=command, env=collect_env(),
                               name=name, parent_run=(run_extra or {}).get("reproduces"))
        held.enter_context(run_lock(store.path, run_id))   # a `--resume latest` meanwhile is refused
    for b in builds:
        store.add_build(build_manifest(b), run_id)
    t0 = time.monotonic()
    status = "interrupted"
    try:
        if driver is None:
            measure_points(items, plan, store, run_id, label=label, retry_failed=retry_failed, progress=progress,
                           allow_busy=allow_busy, host_busy=host_busy)
        else:
            state = SweepState()
            driver(lambda its, pl: measure_points(its, pl, store, run_id, label=label, retry_failed=retry_failed,
                                                  progress=progress, allow_busy=allow_busy, host_busy=host_busy,
                                                  state=state), run_id)
        status = "done"
    finally:
        with contextlib.suppress(Exception):
            store.set_run_status(run_id, status)
            summary = run_summary(store, run_id, time.monotonic() - t0)
            if allow_busy:
                summary["allow_busy"] = True
            store.set_run_summary(run_id, summary)
    if progress:
        from .sentinel import drift_flags, print_drift

        print_drift(drift_flags(store.points(run_id)))
    return run_id




def reference_items(items: Sequence[Item]) -> list[int]:
    """Index of each build's reference item: its first point (with the first engine) in ``items``."""
    first: dict[str, int] = {}
    for i, (b, _spec, _e) in enumerate(items):
        first.setdefault(b.key, i)
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
        for sentinel in (False, True):
            p = by_key.get((b.key, e, spec.ncmoe, spec.ngl, SENTINEL_LABEL if sentinel else label))
            if p is None or (p.status != "ok" and retry_failed):
                continue
            have[(i, sentinel)] = p
            recs = p.launches
            last_seq = max([last_seq, *(int(r.get("seq") or 0) for r in recs)])
            if p.status != "ok" and not sentinel:
                done.update((i, k, False) for k in range(1, launches + 1))   # failed: no more launches of it
            elif recs:
                done.update((i, int(r["launch"]), sentinel) for r in recs)
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
    log_dir = log_dir or (Path(store.path.parent) / "logs" / run_id)
    state = state or SweepState()
    failed_items: set[int] = {i for (i, sent), p in have.items() if not sent and p.status != "ok"}
    with _Display(len(todo), progress) as disp:
        for n, slot in enumerate(todo, start=len(schedule) - len(todo) + 1):
            b, spec, engine = items[slot.item]
            if slot.item in failed_items:   # a failed launch ends its point (and a failed reference its sentinels)
                disp.skip()
                continue
            disp.point(n, len(schedule), b, spec, slot, plan.launches)
            busy = busy_gpu_check(allow_busy)
            if host_busy:
                busy = {**(busy or {}), **host_busy}
            one = _measure_once(b, plan.model_path, spec, plan, run_id, SENTINEL_LABEL if slot.sentinel else label,
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


def print_run(store: Store, run_id: str) -> None:
    """The per-point table of a run, with a note on unstable points."""
    run = store.get_run(run_id)
    pts = store.points(run_id)
    console.print(points_table(pts, title=esc(f"run {run.id} ({run.kind}, {run.status})")))
    launches = int(run.plan.get("launches") or 1)
    if run.kind in ("sweep", "demo") and launches == 1:
        notice("each point ran in ONE server start (--launches 1): between-process spread was not measured, "
               "so the CIs cover only request-to-request spread (use --launches 2 or more)")
    s = run_summary(store, run_id)
    if s["unstable_points"]:
        notice(f"{s['unstable_points']} point(s) have a coefficient of variation above 10 % (⚠): "
               "raise --repeats or check for background load")
    if s["failed"]:
        notice(f"{s['failed']} point(s) failed: " + ", ".join(f"{k}×{v}" for k, v in s["failures"].items())
               + f" (log tails: `llamaforge runs {run.id}`; logs under results/logs/{run.id}/)")
