"""report command: render a stored run as HTML + Markdown + PNGs (no measuring)."""

from __future__ import annotations

from pathlib import Path

from ..console import esc, info
from ..effect import parse_effect
from ..errors import StoreError
from ..pathsafe import under
from ..store import Store, check_results_folder
from ._common import lf_task, paths


@lf_task(help={
    "run": "run id, name, unique id prefix, or 'latest'",
    "out": "output folder (default: results/reports/<run id>/)",
    "min_effect": "smallest relative difference called significant: 0.05 or 5% (default 5%)",
})
def report(c, run, out=None, min_effect="5%"):
    """Write a report (report.html, report.md, PNG plots) for a stored run: tables with spread and
    count, backend ratios with significance, sweet spots, anomalies, roofline and provenance."""
    from ..report import write_report

    effect = parse_effect(min_effect)
    db = paths().store_db
    check_results_folder(db.parent, create=False)
    if not db.is_file():
        raise StoreError(f"no results store at {db}", "measure a run first with `llamaforge bench`")
    with Store(db) as store:
        run_id = store.get_run(run).id
        out_dir = Path(out) if out else under(paths().results / "reports", run_id)
        rp = write_report(store, run_id, out_dir, min_effect=effect)
    info(f"report for run [bold]{esc(run_id)}[/]:")
    info(esc(f"  html      {rp.html}"))
    info(esc(f"  markdown  {rp.md}"))
    info(esc(f"  plots     {len(rp.pngs)} PNG in {out_dir}"))


TASKS = [report]
