"""A series' steps: :mod:`llamaforge.judge.changepoints` on its measured commits, as :class:`~.model.Step`s."""

from __future__ import annotations

import dataclasses

from ..judge.changepoints import Boundary
from ..judge.changepoints import candidates as judge_candidates
from ..judge.changepoints import steps as judge_steps
from ..judge.family import holm_reject
from ..judge.verdict import ALPHA, DIFFERS
from .model import Level, Series, Step


def find_steps(series: Series, *, alpha: float = ALPHA) -> list[Step]:
    """The confirmed steps of ``series`` between measured commits (failed commits are left out; a step
    between two measured commits says the change lies after ``before`` and at or before ``after``)."""
    lv: list[Level] = series.measured()
    found = judge_steps([x.starts_of() for x in lv], min_effect=series.min_effect, alpha=alpha)
    return [_step(series, lv, b) for b in found]


def steps_and_candidates(series: Series, *, alpha: float = ALPHA) -> tuple[list[Step], list[Step]]:
    """:func:`find_steps` and the change points the segmentation proposes that these levels cannot confirm
    (:func:`llamaforge.judge.changepoints.candidates`, ``Step.candidate``): not steps, but what
    ``history.run --bisect`` re-measures (a fresh, interleaved confirmation of the two adjacent commits); one
    confirmed there becomes a step when the history is loaded (:func:`.load.attach_culprits`)."""
    lv: list[Level] = series.measured()
    starts = [x.starts_of() for x in lv]
    found = judge_steps(starts, min_effect=series.min_effect, alpha=alpha)
    cands = judge_candidates(starts, found, min_effect=series.min_effect, alpha=alpha)
    return ([_step(series, lv, b) for b in found],
            [dataclasses.replace(_step(series, lv, b), candidate=True) for b in cands])


def pair_candidates(series: Series, pairs: list[dict], steps: list[Step]) -> list[Step]:
    """Neighbours measured interleaved whose verdict was "differs" but whose p did not survive Holm over the run's
    pairs: candidates for a fresh re-measurement, as :func:`steps_and_candidates`' are."""
    have = {(st.before, st.after) for st in steps}
    out = []
    for c in pairs:
        before, after = series.level(c["before"]), series.level(c["after"])
        if before is None or after is None or c.get("verdict") != DIFFERS or (c["before"], c["after"]) in have:
            continue
        out.append(Step(before=c["before"], after=c["after"], ratio=c["ratio"], low=c["low"], high=c["high"],
                        p=float(c["p"]), p_adjusted=1.0, k_before=int(c["k_before"]), k_after=int(c["k_after"]),
                        segment_before=(c["before"], c["before"]), segment_after=(c["after"], c["after"]),
                        between=_between(series, before, after), candidate=True,
                        adjusted="neighbours measured interleaved; did not survive Holm: re-measure to decide"))
        have.add((c["before"], c["after"]))
    return sorted(out, key=lambda st: series.level(st.after).order)


def _step(series: Series, lv: list[Level], b: Boundary) -> Step:
    before, after = lv[b.index - 1], lv[b.index]
    j = b.judgement
    return Step(before=before.sha, after=after.sha, ratio=j.ratio, low=j.low, high=j.high, p=b.p,
                p_adjusted=b.p_adjusted, k_before=j.a.k, k_after=j.b.k,
                segment_before=(lv[b.segment_before[0]].sha, lv[b.segment_before[1]].sha),
                segment_after=(lv[b.segment_after[0]].sha, lv[b.segment_after[1]].sha),
                between=_between(series, before, after), adjusted=b.adjusted)


def _between(series: Series, before: Level, after: Level) -> int:
    """Commits between the two that the series did not measure (−1: unknown, e.g. between releases)."""
    if any(lv.label and lv.label != lv.short for lv in (before, after)):
        return -1                     # release pins: their order is the release order, not commit counts
    return max(after.order - before.order - 1, 0)


def pair_steps(series: Series, pairs: list[dict], *, alpha: float = ALPHA) -> list[Step]:
    """Steps from neighbours measured **interleaved** (``HistorySummary.pairs``: each commit's starts alternated
    with its predecessor's, so drift of the machine falls on both): a pair is a step when the judge said
    "differs" and its p survives Holm over the pairs of the run that measured it (a nightly's new pairs do not
    dilute last month's step). Immune to drift between commits, unlike levels measured back to back; the
    newest judgement of a pair wins."""
    by_pair = {(c["before"], c["after"]): c for c in pairs
               if series.level(c["before"]) is not None and series.level(c["after"]) is not None}
    by_run: dict[str, list[dict]] = {}
    for c in by_pair.values():
        by_run.setdefault(str(c.get("run") or ""), []).append(c)
    out = [st for rows in by_run.values() for st in _family_steps(series, rows, alpha)]
    return sorted(out, key=lambda st: series.level(st.after).order)


def _family_steps(series: Series, rows: list[dict], alpha: float) -> list[Step]:
    m = len(rows)
    ps = [float(c["p"]) for c in rows]
    kept = holm_reject(ps, alpha)
    order = sorted(range(m), key=lambda i: ps[i])
    p_adj = {i: min(1.0, max((m - r) * ps[order[r]] for r in range(order.index(i) + 1))) for i in range(m)}
    out = []
    for i, c in enumerate(rows):
        if not (kept[i] and c["verdict"] == DIFFERS):
            continue
        before, after = series.level(c["before"]), series.level(c["after"])
        out.append(Step(before=c["before"], after=c["after"], ratio=c["ratio"], low=c["low"], high=c["high"],
                        p=ps[i], p_adjusted=p_adj[i], k_before=int(c["k_before"]), k_after=int(c["k_after"]),
                        segment_before=(c["before"], c["before"]), segment_after=(c["after"], c["after"]),
                        between=_between(series, before, after),
                        adjusted=f"neighbours measured interleaved; Holm over the run's {m} pairs"))
    return out
