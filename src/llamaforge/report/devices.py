"""The Devices section (several devices, ``bench --rpc`` / ``--split`` / ``--tensor-split``): every device's memory
per point — model, context and compute buffers as llama.cpp's own memory breakdown gives them
(``PointDetail.devices_mem``; an RPC device is named with its endpoint) — with a bar per device, so a split's
effect on each device reads at a glance. A run whose points have no per-device memory has no section.
"""

from __future__ import annotations

import statistics

from .data import ReportData, Row
from .sections import Section, Table

#: the bar of the largest device in the table
BAR_WIDTH = 20


def _rows(data: ReportData) -> list[tuple[str, int, list[Row]]]:
    """(series, ncmoe, its ok rows with per-device memory), in the report's order."""
    out: list[tuple[str, int, list[Row]]] = []
    for s in data.series:
        by_n: dict[int, list[Row]] = {}
        for r in s.ok_rows:
            if r.point is not None and r.point.detail.devices_mem:
                by_n.setdefault(r.point.ncmoe, []).append(r)
        out += [(s.name, n, rows) for n, rows in sorted(by_n.items())]
    return out


def _median(rows: list[Row], name: str, key: str) -> float | None:
    vals = [d.get(key) for r in rows for d in r.point.detail.devices_mem or []
            if d.get("name") == name and isinstance(d.get(key), int | float)]
    return statistics.median(vals) if vals else None


def _devices(rows: list[Row]) -> list[tuple[str, str]]:
    seen: dict[str, str] = {}
    for r in rows:
        for d in r.point.detail.devices_mem or []:
            seen.setdefault(str(d.get("name")), str(d.get("description") or ""))
    return list(seen.items())


def _num(v: float | None) -> str:
    return "–" if v is None else f"{v:,.0f}"


def devices_table(data: ReportData) -> Table | None:
    groups = _rows(data)
    if not groups:
        return None
    t = Table(["series", "ncmoe", "device", "model MiB", "context MiB", "compute MiB", "total MiB", ""],
              title="Memory per device (llama.cpp's memory breakdown; median over starts)")
    top = max((_median(rows, n, "self") or 0 for _s, _n, rows in groups for n, _d in _devices(rows)), default=0) or 1
    for series, ncmoe, rows in groups:
        for name, desc in _devices(rows):
            vals = {k: _median(rows, name, k) for k in ("model", "context", "compute", "self")}
            bar = "█" * max(1, round(BAR_WIDTH * (vals["self"] or 0) / top)) if vals["self"] else ""
            t.rows.append([series, str(ncmoe), f"{name} ({desc})" if desc else name, _num(vals["model"]),
                           _num(vals["context"]), _num(vals["compute"]), _num(vals["self"]), bar])
            t.data.append({"series": series, "ncmoe": ncmoe, "device": name, "description": desc, **vals})
    return t


def devices_section(data: ReportData) -> Section | None:
    table = devices_table(data)
    if table is None:
        return None
    intro = ("Where each point's memory went, device by device (an RPC device is named by its rpc-server's "
             "endpoint; `Host` is the CPU's share): the model's weights, the KV cache (context) and the compute "
             "buffers, from the memory breakdown llama.cpp prints at shutdown.")
    return Section("devices", "Devices", intro=intro, tables=[table])
