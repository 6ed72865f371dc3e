"""Export a stored run: ``json`` (everything), ``csv`` (one row per sample) and ``jsonl`` in
llama-bench's own format, so llama.cpp's ``scripts/compare-llama-bench.py -i FILE.jsonl`` reads it.

One list of fields drives the llama-bench rows (:data:`LLAMA_BENCH_FIELDS`, the order llama-bench
prints). llama-bench points are exported as llama-bench printed them; server points become two
rows per point (a ``pp`` test with ``n_gen=0`` and a ``tg`` test with ``n_prompt=0``), with values
llama-server used by default where llama-bench has a setting (``n_batch`` 2048, ``n_ubatch`` 512,
f16 KV cache, ...). ``compare-llama-bench.py`` requires every key property plus ``build_commit``,
``test_time`` and ``avg_ts``; extra keys (``engine``, ``n_ctx``) are ignored by it.

The ``json`` and ``csv`` columns of a point and a sample are the fields of :class:`store.Point` and
:class:`store.Sample` (:data:`store.POINT_FIELDS`, :data:`store.POINT_CSV`, ...): the list the store's columns
and the fleet import (:mod:`llamaforge.fleet.merge`) are derived from too.
"""

from __future__ import annotations

import csv
import io
import json
import statistics
import time
from typing import Any

from .. import records
from ..errors import StoreError
from ..findings.labels import display_name
from ..records import BuildManifest, Environment, PointDetail, RunPlan
from ..store import POINT_CSV, POINT_FIELDS, POINT_KEYS, SAMPLE_CSV, SAMPLE_FIELDS, Point, Store
from .summary import point_summary

FORMATS = ("json", "csv", "jsonl")

LLAMA_BENCH_FIELDS = [
    "build_commit", "build_number", "cpu_info", "gpu_info", "backends", "model_filename", "model_type",
    "model_size", "model_n_params", "n_batch", "n_ubatch", "n_threads", "cpu_mask", "cpu_strict", "poll",
    "type_k", "type_v", "n_gpu_layers", "n_cpu_moe", "split_mode", "main_gpu", "no_kv_offload", "flash_attn",
    "devices", "tensor_split", "tensor_buft_overrides", "load_mode", "embeddings", "no_op_offload",
    "fit_target", "fit_min_ctx", "n_prompt", "n_gen", "n_depth", "test_time", "avg_ns", "stddev_ns", "avg_ts",
    "stddev_ts", "samples_ns", "samples_ts",
]

def _point_value(v: Any) -> Any:
    """A point field as exported: its detail as the store holds it (:meth:`records.PointDetail.exported`)."""
    return v.exported() if isinstance(v, PointDetail) else v


def _point_dict(p: Point) -> dict:
    """A point in the JSON export: every field of :class:`store.Point` under its key (:data:`store.POINT_KEYS`:
    the detail as ``extra``), its samples' (:data:`store.SAMPLE_FIELDS`) and the judge's summary."""
    return {**{POINT_KEYS[c]: _point_value(getattr(p, c)) for c in POINT_FIELDS},
            "summary": point_summary(p) if p.samples else None,
            "samples": [{c: getattr(s, c) for c in SAMPLE_FIELDS} for s in p.samples]}


def to_json(store: Store, run_id: str) -> str:
    run = store.get_run(run_id)
    doc = {"run": {"id": run.id, "kind": run.kind, "name": run.name, "status": run.status, "created": run.created,
                   "updated": run.updated, "command": run.command, "plan": records.to_json(run.plan),
                   "env": records.to_json(run.env),
                   "summary": records.to_json(run.summary) if run.summary is not None else None},
           "builds": store.builds_for_run(run.id),
           "points": [_point_dict(p) for p in store.points(run.id)]}
    return json.dumps(doc, indent=2, sort_keys=True, default=str)


def to_csv(store: Store, run_id: str) -> str:
    """One row per sample (warm-ups included, flagged), failed points as one row without sample."""
    run = store.get_run(run_id)
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow([*POINT_CSV, *SAMPLE_CSV])
    for p in store.points(run.id):
        base = [getattr(p, c) for c in POINT_CSV]
        if not p.samples:
            w.writerow(base + [""] * len(SAMPLE_CSV))
        for s in p.samples:
            w.writerow(base + [int(getattr(s, c)) if c == "warmup" else getattr(s, c) for c in SAMPLE_CSV])
    return buf.getvalue()


