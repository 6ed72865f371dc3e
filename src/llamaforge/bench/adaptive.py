"""Adaptive offload sweep: the exhaustive sweep's conclusions from a fraction of its points.

A pure algorithm, independent of how a point is measured: :func:`adaptive_sweep` calls
``measure(series, x)`` (``series`` a backend or build, ``x`` the offload step: an ``-ncmoe`` value, or
``n_layers + 1 - ngl`` for a layer sweep, so that a larger x always means more offload) and gets a
:class:`PointSummary` (the point's tg starts and the judge's estimate of them), or ``None`` for a failed
point. Calling it again for the same point means "one more server start" (a suspect's confirmation) and
returns the summary over all starts so far. The real sweep (``bench --ncmoe auto``) measures through the
runner; ``benchmarks/adaptive_replay.py`` reads stored samples instead.

**Every verdict is the judge's** (:mod:`llamaforge.judge`), on server starts: a point's data are its start
medians (:attr:`PointSummary.starts`); a point with fewer than 3 starts borrows the spread pooled over its
series' points (:func:`series_prior`, ``judge.pooled``), else the judge's stated conservative bound. The
trend rule is :mod:`llamaforge.judge.trend`, the one the report's Anomalies table uses, so the adaptive sweep,
its replay and the report cannot disagree on what an anomaly is.

What a user wants from a sweep are :class:`Conclusions`: where the native context is first
reached (the *threshold*, fixed exactly beforehand by a bisection over fits, :mod:`.threshold`),
the fastest setting at native context per series (the *sweet spot*), which series wins in each
region (:func:`winner_regions`), and the points that break the trend (*anomalies*:
:func:`llamaforge.judge.trend.breaks` over every series, Benjamini–Hochberg over the family: the report's rule).

1. **Coarse grid** per series: both ends of the domain, the threshold and its neighbours.
2. **Refinement.** Between consecutive measured points the prior is a smooth, monotone tg. Which
   way it goes is the series' own (:func:`llamaforge.judge.trend.direction`, from its two measured ends). An
   interval is *settled* when the judge does not say its two ends differ (nothing to explain), when
   bisections showed its midpoint on the chord (:func:`on_chord`), or when no domain point lies inside.
   Otherwise it is bisected, the widest unexplained change first; the split prefers a full-attention
   boundary (``ncmoe = L + 1``, or ``x = L + 2`` on the ngl axis, for a full-attention layer ``L``) near
   the middle, where the layer structure may break the trend. Intervals where the winning series flips
   are bisected first (to place the crossing). A *suspect* — a point the judge finds faster than its
   reference neighbour(s) in that comparison alone, or above the chord of its measured neighbours
   (:func:`above_trend`) — gets its unmeasured neighbours measured and ``confirm_launches`` more starts.
3. **Stop** when every interval is settled (``stopped = "stable"``), at ``max_points`` measured
   points (all series together; confirmations do not count) or at ``time_budget_s``.

**The chord** between two measured points a and b at a point in between (:func:`chord_starts`) is a
set of start values: the i-th start of a with the i-th start of b, interpolated linearly in time per
token (1/tg), as many values as the side with fewer starts has (pairing starts in their order keeps
them independent, so the chord's own spread is the one its centre has). The midpoint, or another
series, is then judged against those values like any other point.

Unmeasured domain points get interpolated values (:attr:`AdaptiveResult.interpolated`), which are never
used as measurements: conclusions rest on measured points, except the winner of a region, which
compares chords where a series has no measurement.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from ..judge import DIFFERS, Judgement, Spread, Starts, control, estimate, judge, pooled, trend
from ..judge.trend import FALLS, RISES

#: how much faster (relative) a point must be than its reference neighbour to be an anomaly
MIN_EFFECT = trend.MIN_EFFECT


@dataclass(frozen=True)
class PointSummary:
    """A point's tg as the judge sees it: :func:`llamaforge.judge.estimate` over its server starts.

    ``launches`` holds the median of each start (the data of every verdict, :attr:`starts`) and ``n``
    their number K (0 for an interpolated point). ``median`` is the estimate's centre — the geometric
    mean of the start medians (the field keeps the name the records use) — and ``ci_low``/``ci_high``
    the interval that K allows (``interval`` names it): K ≥ 3, the 95 % t-interval on the log start
    medians (``"ci"``); K = 2, the range of the two starts (``"range"``: not a confidence interval);
    K = 1, the one start's value at both ends (``"single"``: the between-start spread is unknown)."""

    median: float
    ci_low: float
    ci_high: float
    n: int = 1
    launches: tuple[float, ...] = ()   # the median of each launch (server start)
    n_ctx: int | None = None           # the context llama-server fitted there, when known
    interval: str = "single"           # ci | range | single (see the class doc)

    @classmethod
    def of(cls, starts: Starts | Sequence[Sequence[float]], n_ctx: int | None = None,
           n: int | None = None) -> PointSummary | None:
        """From per-start request values (``Point.launch_groups``) or :class:`~llamaforge.judge.Starts`
        (``None`` without any start)."""
        est = estimate(starts if isinstance(starts, Starts) else Starts.of(starts))
        if est is None:
            return None
        return cls(est.centre, est.low, est.high, est.k if n is None else n, est.starts, n_ctx, est.kind)

    @classmethod
    def of_centres(cls, centres: Sequence[float], n_ctx: int | None = None) -> PointSummary | None:
        """From one value per start."""
        return cls.of(Starts.of_centres(centres), n_ctx)

    @property
    def starts(self) -> Starts:
        """One value per start; a summary without them counts as one start at its centre."""
        return Starts.of_centres(self.launches or (self.median,))

    def to_dict(self) -> dict:
        return {"median": self.median, "ci_low": self.ci_low, "ci_high": self.ci_high, "n": self.n,
                "interval": self.interval, "starts": list(self.launches)}


