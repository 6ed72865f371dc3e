"""Benchmark commands: ``bench`` (offload sweeps), ``fitmap``, ``runs``, ``export``."""

from __future__ import annotations

import sys
from pathlib import Path

from ..console import console, esc, info, notice
from ..effect import parse_effect
from ..errors import BenchError, StoreError
from ..store import Store
from ..visible import visible
from ._common import SEED_MAX, as_float, as_int, csv_list, lf_task, paths, write_output
from .launches import HELP as LAUNCH_HELP
from .launches import LaunchOptions, parse_launches

_BENCH_HELP = {
    "model": "GGUF path or reference (synth:PRESET[:MIX], hf:..., pypi:..., URL)",
    "backends": "comma-separated builds to compare: cpu,cuda,vulkan (default cpu)",
    "variant": "a variant to compare (repeatable): NAME=BACKEND[@PIN][:ENV=V ... -DDEFINE=V ... ARGS], e.g. "
               "'fa-on=cuda:-fa on', 'vk-nocm2=vulkan:GGML_VK_DISABLE_COOPMAT2=1'; or the NAME of a variant in "
               "variants.toml (beside pins.toml) or --variants-file. Replaces --backends/--pins",
    "variants_file": "a variants file (TOML, [variants.NAME] tables); without --variant: every variant in it",
    "pins": "comma-separated pins or commits (default: the default pin)",
    "ncmoe": "offload points: 0:40 (inclusive), 0:40:2, 0,2,5-8 (default 0; a dense model takes only 0), or auto: "
             "the native-context threshold by bisection over fits, then an adaptive sweep that measures only the "
             "points its conclusions need",
    "max_points": "with --ncmoe/--ngl auto: measure at most N points (all builds together)",
    "time_budget": "with --ncmoe/--ngl auto: stop choosing new points after S seconds (the fits included)",
    "stable_after": "with --ncmoe/--ngl auto: stop once N refinements per build changed no conclusion (default 2; "
                    "0: only when every interval is settled)",
    "ngl": "optional -ngl sweep, same syntax (default: all layers); the sweep axis for a dense model, where "
           "auto sweeps it adaptively like --ncmoe auto",
    "repeats": "measured requests per launch after one discarded warm-up (default 3)",
    "launches": LAUNCH_HELP["launches"] + "; starts are interleaved across points and builds (1 = between-start "
                "spread not measured)",
    "max_launches": LAUNCH_HELP["max_launches"],
    "precision": LAUNCH_HELP["precision"],
    "seed": "seed of the randomised launch order (default: drawn and recorded in the run)",
    "sentinel_every": "re-measure each build's first point every N launches and at the end to detect drift "
                      "(default: 10 for sweeps of more than 10 points × builds, else off; 0 = off)",
    "engine": "server (default: llama-server, fitted context, warm-up), llama-bench, or both (the server, then "
              "llama-bench at the same point with -d = the prompt: a cross-check; the summary uses the server)",
    "allow_busy": "measure even while another llamaforge sweep holds the host lock or another process computes "
                  "on the GPU (recorded in the run and its points)",
    "prompt_tokens": "prompt size in tokens, a multi-turn chat in the model's template (default 2500)",
    "n_predict": "tokens generated per request (default 128; the seed used 6144 — see the docs)",
    "vram_budget": "emulate a smaller card: GiB of VRAM to leave usable per device (needs NVML)",
    "fitt": "llama.cpp's -fitt margin in MiB per device (default: llama.cpp's 1024)",
    "extra": "extra llama-server / llama-bench arguments, e.g. \"-fa on\"",
    "resume": "continue run RUN (id, name or unique id prefix): measure only its missing launches (same order)",
    "retry_failed": "with --resume: measure failed points again",
    "threads": "CPU threads (-t)",
    "depths": "llama-bench engine: extra -d depths, e.g. 4096,16384",
    "load_timeout": "seconds to wait for a server to load (default 600)",
    "request_timeout": "seconds to wait for one request (default 900)",
    "bin_dir": "use the llama.cpp binaries in this folder instead of a managed build (one backend)",
    "name": "a name for the run",
    "ctx": "context size (-c) for every point; default: llama.cpp fits it (builds without --fit: llama.cpp's default)",
    "allow_broken": "measure builds whose smoke run failed (they are refused otherwise)",
    "no_quirks": "do not apply the builds' recorded quirks (e.g. --no-repack) or the CPU-Vulkan (lavapipe) defaults",
}


