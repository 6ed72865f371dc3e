"""The report's replication section: is each number more than one server start's luck?

Per point, from the judge (:mod:`llamaforge.judge`): the centre with what its K allows (a 95 % CI
from ≥ 3 server starts, the range of 2, or one start's value with the spread unknown), ``K×R``
(starts × requests per start), the spread of requests inside a start and of start medians between
starts (only from ≥ 3 starts: from 2 it is noise), both modes where the starts are bimodal, and —
for ``--launches auto`` — the K the point stopped at and why.

Drift sentinels (:mod:`llamaforge.findings.drift`) are listed with the points measured between the
previous sentinel and the one that drifted.
"""

from __future__ import annotations

from ..findings.drift import DRIFT_MIN_EFFECT, DriftFlag, drift_flags
from ..findings.labels import is_sentinel
from ..judge import Estimate, Starts, estimate
from ..machine import describe_counts, hosts_of, launch_machines, mixed_note
from ..metrics import FIELDS
from ..records import UNKNOWN_MACHINE
from .data import ReportData, Row
from .sections import Section, Table

_ORDER = ("tg", "pp")   # the order metrics are shown in here


_TWO_LAUNCHES = ("Points with 2 server starts show the range of the two starts, not a confidence interval: a third "
                 "start of the same point lands outside the range of two with probability 2/3, and the spread between "
                 "starts cannot be estimated from two. Use --launches auto (or 3 and more) before quoting a level.")


def _pct(x: float | None) -> str:
    return "–" if x is None else f"{x:.1%}"


def row_estimate(r: Row, metric: str) -> Estimate | None:
    """The judge's estimate of a report row (``tg``/``pp``), on the same llama-bench test the row shows."""
    if r.point is None:
        return r.estimate(metric)
    test = r.tg_test if metric == "tg" else r.pp_test
    return estimate(Starts.of(r.point.launch_groups(FIELDS[metric], test)))


def spread_cell(e: Estimate) -> str:
    """Within a start / between starts, as SDs of log values (≈ CV): between only from ≥ 3 starts."""
    between = ("modes" if e.bimodal else _pct(e.spread.sd if e.spread else None)) if e.k >= 3 else (
        "range of 2" if e.k == 2 else "unknown (1 start)")
    return f"{_pct(e.within)} / {between}"


def stop_cell(r: Row) -> str:
    """``K=5: resolved (±3.1 %)`` for a point measured with --launches auto; ``–`` otherwise."""
    st = r.point.detail.sequential if r.point is not None else None
    if not st:
        return "–"
    reason = str(st.get("reason") or "")
    if reason.startswith(f"{st.get('status')} "):     # "unresolved at the maximum of 4 starts: …" says it once
        return f"K={st.get('k')}: {reason}"
    return f"K={st.get('k')}: {st.get('status')} — {reason}"


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
        got = by_build.pop(s.key[0], None) if not is_sentinel(s.key[2]) else None
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
        "Each point from its server starts (the unit of replication; requests inside one start are not "
        "independent): centre = geometric mean of the start medians, with a 95 % CI from ≥ 3 starts, the range "
        "of 2 starts, or one start's value. Spread within / between: SD of log requests inside a start and of "
        "log start medians between starts (≈ CV), the latter only from ≥ 3 starts. Bimodal starts show both "
        "modes. 'stopped' is where --launches auto stopped adding starts, and why."))
    if k < 2 and not data.plan.sequential:      # --launches auto (sequential) never plans a single start
        sec.notes.append("Between-start spread was NOT measured: every point ran in one server start "
                         "(--launches 1). The values below are one process's; re-measure with --launches auto.")
    t, two_starts = _per_point_table(data, flags)
    if two_starts:
        sec.notes.append(_TWO_LAUNCHES)
    if t.rows:
        sec.tables.append(t)
    else:
        sec.absent = "no point succeeded"
    _add_drift(sec, data, flags)
    return sec


def _per_point_table(data: ReportData, flags: list) -> tuple[Table, bool]:
    """One row per successful point: each metric's centre and spread by server start; and whether any
    estimate came from exactly two starts (which needs the note on two starts)."""
    t = Table(["series", "ncmoe", "K×R", "tg t/s", "tg spread within / between", "pp t/s",
               "pp spread within / between", "stopped", "flags"], title="Per point, by server start")
    marked = {(b, n, g) for f in flags for b, n, g, _l in f.between}
    two_starts = False
    for s in data.series:
        for r in s.ok_rows:
            cells: list[str] = []
            rec: dict = {"series": s.name, "ncmoe": r.ncmoe, "ngl": r.ngl}
            shape = "–"
            for m in _ORDER:
                e = row_estimate(r, m)
                rec[m] = e.to_dict() if e else None
                if e is None:
                    cells += ["–", "–"]
                    continue
                shape = e.shape
                cells += [e.fmt(1), spread_cell(e)]
                two_starts = two_starts or e.k == 2
            flag = []
            if r.point is not None and (r.point.build_key, r.ncmoe, r.ngl) in marked:
                flag.append("measured during drift")
            if mf := machine_flag(r):
                flag.append(mf)
            t.rows.append([s.name, str(r.ncmoe) + ("" if r.ngl == -1 else f" ngl={r.ngl}"), shape, *cells,
                           stop_cell(r), ", ".join(flag)])
            t.data.append(rec)
    return t, two_starts


def _add_drift(sec: Section, data: ReportData, flags: list) -> None:
    """The drift sentinels' note and, when one drifted, the drift table."""
    sentinels = [p for p in data.points if is_sentinel(p.label)]
    every = data.plan.sentinel_every
    if not sentinels:
        sec.notes.append("No drift sentinels in this run" + (" (--sentinel-every 0 or a small sweep)." if not every else "."))
    else:
        sec.notes.append(f"Drift sentinels: each build's first point re-measured every {every} launches and at the end "
                         f"({sum(len(p.launches) for p in sentinels)} sentinel launches, stored apart and not pooled into "
                         f"the point's statistics). A sentinel drifted when its median left the prediction interval for one new "
                         f"start of the point and differed from its centre by at least {DRIFT_MIN_EFFECT:.0%}.")
        if flags:
            d = Table(["build", "ncmoe", "metric", "sentinel", "value t/s", "change", "point centre [one new start]",
                       "points measured in between"], title="Drift")
            for f in flags:
                d.rows.append([f.build_key, str(f.ncmoe), f.metric, str(f.sentinel), f"{f.value:.1f}", f"{f.change:+.1%}",
                               f"{f.ref_median:.1f} [{f.ref_ci[0]:.1f}, {f.ref_ci[1]:.1f}]", between_cell(data, f)])
                d.data.append(f.to_dict())
            sec.tables.append(d)
        else:
            sec.notes.append("No sentinel drifted.")