Measure = Callable[[str, int], "PointSummary | None"]


@dataclass
class AdaptiveOptions:
    max_points: int | None = None      # measured points, all series together
    time_budget_s: float | None = None
    tolerance: float = 0.05            # the chord test's minimum effect (:func:`on_chord`)
    confirm_launches: int = 1          # extra launches for a point that breaks the trend
    min_effect: float = MIN_EFFECT
    stable_after: int | None = 2       # stop once this many refinements per series changed no conclusion
                                       # (None: only when every interval is settled)

    def to_dict(self) -> dict:
        return {"max_points": self.max_points, "time_budget_s": self.time_budget_s, "tolerance": self.tolerance,
                "confirm_launches": self.confirm_launches, "min_effect": self.min_effect,
                "stable_after": self.stable_after}


@dataclass(frozen=True)
class Choice:
    """Why a point was measured (in the order they were)."""

    series: str
    x: int
    reason: str

    def to_dict(self, axis: str = "ncmoe", show: Callable[[int], int] = int) -> dict:
        return {"series": self.series, axis: show(self.x), "reason": self.reason}


@dataclass
class Conclusions:
    threshold: dict[str, int | None]          # first x whose fitted context reaches native, per series
    sweet_spot: dict[str, int | None]         # fastest measured x at native context, per series
    regions: list[tuple[int, int, str]]       # (first x, last x, winner or "tie"); several series only
    anomalies: dict[str, list[int]]           # trend breaks after BH over every series (:func:`conclude`)
    suspects: dict[str, list[int]] = field(default_factory=dict)  # breaks in their own comparison, not after BH

    def to_dict(self, show: Callable[[int], int] = int) -> dict:
        """On the axis of the user (``show``: x → the option's value, e.g. ``-ngl``)."""
        def opt(v: int | None) -> int | None:
            return None if v is None else show(v)

        regions = sorted([min(show(lo), show(hi)), max(show(lo), show(hi)), w] for lo, hi, w in self.regions)
        return {"threshold": {s: opt(v) for s, v in self.threshold.items()},
                "sweet_spot": {s: opt(v) for s, v in self.sweet_spot.items()},
                "regions": regions, "anomalies": {s: sorted(map(show, v)) for s, v in self.anomalies.items()},
                "suspects": {s: sorted(map(show, v)) for s, v in self.suspects.items()}}


