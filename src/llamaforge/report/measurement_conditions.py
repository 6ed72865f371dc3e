"""Measurement conditions: per point, the GPU's clocks, power, temperature and utilisation, the host's load,
and the flags (throttled, loaded, shared, allow-busy) that other sections repeat beside a point."""

from __future__ import annotations

from typing import Any

from .data import ReportData, Row
from .sections import Section, Table


def row_flags(r: Row) -> list[str]:
    """``throttled`` / ``loaded`` / ``shared`` from the point's telemetry, ``allow-busy`` when it was let through."""
    from ..findings.conditions import flags

    out = flags(r.telemetry)
    if r.busy:
        out.append("allow-busy")
    return out


def _st(tel: dict | None, *path: str) -> float | None:
    d: Any = tel
    for k in path:
        d = d.get(k) if isinstance(d, dict) else None
    return d if isinstance(d, int | float) else None


def conditions_table(data: ReportData) -> Table | None:
    """Per point: GPU clocks / power / temperature / utilisation (device 0), host load, and the flags."""
    from ..findings.conditions import describe

    rows = [(s, r) for s in data.series for r in s.rows if r.telemetry or r.busy]
    if not rows:
        return None
    t = Table(["series", "ncmoe", "SM MHz", "mem MHz", "power W", "temp °C", "GPU util %", "load 1 min",
               "other CPU cores", "CPU MHz", "conditions"], title="Measurement conditions (medians over the point)")

    def f(v: float | None, d: int = 0) -> str:
        return "–" if v is None else f"{v:,.{d}f}"

    for s, r in rows:
        tel = r.telemetry or {}
        g = (tel.get("gpu") or [{}])[0]
        cond = describe(tel) if tel else "–"
        if r.busy:
            cond += "; measured with --allow-busy"
        t.rows.append([s.name, str(r.ncmoe), f(_st(g, "sm_clock_mhz", "median")), f(_st(g, "mem_clock_mhz", "median")),
                       f(_st(g, "power_w", "median")), f(_st(g, "temperature_c", "median")),
                       f(_st(g, "gpu_util_pct", "median")), f(_st(tel, "host", "load1", "median"), 2),
                       f(_st(tel, "host", "other_cpu_cores", "median"), 2), f(_st(tel, "host", "cpu_mhz", "median")),
                       cond])
        t.data.append({"series": s.name, "ncmoe": r.ncmoe, "flags": row_flags(r), "telemetry": tel, "busy": r.busy})
    return t


def conditions_section(data: ReportData) -> Section:
    sec = Section("conditions", "Measurement conditions", intro=(
        "Sampled while each point was measured: NVML clocks, power, temperature, utilisation and throttle "
        "reasons of GPU 0 (all devices in the store), other processes computing on the GPU, the host's load "
        "average and CPU frequency, and the CPU cores used by processes outside the measured server. "
        "throttled = an NVML slowdown reason (power cap, thermal, HW slowdown) in any sample; "
        "loaded = other processes used ≥ 0.5 cores on median; shared = another process computed on the GPU."))
    t = conditions_table(data)
    if t is None:
        sec.absent = "no telemetry was recorded with this run (measured before llamaforge recorded it)"
        return sec
    marked = [d for d in t.data if d["flags"]]
    sec.notes.append(f"{len(marked)} of {len(t.data)} point(s) ran throttled, loaded or shared"
                     + (": " + ", ".join(f"{d['series']} ncmoe {d['ncmoe']} ({', '.join(d['flags'])})"
                                         for d in marked[:8]) if marked else "") + ".")
    if not any(_st((d["telemetry"] or {}).get("gpu", [{}])[0] if (d["telemetry"] or {}).get("gpu") else None,
                   "sm_clock_mhz", "median") for d in t.data):
        sec.notes.append("No NVIDIA GPU was visible through NVML: GPU columns are empty (not zero).")
    sec.tables.append(t)
    return sec
