"""One trend rule (:mod:`llamaforge.judge.trend`), two callers: the report's Anomalies table
(:func:`llamaforge.report.analysis.anomalies`) and the adaptive sweep's conclusions
(:func:`llamaforge.bench.adaptive.trend_breaks`). Fed the same server starts, they name the same anomalies."""

from __future__ import annotations

import ast
import random
from pathlib import Path

import pytest

from llamaforge.bench.adaptive import PointSummary, trend_breaks
from llamaforge.judge import trend
from llamaforge.report import analysis as an
from llamaforge.report.data import Row

SRC = Path(__file__).resolve().parents[2] / "src" / "llamaforge"
XS = range(0, 13)


def _curves(seed: int) -> dict[str, dict[int, list[float]]]:
    """Two falling series, three server starts a point (±2 %); series "a" has a spike of 5–40 % somewhere."""
    rng = random.Random(seed)
    spike_at, spike = rng.randrange(2, 11), 1 + rng.uniform(0.05, 0.4)
    out: dict[str, dict[int, list[float]]] = {}
    for s in ("a", "b"):
        out[s] = {}
        for x in XS:
            base = 100.0 / (1 + 0.1 * x) * (spike if (s, x) == ("a", spike_at) else 1.0)
            out[s][x] = [base * (1 + rng.uniform(-0.02, 0.02)) for _ in range(3)]
    return out


def _report(curves: dict[str, dict[int, list[float]]]) -> set[tuple[str, int]]:
    rows = [Row(ncmoe=x, n_ctx=1000, tg=vals, series=s, tg_groups=[[v] for v in vals])
            for s, pts in curves.items() for x, vals in pts.items()]
    return {(a.row.series, a.row.ncmoe) for a in an.anomalies(rows, metrics=("tg",))}


def _sweep(curves: dict[str, dict[int, list[float]]]) -> set[tuple[str, int]]:
    measured = {s: {x: PointSummary.of_centres(vals) for x, vals in pts.items()} for s, pts in curves.items()}
    found = trend_breaks(measured, {s: None for s in curves})
    return {(s, x) for s, xs in found.items() for x in xs}


@pytest.mark.parametrize("seed", range(12))
def test_the_report_and_the_adaptive_sweep_name_the_same_anomalies(seed):
    curves = _curves(seed)
    assert _report(curves) == _sweep(curves)


def test_the_comparison_is_not_vacuous():
    found = [_report(_curves(seed)) for seed in range(12)]
    assert any(found) and not all(found)      # some spikes are anomalies, some are too small to be


def test_the_rule_is_written_once():
    """Only judge/trend.py judges a point against its neighbours for the trend; the callers adapt their data and call it."""
    for rel in ("report/analysis.py", "bench/adaptive.py"):
        tree = ast.parse((SRC / rel).read_text(encoding="utf-8"))
        defined = {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}
        assert not defined & {"reference_neighbours", "breaks"}, rel
        calls = {(n.func.value.id, n.func.attr) for n in ast.walk(tree) if isinstance(n, ast.Call)
                 and isinstance(n.func, ast.Attribute) and isinstance(n.func.value, ast.Name)}
        assert ("trend", "breaks") in calls, rel
    assert an.anomalies.__kwdefaults__["min_effect"] == trend.MIN_EFFECT


def test_an_anomalys_interval_is_the_one_the_screen_kept_it_at():
    """Benjamini–Hochberg keeps an anomaly at α·R/m, not at 5 %: its interval is printed at that level (the
    false-coverage-rate interval), wider than the 95 % one, and says so (issue 41, point 1)."""
    from llamaforge.judge import Starts, judge

    curves = _curves(7)
    rng = random.Random(3)
    curves["a"][6] = [100.0 / 1.6 * 1.5 * (1 + rng.uniform(-0.02, 0.02)) for _ in range(3)]   # a 50 % spike
    inputs = [trend.SeriesInput(s, "tg", {x: Starts.of([[v] for v in vals]) for x, vals in pts.items()})
              for s, pts in curves.items()]
    found = [b for b in trend.breaks(inputs) if (b.series, b.x) == ("a", 6)]
    assert found, "the planted spike is an anomaly"
    b = found[0]
    alone = judge(inputs[0].points[b.neighbour], inputs[0].points[6])
    assert b.judgement.low < alone.low and b.judgement.high > alone.high
    assert "Benjamini–Hochberg" in b.judgement.adjusted and "FCR-adjusted" in b.judgement.adjusted