@dataclass
class AdaptiveResult:
    domain: list[int]
    measured: dict[str, dict[int, PointSummary]]
    interpolated: dict[str, dict[int, float]]   # centres of unmeasured points, never measurements
    choices: list[Choice]
    conclusions: Conclusions
    stopped: str                                # stable | conclusions stable | max-points | time-budget
    confirmations: list[tuple[str, int]] = field(default_factory=list)

    @property
    def n_measured(self) -> int:
        return sum(len(v) for v in self.measured.values())

    def to_dict(self, axis: str = "ncmoe", show: Callable[[int], int] = int) -> dict:
        """The record, on the user's axis: ``axis`` names the option, ``show`` maps x to its value."""
        return {"axis": axis, "domain": sorted(map(show, self.domain)), "stopped": self.stopped,
                "n_measured": self.n_measured,
                "chosen": [c.to_dict(axis, show) for c in self.choices],
                "confirmed": [{"series": s, axis: show(x)} for s, x in self.confirmations],
                "interpolated": {s: {show(x): v for x, v in sorted(vals.items())}
                                 for s, vals in self.interpolated.items()},
                "conclusions": self.conclusions.to_dict(show)}


# ---------------------------------------------------------------------------------- pure helpers


def native_threshold(ctx: Mapping[int, int | None], native: int | None) -> int | None:
    """The lowest x whose fitted context reaches ``native`` (``None``: never, or native unknown)."""
    if not native:
        return None
    hits = [x for x, c in ctx.items() if c is not None and c >= native]
    return min(hits) if hits else None


def coarse_grid(domain: Sequence[int], threshold: int | None) -> list[tuple[int, str]]:
    """Both ends of the domain, the threshold and its neighbours in the domain."""
    dom = sorted(domain)
    out: dict[int, str] = {dom[0]: "end", dom[-1]: "end"}
    if threshold is not None:
        i = min(range(len(dom)), key=lambda k: (abs(dom[k] - threshold), dom[k]))
        for k, why in ((i, "threshold"), (i - 1, "next to the threshold, less offload"),
                       (i + 1, "next to the threshold, more offload")):
            if 0 <= k < len(dom):
                out.setdefault(dom[k], why)
    return sorted(out.items())


def split_point(domain: Sequence[int], a: int, b: int, boundaries: Sequence[int] = ()) -> int | None:
    """A domain point strictly inside (a, b): a boundary in the middle half if there is one, else
    the point nearest the middle (``None`` if there is none)."""
    inner = [x for x in domain if a < x < b]
    if not inner:
        return None
    mid = (a + b) / 2
    quarter = (b - a) / 4
    near = [x for x in inner if x in set(boundaries) and abs(x - mid) <= quarter]
    return min(near or inner, key=lambda x: (abs(x - mid), x))


def _harmonic(a: float, b: float, f: float) -> float:
    """Interpolate ``a`` → ``b`` at fraction ``f`` in time per token (1/tg): llama.cpp's time per token
    grows by about the same amount for each layer whose experts move to the CPU."""
    if a <= 0 or b <= 0:
        return a + f * (b - a)
    return 1.0 / ((1 - f) / a + f / b)


def chord_starts(a: PointSummary, b: PointSummary, f: float) -> Starts:
    """The chord from ``a`` to ``b`` at fraction ``f`` as start values: the i-th start of each side
    interpolated in time per token, as many as the side with fewer starts has (see the module doc)."""
    return Starts.of_centres([_harmonic(u, v, f) for u, v in zip(a.starts.centres, b.starts.centres, strict=False)])


def _around(points: Mapping[int, PointSummary], x: int) -> tuple[int, int] | None:
    lo = max((k for k in points if k < x), default=None)
    hi = min((k for k in points if k > x), default=None)
    return None if lo is None or hi is None else (lo, hi)


def interpolate(points: Mapping[int, PointSummary], x: int) -> PointSummary | None:
    """The point at ``x``: measured, or the chord of its measured neighbours (:func:`chord_starts`;
    ``n`` = 0: never a measurement)."""
    if x in points:
        return points[x]
    near = _around(points, x)
    if near is None:
        return None
    lo, hi = near
    return PointSummary.of(chord_starts(points[lo], points[hi], (x - lo) / (hi - lo)), n=0)


def series_prior(points: Mapping[int, PointSummary]) -> Spread | None:
    """The between-start spread pooled over a series' points (``judge.pooled``): what its points with
    fewer than 3 starts are judged with (``None``: too few starts; the judge then states its bound)."""
    return pooled([p.starts for p in points.values()], what="this build in this sweep")


