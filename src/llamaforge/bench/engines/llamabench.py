"""The llama-bench engine: one ``llama-bench -o jsonl`` call per point.

One call per point (not a ``-ncmoe 0-40`` range in one call) because one failed load makes
llama-bench ``exit(1)`` for the whole run; per point, a failure costs only that point.
Tests are ``pp<prompt_tokens>`` and ``tg<n_predict>`` (plus ``@ d<depth>`` variants with
``bench_depths``); every per-repeat value (``samples_ts`` / ``samples_ns``) becomes a Sample
(pp values in ``pp_tps``, tg values in ``tg_tps``). llama-bench does its own warm-up run, which it
does not report, so there are no warm-up samples here.

``-fitt`` is never passed to llama-bench: with it llama-bench silently drops ``-ncmoe``. The
context llama.cpp would fit at the point is taken from ``llama-fit-params`` instead (``n_ctx``;
llama-bench itself runs with a context of just prompt + generated tokens).
"""

from __future__ import annotations

import dataclasses
import subprocess
import time
from pathlib import Path

from ... import proc
from ...errors import BuildError
from ...llamacpp.llamabench import int_field, parse_results, rates, test_name
from ...llamacpp.options import build_options
from ...llamacpp.server import PointFailure, classify_failure, die_with_parent
from ...records import PointDetail
from ...store import Point, Sample
from .. import adjust, engine_gap
from ..fit import fitt_for
from ..monitor import Monitor, store_monitor
from ..plan import BuildLike, Plan, PointSpec
from .base import MeasureContext, Measurement, PhaseFn
from .fit import fit_params_once


def samples_from(results: list[dict]) -> list[Sample]:
    out: list[Sample] = []
    for obj in results:
        test = test_name(obj)
        ts, ns, origin = rates(obj)
        n_prompt, n_gen = int_field(obj, "n_prompt"), int_field(obj, "n_gen")
        base = {k: v for k, v in obj.items() if k not in ("samples_ts", "samples_ns")}
        for i, v in enumerate(ts):
            ms = ns[i] / 1e6 if ns[i] is not None else None
            raw = {**base, "sample_ts": v, "sample_ns": ns[i]}
            if origin != "samples_ts":
                raw["sample_from"] = origin
            s = Sample(idx=i + 1, warmup=False, test=test, raw=raw)
            if n_gen and not n_prompt:
                s.predicted_n, s.predicted_ms, s.tg_tps = n_gen, ms, float(v)
            else:
                s.prompt_n, s.prompt_ms, s.pp_tps = n_prompt + n_gen, ms, float(v)
            out.append(s)
    return out


def bench_args(build: BuildLike, model_path: Path, spec: PointSpec, plan: Plan) -> list[str]:
    """llama-bench's arguments for a point, from what this llama-bench supports (``-ncmoe`` or its
    ``-ot`` equivalent, ``-d`` only where it exists)."""
    blocked = adjust.blocked_reason(build, plan, "llama-bench")
    if blocked:
        raise PointFailure("error", blocked)
    opts = build_options(build)
    args = [str(build.binary("llama-bench")), "-m", str(model_path), "-p", str(adjust.prompt_tokens(build, plan)),
            "-n", str(plan.n_predict), "-r", str(plan.repeats), "-o", "jsonl"]
    try:
        args += opts.offload_args("llama-bench", spec.ncmoe, spec.ngl, threads=plan.threads, ot=spec.ot)   # never -fitt (module doc)
    except BuildError as e:
        raise PointFailure("error", f"{e.message} ({e.fix})") from e
    if plan.bench_depths:
        if "-d" not in opts.bench and "--n-depth" not in opts.bench:
            raise PointFailure("error", "this llama-bench has no -d (--n-depth) option",
                               None)
        args += ["-d", ",".join(str(d) for d in sorted({0, *plan.bench_depths}))]
    args += adjust.extra_args(build, plan, "llama-bench")      # recorded quirks, CPU-Vulkan defaults
    extra = [a for a in [*plan.extra_args, *spec.extra_args]]
    if any(a in ("-fitt", "--fit-target") for a in extra):
        raise PointFailure("error", "-fitt must not be combined with -ncmoe in llama-bench (it drops -ncmoe)")
    return args + extra


