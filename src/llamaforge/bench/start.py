"""The library entries of the bench tasks: where the options of :mod:`.cli_options` are used.

* :func:`build_plan` — a run's :class:`~.plan.Plan` from its :class:`~.cli_options.BenchOptions` (the model
  resolved and read, the points made); ``bench``, ``fitmap`` and ``demo`` all build their plan here.
* :func:`start_bench` — ``bench``: a new sweep (backends × pins, or variants; ``--ncmoe/--ngl auto``: the
  adaptive sweep) or ``--resume RUN``, measured into the store; returns the run id.
* :func:`check_run` — after a run: the variant knobs that did not take effect, and the refusal of a run whose
  every point failed.
* :func:`start_fitmap` — ``fitmap``: the context llama.cpp fits at every point, as a stored run.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from ..backends import get as get_backend
from ..builds import find_build
from ..builds.verify import ensure_runnable
from ..console import warning
from ..errors import BenchError
from ..findings.labels import INFEASIBLE
from ..judge.verdict import MIN_EFFECT
from ..llamacpp import placement
from ..paths import Paths
from ..store import Store
from ..values import csv_list
from ..variants.check import from_records, resolve
from ..variants.files import VARIANTS_FILE, choose
from ..variants.model import knob_title
from ..variants.status import not_taken
from .adaptive import AdaptiveOptions
from .autosweep import auto_axis, resume_auto, run_auto
from .cli_options import BenchOptions
from .external import external_build
from .fitmap import run_fitmap
from .multidev import check_options, devices_session, rpc_section, split_points, wanted
from .placed import place_points, tensor_sizes
from .plan import (
    FitOptions,
    Plan,
    Timeouts,
    make_plan,
    make_points,
    parse_int_list,
    read_facts,
    resolve_model,
)
from .stored import local_builds, stored_plan
from .sweep import run_sweep


def build_plan(p: Paths, o: BenchOptions, *, backends: list[str], pins: list[str]) -> Plan:
    """The plan of ``o`` on ``backends`` × ``pins``: the model is resolved (generated or downloaded if need be)
    only here, after every option has been checked."""
    model = str(o.model)
    model_path = resolve_model(model, p).resolve()
    facts = read_facts(model_path)
    n_experts = facts.n_experts
    if o.place:
        points = place_points(o.place, o.ngl, facts, tensor_sizes(model_path), model)
    else:
        points = make_points(o.ncmoe or "0", o.ngl,
                             n_layers=facts.n_layers, n_experts=int(n_experts) if n_experts is not None else None,
                             model=model)
    points = split_points(points, o)
    lo = o.launches
    return make_plan(model_ref=model, model_path=model_path, model_facts=facts, points=points, backends=backends,
                     pins=pins, engine=o.engine, repeats=o.repeats, prompt_tokens=o.prompt_tokens, n_predict=o.n_predict,
                     fit=FitOptions(fitt_mib=o.fitt, vram_budget_gib=o.vram_budget), extra_args=list(o.extra),
                     threads=o.threads, timeouts=Timeouts(load_s=o.load_timeout, request_s=o.request_timeout),
                     bench_depths=list(o.depths), launches=lo.policy.min_starts,
                     sequential=None if lo.fixed is not None else {
                         "max_launches": lo.policy.max_starts, "precision": lo.policy.precision, "min_effect": MIN_EFFECT},
                     seed=o.seed, sentinel_every=o.sentinel_every, ctx=o.ctx, rpc=rpc_section(o),
                     main_gpu=o.main_gpu, device=o.device or None)


def _check_place(o: BenchOptions) -> None:
    """``--place`` as written (before the model is read, which bounds it again): parsed, and not beside
    ``--ncmoe`` (a strategy names its own layers) or an adaptive sweep."""
    placement.parse(o.place)
    if o.ncmoe is not None and str(o.ncmoe).strip() not in ("", "0"):
        raise BenchError(f"--place and --ncmoe {o.ncmoe} both say which layers' experts move",
                         "give the counts in the strategies instead, e.g. --place first:4,last:4 (first:N is -ncmoe N)")
    if str(o.ngl or "").strip().lower() == "auto":
        raise BenchError("--place cannot be combined with --ngl auto", "give --ngl values, or leave --ngl out")


def check_ranges(o: BenchOptions) -> None:
    """``--ncmoe`` / ``--ngl`` as written (a reversed or huge range), before anything says the model is missing:
    the model bounds them again once it is read."""
    for what, spec in (("--ncmoe", o.ncmoe), ("--ngl", o.ngl)):
        if spec is not None and str(spec).strip() and str(spec).strip().lower() != "auto":
            parse_int_list(str(spec), what=what)


def start_bench(o: BenchOptions, p: Paths, store: Store, *, command: str) -> str:
    """``bench``: measure the sweep ``o`` asks for (or continue ``o.resume``) into ``store``; the run id."""
    if o.resume:
        return _resume(p, store, o)
    if not o.model:
        check_ranges(o)      # a reversed or huge range is said first, not hidden behind the missing model
        raise BenchError("no model given", "pass --model PATH (or synth:tiny-qwen35moe)")
    if o.place:
        _check_place(o)
    if wanted(o):
        check_options(o)
    auto = _auto_options(o)
    variant_builds = _variant_builds(p, o, auto)
    backends = ",".join(dict.fromkeys(b.backend for b in variant_builds)) if variant_builds else o.backends
    backend_list = csv_list(backends or "cpu", what="backend")
    pin_list = csv_list(o.pins, what="pin") if o.pins else [None]
    listed = replace(o, ncmoe="0", ngl=None) if auto else o     # auto: the points come from the adaptive sweep
    plan = build_plan(p, listed, backends=backend_list, pins=[x or "default" for x in pin_list])
    plan.quirks = not o.no_quirks
    if auto is not None:
        auto_axis(plan, auto[0], str(o.model))   # the wrong kind of model or no layer count: stop before any build
    builds = variant_builds or _builds(p, backend_list, pin_list, o.bin_dir, o.allow_broken)
    with devices_session(plan, builds, log_dir=store.path.parent / "logs" / "rpc-servers"):
        if auto is not None:
            return run_auto(plan, builds, store, p, options=auto[1], axis=auto[0], command=command, name=o.name,
                            allow_busy=o.allow_busy)[0]
        return run_sweep(plan, builds, store, command=command, name=o.name, allow_busy=o.allow_busy)


def check_run(store: Store, run_id: str) -> None:
    """After a run: a warning per variant knob that did not take effect; a run whose every point failed ends
    with an error (its points stay stored)."""
    _warn_not_taken(store, run_id)
    _refuse_all_failed(store, run_id)


def start_fitmap(o: BenchOptions, p: Paths, store: Store, *, command: str) -> str:
    """``fitmap``: one fit per point (default: every -ncmoe from 0 to the layer count; a dense model: 0)."""
    if not o.model:
        raise BenchError("no model given", "pass --model PATH")   # (the task says so before opening the store)
    backend_list = csv_list(o.backends, what="backend")
    pin_list = csv_list(o.pins, what="pin") if o.pins else [None]
    ncmoe = o.ncmoe
    if not ncmoe:
        facts = read_facts(resolve_model(str(o.model), p))
        ncmoe = f"0:{facts.n_layers or 0}" if facts.n_experts else "0"   # a dense model: only 0
    plan = build_plan(p, replace(o, ncmoe=ncmoe), backends=backend_list, pins=[x or "default" for x in pin_list])
    return run_fitmap(plan, _builds(p, backend_list, pin_list, o.bin_dir), store, command=command)


def _builds(p: Paths, backends: list[str], pin_list: list[str | None], bin_dir: str | None,
            allow_broken: bool = False) -> list:
    if bin_dir:
        if len(backends) != 1:
            raise BenchError("--bin-dir holds one build; give exactly one --backends", "e.g. --backends vulkan")
        return [external_build(Path(bin_dir), backends[0])]
    return [ensure_runnable(find_build(p, pin, be), p, allow_broken=allow_broken) for pin in pin_list for be in backends]


def _variant_builds(p: Paths, o: BenchOptions, auto: tuple | None) -> list:
    """The run's variants bound to their builds, every knob checked before the model is resolved or anything is
    measured (``[]`` without --variant/--variants-file); they replace --backends/--pins/--bin-dir."""
    if not o.variant and not o.variants_file:
        return []
    for given, opt in ((o.backends, "--backends"), (o.pins, "--pins"), (o.bin_dir, "--bin-dir")):
        if given:
            raise BenchError(f"{opt} and --variant both say what to measure",
                             "give the backend (and @pin) inside each variant, e.g. --variant 'fa-on=cuda@default:-fa on'")
    chosen = choose(list(o.variant), Path(o.variants_file) if o.variants_file else None,
                    p.pins_file.parent / VARIANTS_FILE)
    sweeps_ngl = (o.ngl is not None and str(o.ngl).strip() not in ("", "auto")) or (auto is not None and auto[0] == "ngl")
    return resolve(chosen, p, engines=["server", "llama-bench"] if o.engine == "both" else [o.engine],
                   sweeps_ngl=sweeps_ngl, allow_broken=o.allow_broken)


def _warn_not_taken(store: Store, run_id: str) -> None:
    """One warning per variant knob that did not take effect (the report flags them too)."""
    records = store.get_run(run_id).plan.variants
    if not records:
        return
    for who, s in not_taken(records, store.points(run_id, with_samples=False)):
        warning(f"{who}: {knob_title(s.knob)} did not take effect ({s.why}); not reported as a difference")


def _resume(p: Paths, store: Store, o: BenchOptions) -> str:
    """``bench --resume RUN``: the run's own plan and builds (and variants), only its missing launches."""
    run = store.get_run(str(o.resume))
    if run.kind != "sweep":
        raise BenchError(f"run {run.id} is a {run.kind} run, not a sweep", "resume sweeps made by `llamaforge bench`")
    plan = stored_plan(run)   # the store is data: its arguments checked, its builds looked up here
    if not plan.model_path.is_file():
        raise BenchError(f"the run's model {plan.model_path} is gone", "restore the file or start a new run")
    builds = _resume_builds(p, plan, o, store=store, run_id=run.id)
    if run.plan.adaptive is not None:
        return resume_auto(run, plan, builds, store, p, allow_busy=o.allow_busy)[0]
    return run_sweep(plan, builds, store, resume_run=run.id, retry_failed=o.retry_failed, allow_busy=o.allow_busy)


