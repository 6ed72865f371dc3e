"""Roofline: bytes read per generated token × tg = achieved bandwidth, against the device's."""

from __future__ import annotations

from ..backends import find as find_backend
from ..records import BuildManifest, Environment
from . import analysis as an
from .data import ReportData, Series
from .format import fmt_int
from .sections import Section, Table


def device_bandwidth(s: Series, env: Environment) -> tuple[str, float | None]:
    """(device name, memory bandwidth GB/s or None) for a series' backend, from the run's env: the CPU's
    measured RAM bandwidth, or the theoretical bandwidth of the NVIDIA GPU the build's device names."""
    backend = find_backend(s.backend)
    if backend is not None and not backend.offloads:
        return env.cpu_bandwidth()
    devs = BuildManifest.from_json(s.build or {}).device_names()
    gpu = next((g for g in env.gpus for d in devs if g.name and g.name in d), None)
    gpu = gpu or (env.gpus[0] if env.gpus else None)
    if gpu is None:
        return (devs[0] if devs else "device"), None
    bw = gpu.memory_bandwidth_gbps
    return gpu.name or "GPU", float(bw) if isinstance(bw, int | float) and bw > 0 else None


def roofline_table(data: ReportData) -> tuple[Table | None, str | None]:
    facts = data.facts
    if facts.base_bytes_per_token() is None:
        return None, ("the model facts lack the bytes read per token (bytes_per_token_ctx0 / "
                      "weight_bytes_per_token), so no roofline")
    t = Table(["series", "device", data.axis, "context used", "GB/token", "tg t/s", "achieved GB/s",
               "device GB/s", "% of peak"], title="Roofline")
    for s in data.series:
        dev, bw = device_bandwidth(s, data.env)
        for r in s.rows:
            rp = an.roofline(r, facts, bw, prompt_tokens=data.plan.prompt_tokens,
                             n_predict=data.plan.n_predict)
            if rp is None:
                continue
            frac = rp.fraction
            t.rows.append([s.name, dev, r.x_label, fmt_int(rp.context_used), f"{rp.bytes_per_token / 1e9:.3f}",
                           f"{r.median('tg'):.1f}", f"{rp.achieved_gbs:.1f}",
                           "unknown" if bw is None else f"{bw:.0f}",
                           "unknown" if frac is None else f"{frac:.1%}"])
            t.data.append({"series": s.name, "ncmoe": r.ncmoe, "bytes_per_token": rp.bytes_per_token,
                           "achieved_gbs": rp.achieved_gbs, "device_gbs": bw, "fraction": frac})
    if not t.rows:
        return None, "no point has a generation speed"
    return t, None


def roofline_section(data: ReportData) -> Section:
    rt_, why = roofline_table(data)
    return Section("roofline", "Roofline (token generation)", intro=(
        "Bytes read per generated token = weights read per token (+ recurrent state) + kv_bytes_per_token_ctx × context used "
        "(+ kv_bytes_per_token_swa × min(context used, sliding window) for sliding-window layers) "
        "(prompt tokens + n_predict/2); × tg = achieved bandwidth, against the device's memory bandwidth "
        "(GPUs: theoretical, from NVML; the CPU: host RAM copy bandwidth measured when the run started). "
        "With experts offloaded (ncmoe > 0) part of the reads come from system RAM, so the GPU's peak is "
        "not the only bound."), tables=[rt_] if rt_ else [], absent=why)
