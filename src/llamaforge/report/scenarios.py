"""The Summary section: per series the summary scenarios (all on the device, first native context, best tg
at native context), the judged ratios between series, and every note a reader needs before the numbers."""

from __future__ import annotations

from collections.abc import Sequence

from ..findings.drift import drift_flags
from ..judge import MIN_EFFECT, assumptions_note, judge
from ..judge.adjusted import controlled
from . import analysis as an
from .data import ReportData, Row, Series
from .format import fmt_int, fmt_judged, fmt_mib, fmt_speed, precision_of
from .measurement_conditions import row_flags
from .points import fit_status_of
from .replication import drift_notes, launches_of, machine_notes
from .sections import Section, Table

SCENARIOS = (
    ("all_gpu", "all layers on the device (ncmoe 0)"),
    ("first_native", "first ncmoe with native context"),
    ("best_native", "best tg at native context"),
)


NGL_SCENARIOS = (
    ("all_gpu", "all layers on the device (ngl all)"),
    ("first_native", "fewest layers off the device with native context"),
    ("best_native", "best tg at native context"),
)


def scenarios(data: ReportData) -> tuple[tuple[str, str], ...]:
    return NGL_SCENARIOS if data.axis == "ngl" else SCENARIOS


def pick(s: Series, scenario: str, native: int | None) -> Row | None:
    if scenario == "all_gpu":
        if s.rows and s.rows[0].axis == "ngl":
            return min(s.rows, key=lambda r: r.offload)
        return next((r for r in s.rows if r.ncmoe == 0), None)
    if scenario == "first_native":
        return an.first_native(s.rows, native)
    return an.best_at_native(s.rows, native, "tg")


NO_SINGLE_BEST = "fastest tg centre at native context (no single best: see Sweet spots)"


def scenario_label(sc: str, label: str, series: Sequence[Series], data: ReportData, min_effect: float) -> str:
    """``label``; for "best tg at native context" where the judge does not separate a series' fastest native
    point from the others (:func:`.analysis.judged_best`), :data:`NO_SINGLE_BEST` — "best" is not printed."""
    if sc != "best_native":
        return label
    for s in series:
        b = an.judged_best(s.rows, data.native_ctx, s.prior("tg"), min_effect)
        if b is not None and not b.single:
            return NO_SINGLE_BEST
    return label


def summary_table(data: ReportData, min_effect: float = MIN_EFFECT) -> Table:
    """Like the seed's: per series, ncmoe 0 / first native context / best tg at native context."""
    t = Table(["series", "point", data.axis, "context", "VRAM MiB", "RSS MiB", "pp t/s", "tg t/s"], title="Summary")
    for s in data.series:
        for sc, plain in scenarios(data):
            label = scenario_label(sc, plain, (s,), data, min_effect)
            r = pick(s, sc, data.native_ctx)
            if r is None:
                why = "not measured" if sc == "all_gpu" else (
                    "native context unknown" if not data.native_ctx else "never reached")
                t.rows.append([s.name, label, "–", why, "–", "–", "–", "–"])
                t.data.append({"series": s.name, "scenario": sc, "ncmoe": None})
                continue
            if not r.ok:
                t.rows.append([s.name, label, r.x_label, f"failed: {r.failure_class or '?'}", "–", "–", "–", "–"])
                t.data.append({"series": s.name, "scenario": sc, "ncmoe": r.ncmoe, "ok": False})
                continue
            t.rows.append([s.name, label, r.x_label, fmt_int(r.n_ctx), fmt_mib(r.vram_mib), fmt_mib(r.rss_mib),
                           fmt_speed(r, "pp"), fmt_speed(r, "tg")])
            t.data.append({"series": s.name, "scenario": sc, "ncmoe": r.ncmoe, "ngl": r.ngl, "ok": True, "n_ctx": r.n_ctx,
                           "pp_median": r.median("pp"), "tg_median": r.median("tg"),
                           "pp_k": r.starts("pp").k, "tg_k": r.starts("tg").k,
                           "pp_n": r.starts("pp").n_requests, "tg_n": r.starts("tg").n_requests})
    return t


RATIO_NOTE = ("ratio = first/second (centres: geometric means of the start medians). Verdicts of the judge on "
              "server starts: same (the interval lies within ±{e:.0%}), differs (it lies outside), inconclusive (it spans "
              "both: not proven either way); {family}. With fewer than 3 starts on a side there is no CI and no p-value: the range of "
              "start-to-start ratios is shown and the verdict (marked *) assumes a between-start spread, stated below.")


def ratio_judgements(data: ReportData, min_effect: float) -> list[tuple[str, str, Series, Series, Row, Row, dict]]:
    """Per pair of series (earlier over later) and summary scenario: the two rows and the judge's verdict
    per metric, the whole family controlled with Holm's method."""
    cells: list[tuple[str, str, Series, Series, Row, Row, dict]] = []
    for i, a in enumerate(data.series):
        for b in data.series[i + 1:]:
            for sc, plain in scenarios(data):
                label = scenario_label(sc, plain, (a, b), data, min_effect)
                ra, rb = pick(a, sc, data.native_ctx), pick(b, sc, data.native_ctx)
                if ra is None or rb is None or not ra.ok or not rb.ok:
                    continue
                js = {m: judge(rb.starts(m), ra.starts(m), min_effect=min_effect, prior_a=b.prior(m),
                               prior_b=a.prior(m)) for m in ("pp", "tg")}
                cells.append((sc, label, a, b, ra, rb, js))
    flat = controlled([c[6][m] for c in cells for m in ("pp", "tg")])
    it = iter(flat)
    return [(sc, label, a, b, ra, rb, {m: next(it) for m in ("pp", "tg")}) for sc, label, a, b, ra, rb, _js in cells]


