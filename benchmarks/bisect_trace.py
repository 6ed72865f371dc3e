"""Every start of a bisection in the order it was measured: when, which commit, its metric — to see how the
machine's speed moved while the probes were judged (``benchmarks/bisect_drift.py`` simulates what it shows).

    python benchmarks/bisect_trace.py RUN_ID [--store results/llamaforge.sqlite] [--metric tg] [--last N]

One line a start: its number, seconds since the bisection's first start, the commit (``G`` / ``B`` for the good and bad
endpoints, else the short sha with the probe's verdict), the median of the start's requests in t/s. The
real 15 % bisection test writes its store and run id to ``~/.cache/llamaforge/bisect-15pct-last.json``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from llamaforge.findings.bisection import start_trace
from llamaforge.metrics import FIELDS
from llamaforge.paths import Paths
from llamaforge.store import Store


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run_id")
    ap.add_argument("--store", type=Path, default=None, help="the results database (default: the workspace's)")
    ap.add_argument("--metric", choices=sorted(FIELDS), default="tg")
    ap.add_argument("--last", type=int, default=0, help="only the last N starts")
    args = ap.parse_args(argv)
    db = args.store or Paths.default().store_db
    with Store(db) as store:
        rows = start_trace(store, store.get_run(args.run_id), FIELDS[args.metric])
    if not rows:
        print(f"no starts of run {args.run_id} in {db}", file=sys.stderr)
        return 1
    numbered = list(enumerate(rows, 1))
    for n, (t, sha, verdict, value) in numbered[-args.last:] if args.last else numbered:
        who = {"endpoint-good": "G", "endpoint-bad": "B"}.get(verdict, f"{sha[:9]} {verdict}")
        when = f"{t:7.1f} s" if t is not None else "      – "
        print(f"{n:4d}  {when}  {who:<24} {value:8.1f} t/s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
