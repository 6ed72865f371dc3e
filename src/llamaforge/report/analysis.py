"""Sweet spots, anomalies and the roofline: pure functions of :class:`~.data.Row` lists.

* :func:`first_native` — the smallest offload (lowest ``ncmoe``; on an ngl axis the most layers on
  the device) whose fitted context reaches the model's native context.
* :func:`pareto_front` — points not beaten on both context and speed by another point.
* :func:`anomalies` — points that break their series' trend: significantly faster than the neighbour
  the trend says should be at least as fast, like the seed's Vulkan N=12 beating N=11. The trend's
  direction is each series' own, from its two ends (:func:`direction`; one rule with the adaptive
  sweep, :mod:`llamaforge.judge.trend`, judged on server starts with Benjamini–Hochberg over the comparisons): speed
  usually falls as layers move to the host, but rises where the device is slower than the host (a
  software "GPU"). Each anomaly names the full-attention layers whose experts moved between the two
  points (the seed's user wondered whether Vulkan's spikes line up with them).
* :func:`roofline` — achieved memory bandwidth of token generation against the device's.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ..judge import DIFFERS, Judgement, Spread, control, judge, trend
from ..records import ModelFacts
from .data import Row


def first_native(rows: Sequence[Row], native: int | None) -> Row | None:
    """The ok row with the lowest ncmoe whose context reaches ``native`` (``None`` if none does)."""
    if not native:
        return None
    hits = [r for r in rows if r.ok and r.n_ctx is not None and r.n_ctx >= native]
    return min(hits, key=lambda r: (r.offload, r.other)) if hits else None


def best_at_native(rows: Sequence[Row], native: int | None, metric: str = "tg") -> Row | None:
    """The ok row at native context with the highest median ``metric``."""
    if not native:
        return None
    hits = [r for r in rows if r.ok and r.n_ctx is not None and r.n_ctx >= native and r.median(metric) is not None]
    return max(hits, key=lambda r: (r.median(metric), -r.offload)) if hits else None


@dataclass(frozen=True)
class Best:
    """The fastest point at native context as the judge sees it: ``best`` (the highest centre) and ``ties``,
    the other native points whose verdict against it is not "differs" (same, or inconclusive) after Holm's
    method over those comparisons. One best point is named only when ``ties`` is empty."""

    best: Row
    ties: tuple[tuple[Row, Judgement], ...]      # (row, best over row), in order of offload
    min_effect: float
    others: tuple[Row, ...] = ()                 # every other native point it was judged against
    metric: str = "tg"

    @property
    def single(self) -> bool:
        return not self.ties

    @property
    def runner_up(self) -> Row | None:
        """The native point with the next highest centre (``None``: the best is the only native point)."""
        return max(self.others, key=lambda r: (r.median(self.metric) or 0.0, -r.offload), default=None)


def judged_best(rows: Sequence[Row], native: int | None, prior: Spread | None, min_effect: float,
                metric: str = "tg") -> Best | None:
    """:func:`best_at_native`, judged: the best point against every other native point on server starts
    (:func:`llamaforge.judge.judge`, the series' ``prior`` below 3 starts), Holm over the comparisons."""
    best = best_at_native(rows, native, metric)
    if best is None or not native:
        return None
    others = sorted((r for r in rows if r is not best and r.ok and r.n_ctx is not None and r.n_ctx >= native
                     and r.median(metric) is not None), key=lambda r: (r.offload, r.other))
    js = control([judge(r.starts(metric), best.starts(metric), min_effect=min_effect, prior_a=prior, prior_b=prior)
                  for r in others])
    ties = tuple((r, j) for r, j in zip(others, js, strict=True) if j is not None and j.verdict != DIFFERS)
    return Best(best, ties, min_effect, tuple(others), metric)


def pareto_front(rows: Sequence[Row], metric: str = "tg") -> list[Row]:
    """Ok rows on the (context, median ``metric``) Pareto front, both maximised; sorted by context.

    A row is dropped when another row has at least its context and its speed and more of one.
    Ties (same context and speed) keep the lower ncmoe.
    """
    cands = [r for r in rows if r.ok and r.n_ctx is not None and r.median(metric) is not None]
    front = []
    for r in cands:
        rc, rm = r.n_ctx, r.median(metric)
        dominated = False
        for o in cands:
            if o is r:
                continue
            oc, om = o.n_ctx, o.median(metric)
            if oc >= rc and om >= rm and (oc > rc or om > rm):  # type: ignore[operator]
                dominated = True
                break
            if oc == rc and om == rm and o.offload < r.offload:
                dominated = True
                break
        if not dominated:
            front.append(r)
    return sorted(front, key=lambda r: (r.n_ctx, r.offload))


@dataclass(frozen=True)
class Anomaly:
    """``row`` beats ``neighbour``, the adjacent point its series' trend says should be at least as fast."""

    row: Row
    neighbour: Row
    metric: str
    judgement: Judgement                # the row over the neighbour (start level, family-controlled)
    full_attn_moved: tuple[int, ...]   # full-attention layers whose experts moved to the CPU in between

    @property
    def gain(self) -> float:
        return self.judgement.ratio - 1.0


def moved_layers(lo: int, hi: int) -> range:
    """0-based layers whose MoE experts are on the CPU at ``-ncmoe hi`` but not at ``-ncmoe lo``."""
    return range(lo, hi)


def direction(rows: Sequence[Row], metric: str, min_effect: float = trend.MIN_EFFECT) -> int:
    """``RISES`` / ``FALLS`` / ``FLAT`` (1 / -1 / 0): how ``metric`` goes with offload over ``rows``, from the
    two ends, judged by their starts (:func:`llamaforge.judge.trend.direction`)."""
    return trend.direction({r.offload: r.starts(metric) for r in rows}, min_effect=min_effect)


def anomalies(rows: Sequence[Row], *, min_effect: float = trend.MIN_EFFECT, full_attn_layers: Sequence[int] = (),
              metrics: Sequence[str] = ("tg", "pp"), priors: Mapping[tuple[str, str], Spread | None] | None = None
              ) -> list[Anomaly]:
    """Rows that break their series' trend (same series, same other option): :func:`llamaforge.judge.trend.breaks`,
    the adaptive sweep's rule — faster than the adjacent ok row the series' own direction says should be at
    least as fast, judged on server starts, with Benjamini–Hochberg over every comparison made. ``priors``:
    per (series, metric), the spread a point with fewer than 3 starts is judged with."""
    fal = set(full_attn_layers)
    by_series: dict[tuple[str, int], dict[int, Row]] = {}
    for r in rows:
        if r.ok:
            by_series.setdefault((r.series, r.other), {})[r.offload] = r
    inputs = []
    for (name, other), group in by_series.items():
        for metric in metrics:
            pts = {x: r.starts(metric) for x, r in group.items() if r.starts(metric)}
            prior = (priors or {}).get((name, metric))
            inputs.append(trend.SeriesInput(f"{name}\0{other}", metric, pts, prior))
    out: list[Anomaly] = []
    for b in trend.breaks(inputs, min_effect=min_effect):
        name, _, other = b.series.partition("\0")
        group = by_series[(name, int(other))]
        cur, nb = group[b.x], group[b.neighbour]
        lo, hi = sorted((nb.ncmoe, cur.ncmoe))
        moved = tuple(layer for layer in moved_layers(lo, hi) if layer in fal) if cur.axis == "ncmoe" else ()
        out.append(Anomaly(cur, nb, b.metric, b.judgement, moved))
    return sorted(out, key=lambda a: (a.row.series, a.metric, a.row.offload))


@dataclass(frozen=True)
class RooflinePoint:
    row: Row
    context_used: float
    bytes_per_token: float
    achieved_gbs: float                 # bytes/token × median tg
    device_gbs: float | None            # None: the device's bandwidth is unknown

    @property
    def fraction(self) -> float | None:
        return None if not self.device_gbs else self.achieved_gbs / self.device_gbs


def bench_context(test: str) -> float | None:
    """Mean KV length of a llama-bench tg test name (``tg128``, ``tg128 @ d4096``); None if unparsable."""
    m = re.match(r"\s*tg(\d+)", test)
    if not m:
        return None
    d = re.search(r"d(\d+)", test[m.end():])
    return (int(d.group(1)) if d else 0) + int(m.group(1)) / 2


def roofline(row: Row, facts: ModelFacts, device_gbs: float | None, *, prompt_tokens: int | None = None,
             n_predict: int | None = None) -> RooflinePoint | None:
    """Achieved bandwidth of one point (``None`` if it has no tg or the facts lack the byte counts).

    Context used ≈ prompt tokens + n_predict / 2 (the mean KV length while generating); the row's
    own values win over the plan's (``prompt_tokens`` / ``n_predict`` arguments). For llama-bench
    points it is the tg test's depth + n_gen / 2 (``tg128`` → 64, ``tg128 @ d4096`` → 4160).
    """
    tg = row.median("tg")
    if not row.ok or tg is None:
        return None
    bench = bench_context(row.tg_test) if row.tg_test else None
    if bench is not None:  # llama-bench's tg test runs on its own: depth + n_gen/2
        ctx_used = bench
    else:
        pt = row.prompt_tokens if row.prompt_tokens is not None else prompt_tokens
        npred = row.n_predict if row.n_predict is not None else n_predict
        ctx_used = float(pt or 0) + float(npred or 0) / 2
    b = facts.bytes_per_token(ctx_used)
    if b is None:
        return None
    return RooflinePoint(row, ctx_used, b, b * tg / 1e9, device_gbs)
