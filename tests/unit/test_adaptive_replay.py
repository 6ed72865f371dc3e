"""benchmarks/adaptive_replay.py's time accounting: the threshold's fits a real run would make."""

import importlib.util
import sys
from pathlib import Path

import pytest

from llamaforge.bench.threshold import bisect_threshold
from llamaforge.records import LaunchRecord

_SPEC = importlib.util.spec_from_file_location(
    "adaptive_replay", Path(__file__).resolve().parents[2] / "benchmarks" / "adaptive_replay.py")
replay = sys.modules["adaptive_replay"] = importlib.util.module_from_spec(_SPEC)   # its dataclasses need it there
_SPEC.loader.exec_module(replay)

NATIVE = 1000


def test_the_fits_are_a_bisection_over_every_ncmoe_at_the_stored_fit_time_of_each():
    secs = {x: 1.0 + x / 100 for x in range(41)} | {-1: 9.0}
    every = {x: NATIVE if x >= 6 else 10 for x in range(41)}
    cost, n = replay.bisection_cost(every, NATIVE, 40, secs)
    probes = bisect_threshold(range(41), every.get, NATIVE).probes
    assert n == len(probes) <= 8 and cost == sum(secs[x] for x in probes)


def test_a_thinned_sweep_is_charged_the_dearest_bisection_any_threshold_in_its_gap_needs():
    secs = {x: 1.0 for x in range(41)} | {-1: 1.0}
    thinned = {0: 10, 4: 10, 8: NATIVE, 40: NATIVE}           # the threshold is one of 5..8
    cost, n = replay.bisection_cost(thinned, NATIVE, 40, secs)
    per_t = [len(bisect_threshold(range(41), lambda x, t=t: NATIVE if x >= t else 0, NATIVE).probes)
             for t in range(5, 9)]
    assert n == max(per_t) and cost == max(per_t)
    assert replay.bisection_cost({0: NATIVE, 40: NATIVE}, NATIVE, 40, secs) == (1.0, 1)      # native at once
    assert replay.bisection_cost({0: 10, 40: 10}, NATIVE, 40, secs) == (2.0, 2)              # never native


# ---------------------------------------------------------------------------------- dense models: -ngl sweeps

N_LAYERS = 12         # x = N_LAYERS + 1 - ngl: 0 (ngl 13, every layer and the output on the device) .. 13 (ngl 0)


def _gpu(ngl: int) -> float:
    """100 t/s with every layer on the device, 20 with none, the time per token growing by the same
    amount per layer moved (the trend the adaptive sweep expects)."""
    x = N_LAYERS + 1 - ngl
    return 1 / (1 / 100 + x * (1 / 20 - 1 / 100) / (N_LAYERS + 1))


def _ngl_store(store, ctx_of=lambda ngl: NATIVE, tg=None):
    """A stored exhaustive --ngl sweep of a dense model over every ngl 0..13, two builds, two launches of two
    requests a point: ``gpu`` loses speed with every layer that leaves the device, ``cpu`` is flat."""
    from llamaforge.store import Point, Sample

    tg = tg or {"gpu": _gpu, "cpu": lambda ngl: 40.0}
    facts = {"arch": "llama", "n_layers": N_LAYERS, "n_experts": 0, "n_ctx_train": NATIVE,
             "full_attention_layers": list(range(N_LAYERS))}
    run = store.new_run("sweep", {"model": {"facts": facts}})
    for backend in tg:
        store.add_build({"key": f"k-{backend}", "backend": backend}, run)
        for ngl in range(N_LAYERS + 2):
            v = tg[backend](ngl)
            samples = [Sample(i, False, tg_tps=v * f, launch=k)
                       for k, fs in ((1, (1.0, 1.01)), (2, (0.99, 1.0))) for i, f in enumerate(fs)]
            launches = [LaunchRecord(launch=k, started=100.0 * k, finished=100.0 * k + 2.0 + ngl).to_json()
                        for k in (1, 2)]
            store.record_point(Point(run_id=run, build_key=f"k-{backend}", engine="server", ngl=ngl,
                                     n_ctx=ctx_of(ngl), samples=samples, detail={"launches": launches}))
    return run


def test_an_ngl_sweep_is_read_on_the_axis_of_ngl_auto(store):
    from llamaforge.bench.autosweep import Axis

    st = replay.load(store, _ngl_store(store))
    assert st.axis == Axis("ngl", N_LAYERS) and st.domain == list(range(N_LAYERS + 2))
    for x in st.domain:        # the same map as --ngl auto: x = n_layers + 1 - ngl
        assert st.summ["gpu"][x].median == pytest.approx(_gpu(st.axis.value(x)), rel=1e-3)   # the judge's centre
    assert st.seconds[("gpu", 0)] == (2 * (2.0 + N_LAYERS + 1), 2)      # ngl 13: the slowest to launch here
    assert st.constant_ctx


