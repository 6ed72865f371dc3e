"""Replay the adaptive sweep (``llamaforge.bench.adaptive``) on stored exhaustive sweeps.

    python benchmarks/adaptive_replay.py STORE [RUN ...] [--share 0.333] [--markdown]

Without RUN: every stored sweep that is neither a re-measurement (``reproduce``) nor adaptive itself.
A sweep over ``-ncmoe`` (a MoE model) is replayed as ``--ncmoe auto`` runs it; a sweep whose points
differ only in ``-ngl`` (a dense model) as ``--ngl auto`` does, on its axis x = n_layers + 1 - ngl
(``llamaforge.bench.autosweep.Axis``); everything printed is in the option's own values. Where the
fitted context is the same at every stored point, there is no threshold to find: it reads "n/a".

"Measuring" a point reads its stored samples (tg of every launch, warm-ups excluded, grouped by server
start: ``autosweep.tg_summary``, the judge's estimate, exactly what a real run gets; the context the
server fitted); a confirmation cannot add launches that were never made, so it returns the same summary. The threshold comes from a bisection over the stored
points' fitted contexts (``llamaforge.bench.threshold``), as a real run bisects over fits. The store
is copied to a temporary folder first and only the copy is opened (opening may migrate a store's
schema): committed results are never touched.

Prints, for the adaptive sweep without a point budget (stops when stable) and with a budget of
``--share`` of the stored points: points used / available, and whether each conclusion matches the
exhaustive one (threshold and sweet spot per series; winner per region; anomalies found / missed /
not in the exhaustive run). A sweet spot "ties" when the judge does not say the two points differ
(on their starts, the series' pooled spread for points with fewer than 3). For every anomaly and
suspect of the exhaustive run it prints the judge's verdict over its reference neighbour.

Time is what a real adaptive run would spend, from stored wall times: the chosen points' launches,
one more launch per confirmation, one drift sentinel per build at the end (one launch of its cheapest
measured point, as `--ncmoe/--ngl auto` places it), and the fits of the threshold's bisection over the axis' every value (ncmoe
0..n_layers, ngl 0..n_layers + 1; each at the stored fit time of that value, from stored fit maps over
the same option; where the stored sweep skipped the ncmoe values around the threshold,
the most expensive bisection any threshold in that gap would need). The exhaustive sweep's time is
the sum of its stored launches, its drift sentinels included (it needs no fit: the server fits
itself). The last lines give the worst case over the runs replayed.
"""

from __future__ import annotations

import argparse
import math
import shutil
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

from llamaforge.bench.adaptive import (  # noqa: E402
    AdaptiveOptions,
    AdaptiveResult,
    Conclusions,
    PointSummary,
    adaptive_sweep,
    conclude,
    series_inputs,
    series_prior,
)
from llamaforge.bench.autosweep import Axis, tg_summary  # noqa: E402
from llamaforge.bench.threshold import bisect_threshold, reaches  # noqa: E402
from llamaforge.judge import (  # noqa: E402
    DIFFERS,
    judge,
    trend,  # noqa: E402
)
from llamaforge.judge.trend import FALLS, FLAT, RISES  # noqa: E402
from llamaforge.report.data import sweep_axis  # noqa: E402
from llamaforge.store import Point, Store  # noqa: E402

DIRECTION = {FALLS: "falls", FLAT: "is flat", RISES: "rises"}


def point_seconds(p: Point) -> tuple[float, int]:
    """Wall time of a stored point, the sum over its launches (server start to stop), and the launches."""
    secs = [s for r in p.launches if (s := r.seconds()) is not None]
    if secs:
        return sum(secs), len(secs)
    return ((p.finished - p.started) if p.started and p.finished else 0.0), 1


