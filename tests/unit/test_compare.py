"""Comparison: ABBA interleaving, per-metric verdicts of the judge on server starts (one stored point per start),
``--launches auto`` rounds, Markdown, bad input — with fake builds and a fake measure_point (no llama.cpp)."""

from __future__ import annotations

import random
from pathlib import Path
from types import SimpleNamespace

import pytest
from scipy.stats import mannwhitneyu

from llamaforge.bench.plan import PointSpec
from llamaforge.compare import session as cmp
from llamaforge.compare.session import CompareError, CompareRequest, Side, schedule
from llamaforge.compare.show import compare_table
from llamaforge.findings.comparison import verdict_word
from llamaforge.paths import Paths
from llamaforge.report.kinds import compare as compare_kind
from llamaforge.store import Point, Sample, Store


def test_schedule_alternates_sides_abba_and_covers_every_round_and_point() -> None:
    order = schedule(3, 2)
    assert len(order) == 12
    firsts = [order[i][2] for i in range(0, len(order), 2)]
    assert firsts == ["A", "B", "B", "A", "A", "B"]      # per (round, point): A B, B A, ...
    for r in (1, 2, 3):
        for i in (0, 1):
            assert sorted(s for rr, ii, s in order if (rr, ii) == (r, i)) == ["A", "B"]


def test_repeats_are_requests_per_start_and_launches_fix_or_cap_the_rounds() -> None:
    req = CompareRequest(Side("A", "x", "cpu"), Side("B", "y", "cpu"), "m", [PointSpec(0)], repeats=7, rounds=3)
    assert req.per_round == 7 and req.n_rounds == 3                      # --launches 3: exactly 3 starts a side
    assert (req.policy.min_starts, req.policy.max_starts) == (3, 3)
    auto = CompareRequest(Side("A", "x", "cpu"), Side("B", "y", "cpu"), "m", [PointSpec(0)], repeats=2)
    assert auto.rounds is None and auto.per_round == 2                   # --launches auto (the default)
    assert (auto.policy.min_starts, auto.n_rounds) == (3, 10)            # from 3 starts, up to --max-launches
    capped = CompareRequest(Side("A", "x", "cpu"), Side("B", "y", "cpu"), "m", [PointSpec(0)], max_launches=5)
    assert capped.n_rounds == 5


@pytest.mark.parametrize("kw,match", [({"repeats": 0}, "--repeats must be at least 1"),
                                      ({"rounds": 0}, "--launches must be at least 1"),
                                      ({"max_launches": 2}, "--max-launches 2 leaves --launches auto no room"),
                                      ({"min_effect": 1.5}, "out of range")])
def test_bad_options_are_clear_errors(kw, match) -> None:
    with pytest.raises(CompareError, match=match) as e:
        CompareRequest(Side("A", "x", "cpu"), Side("B", "y", "cpu"), "m", [PointSpec(0)], **kw)
    assert e.value.fix


def _build(name: str, backend: str = "cpu"):  # noqa: ANN202
    return SimpleNamespace(key=f"{name}-{backend}-0", backend=backend, pin=name, commit=name * 8,
                           manifest={"source": {"subject": f"subject {name}"}})


