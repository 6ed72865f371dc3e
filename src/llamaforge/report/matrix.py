"""The variant matrix (``bench --variant``): every variant against every other, judged on server starts.

* **Variants** — what each is (build, environment, arguments) and whether each of its knobs took effect
  (:mod:`llamaforge.variants.took`: from llama.cpp's own log and device line).
* **Head-to-head** — for every pair, the judge's verdict at every common point and metric (one family, Holm;
  each interval shown is the one its verdict used, :mod:`llamaforge.judge.adjusted`): wins, same, losses and
  *not proven either way* — an inconclusive verdict is never a tie. A pair whose only difference is a knob
  that did not take effect is flagged and not counted as a difference.
* **Placements** — per metric, how often each variant placed 1st, 2nd, …: a variant's place at a point is 1 +
  the number of variants the judge calls faster there (a "same" shares a place); where a verdict against it is
  inconclusive its place is not proven, and it is counted as unranked there, never 1st.
* **Per-knob effects** — where two variants differ in exactly one knob: the knob's effect pooled over each run
  of neighbouring points whose verdicts agree, "differs" one way or "same" (:mod:`llamaforge.judge.pooled`),
  e.g. "+4 % [+2, +6] at ncmoe 0–4; same within ±5 % beyond (ncmoe 6–8)"; inconclusive points are never pooled,
  each is shown on its own.
* **Context** — a knob's largest effect can be on the context llama-server fits, not on speed (``-fa off`` on
  CUDA allocates an attention compute buffer that grows with the context, so the fit gives up context). Per-knob
  effects and the head-to-head per point state both sides' fitted ``n_ctx`` and their ratio
  (:mod:`.context_fit`: the fit's result, not a sampled metric, so no CI); every one-knob pair whose fitted
  context differs somewhere (or that differs in the KV cache type) is shown as context gained against speed
  lost, with the KV bytes per token and the device's KV / compute buffers that explain the difference.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from .. import metrics as registry
from ..findings.prose import NOT_PROVEN, same_within
from ..judge import DIFFERS, INCONCLUSIVE, SAME, Judgement, assumptions_note, judge
from ..judge.adjusted import at_level, controlled, verdict_levels
from ..judge.adjusted import note as adjustment
from ..judge.estimate import signed_pct
from ..judge.family import holm_reject
from ..judge.pooled import PooledEffect, pooled_effect
from ..judge.wording import ratio_text
from ..variants.model import Variant, knob_title
from ..variants.status import KnobPair, one_knob_pairs, pair_status, single_statuses
from ..variants.took import NOT_TAKEN, Status
from .context_fit import compare, differs, how_chosen, ratio, side, word
from .data import ReportData, Row, Series
from .sections import Section, Table

#: the metrics the matrix ranks variants by: the registry's throughput metrics (pp, tg)
METRICS = tuple(m.name for m in registry.primary())
Key = tuple[int, int]     # (offload, other): a point along the run's axis


@dataclass
class Matrix:
    """The run's variants with their series, and the judge's verdicts for every pair × point × metric."""

    data: ReportData
    variants: list[Variant]
    series: dict[str, Series]
    records: dict[str, dict]
    verdicts: dict[tuple[str, str, str, Key], Judgement]     # (a, b, metric, point) → B over A… see judged()
    rows: dict[tuple[str, Key], Row]
    min_effect: float
    raw: list[Judgement] = field(default_factory=list)      # the verdicts before Holm (see control_knobs)

    def points(self, a: str, b: str) -> list[Key]:
        return sorted({k for (n, k) in self.rows if n == a} & {k for (n, k) in self.rows if n == b})

    def label(self, k: Key) -> str:
        r = next(r for (n, kk), r in self.rows.items() if kk == k)
        return f"{self.data.axis} {r.x_label}" + (f" ngl {r.ngl}" if self.data.axis == "ncmoe" and r.ngl != -1 else "")


def _row_key(r: Row) -> Key:
    return (r.offload, r.other)


def build_matrix(data: ReportData, min_effect: float) -> Matrix | None:
    records = {str(v.get("name")): v for v in data.plan.variants if isinstance(v, dict)}
    series = {s.key[2]: s for s in data.series if s.key[2] in records}
    variants = [Variant.from_dict(records[n]) for n in records if n in series]
    if len(variants) < 2:
        return None
    rows = {(n, _row_key(r)): r for n, s in series.items() for r in s.ok_rows}
    m = Matrix(data, variants, series, records, {}, rows, min_effect)
    keys, raw = [], []
    for i, a in enumerate(variants):
        for b in variants[i + 1:]:
            for k in m.points(a.name, b.name):
                for metric in METRICS:
                    ra, rb = rows[(a.name, k)], rows[(b.name, k)]
                    keys.append((a.name, b.name, metric, k))
                    raw.append(judge(ra.starts(metric), rb.starts(metric), min_effect=min_effect,
                                     prior_a=series[a.name].prior(metric), prior_b=series[b.name].prior(metric)))
    m.verdicts = {kk: j for kk, j in zip(keys, controlled(raw), strict=True) if j is not None}
    m.raw = [j for j in raw if j is not None]
    return m


def control_knobs(m: Matrix, effects: Sequence[PooledEffect | None]) -> list[PooledEffect | None]:
    """The per-knob effects with ``differs``/``same`` kept only where they survive Holm's method over one family:
    these effects **and** the matrix's own comparisons. A pooled effect of one point is that point's comparison
    again; judged in a smaller family of its own it could read "differs" where the head-to-head, judged over
    the matrix, reads "inconclusive" (Holm is monotone: adding hypotheses never loosens a verdict)."""
    present = [e for e in effects if e is not None]
    if not present:
        return list(effects)
    alpha = present[0].alpha
    p_diff = [e.p_differs for e in present] + [j.p_differs for j in m.raw]
    p_same = [e.p_same for e in present] + [j.p_same for j in m.raw]
    keep_diff, keep_same = holm_reject(p_diff, alpha), holm_reject(p_same, alpha)
    verdicts = []
    for i, e in enumerate(present):
        v = e.verdict
        if (v == DIFFERS and not keep_diff[i]) or (v == SAME and not keep_same[i]):
            v = INCONCLUSIVE
        verdicts.append(v)
    raw_verdicts = [j.verdict for j in m.raw]   # only their p-values matter for the effects' levels
    levels = verdict_levels(verdicts + raw_verdicts, p_diff, p_same, alpha)
    note = adjustment("holm", len(p_diff))
    out: list[PooledEffect | None] = []
    it = iter(range(len(present)))
    for e in effects:
        if e is None:
            out.append(None)
            continue
        i = next(it)
        out.append(replace(at_level(e, levels[i]), verdict=verdicts[i], adjusted=note))
    return out


def verdict_of(m: Matrix, a: str, b: str, metric: str, k: Key) -> Judgement | None:
    """B over A (``ratio`` = B / A) whichever order the pair was judged in (the reverse is B's starts over A's)."""
    return m.verdicts.get((a, b, metric, k))


def outcome(j: Judgement | None, *, for_b: bool = False) -> str:
    """``win`` / ``same`` / ``loss`` of A (``for_b``: of B) by the verdict's class; ``open`` where it is inconclusive
    (or missing): not proven either way, never a tie."""
    if j is None or j.verdict == INCONCLUSIVE:
        return "open"
    if j.verdict == SAME:
        return "same"
    b_faster = j.ratio > 1
    return "win" if b_faster == for_b else "loss"


def _ordered(m: Matrix, a: str, b: str, metric: str, k: Key) -> tuple[Judgement | None, bool]:
    """The stored verdict of the pair and whether ``a`` is its B side."""
    j = verdict_of(m, a, b, metric, k)
    return (j, False) if j is not None else (verdict_of(m, b, a, metric, k), True)


def ineffective(m: Matrix, a: Variant, b: Variant, statuses: dict[tuple[str, str], Status]) -> Status | None:
    """The status that makes a pair no difference at all: they differ in one knob and it did not take effect."""
    s = statuses.get((a.name, b.name)) or statuses.get((b.name, a.name))
    return s if s is not None and s.status == NOT_TAKEN else None


def pair_statuses(m: Matrix, pairs: Sequence[KnobPair]) -> dict[tuple[str, str], Status]:
    return {(kp.base.name, kp.other.name): pair_status(kp, m.records, m.data.points) for kp in pairs}


OUTCOMES = ("win", "same", "loss", "open")


def _wtl(m: Matrix, a: str, b: str, metric: str) -> tuple[int, int, int, int]:
    """Wins, same, losses and not proven (inconclusive) of ``a`` against ``b`` over their common points."""
    got = [outcome(j, for_b=a_is_b) for j, a_is_b in (_ordered(m, a, b, metric, k) for k in m.points(a, b))]
    w, s, lo, o = (got.count(x) for x in OUTCOMES)
    return w, s, lo, o


def _ctx_counts(m: Matrix, a: str, b: str) -> tuple[int, int, int]:
    """At how many common points ``a``'s fitted context was larger than, the same as, smaller than ``b``'s
    (larger / smaller: every start of one side fitted more than every start of the other)."""
    larger = same = smaller = 0
    for k in m.points(a, b):
        sa, sb = side(m.rows[(a, k)]), side(m.rows[(b, k)])
        if sa is None or sb is None:
            continue
        larger, smaller = larger + (sa[0] > sb[1]), smaller + (sa[1] < sb[0])
        same += sa[0] <= sb[1] and sa[1] >= sb[0]
    return larger, same, smaller


def h2h_table(m: Matrix, statuses: dict[tuple[str, str], Status]) -> Table:
    n = len(m.verdicts)
    t = Table(["pair", "differs in", "points", "pp: wins–same–losses–not proven", "tg: wins–same–losses–not proven",
               "context: larger–same–smaller", "note"],
              title="Head-to-head",
              note=(f"Wins, same, losses and not proven of the first variant, per point, by the class of the judge's "
                    f"verdict on server starts (win / loss: differs beyond ±{m.min_effect:.0%}; same: "
                    f"{same_within(m.min_effect)}; not proven: inconclusive, {NOT_PROVEN} — never counted as a tie); "
                    f"Holm's method over the matrix's {n} comparisons (pairs × points × metrics). Context: at how many points the first "
                    "variant's fitted n_ctx was larger than, the same as, or smaller than the second's — the fit's "
                    "result, not a verdict (values per point below)."))
    for i, a in enumerate(m.variants):
        for b in m.variants[i + 1:]:
            ka, kb = a.knobs(), b.knobs()
            diff = [knob_title(k) for k in dict.fromkeys([*ka, *kb]) if ka.get(k) != kb.get(k)]
            pts = m.points(a.name, b.name)
            bad = ineffective(m, a, b, statuses)
            ctx = _ctx_counts(m, a.name, b.name)
            cells = ["–".join(map(str, _wtl(m, a.name, b.name, x))) for x in METRICS]
            cells.append("–".join(map(str, ctx)) if sum(ctx) else "–")
            note = ""
            if bad is not None:
                cells = ["– (no effective difference)"] * 3
                note = f"⚠ {knob_title(bad.knob)} did not take effect ({bad.why}): not a difference"
            t.rows.append([f"{a.name} vs {b.name}", ", ".join(diff) or "nothing", str(len(pts)), *cells, note])
            t.data.append({"a": a.name, "b": b.name, "differs_in": diff, "points": len(pts),
                           **{x: dict(zip(("wins", "same", "losses", "not_proven"), _wtl(m, a.name, b.name, x),
                                          strict=True))
                              for x in METRICS}, "context": dict(zip(("larger", "same", "smaller"), ctx, strict=True)),
                           "not_taken": bad.to_dict() if bad else None})
    return t


def h2h_points_table(m: Matrix) -> Table:
    keys = sorted({k for (_n, k) in m.rows})
    t = Table(["pair", "metric", *[m.label(k) for k in keys]], title="Head-to-head per point",
              note="second / first variant: the ratio of start-level centres and the judge's verdict after Holm's "
                   f"method over the matrix's {len(m.verdicts)} comparisons, with the interval that verdict used "
                   f"({adjustment('holm', len(m.verdicts))}: each at the level Holm tested it at, so it is wider than a "
                   "single 95 % CI and lies beyond the band exactly where the verdict is 'differs'); below 3 starts a "
                   "side: the range of start ratios, verdict marked * under the spread stated below.")
    for i, a in enumerate(m.variants):
        for b in m.variants[i + 1:]:
            for metric in METRICS:
                js = [verdict_of(m, a.name, b.name, metric, k) for k in keys]
                t.rows.append([f"{b.name} / {a.name}", metric, *[j.fmt(b.name, a.name) if j else "–" for j in js]])
                t.data.append({"a": a.name, "b": b.name, "metric": metric,
                               "points": {m.label(k): j.to_dict() if j else None for k, j in zip(keys, js, strict=True)}})
            t.rows.append([f"{b.name} / {a.name}", "context (fit)", *[_ctx_cell(m, b.name, a.name, k) for k in keys]])
            t.data.append({"a": a.name, "b": b.name, "metric": "context", "points": {
                m.label(k): _ctx_data(m, b.name, a.name, k) for k in keys}})
    t.note += (" Context (fit): the n_ctx llama-server fitted at each start, second vs first and their ratio — "
               f"the fit's result, not a sampled metric: no CI, no verdict; {_native_note(m)}.")
    if why := how_chosen(m.variants, list(m.rows.values())):
        t.note += f" Not every context here is a fit: {why}."
    if note := assumptions_note(list(m.verdicts.values())):
        t.note += f" * {note}."
    return t


def _native_note(m: Matrix) -> str:
    n = f" ({m.data.native_ctx:,} tokens)" if m.data.native_ctx else ""
    return (f"native = the model's training context{n}, where the fit stops, so a ratio against a side at native is a "
            "bound (≥ / ≤)")


def _fit_cap(m: Matrix, names: Sequence[str], rows: Sequence[Row]) -> int | None:
    """The native context as the fit's cap — ``None`` where these contexts were not (all) fitted, since a
    context set with ``-c`` is no bound of anything."""
    vs = [v for v in m.variants if v.name in names]
    return m.data.native_ctx if how_chosen(vs, rows) is None else None


def _ctx_cell(m: Matrix, b: str, a: str, k: Key) -> str:
    rb, ra = m.rows.get((b, k)), m.rows.get((a, k))
    if rb is None or ra is None:
        return "–"
    return compare(rb, ra, _fit_cap(m, (a, b), (ra, rb))) or "–"


def _ctx_data(m: Matrix, b: str, a: str, k: Key) -> dict | None:
    rb, ra = m.rows.get((b, k)), m.rows.get((a, k))
    sb, sa = (side(rb) if rb else None), (side(ra) if ra else None)
    return {"a": list(sa), "b": list(sb)} if sa and sb else None


def placement_table(m: Matrix, statuses: dict[tuple[str, str], Status]) -> Table:
    """Per metric, how often each variant placed 1st, 2nd, … (module doc)."""
    keys = sorted({k for (_n, k) in m.rows})
    counts: dict[tuple[str, str], dict[int, int]] = {}
    for metric in METRICS:
        for k in keys:
            here = [v for v in m.variants if (v.name, k) in m.rows]
            if len(here) < 2:
                continue
            for v in here:
                got = [outcome(j, for_b=v_is_b) for j, v_is_b in (
                    _ordered(m, v.name, u.name, metric, k) for u in here
                    if u is not v and ineffective(m, u, v, statuses) is None)]
                where = UNRANKED if "open" in got else got.count("loss") + 1
                place = counts.setdefault((v.name, metric), {})
                place[where] = place.get(where, 0) + 1
    t = Table(["variant", "pp places", "tg places"], title="Placements",
              note="A variant's place at a point is 1 + the number of variants the judge calls faster there (a verdict "
                   f"'{same_within(m.min_effect)}' shares a place; a knob that did not take effect makes no "
                   "difference); where a verdict against it is inconclusive its place is not proven and it is counted "
                   "as unranked there, never 1st; counted over the points.")
    for v in m.variants:
        cells = [", ".join(f"{_ordinal(p)} ×{n}" for p, n in sorted(counts.get((v.name, x), {}).items())) or "–"
                 for x in METRICS]
        t.rows.append([v.name, *cells])
        t.data.append({"variant": v.name, **{x: {str(p): n for p, n in (counts.get((v.name, x)) or {}).items()}
                                               for x in METRICS}})
    return t


#: a place that is not proven (a verdict against the variant there is inconclusive): sorted after every place
UNRANKED = 1 << 20


def _ordinal(n: int) -> str:
    if n == UNRANKED:
        return "unranked (not proven)"
    return f"{n}{'st' if n == 1 else 'nd' if n == 2 else 'rd' if n == 3 else 'th'}"


def _class(j: Judgement | None) -> str:
    if j is None:
        return "–"
    return {SAME: "=", INCONCLUSIVE: "?"}.get(j.verdict) or ("+" if j.ratio > 1 else "-")


def segments(m: Matrix, kp: KnobPair, metric: str) -> list[tuple[str, list[Key]]]:
    """Runs of neighbouring common points whose verdict (other over base) is of one class (+, -, =); an
    inconclusive point (?) is a segment of its own: inconclusive points are never pooled (``judge/pooled.py``:
    pooling assumes one common effect, which only agreeing verdicts support)."""
    out: list[tuple[str, list[Key]]] = []
    for k in m.points(kp.base.name, kp.other.name):
        j, swapped = _ordered(m, kp.base.name, kp.other.name, metric, k)
        c = _class(j)
        if swapped and c in "+-":
            c = "-" if c == "+" else "+"
        if out and out[-1][0] == c and c in "+-=" and out[-1][1][-1][1] == k[1]:
            out[-1][1].append(k)
        else:
            out.append((c, [k]))
    return out


def _pooled(m: Matrix, kp: KnobPair, metric: str, keys: list[Key]) -> PooledEffect | None:
    sa, sb = m.series[kp.base.name], m.series[kp.other.name]
    pairs = [(m.rows[(kp.base.name, k)].starts(metric), m.rows[(kp.other.name, k)].starts(metric)) for k in keys]
    return pooled_effect(pairs, min_effect=m.min_effect, priors=[(sa.prior(metric), sb.prior(metric))] * len(keys))


def _where(m: Matrix, keys: list[Key]) -> str:
    first, last = m.label(keys[0]), m.label(keys[-1])
    return first if len(keys) == 1 else f"{first}–{last.rsplit(' ', 1)[-1]}"


def _effect_text(m: Matrix, keys: list[Key], pe: PooledEffect) -> str:
    """One pooled effect in words; over several points with their own CIs, the range of the points' ratios too
    (the pooled CI assumes one common effect there and can be narrower than the points' spread)."""
    where = _where(m, keys)
    n = f"{len(keys)} point{'s' if len(keys) > 1 else ''}"
    pts = ""
    if pe.n_points > 1 and not pe.small:
        lo, hi = min(pe.point_ratios), max(pe.point_ratios)
        pts = f"; points {signed_pct(lo)} to {signed_pct(hi)} %"
    if pe.verdict == DIFFERS:
        return f"{pe.pct()} at {where} ({n}{pts.replace('; points', ':')})"
    if pe.verdict == SAME:
        return f"{same_within(m.min_effect)} at {where} ({pe.pct()}{pts})"
    return f"{NOT_PROVEN} at {where} ({pe.pct()}{pts})"


def knob_table(m: Matrix, pairs: Sequence[KnobPair], statuses: dict[tuple[str, str], Status]) -> Table:
    """One row per one-knob pair: the knob's effect per metric, pooled where it holds (module doc)."""
    cells: list[tuple[KnobPair, Status, dict[str, list[tuple[list[Key], PooledEffect | None]]]]] = []
    for kp in pairs:
        st = statuses[(kp.base.name, kp.other.name)]
        per = {x: [(keys, _pooled(m, kp, x, keys)) for _c, keys in segments(m, kp, x)]
               for x in METRICS} if st.status != NOT_TAKEN else {}
        cells.append((kp, st, per))
    flat = control_knobs(m, [pe for _kp, _st, per in cells for x in METRICS for _k, pe in per.get(x, [])])
    it = iter(flat)
    t = Table(["knob", "variants (other vs base)", "took effect?", "pp", "tg", "context (fit)"], title="Per-knob effects",
              note=("Pairs of variants that differ in exactly one knob. The effect is other / base, pooled (fixed effect, weighted by starts) "
                    "over each run of neighbouring points whose verdicts agree (all 'differs' one way, or all 'same'; "
                    f"an inconclusive point is never pooled, it stands alone as '{NOT_PROVEN}'); "
                    f"Holm's method over one family: the table's {sum(e is not None for e in flat)} pooled effects and "
                    f"the matrix's {len(m.raw)} comparisons ({adjustment('holm', sum(e is not None for e in flat) + len(m.raw))}; "
                    "so a one-point effect never claims more than the head-to-head), each interval the one its verdict "
                    f"used, at the level Holm tested it at. '{same_within(m.min_effect)}': the interval lies inside the band. "
                    "A knob that did not take effect is not reported as a difference. Context (fit): the n_ctx "
                    "llama-server fitted, other vs base, and their ratio, per point (neighbouring points that read "
                    "alike merged) — the fit's result, one value per start (every start of a point fitted the "
                    "same unless a range is shown), not a sampled metric: no CI and no verdict; "
                    f"{_native_note(m)}."))
    for kp, st, per in cells:
        va, vb = kp.values
        took = st.status + (f" ({st.why})" if st.why else "")
        texts: dict[str, str] = {}
        rec: dict[str, list] = {}
        for x in METRICS:
            parts = [(keys, next(it)) for keys, _pe in per.get(x, [])]
            texts[x] = "; ".join(_effect_text(m, keys, pe) for keys, pe in parts if pe is not None) or \
                ("– (did not take effect)" if st.status == NOT_TAKEN else "–")
            rec[x] = [{"points": [m.label(k) for k in keys], **(pe.to_dict() if pe else {})} for keys, pe in parts]
        ctx = knob_context(m, kp) if st.status != NOT_TAKEN else "– (did not take effect)"
        t.rows.append([f"{knob_title(kp.knob)}: {vb} vs {va}", f"{kp.other.name} vs {kp.base.name}", took,
                       texts["pp"], texts["tg"], ctx])
        t.data.append({"knob": kp.knob, "base": kp.base.name, "other": kp.other.name, "values": [va, vb],
                       "status": st.to_dict(), **rec, "context": [
                           {"point": m.label(k), **(_ctx_data(m, kp.other.name, kp.base.name, k) or {})}
                           for k in m.points(kp.base.name, kp.other.name)]})
    return t


def knob_context(m: Matrix, kp: KnobPair) -> str:
    """The knob's effect on the fitted context, other vs base per point (neighbouring points that read alike
    merged): ``175,616 vs 69,376 (2.53×) at ncmoe 0; native vs 133,120 (≥1.92×) at ncmoe 8``."""
    runs: list[tuple[str, list[Key]]] = []
    keys = m.points(kp.base.name, kp.other.name)
    for k in keys:
        text = _ctx_cell(m, kp.other.name, kp.base.name, k)
        if runs and runs[-1][0] == text and runs[-1][1][-1][1] == k[1]:
            runs[-1][1].append(k)
        else:
            runs.append((text, [k]))
    out = "; ".join(f"{text} at {_where(m, ks)}" for text, ks in runs)
    rows = [m.rows[(n, k)] for n in (kp.base.name, kp.other.name) for k in keys]
    if out and (why := how_chosen([kp.base, kp.other], rows)):
        out += f" ({why})"
    return out or "–"


def context_table(m: Matrix, pairs: Sequence[KnobPair], statuses: dict[tuple[str, str], Status]) -> Table | None:
    """Context gained against speed lost, per common point, for every one-knob pair whose fitted context differs
    at some point (flash attention, KV cache type, backend, …) and every pair that differs in the KV cache type."""
    chosen = [kp for kp in pairs if kp.knob == "kv-cache-type" or any(
        differs(m.rows[(kp.other.name, k)], m.rows[(kp.base.name, k)]) for k in m.points(kp.base.name, kp.other.name))]
    if not chosen:
        return None
    t = Table(["knob", "variants (other vs base)", "point", "context base → other", "KV KiB/token base → other",
               "device KV / compute MiB base → other", "host compute MiB base → other", "pp other/base",
               "tg other/base"],
              title="Context gained vs speed lost",
              note="One-knob pairs whose fitted context differs somewhere (and every KV cache type pair). Context: the "
                   "n_ctx llama-server fitted into the memory budget at each start (/props), and other / base — the "
                   f"fit's result, not a sampled metric: no CI; {_native_note(m)}. KV KiB per token: llama.cpp's KV "
                   "cache size over its cells (log); device KV / compute MiB: the KV cache and compute buffers it "
                   "allocated on the GPU devices (summed), what the fit trades context against; host compute MiB: "
                   "the compute buffers it allocated in host memory, which the device's budget does not count. "
                   "Speeds: the judge's "
                   f"ratio and verdict (Holm over the matrix's {len(m.verdicts)} comparisons, as in the head-to-head).")
    for kp in chosen:
        flag = statuses[(kp.base.name, kp.other.name)]
        who = f"{kp.other.name} vs {kp.base.name}" + (" ⚠ did not take effect" if flag.status == NOT_TAKEN else "")
        keys = m.points(kp.base.name, kp.other.name)
        why = how_chosen([kp.base, kp.other], [m.rows[(n, k)] for n in (kp.base.name, kp.other.name) for k in keys])
        for k in keys:
            t.rows.append([f"{knob_title(kp.knob)}: {kp.values[1]} vs {kp.values[0]}", who, m.label(k),
                           *_context_cells(m, kp, k, why)])
            ra, rb = m.rows[(kp.base.name, k)], m.rows[(kp.other.name, k)]
            fa, fb = (_observed(r) for r in (ra, rb))
            t.data.append({"knob": kp.knob, "base": kp.base.name, "other": kp.other.name, "point": m.label(k),
                           "n_ctx": [ra.n_ctx, rb.n_ctx], **(_ctx_data(m, kp.other.name, kp.base.name, k) or {}),
                           "kv_kib_per_token": [fa.get("kv_kib_per_token"), fb.get("kv_kib_per_token")],
                           "not_fitted": why})
    return t


def _observed(r: Row) -> dict:
    return dict((r.point.detail.observed if r.point else None) or {})


def _context_cells(m: Matrix, kp: KnobPair, k: Key, why: str | None) -> list[str]:
    """context, KV KiB/token, device KV / compute MiB, host compute MiB (base → other), then pp and tg other / base."""
    ra, rb = m.rows[(kp.base.name, k)], m.rows[(kp.other.name, k)]
    sa, sb = side(ra), side(rb)
    nat = m.data.native_ctx if why is None else None
    if sa is not None and sb is not None:
        gain = ("both at the cap" if nat and sa[0] == nat else "same") if sa == sb and sa[0] == sa[1] else \
            ratio(sb, sa, nat)
        ctx = f"{word(sa, nat)} → {word(sb, nat)} ({gain})" + (f" ({why})" if why else "")
    else:
        ctx = "–"
    fa, fb = _observed(ra), _observed(rb)
    kvt = f"{fa.get('kv_kib_per_token', '?')} → {fb.get('kv_kib_per_token', '?')}"
    mem = " → ".join(f"{r.gpu_mem.context:,.0f} / {r.gpu_mem.compute:,.0f}" if r.gpu_mem else "?" for r in (ra, rb))
    host = " → ".join(f"{r.host_mem.compute:,.0f}" if r.host_mem else "?" for r in (ra, rb))
    speed = [_fmt_other_over_base(*_ordered(m, kp.base.name, kp.other.name, x, k), kp.base.name, kp.other.name)
             for x in METRICS]
    return [ctx, kvt, mem, host, *speed]


def _fmt_other_over_base(j: Judgement | None, swapped: bool, base: str, other: str) -> str:
    """A stored verdict as other / base (``swapped``: it was judged base / other), said by
    :func:`llamaforge.judge.wording.ratio_text`."""
    if j is None:
        return "–"
    if not swapped:
        return j.fmt(other, base)
    star = "*" if j.small and j.verdict != INCONCLUSIVE else ""
    kind, lo, hi = j.interval()
    turned = ratio_text(1 / j.ratio, 1 / hi if hi else None, 1 / lo if lo else None, interval=kind, num=other, den=base)
    return f"{turned} {j.verdict}{star}"


def variants_table(m: Matrix) -> Table:
    t = Table(["variant", "build", "environment", "arguments", "knobs"], title="Variants",
              note="Knobs: took (the log or device line shows it), not taken (it shows the knob changed nothing: not "
                   "reported as a difference), unverified (nothing the binary prints shows it).")
    for v in m.variants:
        rec = m.records[v.name]
        facts = [dict((r.point.detail.observed if r.point else None) or {})
                 for (n, _k), r in sorted(m.rows.items()) if n == v.name]
        sts = single_statuses(rec, facts)
        build = f"{v.backend}@{v.pin or 'default'} ({str(rec.get('build') or '?')[:20]})" + \
            "".join(f" -D{k}={val}" for k, val in v.defines)
        env = " ".join(f"{k}={val}" for k, val in v.env) or "–"
        knobs = "; ".join(f"{knob_title(s.knob)}: {s.status}" + (f" ({s.why})" if s.status != "took" else "")
                          for s in sts) or "–"
        t.rows.append([v.name, build, env, " ".join(v.args) or "–", knobs])
        t.data.append({"variant": v.name, **v.to_dict(), "knobs": [s.to_dict() for s in sts]})
    return t


def matrix_section(data: ReportData, min_effect: float = 0.05) -> Section | None:
    """The matrix of a ``bench --variant`` run (``None`` for other runs)."""
    m = build_matrix(data, min_effect)
    if m is None:
        return None
    pairs = one_knob_pairs(m.variants)
    statuses = pair_statuses(m, pairs)
    tables = [variants_table(m), h2h_table(m, statuses), h2h_points_table(m), placement_table(m, statuses)]
    tables.append(knob_table(m, pairs, statuses))
    if (ctx := context_table(m, pairs, statuses)) is not None:
        tables.append(ctx)
    sec = Section("matrix", "Variant matrix", tables=tables,
                  intro=(f"{len(m.variants)} variants, one series each; every verdict is the judge's on server starts "
                         "(the start is the unit of replication). Whether a knob took effect is read from llama.cpp's "
                         "own log and device line, not from what was asked."))
    if not pairs:
        sec.notes.append("No two variants differ in exactly one knob, so no per-knob effect can be stated.")
    return sec
