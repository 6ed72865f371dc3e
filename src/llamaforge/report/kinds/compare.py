"""What a compare run's report leads with: both sides and, per point and metric, the start-level
centres with what their K allows, the ratio B/A with its CI and the judge's verdict."""

from __future__ import annotations

from pathlib import Path

from ...findings.comparison import ci_header, compare_note, fmt_cmp, fmt_side
from ...mdtext import md_code, md_text
from ...records import CompareSection, CompareSide, CompareSummary
from ...store import Run, Store
from ..data import ReportData
from ..plots import Plot
from ..sections import Section

_MARK_MD = {"better": "**+ better**", "worse": "**− worse**", "same": "= same", "inconclusive": "? inconclusive"}


def lead(store: Store, run: Run) -> str:
    """Markdown for a compare run (what ``inv report`` writes for kind ``compare``)."""
    plan = run.plan
    c = plan.compare or CompareSection()
    a, b = c.a or CompareSide(), c.b or CompareSide()
    s = run.summary_as(CompareSummary)
    model = plan.model.ref or ""
    out = [f"# Comparison {md_text(run.id)}", ""]
    for side, d in (("A (base)", a), ("B (head)", b)):
        where = (f", measured on machine **{md_text(d.machine)}** (host {md_text(d.host)}, "
                 f"run {md_code(d.run)})") if d.machine else ""
        out.append(f"- **{side}**: {md_code(d.ref)} on {md_text(d.backend)} — commit "
                   f"{md_code(str(d.commit or '')[:12])}, build {md_code(d.build)}{where}")
    out += [f"- model {md_code(model)}, engine {md_text(plan.engine)}, {md_text(c.per_round or c.repeats)} "
            f"requests per server start, launches {md_text(c.rounds)} ({md_text(c.interleave or 'interleaved')}), "
            f"minimum effect {float(s.min_effect if s.min_effect is not None else 0.05):.0%}", "",
            "| ncmoe | metric | A t/s (starts×requests) | B t/s (starts×requests) "
            f"| {ci_header(s)} | p (on starts) | verdict |",
            "|---:|---|---:|---:|---:|---:|---|"]
    for r in s.comparisons:
        ratio, p, verdict = fmt_cmp(r["comparison"])
        out.append(f"| {md_text(r['ncmoe'])} | {md_text(r['metric'])} | {fmt_side(r['A'])} | {fmt_side(r['B'])} | "
                   f"{ratio} | {p} | {_MARK_MD[verdict]} |")
    out += ["", md_text(compare_note(s))]
    for i, st in (s.stops or {}).items():
        if st.get("status") == "unresolved":
            where = f"ncmoe {plan.points[int(i)].ncmoe}" if int(i) < len(plan.points) else f"point {i}"
            out.append(f"\n**Unresolved**: {md_text(where)}: {md_text(st.get('reason'))}.")
    if s.failed:
        out += ["", f"{s.failed} of {s.points} measured points failed."]
    return "\n".join(out) + "\n"


def plots(store: Store, run: Run, out_dir: Path) -> list[Plot]:  # noqa: ARG001 - every kind has this interface
    return []


def sections(data: ReportData) -> list[Section]:  # noqa: ARG001 - every kind has this interface
    """No sections of its own: the lead and the common sections say it all."""
    return []
