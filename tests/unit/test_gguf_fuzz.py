"""Property-based fuzzing of the GGUF reader and ``model.info`` (hypothesis; see gguf_fuzz.py).

At least 5,000 generated files — valid seeds written with the gguf package, then huge counts and
lengths, wrong types, flipped bytes and truncation — each read with and without arrays and shown by
``model.info``: every file gives facts or one line with a fix (no other exception), and the whole run
stays under 200 MB of resident memory. It runs in its own process so that its peak memory is its own;
an address-space limit turns a memory bomb into a quick failure instead of a swapping machine.

A short run goes first: on its first use, hypothesis builds a Unicode table for its text strategies
(about 150 MB for a moment) and caches it under ``.hypothesis/``. That is hypothesis's memory, not the
reader's, and on a fresh clone it would otherwise decide the measured peak (272 MB in CI, 121 MB after).
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
EXAMPLES = max(5000, int(os.environ.get("LLAMAFORGE_FUZZ_EXAMPLES", "5000")))
PEAK_MB = 200


def _limit_address_space() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))


def test_fuzzed_ggufs_give_facts_or_one_line_in_bounded_memory(tmp_path):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE.parents[1] / "src"), os.environ.get("PYTHONPATH", "")]),
           "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "COLUMNS": "200"}
    def fuzz(examples: int) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, str(HERE / "gguf_fuzz.py"), str(examples), str(tmp_path)], env=env,
                              capture_output=True, text=True, timeout=1200, preexec_fn=_limit_address_space)

    warm = fuzz(20)                      # hypothesis's own first-use caches, outside the measured run
    assert warm.returncode == 0, (warm.stdout[-3000:], warm.stderr[-6000:])
    r = fuzz(EXAMPLES)
    assert r.returncode == 0, (r.stdout[-3000:], r.stderr[-6000:])
    tally = json.loads(r.stdout.strip().splitlines()[-1])
    assert tally["files"] >= 5000, tally
    assert tally["accepted"] > 100 and tally["rejected"] > 1000, tally   # both paths really exercised
    assert tally["peak_rss_mb"] < PEAK_MB, tally
