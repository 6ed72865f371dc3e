"""Process-level replication: the launch schedule, nested statistics, drift sentinels, resume by launch."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest
from invoke import Context

from fakes import FakeBuild
from llamaforge.bench import sweep
from llamaforge.bench.plan import Plan, make_plan, make_points
from llamaforge.bench.schedule import Slot, default_sentinel_every, launch_order, remaining, sweep_schedule
from llamaforge.findings.drift import drift_flags, drifted_points
from llamaforge.findings.labels import SENTINEL_LABEL
from llamaforge.judge import CONSERVATIVE, Starts, estimate, next_start
from llamaforge.store import Point, Sample, Store

# ---------------------------------------------------------------------------------- statistics


def _groups(means, per=4, sd=1.0, seed=3):
    rng = np.random.default_rng(seed)
    return [list(m + rng.normal(0, sd, per)) for m in means]


def _width(lo_hi) -> float:
    return lo_hi[1] - lo_hi[0]


def test_the_interval_is_wide_when_starts_differ_however_tight_their_requests():
    spread = estimate(_groups([90, 100, 110, 120], sd=0.2))
    agree = estimate(_groups([100, 100, 100, 100], sd=0.2))
    assert spread.kind == agree.kind == "ci" and spread.shape == "4×4"
    assert spread.half_rel > 0.08 and agree.half_rel < 0.01


def test_within_and_between_start_spreads_are_told_apart():
    rng = np.random.default_rng(0)
    means = rng.normal(100, 5, 40)                              # between starts: sd 5 (≈ 5 %)
    e = estimate([list(m + rng.normal(0, 1, 6)) for m in means])   # within a start: sd 1 (≈ 1 %)
    assert e.within == pytest.approx(0.01, rel=0.3)
    assert e.spread is not None and e.spread.sd == pytest.approx(0.05, rel=0.3)


def test_one_start_measures_no_between_spread_and_claims_no_interval():
    e = estimate([[10.0, 11.0, 12.0, 10.5]])
    assert e.kind == "single" and e.spread is None and e.low == e.high == e.centre
    assert "spread unknown" in e.fmt()


# ------------------------------------------------------------------------------------ schedule


def test_every_item_gets_k_launches_interleaved_and_never_back_to_back():
    for seed in range(30):
        order = launch_order(5, 3, seed)
        assert len(order) == 15
        assert sorted((s.item, s.launch) for s in order) == [(i, k) for i in range(5) for k in (1, 2, 3)]
        assert all(a.item != b.item for a, b in zip(order, order[1:], strict=False))
        # launches of one item come in order, one per block
        for block in range(3):
            assert sorted(s.item for s in order[block * 5:(block + 1) * 5]) == list(range(5))


def test_the_schedule_is_reproducible_from_its_seed():
    assert launch_order(6, 2, 42) == launch_order(6, 2, 42)
    assert any(launch_order(6, 2, 42) != launch_order(6, 2, s) for s in range(5))


def test_a_single_point_may_repeat_back_to_back():
    assert [s.launch for s in launch_order(1, 3, 0)] == [1, 2, 3]


def test_sentinels_run_every_n_launches_and_at_the_end():
    sched = sweep_schedule(4, 2, 0, [0, 2], 3)
    pos = [i for i, s in enumerate(sched) if s.sentinel]
    assert [s for s in sched if s.sentinel] == [Slot(0, 1, True), Slot(2, 1, True), Slot(0, 2, True), Slot(2, 2, True),
                                               Slot(0, 3, True), Slot(2, 3, True)]
    regular = [s for s in sched if not s.sentinel]
    assert len(regular) == 8 and pos[-1] == len(sched) - 1
    assert sched[3].sentinel and sched[8].sentinel        # after 3 and 6 regular launches
    assert sweep_schedule(4, 2, 0, [0], 0) == launch_order(4, 2, 0)   # 0 = off


def test_sentinels_are_on_by_default_only_for_larger_sweeps():
    assert default_sentinel_every(8, None) == 0
    assert default_sentinel_every(11, None) == 10
    assert default_sentinel_every(30, 0) == 0 and default_sentinel_every(3, 2) == 2


def test_remaining_skips_done_launches_and_keeps_them_apart():
    sched = launch_order(3, 2, 1)
    done = {(s.item, s.launch, s.sentinel) for s in sched[:2]}
    todo = remaining(sched, done)
    assert [(s.item, s.launch) for s in todo] == [(s.item, s.launch) for s in sched[2:]]
    # removing the middle of A B A leaves A A: it is moved apart when something else can go between
    todo = remaining([Slot(0, 1), Slot(1, 1), Slot(0, 2), Slot(2, 1)], {(1, 1, False)})
    assert [s.item for s in todo] == [0, 2, 0]


# ------------------------------------------------------------------------------- sweep (faked)


def _plan(points="0:2", **kw) -> Plan:
    base = dict(model_ref="m.gguf", model_path=Path("/nonexistent/m.gguf"), model_facts={"n_layers": 4},
                points=make_points(points, n_layers=4), repeats=2, prompt_tokens=64, n_predict=8)
    base.update(kw)
    return make_plan(**base)


def _fake_once(calls: list, *, tg=lambda call, label: 100.0, fail=lambda call: False, stop_after=None):
    def once(build, model_path, spec, plan, run_id, label="", *, log_dir, on_phase=None, state=None, launch=None,
             engine=None, busy=None):
        if stop_after is not None and len(calls) >= stop_after:
            raise KeyboardInterrupt
        calls.append((build.key, spec.ncmoe, label, launch))
        p = Point(run_id=run_id, build_key=build.key, engine="server", ncmoe=spec.ncmoe, ngl=spec.ngl, label=label,
                  n_predict=plan.n_predict, started=time.time(), n_ctx=4096, rss_peak_mib=100.0 + len(calls),
                  t_load_s=1.0)
        if fail(calls[-1]):
            p.status, p.failure_class, p.failure_detail = "failed", "crash", "boom"
        else:
            v = tg(calls[-1], label)
            p.samples = [Sample(0, True, tg_tps=v / 2, pp_tps=10 * v)] + [
                Sample(i + 1, False, tg_tps=v + 0.1 * i, pp_tps=10 * v + i) for i in range(plan.repeats)]
        p.finished = time.time()
        for s in p.samples:
            s.launch = launch or 1
        return p
    return once


def test_each_point_is_measured_in_k_launches_with_the_launch_stored_on_every_sample(store, monkeypatch):
    calls: list = []
    monkeypatch.setattr(sweep, "_measure_once", _fake_once(calls))
    builds = [FakeBuild("cpu-a", mode=None), FakeBuild("cpu-b", mode=None)]
    plan = _plan("0:2", launches=2, seed=5, sentinel_every=0)
    run = sweep.run_sweep(plan, builds, store, progress=False)
    assert len(calls) == 12 and all(a[:3] != b[:3] for a, b in zip(calls, calls[1:], strict=False))
    # interleaved: the first six starts cover all six items once
    assert len({c[:2] for c in calls[:6]}) == 6
    pts = store.points(run)
    assert len(pts) == 6
    for p in pts:
        assert sorted({s.launch for s in p.samples}) == [1, 2]
        assert [len(g) for g in p.launch_groups("tg_tps")] == [2, 2]      # warm-ups excluded
        assert sorted(r.launch for r in p.launches) == [1, 2] and p.t_load_s == 2.0
    seqs = sorted(r.seq for p in pts for r in p.launches)
    assert seqs == list(range(1, 13))
    assert store.get_run(run).plan.launches == 2 and store.get_run(run).plan.seed == 5


def test_resume_measures_only_the_missing_launches(store, monkeypatch):
    calls: list = []
    builds = [FakeBuild("cpu-a", mode=None)]
    plan = _plan("0:2", launches=2, seed=1, sentinel_every=0)
    monkeypatch.setattr(sweep, "_measure_once", _fake_once(calls, stop_after=4))
    with pytest.raises(KeyboardInterrupt):
        sweep.run_sweep(plan, builds, store, progress=False)
    run = store.list_runs()[0].id
    assert store.get_run(run).status == "interrupted"
    first = list(calls)
    calls2: list = []
    monkeypatch.setattr(sweep, "_measure_once", _fake_once(calls2))
    sweep.run_sweep(Plan.from_json(store.get_run(run).plan), builds, store, resume_run=run,
                     progress=False)
    assert len(calls2) == 2 and set(calls2).isdisjoint(first)
    assert all(sorted({s.launch for s in p.samples}) == [1, 2] for p in store.points(run))


def test_a_failed_launch_fails_its_point_and_cancels_its_later_launches(store, monkeypatch):
    calls: list = []
    monkeypatch.setattr(sweep, "_measure_once", _fake_once(calls, fail=lambda c: c[1] == 1))
    run = sweep.run_sweep(_plan("0:2", launches=3, seed=2, sentinel_every=0), [FakeBuild("a", mode=None)], store,
                           progress=False)
    assert sum(1 for c in calls if c[1] == 1) == 1 and len(calls) == 7
    bad = next(p for p in store.points(run) if p.ncmoe == 1)
    assert bad.status == "failed" and bad.failure_class == "crash"


def _jitter(calls: list) -> float:
    """Start-to-start noise of ±0.4 % (deterministic), so the reference points have a spread of their own."""
    return 1 + 0.004 * (len(calls) % 3 - 1)


def test_sentinels_are_stored_apart_and_flag_drift_with_the_points_in_between(store, monkeypatch):
    calls: list = []

    def tg(call, label):   # the machine slows down by 20 % for the last two starts (the final sentinels)
        return (80.0 if len(calls) > 22 else 100.0) * _jitter(calls)

    monkeypatch.setattr(sweep, "_measure_once", _fake_once(calls, tg=tg))
    builds = [FakeBuild("a", mode=None), FakeBuild("b", mode=None)]
    # 3 starts per point: the reference point's own spread gives the yardstick of one new start
    run = sweep.run_sweep(_plan("0:2", launches=3, seed=3, sentinel_every=6), builds, store, progress=False)
    pts = store.points(run)
    sent = [p for p in pts if p.label == SENTINEL_LABEL]
    assert {(p.build_key, p.ncmoe) for p in sent} == {("a", 0), ("b", 0)}
    assert all(len(p.launches) == 3 for p in sent)            # after 6 and 12 regular launches, and at the end
    ref = next(p for p in pts if p.label == "" and p.build_key == "a" and p.ncmoe == 0)
    assert {s.launch for s in ref.samples} == {1, 2, 3}       # sentinel samples are not pooled in
    flags = drift_flags(pts)
    assert {(f.build_key, f.metric, f.sentinel) for f in flags} == {(b, m, 3) for b in "ab" for m in ("pp", "tg")}
    assert all(f.change == pytest.approx(-0.2, abs=0.01) for f in flags)
    assert all(f.ref_ci[0] > 90.0 * (10 if f.metric == "pp" else 1) for f in flags)   # one new start: within a few %
    # marked: the six regular launches between the second and the third sentinel round
    last_regular = sorted((r.seq, p.build_key, p.ncmoe) for p in pts if p.label == "" for r in p.launches)[-6:]
    assert drifted_points(flags) == {(b, n, -1) for _s, b, n in last_regular}


def test_two_start_points_judge_drift_by_a_borrowed_spread_and_say_so(store, monkeypatch):
    """With 2 starts per point and too few points for the build's own pooled spread, a sentinel is judged
    against the conservative 25 % bound: a 20 % drop is not called drift on that evidence."""
    calls: list = []
    monkeypatch.setattr(sweep, "_measure_once", _fake_once(
        calls, tg=lambda call, label: (80.0 if len(calls) > 16 else 100.0) * _jitter(calls)))
    builds = [FakeBuild("a", mode=None), FakeBuild("b", mode=None)]
    run = sweep.run_sweep(_plan("0:2", launches=2, seed=3, sentinel_every=4), builds, store, progress=False)
    assert drift_flags(store.points(run)) == []
    ref = next(p for p in store.points(run) if p.label == "" and p.ncmoe == 0)
    assert next_start(Starts.of(ref.launch_groups("tg_tps"))).assumed == CONSERVATIVE.basis


def test_no_drift_is_flagged_on_a_steady_machine(store, monkeypatch):
    calls: list = []
    monkeypatch.setattr(sweep, "_measure_once", _fake_once(calls, tg=lambda call, label: 100.0 * _jitter(calls)))
    run = sweep.run_sweep(_plan("0:2", launches=3, seed=3, sentinel_every=2), [FakeBuild("a", mode=None)], store,
                           progress=False)
    assert drift_flags(store.points(run)) == []


def test_samples_of_old_stores_count_as_one_launch(tmp_path):
    import sqlite3

    db = tmp_path / "old.sqlite"
    Store(db).close()
    con = sqlite3.connect(db)
    con.executescript("CREATE TABLE s2 AS SELECT id, point_id, idx, warmup, test, prompt_n, prompt_ms, pp_tps, "
                      "predicted_n, predicted_ms, tg_tps, raw_json FROM samples; DROP TABLE samples; "
                      "ALTER TABLE s2 RENAME TO samples;"
                      "UPDATE meta SET value='1' WHERE key='schema_version';")  # stores without launch are v1
    con.close()
    with Store(db) as s:
        run = s.new_run("sweep", {})
        s.record_point(Point(run_id=run, build_key="k", engine="server", samples=[Sample(1, False, tg_tps=5.0)]))
        assert s.points(run)[0].samples[0].launch == 1


# ---------------------------------------------------------------------------------------- CLI


@pytest.mark.parametrize("kw, message", [({"launches": "0"}, "--launches 0 is out of range"),
                                         ({"launches": "two"}, "--launches 'two' is not a whole number"),
                                         ({"max_launches": "2"}, "--max-launches 2 leaves --launches auto no room"),
                                         ({"launches": "3", "max_launches": "5"}, "only applies to --launches auto"),
                                         ({"precision": "lots"}, "--precision"),
                                         ({"sentinel_every": "-1"}, "--sentinel-every -1 is out of range")])
def test_bad_launch_options_are_one_line(tmp_path, monkeypatch, capsys, kw, message):
    from llamaforge.commands.bench import bench

    monkeypatch.setenv("LLAMAFORGE_RESULTS", str(tmp_path))
    with pytest.raises(SystemExit) as exc:
        bench(Context(), model="synth:tiny-qwen35moe", **kw)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err and len(err.strip().splitlines()) <= 2
    assert not list(tmp_path.glob("*.sqlite"))


def test_two_launch_points_get_the_note_that_their_interval_is_only_the_range_of_two(tmp_path):
    """2 clusters resample to at most the two starts' values: the report must say so (and only then)."""
    import run_fake

    from llamaforge.report.data import load
    from llamaforge.report.replication import replication_section

    store, run_id = run_fake.build(tmp_path)
    data = load(store, run_id)
    assert not any("2 server starts" in n for n in replication_section(data).notes)
    pt = next(r.point for r in data.all_rows if r.point is not None and r.point.samples)
    for s in pt.samples[3:]:
        s.launch = 2
    assert any("2 server starts" in n for n in replication_section(data).notes)
    for s in pt.samples[4:]:
        s.launch = 3          # three starts: the bootstrap has more than the two values to draw from
    assert not any("2 server starts" in n for n in replication_section(data).notes)
    store.close()


