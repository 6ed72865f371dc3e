"""Provenance: builds, environment, model download and facts, runtime quirks, plan, commands, probes."""

from __future__ import annotations

from ..findings.labels import display_name
from .data import ReportData
from .format import fmt_mib, fmt_value, kv_table
from .replication import machine_line
from .sections import Section, Table


def _caps(caps: dict) -> str:
    parts = []
    for d in caps.get("devices") or []:
        if isinstance(d, dict):
            parts.append(f"{d.get('name', '?')} ({fmt_mib(d.get('memory_mib'))} MiB)")
    if caps.get("cuda_archs"):
        parts.append(f"CUDA archs {caps['cuda_archs']}")
    vk = caps.get("vulkan")
    if isinstance(vk, dict):
        on = [k for k, v in sorted(vk.items()) if v and v is not True and v != "none"]
        flags = [k for k, v in sorted(vk.items()) if v is True]
        parts.append("Vulkan " + ", ".join(flags + [f"{k}={vk[k]}" for k in on]) if flags or on else "Vulkan: none")
    rest = {k: v for k, v in caps.items() if k not in ("devices", "cuda_archs", "vulkan")}
    if rest:
        parts.append(fmt_value(rest))
    return "; ".join(parts) or "–"


def builds_table(data: ReportData) -> Table:
    t = Table(["series", "backend", "pin", "commit", "flags", "toolchain", "capabilities"], title="Builds")
    for s in data.series:
        b = s.build or {}
        t.rows.append([s.name, display_name(s.backend), str(b.get("pin") or "–"), str(b.get("commit") or "–"),
                       " ".join(f"{k}={v}" for k, v in sorted((b.get("flags") or {}).items())) or "–",
                       fmt_value(b.get("toolchain")) if b.get("toolchain") else "–",
                       _caps(b.get("capabilities") or {})])
        t.data.append({"series": s.name, "key": s.key[0], **{k: b.get(k) for k in ("pin", "commit")}})
    return t


def runtime_table(data: ReportData) -> Table | None:
    """Per series: the quirks and CPU-Vulkan defaults the run applied (``plan.runtime``), or None."""
    runtime = data.plan.runtime
    t = Table(["series", "quirks", "extra arguments", "why"], title="Runtime quirks and device defaults")
    for s in data.series:
        rt = runtime.get(s.key[0]) or {}
        if not (rt.get("quirks") or rt.get("args") or rt.get("notes")):
            continue
        args = "; ".join(f"{b}: {' '.join(a)}" for b, a in sorted((rt.get("args") or {}).items()))
        t.rows.append([s.name, ", ".join(rt.get("quirks") or []) or "–", args or "–", " · ".join(rt.get("notes") or [])])
        t.data.append({"series": s.name, "key": s.key[0], **rt})
    return t if t.rows else None


def commands_table(data: ReportData) -> Table:
    t = Table(["series", data.axis, "command"], title="Commands", code_cols=(2,))
    for s in data.series:
        for r in s.rows:
            t.rows.append([s.name, r.x_label, r.command or "(not recorded)"])
            t.data.append({"series": s.name, "ncmoe": r.ncmoe, "command": r.command})
    return t


def probes_table(data: ReportData) -> Table:
    t = Table(["seq", "commit", "subject", "verdict", "build s", "measure s", "note"], title="Probes")
    for p in data.probes:
        t.rows.append([str(p.seq), p.commit_sha[:12], p.subject or "", p.verdict or "",
                       "–" if p.build_s is None else f"{p.build_s:.0f}",
                       "–" if p.measure_s is None else f"{p.measure_s:.0f}", p.note or ""])
        t.data.append({"seq": p.seq, "commit": p.commit_sha, "verdict": p.verdict})
    return t


def provenance_section(data: ReportData) -> Section:
    """Builds, environment, model download and facts, runtime quirks, plan, commands."""
    prov = Section("provenance", "Provenance", tables=[builds_table(data)])
    env = data.env.machines or data.env.to_json()     # a fleet report: each machine's
    prov.tables.append(kv_table(env, "Environment") if env else Table(["key", "value"], title="Environment"))
    if not env:
        prov.notes.append("No environment was recorded with this run.")
    dl = data.plan.model.download
    if isinstance(dl, dict):
        prov.notes.append(f"Model download: sha256 {dl.get('sha256')}, " + (
            f"verified against the {'pinned' if dl.get('checked_against') == 'pinned' else 'hub'} hash"
            if dl.get("verified") else "UNVERIFIED (no hash was pinned or announced; pin one with #sha256=)"))
    facts = data.facts.to_json()
    if facts:
        prov.tables.append(kv_table(facts, f"Model facts: {data.model_ref}"))
    else:
        prov.notes.append("No model facts were recorded in the run's plan.")
    rtt = runtime_table(data)
    if rtt is not None:
        prov.tables.append(rtt)
    elif data.plan.quirks is False:
        prov.notes.append("Recorded quirks and CPU-Vulkan defaults were not applied (--no-quirks).")
    # the adaptive record has its own section (its interpolated values are never shown as numbers)
    plan = {k: v for k, v in data.plan.to_json().items() if k not in ("model", "runtime", "adaptive")}
    if plan:
        prov.tables.append(kv_table(plan, "Plan"))
    prov.tables.append(commands_table(data))
    if data.run.command:
        prov.notes.append(f"Run command: {data.run.command}")
    if line := machine_line(data):
        prov.notes.append(line)
    prov.notes += [f"Resume warning: {r.warning}" for r in data.env.resumes if r.warning]
    return prov