def _builds(p, backends: list[str], pin_list: list[str | None], bin_dir: str | None,  # noqa: ANN001
            allow_broken: bool = False) -> list:
    if bin_dir:
        from ..bench.external import external_build

        if len(backends) != 1:
            raise BenchError("--bin-dir holds one build; give exactly one --backends", "e.g. --backends vulkan")
        return [external_build(Path(bin_dir), backends[0])]
    from ..builds import find_build
    from ..builds.verify import ensure_runnable

    return [ensure_runnable(find_build(p, pin, be), p, allow_broken=allow_broken) for pin in pin_list for be in backends]


def _plan_from_options(p, *, model: str, backends: list[str], pin_names: list[str], ncmoe: str, ngl: str | None,
                       repeats: int, engine: str, prompt_tokens: int, n_predict: int, vram_budget: float | None,
                       fitt: int | None, extra: str | None, threads: int | None, depths: str | None,
                       load_timeout: float, request_timeout: float, launches: int | LaunchOptions = 1,
                       seed: int | None = None, sentinel_every: int | None = None,
                       ctx: int | None = None):  # noqa: ANN001, ANN202
    from ..bench.plan import (
        FitOptions,
        Plan,
        make_points,
        parse_int_list,
        read_facts,
        resolve_model,
        split_extra,
    )

    # numbers first: a typo fails in a blink, before any model is resolved, downloaded or generated
    extra_args = split_extra(extra)
    repeats = as_int(repeats, "--repeats", minimum=1, maximum=10_000)
    prompt_tokens = as_int(prompt_tokens, "--prompt-tokens", minimum=1, maximum=10_000_000)
    n_predict = as_int(n_predict, "--n-predict", minimum=1, maximum=10_000_000)
    fitt = as_int(fitt, "--fitt", minimum=0) if fitt is not None else None
    vram_budget = as_float(vram_budget, "--vram-budget", positive=True) if vram_budget is not None else None
    threads = as_int(threads, "--threads", minimum=1, maximum=4096) if threads else None
    load_timeout = as_float(load_timeout, "--load-timeout", positive=True)
    request_timeout = as_float(request_timeout, "--request-timeout", positive=True)
    lo = launches if isinstance(launches, LaunchOptions) else parse_launches(launches)
    model_path = resolve_model(model, p).resolve()
    facts = read_facts(model_path)
    n_layers = facts.get("n_layers")
    n_experts = facts.get("n_experts")
    points = make_points(ncmoe, ngl, n_layers=n_layers, n_experts=int(n_experts) if n_experts is not None else None,
                         model=model)
    return Plan(model_ref=model, model_path=model_path, model_facts=facts, points=points, backends=backends,
                pins=pin_names, engine=engine, repeats=repeats, prompt_tokens=prompt_tokens, n_predict=n_predict,
                fit=FitOptions(fitt_mib=fitt, vram_budget_gib=vram_budget),
                extra_args=extra_args, threads=threads, load_timeout_s=load_timeout,
                request_timeout_s=request_timeout,
                bench_depths=parse_int_list(depths, what="--depths", limit=1 << 24) if depths else [],
                launches=lo.policy.min_starts,
                sequential=None if lo.fixed is not None else {"max_launches": lo.policy.max_starts,
                                                              "precision": lo.policy.precision, "min_effect": 0.05},
                seed=as_int(seed, "--seed", minimum=0, maximum=SEED_MAX) if seed is not None else None,
                sentinel_every=as_int(sentinel_every, "--sentinel-every", minimum=0)
                if sentinel_every is not None else None,
                ctx=_int_option(ctx, "--ctx", None, minimum=16, fix="e.g. --ctx 8192, or leave it out to let llama.cpp fit"))


