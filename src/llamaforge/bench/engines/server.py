"""The llama-server engine: one fresh server per launch of a point.

Start llama-server with ``-np 1`` and the point's offload arguments and no ``-c`` (llama.cpp fits
the context), wait for ``/health``, read the fitted context from ``/props``, send one discarded
warm-up ``/completion`` (stored with ``warmup=1``), then ``repeats`` measured ones, stop the server
gracefully (its final ``fit_memory_breakdown`` is parsed from the JSONL log). Memory is sampled
throughout by :class:`~llamaforge.bench.monitor.Monitor`.
"""

from __future__ import annotations

import re
import statistics
import time
from collections.abc import Callable
from pathlib import Path

from ...console import notice
from ...errors import BuildError
from ...judge.metric_starts import tail_of
from ...llamacpp.options import build_options
from ...llamacpp.rpc import devices_mem, split_refusal
from ...llamacpp.server import PointFailure, ServerSession, fit_refusal, parse_memory_breakdown
from ...models.utf8 import incomplete_utf8_tokens
from ...records import PointDetail
from ...store import Point, Sample
from .. import adjust, engine_gap
from ..fit import fitt_for
from ..monitor import Monitor, store_monitor
from ..multidev import device_args
from ..plan import BuildLike, Plan, PointSpec
from ..prompts import Prompt, build_prompt
from .base import MeasureContext, Measurement, PhaseFn, SweepState
from .fit import fit_params

#: the body fields of a streamed measured request (``plan.stream``)
STREAMED = {"stream": True, "timings_per_token": True}   # each event with the server's timings: its own ITL clock
#: what a llama-server whose output parser rejects invalid UTF-8 answers (llama.cpp 78d2f5246 and near it)
_OUTPUT_PARSE_ERROR = re.compile(r"does not match the expected [\w -]+ format")


def server_args(build: BuildLike, model_path: Path, spec: PointSpec, plan: Plan, *,
                ctx: int | None = None) -> list[str]:
    """The llama-server arguments of a point (without host/port), built from what this binary
    supports (its ``--help`` options in the build manifest, see :mod:`llamaforge.llamacpp.options`):
    the offload arguments (:meth:`~llamaforge.llamacpp.options.BinaryOptions.offload_args`; ``-fitt``
    only where the server can fit), ``-c`` from ``ctx`` (a fit-refused re-run) or the plan's ``--ctx``."""
    blocked = adjust.blocked_reason(build, plan, "llama-server")
    if blocked:
        raise PointFailure("error", blocked)
    opts = build_options(build)
    args = ["-m", str(model_path), "-np", "1"]
    for flag in ("--no-mmproj", "--log-jsonl", "--no-webui"):
        if flag in opts.server:
            args.append(flag)
    fitt = fitt_for(build, plan) if opts.server_fit else None
    try:
        args += opts.offload_args("llama-server", spec.ncmoe, spec.ngl, fitt=fitt, threads=plan.threads, ot=spec.ot)
    except BuildError as e:
        raise PointFailure("error", f"{e.message} ({e.fix})") from e
    args += device_args(build, spec, plan)       # --rpc, -sm, -ts, -mg, -dev (bench.multidev)
    ctx = ctx if ctx is not None else plan.ctx
    if ctx is not None:
        args += ["-c", str(ctx)]
    args += adjust.extra_args(build, plan, "llama-server")     # recorded quirks, CPU-Vulkan defaults
    return args + list(plan.extra_args) + list(spec.extra_args)


def fit_status_of(build: BuildLike, plan: Plan) -> str:
    """How the context of this build's points is chosen before any run: ``fitted`` / ``fixed`` / ``unsupported``."""
    if plan.ctx is not None:
        return "fixed"
    return "fitted" if build_options(build).server_fit else "unsupported"


def _complete(session: ServerSession, build: BuildLike, model_path: Path, prompt: Prompt, plan: Plan,
              state: SweepState, detail: PointDetail, overrides: dict | None = None) -> dict:
    """One ``/completion`` (``overrides``: an engine-gap variant's fields); when the server rejects its own
    output as malformed (not whole UTF-8), retry once with the model's incomplete-UTF-8 tokens banned, and
    keep them banned for this build."""
    banned = state.banned.get(build.key)
    if overrides is None and plan.stream:    # the measured request, streamed: the client times every token
        overrides = STREAMED
    try:
        resp = session.complete(prompt.tokens, plan.n_predict, timeout=plan.timeouts.request_s, banned=banned,
                                overrides=overrides)
    except PointFailure as e:
        if banned is not None or e.cls != "bad-response" or not _OUTPUT_PARSE_ERROR.search(e.detail):
            raise
        banned = incomplete_utf8_tokens(model_path)
        if not banned:
            raise
        state.banned[build.key] = banned
        state.banned_why[build.key] = e.detail[:300]
        notice(f"{build.key}: llama-server rejected its own non-UTF-8 output ({e.detail[:120]}); "
               f"measuring with the model's {len(banned)} incomplete-UTF-8 tokens banned (logit_bias)")
        resp = session.complete(prompt.tokens, plan.n_predict, timeout=plan.timeouts.request_s, banned=banned,
                                overrides=overrides)
    if banned is not None:
        detail.output_guard = {"banned_tokens": len(banned), "why": state.banned_why.get(build.key, ""),
                                 "how": "logit_bias false for tokens that are not whole UTF-8 (models.utf8)"}
    return resp


