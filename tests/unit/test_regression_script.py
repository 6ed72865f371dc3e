"""The CI example's gate (examples/github-actions/regression.sh) acts on the judge's verdict class: only "same or
better" everywhere moves the last good commit; "worse" is exit 1; inconclusive is exit 4 — "not proven either way:
add starts" — and never reads as "no regression" (issue 41). Here ``llamaforge`` is a small stub that exits as
``compare --fail-on-worse --fail-on-inconclusive`` would; the real run is
tests/integration/test_regression_workflow_real.py."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "examples" / "github-actions" / "regression.sh"
GIT_ENV = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@x.invalid", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@x.invalid", "GIT_CONFIG_GLOBAL": "/dev/null", "GIT_CONFIG_NOSYSTEM": "1"}


def _upstream(tmp_path: Path) -> tuple[Path, str]:
    up = tmp_path / "up"
    up.mkdir()
    env = {**os.environ, **GIT_ENV}
    for args in (["init", "-q", "-b", "master"], ["commit", "-q", "--allow-empty", "-m", "c1"]):
        subprocess.run(["git", "-C", str(up), *args], check=True, env=env, capture_output=True)
    head = subprocess.run(["git", "-C", str(up), "rev-parse", "HEAD"], check=True, env=env, capture_output=True,
                          text=True).stdout.strip()
    return up, head


def _night(tmp_path: Path, compare_rc: int) -> subprocess.CompletedProcess:
    up, head = _upstream(tmp_path)
    (tmp_path / "head").write_text(head)
    stub = tmp_path / "lf"
    stub.write_text(f"#!/usr/bin/env bash\necho \"$@\" >> {tmp_path}/calls\n"
                    f"if [ \"$1\" = compare ]; then exit {compare_rc}; fi\nexit 0\n")
    stub.chmod(0o755)
    ws = tmp_path / "ws"
    env = {**os.environ, "LLAMAFORGE_WORKSPACE": str(ws), "LF_SOURCE": f"path:{up}", "LF_FIRST_BASE": "base-pin",
           "LLAMAFORGE": str(stub)}
    return subprocess.run(["bash", str(SCRIPT)], env=env, capture_output=True, text=True, timeout=60)


def _state(tmp_path: Path) -> Path:
    return tmp_path / "ws" / "results" / "regression"


def test_the_gate_asks_compare_for_both_exit_codes(tmp_path):
    r = _night(tmp_path, 0)
    calls = (tmp_path / "calls").read_text()
    assert r.returncode == 0 and "--fail-on-worse --fail-on-inconclusive" in calls, r.stdout + r.stderr


def test_same_or_better_everywhere_moves_the_last_good_commit(tmp_path):
    r = _night(tmp_path, 0)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "judged same or better at every point and metric" in r.stdout and "no regression" not in r.stdout
    assert (_state(tmp_path) / "last-good").read_text().strip() == (tmp_path / "head").read_text()
    assert (_state(tmp_path) / "history.tsv").read_text().split("\t")[-1].strip() == "same-or-better"


@pytest.mark.parametrize(("rc", "exit_code", "word", "outcome"), [(3, 1, "REGRESSION", "worse"),
                                                                   (4, 4, "INCONCLUSIVE", "inconclusive")])
def test_worse_or_inconclusive_keeps_the_last_good_commit(tmp_path, rc, exit_code, word, outcome):
    r = _night(tmp_path, rc)
    assert r.returncode == exit_code and word in r.stdout, r.stdout + r.stderr
    assert "no regression" not in r.stdout and "new last good" not in r.stdout
    assert not (_state(tmp_path) / "last-good").exists()       # the last good one stays the first base
    assert (_state(tmp_path) / "history.tsv").read_text().split("\t")[-1].strip() == outcome
    if rc == 4:
        assert "not proven either way: add starts" in r.stdout and "stays base-pin" in r.stdout


def test_a_failed_check_is_its_own_exit_code_and_leaves_no_state(tmp_path):
    r = _night(tmp_path, 2)
    assert r.returncode == 2 and not (_state(tmp_path) / "history.tsv").exists()


def test_the_script_documents_exit_4_as_not_proven_either_way():
    head = SCRIPT.read_text().split("set -euo pipefail")[0]
    assert "4 = inconclusive, not proven either way: add starts" in head and "the last good commit stays" in head
    assert "no regression" not in SCRIPT.read_text()


def _run(*verdicts: tuple[str, float]):
    from llamaforge.store import Run

    rows = [{"ncmoe": 0, "ngl": -1, "metric": m, "comparison": {"verdict": v, "ratio": r, "low": r * 0.9,
                                                                 "high": r * 1.1, "p_differs": 0.5}}
            for (v, r), m in zip(verdicts, ("pp", "tg"), strict=False)]
    return Run("r1", "compare", None, "done", 0.0, 0.0, None, {}, {}, {"comparisons": rows})


def test_compare_names_the_verdicts_each_exit_code_is_for():
    from llamaforge.compare.judged import inconclusive_rows, worse_rows

    run = _run(("inconclusive", 0.97), ("differs", 0.6))
    assert [w.split(" (")[0] for w in worse_rows(run)] == ["tg at ncmoe 0"]
    assert [w.split(" (")[0] for w in inconclusive_rows(run)] == ["pp at ncmoe 0"]
    assert inconclusive_rows(_run(("same", 1.0), ("differs", 1.5))) == []   # same and better: nothing open
    assert worse_rows(_run(("same", 1.0), ("differs", 1.5))) == []
