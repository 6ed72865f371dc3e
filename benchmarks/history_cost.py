"""What a performance history costs per commit: builds (cached / incremental / cold) and measurement time.

    python benchmarks/history_cost.py [--run RUN] [--store DB]
    python benchmarks/history_cost.py --measure --range A..B --source path:DIR [--every N] [--cold] [--model M]

Without ``--measure`` it reads the stored ``history`` runs (``--run``: one of them; without ``--store``,
the real test's store ``~/.cache/llamaforge/history-test/history.sqlite`` when it exists) and prints, per commit and backend, how
its build went and how long it took, the measurement time and the starts it needed, then the totals:
incremental builds against the cold one (the first build of a fresh tree; with none in the run, the
slowest build is the reference and it says so).

With ``--measure`` it first runs ``history.run`` itself (llama-bench engine, no bisect) over the range:
``--cold`` gives it a fresh incremental tree in a temporary folder, so its first build is cold (CMake
configure and every object, fed by ccache when ccache has them) and every later commit is incremental.
Numbers are printed, nothing is asserted: the machine decides them (say which when quoting them).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

from llamaforge.builds.incremental import IncrementalBuilder
from llamaforge.config import SourceSpec, load_pins
from llamaforge.history.run import HistoryRequest, run_history
from llamaforge.history.select import Chosen, Selection
from llamaforge.paths import Paths, cache_root
from llamaforge.records import HistorySummary
from llamaforge.store import Store


def _measure(a: argparse.Namespace, paths: Paths, store: Store) -> str:
    sel = Selection(range=a.range, every=a.every, source=SourceSpec.parse(a.source) if a.source else None)
    req = HistoryRequest(selection=sel, model=a.model, engine="llama-bench", prompt_tokens=64, n_predict=32,
                         max_starts=a.max_launches)
    builder = None
    if a.cold:
        root = Path(tempfile.mkdtemp(prefix="history-cold-"))
        inc = IncrementalBuilder(paths, "cpu", root=root)

        def builder(c: Chosen, backend: str):  # noqa: ANN202
            return inc(c.sha)
    out = run_history(paths, load_pins(paths.pins_file), store, req, builder=builder, command="history_cost")
    if out.run_id is None:
        raise SystemExit("nothing measured: every commit is already in this machine's series (use a new --store)")
    return out.run_id


def report(store: Store, run_id: str) -> None:
    run = store.get_run(run_id, "history")
    s = run.summary_as(HistorySummary) if run.summary else HistorySummary()
    commits = {c["sha"]: c for c in (run.plan.history.commits if run.plan.history else [])}
    starts: dict[str, int] = {}
    for p in store.points(run_id, with_samples=False):
        starts[p.label] = starts.get(p.label, 0) + len(p.launches)
    print(f"history run {run.id} ({run.status}): {run.name}")
    print(f"{'commit':<9} {'backend':<7} {'build':<11} {'build s':>8} {'measure s':>9} {'starts':>6}  subject")
    builds: list[tuple[str, float]] = []
    for sha in sorted(s.builds, key=lambda x: list(commits).index(x) if x in commits else len(commits)):
        for backend, b in s.builds[sha].items():
            builds.append((b.get("how") or "?", float(b.get("build_s") or 0)))
            print(f"{sha[:9]:<9} {backend:<7} {b.get('how') or '?':<11} {b.get('build_s') or 0:8.1f} "
                  f"{s.measure_s.get(sha, 0):9.1f} {starts.get(sha, 0):>6}  {commits.get(sha, {}).get('subject', '')[:50]}")
    for sha, per in s.failed.items():
        print(f"{sha[:9]:<9} failed: {per}")
    _totals(builds, s, starts)


def _totals(builds: list[tuple[str, float]], s: HistorySummary, starts: dict[str, int]) -> None:
    if not builds:
        print("no builds recorded")
        return
    incr = sorted(t for how, t in builds if how == "incremental")
    cold = [t for how, t in builds if how == "cold"]
    ref, what = (cold[0], "the cold build") if cold else (max(t for _h, t in builds), "the slowest build (no cold one)")
    meas = list(s.measure_s.values())
    print()
    print(f"{len(builds)} builds: {sum(t for _h, t in builds):.0f} s; measurement {sum(meas):.0f} s "
          f"({statistics.median(meas) if meas else 0:.0f} s median per commit, "
          f"{statistics.median(starts.values()) if starts else 0:.0f} starts median per commit)")
    if incr:
        print(f"incremental builds: median {statistics.median(incr):.1f} s (min {incr[0]:.1f}, max {incr[-1]:.1f}) "
              f"vs {what} {ref:.1f} s → {ref / statistics.median(incr):.1f}× cheaper per commit")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--store", help="the store (default: the workspace's)")
    ap.add_argument("--run", help="a history run id (default: the newest)")
    ap.add_argument("--measure", action="store_true", help="run history.run first (see the module doc)")
    ap.add_argument("--range"), ap.add_argument("--source"), ap.add_argument("--every", type=int, default=1)
    ap.add_argument("--cold", action="store_true"), ap.add_argument("--model", default="synth:tiny-qwen35moe")
    ap.add_argument("--max-launches", type=int, default=10)
    a = ap.parse_args()
    paths = Paths.default()
    test_store = cache_root() / "history-test" / "history.sqlite"
    db = Path(a.store) if a.store else (test_store if test_store.is_file() and not a.measure else paths.store_db)
    with Store(db) as store:
        run_id = _measure(a, paths, store) if a.measure else a.run
        ids = [run_id] if run_id else [r.id for r in store.list_runs("history")]
        if not ids:
            print("no history run in this store", file=sys.stderr)
            return 2
        for i, rid in enumerate(ids):
            if i:
                print()
            report(store, rid)
    return 0


if __name__ == "__main__":
    sys.exit(main())
