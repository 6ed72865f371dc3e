"""``history.*`` tasks: ``run`` (measure commits into a series), ``show`` (series, steps, ratios) and
``publish`` (a static site). Thin: parse options, call :mod:`llamaforge.history`, print."""

from __future__ import annotations

import sys

from ..console import info
from ..options.table import convert, help_for, task_values
from ..values import parse_effect
from ._common import as_int, csv_list, lf_task, paths, pins, writable_dir

#: ``history.run``'s help (the table's, :mod:`llamaforge.options.table`, and its own options'); ``fleet.history``
#: shows the same texts where its options mean the same
RUN_HELP = help_for(
    "history.run",
    range="OLDER..NEWER: the first-parent line between two commits (NEWER may be a branch of --source)",
    every="with --range: every N-th commit (and always the newest); default 1",
    releases="the release pins of pins.toml (built from their sdists)",
    commits="comma-separated commits",
    bisect="locate every step not located yet to its commit (noise-aware bisect)",
    bisect_max_launches="starts per commit a step's bisect may use (default: --max-launches); it stops early "
                        "where the change is clear and refuses up front when even this is too few",
    **{"continue": "only what is new since this machine's last run of the series (and what an interrupted run left)"})


@lf_task(name="run", help=RUN_HELP)
def run(c, range=None, every=1, releases=False, commits=None, source=None, backend="cpu",  # noqa: A002
        model="synth:tiny-qwen35moe", ncmoe="0", engine="server", repeats=3, prompt_tokens=512, n_predict=64,
        threads=None, quiet_starts=True, min_launches=3, max_launches=None, precision=None, min_effect="5%",
        continue_=False, bisect=False, bisect_max_launches=None, vram_budget=None, ctx=None):
    """Build and measure llama.cpp commits into a performance history (one series per machine, backend, model,
    point and metric): every commit in sequential server starts, failures recorded and skipped; with
    --bisect each step found is located to its commit. Then prints the series and their steps."""
    from ..bench.plan import parse_int_list
    from ..config import SourceSpec
    from ..history.load import load_history
    from ..history.run import HistoryRequest, run_history
    from ..history.select import Selection
    from ..history.show import print_history
    from ..store import Store

    given = convert(task_values("history.run", locals()), check_group=False)   # checked before anything runs
    sel = Selection(range=range, every=as_int(every, "--every"), releases=bool(releases),
                    commits=tuple(csv_list(commits, what="commit")) if commits else (),
                    source=SourceSpec.parse(source, where="--source") if source else None)
    req = HistoryRequest(
        selection=sel, backends=tuple(csv_list(backend, what="backend")), model=model,
        ncmoe=tuple(parse_int_list(str(ncmoe), what="--ncmoe")), engine=engine,
        **{k: given[k] for k in ("repeats", "prompt_tokens", "n_predict", "threads", "vram_budget", "ctx")},
        quiet=given["quiet_starts"], min_starts=given["min_launches"], resume=bool(continue_), bisect=bool(bisect),
        **{k: v for k, v in (("max_starts", given["max_launches"]), ("precision", given["precision"])) if v is not None},
        min_effect=parse_effect(min_effect, option="--min-effect", allow_zero=False),
        bisect_max_starts=as_int(bisect_max_launches, "--bisect-max-launches", minimum=3) if bisect_max_launches else None)
    p = paths()
    with Store(p.store_db) as store:
        out = run_history(p, pins(), store, req, command=" ".join(sys.argv))
        print_history(load_history(store))
    if out.run_id:
        info(f"stored as run [bold]{out.run_id}[/]: {len(out.measured)} commits measured, {len(out.failed)} failed")


_FILTER_HELP = {"machine": "only this machine's series", "backend": "only this backend", "metric": "pp, tg, ttft, "
                "vram or host", "model": "only this model"}


def _filter(machine, backend, metric, model):  # noqa: ANN001, ANN202
    from ..history.load import Filter

    return Filter(machine=machine, backend=backend, model=model, metric=metric)


def _selected(store, flt):  # noqa: ANN001, ANN202
    """The stored history under ``flt``; a filter that matches no series is refused with what is there."""
    from ..history.load import selected_history

    return selected_history(store, flt)


@lf_task(name="show", help=_FILTER_HELP)
def show(c, machine=None, backend=None, metric=None, model=None):
    """Print the stored performance history: per series its latest level, its steps (with culprits) and the
    backend ratios over time."""
    from ..history.show import print_history
    from ..store import Store

    with Store(paths().store_db) as store:
        print_history(_selected(store, _filter(machine, backend, metric, model)))


@lf_task(name="publish", help={"out": "the site's folder (new, empty, or an earlier site)", **_FILTER_HELP,
                               "title": "the site's title"})
def publish(c, out, machine=None, backend=None, metric=None, model=None, title="llama.cpp performance history"):
    """Write the stored history as a static site (index with sparklines and the latest steps, one interactive
    page per series, backend ratios); open OUT/index.html from disk or serve the folder."""
    from ..history.site import publish as write_site
    from ..store import Store

    where = writable_dir(out, "OUT")          # before anything is loaded
    with Store(paths().store_db) as store:
        res = write_site(_selected(store, _filter(machine, backend, metric, model)), where, title=title)
    info(f"site written: {res.out}/index.html ({res.n_series} series)")


TASKS = [run, show, publish]

