"""Benchmark commands: ``bench`` (offload sweeps), ``fitmap``, ``runs``, ``export``."""

from __future__ import annotations

import sys
from pathlib import Path

from ..bench.cli_options import bench_options, convert, help_for, parse_launches, task_values
from ..console import console, esc, info, notice
from ..errors import BenchError, StoreError
from ..store import Store
from ..visible import visible
from ._common import lf_task, paths, write_output


@lf_task(help=help_for("bench"), iterable=["variant"])
def bench(c, model=None, backends=None, pins=None, ncmoe="0", place=None, rpc=None, split=None,
          tensor_split=None, main_gpu=None, device=None, ngl=None, repeats=3, engine="server",
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
    from ..bench.start import check_run, start_bench

    options = bench_options(**task_values("bench", locals()))   # every value checked before anything runs
    p = paths()
    options = checkout_revisions(options, p)
    with Store(p.store_db) as store:
        run_id = start_bench(options, p, store, command=" ".join(sys.argv))
        _show_run(store, run_id)
        check_run(store, run_id)


def checkout_revisions(options, p):  # noqa: ANN001, ANN201
    """Inside a llama.cpp checkout, --pins names its revisions (default HEAD): they become the mirror shas their
    builds are found by (``llamaforge build`` there builds them). Elsewhere, or with --bin-dir / --variant, as given."""
    from dataclasses import replace

    from ..sources.localrepo import checkout_from, revision_shas
    from ..values import csv_list

    if options.bin_dir or options.variant or options.variants_file or options.resume:
        return options
    co = checkout_from(None)
    if co is None:
        return options
    return replace(options, pins=",".join(revision_shas(co, csv_list(options.pins, what="revision") or ["HEAD"], p)))


def _show_run(store: Store, run_id: str) -> None:
    """The run's table, the engine cross-check (why the engines differ) or the adaptive conclusions, its id."""
    from ..bench.autosweep import print_adaptive
    from ..bench.display import print_run
    from ..report.engine_gap import print_gap

    print_run(store, run_id)
    plan = store.get_run(run_id).plan
    if plan.engine == "both":
        print_gap(store, run_id)
    if plan.adaptive is not None:
        print_adaptive(store, run_id)
    info(f"run id: [bold]{esc(run_id)}[/]  " + esc(f"(report: `llamaforge report {run_id}`, export: `llamaforge export {run_id}`)"))


@lf_task(help=help_for("fitmap"))
def fitmap(c, model=None, backends="cpu", pins=None, ncmoe=None, ngl=None, vram_budget=None, fitt=None,
           threads=None, bin_dir=None):
    """The context llama.cpp fits at every offload point (llama-fit-params, ~1 s per point, no weights loaded).

    Prints a table (context, share of the native context, which layers' experts go where) and stores a
    run of kind fitmap. Default points: every -ncmoe from 0 to the model's layer count.
    """
    from ..bench.fitmap import fitmap_table
    from ..bench.start import start_fitmap

    options = bench_options(**task_values("fitmap", locals()), repeats=1, launches=1)
    if not model:      # before the store is opened (or created)
        from ..bench.start import check_ranges

        check_ranges(options)    # a reversed or huge range is said first, not hidden behind the missing model
        raise BenchError("no model given", "pass --model PATH")
    p = paths()
    with Store(p.store_db) as store:
        run_id = start_fitmap(options, p, store, command=" ".join(sys.argv))
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
            n, ok = store.point_counts(r.id)     # counted in SQL: no point (nor its log tail) is read
            model = Path(str(r.plan.model.path or "")).name
            t.add_row(*(esc(v) for v in (r.id, r.kind, r.status, r.name or "", model,
                                         ", ".join(map(str, r.plan.backends)))),
                      str(n), str(ok), str(n - ok))
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


@lf_task(positional=["run"], help=help_for("reproduce", run="the sweep to re-measure (id, unique prefix or 'latest')"))
def reproduce(c, run, points=None, min_effect="5%", allow_busy=False, against=None, launches=None, max_launches=None,
              precision=None, bin_dir=None):
    """Re-measure a stored sweep's points with the same builds, model and options, as a new run linked to it,
    and say per point whether the two agree, judged on server starts: same within --min-effect, differs, or
    inconclusive (the starts cannot tell; add starts with --launches auto).
    With --against RUN2 nothing is measured: RUN2 (e.g. the same sweep in another session) is judged against RUN.

    Example: llamaforge reproduce 20261130-101500-ab12 --points 0,4"""
    from ..findings.reproduction import verdict_between
    from ..reproduce.remeasure import reproduce as reproduce_run
    from ..reproduce.show import print_verdict

    given = convert(task_values("reproduce", locals()))
    effect = given["min_effect"]
    lo = None
    if launches is not None or max_launches is not None or precision is not None:
        lo = parse_launches(given["launches"] or "auto", given["max_launches"], precision)
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
    print_verdict(v)


TASKS = [bench, fitmap, runs, export, reproduce]