@dataclass
class Stored:
    """One stored exhaustive sweep, as the replay reads it."""

    run_id: str
    summ: dict[str, dict[int, PointSummary]]       # series → x → tg summary (n_ctx: the server's fit)
    ctx: dict[str, dict[int, int | None]]
    native: int | None
    domain: list[int]
    fa: list[int]
    n_layers: int
    seconds: dict[tuple[str, int], tuple[float, int]] = field(default_factory=dict)   # (wall s, launches)
    sentinel_seconds: float = 0.0
    fit_seconds: dict[str, dict[int, float]] = field(default_factory=dict)   # series → x → one fit's s
    fit_source: str = ""
    axis: Axis = field(default_factory=lambda: Axis("ncmoe", 0))   # x = ncmoe, or n_layers + 1 - ngl

    @property
    def constant_ctx(self) -> bool:
        """Whether every series fitted one and the same context at every stored point: no threshold."""
        return len({c for v in self.ctx.values() for x, c in v.items() if x in self.domain}) <= 1

    def show(self, xs: int | list[int] | None) -> str:
        """x (or a list of x) as the option's values, e.g. ``ngl 31``."""
        if xs is None:
            return "–"
        if isinstance(xs, int):
            return str(self.axis.value(xs))
        return str(sorted(self.axis.value(x) for x in xs))

    @property
    def total(self) -> float:
        return sum(s for s, _ in self.seconds.values()) + self.sentinel_seconds

    def launch_seconds(self, s: str, x: int) -> float:
        secs, n = self.seconds.get((s, x), (0.0, 1))
        return secs / max(n, 1)


def fit_times(store: Store, series_keys: dict[str, str],
              axis: Axis | None = None) -> tuple[dict[str, dict[int, float]], str]:
    """Seconds of one fit per series and x from the stored fit maps over the same option (``axis``,
    default ncmoe): the newest of the same build where there is one, else the newest of the same
    backend, else the mean of every stored fit (an estimate)."""
    axis = axis or Axis("ncmoe", 0)
    by_key: dict[str, dict[int, float]] = {}
    by_backend: dict[str, dict[int, float]] = {}
    everything: list[float] = []
    for run in store.list_runs("fitmap"):        # oldest first: newer maps overwrite
        backends = {b["key"]: b.get("backend") for b in store.builds_for_run(run.id)}
        points = store.points(run.id, with_samples=False)
        if not points or sweep_axis(points) != axis.name:
            continue
        for p in points:
            secs, _ = point_seconds(p)
            x = axis.x_of(p.ncmoe, p.ngl)
            by_key.setdefault(p.build_key, {})[x] = secs
            by_backend.setdefault(str(backends.get(p.build_key)), {})[x] = secs
            everything.append(secs)
    out: dict[str, dict[int, float]] = {}
    sources = set()
    for s, key in series_keys.items():
        if key in by_key:
            out[s], src = by_key[key], "this build's stored fit map"
        elif s in by_backend:
            out[s], src = by_backend[s], f"the stored fit map of another {s} build"
        else:
            out[s], src = {}, "the mean stored fit"
        sources.add(src)
    mean = sum(everything) / len(everything) if everything else 1.0
    for v in out.values():
        v.setdefault(-1, mean)            # the fallback of an x without a stored fit
    return out, " / ".join(sorted(sources)) if everything else "no stored fit map: 1 s a fit assumed"


def load(store: Store, run_id: str) -> Stored:
    run = store.get_run(run_id)
    builds = store.builds_for_run(run.id)
    backend = {b["key"]: b.get("backend", b["key"]) for b in builds}
    facts = run.plan.facts
    st = Stored(run.id, {}, {}, facts.n_ctx_train, [], list(facts.full_attention_layers or []),
                int(facts.n_layers or 0))
    points = store.points(run.id)
    name = sweep_axis([p for p in points if not p.label])
    if name == "ngl" and not st.n_layers:
        raise SystemExit(f"run {run.id} sweeps -ngl but its model's layer count is not stored: "
                         "nothing to map ngl onto (replay an ncmoe sweep, or a run with model facts)")
    st.axis = Axis(name, st.n_layers)
    for p in points:
        s = backend.get(p.build_key, p.build_key)
        if p.label:
            st.sentinel_seconds += point_seconds(p)[0] if p.label == "sentinel" else 0.0
            continue
        x = st.axis.x_of(p.ncmoe, p.ngl)
        secs, n = point_seconds(p)
        old = st.seconds.get((s, x), (0.0, 0))
        st.seconds[(s, x)] = (old[0] + secs, max(old[1], n))
        ps = tg_summary(p) if p.engine == "server" else None
        if ps is None:
            continue
        st.summ.setdefault(s, {})[x] = ps
        st.ctx.setdefault(s, {})[x] = p.n_ctx
    st.domain = sorted(set.intersection(*(set(v) for v in st.summ.values()))) if st.summ else []
    if name == "ncmoe" and not st.n_layers:
        st.n_layers = st.domain[-1] if st.domain else 0
        st.axis = Axis(name, st.n_layers)
    keys = {backend.get(k, k): k for k in backend}
    st.fit_seconds, st.fit_source = fit_times(store, {s: keys.get(s, s) for s in st.summ}, st.axis)
    return st


