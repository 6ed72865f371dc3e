"""The search of a performance bisection, pure: no builds, no store.

:func:`search` — binary search over ``[good, c1, ..., bad]`` given two callables,
``build(sha)`` (raise :class:`~llamaforge.errors.BuildError` for a commit that does not build:
it is *skipped*, like ``git bisect``'s exit 125, and the nearest unskipped neighbour of the
midpoint is probed instead) and ``measure(sha, built) -> samples``. The endpoints are measured
first; when they do not differ significantly (Mann–Whitney U plus the minimum effect
``threshold``) it refuses, with the numbers. Each probe is called good or bad by which
endpoint it matches (:func:`classify`: best sample, log scale). A clean step (no skips)
measures at most ⌈log2 N⌉ + 2 commits (N = commits after good).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from ..console import notice
from ..errors import BuildError, LlamaforgeError
from ..metrics import FIELDS
from ..stats import compare, summarize


class BisectError(LlamaforgeError):
    """A bisection that cannot start or cannot go on (endpoints equal, endpoint does not build, ...)."""


def check_metric(metric: str) -> str:
    """``tg`` / ``pp`` → the sample field; anything else is a clear error."""
    if metric not in FIELDS:
        raise BisectError(f"unknown metric {metric!r} (llamaforge measures tg and pp)",
                          "use --metric tg (generation t/s) or --metric pp (prompt processing t/s)")
    return FIELDS[metric]


def max_measured(n_after_good: int) -> int:
    """The most commits a clean bisection measures: ⌈log2 N⌉ + 2 (the endpoints)."""
    return (math.ceil(math.log2(n_after_good)) if n_after_good > 1 else 0) + 2


def classify(values: Sequence[float], good: Sequence[float], bad: Sequence[float]) -> str:
    """``good`` / ``bad``: which endpoint a probe's samples match.

    Compares the *best* sample (highest t/s) of each, on a log scale. Why not the median: other
    processes on the machine only ever slow a run down (on the shared 2-core box a good commit's
    median fell from 92 to 34 t/s under load and was called bad), so the fastest repetition is the
    most reproducible estimate of what the code can do (the ``timeit`` argument), while a real
    slowdown caps even the best repetition. The log scale makes 2× slower and 2× faster equally far.
    The endpoints themselves are still compared on all samples (Mann–Whitney + minimum effect).
    """
    v, g, b = max(values), max(good), max(bad)
    if min(v, g, b) <= 0:
        return "good" if abs(v - g) <= abs(v - b) else "bad"
    return "good" if abs(math.log(v / g)) <= abs(math.log(v / b)) else "bad"


@dataclass
class ProbeResult:
    """One build attempt (and, unless skipped, one measurement) of one commit."""

    seq: int
    index: int                  # position in [good, ..., bad]
    sha: str
    verdict: str                # endpoint-good | endpoint-bad | good | bad | skip
    values: list[float] = field(default_factory=list)
    build_s: float | None = None
    measure_s: float | None = None
    note: str = ""
    built: Any = None           # whatever build() returned (a Build) — not serialised

    @property
    def median(self) -> float | None:
        s = summarize(self.values)
        return s.median if s else None

    def to_dict(self) -> dict:
        d = asdict(self)
        d.pop("built", None)
        d["median"] = self.median
        return d


@dataclass
class SearchResult:
    commits: list[str]                       # [good, ..., bad]
    probes: list[ProbeResult]
    first_bad: str | None                    # None only when skips leave several candidates
    candidates: list[str]                    # [first_bad] or the commits skips could not separate
    endpoint_comparison: dict

    @property
    def builds(self) -> int:
        return len(self.probes)

    @property
    def measured(self) -> int:
        return sum(1 for p in self.probes if p.verdict != "skip")

    @property
    def skipped(self) -> list[str]:
        return [p.sha for p in self.probes if p.verdict == "skip"]


BuildFn = Callable[[str], Any]
MeasureFn = Callable[[str, Any], Sequence[float]]
ProbeHook = Callable[[ProbeResult], None]


def _pick(lo: int, hi: int, skipped: set[int]) -> int | None:
    """The untested index nearest the midpoint of (lo, hi), lower one first on ties."""
    mid = (lo + hi) // 2
    cands = [i for i in range(lo + 1, hi) if i not in skipped]
    return min(cands, key=lambda i: (abs(i - mid), i)) if cands else None


def search(commits: Sequence[str], build: BuildFn, measure: MeasureFn, *, threshold: float = 0.05,
           metric: str = "tg", on_probe: ProbeHook | None = None) -> SearchResult:
    """Binary search for the first commit of ``commits[1:]`` whose metric matches ``commits[-1]``'s.

    ``commits`` is ``[good, ..., bad]`` (oldest first). Raises :class:`BisectError` when an
    endpoint does not build or is not measured, or when the endpoints do not differ."""
    if len(commits) < 2:
        raise BisectError("the range has no commits after the good one", "give a bad commit that descends from the good one")
    on_probe = on_probe or (lambda _p: None)
    probes: list[ProbeResult] = []

    def attempt(i: int, endpoint: str | None) -> ProbeResult:
        """Build and measure commit ``i``; the probe is recorded (and reported) before returning."""
        sha = commits[i]
        p = ProbeResult(seq=len(probes), index=i, sha=sha, verdict=endpoint and f"endpoint-{endpoint}" or "skip")
        probes.append(p)
        t0 = time.monotonic()
        try:
            p.built = build(sha)
        except BuildError as e:
            p.build_s = time.monotonic() - t0
            p.verdict = "skip"
            p.note = f"does not build: {e.first_error or e.message}"
            on_probe(p)
            if endpoint:
                raise BisectError(f"the {endpoint} endpoint {sha[:12]} does not build ({p.note})",
                                  f"pick a {endpoint} commit that builds (see {e.log_path or 'the build log'})") from e
            notice(f"skipping {sha[:12]} ({p.note}), as git bisect does with exit code 125")
            return p
        p.build_s = time.monotonic() - t0
        t1 = time.monotonic()
        p.values = [float(v) for v in measure(sha, p.built)]
        p.measure_s = time.monotonic() - t1
        if not p.values:
            p.verdict = "skip"
            p.note = f"measurement gave no {metric} samples"
            on_probe(p)
            if endpoint:
                raise BisectError(f"the {endpoint} endpoint {sha[:12]} gave no {metric} samples",
                                  "check the model and the build (try `llamaforge verify`)")
            return p
        if not endpoint:
            p.verdict = classify(p.values, good.values, bad.values)
        on_probe(p)
        return p

    good = attempt(0, "good")
    bad = attempt(len(commits) - 1, "bad")
    cmp = compare(good.values, bad.values, min_effect=threshold)
    assert cmp is not None
    if not cmp.significant:
        sg, sb = summarize(good.values), summarize(bad.values)
        raise BisectError(
            f"the endpoints do not differ significantly in {metric}: good {commits[0][:9]} {sg.fmt() if sg else '–'} "
            f"vs bad {commits[-1][:9]} {sb.fmt() if sb else '–'} t/s (ratio {cmp.ratio:.3f}, p = {cmp.p_value:.3g}, "
            f"minimum effect {threshold:.0%})",
            "check the endpoints, lower --threshold, or raise --repeats to see a smaller change")

    lo, hi = 0, len(commits) - 1
    skipped: set[int] = set()
    while hi - lo > 1:
        i = _pick(lo, hi, skipped)
        if i is None:
            break
        p = attempt(i, None)
        if p.verdict == "skip":
            skipped.add(i)
        elif p.verdict == "good":
            lo = i
        else:
            hi = i
    if hi - lo > 1:   # only skipped commits left between: git bisect's "could be any of"
        cands = list(commits[lo + 1: hi + 1])
        return SearchResult(list(commits), probes, None, cands, cmp.to_dict())
    return SearchResult(list(commits), probes, commits[hi], [commits[hi]], cmp.to_dict())
