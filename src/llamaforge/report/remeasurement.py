"""Reproduction: what ``llamaforge reproduce`` found when it measured a run's points again."""

from __future__ import annotations

from .data import ReportData
from .sections import Section, Table


def reproduction_section(data: ReportData) -> Section | None:
    if not data.reproductions:
        return None
    sec = Section("reproduction", "Reproduction", intro=(
        "`llamaforge reproduce` re-measured points of a sweep with the same builds, model and options. Each metric "
        "is judged on server starts (re-run over first run): same within the margin (the ratio's CI lies inside "
        "it), differs (outside), inconclusive (it spans both: the starts cannot tell, which is no pass). A point "
        "reproduces when pp and tg are both the same; the family of all verdicts is controlled with Holm's method, and "
        "each change's interval is the one its verdict used (at the level Holm's step-down tested it at). "
        "Conditions: GPU 0's SM clock and the host's load average (medians while the point was measured) and the "
        "telemetry flags, first run / re-run."))
    for v in data.reproductions:
        role = "this run re-measures" if v["child"] == data.run.id else "re-measured by"
        other = v["parent"] if v["child"] == data.run.id else v["child"]
        sec.notes.append(f"Run {data.run.id} {role} run {other}: **{v['line']}**")
        t = Table(["point", "status", "pp first → re-run (K×R)", "pp change", "tg first → re-run (K×R)", "tg change",
                   "conditions first / re-run"], title=f"run {v['parent']} → run {v['child']}")
        for pc in v["points"]:
            cells = []
            for m in ("pp", "tg"):
                mc = (pc.get("metrics") or {}).get(m) or {}
                cells += [_reproduce_cell(mc), _change_cell(mc)]
            first, again = pc.get("conditions") or ("", "")
            t.rows.append([pc["name"], pc["status"] + (f" ({pc['note']})" if pc.get("note") else ""), *cells,
                           f"{first or '–'} / {again or '–'}"])
            t.data.append(pc)
        sec.tables.append(t)
    if note := _not_remeasured_note(data):
        sec.notes.append(note)
    return sec


def _reproduce_cell(mc: dict) -> str:
    """``161.0 (2×2) → 150.2 (3×2)`` from a stored metric check (old stores kept ``median``, new ``centre``)."""
    a, b = mc.get("a"), mc.get("b")
    if not a or not b:
        return "–"

    def one(d: dict) -> str:
        c = d.get("centre", d.get("median"))
        shape = d.get("shape") or (f"n={d['n']}" if d.get("n") else "")
        return f"{c:,.1f}" + (f" ({shape})" if shape else "")

    return f"{one(a)} → {one(b)}"


def _change_cell(mc: dict) -> str:
    """``+20.4 % inconclusive`` / ``-8.0 % [-10.1, -5.9] differs`` (the judge's verdict; older stores: the change)."""
    if mc.get("change") is None:
        return "–"
    j = mc.get("judgement") or {}
    if not j:
        return f"{mc['change']:+.1%}"
    if j.get("p_differs") is None:   # < 3 starts on a side: no interval, the verdict assumes a spread
        return f"{mc['change']:+.1%} {j.get('verdict')}" + ("*" if j.get("verdict") != "inconclusive" else "")
    return f"{mc['change']:+.1%} [{j['low'] - 1:+.1%}, {j['high'] - 1:+.1%}] {j.get('verdict')}"


def _not_remeasured_note(data: ReportData) -> str | None:
    """The run's points that none of its ``reproduce`` runs measured again: their numbers rest on this run's own
    server starts only, and the report says so rather than letting them pass as reproduced."""
    mine = [v for v in data.reproductions if v["parent"] == data.run.id and "not_remeasured" in v]
    if not mine:
        return None
    left = [n for n in mine[0]["not_remeasured"] if all(n in v["not_remeasured"] for v in mine[1:])]
    if not left:
        return "Every point of this run was re-measured by `reproduce`."
    return (f"Not re-measured by `reproduce`: {len(left)} point(s) ({', '.join(left)}); their numbers rest on this "
            "run's own server starts only (see *Replication and drift*).")
