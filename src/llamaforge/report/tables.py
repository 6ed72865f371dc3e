"""The report's content as renderer-neutral sections and tables.

One schema, many renderers (like llama-bench's printers): :func:`build_sections` turns a
:class:`~.data.ReportData` into :class:`Section` objects holding :class:`Table` objects whose
``rows`` are display strings and whose ``data`` keeps the unformatted numbers behind each row (tests
check those against the store). ``html.py`` and ``markdown.py`` only lay sections out.

Every speed is shown with its interval and its shape (``Estimate.fmt``: centre with a 95 % CI from
≥ 3 server starts, the range of 2 starts, or "spread unknown" for one; ``K×R`` = starts × requests);
every comparison is the judge's (:mod:`llamaforge.judge`). A section that cannot be filled says why
in ``absent`` instead of disappearing.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from ..findings.drift import drift_flags
from ..findings.labels import display_name
from ..judge import Judgement, Starts, assumptions_note, control, estimate, judge
from ..metrics import LABELS
from ..records import BuildManifest, Environment
from . import analysis as an
from .data import ReportData, Row, Series
from .engine_gap import gap_tables
from .headline import headline_section
from .matrix import matrix_section
from .replication import (
    drift_notes,
    launches_of,
    machine_flag,
    machine_line,
    machine_notes,
    replication_section,
)
from .sections import Section, Table

SCENARIOS = (
    ("all_gpu", "all layers on the device (ncmoe 0)"),
    ("first_native", "first ncmoe with native context"),
    ("best_native", "best tg at native context"),
)
NGL_SCENARIOS = (
    ("all_gpu", "all layers on the device (ngl all)"),
    ("first_native", "fewest layers off the device with native context"),
    ("best_native", "best tg at native context"),
)


def scenarios(data: ReportData) -> tuple[tuple[str, str], ...]:
    return NGL_SCENARIOS if data.axis == "ngl" else SCENARIOS


# ---- formatting -------------------------------------------------------------------------------
def fmt_int(x: float | int | None) -> str:
    return "–" if x is None else f"{int(round(x)):,}"


def fmt_mib(x: float | None) -> str:
    return "–" if x is None else f"{x:,.0f}"


def fmt_speed(r: Row | None, metric: str) -> str:
    if r is None:
        return "–"
    e = r.estimate(metric)
    return "–" if e is None else e.fmt(1)


def fmt_ratio(j: Judgement | None) -> str:
    """``1.66× [1.35, 2.01] differs`` (≥ 3 starts a side) or ``1.66× (starts 1.15–2.00) inconclusive``."""
    return "–" if j is None else j.fmt()


def _first_line(text: str | None, width: int = 120) -> str:
    if not text:
        return ""
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line if len(line) <= width else line[: width - 1] + "…"


def _pick(s: Series, scenario: str, native: int | None) -> Row | None:
    if scenario == "all_gpu":
        if s.rows and s.rows[0].axis == "ngl":
            return min(s.rows, key=lambda r: r.offload)
        return next((r for r in s.rows if r.ncmoe == 0), None)
    if scenario == "first_native":
        return an.first_native(s.rows, native)
    return an.best_at_native(s.rows, native, "tg")


# ---- tables -----------------------------------------------------------------------------------
_CTX_NOTES = {"unsupported": "ctx: llama.cpp default (build cannot fit)", "fixed": "ctx: --ctx",
              "refused": "fit refused: -c from llama-fit-params", "refused-unfitted": "fit refused: unfitted"}


def fit_status_of(r: Row) -> str | None:
    """How the row's context was chosen (``FIT_STATUS_NOTES`` keys), as stored with its point."""
    return ((r.point.extra or {}) if r.point is not None else {}).get("fit_status")


def context_notes(data: ReportData) -> list[str]:
    """One line per series whose contexts were not fitted by llama-server (old builds, --ctx, refusals)."""
    from ..findings.labels import FIT_STATUS_NOTES

    out = []
    for s in data.series:
        counts: dict[str, int] = {}
        for r in s.rows:
            st = fit_status_of(r)
            if st and st != "fitted":
                counts[st] = counts.get(st, 0) + 1
        for st, n in sorted(counts.items()):
            out.append(f"Context of {s.name}: {FIT_STATUS_NOTES.get(st, st)} ({n} of {len(s.rows)} points).")
    return out


