"""The variant matrix (``bench --variant``): every variant against every other, judged on server starts.

* **Variants** — what each is (build, environment, arguments) and whether each of its knobs took effect
  (:mod:`llamaforge.variants.took`: from llama.cpp's own log and device line).
* **Head-to-head** — for every pair, the judge's verdict at every common point and metric (one family, Holm):
  wins, ties and losses, an *inconclusive* verdict counting as a tie. A pair whose only difference is a knob
  that did not take effect is flagged and not counted as a difference.
* **Placements** — per metric, how often each variant placed 1st, 2nd, …: a variant's place at a point is 1 +
  the number of variants the judge calls faster there (ties share a place).
* **Per-knob effects** — where two variants differ in exactly one knob: the knob's effect pooled over each run
  of neighbouring points whose verdicts agree (:mod:`llamaforge.judge.pooled`), e.g. "+4 % [+2, +6] at
  ncmoe 0–4; same beyond (ncmoe 6–8)".
* **KV cache types** — pairs that differ only in the KV cache type: the context gained (fitted ``n_ctx``,
  KV KiB per token from the log) against the speed lost.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..judge import DIFFERS, INCONCLUSIVE, SAME, Judgement, assumptions_note, control, judge
from ..judge.pooled import PooledEffect, pooled_effect
from ..judge.pooled import control as control_pooled
from ..variants.model import Variant, knob_title
from ..variants.status import KnobPair, one_knob_pairs, pair_status, single_statuses
from ..variants.took import NOT_TAKEN, Status
from .data import ReportData, Row, Series
from .sections import Section, Table

METRICS = ("pp", "tg")
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
    m.verdicts = {kk: j for kk, j in zip(keys, control(raw), strict=True) if j is not None}
    return m


def verdict_of(m: Matrix, a: str, b: str, metric: str, k: Key) -> Judgement | None:
    """B over A (``ratio`` = B / A) whichever order the pair was judged in (the reverse is B's starts over A's)."""
    return m.verdicts.get((a, b, metric, k))


def outcome(j: Judgement | None, *, for_b: bool = False) -> str:
    """``win`` / ``tie`` / ``loss`` of A (``for_b``: of B); inconclusive and same are ties."""
    if j is None or j.verdict != DIFFERS:
        return "tie"
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


def _wtl(m: Matrix, a: str, b: str, metric: str) -> tuple[int, int, int]:
    w = t = lo = 0
    for k in m.points(a, b):
        j, a_is_b = _ordered(m, a, b, metric, k)
        o = outcome(j, for_b=a_is_b)
        w, t, lo = w + (o == "win"), t + (o == "tie"), lo + (o == "loss")
    return w, t, lo


def h2h_table(m: Matrix, statuses: dict[tuple[str, str], Status]) -> Table:
    n = len(m.verdicts)
    t = Table(["pair", "differs in", "points", "pp: wins–ties–losses", "tg: wins–ties–losses", "note"],
              title="Head-to-head",
              note=(f"Wins, ties and losses of the first variant, per point, by the judge's verdict on server starts "
                    f"(differs beyond ±{m.min_effect:.0%}; same and inconclusive count as ties); Holm's method over the "
                    f"matrix's {n} comparisons (pairs × points × metrics)."))
    for i, a in enumerate(m.variants):
        for b in m.variants[i + 1:]:
            ka, kb = a.knobs(), b.knobs()
            diff = [knob_title(k) for k in dict.fromkeys([*ka, *kb]) if ka.get(k) != kb.get(k)]
            pts = m.points(a.name, b.name)
            bad = ineffective(m, a, b, statuses)
            cells = [f"{w}–{ti}–{lo}" for w, ti, lo in (_wtl(m, a.name, b.name, x) for x in METRICS)]
            note = ""
            if bad is not None:
                cells = ["– (no effective difference)"] * 2
                note = f"⚠ {knob_title(bad.knob)} did not take effect ({bad.why}): not a difference"
            t.rows.append([f"{a.name} vs {b.name}", ", ".join(diff) or "nothing", str(len(pts)), *cells, note])
            t.data.append({"a": a.name, "b": b.name, "differs_in": diff, "points": len(pts),
                           **{x: dict(zip(("wins", "ties", "losses"), _wtl(m, a.name, b.name, x), strict=True))
                              for x in METRICS}, "not_taken": bad.to_dict() if bad else None})
    return t


def h2h_points_table(m: Matrix) -> Table:
    keys = sorted({k for (_n, k) in m.rows})
    t = Table(["pair", "metric", *[m.label(k) for k in keys]], title="Head-to-head per point",
              note="second / first variant: the ratio of start-level centres with its 95 % CI and the judge's verdict "
                   f"after Holm's method over the matrix's {len(m.verdicts)} comparisons (so an interval outside the band "
                   "can still be inconclusive: the family needs stronger evidence than one comparison); below 3 starts a "
                   "side: the range of start ratios, verdict marked * under the spread stated below.")
    for i, a in enumerate(m.variants):
        for b in m.variants[i + 1:]:
            for metric in METRICS:
                js = [verdict_of(m, a.name, b.name, metric, k) for k in keys]
                t.rows.append([f"{b.name} / {a.name}", metric, *[j.fmt() if j else "–" for j in js]])
                t.data.append({"a": a.name, "b": b.name, "metric": metric,
                               "points": {m.label(k): j.to_dict() if j else None for k, j in zip(keys, js, strict=True)}})
    if note := assumptions_note(list(m.verdicts.values())):
        t.note += f" * {note}."
    return t


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
                beaten_by = 0
                for u in here:
                    if u is v or ineffective(m, u, v, statuses) is not None:
                        continue
                    j, v_is_b = _ordered(m, v.name, u.name, metric, k)
                    beaten_by += outcome(j, for_b=v_is_b) == "loss"
                place = counts.setdefault((v.name, metric), {})
                place[beaten_by + 1] = place.get(beaten_by + 1, 0) + 1
    t = Table(["variant", "pp places", "tg places"], title="Placements",
              note="A variant's place at a point is 1 + the number of variants the judge calls faster there (ties "
                   "share a place; a knob that did not take effect makes no difference); counted over the points.")
    for v in m.variants:
        cells = [", ".join(f"{_ordinal(p)} ×{n}" for p, n in sorted(counts.get((v.name, x), {}).items())) or "–"
                 for x in METRICS]
        t.rows.append([v.name, *cells])
        t.data.append({"variant": v.name, **{x: {str(p): n for p, n in (counts.get((v.name, x)) or {}).items()}
                                               for x in METRICS}})
    return t


def _ordinal(n: int) -> str:
    return f"{n}{'st' if n == 1 else 'nd' if n == 2 else 'rd' if n == 3 else 'th'}"


def _class(j: Judgement | None) -> str:
    if j is None:
        return "–"
    return {SAME: "=", INCONCLUSIVE: "?"}.get(j.verdict) or ("+" if j.ratio > 1 else "-")


def segments(m: Matrix, kp: KnobPair, metric: str) -> list[tuple[str, list[Key]]]:
    """Runs of neighbouring common points whose verdict (other over base) is of one class (+, -, =, ?)."""
    out: list[tuple[str, list[Key]]] = []
    for k in m.points(kp.base.name, kp.other.name):
        j, swapped = _ordered(m, kp.base.name, kp.other.name, metric, k)
        c = _class(j)
        if swapped and c in "+-":
            c = "-" if c == "+" else "+"
        if out and out[-1][0] == c and out[-1][1][-1][1] == k[1]:
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
    where = _where(m, keys)
    n = f"{len(keys)} point{'s' if len(keys) > 1 else ''}"
    if pe.verdict == DIFFERS:
        return f"{pe.pct()} at {where} ({n})"
    if pe.verdict == SAME:
        return f"no difference at {where} ({pe.pct()}, within ±{m.min_effect:.0%})"
    return f"inconclusive at {where} ({pe.pct()})"


def knob_table(m: Matrix, pairs: Sequence[KnobPair], statuses: dict[tuple[str, str], Status]) -> Table:
    """One row per one-knob pair: the knob's effect per metric, pooled where it holds (module doc)."""
    cells: list[tuple[KnobPair, Status, dict[str, list[tuple[list[Key], PooledEffect | None]]]]] = []
    for kp in pairs:
        st = statuses[(kp.base.name, kp.other.name)]
        per = {x: [(keys, _pooled(m, kp, x, keys)) for _c, keys in segments(m, kp, x)]
               for x in METRICS} if st.status != NOT_TAKEN else {}
        cells.append((kp, st, per))
    flat = control_pooled([pe for _kp, _st, per in cells for x in METRICS for _k, pe in per.get(x, [])])
    it = iter(flat)
    t = Table(["knob", "variants (other vs base)", "took effect?", "pp", "tg"], title="Per-knob effects",
              note=("Pairs of variants that differ in exactly one knob. The effect is other / base, pooled (fixed effect, weighted by starts) "
                    "over each run of neighbouring points whose verdicts agree, with its 95 % CI; "
                    f"Holm's method over the table's pooled effects. 'No difference' = within ±{m.min_effect:.0%}. "
                    "A knob that did not take effect is not reported as a difference."))
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
        t.rows.append([f"{knob_title(kp.knob)}: {vb} vs {va}", f"{kp.other.name} vs {kp.base.name}", took,
                       texts["pp"], texts["tg"]])
        t.data.append({"knob": kp.knob, "base": kp.base.name, "other": kp.other.name, "values": [va, vb],
                       "status": st.to_dict(), **rec})
    return t


