"""The conditions a point was measured under, from the telemetry it stored (``detail.telemetry``,
sampled by :mod:`llamaforge.bench.telemetry`): ``throttled`` (an NVML slowdown reason in any sample),
``loaded`` (other processes used ≥ :data:`LOADED_CORES` cores on median), ``shared`` (another process
computed on the GPU) — the marks of the terminal's tables, the report and ``reproduce``'s verdicts.
"""

from __future__ import annotations

from ..gpu import SLOWDOWN_REASONS
from ..store import Point

#: other processes using at least this many CPU cores (median over the point) mark it "loaded"
LOADED_CORES = 0.5


def flags(tel: dict | None) -> list[str]:
    """``throttled`` / ``loaded`` / ``shared`` for a stored telemetry summary (empty when clean or unknown)."""
    if not tel:
        return []
    out = []
    if any(r in (d.get("throttle_reasons") or {}) for d in tel.get("gpu") or [] for r in SLOWDOWN_REASONS):
        out.append("throttled")
    cores = ((tel.get("host") or {}).get("other_cpu_cores") or {}).get("median")
    if cores is not None and cores >= LOADED_CORES:
        out.append("loaded")
    if tel.get("other_gpu_processes"):
        out.append("shared")
    return out


def describe(tel: dict | None) -> str:
    """One line for tables: the flags with their evidence."""
    if not tel:
        return "–"
    parts = []
    for d in tel.get("gpu") or []:
        slow = [r for r in SLOWDOWN_REASONS if r in (d.get("throttle_reasons") or {})]
        if slow:
            parts.append("throttled: " + ", ".join(f"{r} {d['throttle_reasons'][r]:.0%}" for r in slow))
    cores = ((tel.get("host") or {}).get("other_cpu_cores") or {}).get("median")
    if cores is not None and cores >= LOADED_CORES:
        parts.append(f"loaded: other processes used {cores:.1f} cores")
    others = tel.get("other_gpu_processes") or []
    if others:
        parts.append("shared: " + ", ".join(f"PID {o['pid']}" for o in others[:3]))
    return "; ".join(parts) or "clean"


def describe_point(p: Point) -> str:
    """The point's measurement conditions in one cell: GPU 0's SM clock, the host's load, and the telemetry
    flags (``clean`` when nothing throttled, loaded or shared the machine); ``–`` without telemetry."""
    tel = p.detail.telemetry
    if not tel:
        return "–"
    sm = (((tel.get("gpu") or [{}])[0].get("sm_clock_mhz")) or {}).get("median")
    load = (((tel.get("host") or {}).get("load1")) or {}).get("median")
    parts = ([f"SM {sm:,.0f} MHz"] if sm else []) + ([f"load {load:.1f}"] if load is not None else [])
    return ", ".join([*parts, describe(tel)])