def bisection_cost(stored_ctx: dict[int, int | None], native: int | None, n_layers: int,
                   secs: dict[int, float], axis: Axis | None = None) -> tuple[float, int]:
    """(seconds, fits) of the threshold's bisection over the axis' every x (default: ncmoe 0..n_layers;
    ``axis``: its :attr:`Axis.domain`, ngl adds one), as a real run does it.

    The stored sweep fitted only its own points; where it skipped the x values around the threshold,
    every threshold in that gap is possible, and the most expensive bisection among them is charged."""
    full = (axis or Axis("ncmoe", n_layers)).domain
    xs = sorted(x for x in stored_ctx if full[0] <= x <= full[-1])
    below = [x for x in xs if not reaches(stored_ctx[x], native)]
    above = [x for x in xs if reaches(stored_ctx[x], native)]
    lo = max((x for x in below if not above or x < min(above)), default=-1)
    hi = min(above) if above else full[-1] + 1          # one past the end: never reached
    worst = (0.0, 0)
    for t in range(lo + 1, hi + 1):
        search = bisect_threshold(full, lambda x, t=t: native if x >= t else 0, native)
        cost = sum(secs.get(x, secs[-1]) for x in search.probes)
        worst = max(worst, (cost, len(search.probes)))
    return worst


def replay(st: Stored, budget: int | None) -> AdaptiveResult:
    def measure(s: str, x: int) -> PointSummary | None:
        return st.summ[s].get(x)

    # the threshold as a real run finds it: a bisection over fits (here: the stored points' fitted contexts)
    ctx = {s: bisect_threshold(st.domain, lambda x, s=s: st.ctx[s].get(x), st.native).probes for s in st.summ}
    return adaptive_sweep(sorted(st.summ), st.domain, measure, ctx=ctx, native=st.native,
                          boundaries=st.axis.boundaries(st.fa), options=AdaptiveOptions(max_points=budget),
                          show=st.axis.value)


@dataclass
class Cost:
    measuring: float
    confirmations: float
    sentinels: float
    fits: float
    n_fits: int
    exhaustive: float

    @property
    def total(self) -> float:
        return self.measuring + self.confirmations + self.sentinels + self.fits

    @property
    def share(self) -> float:
        return self.total / self.exhaustive if self.exhaustive else math.nan

    def text(self) -> str:
        return (f"time {self.total:.0f} s of the exhaustive {self.exhaustive:.0f} s ({self.share:.0%}): "
                f"measuring {self.measuring:.0f} s, confirmations {self.confirmations:.0f} s, end sentinels "
                f"{self.sentinels:.0f} s, {self.n_fits} fits {self.fits:.0f} s")


def cost(st: Stored, r: AdaptiveResult) -> Cost:
    measuring = sum(st.seconds.get((s, x), (0.0, 0))[0] for s, pts in r.measured.items() for x in pts)
    confirmations = sum(st.launch_seconds(s, x) for s, x in r.confirmations)
    sentinels = sum(min(st.launch_seconds(s, x) for x in pts) for s, pts in r.measured.items() if pts)
    fits = [bisection_cost(st.ctx[s], st.native, st.n_layers, st.fit_seconds[s], st.axis) for s in st.summ]
    return Cost(measuring, confirmations, sentinels, sum(f for f, _ in fits), sum(n for _, n in fits), st.total)


