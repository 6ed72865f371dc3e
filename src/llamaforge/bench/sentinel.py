"""Drift sentinels: did the machine change while the sweep ran?

A sweep re-measures each build's reference point (its first point) every N launches and at the
end (:mod:`llamaforge.bench.schedule`); those launches are stored as a separate point labelled
``sentinel``. They are *not* pooled into the reference point's statistics: the sentinel's job is to
test the reference's numbers against later measurements, and pooling would both hide the drift it
detects and weight one point with more launches than the others.

A sentinel launch *drifted* when its median lies outside the reference point's 95 % cluster CI and
differs from the reference median by at least :data:`DRIFT_MIN_EFFECT` (so a very tight CI does not
flag sub-percent wobble). Each flag names the points whose launches ran between the build's previous
sentinel (or the start of the run) and this one: their numbers may carry the drift.

Everything here is a pure function of the stored points, so terminal and report agree.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field

from ..console import console, esc
from ..metrics import FIELDS
from ..stats import cluster_summary
from ..store import Point
from .schedule import SENTINEL_LABEL

DRIFT_MIN_EFFECT = 0.03


@dataclass(frozen=True)
class DriftFlag:
    build_key: str
    ncmoe: int
    ngl: int
    metric: str                  # pp | tg
    sentinel: int                # which sentinel launch (1..S)
    seq: int                     # its position in the run's schedule
    value: float                 # the sentinel launch's median
    ref_median: float
    ref_ci: tuple[float, float]
    between: tuple[tuple[str, int, int, int], ...] = field(default=())   # (build, ncmoe, ngl, launch) in between

    @property
    def change(self) -> float:
        return self.value / self.ref_median - 1 if self.ref_median else 0.0

    def describe(self) -> str:
        pts = sorted({(b, n, g) for b, n, g, _l in self.between})
        return (f"drift: {self.build_key} ncmoe={self.ncmoe} {self.metric} sentinel {self.sentinel} = {self.value:.1f} t/s, "
                f"{self.change:+.1%} vs the point's {self.ref_median:.1f} [{self.ref_ci[0]:.1f}, {self.ref_ci[1]:.1f}]; "
                f"{len(pts)} point(s) measured in between may carry it")

    def to_dict(self) -> dict:
        return {"build_key": self.build_key, "ncmoe": self.ncmoe, "ngl": self.ngl, "metric": self.metric,
                "sentinel": self.sentinel, "seq": self.seq, "value": self.value, "ref_median": self.ref_median,
                "ref_ci": list(self.ref_ci), "change": self.change,
                "between": [list(x) for x in self.between]}


def _launch_values(p: Point, metric: str) -> dict[int, list[float]]:
    out: dict[int, list[float]] = {}
    for s in p.samples:
        v = getattr(s, metric)
        if not s.warmup and v is not None:
            out.setdefault(s.launch, []).append(float(v))
    return out


def drift_flags(points: Sequence[Point], *, min_effect: float = DRIFT_MIN_EFFECT) -> list[DriftFlag]:
    """Every sentinel launch whose median left its reference point's CI (see the module doc)."""
    sentinels = [p for p in points if p.label == SENTINEL_LABEL]
    regular = [p for p in points if p.label != SENTINEL_LABEL]
    # (seq, build, ncmoe, ngl, launch) of every regular launch
    timeline = [(int(r.get("seq") or 0), p.build_key, p.ncmoe, p.ngl, int(r.get("launch") or 1))
                for p in regular for r in p.launches]
    flags: list[DriftFlag] = []
    for sp in sentinels:
        ref = next((p for p in regular if (p.build_key, p.engine, p.ncmoe, p.ngl) ==
                    (sp.build_key, sp.engine, sp.ncmoe, sp.ngl) and p.status == "ok"), None)
        if ref is None:
            continue
        seq_of = {int(r.get("launch") or 1): int(r.get("seq") or 0) for r in sp.launches}
        for metric, fname in FIELDS.items():
            cs = cluster_summary(ref.launch_groups(fname))
            if cs is None:
                continue
            prev = 0
            for launch, vals in sorted(_launch_values(sp, fname).items()):
                seq = seq_of.get(launch, 0)
                value = statistics.median(vals)
                outside = value < cs.ci_low or value > cs.ci_high
                if outside and cs.median and abs(value / cs.median - 1) >= min_effect:
                    between = tuple(sorted((b, n, g, lch) for q, b, n, g, lch in timeline if prev < q < seq))
                    flags.append(DriftFlag(sp.build_key, sp.ncmoe, sp.ngl, metric, launch, seq, value, cs.median,
                                           (cs.ci_low, cs.ci_high), between))
                prev = seq
    return sorted(flags, key=lambda f: (f.seq, f.metric))


def drifted_points(flags: Sequence[DriftFlag]) -> set[tuple[str, int, int]]:
    """(build, ncmoe, ngl) of every point with a launch inside a drift window."""
    return {(b, n, g) for f in flags for b, n, g, _l in f.between}


def print_drift(flags: Sequence[DriftFlag]) -> None:
    for f in flags:
        console.print(f"[yellow]⚠ {esc(f.describe())}[/]", soft_wrap=True, highlight=False)
