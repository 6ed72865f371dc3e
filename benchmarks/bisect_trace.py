"""Every start of a bisection in the order it was measured: when, which commit, its metric — to see how the
machine's speed moved while the probes were judged (``benchmarks/bisect_drift.py`` simulates what it shows).

    python benchmarks/bisect_trace.py RUN_ID [--store results/llamaforge.sqlite] [--metric tg] [--last N]

One line a start: seconds since the bisection's first start, the commit (``G`` / ``B`` for the good and bad
endpoints, else the short sha with the probe's verdict), the median of the start's requests in t/s. The
real 15 % bisection test writes its store and run id to ``~/.cache/llamaforge/bisect-15pct-last.json``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

from llamaforge.metrics import FIELDS
from llamaforge.paths import Paths
from llamaforge.store import Store


def trace(store: Store, run_id: str, metric: str) -> list[tuple[float, str, float]]:
    """(wall-clock start, who, median of the start's requests) for every start of the run, in order."""
    verdicts = {p.commit_sha[:9]: p.verdict for p in store.probes(run_id)}
    rows = []
    for point in store.points(run_id):
        sha = point.label[:9]
        verdict = verdicts.get(sha, "")
        who = {"endpoint-good": "G", "endpoint-bad": "B"}.get(verdict, f"{sha} {verdict}")
        starts = {rec.launch: rec.started for rec in point.launches}
        for launch, values in enumerate(point.launch_groups(FIELDS[metric]), start=1):
            if values and starts.get(launch) is not None:
                rows.append((float(starts[launch]), who, statistics.median(values)))
    return sorted(rows)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run_id")
    ap.add_argument("--store", type=Path, default=None, help="the results database (default: the workspace's)")
    ap.add_argument("--metric", choices=sorted(FIELDS), default="tg")
    ap.add_argument("--last", type=int, default=0, help="only the last N starts")
    args = ap.parse_args(argv)
    db = args.store or Paths.default().store_db
    with Store(db) as store:
        rows = trace(store, args.run_id, args.metric)
    if not rows:
        print(f"no starts of run {args.run_id} in {db}", file=sys.stderr)
        return 1
    t0 = rows[0][0]
    for t, who, value in rows[-args.last:] if args.last else rows:
        print(f"{t - t0:7.1f} s  {who:<24} {value:8.1f} t/s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
