"""Drift sentinels: did the machine change while the sweep ran?

A sweep re-measures each build's reference point (its first point) every N launches and at the
end (:mod:`llamaforge.bench.schedule`); those launches are stored as a separate point labelled
``sentinel``. They are *not* pooled into the reference point's statistics: the sentinel's job is to
test the reference's numbers against later measurements, and pooling would both hide the drift it
detects and weight one point with more launches than the others.

A sentinel launch *drifted* when its median lies outside the **prediction interval for one new start**
of the reference point (:func:`llamaforge.judge.next_start`: from the point's own starts, or with
fewer than 3 the build's measured spread or the judge's stated conservative bound) and differs from
the point's centre by at least :data:`DRIFT_MIN_EFFECT`. The yardstick is one new start because a
sentinel *is* one new start: judged against the interval of the point's centre (or the range of two
starts), a third start from the same distribution lands outside most of the time, and every point
would be "measured during drift". Each flag names the points whose launches ran between the build's
previous sentinel (or the start of the run) and this one: their numbers may carry the drift.

Everything here is a pure function of the stored points, so terminal and report agree.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field

from ..console import console, esc
from ..judge import Starts, next_start, pooled
from ..metrics import primary
from ..store import Point
from .labels import is_sentinel, regular_label

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
    ref_median: float            # the reference point's centre
    ref_ci: tuple[float, float]  # the prediction interval of one new start of the reference point
    between: tuple[tuple[str, int, int, int], ...] = field(default=())   # (build, ncmoe, ngl, launch) in between
    label: str = ""              # the series' label (a variant's name) when builds carry several series

    @property
    def change(self) -> float:
        return self.value / self.ref_median - 1 if self.ref_median else 0.0

    def describe(self) -> str:
        pts = sorted({(b, n, g) for b, n, g, _l in self.between})
        who = self.build_key + (f" ({self.label})" if self.label else "")
        return (f"drift: {who} ncmoe={self.ncmoe} {self.metric} sentinel {self.sentinel} = {self.value:.1f} t/s, "
                f"{self.change:+.1%} vs the point's {self.ref_median:.1f} (one new start expected in "
                f"[{self.ref_ci[0]:.1f}, {self.ref_ci[1]:.1f}]); "
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
    """Every sentinel launch whose median left the prediction interval of its reference point (module doc)."""
    sentinels = [p for p in points if is_sentinel(p.label)]
    regular = [p for p in points if not is_sentinel(p.label)]
    # (seq, build, ncmoe, ngl, launch) of every regular launch
    timeline = [(r.seq or 0, p.build_key, p.ncmoe, p.ngl, r.launch or 1)
                for p in regular for r in p.launches]
    flags: list[DriftFlag] = []
    for sp in sentinels:
        ref = next((p for p in regular if (p.build_key, p.engine, p.ncmoe, p.ngl, p.label) ==
                    (sp.build_key, sp.engine, sp.ncmoe, sp.ngl, regular_label(sp.label)) and p.status == "ok"), None)
        if ref is None:
            continue
        seq_of = {r.launch or 1: r.seq or 0 for r in sp.launches}
        for metric, fname in ((m.name, m.field) for m in primary()):
            prior = pooled([Starts.of(p.launch_groups(fname)) for p in regular
                            if (p.build_key, p.label) == (ref.build_key, ref.label) and p.status == "ok"])
            pi = next_start(Starts.of(ref.launch_groups(fname)), prior=prior)
            if pi is None:
                continue
            prev = 0
            for launch, vals in sorted(_launch_values(sp, fname).items()):
                seq = seq_of.get(launch, 0)
                value = statistics.median(vals)
                if not pi.contains(value) and abs(value / pi.centre - 1) >= min_effect:
                    between = tuple(sorted((b, n, g, lch) for q, b, n, g, lch in timeline if prev < q < seq))
                    flags.append(DriftFlag(sp.build_key, sp.ncmoe, sp.ngl, metric, launch, seq, value, pi.centre,
                                           (pi.low, pi.high), between, ref.label))
                prev = seq
    return sorted(flags, key=lambda f: (f.seq, f.metric))


def drifted_points(flags: Sequence[DriftFlag]) -> set[tuple[str, int, int]]:
    """(build, ncmoe, ngl) of every point with a launch inside a drift window."""
    return {(b, n, g) for f in flags for b, n, g, _l in f.between}


def print_drift(flags: Sequence[DriftFlag]) -> None:
    for f in flags:
        console.print(f"[yellow]⚠ {esc(f.describe())}[/]", soft_wrap=True, highlight=False)
