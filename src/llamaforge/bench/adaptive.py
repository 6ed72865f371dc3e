"""Adaptive offload sweep: the exhaustive sweep's conclusions from a fraction of its points.

A pure algorithm, independent of how a point is measured: :func:`adaptive_sweep` calls
``measure(series, x)`` (``series`` a backend or build, ``x`` the offload step: an ``-ncmoe`` value, or
``n_layers + 1 - ngl`` for a layer sweep, so that a larger x always means more offload) and gets a
:class:`PointSummary` (median tg with its 95 % CI and its count), or ``None`` for a failed point.
Calling it again for the same point means "one more launch" (an anomaly's confirmation) and
returns the summary over all launches so far. The real sweep (``bench --ncmoe auto``) measures
through the runner; ``benchmarks/adaptive_replay.py`` reads stored samples instead.

What a user wants from a sweep are :class:`Conclusions`: where the native context is first
reached (the *threshold*, fixed exactly beforehand by a bisection over fits, :mod:`.threshold`),
the fastest setting at native context per series (the *sweet spot*), which series wins in each
region, and the points that break the trend (*anomalies*: faster beyond both CIs than the neighbour
that the series' own direction says should be faster, :func:`trend_direction`).

1. **Coarse grid** per series: both ends of the domain, the threshold and its neighbours.
2. **Refinement.** Between consecutive measured points the prior is a smooth, monotone tg. Which
   way it goes is the series' own (:func:`trend_direction`, from its two measured ends): it falls with
   offload where the offload target (the host) is slower than the device, as on a GPU, and rises where
   the "device" is the slower one (e.g. Vulkan on lavapipe); where the ends do not differ the series
   is flat and only a spike (faster than both neighbours) breaks it. An interval is *settled* when the two ends' CIs overlap (nothing to explain), when a
   bisection showed its midpoint on the chord (within the CIs plus ``tolerance``), or when no
   domain point lies inside. Otherwise it is bisected, the widest unexplained change first; the split
   prefers a full-attention boundary (``ncmoe = L + 1``, or ``x = L + 2`` on the ngl axis, for a
   full-attention layer ``L``) near the
   middle, where the layer structure may break the trend. Intervals where the winning series flips are
   bisected first (to place the crossing); a point faster than its reference neighbour
   (:func:`reference_neighbours`) beyond the CIs gets ``confirm_launches`` more launches before it is
   reported as an anomaly.
3. **Stop** when every interval is settled (``stopped = "stable"``), at ``max_points`` measured
   points (all series together; confirmations do not count) or at ``time_budget_s``.

Unmeasured domain points get linearly interpolated values (:attr:`AdaptiveResult.interpolated`),
which are never used as measurements: conclusions rest on measured points, except the winner of a
region, which compares interpolated curves where a series has no measurement.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from scipy.stats import t as student_t

#: how much faster (relative) a point must be than its reference neighbour to be an anomaly
MIN_EFFECT = 0.05

#: the direction of a series' tg with offload (:func:`trend_direction`)
FALLS, FLAT, RISES = -1, 0, 1


@dataclass(frozen=True)
class PointSummary:
    """Median tg of a point with its 95 % CI and its count (launches, or requests)."""

    median: float
    ci_low: float
    ci_high: float
    n: int = 1
    launches: tuple[float, ...] = ()   # the median of each launch (server start), when known
    n_ctx: int | None = None           # the context llama-server fitted there, when known

    @property
    def half(self) -> float:
        return (self.ci_high - self.ci_low) / 2

    def overlaps(self, other: PointSummary) -> bool:
        return self.ci_low <= other.ci_high and other.ci_low <= self.ci_high

    def to_dict(self) -> dict:
        return {"median": self.median, "ci_low": self.ci_low, "ci_high": self.ci_high, "n": self.n}


Measure = Callable[[str, int], "PointSummary | None"]


@dataclass
class AdaptiveOptions:
    max_points: int | None = None      # measured points, all series together
    time_budget_s: float | None = None
    tolerance: float = 0.05            # relative slack of the chord test
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
    anomalies: dict[str, list[int]]           # suspects beyond the between-launch noise (:func:`established`)
    suspects: dict[str, list[int]] = field(default_factory=dict)  # beyond the CIs, not beyond launch noise

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
    interpolated: dict[str, dict[int, float]]   # medians of unmeasured points, never measurements
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


def is_anomaly(lower: PointSummary, upper: PointSummary, min_effect: float = MIN_EFFECT) -> bool:
    """``upper`` faster than ``lower`` beyond both CIs and by ``min_effect`` (the names are the
    falling series' case: ``upper`` has more offload)."""
    return upper.ci_low > lower.ci_high and upper.median >= lower.median * (1 + min_effect)


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


def interpolate(points: Mapping[int, PointSummary], x: int) -> PointSummary | None:
    """Median and CI at ``x`` from its measured neighbours, linear in time per token (n = 0)."""
    if x in points:
        return points[x]
    lo = max((k for k in points if k < x), default=None)
    hi = min((k for k in points if k > x), default=None)
    if lo is None or hi is None:
        return None
    f = (x - lo) / (hi - lo)
    a, b = points[lo], points[hi]
    return PointSummary(_harmonic(a.median, b.median, f), _harmonic(a.ci_low, b.ci_low, f),
                        _harmonic(a.ci_high, b.ci_high, f), 0)


def on_chord(a: tuple[int, PointSummary], m: tuple[int, PointSummary], b: tuple[int, PointSummary],
             tolerance: float, noise: LaunchNoise | None = None) -> bool:
    """Whether the midpoint's median lies on the chord of its ends within the CIs plus ``tolerance``,
    and, where the between-launch noise is known, within what it allows (two-sided 95 %, log tg)."""
    chord = interpolate({a[0]: a[1], b[0]: b[1]}, m[0])
    assert chord is not None
    slack = m[1].half + chord.half + tolerance * abs(chord.median)
    if noise is not None:
        n_m = max(len(m[1].launches), 1)
        n_c = max(min(len(a[1].launches), len(b[1].launches)), 1)
        z = float(student_t.ppf(0.975, noise.df)) * noise.sd * math.sqrt(1 / n_m + 1 / n_c)
        slack = max(slack, abs(chord.median) * (math.exp(z) - 1))
    return abs(m[1].median - chord.median) <= slack


# ---------------------------------------------------------------------------------- conclusions


def winner_at(measured: Mapping[str, Mapping[int, PointSummary]], x: int) -> str | None:
    """The series fastest at ``x`` beyond every other's CI, ``"tie"`` where CIs overlap, ``None``
    where a series has neither a measurement nor an interpolation at ``x`` (or there is one series)."""
    if len(measured) < 2:
        return None
    vals = {s: interpolate(pts, x) for s, pts in measured.items()}
    if any(v is None for v in vals.values()):
        return None
    best = max(vals, key=lambda s: vals[s].median)  # type: ignore[union-attr]
    others = [v for s, v in vals.items() if s != best]
    return best if all(vals[best].ci_low > o.ci_high for o in others) else "tie"  # type: ignore[union-attr]


def winner_regions(measured: Mapping[str, Mapping[int, PointSummary]],
                   domain: Sequence[int]) -> list[tuple[int, int, str]]:
    """``(first x, last x, winner)`` runs over the domain (see :func:`winner_at`)."""
    out: list[tuple[int, int, str]] = []
    for x in sorted(domain):
        w = winner_at(measured, x)
        if w is None:
            continue
        if out and out[-1][2] == w:
            out[-1] = (out[-1][0], x, w)
        else:
            out.append((x, x, w))
    return out


def trend_direction(points: Mapping[int, PointSummary], min_effect: float = MIN_EFFECT) -> int:
    """Which way the series' tg goes with offload: :data:`RISES`, :data:`FALLS` or :data:`FLAT`, from its
    two measured ends (the least and the most offload, both in every coarse grid).

    Physics: for one backend tg is (piecewise) monotone in the offload, but the sign depends on whether
    the offload target (the host) is faster or slower than the device. The ends are the widest span
    there is, so the direction is the one of the whole curve; it counts only where one end beats the
    other as an anomaly must beat its neighbour (beyond both CIs and by ``min_effect``) and, where the
    series' between-launch noise is known (:func:`launch_noise`), beyond that too (:func:`established`).
    Otherwise the series is flat: a tie never picks a side, so noise cannot flip it."""
    xs = sorted(points)
    if len(xs) < 2:
        return FLAT
    first, last = points[xs[0]], points[xs[-1]]
    noise = launch_noise(points)
    for slow, fast, sign in ((first, last, RISES), (last, first, FALLS)):
        if is_anomaly(slow, fast, min_effect) and (noise is None or established(slow, fast, noise)):
            return sign
    return FLAT


def reference_neighbours(xs: Sequence[int], x: int, direction: int) -> list[int]:
    """The measured neighbours of ``x`` (``xs`` sorted) that the trend says are at least as fast: the
    one with less offload on a falling series, the one with more on a rising series, both on a flat one
    (``[]`` where one of them is missing: an end of a flat series breaks no trend)."""
    i = xs.index(x)
    lower = [xs[i - 1]] if i > 0 else []
    upper = [xs[i + 1]] if i + 1 < len(xs) else []
    if direction == FALLS:
        return lower
    if direction == RISES:
        return upper
    return lower + upper if lower and upper else []


def find_anomalies(points: Mapping[int, PointSummary], min_effect: float = MIN_EFFECT,
                   direction: int | None = None) -> list[int]:
    """Measured x faster beyond both CIs (:func:`is_anomaly`) than each of its reference neighbours
    (:func:`reference_neighbours`, in the series' own ``direction``, default :func:`trend_direction`):
    suspects."""
    d = trend_direction(points, min_effect) if direction is None else direction
    xs = sorted(points)
    out = []
    for x in xs:
        ref = reference_neighbours(xs, x, d)
        if ref and all(is_anomaly(points[r], points[x], min_effect) for r in ref):
            out.append(x)
    return out


@dataclass(frozen=True)
class LaunchNoise:
    """Between-launch spread of one series: the pooled SD of log(launch median) inside points, and its
    degrees of freedom (sum over points of launches - 1)."""

    sd: float
    df: int


def launch_noise(points: Mapping[int, PointSummary]) -> LaunchNoise | None:
    """Pooled within-point SD of the log launch medians (``None``: no point has two launches).

    A request CI comes from one server process; the tg of a second start of the same point can differ
    far more (a hybrid backend's tg is bimodal between starts), so a difference between two points is
    only a fact when it exceeds this spread too."""
    ss, df = 0.0, 0
    for p in points.values():
        logs = [math.log(v) for v in p.launches if v > 0]
        if len(logs) >= 2:
            mean = sum(logs) / len(logs)
            ss += sum((v - mean) ** 2 for v in logs)
            df += len(logs) - 1
    return LaunchNoise(math.sqrt(ss / df), df) if df else None


def established(lower: PointSummary, upper: PointSummary, noise: LaunchNoise | None,
                confidence: float = 0.95) -> bool:
    """Whether ``upper`` is faster than ``lower`` beyond the between-launch noise: a one-sided t test on
    log tg with the pooled launch SD (``False`` when the noise is unknown: not established)."""
    if noise is None or lower.median <= 0 or upper.median <= 0:
        return False
    n_lo, n_up = max(len(lower.launches), 1), max(len(upper.launches), 1)
    se = noise.sd * math.sqrt(1 / n_lo + 1 / n_up)
    return math.log(upper.median / lower.median) > float(student_t.ppf(confidence, noise.df)) * se


def split_anomalies(points: Mapping[int, PointSummary],
                    min_effect: float = MIN_EFFECT) -> tuple[list[int], list[int]]:
    """(anomalies, suspects): suspects (:func:`find_anomalies`) that are / are not :func:`established`
    against each of their reference neighbours (:func:`reference_neighbours`)."""
    noise = launch_noise(points)
    xs = sorted(points)
    d = trend_direction(points, min_effect)
    sus = find_anomalies(points, min_effect, d)
    real = [x for x in sus if all(established(points[r], points[x], noise) for r in reference_neighbours(xs, x, d))]
    return real, [x for x in sus if x not in real]


def conclude(measured: Mapping[str, Mapping[int, PointSummary]], ctx: Mapping[str, Mapping[int, int | None]],
             native: int | None, domain: Sequence[int], min_effect: float = MIN_EFFECT) -> Conclusions:
    """The conclusions from measured points (an exhaustive sweep's too: pass all of its points).

    ``ctx`` may hold every point's fitted context or only some (the fits of the threshold's bisection,
    :mod:`.threshold`); a measured point's own context (``PointSummary.n_ctx``, the server's fit) joins
    it. Where a point's context is not known it reaches native from the threshold on: the fitted
    context is monotone in x (see :mod:`.threshold`)."""
    threshold: dict[str, int | None] = {}
    sweet: dict[str, int | None] = {}
    for s, pts in measured.items():
        c = {x: v for x, v in (ctx.get(s) or {}).items() if x in domain}
        c.update({x: p.n_ctx for x, p in pts.items() if p.n_ctx is not None})
        t = threshold[s] = native_threshold(c, native)
        at_native = [x for x in pts if t is not None and
                     ((c[x] or 0) >= (native or 0) if x in c else x >= t)]
        sweet[s] = max(at_native, key=lambda x: (pts[x].median, -x)) if at_native else None
    split = {s: split_anomalies(pts, min_effect) for s, pts in measured.items()}
    return Conclusions(threshold, sweet, winner_regions(measured, domain),
                       {s: v[0] for s, v in split.items()}, {s: v[1] for s, v in split.items()})


def threshold_heading(axis: str) -> str:
    """The heading of the threshold's column: the first ncmoe with native context, or the most layers
    (``-ngl``) with native context."""
    return "native context from ncmoe" if axis == "ncmoe" else f"native context up to {axis}"


def anomaly_text(conclusions: Mapping, series: str) -> str:
    """A recorded conclusion's anomalies of one series, then its suspects, as text for tables."""
    text = ", ".join(map(str, (conclusions.get("anomalies") or {}).get(series) or [])) or "none"
    sus = (conclusions.get("suspects") or {}).get(series) or []
    return text + (f" (suspects, not beyond the launch noise: {', '.join(map(str, sus))})" if sus else "")


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

    def evidence(self, s: str, a: int, b: int) -> int:
        """How many passed chord tests span the interval (a, b) with both arms at least half its width
        (a test whose arm is short says little about a wide interval next to it); two settle it.
        Tests through a point that is now an anomaly no longer count."""
        odd = set(find_anomalies(self.measured[s], self.opts.min_effect))
        half = (b - a) / 2
        return sum(1 for p, q, r in self.passed[s]
                   if p <= a and b <= r and min(q - p, r - q) >= half and not odd & {p, q, r})

    def check_chords(self) -> None:
        """Record every triple of consecutive trend points (anomalies left out) whose middle lies on
        the chord of its ends; a triple that passed once stays evidence for the span it covers."""
        for s, pts in self.measured.items():
            odd = set(find_anomalies(pts, self.opts.min_effect))
            seq = [x for x in sorted(pts) if x not in odd]
            noise = launch_noise(pts)
            for p, q, r in zip(seq, seq[1:], seq[2:], strict=False):
                if on_chord((p, pts[p]), (q, pts[q]), (r, pts[r]), self.opts.tolerance, noise):
                    self.passed[s].add((p, q, r))


def above_trend(points: Mapping[int, PointSummary], min_effect: float = MIN_EFFECT) -> list[int]:
    """Measured x above the chord of its measured neighbours beyond both CIs and by ``min_effect``:
    a suspected anomaly whose reference neighbour in the domain has not been measured yet."""
    xs = sorted(points)
    out = []
    for p, q, r in zip(xs, xs[1:], xs[2:], strict=False):
        chord = interpolate({p: points[p], r: points[r]}, q)
        if chord is not None and is_anomaly(chord, points[q], min_effect):
            out.append(q)
    return out


def _beyond_noise(points: Mapping[int, PointSummary], x: int, noise: LaunchNoise, direction: int) -> bool:
    """Whether ``x`` is above its reference neighbours (:func:`reference_neighbours`), or the chord of
    its measured neighbours, beyond the between-launch noise (:func:`established`)."""
    near = reference_neighbours(sorted(points), x, direction)
    if near and all(established(points[r], points[x], noise) for r in near):
        return True
    lo = max((k for k in points if k < x), default=None)
    chord = interpolate({k: v for k, v in points.items() if k != x}, x)
    return chord is not None and established(
        PointSummary(chord.median, chord.ci_low, chord.ci_high, 0, points[lo].launches if lo is not None else ()),
        points[x], noise)


def _neighbours(st: _State, s: str) -> list[tuple[float, str, int, str]]:
    """Points next to an anomaly or a suspect: the domain point next to it on the side the trend says
    is faster (which decides whether it is an anomaly; both sides on a flat series), then the other
    (where it ends)."""
    pts = st.measured[s]
    dom = [x for x in st.domain if x not in st.failed[s]]
    noise = launch_noise(pts)
    d = trend_direction(pts, st.opts.min_effect)
    out = []
    for x in sorted(set(find_anomalies(pts, st.opts.min_effect, d)) | set(above_trend(pts, st.opts.min_effect))):
        if noise is not None and not _beyond_noise(pts, x, noise, d):
            continue            # within what a second server start of one point differs by: not chased
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


def _candidates(st: _State) -> list[tuple[float, str, int, str]]:
    """What to measure next as (priority, series, x, reason), the highest priority first: the crossing
    of two series, the neighbours of anomalies, then bisections of unsettled intervals."""
    out = []
    for s, pts in st.measured.items():
        out += _neighbours(st, s)
        dom = [x for x in st.domain if x not in st.failed[s]]
        xs = sorted(pts)
        for a, b in zip(xs, xs[1:], strict=False):
            m = split_point(dom, a, b, st.boundaries)
            if m is None:
                continue
            wa, wb = winner_at(st.measured, a), winner_at(st.measured, b)
            span = f"{st.show(a)}–{st.show(b)}"
            if wa and wb and "tie" not in (wa, wb) and wa != wb:
                out.append((3.0 + (b - a) / 1e3, s, m, f"bisect {span}: winner changes ({wa} → {wb})"))
            elif not pts[a].overlaps(pts[b]) and (ev := st.evidence(s, a, b)) < 2:
                change = abs(pts[a].median - pts[b].median) / max(pts[a].median, pts[b].median, 1e-9)
                why = "off the trend of its neighbours" if ev == 0 else "on one chord, check again"
                out.append(((0.5 if ev else 1.0) * change, s, m, f"bisect {span}: {why}"))
    return sorted(out, key=lambda c: (-c[0], c[1], c[2]))


def _confirm_anomalies(st: _State) -> None:
    for s, pts in st.measured.items():
        for x in find_anomalies(pts, st.opts.min_effect):
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
        _confirm_anomalies(st)
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
    _confirm_anomalies(st)
    interp = {s: {x: v.median for x in dom if x not in pts and (v := interpolate(pts, x)) is not None}
              for s, pts in st.measured.items()}
    return AdaptiveResult(dom, st.measured, interp, st.choices,
                          conclude(st.measured, ctx, native, dom, opts.min_effect), stopped, st.confirmations)