def on_chord(a: tuple[int, PointSummary], m: tuple[int, PointSummary], b: tuple[int, PointSummary],
             tolerance: float, prior: Spread | None = None) -> bool:
    """Whether the midpoint lies on the chord of its ends: the judge does not say it *differs* from the
    chord's values (:func:`chord_starts`) by more than ``tolerance`` (same or inconclusive)."""
    chord = chord_starts(a[1], b[1], (m[0] - a[0]) / (b[0] - a[0]))
    j = judge(chord, m[1].starts, min_effect=tolerance, prior_a=prior, prior_b=prior)
    return j is None or j.verdict != DIFFERS


def ends_differ(a: PointSummary, b: PointSummary, prior: Spread | None = None,
                min_effect: float = MIN_EFFECT) -> bool:
    """Whether an interval has something to explain: the judge says its two ends differ."""
    j = judge(a.starts, b.starts, min_effect=min_effect, prior_a=prior, prior_b=prior)
    return j is not None and j.verdict == DIFFERS


def above_trend(points: Mapping[int, PointSummary], prior: Spread | None = None,
                min_effect: float = MIN_EFFECT) -> list[int]:
    """Measured x that the judge finds faster than the chord of its measured neighbours (each comparison
    alone): a suspect whose reference neighbour in the domain has not been measured yet."""
    xs = sorted(points)
    out = []
    for p, q, r in zip(xs, xs[1:], xs[2:], strict=False):
        chord = chord_starts(points[p], points[r], (q - p) / (r - p))
        j = judge(chord, points[q].starts, min_effect=min_effect, prior_a=prior, prior_b=prior)
        if j is not None and j.verdict == DIFFERS and j.ratio > 1:
            out.append(q)
    return out


# ---------------------------------------------------------------------------------- conclusions


def series_inputs(measured: Mapping[str, Mapping[int, PointSummary]],
                  priors: Mapping[str, Spread | None]) -> list[trend.SeriesInput]:
    """The series as :mod:`llamaforge.judge.trend` reads them: tg starts per x, with each series' prior."""
    return [trend.SeriesInput(s, "tg", {x: p.starts for x, p in pts.items()}, priors.get(s))
            for s, pts in measured.items()]


def trend_breaks(measured: Mapping[str, Mapping[int, PointSummary]], priors: Mapping[str, Spread | None] | None = None,
                 min_effect: float = MIN_EFFECT, method: str | None = "bh") -> dict[str, list[int]]:
    """Per series, the points :func:`llamaforge.judge.trend.breaks` finds (``method=None``: each comparison
    alone, the suspects' rule)."""
    pri = priors if priors is not None else {s: series_prior(pts) for s, pts in measured.items()}
    out: dict[str, list[int]] = {s: [] for s in measured}
    for b in trend.breaks(series_inputs(measured, pri), min_effect=min_effect, method=method):
        out[b.series].append(b.x)
    return out


def _contenders(measured: Mapping[str, Mapping[int, PointSummary]], x: int) -> dict[str, PointSummary] | None:
    if len(measured) < 2:
        return None
    vals = {s: interpolate(pts, x) for s, pts in measured.items()}
    return None if any(v is None for v in vals.values()) else vals   # type: ignore[return-value]


def _winner_tests(measured: Mapping[str, Mapping[int, PointSummary]], x: int, priors: Mapping[str, Spread | None],
                  min_effect: float) -> tuple[str, list[Judgement | None]] | None:
    """The series with the highest centre at ``x`` and the judge's verdicts on it over each other one."""
    vals = _contenders(measured, x)
    if vals is None:
        return None
    best = max(vals, key=lambda s: vals[s].median)
    return best, [judge(v.starts, vals[best].starts, min_effect=min_effect, prior_a=priors.get(s),
                        prior_b=priors.get(best)) for s, v in vals.items() if s != best]


def _wins(best: str, js: Sequence[Judgement | None]) -> str:
    return best if all(j is not None and j.verdict == DIFFERS and j.ratio > 1 for j in js) else "tie"


