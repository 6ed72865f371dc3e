"""Real llama.cpp (CPU build, tiny MoE): ``bench --launches auto`` adds server starts only where a verdict
is open, stops at --max-launches, and every point says the K it stopped at and why (issue 23: "a K = auto
sweep on CPU here reports per point the K it stopped at and why")."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from llamaforge.report import data as rdata
from llamaforge.report.contents import build_sections
from llamaforge.store import Store

pytestmark = [pytest.mark.slow, pytest.mark.measures]   # its assertions rest on measured speed


def test_auto_launches_sweep_records_where_each_point_stopped_and_why(cpu_build, tiny_model, tmp_path):
    env = {**os.environ, "LLAMAFORGE_RESULTS": str(tmp_path)}
    cmd = [sys.executable, "-m", "llamaforge", "bench", "--model", str(tiny_model), "--backends", "cpu",
           "--ncmoe", "0,8", "--repeats", "2", "--prompt-tokens", "64", "--n-predict", "8", "--threads", "2",
           "--launches", "auto", "--max-launches", "4", "--precision", "1%", "--name", "auto-k"]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1800)
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    with Store(tmp_path / "llamaforge.sqlite") as store:
        run = store.get_run("auto-k")
        assert run.plan.sequential["max_launches"] == 4 and run.plan.launches == 3
        pts = [p for p in store.points(run.id) if p.label == ""]
        assert len(pts) == 2
        for p in pts:
            seq = p.detail.sequential
            k = len(p.launches)
            assert seq["k"] == k and 3 <= k <= 4, seq
            assert seq["status"] in ("resolved", "unresolved") and seq["reason"]
            if k < 4:   # stopped before the maximum: its interval met the precision
                assert seq["status"] == "resolved"
            else:
                assert seq["status"] == "unresolved" or "precision" in seq["reason"]
        data = rdata.load(store, run.id)
        rep = next(s for s in build_sections(data, []) if s.id == "replication")
        rows = rep.tables[0].rows
        assert all(row[-2].startswith("K=") for row in rows), rows
