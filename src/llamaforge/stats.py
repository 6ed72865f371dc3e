"""Honest statistics for benchmark samples.

Every summary states its statistic and its count: median with IQR and a bootstrap 95 % CI of the
median; the coefficient of variation flags unstable points. Comparisons use the Mann–Whitney U
test plus a minimum effect size (a significant 0.3 % change is "no significant change").
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np
from scipy import stats as sps

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


def closer_to(value_samples: Sequence[float], good: Sequence[float], bad: Sequence[float]) -> str:
    """Which endpoint distribution a probe matches: ``good`` or ``bad`` (by distance of medians,
    measured in units of the endpoints' pooled spread). Used by bisect."""
    v = float(np.median(value_samples))
    g, b = float(np.median(good)), float(np.median(bad))
    return "good" if abs(v - g) <= abs(v - b) else "bad"