def winner_at(measured: Mapping[str, Mapping[int, PointSummary]], x: int,
              priors: Mapping[str, Spread | None] | None = None, min_effect: float = MIN_EFFECT) -> str | None:
    """The series the judge finds faster at ``x`` than every other (measured there, or its chord), in that
    comparison alone (the refinement's test); ``"tie"`` otherwise; ``None`` where a series has neither
    a measurement nor a chord at ``x`` (or there is one series)."""
    pri = priors if priors is not None else {s: series_prior(pts) for s, pts in measured.items()}
    t = _winner_tests(measured, x, pri, min_effect)
    return None if t is None else _wins(*t)


def winner_regions(measured: Mapping[str, Mapping[int, PointSummary]], domain: Sequence[int],
                   priors: Mapping[str, Spread | None] | None = None,
                   min_effect: float = MIN_EFFECT) -> list[tuple[int, int, str]]:
    """``(first x, last x, winner)`` runs over the domain: at each x, :func:`winner_at`'s comparisons with
    Holm's control over those of the whole domain (a region's winner is a conclusion; ``tie`` where a
    comparison does not survive)."""
    pri = priors if priors is not None else {s: series_prior(pts) for s, pts in measured.items()}
    tests = [(x, t) for x in sorted(domain) if (t := _winner_tests(measured, x, pri, min_effect)) is not None]
    flat = iter(control([j for _x, (_b, js) in tests for j in js]))
    out: list[tuple[int, int, str]] = []
    for x, (best, js) in tests:
        w = _wins(best, [next(flat) for _ in js])
        if out and out[-1][2] == w:
            out[-1] = (out[-1][0], x, w)
        else:
            out.append((x, x, w))
    return out


def conclude(measured: Mapping[str, Mapping[int, PointSummary]], ctx: Mapping[str, Mapping[int, int | None]],
             native: int | None, domain: Sequence[int], min_effect: float = MIN_EFFECT) -> Conclusions:
    """The conclusions from measured points (an exhaustive sweep's too: pass all of its points).

    ``ctx`` may hold every point's fitted context or only some (the fits of the threshold's bisection,
    :mod:`.threshold`); a measured point's own context (``PointSummary.n_ctx``, the server's fit) joins
    it. Where a point's context is not known it reaches native from the threshold on: the fitted
    context is monotone in x (see :mod:`.threshold`). Anomalies are :func:`llamaforge.judge.trend.breaks`
    over every series together (Benjamini–Hochberg, as the report's Anomalies); suspects break the trend in
    their own comparison but not after."""
    threshold: dict[str, int | None] = {}
    sweet: dict[str, int | None] = {}
    for s, pts in measured.items():
        c = {x: v for x, v in (ctx.get(s) or {}).items() if x in domain}
        c.update({x: p.n_ctx for x, p in pts.items() if p.n_ctx is not None})
        t = threshold[s] = native_threshold(c, native)
        at_native = [x for x in pts if t is not None and
                     ((c[x] or 0) >= (native or 0) if x in c else x >= t)]
        sweet[s] = max(at_native, key=lambda x: (pts[x].median, -x)) if at_native else None
    priors = {s: series_prior(pts) for s, pts in measured.items()}
    anomalies = trend_breaks(measured, priors, min_effect)
    alone = trend_breaks(measured, priors, min_effect, method=None)
    suspects = {s: [x for x in xs if x not in anomalies[s]] for s, xs in alone.items()}
    return Conclusions(threshold, sweet, winner_regions(measured, domain, priors, min_effect), anomalies, suspects)


# ---------------------------------------------------------------------------------- the loop