@lf_task(help=_BENCH_HELP, iterable=["variant"])
def bench(c, model=None, backends=None, pins=None, ncmoe="0", ngl=None, repeats=3, engine="server",
          prompt_tokens=2500, n_predict=128, vram_budget=None, fitt=None, extra=None, resume=None,
          retry_failed=False, threads=None, depths=None, load_timeout=600.0, request_timeout=900.0, bin_dir=None,
          name=None, allow_busy=False, allow_broken=False, no_quirks=False, launches="auto", max_launches=None,
          precision=None, seed=None, sentinel_every=None, ctx=None, max_points=None, time_budget=None, stable_after=None,
          variant=None, variants_file=None):
    """Sweep MoE offload (-ncmoe; a dense model: the layers on the GPU, -ngl) on one or more builds: context,
    memory, prompt and generation speed per point.

    Each point is measured in separate llama-server starts (no -c: llama.cpp fits the context; --ctx N fixes
    it), interleaved with the other points and builds, each with one discarded warm-up and --repeats measured
    requests; results go to the store (results/llamaforge.sqlite). --launches auto (the default) starts with
    3 starts per point and adds starts only where a point's interval is wider than --precision or a
    comparison between builds is inconclusive, up to --max-launches (then: unresolved, with its spread).
    Interrupted runs continue with --resume RUN.
    Example: llamaforge bench --model m.gguf --backends cuda,vulkan --ncmoe 0:40:2

    Variants (--variant, repeatable, or --variants-file) compare any named combination of build, environment
    and llama-server arguments instead of backends: every knob is checked before anything is measured, and the
    report adds the variant matrix (head-to-head verdicts, placements, per-knob effects).
    Example: llamaforge bench --model m.gguf --variant 'fa-on=cuda:-fa on' --variant 'fa-off=cuda:-fa off'

    --ncmoe auto first finds the native-context threshold by bisection over fits (no weights loaded), then
    measures the ends, the threshold and its neighbours, and bisects wherever the speed leaves a smooth trend
    (see bench.adaptive); the report marks which points were measured and which interpolated. --ngl auto does
    the same over the layers on the GPU of a dense model.
    """
    from ..bench.display import print_run
    from ..bench.sweep import run_sweep

    launches = parse_launches(launches, max_launches, precision)
    sentinel_every = _int_option(sentinel_every, "--sentinel-every", None, minimum=0,
                                 fix="give N > 0 (re-measure the reference points every N launches) or 0 (off)")
    p = paths()
    with Store(p.store_db) as store:
        command = " ".join(sys.argv)
        if resume:
            run_id = _resume(p, store, resume, bin_dir=bin_dir, allow_broken=bool(allow_broken),
                             allow_busy=bool(allow_busy), retry_failed=bool(retry_failed))
        else:
            if not model:
                raise BenchError("no model given", "pass --model PATH (or synth:tiny-qwen35moe)")
            auto = _auto_options(ncmoe, ngl, max_points, time_budget, stable_after)
            variant_builds = _variant_builds(p, variant, variants_file, backends=backends, pins=pins, bin_dir=bin_dir,
                                             engine=engine, ngl=ngl, auto=auto, allow_broken=bool(allow_broken))
            if variant_builds:
                backends = ",".join(dict.fromkeys(b.backend for b in variant_builds))
            backend_list = csv_list(backends or "cpu", what="backend")
            pin_list = csv_list(pins, what="pin") if pins else [None]
            plan = _plan_from_options(p, model=model, backends=backend_list,
                                      pin_names=[x or "default" for x in pin_list], ncmoe="0" if auto else ncmoe,
                                      ngl=None if auto else ngl,
                                      repeats=repeats, engine=engine, prompt_tokens=prompt_tokens, n_predict=n_predict,
                                      vram_budget=vram_budget, fitt=fitt, extra=extra, threads=threads, depths=depths,
                                      load_timeout=load_timeout, request_timeout=request_timeout, launches=launches,
                                      seed=_int_option(seed, "--seed", None, minimum=0, fix="e.g. --seed 1"),
                                      sentinel_every=sentinel_every, ctx=ctx)
            plan.quirks = not no_quirks
            if auto is not None:
                from ..bench.autosweep import auto_axis, run_auto

                auto_axis(plan, auto[0], model)   # the wrong kind of model or no layer count: stop before any build
            builds = variant_builds or _builds(p, backend_list, pin_list, bin_dir, bool(allow_broken))
            if auto is not None:
                run_id, _ = run_auto(plan, builds, store, p, options=auto[1], axis=auto[0], command=command,
                                     name=name, allow_busy=bool(allow_busy))
            else:
                run_id = run_sweep(plan, builds, store, command=command, name=name, allow_busy=bool(allow_busy))
        print_run(store, run_id)
        if store.get_run(run_id).plan.engine == "both":   # the cross-check: why the engines differ
            from ..report.engine_gap import print_gap

            print_gap(store, run_id)
        if store.get_run(run_id).plan.adaptive is not None:
            from ..bench.autosweep import print_adaptive

            print_adaptive(store, run_id)
        info(f"run id: [bold]{esc(run_id)}[/]  " + esc(f"(report: `llamaforge report {run_id}`, export: `llamaforge export {run_id}`)"))
        _warn_not_taken(store, run_id)
        _refuse_all_failed(store, run_id)