def _resume_builds(p: Paths, plan: Plan, o: BenchOptions, *, store: Store, run_id: str) -> list:
    """The run's builds: the ``--bin-dir`` folder the user names, else by key from this machine's build root."""
    if o.bin_dir:
        return [external_build(Path(o.bin_dir), get_backend(str(plan.backends[0])).name)]
    builds = local_builds(p, plan.build_keys, run_id=run_id, stored=store.get_build, allow_broken=o.allow_broken)
    if plan.variants:      # a variant run: its variants checked again and bound to the same builds
        return from_records(plan.variants, builds)
    return builds


def _refuse_all_failed(store: Store, run_id: str) -> None:
    """A run whose every point failed ends the command with an error (the points stay stored)."""
    pts = store.points(run_id, with_samples=False)
    if pts and all(pt.status != "ok" for pt in pts):
        classes = {pt.failure_class for pt in pts}
        if classes == {INFEASIBLE}:
            raise BenchError(f"no point of run {run_id} can run as asked: {pts[0].failure_detail}",
                             "change --split / --tensor-split (each infeasible combination is explained in "
                             f"`llamaforge runs {run_id} --failed`)")
        if classes & {"oom", "fit"}:
            raise BenchError(f"no point of run {run_id} fitted: the model fits no device at these settings",
                             "offload more experts (higher --ncmoe), give a larger --vram-budget, or a smaller model")
        raise BenchError(f"every point of run {run_id} failed ({', '.join(sorted(c or '?' for c in classes))})",
                         f"see the log tails with `llamaforge runs {run_id} --failed`")