def output_guard_notes(data: ReportData) -> list[str]:
    """One line per series whose server rejected its own non-UTF-8 output (measured with tokens banned)."""
    out = []
    for s in data.series:
        guarded = [r for r in s.rows if r.point is not None and (r.point.extra or {}).get("output_guard")]
        if guarded:
            g = (guarded[0].point.extra or {})["output_guard"]
            out.append(f"{s.name}: llama-server rejected its own non-UTF-8 output, so {len(guarded)} of {len(s.rows)} "
                       f"points were measured with {g.get('banned_tokens')} incomplete-UTF-8 tokens banned "
                       "(logit_bias; the generated text differs, the work per token does not).")
    return out


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
        status = "ok" if r.ok else f"failed: {r.failure_class or '?'}"
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
            t.rows.append([s.name, r.x_label, r.failure_class or "?", _first_line(r.failure_detail)])
            t.data.append({"series": s.name, "ncmoe": r.ncmoe, "ngl": r.ngl, "failure_class": r.failure_class})
    return t


def summary_table(data: ReportData) -> Table:
    """Like the seed's: per series, ncmoe 0 / first native context / best tg at native context."""
    t = Table(["series", "point", data.axis, "context", "VRAM MiB", "RSS MiB", "pp t/s", "tg t/s"], title="Summary")
    for s in data.series:
        for sc, label in scenarios(data):
            r = _pick(s, sc, data.native_ctx)
            if r is None:
                why = "not measured" if sc == "all_gpu" else (
                    "native context unknown" if not data.native_ctx else "never reached")
                t.rows.append([s.name, label, "–", why, "–", "–", "–", "–"])
                t.data.append({"series": s.name, "scenario": sc, "ncmoe": None})
                continue
            if not r.ok:
                t.rows.append([s.name, label, r.x_label, f"failed: {r.failure_class or '?'}", "–", "–", "–", "–"])
                t.data.append({"series": s.name, "scenario": sc, "ncmoe": r.ncmoe, "ok": False})
                continue
            t.rows.append([s.name, label, r.x_label, fmt_int(r.n_ctx), fmt_mib(r.vram_mib), fmt_mib(r.rss_mib),
                           fmt_speed(r, "pp"), fmt_speed(r, "tg")])
            t.data.append({"series": s.name, "scenario": sc, "ncmoe": r.ncmoe, "ngl": r.ngl, "ok": True, "n_ctx": r.n_ctx,
                           "pp_median": r.median("pp"), "tg_median": r.median("tg"),
                           "pp_k": r.starts("pp").k, "tg_k": r.starts("tg").k,
                           "pp_n": r.starts("pp").n_requests, "tg_n": r.starts("tg").n_requests})
    return t


RATIO_NOTE = ("ratio = first/second (centres: geometric means of the start medians). Verdicts of the judge on "
              "server starts: same (the 95 % CI lies within ±{e:.0%}), differs (it lies outside), inconclusive (it spans "
              "both); {family}. With fewer than 3 starts on a side there is no CI and no p-value: the range of "
              "start-to-start ratios is shown and the verdict (marked *) assumes a between-start spread, stated below.")


def ratio_judgements(data: ReportData, min_effect: float) -> list[tuple[str, str, Series, Series, Row, Row, dict]]:
    """Per pair of series (earlier over later) and summary scenario: the two rows and the judge's verdict
    per metric, the whole family controlled with Holm's method."""
    cells: list[tuple[str, str, Series, Series, Row, Row, dict]] = []
    for i, a in enumerate(data.series):
        for b in data.series[i + 1:]:
            for sc, label in scenarios(data):
                ra, rb = _pick(a, sc, data.native_ctx), _pick(b, sc, data.native_ctx)
                if ra is None or rb is None or not ra.ok or not rb.ok:
                    continue
                js = {m: judge(rb.starts(m), ra.starts(m), min_effect=min_effect, prior_a=b.prior(m),
                               prior_b=a.prior(m)) for m in ("pp", "tg")}
                cells.append((sc, label, a, b, ra, rb, js))
    flat = control([c[6][m] for c in cells for m in ("pp", "tg")])
    it = iter(flat)
    return [(sc, label, a, b, ra, rb, {m: next(it) for m in ("pp", "tg")}) for sc, label, a, b, ra, rb, _js in cells]