def _variant_builds(p, specs, file, *, backends, pins, bin_dir, engine, ngl, auto, allow_broken) -> list:  # noqa: ANN001
    """The run's variants bound to their builds, every knob checked before the model is resolved or anything is
    measured (``[]`` without --variant/--variants-file); they replace --backends/--pins/--bin-dir."""
    if not specs and not file:
        return []
    from ..variants.check import resolve
    from ..variants.files import VARIANTS_FILE, choose

    for given, opt in ((backends, "--backends"), (pins, "--pins"), (bin_dir, "--bin-dir")):
        if given:
            raise BenchError(f"{opt} and --variant both say what to measure",
                             "give the backend (and @pin) inside each variant, e.g. --variant 'fa-on=cuda@default:-fa on'")
    chosen = choose(list(specs or []), Path(file) if file else None, p.pins_file.parent / VARIANTS_FILE)
    sweeps_ngl = (ngl is not None and str(ngl).strip() not in ("", "auto")) or (auto is not None and auto[0] == "ngl")
    return resolve(chosen, p, engines=["server", "llama-bench"] if engine == "both" else [engine],
                   sweeps_ngl=sweeps_ngl, allow_broken=allow_broken)


def _warn_not_taken(store: Store, run_id: str) -> None:
    """One warning per variant knob that did not take effect (the report flags them too)."""
    from ..console import warning
    from ..variants.status import not_taken

    run = store.get_run(run_id)
    records = run.plan.variants
    if not records:
        return
    for who, s in not_taken(records, store.points(run_id, with_samples=False)):
        from ..variants.model import knob_title

        warning(f"{who}: {knob_title(s.knob)} did not take effect ({s.why}); not reported as a difference")


def _resume(p, store: Store, resume: str, *, bin_dir: str | None, allow_broken: bool, allow_busy: bool,  # noqa: ANN001
            retry_failed: bool) -> str:
    """``bench --resume RUN``: the run's own plan and builds (and variants), only its missing launches."""
    from ..bench.stored import stored_plan
    from ..bench.sweep import run_sweep

    run = store.get_run(resume)
    if run.kind != "sweep":
        raise BenchError(f"run {run.id} is a {run.kind} run, not a sweep", "resume sweeps made by `llamaforge bench`")
    plan = stored_plan(run)   # the store is data: its arguments checked, its builds looked up here
    if not plan.model_path.is_file():
        raise BenchError(f"the run's model {plan.model_path} is gone", "restore the file or start a new run")
    builds = _resume_builds(p, plan, bin_dir, allow_broken, store=store, run_id=run.id)
    if run.plan.adaptive is not None:
        from ..bench.autosweep import resume_auto

        return resume_auto(run, plan, builds, store, p, allow_busy=allow_busy)[0]
    return run_sweep(plan, builds, store, resume_run=run.id, retry_failed=retry_failed, allow_busy=allow_busy)


