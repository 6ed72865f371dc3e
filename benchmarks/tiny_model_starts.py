"""What a server start of each tiny synthetic model costs, and how far its starts land apart.

    python benchmarks/tiny_model_starts.py LLAMA_SERVER VOCAB_DIR [--presets tiny-qwen35moe,tiny-qwen35moe-bpe]
        [--starts 12] [--n-predict 32] [--threads 2]

LLAMA_SERVER is a CPU build's ``llama-server``; VOCAB_DIR the pin's ``models/`` folder (the tokenizers). For
each preset (generated into the model cache if missing): ``--starts`` fresh llama-server starts of one
``/completion`` each, printing the file size, the median start time (process start to ``/health``), the
median request time, the mean generation speed and its spread between starts (CV). STATUS.md's numbers for
the tiny models' vocabulary (session 2026-12-03 fifth) come from it, e.g. on the test build:

    python benchmarks/tiny_model_starts.py ~/.cache/llamaforge/test-builds/0c1e57098-cpu-*/out/bin/llama-server \\
        ~/.cache/llamaforge/test-workspace/vendor/0c1e57098/models
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

from llamaforge.llamacpp.server import ServerSession
from llamaforge.models.refs import resolve_model
from llamaforge.paths import Paths

PROMPT = "Once upon a time there was a dragon. " * 8


def measure(server: Path, model: Path, starts: int, n_predict: int, threads: int, log: Path) -> dict[str, float]:
    """Start times, request times and tg t/s of ``starts`` fresh starts of one request each."""
    t_start, t_req, tg = [], [], []
    for _ in range(starts):
        t0 = time.monotonic()
        s = ServerSession.start(server, ["-m", str(model), "-t", str(threads), "-c", "1024", "--no-webui"], log)
        t1 = time.monotonic()
        try:
            r = s.complete(PROMPT, n_predict, timeout=120)
        finally:
            t2 = time.monotonic()
            s.stop()
        t_start.append(t1 - t0)
        t_req.append(t2 - t1)
        tg.append(r["timings"]["predicted_per_second"])
    mean = statistics.fmean(tg)
    return {"start_s": statistics.median(t_start), "request_s": statistics.median(t_req), "tg": mean,
            "cv": statistics.stdev(tg) / mean if len(tg) > 1 else float("nan")}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("server", type=Path)
    ap.add_argument("vocab_dir", type=Path)
    ap.add_argument("--presets", default="tiny-qwen35moe,tiny-qwen35moe-bpe")
    ap.add_argument("--starts", type=int, default=12)
    ap.add_argument("--n-predict", type=int, default=32)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args(argv)
    paths = Paths.default()
    with tempfile.TemporaryDirectory() as tmp:
        for preset in a.presets.split(","):
            model = Path(resolve_model(f"synth:{preset}", paths, vocab_dir=a.vocab_dir, progress=False))
            m = measure(a.server, model, a.starts, a.n_predict, a.threads, Path(tmp) / "server.log")
            print(f"{preset:<20} {model.stat().st_size / 2**20:5.0f} MiB  start {m['start_s']:.2f} s  "
                  f"request {m['request_s']:.2f} s  tg {m['tg']:.0f} t/s  CV between {a.starts} starts "
                  f"{m['cv'] * 100:.1f} %  ({a.n_predict} tokens a request, -t {a.threads})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