def kv_table(m: Matrix, pairs: Sequence[KnobPair], statuses: dict[tuple[str, str], Status]) -> Table | None:
    """KV cache types: context gained (fitted n_ctx, KV KiB per token) against speed lost, per common point."""
    kv = [kp for kp in pairs if kp.knob == "kv-cache-type"]
    if not kv:
        return None
    t = Table(["variants (other vs base)", "point", "context base → other", "KV KiB/token base → other",
               "pp other/base", "tg other/base"], title="KV cache type: context gained vs speed lost",
              note="Context: the fitted n_ctx each server reported (/props); KV KiB per token: llama.cpp's KV cache "
                   "size over its cells (log). Speeds: the judge's ratio and verdict (Holm, as above).")
    for kp in kv:
        flag = statuses[(kp.base.name, kp.other.name)]
        for k in m.points(kp.base.name, kp.other.name):
            ra, rb = m.rows[(kp.base.name, k)], m.rows[(kp.other.name, k)]
            fa, fb = (dict(((r.point.extra or {}) if r.point else {}).get("observed") or {}) for r in (ra, rb))
            gain = f" (×{rb.n_ctx / ra.n_ctx:.2f})" if ra.n_ctx and rb.n_ctx else ""
            kvt = f"{fa.get('kv_kib_per_token', '?')} → {fb.get('kv_kib_per_token', '?')}"
            speed = [_fmt_other_over_base(*_ordered(m, kp.base.name, kp.other.name, x, k)) for x in METRICS]
            who = f"{kp.other.name} vs {kp.base.name}" + (" ⚠ did not take effect" if flag.status == NOT_TAKEN else "")
            t.rows.append([who, m.label(k), f"{ra.n_ctx or '?'} → {rb.n_ctx or '?'}{gain}", kvt, *speed])
            t.data.append({"base": kp.base.name, "other": kp.other.name, "point": m.label(k), "n_ctx": [ra.n_ctx, rb.n_ctx],
                           "kv_kib_per_token": [fa.get("kv_kib_per_token"), fb.get("kv_kib_per_token")]})
    return t


