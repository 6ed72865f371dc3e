"""``report.md``: the same sections as the HTML, as GitHub-flavoured Markdown for a README or an
issue. Plots are linked relatively (the PNGs sit beside the file); long command lists stay in
the HTML's collapsible blocks but are included here too, as code.

Markdown renderers pass raw HTML through, so every interpolated value goes through
:func:`llamaforge.mdtext.md_text` or :func:`~llamaforge.mdtext.md_code` (a run named ``<script>``
stays text)."""

from __future__ import annotations

import time
from pathlib import Path

from ..files import write_text_atomic
from ..mdtext import md_code, md_text
from .data import ReportData, failed_count
from .sections import Section, Table


def table_md(t: Table) -> list[str]:
    out = ["| " + " | ".join(md_text(c) for c in t.columns) + " |",
           "|" + "|".join("---" for _ in t.columns) + "|"]
    for row in t.rows:
        cells = [md_code(c, in_table=True) if i in t.code_cols else md_text(c) for i, c in enumerate(row)]
        out.append("| " + " | ".join(cells) + " |")
    if t.note:
        out += ["", f"_{md_text(t.note)}_"]
    return out


def render(data: ReportData, sections: list[Section], out_dir: Path) -> str:
    run = data.run
    rows = data.all_rows
    lines = [f"# llamaforge report: {md_text(data.model_ref)}", "",
             f"Run {md_code(run.id)}{f' ({md_text(run.name)})' if run.name else ''} · kind {md_text(run.kind)} · "
             f"status {md_text(run.status)} · "
             f"created {time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(run.created))} · {len(rows)} points "
             f"({failed_count(rows)}) in {len(data.series)} series", ""]
    for s in sections:
        lines += [f"## {md_text(s.title)}", ""]
        if s.intro:
            lines += [md_text(s.intro), ""]
        if s.absent:
            lines += [f"> Absent: {md_text(s.absent)}.", ""]
        for t in s.tables:
            if t.title and t.title != s.title:
                lines += [f"### {md_text(t.title)}", ""]
            lines += table_md(t) + [""]
        for n in s.notes:
            lines += [f"_{md_text(n)}_", ""]
        for p in s.plots:
            rel = Path(p.path).relative_to(out_dir) if Path(p.path).is_relative_to(out_dir) else Path(p.path)
            lines += [f"![{md_text(p.title)}]({rel.as_posix()})", "", f"_{md_text(p.caption)}_", ""]
    lines.append(f"_Generated from the stored run; regenerate with {md_code(f'llamaforge report {run.id}')}._")
    return "\n".join(lines) + "\n"


def write(data: ReportData, sections: list[Section], path: Path, *, lead: str | None = None) -> Path:
    """``report.md``; a run kind's ``lead`` (:mod:`.kinds`) comes first, above a rule."""
    body = render(data, sections, path.parent)
    write_text_atomic(path, lead.rstrip() + "\n\n---\n\n" + body if lead else body)
    return path
