"""How much of a sweep's wall time is orchestration, and what one server per point saves.

Runs a real sweep (tiny synthetic MoE on the CPU build by default) through ``run_sweep`` and splits
its wall time into what llama.cpp itself spends — Σ load (start → /health ok) + warm-up + measured
requests — and everything else (prompt building, server shutdown, monitoring, store writes,
progress). The goal is overhead < 5 % of the wall time.

Then it times the naive alternative on the same points: a fresh server for every single request
(start, wait healthy, one request, stop — as the seed did by hand) and prints the saving.

    python benchmarks/overhead.py [--model synth:tiny-qwen35moe] [--bin-dir DIR] [--points 0:8:2]
                                  [--repeats 3] [--prompt-tokens 512] [--n-predict 32] [--threads 2]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from llamaforge.bench.engines.server import server_args
from llamaforge.bench.external import external_build
from llamaforge.bench.plan import Plan, make_plan, make_points, read_facts
from llamaforge.bench.prompts import build_prompt
from llamaforge.bench.sweep import run_sweep
from llamaforge.llamacpp.server import ServerSession
from llamaforge.models import resolve_model
from llamaforge.paths import Paths
from llamaforge.store import Store

DEV_BIN = Path.home() / ".cache" / "llamaforge" / "dev" / "cpu" / "out" / "bin"
DEV_SRC = Path.home() / ".cache" / "llamaforge" / "dev" / "src-0c1e570"


def naive(plan: Plan, build, log_dir: Path) -> tuple[float, float]:  # noqa: ANN001
    """Wall time and Σ(load + request) of one fresh server per request (no warm-up, as by hand)."""
    t0 = time.monotonic()
    inner = 0.0
    prompt = None
    for spec in plan.points:
        for r in range(plan.repeats):
            s = ServerSession.start(build.binary("llama-server"), server_args(build, plan.model_path, spec, plan),
                                    log_dir / f"naive-{spec.ncmoe}-{r}.log", env=build.env)
            try:
                if prompt is None:
                    prompt = build_prompt(plan.prompt_tokens, tokenize=s.tokenize, apply_template=s.apply_template)
                t1 = time.monotonic()
                s.complete(prompt.tokens, plan.n_predict, timeout=plan.timeouts.request_s)
                inner += (s.t_load_s or 0) + time.monotonic() - t1
            finally:
                s.stop()
    return time.monotonic() - t0, inner


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="synth:tiny-qwen35moe")
    ap.add_argument("--bin-dir", default=str(DEV_BIN))
    ap.add_argument("--backend", default="cpu")
    ap.add_argument("--vocab-dir", default=str(DEV_SRC / "models"))
    ap.add_argument("--points", default="0:8:2")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--prompt-tokens", type=int, default=512)
    ap.add_argument("--n-predict", type=int, default=32)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--skip-naive", action="store_true")
    a = ap.parse_args()

    paths = Paths.default()
    model = Path(resolve_model(a.model, paths, vocab_dir=Path(a.vocab_dir)))
    facts = read_facts(model)
    build = external_build(Path(a.bin_dir), a.backend)
    plan = make_plan(model_ref=a.model, model_path=model, model_facts=facts,
                     points=make_points(a.points, n_layers=facts.n_layers), repeats=a.repeats,
                     prompt_tokens=a.prompt_tokens, n_predict=a.n_predict, threads=a.threads)
    with tempfile.TemporaryDirectory() as tmp, Store(Path(tmp) / "llamaforge.sqlite") as store:
        t0 = time.monotonic()
        run = run_sweep(plan, [build], store, progress=False)
        wall = time.monotonic() - t0
        pts = store.points(run)
        load = sum(p.t_load_s or 0 for p in pts)
        warm = sum(p.t_warmup_s or 0 for p in pts)
        meas = sum(p.t_measure_s or 0 for p in pts)
        inner = load + warm + meas
        over = wall - inner
        print(f"sweep: {len(pts)} points × {plan.repeats} requests (+1 warm-up), {model.name}, {build.key}")
        print(f"  wall time            {wall:8.2f} s")
        print(f"  Σ load               {load:8.2f} s  ({load / wall:6.1%})")
        print(f"  Σ warm-up            {warm:8.2f} s  ({warm / wall:6.1%})")
        print(f"  Σ measured requests  {meas:8.2f} s  ({meas / wall:6.1%})")
        print(f"  orchestration        {over:8.2f} s  ({over / wall:6.1%})  "
              "(env capture, prompt search, server stop, monitor, store)")
        ok = over / wall < 0.05
        print(f"  overhead < 5 %: {'yes' if ok else 'NO'}")
        if not a.skip_naive:
            nwall, ninner = naive(plan, build, Path(tmp))
            print(f"naive (fresh server per request, no warm-up): wall {nwall:.2f} s, Σ load+request {ninner:.2f} s")
            per_req = wall / (len(pts) * plan.repeats)
            nper_req = nwall / (len(pts) * plan.repeats)
            print(f"  per measured request: {per_req:.2f} s (one server per point) vs {nper_req:.2f} s (naive): "
                  f"saving {1 - wall / nwall:.0%} of the wall time, and every sample is warmed up")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