def _refuse_all_failed(store: Store, run_id: str) -> None:
    """A run whose every point failed ends the command with an error (the points stay stored)."""
    pts = store.points(run_id, with_samples=False)
    if pts and all(pt.status != "ok" for pt in pts):
        classes = {pt.failure_class for pt in pts}
        if classes & {"oom", "fit"}:
            raise BenchError(f"no point of run {run_id} fitted: the model fits no device at these settings",
                             "offload more experts (higher --ncmoe), give a larger --vram-budget, or a smaller model")
        raise BenchError(f"every point of run {run_id} failed ({', '.join(sorted(c or '?' for c in classes))})",
                         f"see the log tails with `llamaforge runs {run_id} --failed`")


def _auto_options(ncmoe, ngl, max_points, time_budget, stable_after=None):  # noqa: ANN001, ANN202
    """``(axis, AdaptiveOptions)`` for ``--ncmoe auto`` / ``--ngl auto`` (``None`` for a list of points); the
    budgets only with auto."""
    from ..bench.adaptive import AdaptiveOptions

    def is_auto(v) -> bool:  # noqa: ANN001
        return str(v).strip().lower() == "auto"

    if not is_auto(ncmoe) and not is_auto(ngl):
        if max_points is not None or time_budget is not None or stable_after is not None:
            raise BenchError("--max-points, --time-budget and --stable-after belong to an adaptive sweep",
                             "add --ncmoe auto (a MoE model) or --ngl auto (a dense model), or leave them out")
        return None
    if is_auto(ncmoe) and ngl is not None and str(ngl).strip() != "":
        raise BenchError("--ncmoe auto sweeps ncmoe at llama.cpp's default -ngl; it cannot be combined with --ngl",
                         "leave out --ngl, or give the ncmoe points, e.g. --ncmoe 0:40:4 --ngl 20,30")
    if is_auto(ngl) and str(ncmoe).strip() not in ("", "0"):
        raise BenchError("--ngl auto sweeps the layers of a dense model at ncmoe 0; it cannot be combined with --ncmoe",
                         "leave out --ncmoe, or give the ngl points, e.g. --ngl 0,8,16,-1")
    return ("ncmoe" if is_auto(ncmoe) else "ngl"), AdaptiveOptions(
        max_points=_int_option(max_points, "--max-points", None, minimum=2, fix="e.g. --max-points 12"),
        time_budget_s=as_float(time_budget, "--time-budget", positive=True) if time_budget is not None else None,
        stable_after=_stable_after(stable_after))


def _stable_after(value) -> int | None:  # noqa: ANN001
    """``--stable-after``: the default (None given) 2; 0 means off (stop only when every interval is settled)."""
    n = _int_option(value, "--stable-after", 2, minimum=0, fix="e.g. --stable-after 2, or 0 to refine until settled")
    return n or None


def _int_option(value, name: str, default: int | None, *, minimum: int, fix: str) -> int | None:  # noqa: ANN001
    """An integer option (``None`` → ``default``), checked before anything is resolved or measured."""
    if value is None:
        return default
    try:
        n = int(value)
    except (TypeError, ValueError):
        raise BenchError(f"{name} must be a whole number (got {value!r})", fix) from None
    if n < minimum:
        raise BenchError(f"{name} must be at least {minimum} (got {n})", fix)
    return n


def _resume_builds(p, plan, bin_dir: str | None, allow_broken: bool = False, *, store: Store,  # noqa: ANN001
                   run_id: str) -> list:
    """The run's builds: the ``--bin-dir`` folder the user names, else by key from this machine's build root."""
    if bin_dir:
        from ..bench.external import external_build
        from ..builds.backends import get_backend

        return [external_build(Path(bin_dir), get_backend(str(plan.backends[0])).name)]
    from ..bench.stored import local_builds

    builds = local_builds(p, plan.build_keys, run_id=run_id, stored=store.get_build, allow_broken=allow_broken)
    if plan.variants:      # a variant run: its variants checked again and bound to the same builds
        from ..variants.check import from_records

        return from_records(plan.variants, builds)
    return builds


