"""Exports: JSON (everything), CSV (one row per sample), llama-bench JSONL that llama.cpp's
compare-llama-bench.py reads."""

from __future__ import annotations

import csv
import importlib.util
import io
import json
import os
import sys
import types
from pathlib import Path

import pytest

from llamaforge.bench.export import LLAMA_BENCH_FIELDS, export_run, llama_bench_rows
from llamaforge.errors import StoreError
from llamaforge.store import Point, Sample, Store

SRC = Path(os.environ.get("LLAMAFORGE_DEV_SRC", "/root/.cache/llamaforge/dev/src-0c1e570"))


def _run(store: Store, commit: str, tg: float) -> str:
    plan = {"model": {"ref": "m.gguf", "path": "/m/m.gguf", "facts": {"arch": "qwen35moe", "file_bytes": 1000,
                                                                        "params_total": 500}},
            "threads": 2, "fit": {"fitt_mib": None}, "backends": ["cpu"]}
    run = store.new_run("sweep", plan, env={"cpu_model": "Test CPU", "gpus": []})
    key = f"cpu-{commit}"
    store.add_build({"key": key, "backend": "cpu", "pin": "p", "commit": commit}, run)
    for n in (0, 2):
        p = Point(run, key, "server", ncmoe=n, n_ctx=4096, prompt_tokens=250, n_predict=16, started=1.8e9)
        p.samples = [Sample(0, True, prompt_n=250, prompt_ms=500, pp_tps=500.0, predicted_n=16, predicted_ms=800,
                            tg_tps=20.0)]
        p.samples += [Sample(i, False, prompt_n=250, prompt_ms=100, pp_tps=2500.0 + i, predicted_n=16,
                             predicted_ms=160, tg_tps=tg + i) for i in (1, 2, 3)]
        store.record_point(p)
    store.record_point(Point(run, key, "server", ncmoe=4, status="failed", failure_class="oom", log_tail="x"))
    return run


@pytest.fixture
def store(tmp_path):
    s = Store(tmp_path / "s.sqlite")
    yield s
    s.close()


def test_json_export_holds_plan_env_points_samples_and_summaries(store):
    run = _run(store, "aaaaaaaaa", 100.0)
    doc = json.loads(export_run(store, run, "json"))
    assert doc["run"]["plan"]["model"]["path"] == "/m/m.gguf" and doc["run"]["env"]["cpu_model"] == "Test CPU"
    assert len(doc["points"]) == 3 and doc["builds"][0]["commit"] == "aaaaaaaaa"
    ok = [p for p in doc["points"] if p["status"] == "ok"]
    tg = ok[0]["summary"]["server"]["tg"]   # the judge's estimate: one server start of 3 requests
    assert (tg["k"], tg["n_requests"], tg["shape"]) == (1, 3, "1×3") and tg["centre"] == pytest.approx(102.0)
    assert tg["kind"] == "single" and tg["spread"] is None   # one start: the between-start spread is unknown


def test_csv_export_has_one_row_per_sample_and_flags_warmups(store):
    run = _run(store, "aaaaaaaaa", 100.0)
    rows = list(csv.DictReader(io.StringIO(export_run(store, run, "csv"))))
    assert len(rows) == 2 * 4 + 1
    assert sum(r["warmup"] == "1" for r in rows) == 2
    assert [r["failure_class"] for r in rows if r["status"] == "failed"] == ["oom"]


def test_jsonl_export_uses_llama_bench_fields_without_warmups_or_failed_points(store):
    run = _run(store, "aaaaaaaaa", 100.0)
    rows = llama_bench_rows(store, run)
    assert len(rows) == 4  # pp + tg for the two ok points
    assert list(rows[0])[:len(LLAMA_BENCH_FIELDS)] == LLAMA_BENCH_FIELDS
    tg = [r for r in rows if r["n_gen"]]
    assert tg[0]["samples_ts"] == [101.0, 102.0, 103.0] and tg[0]["avg_ts"] == pytest.approx(102.0)
    assert {r["n_cpu_moe"] for r in rows} == {0, 2} and rows[0]["n_prompt"] == 250


def test_unknown_format_is_a_clear_error(store):
    run = _run(store, "aaaaaaaaa", 100.0)
    with pytest.raises(StoreError, match="unknown export format"):
        export_run(store, run, "xml")


@pytest.mark.skipif(not (SRC / "scripts" / "compare-llama-bench.py").exists(), reason="llama.cpp source tree absent")
def test_compare_llama_bench_reads_the_jsonl_export(store, tmp_path, monkeypatch, capsys):
    pytest.importorskip("git")
    old, new = _run(store, "aaaaaaaaa", 100.0), _run(store, "bbbbbbbbb", 120.0)
    f = tmp_path / "runs.jsonl"
    f.write_text(export_run(store, old, "jsonl") + export_run(store, new, "jsonl"))
    tables = []
    monkeypatch.setitem(sys.modules, "tabulate", types.SimpleNamespace(
        tabulate=lambda rows, *a, **k: tables.append(rows) or ""))
    monkeypatch.setattr(sys, "argv", ["compare-llama-bench.py", "--tool", "llama-bench", "-i", str(f),
                                      "-b", "aaaaaaaaa", "-c", "bbbbbbbbb"])
    monkeypatch.chdir(tmp_path)
    spec = importlib.util.spec_from_file_location("compare_llama_bench", SRC / "scripts" / "compare-llama-bench.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    rows = tables[-1]
    assert len(rows) == 4  # (pp, tg) × (ncmoe 0, 2) matched across the two commits
    speedups = sorted(float(r[-1]) for r in rows)
    assert speedups[0] == pytest.approx(1.0, abs=0.01) and speedups[-1] == pytest.approx(1.2, abs=0.03)
