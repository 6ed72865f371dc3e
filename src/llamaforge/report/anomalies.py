"""Anomalies: points that break their series' trend (found by :mod:`.analysis`), as the judge's verdicts."""

from __future__ import annotations

from ..judge import assumptions_note
from ..metrics import LABELS
from . import analysis as an
from .data import ReportData
from .format import fmt_ratio
from .sections import Section, Table


def anomaly_table(found: list[an.Anomaly]) -> Table:
    axis = found[0].row.axis if found else "ncmoe"
    t = Table(["series", "metric", axis, f"beats {axis}", "centres (K×R)", "ratio", "full-attn layers moved"],
              title="Anomalies")
    for a in found:
        j = a.judgement
        t.rows.append([a.row.series, LABELS[a.metric], a.row.x_label, a.neighbour.x_label,
                       f"{j.b.centre:.1f} ({j.b.shape}) vs {j.a.centre:.1f} ({j.a.shape})",
                       fmt_ratio(j, f"{axis} {a.row.x_label}", f"{axis} {a.neighbour.x_label}"),
                       ", ".join(str(x) for x in a.full_attn_moved) or "none"])
        t.data.append({"series": a.row.series, "metric": a.metric, "ncmoe": a.row.ncmoe, "ngl": a.row.ngl,
                       "neighbour": a.neighbour.x, **j.to_dict(), "full_attn_moved": list(a.full_attn_moved)})
    return t


def anomaly_section(data: ReportData, found: list[an.Anomaly], min_effect: float) -> Section:
    anom = Section("anomalies", "Anomalies", intro=(
        "Points that break their series' trend: significantly faster than the adjacent point the trend says "
        "should be at least as fast — the one with less offload where speed falls as layers move to the host "
        f"({'lower ncmoe' if data.axis == 'ncmoe' else 'higher ngl'}), the one with more offload where it rises "
        "(a device slower than the host), both where the judge does not find the series' two ends different. "
        f"Each is the judge's verdict 'differs' (faster by more than {min_effect:.0%}) on server starts, kept "
        "only where it survives Benjamini–Hochberg (false discovery rate 5 %) over every neighbour comparison of "
        "the report; its interval is the one it was kept at (α·R/m for the R anomalies of the m comparisons: the "
        "false-coverage-rate interval, wider than 95 %) (a verdict marked * "
        "comes from a point with fewer than 3 starts and assumes a between-start spread). 'Full-attn layers moved' lists the "
        "full-attention layers whose experts went to the CPU between the two points."
        + (f" Full-attention layers (0-based): {', '.join(map(str, data.full_attn_layers))}."
           if data.full_attn_layers else " The model facts do not name its full-attention layers.")))
    ok = [r for r in data.all_rows if r.ok]
    if found:
        anom.tables.append(anomaly_table(found))
        if note := assumptions_note([a.judgement for a in found]):
            anom.notes.append(f"* {note}.")
    elif not ok:
        anom.absent = "no point succeeded"
    else:
        most = max((r.starts("tg").k for r in ok), default=0)
        anom.absent = ("none found" if most >= 3 else
                       f"none found; points have at most {most} server start(s), so only a jump beyond the assumed "
                       "between-start spread can show (measure with --launches auto or 3+ to judge smaller ones)")
    return anom
