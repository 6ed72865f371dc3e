"""A point's measurements as server starts: the unit of replication.

Requests inside one server start share its memory placement, thread pinning, clocks and compiled
pipelines, so they are not independent samples of what a fresh start gives (on an H200, seven starts
of one Vulkan binary gave 101–163 t/s while requests inside each start agreed within ~5 %). Every
statistic of the judge is therefore computed from **start centres**: the median of the requests of
one start. Requests only tell how noisy one start is (``within``), which the bimodality rule uses.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np


@dataclass(frozen=True)
class Starts:
    """Per start, the request values (t/s) it gave; positive and finite values only."""

    groups: tuple[tuple[float, ...], ...]

    @classmethod
    def of(cls, groups: Sequence[Sequence[float | None]]) -> Starts:
        """From per-start lists of request values (``Point.launch_groups``); empty starts are dropped."""
        out = []
        for g in groups:
            xs = tuple(float(v) for v in g if v is not None and math.isfinite(float(v)) and float(v) > 0)
            if xs:
                out.append(xs)
        return cls(tuple(out))

    @classmethod
    def of_centres(cls, centres: Sequence[float | None]) -> Starts:
        """From one value per start (start medians stored elsewhere, e.g. the adaptive sweep's)."""
        return cls.of([[c] for c in centres])

    @property
    def k(self) -> int:
        """Number of starts (K)."""
        return len(self.groups)

    @property
    def n_requests(self) -> int:
        return sum(len(g) for g in self.groups)

    @property
    def shape(self) -> str:
        """``K×R`` (R requests per start), or ``K starts, N req`` when starts hold different counts."""
        if not self.k:
            return "0"
        sizes = {len(g) for g in self.groups}
        if len(sizes) == 1:
            return f"{self.k}×{sizes.pop()}"
        return f"{self.k} starts, {self.n_requests} req"

    @cached_property
    def centres(self) -> tuple[float, ...]:
        """The median of each start's requests, in start order."""
        return tuple(float(statistics.median(g)) for g in self.groups)

    @cached_property
    def log_centres(self) -> np.ndarray:
        return np.log(np.asarray(self.centres, dtype=float))

    @cached_property
    def within(self) -> float | None:
        """Pooled SD of log request values inside starts (``None`` with no start of ≥ 2 requests)."""
        ss, df = 0.0, 0
        for g in self.groups:
            if len(g) >= 2:
                lg = [math.log(v) for v in g]
                m = sum(lg) / len(lg)
                ss += sum((x - m) ** 2 for x in lg)
                df += len(g) - 1
        return math.sqrt(ss / df) if df else None

    def __bool__(self) -> bool:
        return self.k > 0
