"""Across sessions: several runs of one plan (other days, other machines) as one three-level view —
session → server start → request.

Sessions differ more than starts (between two H200 VMs the same hybrid point moved +20 % on CUDA and
+54 % on Vulkan), so a claim about a machine's setup must hold in every session, not in one. For runs
of the same plan (:func:`check_same_plan`) this builds:

* **Ratios across the sessions** — per pair of series and metric, per session: the ratio at the
  first common point, its range over the points, every start of each series at that point (the run's
  own starts, its drift sentinels and its ``reproduce`` re-runs); and across sessions the ratio's
  estimate with the sessions as replicates (a 95 % CI from ≥ 3 sessions, the judge's rule);
* **Claims, session by session** — the direction from the judge's verdicts in each session (per point, Holm
  over the session's points: "CUDA generates faster than Vulkan: judged differs at 13 of 15 points in session
  1, 3 of 15 in session 2, …"; a point whose verdict is same or inconclusive never counts for a direction, so
  the claim is judged in every session only where every point differs that way), and two observations (every
  start of one series beating every start of the other, the first offload with native context), said as
  observed, not judged;
* **Per point** — each session's centre (with its K×R) and the spread across sessions.

Series are matched across runs by their display name (backend, and pin or label where a run has several
builds of one backend): builds on different machines have different keys.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..findings.prose import NOT_PROVEN, in_sessions, same_within
from ..judge import DIFFERS, INCONCLUSIVE, MIN_EFFECT, SAME, Estimate, Starts, estimate, judge
from ..judge.adjusted import controlled
from ..judge.wording import ratio_text, span_text
from ..metrics import LABELS
from ..store import Point, Store
from . import analysis as an
from .data import ReportData, ReportError, Row, Series, load
from .sections import Section, Table


def _label(d: ReportData) -> str:
    return d.run.name or d.run.id


def check_same_plan(datas: Sequence[ReportData]) -> None:
    """Runs of one plan: the same model, engine, prompt, generation length, fit and extra arguments."""
    first = datas[0]
    for d in datas[1:]:
        if d.run.kind != "sweep" or first.run.kind != "sweep":
            raise ReportError(f"run {d.run.id} is a {d.run.kind} run; sessions are compared between sweeps",
                              "give sweeps of one plan (`llamaforge runs --kind sweep`)")
        diff = first.run.plan.differences(d.run.plan)
        if diff:
            raise ReportError(f"run {d.run.id} is not a session of run {first.run.id}'s plan: {', '.join(diff)} "
                              "differ", "compare runs made with the same `llamaforge bench` options (same model, "
                              "engine, prompt, --n-predict, --vram-budget/--fitt, --extra)")


def load_sessions(store: Store, run_ids: Sequence[str]) -> list[ReportData]:
    datas = [load(store, store.get_run(r).id) for r in run_ids]
    if len({d.run.id for d in datas}) != len(datas):
        raise ReportError("a run is given twice", "give each session's run once")
    check_same_plan(datas)
    return datas


def _series(d: ReportData, name: str) -> Series | None:
    return next((s for s in d.series if s.name == name and s.key[1] == "server"), None) or next(
        (s for s in d.series if s.name == name), None)


def _common_names(datas: Sequence[ReportData]) -> list[str]:
    names = [s.name for s in datas[0].series]
    return [n for n in names if all(_series(d, n) is not None for d in datas)]


def _row(s: Series, key: tuple[int, int]) -> Row | None:
    return next((r for r in s.ok_rows if (r.offload, r.other) == key), None)


def _all_starts(store: Store, d: ReportData, s: Series, r: Row, metric: str) -> list[float]:
    """Every start of the series' build at the row's point in the session: the run's own, its drift
    sentinels and its reproduce re-runs' (each start's median)."""
    pts: list[Point] = [p for p in d.points if p.build_key == s.key[0] and (p.ncmoe, p.ngl) == (r.ncmoe, r.ngl)
                        and p.engine == s.key[1] and p.status == "ok"]
    for child in store.child_runs(d.run.id):
        pts += [p for p in store.points(child.id) if p.build_key == s.key[0] and (p.ncmoe, p.ngl) == (r.ncmoe, r.ngl)
                and p.engine == s.key[1] and p.status == "ok"]
    field = "tg_tps" if metric == "tg" else "pp_tps"
    return [c for p in pts for c in Starts.of(p.launch_groups(field)).centres]


def _keys(datas: Sequence[ReportData], a: str, b: str, metric: str) -> list[tuple[int, int]]:
    """Points measured ok in both series in every session, in offload order."""
    sets = []
    for d in datas:
        sa, sb = _series(d, a), _series(d, b)
        sets.append({(r.offload, r.other) for r in sa.ok_rows if r.starts(metric)} &   # type: ignore[union-attr]
                    {(r.offload, r.other) for r in sb.ok_rows if r.starts(metric)})  # type: ignore[union-attr]
    return sorted(set.intersection(*sets)) if sets else []


def _ratios(d: ReportData, a: str, b: str, metric: str, keys: list[tuple[int, int]]) -> list[float]:
    sa, sb = _series(d, a), _series(d, b)
    out = []
    for k in keys:
        ra, rb = _row(sa, k), _row(sb, k)   # type: ignore[arg-type]
        out.append(ra.median(metric) / rb.median(metric))   # type: ignore[union-attr, operator]
    return out


def holds_table(store: Store, datas: Sequence[ReportData], min_effect: float = MIN_EFFECT) -> tuple[Table | None, list[Claim]]:
    """The "ratios across the sessions" table and the claims, session by session (a direction is judged in
    a session where the judge calls every common point "differs" that way, Holm over the session's points)."""
    names = _common_names(datas)
    cols = [""] + [_label(d) for d in datas] + ["across sessions"]
    t = Table(cols, title="Ratios across the sessions")
    claims: list[Claim] = []
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            for metric in ("tg", "pp"):
                keys = _keys(datas, a, b, metric)
                if not keys:
                    continue
                per = [_ratios(d, a, b, metric, keys) for d in datas]
                x0 = _row(_series(datas[0], a), keys[0]).x_label   # type: ignore[arg-type, union-attr]
                first = [r[0] for r in per]
                est = estimate(Starts.of_centres(first))
                t.rows.append([f"{a} / {b} {LABELS[metric]}, {datas[0].axis} {x0} (ratio of centres)",
                               *[ratio_text(v, interval="none", num=a, den=b) for v in first],
                               across_ratio(est, a, b)])
                t.data.append({"num": a, "den": b, "metric": metric, "x": x0, "ratios": first,
                               "across": est.to_dict() if est else None})
                t.rows.append([f"{a} / {b} {LABELS[metric]}, every {datas[0].axis} (min – max over {len(keys)} points)",
                               *[span_text(min(r), max(r), num=a, den=b) for r in per],
                               span_text(min(min(r) for r in per), max(max(r) for r in per), num=a, den=b)])
                claims += _direction_claims(datas, a, b, metric, keys, min_effect)
            keys = _keys(datas, a, b, "tg")
            if keys:
                claims += _start_rows(store, datas, t, a, b, keys[0])
    claims += _threshold_claims(datas, names)
    return (t if t.rows else None), claims


Claim = tuple[str, int, int, str]   # (what, in how many sessions it was so, of how many, JUDGED or OBSERVED)
#: a claim from the judge's verdicts / an observation of the measured starts (no verdict behind it)
JUDGED, OBSERVED = "judged", "observed"


def session_verdicts(d: ReportData, a: str, b: str, metric: str, keys: list[tuple[int, int]],
                     min_effect: float = MIN_EFFECT) -> list:
    """The judge's verdicts on ``a`` over ``b`` at ``keys`` in one session (its starts; Holm over the points)."""
    sa, sb = _series(d, a), _series(d, b)
    js = []
    for k in keys:
        ra, rb = _row(sa, k), _row(sb, k)   # type: ignore[arg-type]
        js.append(judge(rb.starts(metric), ra.starts(metric), min_effect=min_effect,  # type: ignore[union-attr]
                        prior_a=sb.prior(metric), prior_b=sa.prior(metric)))  # type: ignore[union-attr]
    return controlled(js)


def _direction_claims(datas: Sequence[ReportData], a: str, b: str, metric: str, keys: list[tuple[int, int]],
                      min_effect: float = MIN_EFFECT) -> list[Claim]:
    """"Faster" only where the judge says so: per session, at how many points the verdict is "differs" that way
    (a ratio of 1.02× inside ±E, or 1.31× whose interval reaches the band, is not "faster")."""
    per = [session_verdicts(d, a, b, metric, keys, min_effect) for d in datas]
    up = [sum(1 for j in js if j is not None and j.verdict == DIFFERS and j.ratio > 1) for js in per]
    down = [sum(1 for j in js if j is not None and j.verdict == DIFFERS and j.ratio < 1) for js in per]
    lead, other, got = (a, b, up) if sum(up) >= sum(down) else (b, a, down)
    verb = "generates" if metric == "tg" else "processes prompts"
    n_keys = len(keys)
    where = ", ".join(f"{k} of {n_keys} in {_label(d)}" for k, d in zip(got, datas, strict=True))
    rest = []
    for js, d in zip(per, datas, strict=True):
        vs = [j.verdict if j is not None else INCONCLUSIVE for j in js]
        tail = [f"{same_within(min_effect)} at {vs.count(SAME)}" if SAME in vs else "",
                f"{NOT_PROVEN} at {vs.count(INCONCLUSIVE)}" if INCONCLUSIVE in vs else ""]
        if any(tail):
            rest.append(f"{_label(d)}: " + ", ".join(x for x in tail if x))
    text = (f"{lead} {verb} faster than {other} (judged differs beyond ±{min_effect:.0%}, Holm over each session's "
            f"{n_keys} points): at {where}" + (f" (the other points — {'; '.join(rest)})" if rest else ""))
    return [(text, sum(1 for k in got if k == n_keys), len(datas), JUDGED)]


def _start_rows(store: Store, datas: Sequence[ReportData], t: Table, a: str, b: str, key: tuple[int, int]) -> list[Claim]:
    lows, highs = {}, {}
    x0 = _row(_series(datas[0], a), key).x_label   # type: ignore[arg-type, union-attr]
    for name in (a, b):
        cells = []
        for d in datas:
            s = _series(d, name)
            r = _row(s, key)   # type: ignore[arg-type]
            vals = _all_starts(store, d, s, r, "tg") if s is not None and r is not None else []
            cells.append(f"{min(vals):,.0f} – {max(vals):,.0f} ({len(vals)} starts)" if len(vals) > 1 else
                         (f"{vals[0]:,.0f} (one start)" if vals else "–"))
            lows.setdefault(name, []).append(min(vals) if vals else None)
            highs.setdefault(name, []).append(max(vals) if vals else None)
        t.rows.append([f"{name} {LABELS['tg']} at {datas[0].axis} {x0}, every server start of the session (t/s; the sweep's, "
                       "its drift sentinels' and its reproduce re-runs')", *cells, ""])
    n = len(datas)
    known = [i for i in range(n) if None not in (lows[a][i], highs[a][i], lows[b][i], highs[b][i])]
    a_wins = sum(1 for i in known if lows[a][i] > highs[b][i])
    b_wins = sum(1 for i in known if lows[b][i] > highs[a][i])
    lead, other, k = (a, b, a_wins) if a_wins >= b_wins else (b, a, b_wins)
    return [(f"at {datas[0].axis} {x0} every {LABELS['tg']} server start of {lead} beats every start of {other}", k, n,
             OBSERVED)]


def _threshold_claims(datas: Sequence[ReportData], names: list[str]) -> list[Claim]:
    out: list[Claim] = []
    for name in names:
        firsts = []
        for d in datas:
            r = an.first_native(_series(d, name).rows, d.native_ctx)   # type: ignore[union-attr]
            firsts.append(r.x_label if r is not None else "never")
        common = max(dict.fromkeys(firsts), key=firsts.count)
        out.append((f"{name}: the first {datas[0].axis} with native context is {common}"
                    + (f" (other sessions: {', '.join(f for f in dict.fromkeys(firsts) if f != common)})"
                       if len(set(firsts)) > 1 else ""), firsts.count(common), len(datas), OBSERVED))
    return out


def across_ratio(est: Estimate | None, num: str, den: str) -> str:
    """``1.55× [1.29, 1.85] (5 sessions)`` / ``CPU 115× faster [80, 162] (3 sessions)``: ratios of sessions as
    replicates (a CI from ≥ 3, the range of 2), said by :func:`llamaforge.judge.wording.ratio_text`."""
    if est is None:
        return "–"
    if est.kind == "single":
        return f"{ratio_text(est.centre, interval='none', num=num, den=den)} (1 session)"
    kind = "ci" if est.kind == "ci" else "range"
    return f"{ratio_text(est.centre, est.low, est.high, interval=kind, num=num, den=den)} ({est.k} sessions)"


def across(est: Estimate | None, digits: int, unit: str = "") -> str:
    """``1.55× [1.29, 1.85] (5 sessions)``: the sessions as replicates (a CI from ≥ 3, the range of 2)."""
    if est is None:
        return "–"
    c = f"{est.centre:,.{digits}f}{unit}"
    if est.kind == "single":
        return f"{c} (1 session)"
    return f"{c} {'' if est.kind == 'ci' else 'range '}{est.interval_text(digits)} ({est.k} sessions)"


def points_table(datas: Sequence[ReportData], metric: str = "tg") -> Table:
    """Per series and point: each session's centre (K×R) and the spread across sessions."""
    t = Table(["series", datas[0].axis, *[_label(d) for d in datas], "across sessions"],
              title=f"Per point, per session ({LABELS[metric]})")
    for name in _common_names(datas):
        keys = sorted({(r.offload, r.other) for d in datas for r in (_series(d, name).ok_rows)})  # type: ignore[union-attr]
        for k in keys:
            rows = [_row(_series(d, name), k) for d in datas]   # type: ignore[arg-type]
            label = next((r.x_label for r in rows if r is not None), "?")
            cells = [(f"{r.median(metric):,.1f} ({r.starts(metric).shape})" if r is not None and r.median(metric)
                      else "–") for r in rows]
            centres = [r.median(metric) for r in rows if r is not None and r.median(metric)]
            est = estimate(Starts.of_centres(centres))
            t.rows.append([name, label, *cells, across(est, 1)])
            t.data.append({"series": name, "x": label, "centres": centres, "across": est.to_dict() if est else None})
    return t


def sessions_section(store: Store, datas: Sequence[ReportData], min_effect: float = MIN_EFFECT) -> Section:
    sec = Section("sessions", f"Across {len(datas)} sessions", intro=(
        "Runs of one plan from different sessions or machines (session → server start → request). Each "
        "session's numbers are its own point centres; 'across sessions' treats the sessions as the replicates "
        "(the judge's estimate: a 95 % CI from ≥ 3 sessions, the range of 2). A backend is called faster in a session "
        f"only at the points where the judge's verdict is 'differs' (beyond ±{min_effect:.0%}, Holm over the session's "
        "points), and faster at every point only where every verdict is; the other claims are observations of the "
        "measured starts, with no verdict behind them."))
    t, claims = holds_table(store, datas, min_effect)
    if t is not None:
        sec.tables.append(t)
    c = Table(["claim", "sessions where it is so", "basis"], title="Claims, session by session")
    for text, k, n, basis in claims:
        c.rows.append([text, f"{k} of {n} sessions", in_sessions(k, n, judged=basis == JUDGED)])
        c.data.append({"claim": text, "held": k, "sessions": n, "basis": basis})
    if c.rows:
        sec.tables.append(c)
    sec.tables.append(points_table(datas, "tg"))
    sec.tables.append(points_table(datas, "pp"))
    return sec
