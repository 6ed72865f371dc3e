"""The report's section on an adaptive sweep (``bench --ncmoe auto`` / ``--ngl auto``), from the run plan's
``adaptive`` record.

It says which points were measured (and why each was chosen) and which were interpolated, by their
ncmoe (or ngl) only: an interpolated value is never shown as a number in a table (the tg plot draws it dotted,
with hollow markers, see :mod:`.plots`).
"""

from __future__ import annotations

from ..findings.labels import anomaly_text, threshold_heading
from ..findings.prose import NOT_PROVEN
from .data import ReportData
from .sections import Section, Table


def _span(xs: list[int]) -> str:
    runs: list[list[int]] = []
    for x in sorted(xs):
        if runs and runs[-1][-1] == x - 1:
            runs[-1].append(x)
        else:
            runs.append([x])
    return ", ".join(f"{r[0]}–{r[-1]}" if len(r) > 1 else str(r[0]) for r in runs) or "–"


def interpolated(data: ReportData) -> dict[str, dict[int, float]]:
    """Interpolated tg medians by build key (empty for a run that was not adaptive)."""
    rec = data.plan.adaptive.interpolated if data.plan.adaptive is not None else {}
    return {k: {int(x): float(v) for x, v in vals.items()} for k, vals in rec.items() if isinstance(vals, dict)}


def adaptive_section(data: ReportData) -> Section | None:
    """``None`` unless the run was adaptive."""
    rec = data.plan.adaptive
    if rec is None:
        return None
    names = {(f"{s.key[0]}#{s.key[2]}" if s.key[2] else s.key[0]): s.name for s in data.series}   # variants: KEY#NAME
    c = rec.conclusions
    chosen = rec.chosen
    axis = rec.axis
    fits = sum(len(v) for v in rec.ctx.values())
    sec = Section("adaptive", "Adaptive sweep", intro=(
        f"This run chose its points (--{axis} auto): first {fits} fit(s) without loading weights (run "
        f"{rec.fitmap_run or '–'}) found where the native context is first reached, by bisection (the fitted "
        f"context grows with the offload); then {rec.n_measured or len(chosen)} point(s) were measured, each for "
        "the reason listed; stopped: " + str(rec.stopped or "not finished") + ". The other points are "
        "interpolated between measured neighbours (linear in time per token): the tg plot draws them dotted with "
        "hollow markers, and no table shows an interpolated value."))
    concl = Table(["build", threshold_heading(axis), "sweet spot (fastest tg at native)", "anomalies",
                   f"measured {axis}", f"interpolated {axis}"], title="Conclusions")
    measured: dict[str, set[int]] = {}
    for ch in chosen:
        measured.setdefault(ch["series"], set()).add(int(ch[axis]))
    interp = interpolated(data)
    for key in sorted(measured):
        concl.rows.append([names.get(key, key), str((c.get("threshold") or {}).get(key, "–")),
                           str((c.get("sweet_spot") or {}).get(key, "–")),
                           anomaly_text(c, key),
                           _span(list(measured[key])), _span(list(interp.get(key, {})))])
    sec.tables.append(concl)
    why = Table(["#", "build", axis, "why"], title="Points in the order they were chosen")
    for i, ch in enumerate(chosen, 1):
        why.rows.append([str(i), names.get(ch["series"], ch["series"]), str(ch[axis]), str(ch["reason"])])
    sec.tables.append(why)
    regions = c.get("regions") or []
    if regions:
        sec.notes.append("Winner per region (the judge on server starts: faster than every other build by more than "
                         f"the minimum effect, with Holm's control over every {axis} judged; '{NOT_PROVEN}' where no "
                         "build is: no winner is shown): " + "; ".join(
            f"{axis} {lo}–{hi}: {NOT_PROVEN if w == 'tie' else names.get(w, w)}" for lo, hi, w in regions) + ".")
    sec.notes.append("Anomalies: points faster than the neighbour their build's trend says is at least as fast, "
                     "judged on server starts with Benjamini–Hochberg over every comparison of the sweep (the rule of "
                     "the Anomalies section); suspects are faster in their own comparison only.")
    if rec.confirmed:
        sec.notes.append("Confirmed with one more server start: " + ", ".join(
            f"{names.get(d['series'], d['series'])} {axis} {d[axis]}" for d in rec.confirmed) + ".")
    return sec