@lf_task(help={k: _BENCH_HELP[k] for k in ("model", "backends", "pins", "ncmoe", "ngl", "vram_budget", "fitt",
                                           "threads", "bin_dir")})
def fitmap(c, model=None, backends="cpu", pins=None, ncmoe=None, ngl=None, vram_budget=None, fitt=None,
           threads=None, bin_dir=None):
    """The context llama.cpp fits at every offload point (llama-fit-params, ~1 s per point, no weights loaded).

    Prints a table (context, share of the native context, which layers' experts go where) and stores a
    run of kind fitmap. Default points: every -ncmoe from 0 to the model's layer count.
    """
    from ..bench.fitmap import fitmap_table, run_fitmap

    if not model:
        raise BenchError("no model given", "pass --model PATH")
    p = paths()
    with Store(p.store_db) as store:
        backend_list = csv_list(backends, what="backend")
        pin_list = csv_list(pins, what="pin") if pins else [None]
        from ..bench.plan import read_facts, resolve_model

        facts = read_facts(resolve_model(model, p))
        n_layers = facts.get("n_layers")
        default_ncmoe = f"0:{n_layers or 0}" if facts.get("n_experts") else "0"   # a dense model: only ncmoe 0
        plan = _plan_from_options(p, model=model, backends=backend_list, pin_names=[x or "default" for x in pin_list],
                                  ncmoe=ncmoe or default_ncmoe, ngl=ngl, repeats=1, engine="server",
                                  prompt_tokens=2500, n_predict=128, vram_budget=vram_budget, fitt=fitt, extra=None,
                                  threads=threads, depths=None, load_timeout=600, request_timeout=900)
        builds = _builds(p, backend_list, pin_list, bin_dir)
        run_id = run_fitmap(plan, builds, store, command=" ".join(sys.argv))
        console.print(fitmap_table(store, run_id))
        info(f"run id: [bold]{esc(run_id)}[/]")


@lf_task(positional=["run"], help={
    "run": "show one run's points (id, name, unique id prefix or 'latest'); `runs RUN` or `runs --run RUN`",
    "kind": "only runs of this kind", "failed": "with RUN: print the log tail of every failed point"})
def runs(c, run=None, kind=None, failed=False):
    """List stored runs, or show one run's points (``llamaforge runs RUN``, ``llamaforge runs RUN --failed``)."""
    from rich.table import Table

    from ..bench.display import print_run
    from ..bench.fitmap import fitmap_table

    with Store(paths().store_db) as store:
        if run:
            r = store.get_run(run)
            if r.kind == "fitmap":
                console.print(fitmap_table(store, r.id))
            else:
                print_run(store, r.id)
            if failed:
                for pt in store.points(r.id, with_samples=False):
                    if pt.status != "ok":
                        console.rule(esc(f"{pt.build_key} ncmoe={pt.ncmoe} ngl={pt.ngl}: {pt.failure_class}"))
                        console.print(pt.failure_detail or "", markup=False)
                        console.print(pt.log_tail or "(no log)", markup=False, highlight=False)
            return
        all_runs = store.list_runs(kind)
        if not all_runs:
            notice(f"no runs in {store.path}" + (f" of kind {kind}" if kind else ""))
            return
        t = Table(title=esc(f"runs in {store.path}"))
        for col in ("id", "kind", "status", "name", "model", "builds", "points", "ok", "failed"):
            t.add_column(col)
        for r in all_runs:
            pts = store.points(r.id, with_samples=False)
            ok = sum(1 for pt in pts if pt.status == "ok")
            model = Path(str(r.plan.model.path or "")).name
            t.add_row(*(esc(v) for v in (r.id, r.kind, r.status, r.name or "", model,
                                         ", ".join(map(str, r.plan.backends)))),
                      str(len(pts)), str(ok), str(len(pts) - ok))
        console.print(t)


