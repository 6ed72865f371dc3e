"""A realistic fake sweep in a real Store, for the report tests (not collected: no ``test_`` prefix).

Built from the typed records (:mod:`llamaforge.records`) that real runs store, so a field the fake
sets is a field a real writer writes (the earlier fake used keys no writer produced, and hid that
the CPU roofline was always "unknown").

Two builds (CPU and Vulkan), ncmoe 0..8 of an 8-layer model whose full-attention layers are 3 and 7,
each point measured in four server starts (``launches``, the judge's unit of replication; with three,
the spike below survives Holm's method over the report's 30 comparisons only just) of five measured
requests (plus a warm-up per start): starts spread ±1 %, requests inside a start ±0.5 %. Vulkan:
ncmoe 0 fails (oom), context grows with ncmoe and reaches the native 32,768 at ncmoe 5, generation
slows with ncmoe except a spike at ncmoe 4 (clearly faster than ncmoe 3). CPU: native context
everywhere, slower.
"""

from __future__ import annotations

import random
from pathlib import Path

from llamaforge.records import (
    BuildManifest,
    Environment,
    GpuInfo,
    LaunchRecord,
    MemoryBreakdown,
    MemRow,
    ModelFacts,
    ModelSection,
    PointDetail,
    PointSpec,
    RunPlan,
)
from llamaforge.store import Point, Sample, Store

NATIVE = 32768
FACTS = ModelFacts(arch="qwen35moe", n_layers=8, full_attention_layers=[3, 7], n_ctx_train=NATIVE,
                   bytes_per_token_ctx0=400_000_000, kv_bytes_per_token_ctx=20480, params_total=1_000_000_000,
                   params_active=100_000_000, file_bytes=600_000_000)
ENV = Environment(gpus=[GpuInfo(name="llvmpipe (LLVM 15.0.6, 256 bits)", memory_total_mib=16000,
                                memory_bandwidth_gbps=40.0)],
                  cpu_model="Fake CPU", ram_bandwidth_gbps=20.0, ram_total_mib=16384, os="Linux")
VULKAN_CTX = {1: 8192, 2: 12288, 3: 16384, 4: 24576, 5: NATIVE, 6: NATIVE, 7: NATIVE, 8: NATIVE}


def _samples(rng: random.Random, pp: float, tg: float, n: int = 5, launches: int = 4) -> list[Sample]:
    out = []
    for launch in range(1, launches + 1):
        lp, lt = pp * rng.uniform(0.99, 1.01), tg * rng.uniform(0.99, 1.01)   # this start's level
        out.append(Sample(0, True, "", 512, 1.0, pp / 10, 64, 1.0, tg / 2, launch=launch))  # warm-up: slow, ignored
        for i in range(1, n + 1):
            out.append(Sample(i, False, "", 512, 1.0, lp * rng.uniform(0.995, 1.005), 64, 1.0,
                              lt * rng.uniform(0.995, 1.005), launch=launch))
    return out


def _launch_records(n: int, launches: int) -> list[dict]:
    """``detail.launches`` as the runner writes it: starts interleaved over the run (``seq``)."""
    return [LaunchRecord(launch=k, seq=100 * (k - 1) + n, status="ok", started=1000.0 * k + n,
                         finished=1000.0 * k + n + 30.0).to_json() for k in range(1, launches + 1)]


def _point(run_id: str, key: str, b: str, n: int, label: str, rng: random.Random, all_failed: bool,
           n_samples: int, launches: int) -> Point:
    cmd = ["llama-server", "-m", "/models/tiny.gguf", "-ncmoe", str(n), "--port", "0", "-np", "1"]
    p = Point(run_id, key, "server", ncmoe=n, label=label, n_ctx_train=NATIVE, prompt_tokens=512, n_predict=64,
              command=cmd)
    if all_failed or (b == "vulkan" and n == 0):
        p.status, p.failure_class, p.failure_detail = "failed", "oom", "ErrorOutOfDeviceMemory\nmore"
        return p
    speedup = 1.3 if label == "B" else 1.0  # a compare run's B side is clearly faster
    if b == "vulkan":
        p.n_ctx = VULKAN_CTX[n]
        tg = 60.0 - 4 * n + (12.0 if n == 4 else 0.0)
        pp = 900.0 - 60 * n
        p.vram_used_mib = 9000.0 - 700 * n
        p.mem_breakdown = MemoryBreakdown(
            devices=[MemRow("device", "Vulkan0", total=16000, free=6000, self_=8000 - 700 * n, model=6000 - 700 * n,
                            context=1500, compute=500)],
            host=MemRow("host", "Host", self_=600 + 90 * n, model=500 + 90 * n, context=0, compute=100)).to_json()
    else:
        p.n_ctx = NATIVE
        tg, pp = 20.0 - 0.5 * n, 150.0 - 2 * n
    p.rss_peak_mib = (1500.0 if b == "vulkan" else 1200.0) + 100 * n
    p.samples = _samples(rng, pp * speedup, tg * speedup, n_samples, launches)
    p.detail = PointDetail.from_json({"launches": _launch_records(n, launches)})
    return p


def build(
    tmp: Path, *, backends: tuple[str, ...] = ("cpu", "vulkan"), all_failed: bool = False, points: bool = True,
    n_samples: int = 5, db: str = "store.sqlite", kind: str = "sweep", labels: tuple[str, ...] = ("",),
    launches: int = 4,
) -> tuple[Store, str]:
    """``n_samples``: measured requests per server start; ``launches``: server starts per point."""
    store = Store(tmp / db)
    plan = RunPlan(model=ModelSection(ref="synth:tiny-moe", path="/models/tiny.gguf", facts=FACTS),
                   backends=list(backends), points=[PointSpec(n) for n in range(9)], engine="server",
                   repeats=n_samples, launches=launches, prompt_tokens=512, n_predict=64)
    run_id = store.new_run(kind, plan, command="llamaforge bench synth:tiny-moe", env=ENV, name="fake")
    rng = random.Random(7)
    for b in backends:
        key = f"{b}-0c1e570-abcd"
        caps = {"devices": [{"name": "Vulkan0: llvmpipe", "memory_mib": 16000}],
                "vulkan": {"coopmat": False, "coopmat2": False, "integer_dot": True, "matrix_cores": "none"}} \
            if b == "vulkan" else {"devices": []}
        store.add_build(BuildManifest(key, b, "dev", "0c1e57098" + "0" * 31,
                                      flags={"GGML_NATIVE": "ON", f"GGML_{b.upper()}": "ON"},
                                      toolchain={"cc": "gcc 12"}, capabilities=caps).to_json(), run_id)
        if not points:
            continue
        for label in labels:
            for n in range(9):
                store.record_point(_point(run_id, key, b, n, label, rng, all_failed, n_samples, launches))
    store.set_run_status(run_id, "done")
    return store, run_id
