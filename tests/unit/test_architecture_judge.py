"""Only the judge (llamaforge.judge) computes intervals, tests and p-values.

Issue 23: every verdict the tool prints comes from one statistics core, with the server start as the unit
of replication. This reads every module outside ``llamaforge/judge/`` and fails on anything that would
compute an interval or a test there: scipy's statistics (``scipy.stats``, Student's t from
``scipy.special``), percentiles/quantiles (the bootstrap's interval), the bootstrap itself and named tests.
"""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src" / "llamaforge"
CORE = SRC / "judge"
#: calls that compute an interval, a test or a p-value
FORBIDDEN_CALLS = {"percentile", "quantile", "nanpercentile", "nanquantile", "bootstrap", "mannwhitneyu",
                   "ttest_ind", "ttest_rel", "ttest_1samp", "wilcoxon", "ppf", "isf", "stdtr", "stdtrit",
                   "permutation_test", "kruskal", "ks_2samp"}
#: modules whose import means statistics are computed here
FORBIDDEN_MODULES = ("scipy.stats", "scipy.special", "statsmodels")


def _problems(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [f"import {a.name}" for a in node.names if a.name.startswith(FORBIDDEN_MODULES)]
        elif isinstance(node, ast.ImportFrom) and node.module:
            full = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            out += [f"from {node.module} import …" for m in full[:1] if any(
                x.startswith(FORBIDDEN_MODULES) for x in full)]
        elif isinstance(node, ast.Call):
            f = node.func
            name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else None
            if name in FORBIDDEN_CALLS:
                out.append(f"{name}() at line {node.lineno}")
    return out


def test_the_scan_sees_statistics_where_they_do_not_belong(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("import numpy as np\nfrom scipy import stats\nfrom scipy.stats import t\n"
                   "def f(x):\n    return np.percentile(x, [2.5, 97.5]), t.ppf(0.975, 3)\n")
    found = _problems(bad)
    assert any("scipy" in p for p in found) and any(p.startswith("percentile") for p in found)
    assert any(p.startswith("ppf") for p in found)
    ok = tmp_path / "ok.py"
    ok.write_text("import statistics\ndef f(x):\n    return statistics.median(x)\n")
    assert _problems(ok) == []


def test_no_module_outside_the_judge_computes_an_interval_or_a_p_value():
    found = {str(p.relative_to(SRC)): probs for p in sorted(SRC.rglob("*.py"))
             if CORE not in p.parents and (probs := _problems(p))}
    assert not found, "statistics outside llamaforge/judge/: " + "; ".join(f"{k}: {', '.join(v)}" for k, v in found.items())