@dataclass
class _State:
    series: list[str]
    domain: list[int]
    measure: Measure
    opts: AdaptiveOptions
    clock: Callable[[], float]
    boundaries: list[int]
    measured: dict[str, dict[int, PointSummary]] = field(default_factory=dict)
    failed: dict[str, set[int]] = field(default_factory=dict)
    passed: dict[str, set[tuple[int, int, int]]] = field(default_factory=dict)   # (p, q, r): q on chord p–r
    choices: list[Choice] = field(default_factory=list)
    confirmations: list[tuple[str, int]] = field(default_factory=list)
    t0: float = 0.0
    show: Callable[[int], int] = int       # x as the user's option value, for the reasons

    def __post_init__(self) -> None:
        self.measured = {s: {} for s in self.series}
        self.failed = {s: set() for s in self.series}
        self.passed = {s: set() for s in self.series}
        self.t0 = self.clock()

    def prior(self, s: str) -> Spread | None:
        return series_prior(self.measured[s])

    def suspects(self, s: str) -> list[int]:
        """The series' points that break its trend in their own comparison (uncontrolled: where to look)."""
        return trend_breaks({s: self.measured[s]}, {s: self.prior(s)}, self.opts.min_effect, method=None)[s]

    def stop_reason(self) -> str | None:
        n = sum(len(v) + len(self.failed[s]) for s, v in self.measured.items())
        if self.opts.max_points is not None and n >= self.opts.max_points:
            return "max-points"
        if self.opts.time_budget_s is not None and self.clock() - self.t0 >= self.opts.time_budget_s:
            return "time-budget"
        return None

    def take(self, s: str, x: int, reason: str) -> None:
        self.choices.append(Choice(s, x, reason))
        r = self.measure(s, x)
        if r is None:
            self.failed[s].add(x)
        else:
            self.measured[s][x] = r

    def confirm(self, s: str, x: int) -> None:
        """More launches of a point that breaks the trend (each point confirmed once)."""
        if (s, x) in self.confirmations:
            return
        self.confirmations.append((s, x))
        for _ in range(self.opts.confirm_launches):
            r = self.measure(s, x)
            if r is not None:
                self.measured[s][x] = r

    def inner(self, s: str, a: int, b: int) -> bool:
        return any(a < x < b and x not in self.failed[s] for x in self.domain)

    def evidence(self, s: str, a: int, b: int, odd: set[int]) -> int:
        """How many passed chord tests span the interval (a, b) with both arms at least half its width
        (a test whose arm is short says little about a wide interval next to it); two settle it.
        Tests through a point that is now a suspect (``odd``) no longer count."""
        half = (b - a) / 2
        return sum(1 for p, q, r in self.passed[s]
                   if p <= a and b <= r and min(q - p, r - q) >= half and not odd & {p, q, r})

    def check_chords(self) -> None:
        """Record every triple of consecutive trend points (suspects left out) whose middle lies on
        the chord of its ends; a triple that passed once stays evidence for the span it covers."""
        for s, pts in self.measured.items():
            odd = set(self.suspects(s))
            seq = [x for x in sorted(pts) if x not in odd]
            prior = self.prior(s)
            for p, q, r in zip(seq, seq[1:], seq[2:], strict=False):
                if on_chord((p, pts[p]), (q, pts[q]), (r, pts[r]), self.opts.tolerance, prior):
                    self.passed[s].add((p, q, r))


def _neighbours(st: _State, s: str) -> list[tuple[float, str, int, str]]:
    """Points next to a suspect: the domain point next to it on the side the trend says is faster (which
    decides whether it is an anomaly; both sides on a flat series), then the other (where it ends)."""
    pts = st.measured[s]
    dom = [x for x in st.domain if x not in st.failed[s]]
    prior = st.prior(s)
    d = trend.direction({x: p.starts for x, p in pts.items()}, min_effect=st.opts.min_effect, prior=prior)
    out = []
    for x in sorted(set(st.suspects(s)) | set(above_trend(pts, prior, st.opts.min_effect))):
        i = dom.index(x)
        if i > 0 and dom[i - 1] not in pts:
            out.append((1.5 if d == RISES else 2.0, s, dom[i - 1],
                        f"next to {st.show(x)} (less offload), which breaks the trend"))
        if i + 1 < len(dom) and dom[i + 1] not in pts:
            out.append((1.5 if d == FALLS else 2.0, s, dom[i + 1],
                        f"next to {st.show(x)} (more offload), which breaks the trend"))
    return out


#: candidates at or above this priority (a crossing, a suspect's neighbours) are measured before any stop
_MUST = 1.5