def ratio_table(data: ReportData, min_effect: float) -> Table | None:
    """Pairwise ratios (earlier series over later in the fixed backend order) per summary scenario."""
    if len(data.series) < 2:
        return None
    cells = ratio_judgements(data, min_effect)
    n = sum(1 for c in cells for m in ("pp", "tg") if c[6][m] is not None)
    family = (f"Holm's method over the table's {n} comparisons (Holm, {n} comparisons: each interval shown is the one "
              "its verdict used, at the level Holm tested it at)" if n > 1 else "one comparison (its 95 % CI)")
    t = Table(["scenario", "ratio", data.axis, "context", "pp", "tg", "starts (K×R)"], title="Ratios",
              note=RATIO_NOTE.format(e=min_effect, family=family))
    precision = precision_of(data)
    for sc, label, a, b, ra, rb, js in cells:
        ctx = f"{ra.n_ctx / rb.n_ctx:.2f}×" if ra.n_ctx and rb.n_ctx else "–"
        shapes = f"{ra.starts('tg').shape} / {rb.starts('tg').shape}"
        t.rows.append([label, f"{a.name}/{b.name}", f"{ra.x_label} vs {rb.x_label}", ctx,
                       *[fmt_judged(js[m], a.name, b.name, (ra, rb), precision) for m in ("pp", "tg")], shapes])
        t.data.append({"scenario": sc, "num": a.name, "den": b.name,
                       **{m: (j.to_dict() if j else None) for m, j in js.items()}})
    if note := assumptions_note([j for c in cells for j in c[6].values()]):
        t.note += f" * {note}."
    return t


def context_notes(data: ReportData) -> list[str]:
    """One line per series whose contexts were not fitted by llama-server (old builds, --ctx, refusals)."""
    from ..findings.labels import FIT_STATUS_NOTES

    out = []
    for s in data.series:
        counts: dict[str, int] = {}
        for r in s.rows:
            st = fit_status_of(r)
            if st and st != "fitted":
                counts[st] = counts.get(st, 0) + 1
        for st, n in sorted(counts.items()):
            out.append(f"Context of {s.name}: {FIT_STATUS_NOTES.get(st, st)} ({n} of {len(s.rows)} points).")
    return out


def output_guard_notes(data: ReportData) -> list[str]:
    """One line per series whose server rejected its own non-UTF-8 output (measured with tokens banned)."""
    out = []
    for s in data.series:
        guarded = [r for r in s.rows if r.point is not None and r.point.detail.output_guard]
        if guarded:
            g = guarded[0].point.detail.output_guard or {}
            out.append(f"{s.name}: llama-server rejected its own non-UTF-8 output, so {len(guarded)} of {len(s.rows)} "
                       f"points were measured with {g.get('banned_tokens')} incomplete-UTF-8 tokens banned "
                       "(logit_bias; the generated text differs, the work per token does not).")
    return out


def summary_section(data: ReportData, full: ReportData, min_effect: float) -> Section:
    """Summary: scenarios, backend ratios and every note a reader needs before the numbers."""
    summ = Section("summary", "Summary", intro=(
        f"Native context: {fmt_int(data.native_ctx)} tokens." if data.native_ctx
        else "Native context unknown (no n_ctx_train in the model facts or points)."))
    if not any(r.ok for r in full.all_rows):
        summ.absent = "every point failed, so there is nothing to summarise; see Failed points"
    else:
        summ.tables.append(summary_table(data, min_effect))
        rt = ratio_table(data, min_effect)
        if rt is None:
            summ.notes.append("Comparison between backends absent: this run has only one series "
                              f"({data.series[0].name}).")
        elif not rt.rows:
            summ.notes.append("Comparison between backends absent: no scenario has an ok point in two series.")
        else:
            summ.tables.append(rt)
    if full is not data:
        summ.notes.append("This run measured every point with llama-server and llama-bench (`--engine both`): the "
                          "summary, sweet spots and ratios use llama-server; see Engine cross-check.")
    for v in full.reproductions:
        summ.notes.append(f"Reproduction (run {v['parent']} → run {v['child']}): {v['line']}.")
    marked = [(s.name, r.ncmoe, row_flags(r)) for s in full.series for r in s.rows if row_flags(r)]
    if marked:
        summ.notes.append(f"{len(marked)} point(s) ran throttled, loaded or shared (see Measurement conditions): "
                          + ", ".join(f"{n} ncmoe {m} ({', '.join(f)})" for n, m, f in marked[:6]) + ".")
    if launches_of(full) < 2 and full.run.kind == "sweep":
        summ.notes.append("Between-process spread was not measured (one server start per point); see Replication.")
    summ.notes += drift_notes(drift_flags(full.points))
    summ.notes += machine_notes(full)
    summ.notes.extend(context_notes(full))
    summ.notes.extend(output_guard_notes(full))
    return summ