def _sd(xs: list[float]) -> float:
    return statistics.stdev(xs) if len(xs) > 1 else 0.0


def _iso(t: float | None) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t or 0))


def _server_rows(p: Point, run_plan: RunPlan, env: Environment, build: BuildManifest) -> list[dict]:
    facts = run_plan.facts
    gpus = ", ".join(g.name or "" for g in env.gpus)
    fitt = run_plan.fit.fitt_mib
    margins = run_plan.fit.margins_mib or []
    meta = p.detail.model_meta or {}
    common: dict[str, Any] = {
        "build_commit": str(build.commit or "")[:9], "build_number": int(build.build_number or 0),
        "cpu_info": env.cpu_model or "", "gpu_info": gpus,
        "backends": display_name(build.backend) if build.backend else "",
        "model_filename": str(run_plan.model.path or ""),
        "model_type": f"{facts.arch or '?'} {meta.get('ftype') or ''}".strip(),
        "model_size": int(facts.file_bytes or meta.get("size") or 0),
        "model_n_params": int(facts.params_total or meta.get("n_params") or 0),
        "n_batch": 2048, "n_ubatch": 512, "n_threads": int(run_plan.threads or env.cpu_cores_logical or 0),
        "cpu_mask": "0x0", "cpu_strict": False, "poll": 50, "type_k": "f16", "type_v": "f16",
        "n_gpu_layers": p.ngl, "n_cpu_moe": p.ncmoe, "split_mode": "layer", "main_gpu": 0, "no_kv_offload": False,
        "flash_attn": -1, "devices": "auto", "tensor_split": "0.00", "tensor_buft_overrides": "none",
        "load_mode": "auto", "embeddings": False, "no_op_offload": 0,
        "fit_target": int(fitt if fitt is not None else (margins[0] if margins else 0)), "fit_min_ctx": 0,
        "n_depth": 0, "test_time": _iso(p.started), "engine": "llama-server", "n_ctx": p.n_ctx,
    }
    rows = []
    measured = [s for s in p.samples if not s.warmup]
    for _kind, tps, ms, n_prompt, n_gen in (
            ("pp", [s.pp_tps for s in measured], [s.prompt_ms for s in measured], p.prompt_tokens or 0, 0),
            ("tg", [s.tg_tps for s in measured], [s.predicted_ms for s in measured], 0, p.n_predict or 0)):
        ts = [float(v) for v in tps if v is not None]
        ns = [int(v * 1e6) for v in ms if v is not None]
        if not ts:
            continue
        rows.append({**common, "n_prompt": n_prompt, "n_gen": n_gen, "avg_ns": int(statistics.mean(ns)) if ns else 0,
                     "stddev_ns": int(_sd([float(x) for x in ns])) if ns else 0, "avg_ts": statistics.mean(ts),
                     "stddev_ts": _sd(ts), "samples_ns": ns, "samples_ts": ts})
    return rows


def llama_bench_rows(store: Store, run_id: str) -> list[dict]:
    """llama-bench result objects for every ok point of a run (fields in llama-bench's order)."""
    run = store.get_run(run_id)
    builds = {b["key"]: BuildManifest.from_json(b) for b in store.builds_for_run(run.id)}
    plan, env = run.plan, run.env
    rows: list[dict] = []
    for p in store.points(run.id):
        if p.status != "ok":
            continue
        if p.engine == "llama-bench":
            for obj in p.detail.llama_bench or []:
                rows.append({**obj, "engine": "llama-bench", "n_ctx": p.n_ctx})
        elif p.engine == "server":
            rows.extend(_server_rows(p, plan, env, builds.get(p.build_key) or BuildManifest(p.build_key, "", "", "")))
    ordered = []
    for r in rows:
        o = {k: r[k] for k in LLAMA_BENCH_FIELDS if k in r}
        o.update({k: v for k, v in r.items() if k not in o})
        ordered.append(o)
    return ordered


def to_jsonl(store: Store, run_id: str) -> str:
    return "".join(json.dumps(r) + "\n" for r in llama_bench_rows(store, run_id))


def export_run(store: Store, run_id: str, fmt: str) -> str:
    """The run in ``fmt`` (json | csv | jsonl) as text."""
    fmt = fmt.lower()
    if fmt not in FORMATS:
        raise StoreError(f"unknown export format {fmt!r}", f"use one of: {', '.join(FORMATS)}")
    return {"json": to_json, "csv": to_csv, "jsonl": to_jsonl}[fmt](store, run_id)
