"""reproduce: per-point verdicts of the judge on server starts (same / differs / inconclusive), the run link, bad
input; report sections."""

from __future__ import annotations

import random

import pytest
import run_fake

from llamaforge.errors import BenchError
from llamaforge.findings.reproduction import MetricCheck, check_points, sweep_run, verdict_for
from llamaforge.judge import judge
from llamaforge.records import PointDetail
from llamaforge.report import data as rdata
from llamaforge.report.contents import build_sections
from llamaforge.reproduce.remeasure import reproduce, select_points
from llamaforge.reproduce.show import verdict_table
from llamaforge.store import Point, Sample


def _pt(key: str, ncmoe: int, tg: float, spread: float = 0.01, k: int = 4, n: int = 2, seed: int = 1) -> Point:
    """A point measured in ``k`` server starts whose levels spread ±``spread``, ``n`` requests each (±0.2 %)."""
    rng = random.Random(seed)
    p = Point("r", key, "server", ncmoe=ncmoe)
    for launch in range(1, k + 1):
        lp, lt = 500 * rng.uniform(1 - spread, 1 + spread), tg * rng.uniform(1 - spread, 1 + spread)
        p.samples += [Sample(i, False, "", 100, 1.0, lp * rng.uniform(0.998, 1.002), 64, 1.0,
                             lt * rng.uniform(0.998, 1.002), launch=launch) for i in range(1, n + 1)]
    return p


def _check(a: list[float], b: list[float], min_effect: float = 0.05) -> MetricCheck:
    """One metric judged from one value per server start on each side."""
    return MetricCheck("tg", judge([[v] for v in a], [[v] for v in b], min_effect=min_effect))


def test_metric_is_same_within_the_margin_differs_beyond_it_and_otherwise_inconclusive():
    a = [100, 101, 99, 100, 102]
    assert _check(a, [150, 151, 149, 152, 150]).agrees() is False
    assert _check(a, [100.5, 101, 99.5, 100, 101]).agrees() is True
    # a clear 3 % change: inside the ±5 % margin, so the same; beyond a 1 % margin it differs
    assert _check(a, [103.0, 103.1, 103.2, 103.1, 103.0]).agrees() is True
    assert _check(a, [103.0, 103.1, 103.2, 103.1, 103.0], min_effect=0.01).agrees() is False
    # noisy starts whose intervals overlap: the data cannot tell, which is never a pass
    noisy = _check([80, 120, 100, 90, 115], [85, 125, 95, 110, 130])
    assert noisy.agrees() is None and noisy.judgement.verdict == "inconclusive"
    # many tight requests in ONE start per side: requests are not replicates, so +30 % is inconclusive too
    one_start = MetricCheck("tg", judge([[100.0, 100.1, 99.9, 100.0]], [[130.0, 130.1, 129.9, 130.0]]))
    assert one_start.agrees() is None


def test_verdict_line_counts_and_names_the_differing_point():
    parent = [_pt("vk", 0, 100.0), _pt("vk", 4, 70.0), _pt("cu", 0, 200.0)]
    child = [_pt("vk", 0, 150.0, seed=2), _pt("vk", 4, 70.5, seed=3), _pt("cu", 0, 199.0, seed=4)]
    v = check_points(parent, child, {"vk": "vulkan", "cu": "cuda"}, parent_id="A", child_id="B")
    assert v.n_ok == 2
    assert v.line().startswith("2/3 points reproduce (same within ±5%), 1 differ; Vulkan ncmoe 0 differs by +50% (tg [1.")
    assert [p.status for p in v.points if p.name == "Vulkan ncmoe 0"] == ["differs"]
    assert v.family == "Holm, 6 comparisons"


