"""The points: one table per series (every point, failed ones with their class) and the failed points;
``point_flags`` says why a row is marked (anomaly, Pareto front)."""

from __future__ import annotations

from ..findings.labels import INFEASIBLE
from . import analysis as an
from .data import ReportData, Row, Series
from .format import first_line, fmt_int, fmt_mib, fmt_speed
from .measurement_conditions import row_flags
from .replication import machine_flag
from .sections import Section, Table

_CTX_NOTES = {"unsupported": "ctx: llama.cpp default (build cannot fit)", "fixed": "ctx: --ctx",
              "refused": "fit refused: -c from llama-fit-params", "refused-unfitted": "fit refused: unfitted"}


def fit_status_of(r: Row) -> str | None:
    """How the row's context was chosen (``FIT_STATUS_NOTES`` keys), as stored with its point."""
    return r.point.detail.fit_status if r.point is not None else None


def point_flags(data: ReportData, found: list[an.Anomaly]) -> dict[int, list[str]]:
    """Per row (by id): why it is marked in its points table (anomaly, Pareto front)."""
    flags: dict[int, list[str]] = {}
    for a in found:
        flags.setdefault(id(a.row), []).append(
            f"beats {'N' if data.axis == 'ncmoe' else data.axis}={a.neighbour.x_label} on {a.metric}")
    for s in data.series:
        for r in an.pareto_front(s.rows, "tg"):
            flags.setdefault(id(r), []).append("Pareto (ctx, tg)")
    return flags


def points_table(s: Series, native: int | None, flags: dict[int, list[str]] | None = None) -> Table:
    """Every point of one series (failed ones show their class instead of numbers)."""
    t = Table(["ncmoe", "status", "context", "VRAM MiB", "GPU model/ctx/compute MiB", "RSS MiB",
               "prompt tok", "pp t/s", "tg t/s", "notes"], title=s.name)
    ngl_varies = len({r.ngl for r in s.rows}) > 1
    if ngl_varies:
        t.columns.insert(1, "ngl")
    for r in s.rows:
        g = r.gpu_mem
        split = "–" if g is None else f"{g.model:,.0f} / {g.context:,.0f} / {g.compute:,.0f}"
        notes = list((flags or {}).get(id(r), []))
        notes += row_flags(r)
        notes += [f for f in (machine_flag(r),) if f]
        notes += [t for t in (r.pp_test, r.tg_test) if t]
        if r.ok and (note := _CTX_NOTES.get(fit_status_of(r) or "")):
            notes.append(note)
        if r.ok and native and r.n_ctx is not None and r.n_ctx >= native:
            notes.insert(0, "native ctx")
        status = "ok" if r.ok else "infeasible" if r.failure_class == INFEASIBLE else f"failed: {r.failure_class or '?'}"
        row = [str(r.ncmoe), status, fmt_int(r.n_ctx), fmt_mib(r.vram_mib), split, fmt_mib(r.rss_mib),
               fmt_int(r.prompt_tokens), fmt_speed(r, "pp"), fmt_speed(r, "tg"), ", ".join(notes)]
        if ngl_varies:
            row.insert(1, "all" if r.ngl < 0 else str(r.ngl))
        t.rows.append(row)
        t.data.append({"series": s.name, "ncmoe": r.ncmoe, "ngl": r.ngl, "ok": r.ok, "n_ctx": r.n_ctx,
                       "vram_mib": r.vram_mib, "rss_mib": r.rss_mib,
                       "gpu_mem": None if g is None else {"model": g.model, "context": g.context, "compute": g.compute},
                       **{m: (e.to_dict() if (e := r.estimate(m)) else None) for m in ("pp", "tg")}})
    return t


def failed_table(data: ReportData) -> Table:
    t = Table(["series", data.axis, "class", "detail"], title="Failed points")
    for s in data.series:
        for r in s.failed_rows:
            t.rows.append([s.name, r.x_label, r.failure_class or "?", first_line(r.failure_detail)])
            t.data.append({"series": s.name, "ncmoe": r.ncmoe, "ngl": r.ngl, "failure_class": r.failure_class})
    return t


def points_section(section_id: str, s: Series, native: int | None, flags: dict[int, list[str]]) -> Section:
    return Section(section_id, f"Points: {s.name}",
                   intro=("Speeds: centre (geometric mean of the start medians) with a 95 % CI from ≥ 3 server "
                          "starts, the range of 2 starts, or one start's median (between-start spread unknown); "
                          "K×R = starts × requests per start, warm-ups discarded."),
                   tables=[points_table(s, native, flags)])


def infeasible_table(data: ReportData) -> Table:
    t = Table(["series", data.axis, "why"], title="Infeasible combinations (not failures)")
    for s in data.series:
        for r in s.infeasible_rows:
            t.rows.append([s.name, r.x_label, first_line(r.failure_detail)])
            t.data.append({"series": s.name, "ncmoe": r.ncmoe, "ngl": r.ngl, "failure_class": r.failure_class})
    return t


def failed_section(data: ReportData) -> Section:
    tables = [t for t in (failed_table(data), infeasible_table(data)) if t.rows]
    return Section("failed", "Failed points", tables=tables, absent=None if tables else "no point failed")
