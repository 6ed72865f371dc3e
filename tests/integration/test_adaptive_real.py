"""``bench --ncmoe auto`` with real llama.cpp (CPU build) on the tiny synthetic MoE, and ``bench --ngl auto``
on the tiny synthetic dense gemma3."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter

import pytest

from llamaforge.bench.adaptive import AdaptiveOptions
from llamaforge.bench.autosweep import run_auto
from llamaforge.bench.plan import PointSpec, Timeouts, make_plan, read_facts
from llamaforge.bench.threshold import max_fits
from llamaforge.report import build_report, write_report
from llamaforge.store import Store

pytestmark = [pytest.mark.slow, pytest.mark.measures]   # its assertions rest on measured speed


def test_ncmoe_auto_fits_first_then_measures_and_records_only_the_points_it_chose(cpu_build, tiny_model, lf_paths,
                                                                                  tmp_path):
    facts = read_facts(tiny_model)
    n_layers = facts.n_layers
    plan = make_plan(model_ref=str(tiny_model), model_path=tiny_model, model_facts=facts, points=[PointSpec(0)],
                     repeats=2, prompt_tokens=256, n_predict=16, threads=2, launches=1, timeouts=Timeouts(300, 300))
    with Store(tmp_path / "results" / "llamaforge.sqlite") as store:
        run_id, driver = run_auto(plan, [cpu_build], store, lf_paths, options=AdaptiveOptions(max_points=4),
                                  progress=False)
        run = store.get_run(run_id)
        ad = run.plan.adaptive.to_json()
        fit = store.get_run(ad["fitmap_run"])
        fits = store.points(fit.id)      # the threshold's bisection: a few fits, not one per ncmoe
        assert fit.kind == "fitmap" and 1 <= len(fits) <= max_fits(n_layers + 1) < n_layers + 1
        assert all(p.status == "ok" and p.n_ctx for p in fits)
        assert {str(p.ncmoe): p.n_ctx for p in fits} == ad["ctx"][cpu_build.key]
        pts = store.points(run_id)
        measured = sorted(p.ncmoe for p in pts if not p.label)
        chosen = sorted(c["ncmoe"] for c in ad["chosen"])
        assert measured == chosen and 0 in measured and n_layers in measured
        assert 2 <= len(measured) <= 4 and ad["n_measured"] == len(measured)
        assert all(c["reason"] for c in ad["chosen"])
        assert sorted(p.ncmoe for p in run.plan.points) == measured
        for p in pts:
            assert p.status == "ok", (p.failure_class, p.failure_detail, p.log_tail)
            assert len(p.measured("tg_tps")) >= 2 and all(v > 0 for v in p.measured("tg_tps"))
        assert [p.label for p in pts].count("sentinel") == 1           # one sentinel for the build, at the end
        interp = {int(x) for x in ad["interpolated"][cpu_build.key]}
        assert interp and not interp & set(measured) and interp | set(measured) == set(range(n_layers + 1))
        concl = ad["conclusions"]
        ctx = {int(x): c for x, c in ad["ctx"][cpu_build.key].items()}
        ctx.update({p.ncmoe: p.n_ctx for p in pts if not p.label})      # each server's own fit
        native = facts.n_ctx_train
        assert concl["threshold"][cpu_build.key] == min(x for x, c in ctx.items() if c and c >= native)
        assert concl["sweet_spot"][cpu_build.key] in measured
        assert driver.result is not None and driver.result.stopped in ("stable", "conclusions stable", "max-points")
        rp = write_report(store, run_id, tmp_path / "report")
        md = rp.md.read_text()
        assert "## Adaptive sweep" in md and "interpolated" in md
        _, sections = build_report(store, run_id, tmp_path / "report2")
        rows = [d for sec in sections if sec.id.startswith("points-") for t in sec.tables for d in t.data]
        assert {d["ncmoe"] for d in rows} == set(measured)       # interpolated points are not table rows
        assert '"interpolated"' not in md and "'interpolated'" not in md   # the record is not dumped as a table


def test_ncmoe_auto_killed_mid_run_resumes_without_measuring_a_point_twice(cpu_build, tiny_model, tmp_path):
    env = {**os.environ, "LLAMAFORGE_RESULTS": str(tmp_path / "results")}
    cli = [sys.executable, "-c", "from llamaforge.cli import main; main()"]
    cmd = [*cli, "bench", "--model", str(tiny_model), "--backends", "cpu", "--ncmoe", "auto", "--max-points", "5",
           "--repeats", "1", "--prompt-tokens", "128", "--n-predict", "8", "--threads", "2", "--launches", "1"]
    db = tmp_path / "results" / "llamaforge.sqlite"

    def sweep_points() -> tuple[str | None, list]:
        if not db.exists():
            return None, []
        with Store(db) as s:
            runs = s.list_runs("sweep")
            return (runs[0].id, s.points(runs[0].id)) if runs else (None, [])

    bench = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    try:
        deadline = time.monotonic() + 400
        while time.monotonic() < deadline and len(sweep_points()[1]) < 2:
            assert bench.poll() is None, bench.stderr.read().decode()
            time.sleep(0.2)
        os.killpg(bench.pid, signal.SIGKILL)        # the bench and its llama-server, mid-run
        bench.wait(timeout=30)
    finally:
        if bench.poll() is None:
            os.killpg(bench.pid, signal.SIGKILL)
    run_id, partial = sweep_points()
    assert run_id and 2 <= len(partial) < 5, [p.ncmoe for p in partial]
    r = subprocess.run([*cli, "bench", "--resume", run_id], env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    with Store(db) as s:
        pts = s.points(run_id)
        ad = s.get_run(run_id).plan.adaptive.to_json()
        assert s.get_run(run_id).status == "done"
    keys = Counter((p.build_key, p.ncmoe, p.engine, p.label) for p in pts)
    assert all(n == 1 for n in keys.values()), keys                 # no point stored twice
    # nothing measured before the kill was lost or measured again: its samples are the final point's first
    # launch (a point that gets one more start is stored again under a new id, with the old samples kept)
    final = {(p.build_key, p.ncmoe, p.engine, p.label): p for p in pts}
    for p in partial:
        if p.status == "ok":
            again = final[(p.build_key, p.ncmoe, p.engine, p.label)]
            assert again.launch_groups("tg_tps")[0] == p.measured("tg_tps"), p.ncmoe
    measured = sorted(p.ncmoe for p in pts if not p.label)
    assert measured == sorted(c["ncmoe"] for c in ad["chosen"]) and ad["n_measured"] == len(measured) <= 5
    confirmed = {d["ncmoe"] for d in ad["confirmed"]}      # a suspect gets one more server start
    for p in pts:
        if not p.label:
            assert p.status == "ok", (p.failure_class, p.failure_detail)
            assert len(p.measured("tg_tps")) == (2 if p.ncmoe in confirmed else 1), (p.ncmoe, confirmed)
    assert ad["stopped"] in ("stable", "conclusions stable", "max-points") and ad["conclusions"]["sweet_spot"]
