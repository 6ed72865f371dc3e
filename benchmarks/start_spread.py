"""Every server start of one offload point, across a sweep and the runs that re-measure it.

A sweep's interval says how much the requests inside its starts agree; how far apart separate starts
land is what decides whether a number survives a re-run. This prints, for each build of each named
run, every start (launch) of the chosen ncmoe in that run, its drift sentinels and its ``reproduce``
runs: the mean of the start's measured requests, in t/s. results/h200/README.md's start-level table
comes from it:

    LLAMAFORGE_RESULTS=results/h200 python benchmarks/start_spread.py h200-24gib h200-24gib-k2 \\
        h200-24gib-k2n h200-24gib-k2-1201 h200-24gib-k2-1201b [--ncmoe 0] [--metric tg]
"""

from __future__ import annotations

import argparse
import statistics
import sys

from llamaforge.findings.labels import display_name
from llamaforge.paths import Paths
from llamaforge.store import Point, Store


def start_means(points: list[Point], metric: str) -> list[float]:
    """One value per server start: the mean of that start's measured requests."""
    return [statistics.fmean(g) for p in points for g in p.launch_groups(metric) if g]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+", help="sweep runs (id or name); their reproduce runs are included")
    ap.add_argument("--ncmoe", type=int, default=0)
    ap.add_argument("--metric", choices=("tg", "pp"), default="tg")
    a = ap.parse_args(argv)
    metric = f"{a.metric}_tps"
    with Store(Paths.default().store_db) as store:
        for ref in a.runs:
            run = store.get_run(ref)
            family = [run, *store.child_runs(run.id)]
            by_build: dict[str, list[Point]] = {}
            for r in family:
                for p in store.points(r.id, engine="server"):
                    if p.ncmoe == a.ncmoe and p.status == "ok":
                        by_build.setdefault(p.build_key, []).append(p)
            print(f"{run.name or run.id} (+{len(family) - 1} reproduce run(s)), ncmoe {a.ncmoe}, {a.metric} t/s per start:")
            for key, pts in sorted(by_build.items()):
                vals = sorted(start_means(pts, metric))
                shown = ", ".join(f"{v:.1f}" for v in vals)
                backend = display_name((store.get_build(key) or {}).get("backend"))
                print(f"  {backend:<7} {key:<28} {len(vals)} starts, {vals[0]:.1f} – {vals[-1]:.1f}: {shown}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
