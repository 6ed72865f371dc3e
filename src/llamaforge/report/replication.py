"""The report's replication section: is each number more than one server start's luck?

Per point: median and 95 % CI from the cluster bootstrap over launches, ``K×R`` (launches ×
requests per launch), the within- and between-launch standard deviations (square roots of the
one-way random-effects ANOVA variance components) and the share of the variance between launches.
With one launch per point the section says that between-process spread was not measured; the CIs
are then the within-process ones, and nothing is widened to make up for it.

Drift sentinels (:mod:`llamaforge.bench.sentinel`) are listed with the points measured between the
previous sentinel and the one that drifted.
"""

from __future__ import annotations

import math

from ..bench.schedule import SENTINEL_LABEL
from ..bench.sentinel import DRIFT_MIN_EFFECT, DriftFlag, drift_flags
from ..machine import describe_counts, hosts_of, launch_machines, mixed_note
from ..metrics import FIELDS
from ..records import UNKNOWN_MACHINE
from ..stats import ClusterSummary, cluster_summary
from .data import ReportData, Row
from .sections import Section, Table

_ORDER = ("tg", "pp")   # the order metrics are shown in here


# Why a 2-launch CI is narrow: resampling 2 clusters can only give the two launches' values (and their
# mix), so the interval is about the range of the two starts, and for any continuous spread a third
# start lands outside the range of two with probability 2/3. Said, not corrected (nothing is widened).
_TWO_LAUNCHES = ("Points with 2 server starts (2×n): the bootstrap interval is about the range of the two starts. "
                 "A third start of the same point lands outside the range of two with probability 2/3, so such an "
                 "interval understates between-start spread; use --launches 3 or more before quoting a level.")


def _sd(var: float | None) -> str:
    return "–" if var is None else f"{math.sqrt(var):.2f}"


def row_cluster(r: Row, metric: str) -> ClusterSummary | None:
    """The cluster summary of a report row (``tg``/``pp``), on the same llama-bench test the row shows."""
    if r.point is None:
        return None
    test = r.tg_test if metric == "tg" else r.pp_test
    return cluster_summary(r.point.launch_groups(FIELDS[metric], test))


def launches_of(data: ReportData) -> int:
    return int(data.plan.launches or 1)


def drift_notes(flags: list[DriftFlag]) -> list[str]:
    return [f"⚠ {f.describe()}" for f in flags]


def between_cell(data: ReportData, flag: DriftFlag) -> str:
    """The points measured between two sentinels, per series: "all 15 points" when that is every point
    of the series, else their offload values ("ncmoe 0, 4, 8"); "–" when none."""
    by_build: dict[str, set[tuple[int, int]]] = {}
    for b, n, g, _l in flag.between:
        by_build.setdefault(b, set()).add((n, g))
    parts = []
    for s in data.series:
        got = by_build.pop(s.key[0], None) if s.key[2] != SENTINEL_LABEL else None
        if not got:
            continue
        every = {(r.ncmoe, r.ngl) for r in s.rows}
        if got >= every:
            parts.append(f"{s.name}: all {len(every)} points")
        else:
            parts.append(f"{s.name}: " + ", ".join(f"ncmoe {n}" if g == -1 else f"ngl {g}" for n, g in sorted(got)))
    parts += [f"{b[:16]}: {len(v)} point(s)" for b, v in by_build.items()]   # a build without a series here
    return "; ".join(parts) or "–"


def machine_flag(r: Row) -> str | None:
    """``launches from 2 machines`` when the row's launches were measured on more than one machine."""
    return mixed_note(launch_machines(r.point.launches)) if r.point is not None else None


def machine_notes(data: ReportData) -> list[str]:
    """Summary notes when the run's launches come from more than one machine (a resume after a reboot
    or on another box): launches per machine, and the points whose launches mix machines."""
    launches = [r for p in data.points for r in p.launches]
    counts = launch_machines(launches)
    if len(counts) < 2:
        return []
    mixed = [f"{s.name} {data.axis} {r.x_label}" for s in data.series for r in s.rows if machine_flag(r)]
    out = [f"⚠ This run's {len(launches)} launches were measured on {len(counts)} machines "
           f"(launches per machine: {describe_counts(counts, hosts_of(launches))})."]
    if mixed:
        out.append(f"⚠ {len(mixed)} point(s) have launches from more than one machine, so their medians and CIs "
                   f"mix machines: {', '.join(mixed[:8])}" + (f" and {len(mixed) - 8} more" if len(mixed) > 8 else "")
                   + "; re-measure them on one machine (`llamaforge reproduce`).")
    return out


