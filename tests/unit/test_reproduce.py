"""reproduce: per-point verdicts (CI overlap + minimum effect), the run link, bad input; report sections."""

from __future__ import annotations

import random

import pytest
import run_fake

from llamaforge.errors import BenchError
from llamaforge.report import data as rdata
from llamaforge.report.tables import build_sections
from llamaforge.reproduce import MetricCheck, check_points, reproduce, select_points, sweep_run, verdict_for
from llamaforge.stats import summarize
from llamaforge.store import Point, Sample


def _pt(key: str, ncmoe: int, tg: float, spread: float = 0.01, n: int = 5, seed: int = 1) -> Point:
    rng = random.Random(seed)
    p = Point("r", key, "server", ncmoe=ncmoe)
    p.samples = [Sample(i, False, "", 100, 1.0, 500 * rng.uniform(1 - spread, 1 + spread), 64, 1.0,
                        tg * rng.uniform(1 - spread, 1 + spread)) for i in range(1, n + 1)]
    return p


def test_metric_agrees_on_overlap_or_small_effect_and_differs_otherwise():
    a = summarize([100, 101, 99, 100, 102])
    assert MetricCheck("tg", a, summarize([150, 151, 149, 152, 150])).agrees() is False
    assert MetricCheck("tg", a, summarize([100.5, 101, 99.5, 100, 101])).agrees() is True
    # no CI overlap but a 3 % change: below the minimum effect, so it agrees
    assert MetricCheck("tg", a, summarize([103.0, 103.1, 103.2, 103.1, 103.0])).agrees() is True
    assert MetricCheck("tg", a, summarize([103.0, 103.1, 103.2, 103.1, 103.0])).agrees(min_effect=0.01) is False


def test_verdict_line_counts_and_names_the_differing_point():
    parent = [_pt("vk", 0, 100.0, spread=0.0), _pt("vk", 4, 70.0), _pt("cu", 0, 200.0)]
    child = [_pt("vk", 0, 150.0, spread=0.0), _pt("vk", 4, 70.5, seed=3), _pt("cu", 0, 199.0, seed=4)]
    v = check_points(parent, child, {"vk": "vulkan", "cu": "cuda"}, parent_id="A", child_id="B")
    assert v.n_ok == 2
    assert v.line().startswith("2/3 points reproduce; Vulkan ncmoe 0 differs by +50% (tg)")
    assert [p.status for p in v.points if p.name == "Vulkan ncmoe 0"] == ["differs"]


def test_subset_and_failed_points():
    parent = [_pt("c", 0, 20.0), _pt("c", 1, 19.0)]
    bad = Point("r", "c", "server", ncmoe=0, status="failed", failure_class="crash")
    v = check_points(parent, [bad], {"c": "cpu"})
    assert len(v.points) == 1 and v.points[0].status == "failed" and "ok then crash" in v.line()


def test_the_verdict_lists_the_parent_points_the_child_did_not_measure():
    parent = [_pt("c", 0, 20.0), _pt("c", 1, 19.0), _pt("v", 4, 9.0)]
    v = check_points(parent, [_pt("c", 0, 20.0, seed=2)], {"c": "cuda", "v": "vulkan"})
    assert v.not_remeasured == ["CUDA ncmoe 1", "Vulkan ncmoe 4"]
    assert v.to_dict()["not_remeasured"] == ["CUDA ncmoe 1", "Vulkan ncmoe 4"]
    assert check_points(parent, parent, {"c": "cuda", "v": "vulkan"}).not_remeasured == []


def test_sentinels_are_not_judged_as_points():
    """A reproduce run re-measures its reference point at the end (a sentinel), as the sweep did: the
    verdict is about the points, so the sentinel pair must not appear as a second "CUDA ncmoe 0"."""
    from llamaforge.bench.schedule import SENTINEL_LABEL

    def sentinel(tg: float) -> Point:
        p = _pt("cu", 0, tg, spread=0.0)
        p.label = SENTINEL_LABEL
        return p

    parent = [_pt("cu", 0, 200.0), sentinel(200.0)]
    child = [_pt("cu", 0, 199.0, seed=4), sentinel(300.0)]
    v = check_points(parent, child, {"cu": "cuda"})
    assert [p.name for p in v.points] == ["CUDA ncmoe 0"]
    assert v.line() == "1/1 points reproduce"


def test_select_points_subset_and_bad_selection():
    from llamaforge.bench.plan import PointSpec

    pts = [PointSpec(0), PointSpec(4), PointSpec(8)]
    assert [p.ncmoe for p in select_points(pts, "0,8", 8)] == [0, 8]
    assert select_points(pts, None, 8) == pts
    with pytest.raises(BenchError, match="selects none"):
        select_points(pts, "2", 8)


