"""A real performance bisection over a real llama.cpp history (the fixture of fixture_repo.py):
CPU builds of every probe (one cold, the rest incremental), the tiny synthetic MoE model measured
with llama-bench, the slowdown commit named, the broken commit skipped."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from llamaforge.bisect import BisectRequest, run_bisect
from llamaforge.report.kinds import bisect as bisect_kind
from llamaforge.store import Store

sys.path.insert(0, str(Path(__file__).parent))
from fixture_repo import BROKEN_INDEX, N_COMMITS, SLOW_INDEX, make_fixture  # noqa: E402


@pytest.mark.slow
def test_bisect_names_the_slowdown_commit_and_skips_the_broken_one(lf_paths, cpu_build, tiny_model, tmp_path,
                                                                    monkeypatch):
    fx = make_fixture(cpu_build.source_dir)
    assert len(fx.commits) == N_COMMITS + 1
    # a fresh build root: every run shows a real cold first build and real incremental ones
    # (a shared root would turn a re-run into cache hits); ccache and the mirror stay shared
    monkeypatch.setenv("LLAMAFORGE_BUILD_ROOT", str(tmp_path / "builds"))
    req = BisectRequest(good=fx.good, bad=fx.bad, metric="tg", backend="cpu", model=str(tiny_model), repeats=5,
                        source=fx.spec)
    with Store(lf_paths.store_db) as store:
        run_id, res = run_bisect(lf_paths, store, req, command="test_bisect_real")
        run = store.get_run(run_id)
        probes = store.probes(run_id)
        md = bisect_kind.lead(store, run)
        png = bisect_kind.plot(store, run, tmp_path / "bisect.png")

    assert res.first_bad == fx.slow, f"expected {fx.slow[:9]} ({fx.subjects[SLOW_INDEX]}), got {res.candidates}"
    assert run.summary["subject"] == fx.subjects[SLOW_INDEX]
    assert fx.broken in res.skipped, "the broken commit sits at the first midpoint and must be skipped"
    assert [p.verdict for p in probes if p.commit_sha == fx.broken] == ["skip"]
    assert res.builds <= 7
    assert res.measured <= 6   # ⌈log2 16⌉ + 2
    assert png.stat().st_size > 0 and fx.slow in md

    # the slowdown is real: the bad side is much slower than the good side
    ep = run.summary["endpoints"]
    assert ep["median_b"] < ep["median_a"] * 0.8

    # incremental builds against the cold one
    built = [p for p in probes if p.build_s is not None]
    cold = built[0]
    assert cold.incremental is False, "the first build of a fresh bisect dir is cold"
    lines = [f"cold build   {cold.commit_sha[:9]}: {cold.build_s:6.1f} s"]
    for p in built[1:]:
        kind = "incremental" if p.incremental else ("cached" if p.note == "cached build" else "failed/skip")
        lines.append(f"{kind:<12} {p.commit_sha[:9]}: {p.build_s:6.1f} s  ({p.verdict})")
    incr = [p.build_s for p in built[1:] if p.incremental]
    assert incr, "later probes must build incrementally"
    lines.append(f"incremental median {sorted(incr)[len(incr) // 2]:.1f} s vs cold {cold.build_s:.1f} s; "
                 f"total {sum(p.build_s for p in built):.0f} s vs {cold.build_s * len(built):.0f} s for full rebuilds")
    print("\n".join(lines))
    record = lf_paths.cache / "bisect-speed-last.json"
    record.write_text(json.dumps({"store": str(lf_paths.store_db), "run_id": run_id, "lines": lines}, indent=2))
    assert BROKEN_INDEX > SLOW_INDEX


@pytest.mark.slow
def test_compare_marks_the_planted_slowdown_worse_and_renders(lf_paths, cpu_build, tiny_model, tmp_path):
    """`compare` on real builds of two commits of the fixture history: base = the commit before the
    slowdown, head = the slowdown commit. Generation must come out significantly worse."""
    from llamaforge.bench.plan import make_points
    from llamaforge.compare import CompareRequest, Side, comparisons, run_compare
    from llamaforge.report.kinds import compare as compare_kind

    fx = make_fixture(cpu_build.source_dir)
    base = fx.commits[0]
    req = CompareRequest(base=Side("A", base, "cpu", fx.spec), head=Side("B", fx.slow, "cpu", fx.spec),
                         model=str(tiny_model), points=make_points("0", None, n_layers=8), repeats=4, rounds=4,
                         prompt_tokens=64, n_predict=32, threads=2)
    with Store(lf_paths.store_db) as store:
        run_id = run_compare(lf_paths, store, req, command="test_compare_real", progress=False)
        rows = {r["metric"]: r for r in comparisons(store, run_id)}
        md = compare_kind.lead(store, store.get_run(run_id))
    tg = rows["tg"]
    assert tg["A"]["n"] == 4 and tg["B"]["n"] == 4          # every measured request kept, warm-ups not
    assert tg["comparison"]["verdict"] == "worse", tg
    assert tg["comparison"]["ratio"] < 0.8
    assert "worse" in md


@pytest.mark.slow
def test_bisect_run_builds_the_checkout_in_place_and_exits_by_its_verdict(lf_paths, cpu_build, tiny_model, tmp_path,
                                                                          capsys):
    """`llamaforge bisect-run` (what `git bisect run` calls) on a real checkout: one build of HEAD in place,
    one measurement, exit 1 against a reference it cannot reach and 0 against one it clearly beats (the
    second call reuses the build)."""
    from invoke import Context

    from llamaforge.commands.compare import bisect_run
    from llamaforge.proc import run

    fx = make_fixture(cpu_build.source_dir)
    checkout = tmp_path / "checkout"
    assert run(["git", "clone", "-q", "--", str(fx.path), str(checkout)], timeout=600).ok
    assert run(["git", "-C", str(checkout), "checkout", "-q", fx.commits[0]], timeout=120).ok
    codes, lines = [], []
    for reference in ("1e12", "1e-9"):
        with pytest.raises(SystemExit) as e:
            bisect_run(Context(), source=str(checkout), reference=reference, model=str(tiny_model), repeats=4,
                       n_predict=16)
        codes.append(e.value.code)
        captured = capsys.readouterr()
        lines.append(captured.out + captured.err)
    assert codes == [1, 0], lines
    assert f"{fx.commits[0][:12]} tg median" in lines[1] and "→ good" in lines[1]
    with Store(lf_paths.store_db) as store:
        runs = [r for r in store.list_runs("bisect-run") if r.name == f"bisect-run {fx.commits[0][:9]}"]
        points = [p for r in runs[-2:] for p in store.points(r.id)]
    assert len(runs) >= 2 and all(r.status == "done" for r in runs[-2:])
    assert len(points) == 2 and all(p.status == "ok" and p.measured("tg_tps") for p in points)
