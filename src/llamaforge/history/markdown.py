"""The history as one Markdown report (``report.md`` beside the site): what a reader of a committed
results folder sees without a browser — every series with every commit's level, its interval and K×R, the
steps with their status (located, refuted, open), the backend ratios and the re-measurement note."""

from __future__ import annotations

import time

from ..findings.prose import between_neighbours
from ..judge import judge
from ..judge.adjusted import controlled
from ..judge.wording import ratio_text
from ..mdtext import md_text
from .model import History, Series
from .show import step_line


def _series(s: Series) -> list[str]:
    k = s.key
    out = [f"### {md_text(k.metric)} · {md_text(k.backend)} · {md_text(k.point)}", "",
           f"{md_text(s.metric.label)} ({md_text(s.metric.unit)}, {'higher' if s.metric.higher_is_better else 'lower'} "
           f"is better); setup `{md_text(k.setup)}`; steps need ±{s.min_effect:.0%}.", "",
           "| commit | subject | level | interval | K×R | status |", "|---|---|---:|---|---|---|"]
    for lv in s.levels:
        est = lv.estimate() if lv.status == "ok" else None
        level = f"{est.centre:,.1f}" if est else "–"
        interval = f"{est.interval_text()} ({est.interval_label})" if est and est.kind != "single" else (
            "single start" if est else "–")
        status = lv.status + (f": {lv.note}" if lv.note else "")
        out.append(f"| {md_text(lv.label)} | {md_text(lv.subject[:70])} | {level} | {md_text(interval)} | "
                   f"{est.shape if est else '–'} | {md_text(status[:200])} |")
    out.append("")
    out += [f"- step ({st.status}): {md_text(step_line(s, st))}" for st in s.steps]
    out += [f"- {md_text(x)}" for x in neighbour_lines(s)]
    return [*out, ""]


def neighbour_lines(s: Series) -> list[str]:
    """Every pair of neighbouring measured commits with no step between them, worded by the judge's verdict on the
    two (Holm over the series' pairs, each interval the one its verdict used): ``lcpp-0.3.35 → lcpp-0.3.36: 0.94×
    [0.86, 1.02] (3 vs 5 starts; Holm, 4 comparisons), not proven either way: no step found, and one beyond ±5 % is
    not ruled out`` (:func:`llamaforge.findings.prose.between_neighbours`) — never a bare "no step"."""
    lv = s.measured()
    stepped = {(st.before, st.after) for st in s.steps}
    pairs = [(x, y) for x, y in zip(lv, lv[1:], strict=False) if (x.sha, y.sha) not in stepped]
    js = controlled([judge(x.starts_of(), y.starts_of(), min_effect=s.min_effect) for x, y in pairs])
    out = []
    for (x, y), j in zip(pairs, js, strict=True):
        if j is None:
            continue
        kind, lo, hi = j.interval()
        head = f"{x.label} → {y.label}: {ratio_text(j.ratio, lo, hi, interval=kind, num=y.label, den=x.label)}"
        how = f"; {j.adjusted}" if j.adjusted else ""
        out.append(f"{head} ({j.a.k} vs {j.b.k} starts{how}), {between_neighbours(j.verdict, s.min_effect)}")
    return out or ([] if s.steps else [f"no verdict: fewer than two measured commits ({len(lv)})"])


def render(h: History, title: str) -> str:
    lines = [f"# {md_text(title)}", "", f"Generated {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime(h.generated or time.time()))} "
             "by `llamaforge history.publish`. Levels are start-level centres (the median request of each server "
             "start, then their centre); intervals are the judge's (95 % CI from 3 starts, else the range, never "
             "called a CI).", ""]
    lines += [md_text(n) for n in h.notes] + ([""] if h.notes else [])
    by_group: dict[tuple[str, str], list[Series]] = {}
    for s in h.series:
        by_group.setdefault((s.key.machine, s.key.model), []).append(s)
    for (machine, model), group in by_group.items():
        lines += [f"## {md_text(model)} on {md_text(machine)}", ""]
        for s in group:
            lines += _series(s)
    if h.ratios:
        lines += ["## Backends side by side", ""] + [f"- {md_text(r.summary)}" for r in h.ratios] + [""]
    return "\n".join(lines)