def machine_line(data: ReportData) -> str | None:
    """Provenance: which machine(s) measured the run's launches, with their counts."""
    launches = [r for p in data.points for r in p.launches]
    counts = launch_machines(launches)
    if not counts:
        return None
    unknown = (" (unknown: measured before llamaforge recorded the machine of each launch)"
               if UNKNOWN_MACHINE in counts else "")
    return (f"Launches per machine (id from boot id, machine-id and GPU UUIDs): "
            f"{describe_counts(counts, hosts_of(launches))}{unknown}.")


def replication_section(data: ReportData) -> Section:
    k = launches_of(data)
    flags = drift_flags(data.points)
    sec = Section("replication", "Replication and drift", intro=(
        "Each point's median with a 95 % CI from a cluster bootstrap over server starts (launches, then the "
        "requests within them); n = launches × requests per launch. sd within / between: standard deviations "
        "of requests inside one server and of launch means between servers (one-way random-effects ANOVA); "
        "'between %' is the between-launch share of the variance."))
    if k < 2:
        sec.notes.append("Between-process spread was NOT measured: every point ran in one server start "
                         "(--launches 1). The CIs below cover only request-to-request spread inside one process "
                         "and are not widened to make up for it; re-measure with --launches 2 or more.")
    t = Table(["series", "ncmoe", "n", "tg t/s median [95 % CI]", "tg sd within / between", "tg between %",
               "pp t/s median [95 % CI]", "pp sd within / between", "flags"],
              title="Per point, clustered by launch")
    marked = {(b, n, g) for f in flags for b, n, g, _l in f.between}
    two_starts = False
    for s in data.series:
        for r in s.ok_rows:
            cells: list[str] = []
            rec: dict = {"series": s.name, "ncmoe": r.ncmoe, "ngl": r.ngl}
            shape = "–"
            for m in _ORDER:
                cs = row_cluster(r, m)
                rec[m] = cs.to_dict() if cs else None
                if cs is None:
                    cells += ["–", "–"] + (["–"] if m == "tg" else [])
                    continue
                shape = cs.shape
                cells.append(f"{cs.median:.1f} [{cs.ci_low:.1f}, {cs.ci_high:.1f}]")
                cells.append(f"{_sd(cs.var_within)} / {_sd(cs.var_between) if cs.between_measured else 'not measured'}")
                if m == "tg":
                    cells.append("–" if cs.icc is None else f"{cs.icc:.0%}")
                    two_starts = two_starts or cs.n_launches == 2
            flag = []
            if r.point is not None and (r.point.build_key, r.ncmoe, r.ngl) in marked:
                flag.append("measured during drift")
            if mf := machine_flag(r):
                flag.append(mf)
            t.rows.append([s.name, str(r.ncmoe) + ("" if r.ngl == -1 else f" ngl={r.ngl}"), shape, *cells,
                           ", ".join(flag)])
            t.data.append(rec)
    if two_starts:
        sec.notes.append(_TWO_LAUNCHES)
    if t.rows:
        sec.tables.append(t)
    else:
        sec.absent = "no point succeeded"
    sentinels = [p for p in data.points if p.label == SENTINEL_LABEL]
    every = data.plan.sentinel_every
    if not sentinels:
        sec.notes.append("No drift sentinels in this run" + (" (--sentinel-every 0 or a small sweep)." if not every else "."))
    else:
        sec.notes.append(f"Drift sentinels: each build's first point re-measured every {every} launches and at the end "
                         f"({sum(len(p.launches) for p in sentinels)} sentinel launches, stored apart and not pooled into "
                         f"the point's statistics). A sentinel drifted when its median left the point's CI by at least "
                         f"{DRIFT_MIN_EFFECT:.0%}.")
        if flags:
            d = Table(["build", "ncmoe", "metric", "sentinel", "value t/s", "change", "point median [CI]",
                       "points measured in between"], title="Drift")
            for f in flags:
                d.rows.append([f.build_key, str(f.ncmoe), f.metric, str(f.sentinel), f"{f.value:.1f}", f"{f.change:+.1%}",
                               f"{f.ref_median:.1f} [{f.ref_ci[0]:.1f}, {f.ref_ci[1]:.1f}]", between_cell(data, f)])
                d.data.append(f.to_dict())
            sec.tables.append(d)
        else:
            sec.notes.append("No sentinel drifted.")
    return sec