def test_reproduce_refuses_a_run_that_is_not_a_sweep(tmp_path):
    store, run_id = run_fake.build(tmp_path, kind="compare")
    with pytest.raises(BenchError, match="not a sweep"):
        sweep_run(store, run_id)
    with pytest.raises(BenchError, match="not a sweep"):
        reproduce(store, None, run_id)


def test_reproduce_names_builds_that_are_gone_and_how_to_rebuild(tmp_path, monkeypatch):
    from llamaforge import reproduce as rep

    store, run_id = run_fake.build(tmp_path)
    monkeypatch.setattr("llamaforge.bench.stored.list_builds", lambda _p: [])   # an empty build root
    with pytest.raises(BenchError) as e:
        rep.run_builds(store, None, store.get_run(run_id))
    assert "are gone" in e.value.message and "llamaforge build --backends vulkan" in e.value.fix


def _child_run(store, parent_id, factor_vulkan_0: float):
    child = store.new_run("sweep", {"reproduces": parent_id}, parent_run=parent_id)
    for p in store.points(parent_id):
        q = Point(child, p.build_key, p.engine, ncmoe=p.ncmoe, status=p.status, failure_class=p.failure_class,
                  n_ctx=p.n_ctx, samples=[Sample(s.idx, s.warmup, s.test, s.prompt_n, s.prompt_ms, s.pp_tps,
                                                 s.predicted_n, s.predicted_ms,
                                                 s.tg_tps * (factor_vulkan_0 if p.ncmoe == 1 and "vulkan" in
                                                             p.build_key else 1.0))
                                          for s in p.samples])
        store.record_point(q)
    return child


def test_reports_of_both_runs_show_the_reproduction(tmp_path):
    store, parent = run_fake.build(tmp_path)
    child = _child_run(store, parent, 1.5)
    assert store.get_run(child).parent_run == parent
    assert [r.id for r in store.child_runs(parent)] == [child]
    v = verdict_for(store, store.get_run(parent), store.get_run(child))
    assert v.line().startswith(f"{len(v.points) - 1}/{len(v.points)} points reproduce; Vulkan ncmoe 1 differs by +50%")
    for rid in (parent, child):
        secs = build_sections(rdata.load(store, rid), [])
        rep = [s for s in secs if s.id == "reproduction"]
        assert rep and v.line() in rep[0].notes[0]
        assert any(v.line() in n for n in secs[0].notes)


def test_report_host_memory_and_conditions_sections(tmp_path):
    store, run_id = run_fake.build(tmp_path)
    p = store.points(run_id)[3]
    p.extra = {"host_mem": {"rss_anon_peak_mib": 300.0, "rss_file_peak_mib": 900.0},
               "telemetry": {"samples": 4, "host": {"other_cpu_cores": {"min": 1, "median": 1.5, "max": 2}},
                             "gpu": [{"sm_clock_mhz": {"min": 1000, "median": 1100, "max": 1200},
                                      "throttle_reasons": {"hw_thermal_slowdown": 0.5}}],
                             "other_gpu_processes": [{"pid": 77, "device": 0, "used_mib": 10.0}]}}
    store.record_point(p)
    secs = {s.id: s for s in build_sections(rdata.load(store, run_id), [])}
    hm = secs["host-memory"].tables[0].data
    assert hm == [{"series": hm[0]["series"], "ncmoe": p.ncmoe, "rss_mib": p.rss_peak_mib, "anon_mib": 300.0,
                   "file_mib": 900.0, "cpu_weights_mib": hm[0]["cpu_weights_mib"], "need_mib": hm[0]["need_mib"]}]
    assert hm[0]["need_mib"] == 300.0 + (hm[0]["cpu_weights_mib"] if hm[0]["cpu_weights_mib"] is not None else 900.0)
    assert "RAM needed" in secs["host-memory"].intro and "--no-mmap" in secs["host-memory"].intro
    cond = secs["conditions"]
    assert cond.tables[0].data[0]["flags"] == ["throttled", "loaded", "shared"]
    assert "1 of 1 point(s) ran throttled, loaded or shared" in cond.notes[0]
    assert any("throttled" in n for n in secs["summary"].notes)


