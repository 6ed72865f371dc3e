"""The engine gap, measured for real: a ``--engine both`` sweep of the tiny MoE on the CPU build, decomposed.

The gap (server tg / llama-bench tg) must split into depth × sampler chain × HTTP × residual, each factor judged
at the start level with a verdict that follows from its interval. Four server starts and four llama-bench
processes (the unit of replication) of five rounds each to begin with; two more of each while the residual's
interval is wider than ±4 %, up to six (the sequential rule of ``--launches auto``).

What the residual is, is measured, not assumed. An earlier version asserted it within ±5 %; it passed while the
interval was wide and failed once ten starts made it narrow: on this 2-vCPU AMX VM (tiny MoE, one thread, about
3.8 ms per token) the residual is 0.72 [0.68, 0.76] — the server's per-token loop (the logits copied into a
candidate array and scanned, 248k entries, which llama-bench never does; one more such pass costs 3.6 %) is a
quarter of a token's time for a 96 M-parameter model. So the test demands what must hold on any machine: the
factors multiply to the gap, every verdict agrees with its interval, and the server at the matched depth with
the shortest chain is not *faster* than llama-bench (that would mean the depth match or the timing is wrong).

This machine is shared (2 vCPUs, other jobs running): a request's wall time swings ±20–30 % with whatever else
runs. Where the test may, it therefore runs the sweep under SCHED_FIFO (inherited by the llama-server and
llama-bench processes it starts), as llama.cpp's own ``--prio`` would for its threads; the measurement itself is
unchanged. The numbers are printed (``-s``) for the record.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import statistics
from collections.abc import Iterator

import pytest

from judged import assert_coherent
from llamaforge.bench.plan import Plan, Timeouts, make_plan, make_points, read_facts
from llamaforge.bench.sweep import run_sweep
from llamaforge.report import data as rdata
from llamaforge.report.contents import build_sections
from llamaforge.report.engine_gap import Decomposition, decompositions
from llamaforge.store import Store

pytestmark = [pytest.mark.slow, pytest.mark.measures]   # its assertions rest on measured speed

REPEATS, LAUNCHES, N_PREDICT, PROMPT = 5, 4, 32, 256
#: more starts (two at a time) while the residual's interval is wider than ±4 %, up to 6 starts per engine (CI time)
PRECISION, MAX_LAUNCHES = 0.04, 6


@contextlib.contextmanager
def realtime() -> Iterator[bool]:
    """SCHED_FIFO for this process (and the processes it starts) where permitted; yields whether it took effect."""
    try:
        before = os.sched_getscheduler(0), os.sched_getparam(0)
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(10))
    except (AttributeError, PermissionError, OSError):
        yield False
        return
    try:
        yield True
    finally:
        os.sched_setscheduler(0, before[0], before[1])


def _residual_half(d: Decomposition) -> float:
    """Half the residual's interval, relative (log scale)."""
    return (math.log(d.residual.high) - math.log(d.residual.low)) / 2


def _sweep(plan: Plan, build, store: Store, run: str | None = None) -> tuple[str, Decomposition]:   # noqa: ANN001
    run = run_sweep(plan, [build], store, progress=False, resume_run=run)
    pts = {p.engine: p for p in store.points(run)}
    assert all(p.status == "ok" for p in pts.values()), [(p.engine, p.failure_detail) for p in pts.values()]
    [d] = decompositions(rdata.load(store, run))
    return run, d


#: full tier: the gap's factors measured one by one (a minute); the default tier measures both engines at two points
@pytest.mark.full(covered_by=["tests/integration/test_replication_real.py::test_engine_both_then_reproduce_a_subset"])
def test_the_gap_decomposes_into_judged_factors(cpu_build, tiny_model, tmp_path):
    facts = read_facts(tiny_model)
    plan = make_plan(model_ref=str(tiny_model), model_path=tiny_model, model_facts=facts,
                     points=make_points("0", None, n_layers=facts.n_layers), engine="both", repeats=REPEATS,
                     launches=LAUNCHES, prompt_tokens=PROMPT, n_predict=N_PREDICT, threads=1, seed=1,
                     sentinel_every=0, timeouts=Timeouts(300, 300))
    with Store(tmp_path / "llamaforge.sqlite") as store, realtime() as rt:
        run, d = _sweep(plan, cpu_build, store)
        # as --launches auto would: more starts while the residual is still imprecise, up to a maximum
        while _residual_half(d) > PRECISION and plan.launches < MAX_LAUNCHES:
            plan = dataclasses.replace(plan, launches=plan.launches + 2)
            run, d = _sweep(plan, cpu_build, store, run)
        srv = next(p for p in store.points(run) if p.engine == "server")
        data = rdata.load(store, run)
    # every server start alternated the measured request with the three variants
    recs = [r.engine_gap for r in srv.launches]
    assert len(recs) == plan.launches
    for rec in recs:
        variants = [r["variant"] for r in rec["requests"]]
        assert all(variants.count(v) == REPEATS for v in ("default", "greedy", "extra-pass", "stream"))
        assert all("error" not in r for r in rec["requests"])
        assert {tuple(r["samplers"]) for r in rec["requests"] if r["variant"] == "greedy"} == {("top_k",)}
        assert all(r["client_tg_tps"] > 0 for r in rec["requests"] if r["variant"] == "stream")
    prompt_n = recs[0]["prompt_n"]
    assert 0.75 * PROMPT < prompt_n <= PROMPT

    assert len(d.server.default) == plan.launches and len(d.bench.xc) == plan.launches
    assert d.bench.matched_depth == prompt_n and d.bench.xc_depth == PROMPT
    assert d.depth is not None and d.gap.ratio == pytest.approx(d.depth.centre * d.sampler.centre * d.residual.ratio)
    print(f"\nengine gap (tiny MoE, CPU, {'SCHED_FIFO' if rt else 'normal scheduling'}, {plan.launches} starts each): "
          f"gap {d.gap.ratio:.3f} {d.gap.interval_text()} = depth {d.depth.centre:.3f} × sampler {d.sampler.centre:.3f}"
          f" × HTTP 1 × residual {d.residual.ratio:.3f} {d.residual.interval_text()} ({d.residual.verdict}); "
          f"one more vocabulary pass {d.vocab_pass.centre if d.vocab_pass else float('nan'):.3f}; "
          f"streaming client {d.stream_client.centre if d.stream_client else float('nan'):.3f}; "
          f"HTTP outside the timing {d.overhead_ms:.1f} ms/request; depth measured in {d.bench.n_measured}/"
          f"{plan.launches} processes; shares {d.shares()}")
    for name, groups in (("server default", d.server.default), ("server top-1", d.server.greedy),
                         ("llama-bench xc", d.bench.xc), ("llama-bench matched", d.bench.matched)):
        print(f"  {name:<20} per start: " + ", ".join(f"{statistics.median(g):.1f}" for g in groups))
    # every factor's verdict follows from its interval; the server is not faster than llama-bench at the matched
    # depth (a residual that "differs" upwards would mean a wrong depth match or timing, not a finding)
    for j in (d.gap, d.residual):
        assert_coherent(j.to_dict())
    assert d.residual.min_effect == pytest.approx(0.05), d.to_dict()
    assert not (d.residual.verdict == "differs" and d.residual.ratio > 1), d.to_dict()

    secs = {s.id: s for s in build_sections(data, [])}
    gap_tables = [t for t in secs["crosscheck"].tables if t.title.startswith("Engine gap")]
    assert len(gap_tables) == 1 and gap_tables[0].data[0]["residual"]["ratio"] == pytest.approx(d.residual.ratio)