def test_the_terminal_table_has_a_row_per_point_and_metric_with_its_verdict():
    parent = [_pt("vk", 0, 100.0), _pt("cu", 0, 200.0)]
    child = [_pt("vk", 0, 150.0, seed=2), _pt("cu", 0, 199.0, seed=4)]
    v = check_points(parent, child, {"vk": "vulkan", "cu": "cuda"}, parent_id="A", child_id="B")
    t = verdict_table(v)
    assert t.title == "run B reproduces run A?" and t.row_count == sum(len(pc.metrics) or 1 for pc in v.points)
    cells = [c._cells for c in t.columns]
    verdicts = {(point, metric): verdict for point, metric, *_, verdict in zip(*cells, strict=True)}
    assert verdicts[("Vulkan ncmoe 0", "tg")] == "differs" and verdicts[("Vulkan ncmoe 0", "pp")] == "same"


def test_noisy_points_are_inconclusive_never_reproduced():
    """Starts spread ±25 %: whether the re-run agrees cannot be told, and a noisy point must not pass more
    easily than a quiet one (as overlapping wide CIs used to make it)."""
    parent, child = [_pt("vk", 1, 100.0, spread=0.25)], [_pt("vk", 1, 100.0, spread=0.25, seed=2)]
    v = check_points(parent, child, {"vk": "vulkan"})
    assert [p.status for p in v.points] == ["inconclusive"] and v.n_ok == 0
    assert v.line().startswith("0/1 points reproduce (same within ±5%), 1 inconclusive; Vulkan ncmoe 1 inconclusive at")


def test_two_start_points_print_the_range_of_start_ratios_and_no_interval():
    parent, child = [_pt("vk", 1, 100.0, k=2)], [_pt("vk", 1, 200.0, k=2, seed=2)]
    v = check_points(parent, child, {"vk": "vulkan"})
    (pc,) = v.points
    tg = next(m for m in pc.metrics if m.metric == "tg")
    assert pc.status == "differs" and tg.judgement.small   # +100 % beyond even the assumed 25 % spread
    assert "(tg starts 1.9" in v.line() and "[" not in v.line()
    assert v.to_dict()["points"][0]["metrics"]["tg"]["judgement"]["p_differs"] is None


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
    from llamaforge.findings.labels import SENTINEL_LABEL

    def sentinel(tg: float) -> Point:
        p = _pt("cu", 0, tg, seed=7)
        p.label = SENTINEL_LABEL
        return p

    parent = [_pt("cu", 0, 200.0), sentinel(200.0)]
    child = [_pt("cu", 0, 199.0, seed=4), sentinel(300.0)]
    v = check_points(parent, child, {"cu": "cuda"})
    assert [p.name for p in v.points] == ["CUDA ncmoe 0"]
    assert v.line() == "1/1 points reproduce (same within ±5%)"


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
    from llamaforge.reproduce import remeasure as rep

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
                                                             p.build_key else 1.0), launch=s.launch)
                                          for s in p.samples], detail=p.detail)
        store.record_point(q)
    return child


def test_reports_of_both_runs_show_the_reproduction(tmp_path):
    store, parent = run_fake.build(tmp_path)
    child = _child_run(store, parent, 1.5)
    assert store.get_run(child).parent_run == parent
    assert [r.id for r in store.child_runs(parent)] == [child]
    v = verdict_for(store, store.get_run(parent), store.get_run(child))
    n = len(v.points)
    assert v.line().startswith(f"{n - 1}/{n} points reproduce (same within ±5%), 1 differ; Vulkan ncmoe 1 differs by +50%")
    for rid in (parent, child):
        secs = build_sections(rdata.load(store, rid), [])
        rep = [s for s in secs if s.id == "reproduction"]
        assert rep and v.line() in rep[0].notes[0]
        assert any(v.line() in n for n in next(s for s in secs if s.id == "summary").notes)


