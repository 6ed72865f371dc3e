"""report command: render a stored run as HTML + Markdown + PNGs (no measuring)."""

from __future__ import annotations

from pathlib import Path

from ..console import esc, info
from ..errors import StoreError
from ..pathsafe import under
from ..store import Store, check_results_folder
from ..values import parse_effect
from ._common import lf_task, paths, writable_dir


@lf_task(help={
    "run": "run id, name, unique id prefix, or 'latest'",
    "out": "output folder (default: results/reports/<run id>/)",
    "min_effect": "the margin of the verdicts: within it 'same', beyond it 'differs' (0.05 or 5%; default 5%)",
    "with": "another run of the same plan (another session or machine); repeat it, or give several "
            "comma-separated: adds an 'Across sessions' section (session → start → request)",
}, iterable=["with_"])
def report(c, run, out=None, min_effect="5%", with_=None):
    """Write a report (report.html, report.md, PNG plots) for a stored run: the headline (direction, how often
    it held, magnitude), tables with intervals and K×R (server starts × requests), backend ratios judged on
    server starts, sweet spots, anomalies, roofline and provenance. With --with RUN2 [--with RUN3 …]: runs of
    the same plan from other sessions, and what holds in every one of them."""
    from ..report import write_report

    effect = parse_effect(min_effect)
    if out is not None:
        writable_dir(out, "--out")
    db = paths().store_db
    check_results_folder(db.parent, create=False)
    if not db.is_file():
        raise StoreError(f"no results store at {db}", "measure a run first with `llamaforge bench`")
    with Store(db) as store:
        run_id = store.get_run(run).id
        others = [store.get_run(r.strip()).id for w in (with_ or []) for r in str(w).split(",") if r.strip()]
        out_dir = Path(out) if out else under(paths().results / "reports", run_id)
        rp = write_report(store, run_id, out_dir, min_effect=effect, sessions=others)
    info(f"report for run [bold]{esc(run_id)}[/]:")
    info(esc(f"  html      {rp.html}"))
    info(esc(f"  markdown  {rp.md}"))
    info(esc(f"  plots     {len(rp.pngs)} PNG in {out_dir}"))


TASKS = [report]