def ratio_table(data: ReportData, min_effect: float) -> Table | None:
    """Pairwise ratios (earlier series over later in the fixed backend order) per summary scenario."""
    if len(data.series) < 2:
        return None
    cells = ratio_judgements(data, min_effect)
    n = sum(1 for c in cells for m in ("pp", "tg") if c[6][m] is not None)
    family = f"Holm's method over the table's {n} comparisons" if n > 1 else "one comparison"
    t = Table(["scenario", "ratio", data.axis, "context", "pp", "tg", "starts (K×R)"], title="Ratios",
              note=RATIO_NOTE.format(e=min_effect, family=family))
    for sc, label, a, b, ra, rb, js in cells:
        ctx = f"{ra.n_ctx / rb.n_ctx:.2f}×" if ra.n_ctx and rb.n_ctx else "–"
        shapes = f"{ra.starts('tg').shape} / {rb.starts('tg').shape}"
        t.rows.append([label, f"{a.name}/{b.name}", f"{ra.x_label} vs {rb.x_label}", ctx,
                       fmt_ratio(js["pp"]), fmt_ratio(js["tg"]), shapes])
        t.data.append({"scenario": sc, "num": a.name, "den": b.name,
                       **{m: (j.to_dict() if j else None) for m, j in js.items()}})
    if note := assumptions_note([j for c in cells for j in c[6].values()]):
        t.note += f" * {note}."
    return t


def sweet_spot_table(data: ReportData) -> Table:
    t = Table(["series", "smallest offload with native ctx", "best tg at native ctx",
               "Pareto front (context, tg)", "Pareto front (context, pp)"], title="Sweet spots")

    ax = "N" if data.axis == "ncmoe" else data.axis

    def pf(rows: list[Row], m: str) -> str:
        return "; ".join(f"{ax}={r.x_label} ({fmt_int(r.n_ctx)}, {r.median(m):.1f})" for r in rows) or "–"

    for s in data.series:
        fn = an.first_native(s.rows, data.native_ctx)
        bn = an.best_at_native(s.rows, data.native_ctx)
        ftg, fpp = an.pareto_front(s.rows, "tg"), an.pareto_front(s.rows, "pp")
        none = "native context unknown" if not data.native_ctx else "never reached"
        t.rows.append([s.name,
                       f"{ax}={fn.x_label}: {fmt_int(fn.n_ctx)} ctx, tg {fmt_speed(fn, 'tg')}" if fn else none,
                       f"{ax}={bn.x_label}: tg {fmt_speed(bn, 'tg')}" if bn else none,
                       pf(ftg, "tg"), pf(fpp, "pp")])
        t.data.append({"series": s.name, "first_native": fn.x if fn else None,
                       "best_native": bn.x if bn else None,
                       "pareto_tg": [r.x for r in ftg], "pareto_pp": [r.x for r in fpp]})
    return t


def anomaly_table(found: list[an.Anomaly]) -> Table:
    axis = found[0].row.axis if found else "ncmoe"
    t = Table(["series", "metric", axis, f"beats {axis}", "centres (K×R)", "ratio", "full-attn layers moved"],
              title="Anomalies")
    for a in found:
        j = a.judgement
        t.rows.append([a.row.series, LABELS[a.metric], a.row.x_label, a.neighbour.x_label,
                       f"{j.b.centre:.1f} ({j.b.shape}) vs {j.a.centre:.1f} ({j.a.shape})", fmt_ratio(j),
                       ", ".join(str(x) for x in a.full_attn_moved) or "none"])
        t.data.append({"series": a.row.series, "metric": a.metric, "ncmoe": a.row.ncmoe, "ngl": a.row.ngl,
                       "neighbour": a.neighbour.x, **j.to_dict(), "full_attn_moved": list(a.full_attn_moved)})
    return t


