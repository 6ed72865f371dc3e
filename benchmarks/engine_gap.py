"""Why llama-server generates slower than llama-bench: the engine gap of a cross-check run, decomposed.

For a run measured with ``--engine both`` (llamaforge ≥ the engine-gap record), prints the decomposition table
(gap = depth × sampler chain × HTTP × residual, intervals from the judge) and, per point, the numbers behind it:
each server start's median tg with the default chain, with the top-1 chain (and with one more vocabulary pass)
and streamed (server timing and client token arrivals), the wall time outside the server's timings, and each
llama-bench process's tg at the requested and at the matched depth. Numbers are printed, not asserted.

    python benchmarks/engine_gap.py RUN [--min-effect 0.05]
    LLAMAFORGE_RESULTS=results/h200 python benchmarks/engine_gap.py h200-both
"""

from __future__ import annotations

import argparse
import statistics
import sys

from llamaforge.paths import Paths
from llamaforge.report.engine_gap import Decomposition, print_gap
from llamaforge.store import Store


def _meds(groups: list[list[float]]) -> str:
    return ", ".join(f"{statistics.median(g):.1f}" for g in groups if g) or "–"


def _gm(groups: list[list[float]]) -> float:
    return statistics.geometric_mean([statistics.median(g) for g in groups if g])


def detail(d: Decomposition) -> list[str]:
    """The per-start numbers of one decomposed point."""
    s, b = d.server, d.bench
    sh = d.shares()
    out = [f"{d.series} ncmoe {d.ncmoe}: gap {d.gap.ratio:.3f} = depth {d.depth.centre if d.depth else 1:.3f} "
           f"× sampler {d.sampler.centre:.3f} × HTTP 1 × residual {d.residual.ratio:.3f} "
           f"(residual {d.residual.verdict}{'*' if d.residual.small else ''})",
           "  shares of the gap: " + (", ".join(f"{k} {v:.0%}" for k, v in sh.items()) if sh else "gap under 0.5 %"),
           f"  server starts ({len(s.default)}), median tg per start: default {_meds(s.default)}",
           f"    top-1 chain {_meds(s.greedy)}; top-1 with one more vocabulary pass {_meds(s.extra_pass)}; "
           f"streamed (server) {_meds(s.stream)}; "
           f"streamed (client arrivals) {_meds(s.stream_client)}",
           "    wall time outside the server's timings per request (ms, median per start): "
           + (", ".join(f"{x:.1f}" for x in s.overhead_ms) or "–"),
           f"  llama-bench processes ({len(b.xc)}), tg at depth {b.xc_depth}: "
           f"{_meds(b.xc)}; at the server's prompt {b.matched_depth}: {_meds(b.matched)} "
           f"(measured in {b.n_measured}, interpolated in {len(b.xc) - b.n_measured})"]
    if d.vocab_pass is not None:
        out.append(f"  one more pass over the vocabulary / top-1 chain: {d.vocab_pass.centre:.3f} "
                   f"(per token {1e3 / _gm(s.extra_pass) - 1e3 / _gm(s.greedy):+.3f} ms)")
    if d.stream_server is not None:
        out.append(f"  streaming, server timing / non-streamed: {d.stream_server.centre:.3f}; "
                   f"client arrivals / non-streamed: {d.stream_client.centre if d.stream_client else float('nan'):.3f}")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run", help="a run measured with --engine both (id, name, prefix or 'latest')")
    ap.add_argument("--min-effect", type=float, default=0.05, help="margin of the residual's verdict (default 0.05)")
    a = ap.parse_args(argv)
    with Store(Paths.default().store_db) as store:
        run = store.get_run(a.run)
        decs = print_gap(store, run.id, min_effect=a.min_effect)
    if not decs:
        print(f"run {run.id}: no point recorded the engine-gap variants (needs --engine both, measured by a "
              "llamaforge that records them)")
        return 1
    for d in decs:
        print("\n".join(detail(d)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
