"""Across sessions (``report RUN --with RUN2 …``) and ``reproduce --against`` on the committed H200 store:
runs of one plan are put side by side; a run of another plan is refused with one line naming what differs."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from llamaforge.report.data import ReportError
from llamaforge.report.sessions import load_sessions, sessions_section
from llamaforge.store import Store

REPO = Path(__file__).resolve().parents[2]
H200 = REPO / "results" / "h200" / "llamaforge.sqlite"
SESSIONS = ["h200-24gib-k2-1201b", "h200-24gib", "h200-24gib-k2", "h200-24gib-k2n", "h200-24gib-k2-1201"]


@pytest.fixture(scope="module")
def h200_store(tmp_path_factory):
    d = tmp_path_factory.mktemp("h200")
    shutil.copy(H200, d / "llamaforge.sqlite")
    return d


def test_five_sessions_give_the_what_holds_table_and_the_claims(h200_store):
    with Store(h200_store / "llamaforge.sqlite") as store:
        datas = load_sessions(store, SESSIONS)
        sec = sessions_section(store, datas)
    holds, claims = sec.tables[0], sec.tables[1]
    first = holds.data[0]
    assert first["num"] == "CUDA" and first["den"] == "Vulkan" and first["metric"] == "tg"
    assert len(first["ratios"]) == 5 and all(1.1 < r < 2.0 for r in first["ratios"])
    assert first["across"]["kind"] == "ci" and first["across"]["k"] == 5    # sessions are the replicates
    assert first["across"]["low"] < first["across"]["centre"] < first["across"]["high"]
    by = {c["claim"].split(" (")[0]: c for c in claims.data}
    tg = by["CUDA generates faster than Vulkan"]
    # the judge's verdicts per session, not the ratios: the 2-start sessions do not differ at every point
    assert tg["basis"] == "judged" and tg["sessions"] == 5 and tg["held"] < 5
    assert "judged differs beyond ±5%" in tg["claim"] and " of 15 in h200-24gib-k2-1201b" in tg["claim"]
    assert "not proven either way at" in tg["claim"]
    starts = next(c for c in claims.data if "server start of CUDA beats every start of Vulkan" in c["claim"])
    assert starts["held"] == 5 and starts["basis"] == "observed"
    assert not any("holds" in r[2] for r in claims.rows)
    # the start rows pool the sweep's starts with its sentinels and reproduce re-runs: more starts than the
    # point's K×R, which the row must say (the 12-01 second session's CUDA ncmoe 0: 2×2 in the sweep, 7 starts)
    row = next(r for r in holds.rows if r[0].startswith("CUDA generation t/s at ncmoe 0, every server start"))
    assert "sentinels" in row[0] and "reproduce" in row[0] and row[1].endswith("(7 starts)")


def test_faster_across_sessions_means_judged_faster(h200_store):
    """CUDA/Vulkan prompt processing at ncmoe 0 read 1.02× on 11-30 (afternoon): inside ±5 %, where the judge
    would not call CUDA faster, so "CUDA processes prompts faster in every session" must not be claimed; the
    claim counts the points the judge calls "differs" in each session, and a smaller margin never counts fewer."""
    with Store(h200_store / "llamaforge.sqlite") as store:
        sec = sessions_section(store, load_sessions(store, SESSIONS))
        wide = sessions_section(store, load_sessions(store, SESSIONS), min_effect=0.01)
    pp = next(c for c in sec.tables[1].data if "processes prompts faster" in c["claim"])
    assert "judged differs beyond ±5%" in pp["claim"] and pp["held"] < pp["sessions"] == 5
    pp1 = next(c for c in wide.tables[1].data if "processes prompts faster" in c["claim"])
    assert "judged differs beyond ±1%" in pp1["claim"] and pp1["held"] >= pp["held"]


def test_a_run_of_another_plan_is_not_a_session(h200_store):
    with Store(h200_store / "llamaforge.sqlite") as store, pytest.raises(ReportError) as e:
        load_sessions(store, ["h200-24gib-k2-1201b", "h200-whole-card"])
    assert "fit vram_budget_gib" in e.value.message and e.value.fix


@pytest.mark.parametrize("cmd", [
    ["reproduce", "h200-24gib-k2-1201b", "--against", "h200-whole-card"],
    ["report", "--run", "h200-24gib-k2-1201b", "--with", "h200-whole-card"],
])
def test_another_plan_through_the_cli_is_one_line(h200_store, tmp_path, cmd):
    env = {**os.environ, "PYTHONPATH": str(REPO / "src"), "LLAMAFORGE_RESULTS": str(h200_store)}
    r = subprocess.run([sys.executable, "-m", "llamaforge", *cmd, *(["--out", str(tmp_path / "o")] if cmd[0] == "report"
                                                                     else [])],
                       capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode != 0 and "Traceback" not in r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "differ" in lines[0] and "fix:" in lines[0]
