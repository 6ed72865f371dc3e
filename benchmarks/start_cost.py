"""What a llama-bench start costs and what it tells, for several shapes of a start (tokens × requests).

    python benchmarks/start_cost.py LLAMA_BENCH MODEL [--shapes 32x3,32x1,96x1,64x3] [--rounds 30] [--threads 2]

Each round runs one start of every shape, in alternating order (so the machine's drift touches all alike):
``llama-bench -p 0 -n TOKENS -r REQUESTS`` with the quiet flags a bisection uses. Per shape it prints the
median tg, the spread **between starts** (CV of the per-start medians), the mean seconds a start takes, and
``cost`` = CV² × seconds: the machine time a verdict of a given precision takes, relative between shapes
(the starts needed grow with CV²). The real bisection and history tests take one request a start from it:
on the 2-vCPU CI VM (2026-12-04, the tiny bpe model, 30 rounds) 32 tokens × 3 requests gave CV 16.7 % at
0.80 s a start, × 1 request CV 15.6 % at 0.55 s — the start is what varies, not the request.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
import time

QUIET = ["--cpu-strict", "1", "--prio", "2", "--poll", "50"]


def parse_shapes(text: str) -> list[tuple[int, int]]:
    """``32x3,32x1`` → [(32, 3), (32, 1)] (tokens, requests)."""
    shapes = []
    for part in text.split(","):
        n, _, r = part.strip().partition("x")
        shapes.append((int(n), int(r or 1)))
    return shapes


def one_start(bench: str, model: str, n: int, r: int, threads: int) -> tuple[float | None, float]:
    """(median tg of the start's requests or None, seconds the start took)."""
    argv = [bench, "-m", model, "-p", "0", "-n", str(n), "-r", str(r), "-o", "jsonl", "-t", str(threads), *QUIET]
    t0 = time.monotonic()
    out = subprocess.run(argv, capture_output=True, text=True, timeout=600).stdout
    secs = time.monotonic() - t0
    for line in out.splitlines():
        with_tg = json.loads(line)
        if with_tg.get("n_gen"):
            return statistics.median(with_tg["samples_ts"]), secs
    return None, secs


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("bench", help="a CPU build's llama-bench")
    ap.add_argument("model", help="a GGUF (e.g. the tiny bpe model from the model cache)")
    ap.add_argument("--shapes", default="32x3,32x1,96x1,64x3", help="TOKENSxREQUESTS, comma-separated")
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args(argv)
    shapes = parse_shapes(args.shapes)
    tg: dict[tuple[int, int], list[float]] = {s: [] for s in shapes}
    secs: dict[tuple[int, int], list[float]] = {s: [] for s in shapes}
    for i in range(args.rounds):
        for s in (shapes if i % 2 == 0 else list(reversed(shapes))):
            v, t = one_start(args.bench, args.model, *s, args.threads)
            secs[s].append(t)
            if v is not None:
                tg[s].append(v)
    print(f"{'shape':>8} {'starts':>6} {'tg t/s':>8} {'CV':>7} {'s/start':>8} {'cost':>7}")
    for s in shapes:
        v = tg[s]
        if len(v) < 2:
            print(f"{s[0]}x{s[1]:<4} fewer than two starts gave tg", file=sys.stderr)
            continue
        logs = [math.log(x) for x in v]
        cv = statistics.stdev(logs)
        mean_s = statistics.fmean(secs[s])
        print(f"{s[0]:>5}x{s[1]:<2} {len(v):>6} {statistics.median(v):8.1f} {cv:7.1%} {mean_s:8.2f} "
              f"{cv * cv * 1e4 * mean_s:7.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