def test_a_dense_sweep_with_one_context_everywhere_has_no_threshold_but_its_sweet_spot_matches(store, capsys):
    st = replay.load(store, _ngl_store(store))
    rows: list[str] = []
    outcomes = replay.replay_run(st, 1 / 3, rows)
    out = capsys.readouterr().out
    assert "ngl 0..13" in out and "threshold: n/a (context 1000 at every ngl" in out
    assert "gpu 13: yes" in out          # the sweet spot: every layer on the device, as the option reads
    assert "winner per region: yes: 0–" in out and "13 gpu" in out
    stop = outcomes[0]
    assert stop.match and "| n/a |" in rows[0] and stop.used < stop.avail == 2 * (N_LAYERS + 2)


def test_a_dense_sweep_whose_context_grows_with_offload_has_its_threshold_found(store, capsys):
    # native context only from ngl 5 down (x >= 8): "native context up to ngl 5"
    st = replay.load(store, _ngl_store(store, ctx_of=lambda ngl: NATIVE if ngl <= 5 else NATIVE // 2))
    assert not st.constant_ctx
    outcomes = replay.replay_run(st, 1 / 3, [])
    out = capsys.readouterr().out
    assert "threshold {'cpu': 5, 'gpu': 5}" in out and "  threshold: yes" in out
    assert "gpu 5: yes" in out                    # the fastest point at native context
    assert outcomes[0].match


def test_the_fits_of_an_ngl_sweep_bisect_over_every_ngl_including_zero():
    from llamaforge.bench.autosweep import Axis

    ax = Axis("ngl", 40)
    secs = {x: 1.0 for x in ax.domain} | {-1: 1.0}
    only_ngl0 = {0: 10, 41: NATIVE}                  # native context only with every layer on the host
    cost, n = replay.bisection_cost(only_ngl0, NATIVE, 40, secs, ax)
    assert n == len(bisect_threshold(ax.domain, lambda x: NATIVE if x >= 41 else 0, NATIVE).probes)
    assert cost == n and 41 in bisect_threshold(ax.domain, lambda x: NATIVE if x >= 41 else 0, NATIVE).probes
    assert replay.bisection_cost({0: 10, 41: 10}, NATIVE, 40, secs, ax) == (2.0, 2)     # never native


def test_axis_x_of_inverts_spec_and_reads_ngl_all_as_everything_on_the_device():
    from llamaforge.bench.autosweep import Axis

    for ax in (Axis("ngl", 30), Axis("ncmoe", 40)):
        for x in ax.domain:
            spec = ax.spec(x)
            assert ax.x_of(spec.ncmoe, spec.ngl) == x
    assert Axis("ngl", 30).x_of(0, -1) == 0 == Axis("ngl", 30).x_of(0, 99)
    assert Axis("ngl", 30).x_of(0, 0) == 31


# ---------------------------------------------------------------------------------- the judge's verdicts


def test_a_spike_beyond_the_between_start_spread_is_explained_by_the_judges_verdict(store, capsys):
    spiky = {"gpu": lambda ngl: _gpu(ngl) * (1.3 if ngl == 6 else 1.0), "cpu": lambda ngl: 40.0}
    st = replay.load(store, _ngl_store(store, tg=spiky))
    assert st.summ["gpu"][7].n == 2 and st.summ["gpu"][7].interval == "range"      # two starts: their range
    lines = replay.break_lines(st.summ, st.domain, st.show)
    assert any(line.startswith("gpu: tg falls with offload") and "between-start spread" in line for line in lines)
    spike = [line for line in lines if line.startswith("gpu 6 over 7:")]
    assert len(spike) == 1 and "differs" in spike[0] and "ANOMALY (after Holm over the sweep)" in spike[0]


def test_a_winner_one_run_cannot_tell_is_open_not_a_contradiction():
    from llamaforge.bench.adaptive import Conclusions

    st = replay.Stored("r", {}, {}, None, [0, 1, 2, 3], [], 3)

    def c(*regions):
        return Conclusions({}, {}, list(regions), {}, {})

    ex = c((0, 3, "cuda"))
    assert replay.winner_verdict(c((0, 3, "cuda")), ex, st).startswith("yes:")
    opened = replay.winner_verdict(c((0, 1, "cuda"), (2, 3, "tie")), ex, st)
    assert opened.startswith("open at ncmoe [2, 3]:")
    assert replay.winner_verdict(c((0, 3, "vulkan")), ex, st).startswith("NO at ncmoe [0, 1, 2, 3]")
    assert replay.winner_verdict(c((0, 3, "cuda")), c((0, 3, "tie")), st).startswith("claims more at ncmoe [0, 1, 2, 3]")
    v = {"threshold": "yes", "sweet spot": "cuda 0: yes", "winner per region": opened, "anomalies": "cuda: missed []"}
    assert not replay.all_match(v) and replay.all_match(v, strict=False)
    v["winner per region"] = "NO at ncmoe [1]: 0–3 vulkan"
    assert not replay.all_match(v, strict=False)