def test_report_host_memory_and_conditions_sections(tmp_path):
    store, run_id = run_fake.build(tmp_path)
    p = store.points(run_id)[3]
    p.detail = PointDetail.from_json({"host_mem": {"rss_anon_peak_mib": 300.0, "rss_file_peak_mib": 900.0},
                                      "telemetry": {"samples": 4, "host": {"other_cpu_cores": {"min": 1, "median": 1.5, "max": 2}},
                                                    "gpu": [{"sm_clock_mhz": {"min": 1000, "median": 1100, "max": 1200},
                                                             "throttle_reasons": {"hw_thermal_slowdown": 0.5}}],
                                                    "other_gpu_processes": [{"pid": 77, "device": 0, "used_mib": 10.0}]}})
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

    second = store.new_run("sweep", store.get_run(first_id).plan.replace(backends=["cpu", "vulkan"]))
    new_key = {}
    for b in store.builds_for_run(first_id):
        new_key[b["key"]] = b["key"] + "-rebuilt"
        store.add_build(BuildManifest(new_key[b["key"]], b["backend"], "dev", b.get("commit") or "0" * 40).to_json(),
                        second)
    if dup_backend:
        store.add_build(BuildManifest("cpu-other", "cpu", "dev", "1" * 40).to_json(), second)
    for p in store.points(first_id):
        samples = [Sample(s.idx, s.warmup, s.test, s.prompt_n, s.prompt_ms, s.pp_tps, s.predicted_n,
                          s.predicted_ms, s.tg_tps * tg_factor if s.tg_tps is not None else None, launch=s.launch)
                   for s in p.samples]
        store.record_point(Point(second, new_key[p.build_key], p.engine, ncmoe=p.ncmoe, status=p.status,
                                 failure_class=p.failure_class, n_ctx=p.n_ctx, samples=samples))
    return second


def test_against_matches_rebuilt_builds_by_backend_without_measuring(tmp_path):
    from llamaforge.findings.reproduction import verdict_between

    store, first = run_fake.build(tmp_path)
    n = len(store.points(first))   # the failed point failed the same way in both: that reproduces too
    same = verdict_between(store, first, _rebuilt_run(store, first, 1.0))
    assert same.line() == f"{n}/{n} points reproduce (same within ±5%)"
    slower = verdict_between(store, first, _rebuilt_run(store, first, 0.5))
    assert slower.n_ok == 1 and f"{n - 1} differ;" in slower.line() and "differs by -50% (tg [0.4" in slower.line()
    with pytest.raises(BenchError, match="several builds of one backend"):
        verdict_between(store, first, _rebuilt_run(store, first, 1.0, dup_backend=True))
    store.close()


def test_each_judged_point_carries_the_conditions_of_both_measurements():
    """A point that does not reproduce is named with what telemetry saw on each side (clocks, load, flags)."""
    tel = {"samples": 3, "host": {"load1": {"median": 2.5}, "other_cpu_cores": {"median": 0.0}},
           "gpu": [{"sm_clock_mhz": {"median": 1980.0}, "throttle_reasons": {}}], "other_gpu_processes": []}
    hot = {**tel, "gpu": [{"sm_clock_mhz": {"median": 1410.0}, "throttle_reasons": {"hw_thermal_slowdown": 0.6}}]}
    a, b = _pt("vk", 4, 70.0), _pt("vk", 4, 35.0, seed=2)
    a.detail.telemetry, b.detail.telemetry = tel, hot
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


def test_the_report_says_first_whether_its_numbers_survived_a_re_measurement(tmp_path):
    """A sweep no `reproduce` run measured again says so where the report starts (not only in a README);
    once re-measured it points at the Reproduction section; the re-run's own report does neither."""
    store, parent = run_fake.build(tmp_path)
    first = build_sections(rdata.load(store, parent), [])[0]
    assert first.intro.startswith("Not re-measured:") and f"llamaforge reproduce {parent}" in first.intro
    child = _child_run(store, parent, 1.0)
    assert build_sections(rdata.load(store, parent), [])[0].intro.startswith("Re-measured:")
    assert "re-measured" not in build_sections(rdata.load(store, child), [])[0].intro.lower()