@lf_task(positional=["run"], help={"run": "run id, name, unique id prefix or 'latest'", "format": "json | csv | jsonl (llama-bench JSONL)",
               "output": "file to write (default: stdout)"})
def export(c, run, format="json", output=None):  # noqa: A002 - the option is called --format
    """Export a run: json (everything), csv (one row per sample) or jsonl (llama-bench's fields, readable by
    llama.cpp's scripts/compare-llama-bench.py)."""
    from ..bench.export import export_run

    with Store(paths().store_db) as store:
        r = store.get_run(run)
        text = visible(export_run(store, r.id, format))   # CSV cells from data: no raw ESC (JSON is ASCII already)
        if output:
            out = write_output(output, text, "--output")
            info(esc(f"wrote {out} ({format}, run {r.id})"))
        else:
            if not text:
                raise StoreError(f"run {r.id} has nothing to export as {format}", "only ok points are exported as jsonl")
            sys.stdout.write(text)


@lf_task(positional=["run"], help={
    "run": "the sweep to re-measure (id, unique prefix or 'latest')",
    "points": "only these ncmoe points (same syntax as --ncmoe; default: all of the run's points)",
    "min_effect": "the margin of the verdicts: within it 'same', beyond it 'differs' (0.05 or 5%; default 5%)",
    "allow_busy": _BENCH_HELP["allow_busy"],
    "against": "judge this stored sweep against RUN without measuring (the same plan in another session or on "
               "another machine; builds matched by backend when their keys differ)",
    "launches": LAUNCH_HELP["launches"] + " (default: the first run's own)",
    "max_launches": LAUNCH_HELP["max_launches"], "precision": LAUNCH_HELP["precision"],
    "bin_dir": "the folder of the run's external (--bin-dir) build, if it had one: a folder stored in a run is "
               "never run"})
def reproduce(c, run, points=None, min_effect="5%", allow_busy=False, against=None, launches=None, max_launches=None,
              precision=None, bin_dir=None):
    """Re-measure a stored sweep's points with the same builds, model and options, as a new run linked to it,
    and say per point whether the two agree, judged on server starts: same within --min-effect, differs, or
    inconclusive (the starts cannot tell; add starts with --launches auto).
    With --against RUN2 nothing is measured: RUN2 (e.g. the same sweep in another session) is judged against RUN.

    Example: llamaforge reproduce 20261130-101500-ab12 --points 0,4"""
    from rich.table import Table

    from ..findings.reproduction import verdict_between
    from ..reproduce import reproduce as reproduce_run

    effect = parse_effect(min_effect, option="--min-effect")
    lo = None
    if launches is not None or max_launches is not None or precision is not None:
        lo = parse_launches(launches or "auto", max_launches, precision)
    p = paths()
    with Store(p.store_db) as store:
        if against:
            v = verdict_between(store, run, against, effect)
        else:
            seq = None if lo is None or lo.fixed is not None else {"max_launches": lo.policy.max_starts,
                                                                  "precision": lo.policy.precision}
            v = reproduce_run(store, p, run, points=points, allow_busy=bool(allow_busy), command=" ".join(sys.argv),
                              min_effect=effect, launches=None if lo is None else (lo.policy.min_starts, seq),
                              bin_dir=bin_dir)
    t = Table(title=esc(f"run {v.child} reproduces run {v.parent}?"))
    for col in ("point", "metric", "first run", "re-run", "re-run / first", "verdict"):
        t.add_column(col)
    for pc in v.points:
        for m in pc.metrics or [None]:
            j = m.judgement if m else None
            t.add_row(esc(pc.name), esc(m.metric) if m else "–", j.a.fmt() if j else "–", j.b.fmt() if j else "–",
                      esc(f"{j.ratio:.2f}× {j.interval_text()}") if j else "–",
                      esc(j.verdict if j else pc.status) + (esc(f" ({pc.note})") if pc.note else ""))
    console.print(t)
    info(f"[bold]{esc(v.line())}[/]  " + esc(f"(report: `llamaforge report {v.child}`)"))


TASKS = [bench, fitmap, runs, export, reproduce]
