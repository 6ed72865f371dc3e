"""Comparison: ABBA interleaving, per-metric verdicts from stored samples, Markdown, bad input —
with fake builds and a fake measure_point (no llama.cpp)."""

from __future__ import annotations

import random
from pathlib import Path
from types import SimpleNamespace

import pytest

from llamaforge import compare as cmp
from llamaforge.bench.plan import PointSpec
from llamaforge.compare import CompareError, CompareRequest, Side, schedule
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


def test_repeats_are_split_over_rounds_and_never_fewer_than_asked() -> None:
    req = CompareRequest(Side("A", "x", "cpu"), Side("B", "y", "cpu"), "m", [PointSpec(0)], repeats=7, rounds=3)
    assert req.n_rounds * req.per_round >= 7 and req.per_round == 3
    req = CompareRequest(Side("A", "x", "cpu"), Side("B", "y", "cpu"), "m", [PointSpec(0)], repeats=4, rounds=6)
    assert req.n_rounds == 4 and req.per_round == 1


@pytest.mark.parametrize("kw,match", [({"repeats": 3}, "too few"), ({"rounds": 0}, "--rounds"),
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


def _fake_measure(speeds: dict[str, tuple[float, float]], calls: list[tuple[str, str]]):
    rng = random.Random(7)

    def measure_point(build, model_path, spec, plan, store, run_id, label=""):  # noqa: ANN001
        calls.append((label, build.key))
        pp, tg = speeds[build.key]
        p = Point(run_id=run_id, build_key=build.key, engine="server", ncmoe=spec.ncmoe, label=label,
                  samples=[Sample(0, True, pp_tps=pp / 10, tg_tps=tg / 10)] + [
                      Sample(i + 1, False, pp_tps=pp * (1 + rng.uniform(-0.01, 0.01)),
                             tg_tps=tg * (1 + rng.uniform(-0.01, 0.01))) for i in range(plan.repeats)])
        store.record_point(p)
        return p

    return measure_point


def test_compare_measures_interleaved_and_calls_tg_worse_pp_unchanged(paths, monkeypatch) -> None:
    a, b = _build("aaaa"), _build("bbbb")
    calls: list[tuple[str, str]] = []
    monkeypatch.setattr("llamaforge.bench.measure_point",
                        _fake_measure({a.key: (1000.0, 100.0), b.key: (1003.0, 80.0)}, calls))
    req = CompareRequest(Side("A", "aaaa", "cpu"), Side("B", "bbbb", "cpu"), "synth:x", [PointSpec(0), PointSpec(2)],
                         repeats=6, rounds=4)
    with Store(paths.store_db) as store:
        run_id = cmp.run_compare(paths, store, req, builds=(a, b), progress=False)
        run = store.get_run(run_id)
        assert run.kind == "compare" and run.status == "done"
        assert run.plan["compare"]["A"]["ref"] == "aaaa" and run.plan["compare"]["B"]["build"] == b.key
        assert [c[0] for c in calls[:4]] == ["A.1", "B.1", "B.1", "A.1"]
        assert {p.label for p in store.points(run_id)} == {f"{s}.{r}" for s in "AB" for r in range(1, 5)}
        rows = {(r["ncmoe"], r["metric"]): r for r in run.summary["comparisons"]}
        assert set(rows) == {(0, "pp"), (0, "tg"), (2, "pp"), (2, "tg")}
        tg = rows[(0, "tg")]
        assert tg["comparison"]["verdict"] == "worse" and tg["comparison"]["ratio"] == pytest.approx(0.8, rel=0.03)
        assert tg["A"]["n"] == 8 and tg["B"]["n"] == 8      # warm-ups excluded (6 repeats → 2 per round × 4)
        assert tg["A"]["n_launches"] == 4 and tg["comparison"]["n_a"] == 4   # the test's n: server starts
        assert rows[(0, "pp")]["comparison"]["verdict"] == "same"   # +0.3 %: below the minimum effect
        assert [p.verdict for p in store.probes(run_id)] == ["A", "B"]
        md = compare_kind.lead(store, run)
        assert "worse" in md and "no significant change" in md and "| 2 | tg |" in md
        table = cmp.compare_table(run)
        assert table.row_count == 4


def test_two_backends_of_one_commit_are_two_sides(paths, monkeypatch) -> None:
    a, b = _build("cccc", "cpu"), _build("cccc", "vulkan")
    calls: list[tuple[str, str]] = []
    monkeypatch.setattr("llamaforge.bench.measure_point", _fake_measure({a.key: (500.0, 50.0), b.key: (900.0, 70.0)}, calls))
    req = CompareRequest(Side("A", "cccc", "cpu"), Side("B", "cccc", "vulkan"), "synth:x", [PointSpec(0)], repeats=6)
    with Store(paths.store_db) as store:
        run_id = cmp.run_compare(paths, store, req, builds=(a, b), progress=False)
        rows = store.get_run(run_id).summary["comparisons"]
    assert {r["metric"]: r["comparison"]["verdict"] for r in rows} == {"pp": "better", "tg": "better"}
    assert {k for _, k in calls} == {a.key, b.key}


def test_requests_of_one_server_are_not_independent_samples(paths, monkeypatch) -> None:
    """The reported bug: 6 requests in 3 server starts per side gave p = 0.002. The launch is the
    unit now, so 3 vs 3 starts cannot be significant (exact Mann–Whitney minimum p = 0.1) and the
    summary says n = 3 launches."""
    a, b = _build("aaaa"), _build("bbbb")
    monkeypatch.setattr("llamaforge.bench.measure_point", _fake_measure({a.key: (1000.0, 100.0), b.key: (1000.0, 80.0)}, []))
    req = CompareRequest(Side("A", "aaaa", "cpu"), Side("B", "bbbb", "cpu"), "synth:x", [PointSpec(0)], repeats=6, rounds=3)
    with Store(paths.store_db) as store:
        run_id = cmp.run_compare(paths, store, req, builds=(a, b), progress=False)
        tg = {r["metric"]: r for r in store.get_run(run_id).summary["comparisons"]}["tg"]
    c = tg["comparison"]
    assert (c["n_a"], c["n_b"], c["requests_a"]) == (3, 3, 6)
    assert c["p_value"] >= 0.1 and c["verdict"] == "same"
    assert tg["A"]["shape"] == "3×2"