def _sample(idx: int, warmup: bool, resp: dict, wall_ms: float | None = None) -> Sample:
    """One request as stored; a streamed one (``resp["client"]``, :meth:`ServerSession.complete`) also with
    its client-side latency: ``wall_ms`` (sent → answered), the median and the p95 of its inter-token gaps."""
    t = resp.get("timings") or {}
    raw = {k: v for k, v in resp.items() if k not in ("prompt", "tokens")}  # the prompt echo is large
    client = resp.get("client") if isinstance(resp.get("client"), dict) else None
    # inter-token gaps as the server timed them where its events carry timings, else as they arrived here
    gaps = [g for g in (client or {}).get("server_gaps_ms") or (client or {}).get("gaps_ms") or []
            if isinstance(g, int | float)]
    return Sample(idx=idx, warmup=warmup, prompt_n=t.get("prompt_n"), prompt_ms=t.get("prompt_ms"),
                  pp_tps=t.get("prompt_per_second"), predicted_n=t.get("predicted_n"),
                  predicted_ms=t.get("predicted_ms"), tg_tps=t.get("predicted_per_second"), raw=raw,
                  e2e_ms=round(wall_ms, 3) if client is not None and wall_ms is not None else None,
                  itl_ms=round(statistics.median(gaps), 3) if gaps else None,
                  itl_p95_ms=round(v, 3) if (v := tail_of(gaps)) is not None else None)


class ServerEngine:
    """``engine = "server"``: see the module doc."""

    name = "server"

    def measure(self, ctx: MeasureContext) -> Measurement:
        _measure_server(ctx.point, ctx.build, ctx.model_path, ctx.spec, ctx.plan, ctx.log_path, ctx.state,
                        ctx.on_phase)
        return ctx.point


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
    detail = point.detail = PointDetail(fit_status=fit_status)
    if fitt_for(build, plan) is not None and not build_options(build).server_fit:
        detail.fit_note = "--fitt/--vram-budget ignored: this llama-server cannot fit"
    monitor = Monitor(pid=0)
    session: ServerSession | None = None

    def spawned(pid: int) -> None:
        monitor.pid = pid
        if not monitor.is_alive():
            monitor.start()

    def start(server_argv: list[str]) -> ServerSession:
        return ServerSession.start(build.binary("llama-server"), server_argv, log_path, env=build.env,
                                   load_timeout_s=plan.timeouts.load_s, on_phase=on_phase, on_spawn=spawned)

    try:
        session = _start_split(start, args, spec)
        refused = fit_refusal(log_path) if fit_status == "fitted" else None
        if refused is not None:
            detail.fit_status, detail.fit_refused = "refused-unfitted", refused
            if build_options(build).has_fit_params:
                session.stop()
                session = None
                monitor.stop()
                monitor = Monitor(pid=0)
                args = _refit_args(build, model_path, spec, plan, log_path, args, detail, on_phase)
                session = start(args)
        meta = _server_facts(point, session, plan)
        prompt = _prompt_for(build, session, plan, state, on_phase)
        point.prompt_tokens = prompt.n_tokens
        detail.prompt, detail.model_meta = prompt.to_dict(), meta
        if point.n_ctx and prompt.n_tokens + plan.n_predict > point.n_ctx:
            raise PointFailure("fit", f"the fitted context ({point.n_ctx}) is smaller than prompt + n_predict "
                               f"({prompt.n_tokens} + {plan.n_predict})")
        _requests(point, session, build, model_path, prompt, plan, state, detail, on_phase)
    finally:
        on_phase("stopping")
        if session is not None:
            session.stop()
        mres = monitor.stop() if monitor.is_alive() else monitor.result
        store_monitor(point, mres)
        _record_breakdown(point, log_path)


def _start_split(start: Callable[[list[str]], ServerSession], args: list[str], spec: PointSpec) -> ServerSession:
    """``start(args)``; a load llama.cpp refused because the point's split cannot be made here (``-sm row`` on a
    device without split buffers) fails as ``infeasible``, explained in one line."""
    try:
        return start(args)
    except PointFailure as e:
        why = split_refusal(e.log_tail or "", spec.split_mode) if spec.split_mode else None
        if why is None:
            raise
        raise PointFailure("infeasible", why, e.log_tail) from e