def device_bandwidth(s: Series, env: Environment) -> tuple[str, float | None]:
    """(device name, memory bandwidth GB/s or None) for a series' backend, from the run's env: the CPU's
    measured RAM bandwidth, or the theoretical bandwidth of the NVIDIA GPU the build's device names."""
    if s.backend.lower() == "cpu":
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
            rp = an.roofline(r, facts, bw, prompt_tokens=data.plan.prompt_tokens_target,
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


def _fmt_value(v: Any) -> str:
    if isinstance(v, dict | list):
        return json.dumps(v, sort_keys=True, default=str)
    if isinstance(v, float):
        return f"{v:,.4g}" if abs(v) < 1e6 else f"{v:,.0f}"
    if isinstance(v, int) and not isinstance(v, bool):
        return f"{v:,}"
    return str(v)


def kv_table(d: dict, title: str) -> Table:
    t = Table(["key", "value"], title=title)
    for k in sorted(d):
        t.rows.append([str(k), _fmt_value(d[k])])
        t.data.append({"key": k, "value": d[k]})
    return t


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
        parts.append(_fmt_value(rest))
    return "; ".join(parts) or "–"


def builds_table(data: ReportData) -> Table:
    t = Table(["series", "backend", "pin", "commit", "flags", "toolchain", "capabilities"], title="Builds")
    for s in data.series:
        b = s.build or {}
        t.rows.append([s.name, display_name(s.backend), str(b.get("pin") or "–"), str(b.get("commit") or "–"),
                       " ".join(f"{k}={v}" for k, v in sorted((b.get("flags") or {}).items())) or "–",
                       _fmt_value(b.get("toolchain")) if b.get("toolchain") else "–",
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


# ---- sections ---------------------------------------------------------------------------------
def _flags(data: ReportData, found: list[an.Anomaly]) -> dict[int, list[str]]:
    """Per row (by id): why it is marked in its points table (anomaly, Pareto front)."""
    flags: dict[int, list[str]] = {}
    for a in found:
        flags.setdefault(id(a.row), []).append(
            f"beats {'N' if data.axis == 'ncmoe' else data.axis}={a.neighbour.x_label} on {a.metric}")
    for s in data.series:
        for r in an.pareto_front(s.rows, "tg"):
            flags.setdefault(id(r), []).append("Pareto (ctx, tg)")
    return flags


def summary_section(data: ReportData, full: ReportData, min_effect: float) -> Section:
    """Summary: scenarios, backend ratios and every note a reader needs before the numbers."""
    summ = Section("summary", "Summary", intro=(
        f"Native context: {fmt_int(data.native_ctx)} tokens." if data.native_ctx
        else "Native context unknown (no n_ctx_train in the model facts or points)."))
    if not any(r.ok for r in full.all_rows):
        summ.absent = "every point failed, so there is nothing to summarise; see Failed points"
    else:
        summ.tables.append(summary_table(data))
        rt = ratio_table(data, min_effect)
        if rt is None:
            summ.notes.append("Comparison between backends absent: this run has only one series "
                              f"({data.series[0].name}).")
        elif not rt.rows:
            summ.notes.append("Comparison between backends absent: no scenario has an ok point in two series.")
        else:
            summ.tables.append(rt)
    if full is not data:
        summ.notes.append("This run measured every point with llama-server and llama-bench (`--engine both`): the "
                          "summary, sweet spots and ratios use llama-server; see Engine cross-check.")
    for v in full.reproductions:
        summ.notes.append(f"Reproduction (run {v['parent']} → run {v['child']}): {v['line']}.")
    marked = [(s.name, r.ncmoe, row_flags(r)) for s in full.series for r in s.rows if row_flags(r)]
    if marked:
        summ.notes.append(f"{len(marked)} point(s) ran throttled, loaded or shared (see Measurement conditions): "
                          + ", ".join(f"{n} ncmoe {m} ({', '.join(f)})" for n, m, f in marked[:6]) + ".")
    if launches_of(full) < 2 and full.run.kind == "sweep":
        summ.notes.append("Between-process spread was not measured (one server start per point); see Replication.")
    summ.notes += drift_notes(drift_flags(full.points))
    summ.notes += machine_notes(full)
    summ.notes.extend(context_notes(full))
    summ.notes.extend(output_guard_notes(full))
    return summ


def sweet_spot_section(data: ReportData, any_ok: bool) -> Section:
    sweet = Section("sweet-spots", "Sweet spots", intro=(
        f"The smallest offload ({'ncmoe' if data.axis == 'ncmoe' else 'fewest layers off the device'}) that still "
        "fits the native context, the fastest generation at "
        "native context, and the Pareto fronts: points no other point beats on both context and speed."))
    if any_ok:
        sweet.tables.append(sweet_spot_table(data))
    else:
        sweet.absent = "no point succeeded"
    return sweet


def anomaly_section(data: ReportData, found: list[an.Anomaly], min_effect: float) -> Section:
    anom = Section("anomalies", "Anomalies", intro=(
        "Points that break their series' trend: significantly faster than the adjacent point the trend says "
        "should be at least as fast — the one with less offload where speed falls as layers move to the host "
        f"({'lower ncmoe' if data.axis == 'ncmoe' else 'higher ngl'}), the one with more offload where it rises "
        "(a device slower than the host), both where the judge does not find the series' two ends different. "
        f"Each is the judge's verdict 'differs' (faster by more than {min_effect:.0%}) on server starts, kept "
        "only where it survives Benjamini–Hochberg (false discovery rate 5 %) over every neighbour comparison of "
        "the report (a verdict marked * "
        "comes from a point with fewer than 3 starts and assumes a between-start spread). 'Full-attn layers moved' lists the "
        "full-attention layers whose experts went to the CPU between the two points."
        + (f" Full-attention layers (0-based): {', '.join(map(str, data.full_attn_layers))}."
           if data.full_attn_layers else " The model facts do not name its full-attention layers.")))
    ok = [r for r in data.all_rows if r.ok]
    if found:
        anom.tables.append(anomaly_table(found))
        if note := assumptions_note([a.judgement for a in found]):
            anom.notes.append(f"* {note}.")
    elif not ok:
        anom.absent = "no point succeeded"
    else:
        most = max((r.starts("tg").k for r in ok), default=0)
        anom.absent = ("none found" if most >= 3 else
                       f"none found; points have at most {most} server start(s), so only a jump beyond the assumed "
                       "between-start spread can show (measure with --launches auto or 3+ to judge smaller ones)")
    return anom


def roofline_section(data: ReportData) -> Section:
    rt_, why = roofline_table(data)
    return Section("roofline", "Roofline (token generation)", intro=(
        "Bytes read per generated token = weights read per token (+ recurrent state) + kv_bytes_per_token_ctx × context used "
        "(+ kv_bytes_per_token_swa × min(context used, sliding window) for sliding-window layers) "
        "(prompt tokens + n_predict/2); × tg = achieved bandwidth, against the device's memory bandwidth "
        "(GPUs: theoretical, from NVML; the CPU: host RAM copy bandwidth measured when the run started). "
        "With experts offloaded (ncmoe > 0) part of the reads come from system RAM, so the GPU's peak is "
        "not the only bound."), tables=[rt_] if rt_ else [], absent=why)


def provenance_section(data: ReportData) -> Section:
    """Builds, environment, model download and facts, runtime quirks, plan, commands."""
    prov = Section("provenance", "Provenance", tables=[builds_table(data)])
    env = data.env.to_json()
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


def build_sections(data: ReportData, plots: list, *, min_effect: float = 0.05) -> list[Section]:
    """The whole report, in reading order. With ``--engine both`` the summary, sweet spots and
    anomalies read the llama-server series (``data``); the rest reads every series (``full``)."""
    full = data
    if len({s.key[1] for s in data.series}) > 1 and any(s.key[1] == "server" for s in data.series):
        data = dataclasses.replace(data, series=[s for s in data.series if s.key[1] == "server"])
    priors = {(s.name, m): s.prior(m) for s in full.series for m in ("tg", "pp")}
    found = an.anomalies(full.all_rows, min_effect=min_effect, full_attn_layers=full.full_attn_layers, priors=priors)
    flags = _flags(full, found)
    out: list[Section] = [h for h in (headline_section(data, min_effect),) if h is not None]
    out += [s for s in (matrix_section(data, min_effect),) if s is not None]   # bench --variant runs
    out.append(summary_section(data, full, min_effect))
    if line := remeasure_line(full):   # first thing read: whether these numbers survived a re-measurement
        out[0].intro = f"{line} {out[0].intro}".strip()
    out += [s for s in (reproduction_section(full), crosscheck_section(full)) if s is not None]
    out += [sweet_spot_section(data, any(r.ok for r in full.all_rows)), anomaly_section(full, found, min_effect)]
    out.append(Section("plots", "Plots", plots=list(plots),
                       absent=None if plots else "no point succeeded, so there is nothing to plot"))
    out += [host_memory_section(full), conditions_section(full)]
    for s in full.series:
        out.append(Section(f"points-{len(out)}", f"Points: {s.name}",
                           intro=("Speeds: centre (geometric mean of the start medians) with a 95 % CI from ≥ 3 server "
                              "starts, the range of 2 starts, or one start's median (between-start spread unknown); "
                              "K×R = starts × requests per start, warm-ups discarded."),
                           tables=[points_table(s, full.native_ctx, flags)]))
    if full.run.kind == "sweep":
        out.append(replication_section(full))
    ft = failed_table(full)
    out.append(Section("failed", "Failed points", tables=[ft] if ft.rows else [],
                       absent=None if ft.rows else "no point failed"))
    out += [roofline_section(full), provenance_section(full)]
    if full.probes:
        out.append(Section("probes", "Probes (compare / bisect)", tables=[probes_table(full)]))
    return out


# ---- measurement conditions, host memory, engine cross-check, reproduction ---------------------------

CROSSCHECK_BAND = (0.9, 1.1)


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


def host_memory_section(data: ReportData) -> Section:
    sec = Section("host-memory", "Host memory: how much RAM is needed", intro=(
        "Peak RSS counts the model file's pages that llama.cpp mmaps, including those of layers that run on the "
        "GPU and were only read once at load: the kernel can drop such file-backed pages and re-read them. "
        "Anonymous memory (buffers, KV cache, anything copied) it cannot drop. So: RAM needed ≈ peak anonymous "
        "memory + the CPU-side weights (llama.cpp's host model buffer; file-backed with mmap) — below that the "
        "CPU-side experts are re-read from disk on every token. `--mlock` keeps the mapped weights resident and "
        "`--no-mmap` copies them into anonymous memory; both are options (`--extra`), not the default."))
    t = Table(["series", "ncmoe", "peak RSS MiB", "anonymous MiB", "file-backed MiB", "CPU-side weights MiB",
               "≈ RAM needed MiB"], title="Host memory per point (peaks over the point, process tree)")
    for s in data.series:
        for r in s.ok_rows:
            if r.rss_anon_mib is None and r.rss_file_mib is None:
                continue
            cpu_w = r.host_mem.model if r.host_mem else None
            need = None
            if r.rss_anon_mib is not None:
                need = r.rss_anon_mib + (cpu_w if cpu_w is not None else (r.rss_file_mib or 0.0))
            t.rows.append([s.name, str(r.ncmoe), fmt_mib(r.rss_mib), fmt_mib(r.rss_anon_mib), fmt_mib(r.rss_file_mib),
                           fmt_mib(cpu_w), fmt_mib(need)])
            t.data.append({"series": s.name, "ncmoe": r.ncmoe, "rss_mib": r.rss_mib, "anon_mib": r.rss_anon_mib,
                           "file_mib": r.rss_file_mib, "cpu_weights_mib": cpu_w, "need_mib": need})
    if t.rows:
        t.note = ("≈ RAM needed = anonymous + CPU-side weights (or + file-backed where llama.cpp printed no "
                  "memory breakdown).")
        sec.tables.append(t)
    else:
        sec.absent = "anonymous / file-backed memory was not recorded (older run, or not Linux)"
    return sec


def _bench_values(p: Any, metric: str, depth: int | None) -> Starts:
    """llama-bench samples of ``metric`` (pp/tg) at ``depth`` (``None``: the deepest), by start."""
    tests = {s.test for s in p.samples if not s.warmup and s.test.startswith(metric) and "+" not in s.test}

    def d(t: str) -> int:
        return int(t.split("@ d")[1]) if "@ d" in t else 0

    if not tests:
        return Starts(())
    want = max(d(t) for t in tests) if depth is None else depth
    chosen = [t for t in tests if d(t) == want]
    return Starts.of(p.launch_groups(f"{metric}_tps", chosen[0])) if chosen else Starts(())


def crosscheck_table(data: ReportData) -> Table | None:
    """Server / llama-bench ratios for pp (depth 0) and tg (at the deepest depth = the prompt) per point."""
    by = {(s.key[0], s.key[2]): {} for s in data.series}
    for s in data.series:
        by[(s.key[0], s.key[2])][s.key[1]] = s
    t = Table(["series", "ncmoe", "server pp", "llama-bench pp", "pp ratio", "server tg", "llama-bench tg @ depth",
               "tg ratio", "flag"], title="Engine cross-check: llama-server / llama-bench")
    lo, hi = CROSSCHECK_BAND
    for engines in by.values():
        srv, lb = engines.get("server"), engines.get("llama-bench")
        if srv is None or lb is None:
            continue
        lb_rows = {(r.ncmoe, r.ngl): r for r in lb.ok_rows}
        for r in srv.ok_rows:
            b = lb_rows.get((r.ncmoe, r.ngl))
            if b is None or b.point is None:
                continue
            bpp, btg = estimate(_bench_values(b.point, "pp", 0)), estimate(_bench_values(b.point, "tg", None))
            spp, stg = r.estimate("pp"), r.estimate("tg")
            rp = spp.centre / bpp.centre if spp and bpp else None
            rt = stg.centre / btg.centre if stg and btg else None
            out = [f"{m} {x:.2f}" for m, x in (("pp", rp), ("tg", rt)) if x is not None and not lo <= x <= hi]
            t.rows.append([srv.name, str(r.ncmoe), spp.fmt() if spp else "–", bpp.fmt() if bpp else "–",
                           f"{rp:.2f}" if rp else "–", stg.fmt() if stg else "–", btg.fmt() if btg else "–",
                           f"{rt:.2f}" if rt else "–", ("⚠ outside 0.9–1.1: " + ", ".join(out)) if out else ""])
            t.data.append({"series": srv.name, "ncmoe": r.ncmoe, "pp_ratio": rp, "tg_ratio": rt, "flagged": bool(out)})
    return t if t.rows else None


def crosscheck_section(data: ReportData) -> Section | None:
    if len({s.key[1] for s in data.series}) < 2:
        return None
    sec = Section("crosscheck", "Engine cross-check", intro=(
        "Each point was also measured with llama-bench at the same offload (`--n-cpu-moe`), the prompt size as "
        "`-p` and a depth equal to the prompt (`-d`), so its tg runs with as much context as the server's. "
        "Ratios outside 0.9–1.1 are flagged. The summary, sweet spots and ratios above use the llama-server engine."))
    t = crosscheck_table(data)
    if t is None:
        sec.absent = "no point has an ok measurement from both engines"
    else:
        n = sum(1 for d in t.data if d["flagged"])
        sec.notes.append(f"{n} of {len(t.data)} point(s) have a server / llama-bench ratio outside 0.9–1.1.")
        sec.tables.append(t)
        sec.tables += gap_tables(data)   # the gap split into depth, sampler chain, HTTP and a residual
    return sec


def reproduction_section(data: ReportData) -> Section | None:
    if not data.reproductions:
        return None
    sec = Section("reproduction", "Reproduction", intro=(
        "`llamaforge reproduce` re-measured points of a sweep with the same builds, model and options. Each metric "
        "is judged on server starts (re-run over first run): same within the margin (the ratio's CI lies inside "
        "it), differs (outside), inconclusive (it spans both: the starts cannot tell, which is no pass). A point "
        "reproduces when pp and tg are both the same; the family of all verdicts is controlled with Holm's method. "
        "Conditions: GPU 0's SM clock and the host's load average (medians while the point was measured) and the "
        "telemetry flags, first run / re-run."))
    for v in data.reproductions:
        role = "this run re-measures" if v["child"] == data.run.id else "re-measured by"
        other = v["parent"] if v["child"] == data.run.id else v["child"]
        sec.notes.append(f"Run {data.run.id} {role} run {other}: **{v['line']}**")
        t = Table(["point", "status", "pp first → re-run (K×R)", "pp change", "tg first → re-run (K×R)", "tg change",
                   "conditions first / re-run"], title=f"run {v['parent']} → run {v['child']}")
        for pc in v["points"]:
            cells = []
            for m in ("pp", "tg"):
                mc = (pc.get("metrics") or {}).get(m) or {}
                cells += [_reproduce_cell(mc), _change_cell(mc)]
            first, again = pc.get("conditions") or ("", "")
            t.rows.append([pc["name"], pc["status"] + (f" ({pc['note']})" if pc.get("note") else ""), *cells,
                           f"{first or '–'} / {again or '–'}"])
            t.data.append(pc)
        sec.tables.append(t)
    if note := _not_remeasured_note(data):
        sec.notes.append(note)
    return sec


def _reproduce_cell(mc: dict) -> str:
    """``161.0 (2×2) → 150.2 (3×2)`` from a stored metric check (old stores kept ``median``, new ``centre``)."""
    a, b = mc.get("a"), mc.get("b")
    if not a or not b:
        return "–"

    def one(d: dict) -> str:
        c = d.get("centre", d.get("median"))
        shape = d.get("shape") or (f"n={d['n']}" if d.get("n") else "")
        return f"{c:,.1f}" + (f" ({shape})" if shape else "")

    return f"{one(a)} → {one(b)}"


def _change_cell(mc: dict) -> str:
    """``+20.4 % inconclusive`` / ``-8.0 % [-10.1, -5.9] differs`` (the judge's verdict; older stores: the change)."""
    if mc.get("change") is None:
        return "–"
    j = mc.get("judgement") or {}
    if not j:
        return f"{mc['change']:+.1%}"
    if j.get("p_differs") is None:   # < 3 starts on a side: no interval, the verdict assumes a spread
        return f"{mc['change']:+.1%} {j.get('verdict')}" + ("*" if j.get("verdict") != "inconclusive" else "")
    return f"{mc['change']:+.1%} [{j['low'] - 1:+.1%}, {j['high'] - 1:+.1%}] {j.get('verdict')}"


def remeasure_line(data: ReportData) -> str | None:
    """Whether this sweep's numbers survived a re-measurement, said where the report starts: a run that no
    ``reproduce`` run measured again says so (its numbers rest on one session's server starts)."""
    if data.run.kind != "sweep" or any(v["child"] == data.run.id for v in data.reproductions):
        return None
    if any(v["parent"] == data.run.id for v in data.reproductions):
        return ("Re-measured: llamaforge reproduce measured points of this run again; the Reproduction section "
                "says which held and which did not.")
    return ("Not re-measured: no reproduce run of this run is in the store, so every number below rests on "
            "this run's own server starts (one session, one machine); sessions can differ by more than starts do. "
            f"'llamaforge reproduce {data.run.id}' measures it again and judges each point.")


def _not_remeasured_note(data: ReportData) -> str | None:
    """The run's points that none of its ``reproduce`` runs measured again: their numbers rest on this run's own
    server starts only, and the report says so rather than letting them pass as reproduced."""
    mine = [v for v in data.reproductions if v["parent"] == data.run.id and "not_remeasured" in v]
    if not mine:
        return None
    left = [n for n in mine[0]["not_remeasured"] if all(n in v["not_remeasured"] for v in mine[1:])]
    if not left:
        return "Every point of this run was re-measured by `reproduce`."
    return (f"Not re-measured by `reproduce`: {len(left)} point(s) ({', '.join(left)}); their numbers rest on this "
            "run's own server starts only (see *Replication and drift*).")
