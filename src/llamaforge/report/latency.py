"""The Latency section: every request metric of the registry beyond pp and tg (time to first token, its p95,
inter-token latency, end-to-end latency) per point, with its interval and K×R.

The registry (:mod:`llamaforge.metrics`) says which metrics there are and how one start's requests become
the judge's values (a median keeps every request, a percentile gives one value per start and needs enough
requests in that start). A percentile a start cannot support is never shown: the cell says how many
requests it would need. A run that measured none of these metrics has no section, so reports of older runs
read as before.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .. import metrics as registry
from .data import ReportData, Row
from .sections import Section, Table


def latency_metrics(data: ReportData) -> list[registry.Metric]:
    """The latency metrics this run measured (a value, or a shortfall to state), in registry order."""
    rows = [r for r in data.all_rows if r.ok]
    return [m for m in registry.request_metrics() if not m.primary
            and any(r.starts(m.name).k or r.shortfall(m.name) for r in rows)]


def _requests(r: Row, m: registry.Metric) -> str:
    """K×R of the requests behind a cell (for a percentile, its starts hold one value each: the requests are
    read from the point)."""
    if r.point is None:
        return r.starts(m.name).shape
    raw = [g for g in r.point.launch_groups(m.field) if g]
    sizes = {len(g) for g in raw}
    return f"{len(raw)}×{sizes.pop()}" if len(sizes) == 1 else f"{len(raw)} starts, {sum(map(len, raw))} req"


def cell(r: Row, m: registry.Metric) -> str:
    """``412.3 [398.0, 427.1] (3×20)``; ``needs ≥ 20 requests a start (3×4)`` for a percentile without enough."""
    e = r.estimate(m.name)
    if e is None:
        return f"needs ≥ {m.min_requests} requests a start ({_requests(r, m)})" if r.shortfall(m.name) else "–"
    text = e.fmt(1)
    return text.replace(f"({e.shape}", f"({_requests(r, m)}", 1) if m.quantile is not None else text


def latency_section(data: ReportData, plots: Sequence[Any] = ()) -> Section | None:
    """The section, with the latency plots (``plots.Plot`` named ``latency-<metric>``); None for a run that
    measured no latency metric."""
    ms = latency_metrics(data)
    if not ms:
        return None
    t = Table(["series", data.axis, *[m.label for m in ms]], title="Latency per point")
    for s in data.series:
        for r in s.ok_rows:
            t.rows.append([s.name, r.x_label, *[cell(r, m) for m in ms]])
            t.data.append({"series": s.name, data.axis: r.x,
                           **{m.name: (e.to_dict() if (e := r.estimate(m.name)) else None) for m in ms}})
    needs = sorted({m.min_requests for m in ms if m.quantile is not None})
    intro = ("Lower is better. Each cell is the centre of the point's server starts (each start's median request, "
             "or for a percentile the start's percentile of its requests) with the judge's interval and the "
             "starts × requests behind it (K×R). Time to first token is the server's timing of the prompt until "
             "the first token is sampled (`timings.prompt_ms`, no HTTP round trip); inter-token and end-to-end "
             "latency are timed by llamaforge on streamed requests.")
    if needs:
        intro += (f" A percentile is computed per start only from ≥ {needs[0]} requests: with fewer, its p95 would be "
                  "the slowest request or close to it, so the cell says what it needs instead (raise --repeats).")
    return Section("latency", "Latency", intro=intro, tables=[t],
                   plots=[p for p in plots if str(p.name).startswith("latency-")])