def verdicts(ad: Conclusions, ex: Conclusions, st: Stored) -> dict[str, str]:
    """Whether each conclusion of the adaptive run (``ad``) matches the exhaustive one (``ex``), as text
    in the option's values. The threshold is "n/a" where the stored context never changes (nothing to
    find; it still must not disagree)."""
    summ, show = st.summ, st.show
    out = {}
    if ad.threshold != ex.threshold:
        out["threshold"] = (f"no ({ {s: show(v) for s, v in ad.threshold.items()} } vs "
                            f"{ {s: show(v) for s, v in ex.threshold.items()} })")
    elif st.constant_ctx:
        ctx = next((c for v in st.ctx.values() for c in v.values()), None)
        out["threshold"] = f"n/a (context {ctx} at every {st.axis.name}; native {st.native})"
    else:
        out["threshold"] = "yes"
    sweet = []
    for s, x_ex in ex.sweet_spot.items():
        x_ad = ad.sweet_spot.get(s)
        if x_ad == x_ex:
            sweet.append(f"{s} {show(x_ad)}: yes")
        elif x_ad is not None and x_ex is not None and _tie(summ[s], x_ad, x_ex):
            sweet.append(f"{s} {show(x_ad)} vs {show(x_ex)}: tie")
        else:
            sweet.append(f"{s} {show(x_ad)} vs {show(x_ex)}: NO")
    out["sweet spot"] = "; ".join(sweet)
    if len(summ) > 1:
        out["winner per region"] = winner_verdict(ad, ex, st)
    out["suspects"] = "; ".join(f"{s}: exhaustive {show(ex.suspects.get(s, []))}, "
                                f"adaptive {show(ad.suspects.get(s, []))}" for s in sorted(summ))
    found = {s: sorted(set(ad.anomalies.get(s, [])) & set(v)) for s, v in ex.anomalies.items()}
    missed = {s: sorted(set(v) - set(ad.anomalies.get(s, []))) for s, v in ex.anomalies.items()}
    extra = {s: sorted(set(v) - set(ex.anomalies.get(s, []))) for s, v in ad.anomalies.items()}
    out["anomalies"] = "; ".join(f"{s}: found {show(found[s])} missed {show(missed[s])} "
                                 f"not-exhaustive {show(extra.get(s, []))}" for s in ex.anomalies)
    return out


def winner_verdict(ad: Conclusions, ex: Conclusions, st: Stored) -> str:
    """``yes`` or what differs, per x: ``NO at …`` where the two runs name different winners (a
    contradiction); ``claims more at …`` where the adaptive run names a winner and the exhaustive one
    cannot tell (``tie``: its chords claimed more than the measured points show); ``open at …`` where the
    exhaustive run names a winner and the adaptive one cannot tell (it says less, it contradicts nothing)."""
    pairs = [(x, _label(ad, x), _label(ex, x)) for x in st.domain]
    named = ("tie", None)
    kinds = {"NO": [x for x, la, le in pairs if la not in named and le not in named and la != le],
             "claims more": [x for x, la, le in pairs if la not in named and le == "tie"],
             "open": [x for x, la, le in pairs if le not in named and la in named]}
    parts = [f"{k} at {st.axis.name} {st.show(xs)}" for k, xs in kinds.items() if xs]
    return ("; ".join(parts) or "yes") + ": " + _regions(ad, st.axis)


def all_match(v: dict[str, str], strict: bool = True) -> bool:
    """Whether every conclusion matches (a sweet-spot tie counts as a match; a missed anomaly does not).
    ``strict=False``: only contradictions count — a winner one run names and the other cannot tell
    (:func:`winner_verdict`'s ``open`` / ``claims more``) does not."""
    win = v.get("winner per region", "yes").split(":")[0]
    return (v["threshold"].split()[0] in ("yes", "n/a") and "NO" not in v["sweet spot"]
            and "NO" not in win and (not strict or win == "yes")
            and all("missed []" in part for part in v["anomalies"].split(";") if part.strip()))


