"""Failure classification from log tails, readable log tails, memory breakdown parsing."""

import json

import pytest

from llamaforge.bench.engines.fit import parse_fit_output
from llamaforge.llamacpp.server import classify_failure, parse_memory_breakdown, read_log_tail


@pytest.mark.parametrize("tail, rc, phase, want", [
    ("ggml_backend_cuda_buffer_type_alloc_buffer: allocating 2000 MiB: cudaMalloc failed: out of memory", 1, "load", "oom"),
    ("llama_model_load: error: failed to allocate buffer of size 123", 1, "load", "oom"),
    ("vk::Device::allocateMemory: ErrorOutOfDeviceMemory", -6, "request", "oom"),
    ("GGML_ASSERT(ne0 == n) failed", -6, "request", "crash"),
    ("llama_model_load: error loading model: corrupted", 1, "load", "crash"),
    ("error: invalid argument: --bogus", 1, "load", "error"),
    ("", -9, "load", "oom"),
    ("", -9, "request", "crash"),
    ("loading model ...", None, "load", "unhealthy"),
    ("slot update", None, "request", "hang"),
])
def test_failures_are_classified_from_the_log_tail_and_exit_status(tail, rc, phase, want):
    assert classify_failure(tail, returncode=rc, phase=phase) == want


def test_jsonl_log_lines_are_shown_as_text(tmp_path):
    log = tmp_path / "s.log"
    lines = [json.dumps({"type": "log", "level": "info", "msg": f"line {i}\n"}) for i in range(60)]
    lines.append("plain text line")
    log.write_text("\n".join(lines) + "\n")
    tail = read_log_tail(log, n=40).splitlines()
    assert len(tail) == 40
    assert tail[0] == "line 21" and tail[-1] == "plain text line"


def test_the_last_memory_breakdown_record_wins(tmp_path):
    log = tmp_path / "s.log"
    rec = lambda ctx: json.dumps({"type": "fit_memory_breakdown", "data": {"unit": "MiB", "rows": [  # noqa: E731
        {"kind": "device", "name": "CUDA0", "total": 24000, "free": 100, "self": 20000, "model": 18000,
         "context": ctx, "compute": 500},
        {"kind": "host", "name": "Host", "self": 900, "model": 800, "context": 0, "compute": 100}]}})
    log.write_text("\n".join([rec(1), '{"type":"log","msg":"x"}', rec(1500)]) + "\n")
    mb = parse_memory_breakdown(log)
    assert mb["devices"][0]["context"] == 1500 and mb["host"]["self"] == 900
    assert parse_memory_breakdown(tmp_path / "missing.log") is None


def test_fit_params_output_is_parsed():
    out = ('0.00.29 I llama_fit_params: printing fitted CLI arguments to stdout...\n'
           '-c 195328 -ngl -1 -ot "blk\\.0\\.ffn_(up|down|gate|gate_up)_(ch|)exps=CPU,'
           'blk\\.1\\.ffn_(up|down|gate|gate_up)_(ch|)exps=CPU"\n')
    r = parse_fit_output(out)
    assert r.ok and r.n_ctx == 195328 and r.ngl == -1 and len(r.overrides) == 2
    assert "2 layer(s) [0–1] → CPU" in r.placement()
    assert not parse_fit_output("E llama_fit_params: failed to fit CLI arguments to free memory, exiting...").ok