def _auto_options(o: BenchOptions) -> tuple[str, AdaptiveOptions] | None:
    """``(axis, AdaptiveOptions)`` for ``--ncmoe auto`` / ``--ngl auto`` (``None`` for a list of points); the
    budgets only with auto."""
    def is_auto(v: object) -> bool:
        return str(v).strip().lower() == "auto"

    ncmoe = "0" if o.ncmoe is None else o.ncmoe

    if not is_auto(ncmoe) and not is_auto(o.ngl):
        if o.max_points is not None or o.time_budget is not None or o.stable_after is not None:
            raise BenchError("--max-points, --time-budget and --stable-after belong to an adaptive sweep",
                             "add --ncmoe auto (a MoE model) or --ngl auto (a dense model), or leave them out")
        return None
    if is_auto(ncmoe) and o.ngl is not None and str(o.ngl).strip() != "":
        raise BenchError("--ncmoe auto sweeps ncmoe at llama.cpp's default -ngl; it cannot be combined with --ngl",
                         "leave out --ngl, or give the ncmoe points, e.g. --ncmoe 0:40:4 --ngl 20,30")
    if is_auto(o.ngl) and str(ncmoe).strip() not in ("", "0"):
        raise BenchError("--ngl auto sweeps the layers of a dense model at ncmoe 0; it cannot be combined with --ncmoe",
                         "leave out --ncmoe, or give the ngl points, e.g. --ngl 0,8,16,-1")
    stable = 2 if o.stable_after is None else o.stable_after     # 0: off (stop only when every interval is settled)
    return ("ncmoe" if is_auto(ncmoe) else "ngl"), AdaptiveOptions(
        max_points=o.max_points, time_budget_s=o.time_budget, stable_after=stable or None)