def test_drift_table_names_the_points_in_between_per_series_compactly(tmp_path):
    """A sentinel at the end of a sweep has every point in between: the cell says "all N points" per
    series instead of listing 30 build keys; a partial stretch lists its offloads."""
    import run_fake

    from llamaforge.findings.drift import DriftFlag
    from llamaforge.report.data import load
    from llamaforge.report.replication import between_cell

    store, run_id = run_fake.build(tmp_path)
    data = load(store, run_id)
    a, b = data.series[0], data.series[1]
    every_a = [(a.key[0], r.ncmoe, r.ngl, 1) for r in a.rows]
    some_b = [(b.key[0], r.ncmoe, r.ngl, 1) for r in b.rows[1:3]]
    flag = DriftFlag(a.key[0], 0, -1, "tg", 1, 99, 90.0, 100.0, (98.0, 102.0), tuple(every_a + some_b))
    cell = between_cell(data, flag)
    want_b = ", ".join(f"ncmoe {r.ncmoe}" for r in sorted(b.rows[1:3], key=lambda r: r.ncmoe))
    assert cell == f"{a.name}: all {len(a.rows)} points; {b.name}: {want_b}"
    assert between_cell(data, DriftFlag(a.key[0], 0, -1, "tg", 1, 99, 90.0, 100.0, (98.0, 102.0))) == "–"
    store.close()


def test_one_start_per_point_says_the_between_start_spread_was_not_measured_unless_sequential(tmp_path):
    import dataclasses

    import run_fake

    from llamaforge.report import data as rdata
    from llamaforge.report.replication import replication_section

    store, run_id = run_fake.build(tmp_path, launches=1)
    with store:
        data = rdata.load(store, run_id)
    assert any("NOT measured" in n for n in replication_section(data).notes)
    auto = dataclasses.replace(data, run=dataclasses.replace(
        data.run, plan=data.run.plan.replace(sequential={"max_launches": 10, "precision": 0.05})))
    assert not any("NOT measured" in n for n in replication_section(auto).notes)
