"""Honest statistics for benchmark samples.

Every summary states its statistic and its count: median with IQR and a bootstrap 95 % CI of the
median; the coefficient of variation flags unstable points. Comparisons use the Mann–Whitney U
test plus a minimum effect size (a significant 0.3 % change is "no significant change").

Requests are nested in server processes ("launches"): two requests to one server share its memory
placement, thread pinning and clocks, so they are not independent samples of what a fresh start
gives. :func:`cluster_summary` therefore bootstraps launches first and requests within them
(a two-stage cluster bootstrap) and splits the variance into within- and between-launch
components (one-way random-effects ANOVA); :func:`compare_clustered` tests two sides on their
launch medians, so ``n`` is the number of launches, not of requests.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np
from scipy import stats as sps

#: the fewest samples per side a Mann–Whitney test needs: with 3 vs 3 the smallest two-sided p is 0.1,
#: so p < 0.05 is out of reach (compare, bisect)
MIN_REPEATS = 4
UNSTABLE_CV = 0.10  # coefficient of variation above which a point is flagged unstable


@dataclass(frozen=True)
class Summary:
    n: int
    median: float
    q1: float
    q3: float
    ci_low: float
    ci_high: float
    mean: float
    sd: float
    cv: float
    min: float
    max: float

    @property
    def iqr(self) -> float:
        return self.q3 - self.q1

    @property
    def unstable(self) -> bool:
        return self.n >= 2 and self.cv > UNSTABLE_CV

    def to_dict(self) -> dict:
        d = asdict(self)
        d["iqr"] = self.iqr
        d["unstable"] = self.unstable
        return d

    def fmt(self, digits: int = 1) -> str:
        """``median ±IQR/2 (n=N)``; the statistic is always stated with its count."""
        if self.n == 0:
            return "–"
        s = f"{self.median:.{digits}f}"
        if self.n > 1:
            s += f" ±{self.iqr / 2:.{digits}f}"
        s += f" (n={self.n})"
        if self.unstable:
            s += " ⚠"
        return s


def summarize(values: Sequence[float], *, confidence: float = 0.95, seed: int = 0) -> Summary | None:
    """Median, quartiles, bootstrap CI of the median, mean, sd, CV. ``None`` for no values."""
    xs = np.asarray([v for v in values if v is not None and math.isfinite(v)], dtype=float)
    n = int(xs.size)
    if n == 0:
        return None
    med = float(np.median(xs))
    q1, q3 = (float(x) for x in np.percentile(xs, [25, 75]))
    mean = float(xs.mean())
    sd = float(xs.std(ddof=1)) if n > 1 else 0.0
    cv = sd / mean if mean else 0.0
    if n >= 3 and float(xs.max()) > float(xs.min()):
        res = sps.bootstrap((xs,), np.median, confidence_level=confidence, n_resamples=2000,
                            method="percentile", random_state=np.random.default_rng(seed))
        lo, hi = float(res.confidence_interval.low), float(res.confidence_interval.high)
    else:
        lo, hi = float(xs.min()), float(xs.max())
    return Summary(n, med, q1, q3, lo, hi, mean, sd, cv, float(xs.min()), float(xs.max()))


@dataclass(frozen=True)
class Comparison:
    """B relative to A (``ratio = median(B) / median(A)``), for a higher-is-better metric."""

    n_a: int
    n_b: int
    median_a: float
    median_b: float
    ratio: float
    ratio_ci_low: float
    ratio_ci_high: float
    p_value: float
    min_effect: float
    alpha: float

    @property
    def significant(self) -> bool:
        return self.p_value < self.alpha and abs(self.ratio - 1.0) >= self.min_effect

    @property
    def verdict(self) -> str:
        """asv-like mark: ``better`` / ``worse`` / ``same`` (no significant change)."""
        if not self.significant:
            return "same"
        return "better" if self.ratio > 1 else "worse"

    @property
    def mark(self) -> str:
        return {"better": "+", "worse": "-", "same": "~"}[self.verdict]

    def to_dict(self) -> dict:
        d = asdict(self)
        d.update(significant=self.significant, verdict=self.verdict, mark=self.mark)
        return d


def compare(a: Sequence[float], b: Sequence[float], *, min_effect: float = 0.05, alpha: float = 0.05,
            seed: int = 0) -> Comparison | None:
    """Mann–Whitney U (two-sided) plus a bootstrap CI of the ratio of medians."""
    xa = np.asarray([v for v in a if v is not None and math.isfinite(v)], dtype=float)
    xb = np.asarray([v for v in b if v is not None and math.isfinite(v)], dtype=float)
    if xa.size == 0 or xb.size == 0:
        return None
    ma, mb = float(np.median(xa)), float(np.median(xb))
    ratio = mb / ma if ma else math.inf
    if xa.size >= 2 and xb.size >= 2:
        p = float(sps.mannwhitneyu(xa, xb, alternative="two-sided").pvalue)
    else:
        p = 1.0
    rng = np.random.default_rng(seed)
    if xa.size >= 2 and xb.size >= 2 and ma:
        ra = rng.choice(xa, size=(2000, xa.size))
        rb = rng.choice(xb, size=(2000, xb.size))
        rs = np.median(rb, axis=1) / np.median(ra, axis=1)
        lo, hi = (float(x) for x in np.percentile(rs, [2.5, 97.5]))
    else:
        lo = hi = ratio
    return Comparison(int(xa.size), int(xb.size), ma, mb, ratio, lo, hi, p, min_effect, alpha)


# ------------------------------------------------------------------------- nested (clustered) samples


def _clean_groups(groups: Sequence[Sequence[float]]) -> list[np.ndarray]:
    out = []
    for g in groups:
        xs = np.asarray([v for v in g if v is not None and math.isfinite(v)], dtype=float)
        if xs.size:
            out.append(xs)
    return out


@dataclass(frozen=True)
class VarianceComponents:
    """One-way random-effects ANOVA estimates: ``within`` (between requests of one launch) and
    ``between`` (between launches, truncated at 0), as variances; ``icc`` = between / total."""

    within: float | None
    between: float | None

    @property
    def icc(self) -> float | None:
        if self.within is None or self.between is None or self.within + self.between <= 0:
            return None
        return self.between / (self.within + self.between)


def variance_components(groups: Sequence[Sequence[float]]) -> VarianceComponents:
    """ANOVA estimators (unbalanced: n0 = (N − Σnᵢ²/N)/(k − 1)). ``between`` needs ≥ 2 launches,
    ``within`` needs more requests than launches; ``None`` where the data cannot tell."""
    gs = _clean_groups(groups)
    k = len(gs)
    n = np.array([g.size for g in gs], dtype=float)
    big_n = float(n.sum())
    if k == 0:
        return VarianceComponents(None, None)
    means = np.array([g.mean() for g in gs])
    grand = float(np.concatenate(gs).mean())
    ssw = float(sum(((g - g.mean()) ** 2).sum() for g in gs))
    msw = ssw / (big_n - k) if big_n > k else None
    if k < 2:
        return VarianceComponents(msw, None)
    msb = float((n * (means - grand) ** 2).sum()) / (k - 1)
    n0 = (big_n - float((n ** 2).sum()) / big_n) / (k - 1)
    between = max(0.0, (msb - (msw or 0.0)) / n0) if n0 > 0 else None
    return VarianceComponents(msw, between)


@dataclass(frozen=True)
class ClusterSummary:
    """Median of all requests with a 95 % CI from a cluster bootstrap over launches.

    ``between_measured`` is False with one launch: the CI then only covers request-to-request
    spread inside one process, and every renderer must say so (nothing is widened silently)."""

    n_launches: int
    n_requests: int
    median: float
    ci_low: float
    ci_high: float
    launch_medians: tuple[float, ...]
    var_within: float | None
    var_between: float | None
    icc: float | None

    @property
    def between_measured(self) -> bool:
        return self.n_launches >= 2

    @property
    def ci_rel(self) -> float:
        """Half-width of the CI relative to the median."""
        return (self.ci_high - self.ci_low) / 2 / self.median if self.median else math.inf

    def to_dict(self) -> dict:
        d = asdict(self)
        d["launch_medians"] = list(self.launch_medians)
        d["between_measured"] = self.between_measured
        return d

    def fmt(self, digits: int = 1) -> str:
        """``median [lo, hi] (K×R)`` — K launches, R requests per launch (or N requests in all)."""
        return f"{self.median:.{digits}f} [{self.ci_low:.{digits}f}, {self.ci_high:.{digits}f}] ({self.shape})"

    @property
    def shape(self) -> str:
        per = self.n_requests / self.n_launches if self.n_launches else 0
        if per == int(per):
            return f"{self.n_launches}×{int(per)}"
        return f"{self.n_launches} launches, {self.n_requests} req"


def _cluster_resample(gs: list[np.ndarray], n_resamples: int, rng: np.random.Generator, *,
                      resample_launches: bool = True) -> np.ndarray:
    """Medians of ``n_resamples`` two-stage resamples: launches with replacement, then requests with
    replacement within each chosen launch (the pooled median of the result)."""
    k = len(gs)
    sizes = np.array([g.size for g in gs])
    width = int(sizes.max())
    mat = np.full((k, width), np.nan)
    for i, g in enumerate(gs):
        mat[i, :g.size] = g
    if resample_launches:
        chosen = rng.integers(0, k, size=(n_resamples, k))
    else:
        chosen = np.broadcast_to(np.arange(k), (n_resamples, k))
    u = rng.random((n_resamples, k, width))
    idx = np.floor(u * sizes[chosen][:, :, None]).astype(int)
    vals = mat[chosen[:, :, None], idx]
    vals = np.where(np.arange(width)[None, None, :] < sizes[chosen][:, :, None], vals, np.nan)
    return np.nanmedian(vals.reshape(n_resamples, -1), axis=1)


def cluster_summary(groups: Sequence[Sequence[float]], *, confidence: float = 0.95, seed: int = 0,
                    n_resamples: int = 2000) -> ClusterSummary | None:
    """Per-launch groups of request values → :class:`ClusterSummary` (``None`` without values)."""
    gs = _clean_groups(groups)
    if not gs:
        return None
    pooled = np.concatenate(gs)
    med = float(np.median(pooled))
    alpha = (1 - confidence) / 2
    if pooled.size >= 2 and float(pooled.max()) > float(pooled.min()):
        rng = np.random.default_rng(seed)
        meds = _cluster_resample(gs, n_resamples, rng, resample_launches=len(gs) >= 2)
        lo, hi = (float(x) for x in np.quantile(meds, [alpha, 1 - alpha]))
    else:
        lo = hi = med
    vc = variance_components(gs)
    return ClusterSummary(len(gs), int(pooled.size), med, min(lo, med), max(hi, med),
                          tuple(float(np.median(g)) for g in gs), vc.within, vc.between, vc.icc)


@dataclass(frozen=True)
class ClusteredComparison(Comparison):
    """:class:`Comparison` whose ``n_a``/``n_b`` count launches (the test's unit) and whose ratio CI
    comes from a cluster bootstrap; ``requests_a``/``requests_b`` count the requests inside them."""

    requests_a: int = 0
    requests_b: int = 0
    test: str = "Mann–Whitney U on launch medians"


def compare_clustered(a: Sequence[Sequence[float]], b: Sequence[Sequence[float]], *, min_effect: float = 0.05,
                      alpha: float = 0.05, seed: int = 0, n_resamples: int = 2000) -> ClusteredComparison | None:
    """B relative to A where each side is a list of launches (lists of request values).

    The test is Mann–Whitney U (two-sided) on the launch medians — requests of one process are not
    independent, so the launch is the unit and ``n`` counts launches (3 vs 3 launches can at best give
    p = 0.1). The ratio of pooled medians gets a cluster-bootstrap CI."""
    ga, gb = _clean_groups(a), _clean_groups(b)
    if not ga or not gb:
        return None
    ma, mb = float(np.median(np.concatenate(ga))), float(np.median(np.concatenate(gb)))
    ratio = mb / ma if ma else math.inf
    la, lb = [float(np.median(g)) for g in ga], [float(np.median(g)) for g in gb]
    p = float(sps.mannwhitneyu(la, lb, alternative="two-sided").pvalue) if len(la) >= 2 and len(lb) >= 2 else 1.0
    lo = hi = ratio
    if ma:
        rng = np.random.default_rng(seed)
        ra = _cluster_resample(ga, n_resamples, rng, resample_launches=len(ga) >= 2)
        rb = _cluster_resample(gb, n_resamples, rng, resample_launches=len(gb) >= 2)
        with np.errstate(divide="ignore", invalid="ignore"):
            rs = rb / ra
        lo, hi = (float(x) for x in np.percentile(rs[np.isfinite(rs)], [2.5, 97.5]))
    return ClusteredComparison(len(ga), len(gb), ma, mb, ratio, lo, hi, p, min_effect, alpha,
                               requests_a=sum(g.size for g in ga), requests_b=sum(g.size for g in gb))