def break_lines(summ: dict, domain: list[int], show: Callable[[int], str] = str) -> list[str]:
    """Per series its direction, then why each point the exhaustive run finds faster than its trend
    (in its own comparison) is an anomaly or only a suspect: the judge's verdict over its reference
    neighbour, on starts, and whether it survives Holm over every series' comparisons."""
    pts = {s: {x: summ[s][x] for x in domain} for s in sorted(summ)}
    priors = {s: series_prior(v) for s, v in pts.items()}
    inputs = series_inputs(pts, priors)
    kept = {(b.series, b.x) for b in trend.breaks(inputs)}
    out = []
    for si in inputs:
        d = trend.direction(si.points, prior=si.prior)
        spread = f"between-start spread {si.prior.sd:.0%} ({si.prior.df} df)" if si.prior else "no spread measured"
        out.append(f"{si.name}: tg {DIRECTION[d]} with offload (its two ends); {spread}")
    for b in trend.breaks(inputs, method=None):
        j = b.judgement
        shapes = f"{j.b.k} vs {j.a.k} starts"
        what = "ANOMALY (after Holm over the sweep)" if (b.series, b.x) in kept else \
            "suspect: differs alone, not after Holm over the sweep"
        out.append(f"{b.series} {show(b.x)} over {show(b.neighbour)}: {j.fmt()} ({shapes}): {what}"
                   + (f"; assumed: {j.assumed}" if j.assumed else ""))
    return out


def _tie(pts: dict, a: int, b: int) -> bool:
    """Whether two points of a series are indistinguishable: the judge does not say they differ."""
    prior = series_prior(pts)
    j = judge(pts[a].starts, pts[b].starts, prior_a=prior, prior_b=prior)
    return j is None or j.verdict != DIFFERS


def _label(c: Conclusions, x: int) -> str | None:
    return next((w for lo, hi, w in c.regions if lo <= x <= hi), None)


def _regions(c: Conclusions, axis: Axis | None = None) -> str:
    """The winner per region in the option's values (ngl regions read from the most layers on the device)."""
    ax = axis or Axis("ncmoe", 0)
    return ", ".join(f"{lo}–{hi} {w}" for lo, hi, w in c.to_dict(ax.value)["regions"])


@dataclass
class Outcome:
    run: str
    mode: str
    used: int
    avail: int
    match: bool
    cost: Cost
    consistent: bool = True     # no contradiction (a match but for winners the adaptive run cannot tell)


def replay_run(st: Stored, share: float, markdown: list[str]) -> list[Outcome]:
    summ, domain = st.summ, st.domain
    avail = sum(len([x for x in v if x in domain]) for v in summ.values())
    ex = conclude({s: {x: v[x] for x in domain} for s, v in summ.items()}, st.ctx, st.native, domain)
    vals = sorted(st.axis.value(x) for x in domain)
    exd = ex.to_dict(st.axis.value)
    print(f"\nrun {st.run_id}: {', '.join(sorted(summ))}; {st.axis.name} {vals[0]}..{vals[-1]} ({len(domain)} per "
          f"series, {st.n_layers} layers); native context {st.native}; fit times from {st.fit_source}")
    print(f"exhaustive: threshold {exd['threshold']}; sweet spot {exd['sweet_spot']}; regions "
          f"{_regions(ex, st.axis) or '–'}; anomalies {exd['anomalies']}; suspects {exd['suspects']}; "
          f"time {st.total:.0f} s (sentinels {st.sentinel_seconds:.0f} s)")
    for line in break_lines(summ, domain, st.show):
        print("  " + line)
    out = []
    for label, budget in (("stop by itself", None), (f"budget {share:.0%}", math.floor(avail * share))):
        r = replay(st, budget)
        c = cost(st, r)
        v = verdicts(r.conclusions, ex, st)
        print(f"[{label}] points {r.n_measured}/{avail} ({r.n_measured / avail:.0%}), stopped: {r.stopped}; {c.text()}")
        for s in sorted(r.measured):
            print(f"  {s}: measured {st.axis.name} {st.show(list(r.measured[s]))}")
        for k, text in v.items():
            print(f"  {k}: {text}")
        out.append(Outcome(st.run_id, label, r.n_measured, avail, all_match(v), c, all_match(v, strict=False)))
        markdown.append(_row(st.run_id, label, r.n_measured, avail, r, ex, v, c))
    return out


