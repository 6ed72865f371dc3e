"""``report.md``: the same sections as the HTML, as GitHub-flavoured Markdown for a README or an
issue. Plots are linked relatively (the PNGs sit beside the file); long command lists stay in
the HTML's collapsible blocks but are included here too, as code."""

from __future__ import annotations

import time
from pathlib import Path

from .data import ReportData
from .tables import Section, Table


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def table_md(t: Table) -> list[str]:
    out = ["| " + " | ".join(_cell(c) for c in t.columns) + " |",
           "|" + "|".join("---" for _ in t.columns) + "|"]
    for row in t.rows:
        cells = [f"`{_cell(c)}`" if i in t.code_cols else _cell(c) for i, c in enumerate(row)]
        out.append("| " + " | ".join(cells) + " |")
    if t.note:
        out += ["", f"_{t.note}_"]
    return out


def render(data: ReportData, sections: list[Section], out_dir: Path) -> str:
    run = data.run
    rows = data.all_rows
    lines = [f"# llamaforge report: {data.model_ref}", "",
             f"Run `{run.id}`{f' ({run.name})' if run.name else ''} · kind {run.kind} · status {run.status} · "
             f"created {time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(run.created))} · {len(rows)} points "
             f"({sum(not r.ok for r in rows)} failed) in {len(data.series)} series", ""]
    for s in sections:
        lines += [f"## {s.title}", ""]
        if s.intro:
            lines += [s.intro, ""]
        if s.absent:
            lines += [f"> Absent: {s.absent}.", ""]
        for t in s.tables:
            if t.title and t.title != s.title:
                lines += [f"### {t.title}", ""]
            lines += table_md(t) + [""]
        for n in s.notes:
            lines += [f"_{n}_", ""]
        for p in s.plots:
            rel = Path(p.path).relative_to(out_dir) if Path(p.path).is_relative_to(out_dir) else Path(p.path)
            lines += [f"![{p.title}]({rel.as_posix()})", "", f"_{p.caption}_", ""]
    lines.append(f"_Generated from the stored run; regenerate with `llamaforge report {run.id}`._")
    return "\n".join(lines) + "\n"


def write(data: ReportData, sections: list[Section], path: Path) -> Path:
    path.write_text(render(data, sections, path.parent), encoding="utf-8")
    return path
