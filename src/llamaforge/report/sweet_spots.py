"""Sweet spots: the smallest offload with native context, the fastest generation there, the Pareto fronts."""

from __future__ import annotations

from . import analysis as an
from .data import ReportData, Row
from .format import fmt_int, fmt_speed
from .sections import Section, Table


def sweet_spot_table(data: ReportData) -> Table:
    t = Table(["series", "smallest offload with native ctx", "best tg at native ctx",
               "Pareto front (context, tg)", "Pareto front (context, pp)"], title="Sweet spots")

    ax = "N" if data.axis == "ncmoe" else data.axis

    def pf(rows: list[Row], m: str) -> str:
        return "; ".join(f"{ax}={r.x_label} ({fmt_int(r.n_ctx)}, {r.median(m):.1f})" for r in rows) or "–"

    for s in data.series:
        fn = an.first_native(s.rows, data.native_ctx)
        bn = an.best_at_native(s.rows, data.native_ctx)
        ftg, fpp = an.pareto_front(s.rows, "tg"), an.pareto_front(s.rows, "pp")
        none = "native context unknown" if not data.native_ctx else "never reached"
        t.rows.append([s.name,
                       f"{ax}={fn.x_label}: {fmt_int(fn.n_ctx)} ctx, tg {fmt_speed(fn, 'tg')}" if fn else none,
                       f"{ax}={bn.x_label}: tg {fmt_speed(bn, 'tg')}" if bn else none,
                       pf(ftg, "tg"), pf(fpp, "pp")])
        t.data.append({"series": s.name, "first_native": fn.x if fn else None,
                       "best_native": bn.x if bn else None,
                       "pareto_tg": [r.x for r in ftg], "pareto_pp": [r.x for r in fpp]})
    return t


def sweet_spot_section(data: ReportData, any_ok: bool) -> Section:
    sweet = Section("sweet-spots", "Sweet spots", intro=(
        f"The smallest offload ({'ncmoe' if data.axis == 'ncmoe' else 'fewest layers off the device'}) that still "
        "fits the native context, the fastest generation at "
        "native context, and the Pareto fronts: points no other point beats on both context and speed."))
    if any_ok:
        sweet.tables.append(sweet_spot_table(data))
    else:
        sweet.absent = "no point succeeded"
    return sweet
