"""A series' steps: :mod:`llamaforge.judge.changepoints` on its measured commits, as :class:`~.model.Step`s."""

from __future__ import annotations

from ..judge.changepoints import steps as judge_steps
from ..judge.verdict import ALPHA
from .model import Level, Series, Step


def find_steps(series: Series, *, alpha: float = ALPHA) -> list[Step]:
    """The confirmed steps of ``series`` between measured commits (failed commits are left out; a step
    between two measured commits says the change lies after ``before`` and at or before ``after``)."""
    lv: list[Level] = series.measured()
    found = judge_steps([x.starts_of() for x in lv], min_effect=series.min_effect, alpha=alpha)
    out = []
    for b in found:
        before, after = lv[b.index - 1], lv[b.index]
        j = b.judgement
        out.append(Step(before=before.sha, after=after.sha, ratio=j.ratio, low=j.low, high=j.high, p=b.p,
                        p_adjusted=b.p_adjusted, k_before=j.a.k, k_after=j.b.k,
                        segment_before=(lv[b.segment_before[0]].sha, lv[b.segment_before[1]].sha),
                        segment_after=(lv[b.segment_after[0]].sha, lv[b.segment_after[1]].sha),
                        between=_between(series, before, after), adjusted=b.adjusted))
    return out


def _between(series: Series, before: Level, after: Level) -> int:
    """Commits between the two that the series did not measure (−1: unknown, e.g. between releases)."""
    if any(lv.label and lv.label != lv.short for lv in (before, after)):
        return -1                     # release pins: their order is the release order, not commit counts
    return max(after.order - before.order - 1, 0)
