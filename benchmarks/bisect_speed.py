"""What incremental builds buy a bisection: each step's build and measurement time, and the total
against a full rebuild per step (the session's cold build time × the number of builds).

    python benchmarks/bisect_speed.py [RUN] [--store PATH]

RUN is a bisect run id (prefix) or ``latest`` (default: the run the last 20 ms-fixture bisection of
``tests/integration/test_bisect_real.py`` recorded, else the newest). The store defaults to the one that
test recorded in ``~/.cache/llamaforge/bisect-speed-last.json``,
else the workspace store (``results/llamaforge.sqlite``). Reads only what the bisection stored
(``probes`` rows: build_s, measure_s, incremental) — it measures nothing itself; run
``llamaforge bisect ...`` or the integration test first.

The reference "full rebuild" is the first, cold build of the session (an empty build tree; it may
still be fed by ccache). With a warm build dir from an earlier session there is no cold build in
the run, and the reference falls back to the largest build time seen (said in the output).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from llamaforge.paths import Paths, cache_root
from llamaforge.store import Store


def default_store() -> Path:
    rec = cache_root() / "bisect-speed-last.json"
    if rec.is_file():
        try:
            return Path(json.loads(rec.read_text())["store"])
        except (ValueError, KeyError):
            pass
    return Paths.default().store_db


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run", nargs="?", default="latest")
    ap.add_argument("--store", type=Path, default=None)
    a = ap.parse_args(argv)
    db = a.store or default_store()
    if not db.is_file():
        print(f"no store at {db}: run a bisection first", file=sys.stderr)
        return 2
    ref_run = a.run
    rec = cache_root() / "bisect-speed-last.json"
    if ref_run == "latest" and a.store is None and rec.is_file():   # the real test's run, not a later bisection's
        try:
            ref_run = json.loads(rec.read_text()).get("run_id") or ref_run
        except ValueError:
            pass
    with Store(db) as store:
        run = store.get_run(ref_run, "bisect")
        probes = store.probes(run.id)
    if not probes:
        print(f"run {run.id} has no probes", file=sys.stderr)
        return 2
    print(f"bisect run {run.id} ({run.status}): {run.name}")
    print(f"{'#':>2} {'commit':<9} {'verdict':<13} {'build s':>8} {'kind':<11} {'measure s':>9}  subject")
    for p in probes:
        kind = ("cached" if p.note == "cached build" else "incremental" if p.incremental
                else "cold" if p.incremental is False else "-")
        print(f"{p.seq:>2} {p.commit_sha[:9]:<9} {p.verdict or '':<13} {p.build_s or 0:8.1f} {kind:<11} "
              f"{p.measure_s or 0:9.1f}  {(p.subject or '')[:50]}")
    builds = [p for p in probes if p.build_s is not None]
    cold = next((p for p in builds if p.incremental is False), None)
    ref = cold.build_s if cold else max(p.build_s for p in builds)
    ref_what = "the cold build" if cold else "the slowest build (no cold build in this run)"
    total_build = sum(p.build_s for p in builds)
    total_measure = sum(p.measure_s or 0 for p in probes)
    incr = sorted(p.build_s for p in builds if p.incremental)
    print()
    print(f"builds: {len(builds)}, total build time {total_build:.0f} s, measurement {total_measure:.0f} s")
    if incr:
        print(f"incremental builds: median {incr[len(incr) // 2]:.1f} s (min {incr[0]:.1f}, max {incr[-1]:.1f}) "
              f"vs {ref_what} {ref:.1f} s")
    full = ref * len(builds)
    print(f"full rebuild per step would take ≈ {full:.0f} s ({ref:.1f} s × {len(builds)}); "
          f"incremental took {total_build:.0f} s → {full / total_build if total_build else float('nan'):.1f}× faster")
    return 0


if __name__ == "__main__":
    sys.exit(main())