def _fmt_other_over_base(j: Judgement | None, swapped: bool) -> str:
    """A stored verdict as other / base (``swapped``: it was judged base / other)."""
    if j is None:
        return "–"
    if not swapped:
        return j.fmt()
    star = "*" if j.small and j.verdict != INCONCLUSIVE else ""
    if j.small:
        lo, hi = j.start_range
        return f"{1 / j.ratio:.2f}× (starts {1 / hi:.2f}–{1 / lo:.2f}) {j.verdict}{star}"
    return f"{1 / j.ratio:.2f}× [{1 / j.high:.2f}, {1 / j.low:.2f}] {j.verdict}"


def variants_table(m: Matrix) -> Table:
    t = Table(["variant", "build", "environment", "arguments", "knobs"], title="Variants",
              note="Knobs: took (the log or device line shows it), not taken (it shows the knob changed nothing: not "
                   "reported as a difference), unverified (nothing the binary prints shows it).")
    for v in m.variants:
        rec = m.records[v.name]
        facts = [dict(((r.point.extra or {}) if r.point else {}).get("observed") or {})
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
    if (kv := kv_table(m, pairs, statuses)) is not None:
        tables.append(kv)
    sec = Section("matrix", "Variant matrix", tables=tables,
                  intro=(f"{len(m.variants)} variants, one series each; every verdict is the judge's on server starts "
                         "(the start is the unit of replication). Whether a knob took effect is read from llama.cpp's "
                         "own log and device line, not from what was asked."))
    if not pairs:
        sec.notes.append("No two variants differ in exactly one knob, so no per-knob effect can be stated.")
    return sec