def _row(run: str, label: str, used: int, avail: int, r: AdaptiveResult, ex: Conclusions, v: dict, c: Cost) -> str:
    """``| run | mode | used/avail | threshold | sweet spot | winner | anomalies; suspects | fits | time |``"""
    sweet = "yes" if "NO" not in v["sweet spot"] else "NO"
    sweet += " (tie)" if "tie" in v["sweet spot"] else ""
    win = v.get("winner per region", "–").split(":")[0]
    n_ex = sum(len(x) for x in ex.anomalies.values())
    found = sum(len(set(r.conclusions.anomalies.get(s, [])) & set(x)) for s, x in ex.anomalies.items())
    extra = sum(len(set(x) - set(ex.anomalies.get(s, []))) for s, x in r.conclusions.anomalies.items())
    sus = (sum(len(x) for x in ex.suspects.values()), sum(len(x) for x in r.conclusions.suspects.values()))
    return (f"| {run} | {label} | {used}/{avail} ({used / avail:.0%}) | {v['threshold'].split()[0]} | {sweet} | "
            f"{win} | {found}/{n_ex}" + (f" (+{extra} not in the exhaustive run)" if extra else "")
            + f"; suspects {sus[0]} / {sus[1]} | {c.n_fits} ({c.fits:.0f} s) | "
              f"{c.total:.0f} s of {c.exhaustive:.0f} s (**{c.share:.1%}**) |")


MIN_SERIES_POINTS = 6   # fewer points per series is a spot check (a demo), not a sweep to thin out


def exhaustive_runs(store: Store) -> list[str]:
    """Every stored sweep that is neither a re-measurement nor adaptive, with at least
    :data:`MIN_SERIES_POINTS` offload points in each series (demos and spot checks are skipped)."""
    out = []
    for r in store.list_runs("sweep"):
        if r.plan.reproduces or r.plan.adaptive is not None:
            continue
        per: dict[str, set] = {}
        for pt in store.points(r.id, with_samples=False):
            per.setdefault(pt.build_key, set()).add((pt.ncmoe, pt.ngl))
        if per and min(len(v) for v in per.values()) >= MIN_SERIES_POINTS:
            out.append(r.id)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("store", type=Path)
    ap.add_argument("runs", nargs="*", help="runs to replay (default: every stored exhaustive sweep)")
    ap.add_argument("--share", type=float, default=1 / 3, help="point budget as a share of the stored points")
    ap.add_argument("--markdown", action="store_true", help="also print one Markdown table row per run and mode")
    a = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / "replay.sqlite"
        shutil.copyfile(a.store, copy)
        with Store(copy) as store:
            runs = [store.get_run(r).id for r in a.runs] or exhaustive_runs(store)
            stored = [load(store, r) for r in runs]
    outcomes: list[Outcome] = []
    rows: list[str] = []
    for st in stored:
        if not st.summ:
            print(f"run {st.run_id}: no ok server points to replay")
            continue
        outcomes += replay_run(st, a.share, rows)
    if not outcomes:
        return 1
    print("\nworst case over " + f"{len({o.run for o in outcomes})} run(s):")
    for mode in dict.fromkeys(o.mode for o in outcomes):
        os_ = [o for o in outcomes if o.mode == mode]
        pts = max(os_, key=lambda o: o.used / o.avail)
        tm = max(os_, key=lambda o: o.cost.share)
        print(f"  [{mode}] points {pts.used}/{pts.avail} ({pts.used / pts.avail:.0%}, {pts.run}); "
              f"time {tm.cost.share:.1%} of the exhaustive sweep ({tm.run}); "
              f"conclusions match in {sum(o.match for o in os_)}/{len(os_)}, "
              f"none contradicted in {sum(o.consistent for o in os_)}/{len(os_)}")
    if a.markdown:
        print("\n" + "\n".join(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