def _rebuilt_run(store, first_id: str, tg_factor: float, *, dup_backend: bool = False) -> str:
    """The same sweep in another session: every build rebuilt (new keys), tg scaled by ``tg_factor``."""
    from llamaforge.records import BuildManifest

    second = store.new_run("sweep", {"backends": ["cpu", "vulkan"]})
    new_key = {}
    for b in store.builds_for_run(first_id):
        new_key[b["key"]] = b["key"] + "-rebuilt"
        store.add_build(BuildManifest(new_key[b["key"]], b["backend"], "dev", b.get("commit") or "0" * 40).to_json(),
                        second)
    if dup_backend:
        store.add_build(BuildManifest("cpu-other", "cpu", "dev", "1" * 40).to_json(), second)
    for p in store.points(first_id):
        samples = [Sample(s.idx, s.warmup, s.test, s.prompt_n, s.prompt_ms, s.pp_tps, s.predicted_n,
                          s.predicted_ms, s.tg_tps * tg_factor if s.tg_tps is not None else None) for s in p.samples]
        store.record_point(Point(second, new_key[p.build_key], p.engine, ncmoe=p.ncmoe, status=p.status,
                                 failure_class=p.failure_class, n_ctx=p.n_ctx, samples=samples))
    return second


def test_against_matches_rebuilt_builds_by_backend_without_measuring(tmp_path):
    from llamaforge.reproduce import verdict_between

    store, first = run_fake.build(tmp_path)
    n = len(store.points(first))   # the failed point failed the same way in both: that reproduces too
    same = verdict_between(store, first, _rebuilt_run(store, first, 1.0))
    assert same.line() == f"{n}/{n} points reproduce"
    slower = verdict_between(store, first, _rebuilt_run(store, first, 0.5))
    assert slower.n_ok == 1 and "differs by -50% (tg)" in slower.line()
    with pytest.raises(BenchError, match="several builds of one backend"):
        verdict_between(store, first, _rebuilt_run(store, first, 1.0, dup_backend=True))
    store.close()


def test_each_judged_point_carries_the_conditions_of_both_measurements():
    """A point that does not reproduce is named with what telemetry saw on each side (clocks, load, flags)."""
    tel = {"samples": 3, "host": {"load1": {"median": 2.5}, "other_cpu_cores": {"median": 0.0}},
           "gpu": [{"sm_clock_mhz": {"median": 1980.0}, "throttle_reasons": {}}], "other_gpu_processes": []}
    hot = {**tel, "gpu": [{"sm_clock_mhz": {"median": 1410.0}, "throttle_reasons": {"hw_thermal_slowdown": 0.6}}]}
    a, b = _pt("vk", 4, 70.0), _pt("vk", 4, 35.0, seed=2)
    a.extra, b.extra = {"telemetry": tel}, {"telemetry": hot}
    v = check_points([a], [b], {"vk": "vulkan"})
    assert v.points[0].status == "differs"
    first, again = v.points[0].conditions
    assert first == "SM 1,980 MHz, load 2.5, clean"
    assert again.startswith("SM 1,410 MHz") and "throttled: hw_thermal_slowdown 60%" in again
    assert v.to_dict()["points"][0]["conditions"] == [first, again]
    bare = check_points([_pt("vk", 4, 70.0)], [_pt("vk", 4, 70.0, seed=2)], {"vk": "vulkan"})
    assert bare.points[0].conditions == ("–", "–")


def _subset_child(store, parent_id, ncmoes: set[int]) -> str:
    child = store.new_run("sweep", {"reproduces": parent_id}, parent_run=parent_id)
    for p in store.points(parent_id):
        if p.ncmoe in ncmoes:
            store.record_point(Point(child, p.build_key, p.engine, ncmoe=p.ncmoe, status=p.status,
                                     failure_class=p.failure_class, n_ctx=p.n_ctx, samples=p.samples))
    return child


def _reproduction_notes(store, run_id) -> list[str]:
    return next(s for s in build_sections(rdata.load(store, run_id), []) if s.id == "reproduction").notes


def test_the_report_names_the_points_no_reproduce_run_measured_again(tmp_path):
    store, parent = run_fake.build(tmp_path)
    ncmoes = sorted({p.ncmoe for p in store.points(parent)})
    _subset_child(store, parent, {ncmoes[0]})
    _subset_child(store, parent, {ncmoes[0], ncmoes[1]})
    note = _reproduction_notes(store, parent)[-1]
    left = [p for p in store.points(parent) if p.ncmoe not in ncmoes[:2]]   # neither child measured these
    names = note.split(" (", 1)[1].split(")", 1)[0].split(", ")
    assert note.startswith(f"Not re-measured by `reproduce`: {len(left)} point(s) (")
    assert sorted(int(n.rsplit(" ", 1)[1]) for n in names) == sorted(p.ncmoe for p in left)
    _subset_child(store, parent, set(ncmoes))
    assert _reproduction_notes(store, parent)[-1] == "Every point of this run was re-measured by `reproduce`."
