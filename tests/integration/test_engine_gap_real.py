"""The engine gap, measured for real: a ``--engine both`` sweep of the tiny MoE on the CPU build, decomposed.

The acceptance of "explain the engine gap": after depth, the sampler chain and HTTP are taken out, what remains
of the server / llama-bench tg ratio (the residual) is within ±5 % — judged, not eyeballed: its interval must
reach into ±5 %, and its centre must lie inside once the interval is as narrow as asked. Four server starts and four llama-bench
processes (the unit of replication) of five rounds each to begin with; two more of each while the residual's
interval is wider than ±4 %, up to ten (the sequential rule of ``--launches auto``).

This machine is shared (2 vCPUs, other jobs running): a request's wall time swings ±20–30 % with whatever else
runs, which buries a 5 % question. Where the test may, it therefore runs the sweep under SCHED_FIFO (inherited by
the llama-server and llama-bench processes it starts), as llama.cpp's own ``--prio`` would for its threads; the
measurement itself is unchanged. The numbers are printed (``-s``) for the record.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import statistics
from collections.abc import Iterator

import pytest

from llamaforge.bench.plan import Plan, make_points, read_facts
from llamaforge.bench.sweep import run_sweep
from llamaforge.report import data as rdata
from llamaforge.report.contents import build_sections
from llamaforge.report.engine_gap import Decomposition, decompositions
from llamaforge.store import Store

pytestmark = pytest.mark.slow

REPEATS, LAUNCHES, N_PREDICT, PROMPT = 5, 4, 32, 256
#: more starts (two at a time) while the residual's interval is wider than ±4 %, up to 10 starts per engine
PRECISION, MAX_LAUNCHES = 0.04, 10


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


def test_the_gap_decomposes_and_the_residual_is_within_5_percent(cpu_build, tiny_model, tmp_path):
    facts = read_facts(tiny_model)
    plan = Plan(model_ref=str(tiny_model), model_path=tiny_model, model_facts=facts,
                points=make_points("0", None, n_layers=facts["n_layers"]), engine="both", repeats=REPEATS,
                launches=LAUNCHES, prompt_tokens=PROMPT, n_predict=N_PREDICT, threads=1, seed=1,
                sentinel_every=0, load_timeout_s=300, request_timeout_s=300)
    with Store(tmp_path / "llamaforge.sqlite") as store, realtime() as rt:
        run, d = _sweep(plan, cpu_build, store)
        # as --launches auto would: more starts while the residual is still imprecise, up to a maximum
        while _residual_half(d) > PRECISION and plan.launches < MAX_LAUNCHES:
            plan = dataclasses.replace(plan, launches=plan.launches + 2)
            run, d = _sweep(plan, cpu_build, store, run)
        srv = next(p for p in store.points(run) if p.engine == "server")
        data = rdata.load(store, run)
    # every server start alternated the measured request with the three variants
    recs = [r["engine_gap"] for r in srv.launches]
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
    # Within ±5 % unless the starts show otherwise: the residual, judged against ±5 %, must not "differ"
    # (its interval reaches into the band); and once it is as precise as asked, its centre lies in the band.
    # On a noisy machine the interval stays wide after MAX_LAUNCHES — then the honest claim is the weaker one.
    assert d.residual.min_effect == pytest.approx(0.05) and d.residual.verdict != "differs", d.to_dict()
    if _residual_half(d) <= PRECISION:
        assert abs(d.residual.ratio - 1) <= 0.05, d.to_dict()

    secs = {s.id: s for s in build_sections(data, [])}
    gap_tables = [t for t in secs["crosscheck"].tables if t.title.startswith("Engine gap")]
    assert len(gap_tables) == 1 and gap_tables[0].data[0]["residual"]["ratio"] == pytest.approx(d.residual.ratio)