class LlamaBenchEngine:
    """``engine = "llama-bench"``: see the module doc. With ``--engine both`` (the cross-check) tg is
    also measured at a depth equal to the prompt, like the server's."""

    name = "llama-bench"

    def measure(self, ctx: MeasureContext) -> Measurement:
        plan = ctx.plan
        if plan.engine != "both":
            measure_llamabench(ctx.point, ctx.build, ctx.model_path, ctx.spec, plan, ctx.log_path, ctx.on_phase)
            return ctx.point
        # the cross-check: tg at the requested prompt as depth, and at the server's actual prompt once known
        # (the depth factor of the engine gap, bench.engine_gap)
        depth = adjust.prompt_tokens(ctx.build, plan)
        prompt = ctx.state.prompts.get(ctx.build.key)
        actual = prompt.n_tokens if prompt is not None else None
        depths = engine_gap.bench_depths(depth, actual)
        plan = dataclasses.replace(plan, bench_depths=sorted({*plan.bench_depths, *depths}))
        try:
            measure_llamabench(ctx.point, ctx.build, ctx.model_path, ctx.spec, plan, ctx.log_path, ctx.on_phase)
        finally:
            ctx.point.detail.engine_gap = engine_gap.bench_record(depth, actual, plan.n_predict)
        return ctx.point


def measure_llamabench(point: Point, build: BuildLike, model_path: Path, spec: PointSpec, plan: Plan,
                       log_path: Path, on_phase: PhaseFn) -> None:
    """Fill ``point`` from one llama-bench call (raises PointFailure)."""

    log_path.parent.mkdir(parents=True, exist_ok=True)
    blocked = adjust.blocked_reason(build, plan, "llama-bench")
    if blocked:                       # before fitting: nothing of this point can be measured
        raise PointFailure("error", blocked)
    if build_options(build).has_fit_params:
        on_phase("fitting")
        fit, reused = fit_params_once(build, model_path, spec, fitt=fitt_for(build, plan), threads=plan.threads,
                                      extra_args=adjust.extra_args(build, plan, "llama-fit-params"))
        point.detail = PointDetail(fit=fit.to_dict(), n_ctx_source="llama-fit-params", fit_status="fitted",
                                   fit_reused=True if reused else None)
        point.n_ctx = fit.n_ctx
    else:
        point.detail = PointDetail(n_ctx_source=None, fit_status="unsupported",
                                   fit_note="no llama-fit-params in this build: the fitted context is unknown",
                                   ).keep_nulls("n_ctx_source")
    point.n_ctx_train = plan.facts.n_ctx_train
    point.prompt_tokens = adjust.prompt_tokens(build, plan)
    args = bench_args(build, model_path, spec, plan)
    point.command = args
    out_path = log_path.with_suffix(".jsonl")
    timeout = plan.timeouts.load_s + plan.timeouts.request_s * (plan.repeats + 1) * (1 + len(plan.bench_depths))
    on_phase("measuring (llama-bench)")
    t0 = time.monotonic()
    with open(out_path, "wb") as out, open(log_path, "wb") as err:
        p = proc.spawn(die_with_parent(args), env=build.env, stdout=out, stderr=err)
    mon = Monitor(p.pid)
    mon.start()
    timed_out = False
    try:
        try:
            p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
    finally:
        res = mon.stop()
        rc = proc.kill_group(p, grace=5.0)
    point.t_measure_s = time.monotonic() - t0
    store_monitor(point, res)
    text = out_path.read_text(encoding="utf-8", errors="replace")
    tail = "\n".join(log_path.read_text(encoding="utf-8", errors="replace").splitlines()[-40:])
    results = parse_results(text)
    point.detail.llama_bench = [dict(r) for r in results]
    if results and (results[0].get("build_number") is not None or results[0].get("build_commit")):
        point.build_info = f"b{results[0].get('build_number', '?')}-{results[0].get('build_commit', '?')}"
    point.samples = samples_from(results)
    if timed_out:
        raise PointFailure("hang", f"llama-bench did not finish within {timeout:.0f} s", tail)
    if rc != 0:
        cls = classify_failure(tail, returncode=rc, phase="load" if not results else "request")
        raise PointFailure(cls, f"llama-bench exited with status {rc}", tail)
    if not point.samples:
        raise PointFailure("bad-response", "llama-bench printed no results", tail)
