"""Sweet spots: the smallest offload with native context, the fastest generation there, the Pareto fronts.

"Best tg at native ctx" names one point only where the judge finds it faster than every other native point
by more than the margin (:func:`.analysis.judged_best`: its verdicts on server starts, Holm over them);
otherwise it says which points tie within ±E, or which the judge cannot tell apart.
"""

from __future__ import annotations

from ..findings.prose import same_within
from ..judge import SAME
from ..judge.wording import percent
from . import analysis as an
from .data import ReportData, Row, Series
from .format import fmt_int, fmt_speed
from .sections import Section, Table


def _axis(data: ReportData) -> str:
    return "N" if data.axis == "ncmoe" else data.axis


def _names(ax: str, rows: list[Row]) -> str:
    """``N=0, N=4 and N=8`` (in offload order)."""
    names = [f"{ax}={r.x_label}" for r in sorted(rows, key=lambda r: (r.offload, r.other))]
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + f" and {names[-1]}"


def best_text(b: an.Best, ax: str) -> str:
    """The sweet spot's "best tg" cell: one point when the judge separates it from the runner-up,
    ``N=8: tg 101.3 [99.8, 102.8] (4×5), faster than the runner-up N=4 by more than 5 %``; otherwise the tie,
    ``N=0, N=4 and N=8: same within ±5 % (fastest centre N=8: tg …)`` (every verdict "same") — or, where a verdict is inconclusive,
    ``no single best: N=4 and N=8 are not told apart within ±5 % (…)``."""
    e = percent(b.min_effect)
    centre = f"{ax}={b.best.x_label}: tg {fmt_speed(b.best, 'tg')}"
    if b.single:
        return centre
    group = _names(ax, [b.best, *(r for r, _j in b.ties)])
    if all(j.verdict == SAME for _r, j in b.ties):
        return f"{group}: {same_within(b.min_effect)} (fastest centre {centre})"
    return f"no single best: {group} are not told apart within ±{e} (fastest centre {centre})"


def _runner_up_note(b: an.Best, ax: str) -> str:
    """``, faster than the runner-up N=4 by more than 5 %`` for a single best with another native point."""
    second = b.runner_up
    if not b.single or second is None:
        return ""
    return f", faster than the runner-up {ax}={second.x_label} by more than {percent(b.min_effect)}"


def best_cell(s: Series, data: ReportData, min_effect: float) -> tuple[str, an.Best | None]:
    b = an.judged_best(s.rows, data.native_ctx, s.prior("tg"), min_effect)
    if b is None:
        return ("native context unknown" if not data.native_ctx else "never reached"), None
    ax = _axis(data)
    return best_text(b, ax) + _runner_up_note(b, ax), b


def sweet_spot_table(data: ReportData, min_effect: float = 0.05) -> Table:
    t = Table(["series", "smallest offload with native ctx", "best tg at native ctx",
               "Pareto front (context, tg)", "Pareto front (context, pp)"], title="Sweet spots")

    ax = _axis(data)

    def pf(rows: list[Row], m: str) -> str:
        return "; ".join(f"{ax}={r.x_label} ({fmt_int(r.n_ctx)}, {r.median(m):.1f})" for r in rows) or "–"

    for s in data.series:
        fn = an.first_native(s.rows, data.native_ctx)
        best, bn = best_cell(s, data, min_effect)
        ftg, fpp = an.pareto_front(s.rows, "tg"), an.pareto_front(s.rows, "pp")
        none = "native context unknown" if not data.native_ctx else "never reached"
        t.rows.append([s.name,
                       f"{ax}={fn.x_label}: {fmt_int(fn.n_ctx)} ctx, tg {fmt_speed(fn, 'tg')}" if fn else none,
                       best, pf(ftg, "tg"), pf(fpp, "pp")])
        t.data.append({"series": s.name, "first_native": fn.x if fn else None,
                       "best_native": bn.best.x if bn and bn.single else None,
                       "fastest_native": bn.best.x if bn else None,
                       "ties_native": [r.x for r, _j in bn.ties] if bn else [],
                       "pareto_tg": [r.x for r in ftg], "pareto_pp": [r.x for r in fpp]})
    return t


def sweet_spot_section(data: ReportData, any_ok: bool, min_effect: float = 0.05) -> Section:
    sweet = Section("sweet-spots", "Sweet spots", intro=(
        f"The smallest offload ({'ncmoe' if data.axis == 'ncmoe' else 'fewest layers off the device'}) that still "
        "fits the native context, the fastest generation at native context, and the Pareto fronts: points no "
        "other point beats on both context and speed. One point is called best only where the judge finds it "
        f"faster than every other native point by more than {percent(min_effect)} (server starts, Holm's method "
        "over those comparisons); otherwise the points it cannot separate are named together."))
    if any_ok:
        sweet.tables.append(sweet_spot_table(data, min_effect))
    else:
        sweet.absent = "no point succeeded"
    return sweet