def _bisections(st: _State, s: str) -> list[tuple[float, str, int, str]]:
    """Bisections of the series' intervals: where the winner changes (first), else where the judge says
    the ends differ and fewer than two chord tests explain the change."""
    pts = st.measured[s]
    dom = [x for x in st.domain if x not in st.failed[s]]
    prior, odd = st.prior(s), set(st.suspects(s))
    priors = {k: series_prior(v) for k, v in st.measured.items()}
    xs = sorted(pts)
    out = []
    for a, b in zip(xs, xs[1:], strict=False):
        m = split_point(dom, a, b, st.boundaries)
        if m is None:
            continue
        wa, wb = winner_at(st.measured, a, priors, st.opts.min_effect), winner_at(st.measured, b, priors,
                                                                                st.opts.min_effect)
        span = f"{st.show(a)}–{st.show(b)}"
        if wa and wb and "tie" not in (wa, wb) and wa != wb:
            out.append((3.0 + (b - a) / 1e3, s, m, f"bisect {span}: winner changes ({wa} → {wb})"))
        elif ends_differ(pts[a], pts[b], prior, st.opts.min_effect) and (ev := st.evidence(s, a, b, odd)) < 2:
            change = abs(pts[a].median - pts[b].median) / max(pts[a].median, pts[b].median, 1e-9)
            why = "off the trend of its neighbours" if ev == 0 else "on one chord, check again"
            out.append(((0.5 if ev else 1.0) * change, s, m, f"bisect {span}: {why}"))
    return out


def _candidates(st: _State) -> list[tuple[float, str, int, str]]:
    """What to measure next as (priority, series, x, reason), the highest priority first: the crossing
    of two series, the neighbours of suspects, then bisections of unsettled intervals."""
    out = []
    for s in st.measured:
        out += _neighbours(st, s) + _bisections(st, s)
    return sorted(out, key=lambda c: (-c[0], c[1], c[2]))


def _confirm_suspects(st: _State) -> None:
    for s in st.measured:
        for x in st.suspects(s):
            st.confirm(s, x)


def adaptive_sweep(series: Sequence[str], domain: Sequence[int], measure: Measure, *,
                   ctx: Mapping[str, Mapping[int, int | None]], native: int | None,
                   full_attention_layers: Sequence[int] = (), options: AdaptiveOptions | None = None,
                   clock: Callable[[], float] = time.monotonic, boundaries: Sequence[int] | None = None,
                   show: Callable[[int], int] = int) -> AdaptiveResult:
    """Choose, measure and refine points until the conclusions are stable or a budget is spent.

    ``ctx``: the fitted contexts known before measuring (every point's, or only those a bisection for
    the threshold fitted, :mod:`.threshold`). ``boundaries``: the x where a full-attention layer moves
    (default ``L + 1`` for each of ``full_attention_layers``, the ``-ncmoe`` axis); ``show`` writes an x
    as the user's option value in the reasons (e.g. ``-ngl``)."""
    opts = options or AdaptiveOptions()
    dom = sorted(set(domain))
    bounds = list(boundaries) if boundaries is not None else [layer + 1 for layer in full_attention_layers]
    st = _State(list(series), dom, measure, opts, clock, bounds, show=show)
    stopped = None
    for s in st.series:
        t = native_threshold({x: v for x, v in (ctx.get(s) or {}).items() if x in dom}, native)
        for x, why in coarse_grid(dom, t):
            if (stopped := st.stop_reason()) is not None:
                break
            st.take(s, x, why)
    last, unchanged = None, 0
    while stopped is None:
        _confirm_suspects(st)
        st.check_chords()
        key = conclude(st.measured, ctx, native, dom, opts.min_effect).to_dict()
        key.pop("suspects")       # not conclusions: they get their neighbours measured (priority >= _MUST)
        unchanged = unchanged + 1 if key == last else 0
        last = key
        cands = _candidates(st)
        if not cands:
            stopped = "stable"
            break
        if (opts.stable_after is not None and cands[0][0] < _MUST and
                unchanged >= opts.stable_after * len(st.series)):
            stopped = "conclusions stable"
            break
        if (stopped := st.stop_reason()) is not None:
            break
        _, s, x, reason = cands[0]
        st.take(s, x, reason)
    _confirm_suspects(st)
    interp = {s: {x: v.median for x in dom if x not in pts and (v := interpolate(pts, x)) is not None}
              for s, pts in st.measured.items()}
    return AdaptiveResult(dom, st.measured, interp, st.choices,
                          conclude(st.measured, ctx, native, dom, opts.min_effect), stopped, st.confirmations)