@pytest.fixture
def paths(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Paths:
    monkeypatch.setenv("LLAMAFORGE_RESULTS", str(tmp_path / "results"))
    monkeypatch.setattr("llamaforge.bench.plan.resolve_model", lambda ref, paths: tmp_path / "m.gguf")
    return Paths(tmp_path)


def _fake_measure(speeds: dict[str, tuple[float, float]], calls: list[tuple[str, str]], *, between: float = 0.0,
                  within: float = 0.01):
    """One server start per call: its level drawn within ±``between`` of the side's speed, its ``plan.repeats``
    requests within ±``within`` of that level (plus a slow warm-up)."""
    rng = random.Random(7)

    def measure_point(build, model_path, spec, plan, store, run_id, label=""):  # noqa: ANN001
        calls.append((label, build.key))
        pp, tg = (v * (1 + rng.uniform(-between, between)) for v in speeds[build.key])
        p = Point(run_id=run_id, build_key=build.key, engine="server", ncmoe=spec.ncmoe, label=label,
                  samples=[Sample(0, True, pp_tps=pp / 10, tg_tps=tg / 10)] + [
                      Sample(i + 1, False, pp_tps=pp * (1 + rng.uniform(-within, within)),
                             tg_tps=tg * (1 + rng.uniform(-within, within))) for i in range(plan.repeats)])
        store.record_point(p)
        return p

    return measure_point


def test_compare_measures_interleaved_and_calls_tg_worse_pp_unchanged(paths, monkeypatch) -> None:
    a, b = _build("aaaa"), _build("bbbb")
    calls: list[tuple[str, str]] = []
    monkeypatch.setattr("llamaforge.bench.sweep.measure_point",
                        _fake_measure({a.key: (1000.0, 100.0), b.key: (1003.0, 80.0)}, calls))
    req = CompareRequest(Side("A", "aaaa", "cpu"), Side("B", "bbbb", "cpu"), "synth:x", [PointSpec(0), PointSpec(2)],
                         repeats=6, rounds=4)
    with Store(paths.store_db) as store:
        run_id = cmp.run_compare(paths, store, req, builds=(a, b), progress=False)
        run = store.get_run(run_id)
        assert run.kind == "compare" and run.status == "done"
        assert run.plan.compare.a.ref == "aaaa" and run.plan.compare.b.build == b.key
        assert [c[0] for c in calls[:4]] == ["A.1", "B.1", "B.1", "A.1"]
        assert {p.label for p in store.points(run_id)} == {f"{s}.{r}" for s in "AB" for r in range(1, 5)}
        rows = {(r["ncmoe"], r["metric"]): r for r in run.summary.comparisons}
        assert set(rows) == {(0, "pp"), (0, "tg"), (2, "pp"), (2, "tg")}
        tg = rows[(0, "tg")]
        assert tg["comparison"]["verdict"] == "differs" and verdict_word(tg["comparison"]) == "worse"
        assert tg["comparison"]["ratio"] == pytest.approx(0.8, rel=0.03) and tg["comparison"]["high"] < 0.95
        assert (tg["A"]["k"], tg["A"]["n_requests"], tg["A"]["shape"]) == (4, 24, "4×6")   # 4 starts × 6 requests
        assert tg["comparison"]["adjusted"] == "Holm, 4 comparisons"
        from llamaforge.judge import judge as judge_one
        from llamaforge.judge.family import control
        alone = judge_one(*(_starts_of(store, run_id, side, 0, "tg_tps") for side in "AB"))
        held = control([alone])[0]       # the 95 % interval alone: the one stored is wider, at Holm's level
        assert tg["comparison"]["low"] < held.low and tg["comparison"]["high"] > held.high
        assert rows[(0, "pp")]["comparison"]["verdict"] == "same"   # +0.3 %: within the ±5 % margin
        assert [p.verdict for p in store.probes(run_id)] == ["A", "B"]
        md = compare_kind.lead(store, run)
        assert "B/A [CI: Holm, 4 comparisons]" in md and "each at the level Holm's step-down tested it at" in md
        assert "**− worse**" in md and "= same" in md and "| 2 | tg |" in md and "4×6" in md
        table = compare_table(run)
        assert table.row_count == 4


def test_two_backends_of_one_commit_are_two_sides(paths, monkeypatch) -> None:
    a, b = _build("cccc", "cpu"), _build("cccc", "vulkan")
    calls: list[tuple[str, str]] = []
    monkeypatch.setattr("llamaforge.bench.sweep.measure_point", _fake_measure({a.key: (500.0, 50.0), b.key: (900.0, 70.0)}, calls))
    req = CompareRequest(Side("A", "cccc", "cpu"), Side("B", "cccc", "vulkan"), "synth:x", [PointSpec(0)], repeats=6)
    with Store(paths.store_db) as store:
        run_id = cmp.run_compare(paths, store, req, builds=(a, b), progress=False)
        rows = store.get_run(run_id).summary.comparisons
    assert {r["metric"]: verdict_word(r["comparison"]) for r in rows} == {"pp": "better", "tg": "better"}
    assert {k for _, k in calls} == {a.key, b.key}
    assert len(calls) == 6      # --launches auto: settled after its first 3 rounds, so no 4th round


def test_requests_of_one_server_are_not_independent_samples(paths, monkeypatch) -> None:
    """The reported bug: requests of a few server starts, pooled, gave p = 0.002 for a gap that the starts
    themselves do not support. Here starts spread ±20 % while requests inside a start agree within 0.1 %:
    a request-level test calls B's −10 % significant; the judge, on 3 starts a side, says inconclusive."""
    a, b = _build("aaaa"), _build("bbbb")
    monkeypatch.setattr("llamaforge.bench.sweep.measure_point", _fake_measure(
        {a.key: (1000.0, 100.0), b.key: (1000.0, 90.0)}, [], between=0.2, within=0.001))
    req = CompareRequest(Side("A", "aaaa", "cpu"), Side("B", "bbbb", "cpu"), "synth:x", [PointSpec(0)], repeats=6, rounds=3)
    with Store(paths.store_db) as store:
        run_id = cmp.run_compare(paths, store, req, builds=(a, b), progress=False)
        tg = {r["metric"]: r for r in store.get_run(run_id).summary.comparisons}["tg"]
        pooled = {s: [v for p in store.points(run_id) if p.label.startswith(s) for v in p.measured("tg_tps")]
                  for s in "AB"}
    assert mannwhitneyu(pooled["A"], pooled["B"]).pvalue < 0.05   # what pooling the 18 requests a side would claim
    c = tg["comparison"]
    assert (c["a"]["k"], c["b"]["k"], c["a"]["n_requests"]) == (3, 3, 18) and tg["A"]["shape"] == "3×6"
    assert c["verdict"] == "inconclusive" and c["low"] < 0.95 < 1.05 < c["high"]


def _starts_of(store, run_id, side, ncmoe, field):
    """One side's values per server start at a point (what the judge is given)."""
    return [g for p in sorted(store.points(run_id), key=lambda q: q.label)
            if p.label.startswith(side + ".") and p.ncmoe == ncmoe for g in p.launch_groups(field) if g]
