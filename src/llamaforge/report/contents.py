"""The report's content as renderer-neutral sections and tables, in reading order.

One schema, many renderers (like llama-bench's printers): :func:`build_sections` turns a
:class:`~.data.ReportData` into :class:`~.sections.Section` objects holding :class:`~.sections.Table`
objects whose ``rows`` are display strings and whose ``data`` keeps the unformatted numbers behind each row
(tests check those against the store). ``html.py`` and ``markdown.py`` only lay sections out. Each section
has its module (:mod:`.scenarios`, :mod:`.points`, :mod:`.anomalies`, :mod:`.provenance` …); cell formats are
in :mod:`.format`; a run kind's own sections come from :mod:`.kinds` (the sweep's: replication).

Every speed is shown with its interval and its shape (``Estimate.fmt``: centre with a 95 % CI from
≥ 3 server starts, the range of 2 starts, or "spread unknown" for one; ``K×R`` = starts × requests);
every comparison is the judge's (:mod:`llamaforge.judge`). A section that cannot be filled says why
in ``absent`` instead of disappearing.
"""

from __future__ import annotations

import dataclasses

from . import analysis as an
from . import kinds
from .anomalies import anomaly_section
from .crosscheck import crosscheck_section
from .data import ReportData
from .devices import devices_section
from .headline import headline_section
from .host_memory import host_memory_section
from .kinds.sweep import remeasure_line
from .latency import latency_section
from .matrix import matrix_section
from .measurement_conditions import conditions_section
from .placement import placement_section
from .points import failed_section, point_flags, points_section
from .provenance import probes_table, provenance_section
from .remeasurement import reproduction_section
from .roofline import roofline_section
from .scenarios import summary_section
from .sections import Section
from .sweet_spots import sweet_spot_section


def build_sections(data: ReportData, plots: list, *, min_effect: float = 0.05) -> list[Section]:
    """The whole report, in reading order. With ``--engine both`` the summary, sweet spots and
    anomalies read the llama-server series (``data``); the rest reads every series (``full``)."""
    full = data
    if len({s.key[1] for s in data.series}) > 1 and any(s.key[1] == "server" for s in data.series):
        data = dataclasses.replace(data, series=[s for s in data.series if s.key[1] == "server"])
    priors = {(s.name, m): s.prior(m) for s in full.series for m in ("tg", "pp")}
    found = an.anomalies(full.all_rows, min_effect=min_effect, full_attn_layers=full.full_attn_layers, priors=priors)
    flags = point_flags(full, found)
    out: list[Section] = [h for h in (headline_section(data, min_effect),) if h is not None]
    out += [s for s in (matrix_section(data, min_effect),) if s is not None]   # bench --variant runs
    out.append(summary_section(data, full, min_effect))
    if line := remeasure_line(full):   # first thing read: whether these numbers survived a re-measurement
        out[0].intro = f"{line} {out[0].intro}".strip()
    out += [s for s in (reproduction_section(full), crosscheck_section(full)) if s is not None]
    out += [sweet_spot_section(data, any(r.ok for r in full.all_rows), min_effect), anomaly_section(full, found, min_effect)]
    out += [s for s in (placement_section(full, min_effect),) if s is not None]   # bench --place
    out += [s for s in (devices_section(full),) if s is not None]   # bench --rpc / --split / --tensor-split
    latency_plots = [p for p in plots if str(p.name).startswith("latency-")]   # shown in the Latency section
    plots = [p for p in plots if p not in latency_plots]
    out.append(Section("plots", "Plots", plots=list(plots),
                       absent=None if plots else "no point succeeded, so there is nothing to plot"))
    out += [host_memory_section(full), conditions_section(full)]
    for s in full.series:
        out.append(points_section(f"points-{len(out)}", s, full.native_ctx, flags))
    out += [s for s in (latency_section(full, latency_plots),) if s is not None]
    out += kinds.sections(full)
    out.append(failed_section(full))
    out += [roofline_section(full), provenance_section(full)]
    if full.probes:
        out.append(Section("probes", "Probes (compare / bisect)", tables=[probes_table(full)]))
    return out
