#!/usr/bin/env python3
"""A fake ``llama-bench`` for unit tests (FAKE_MODE as in bench_fake_server.py: ok | amx-crash |
crash-always; FAKE_BENCH_OLD=1: no ``--repack`` option). Prints ``-o jsonl`` rows for -p/-n like the real one."""

import json
import os
import signal
import sys

MODE = os.environ.get("FAKE_MODE", "ok")
argv = sys.argv[1:]

if "--help" in argv:
    # FAKE_BENCH_OLD=1: a llama-bench from before --repack existed (llama.cpp 78d2f5246)
    print("-m, --model <filename>\n-p, --n-prompt <n>\n-n, --n-gen <n>\n-r, --repetitions <n>\n-o, --output <fmt>\n"
          "-ncmoe, --n-cpu-moe <n>\n-ub, --ubatch-size <n>\n-t, --threads <n>"
          + ("" if os.environ.get("FAKE_BENCH_OLD") else "\n--repack <0|1>"))
    sys.exit(0)


def opt(name, default):
    return argv[argv.index(name) + 1] if name in argv else default


if MODE in ("amx-crash", "crash-always"):
    print("load_tensors:          AMX model buffer size =    12.00 MiB", file=sys.stderr, flush=True)
    if MODE == "crash-always" or opt("--repack", "1") != "0":
        os.kill(os.getpid(), signal.SIGSEGV)

for n_prompt, n_gen in ((int(opt("-p", "512")), 0), (0, int(opt("-n", "128")))):
    if n_prompt or n_gen:
        print(json.dumps({"build_commit": "fake", "build_number": 1, "n_prompt": n_prompt, "n_gen": n_gen,
                          "n_depth": 0, "avg_ts": 100.0, "stddev_ts": 0.0, "samples_ts": [100.0],
                          "samples_ns": [1000000]}), flush=True)