def _refit_args(build: BuildLike, model_path: Path, spec: PointSpec, plan: Plan, log_path: Path,
                args: list[str], detail: PointDetail, on_phase: PhaseFn) -> list[str]:
    """After a refused fit: keep the unfitted load's log (``.unfitted.log``), ask ``llama-fit-params``
    for a context and return the server arguments for the second load — with that ``-c``, or ``args``
    unchanged when it found no fit either. What happened goes into the point's ``detail``."""
    log_path.replace(log_path.with_suffix(".unfitted.log"))
    on_phase("fitting (llama-fit-params)")
    fit = fit_params(build, model_path, spec, fitt=fitt_for(build, plan), threads=plan.threads,
                     extra_args=adjust.extra_args(build, plan, "llama-fit-params"))
    detail.fit = fit.to_dict()
    if fit.ok and fit.n_ctx:
        detail.fit_status = "refused"
        return server_args(build, model_path, spec, plan, ctx=fit.n_ctx)
    detail.fit_note = "llama-fit-params found no fit either: measured unfitted"
    return args


def _prompt_for(build: BuildLike, session: ServerSession, plan: Plan, state: SweepState,
                on_phase: PhaseFn) -> Prompt:
    """The build's prompt, made with its server's tokenizer and template once per sweep (kept in ``state``)."""
    prompt = state.prompts.get(build.key)
    if prompt is None:
        on_phase("prompt")
        prompt = build_prompt(adjust.prompt_tokens(build, plan), tokenize=session.tokenize,
                              apply_template=session.apply_template)
        state.prompts[build.key] = prompt
    return prompt


def _server_facts(point: Point, session: ServerSession, plan: Plan) -> dict:
    """What the loaded server says about itself into the point (command, load time, context, build);
    returns the model's metadata."""
    point.command = session.args
    point.t_load_s = session.t_load_s
    props = session.props()
    point.n_ctx = (props.get("default_generation_settings") or {}).get("n_ctx")
    point.build_info = props.get("build_info")
    meta = session.model_meta()
    point.n_ctx_train = meta.get("n_ctx_train") or (plan.facts.n_ctx_train or None)
    return meta


def _requests(point: Point, session: ServerSession, build: BuildLike, model_path: Path, prompt: Prompt, plan: Plan,
              state: SweepState, detail: PointDetail, on_phase: PhaseFn) -> None:
    """The warm-up (kept, flagged) and the measured requests of one server start."""
    if plan.warmup:
        on_phase("warm-up")
        t0 = time.monotonic()
        resp = _complete(session, build, model_path, prompt, plan, state, detail)
        point.t_warmup_s = time.monotonic() - t0
        point.samples.append(_sample(0, True, resp))
    t0 = time.monotonic()
    gap: list[dict] = []     # --engine both: each measured request is a round with the engine-gap variants
    for i in range(plan.repeats):
        on_phase(f"measuring {i + 1}/{plan.repeats}")
        for variant in engine_gap.round_order(i) if plan.engine == "both" else [engine_gap.DEFAULT]:
            gap.append(_request(point, session, build, model_path, prompt, plan, state, detail, i, variant))
    if plan.engine == "both":
        detail.engine_gap = engine_gap.record(gap, prompt_n=prompt.n_tokens, n_predict=plan.n_predict)
    point.t_measure_s = time.monotonic() - t0


def _request(point: Point, session: ServerSession, build: BuildLike, model_path: Path, prompt: Prompt, plan: Plan,
             state: SweepState, detail: PointDetail, i: int, variant: str) -> dict:
    """Request ``variant`` of round ``i``: the default one is the point's measured sample ``i + 1``; a variant
    (:data:`.engine_gap.VARIANTS`) only goes into the returned record, and a server that rejects it
    (HTTP error) costs the variant, not the point. Returns the request's engine-gap record."""
    overrides = engine_gap.VARIANTS.get(variant)
    try:
        resp, wall_ms = engine_gap.timed(lambda: _complete(session, build, model_path, prompt, plan, state, detail,
                                                           overrides))
    except PointFailure as e:
        if overrides is None or e.cls != "bad-response":
            raise
        return {"round": i + 1, "variant": variant, "error": e.detail[:300]}
    if overrides is None:
        s = _sample(i + 1, False, resp, wall_ms)
        point.samples.append(s)
        if s.predicted_n is not None and s.predicted_n != plan.n_predict:
            detail.warnings.append(
                f"request {i + 1} generated {s.predicted_n} tokens, not {plan.n_predict}")
    return engine_gap.request_record(i, variant, resp, wall_ms)


def _record_breakdown(point: Point, log_path: Path) -> None:
    """llama.cpp's memory breakdown from the server log; its device total where NVML had none."""
    point.mem_breakdown = parse_memory_breakdown(log_path)
    point.detail.devices_mem = devices_mem(point.mem_breakdown)
    devs = (point.mem_breakdown or {}).get("devices") or []
    if point.vram_self_mib is None and devs:
        # no NVML (e.g. a Vulkan device of another vendor): take what llama.cpp itself reports
        point.vram_self_mib = float(sum(d.get("self", 0) for d in devs))
        point.detail.vram_self_source = "fit_memory_breakdown"
