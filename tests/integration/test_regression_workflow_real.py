"""The GitHub Actions example (examples/github-actions/llamaforge-regression.yml) works: its YAML is parsed,
and its regression step's ``run:`` text is executed here exactly as written (bash, from the repository
root, with the workflow's env) against real llama.cpp on CPU. GitHub is not reachable, so the "upstream"
is a local bare repository (objects borrowed from the bisect fixture: a real llama.cpp history with one
real slowdown) whose branch is moved between runs, as upstream's master moves between nights.

Night 1: a harmless commit after the last good one → compare. Judged "same" (or better) everywhere, it becomes
the last good one (exit 0); a verdict not proven either way is exit 4 ("add starts") and the last good one stays —
never "no regression" on an inconclusive verdict.
Night 2: the slowdown commit → compare says tg is worse, the step fails, the last good one stays.
Night 3: nothing new → no measurement. Every night leaves the store, a report and the history.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from llamaforge.store import Store

pytestmark = [pytest.mark.slow, pytest.mark.measures]   # its assertions rest on measured speed

REPO = Path(__file__).resolve().parents[2]
WORKFLOW = REPO / "examples" / "github-actions" / "llamaforge-regression.yml"
sys.path.insert(0, str(Path(__file__).parent))
from fixture_repo import SLOW_INDEX, make_fixture  # noqa: E402


def _workflow() -> dict:
    wf = yaml.safe_load(WORKFLOW.read_text())
    triggers = wf.get("on", wf.get(True))   # YAML 1.1 reads the key `on` as true
    assert triggers["schedule"][0]["cron"] and "workflow_dispatch" in triggers
    job = wf["jobs"]["regression"]
    assert "self-hosted" in job["runs-on"] and "gpu" in job["runs-on"]
    uses = [s.get("uses", "") for s in job["steps"]]
    assert uses[0].startswith("actions/checkout@") and uses[-1].startswith("actions/upload-artifact@")
    assert job["steps"][-1]["if"] == "always()" and "llamaforge.sqlite" in job["steps"][-1]["with"]["path"]
    history = wf["jobs"]["history"]   # the history steps (checked in full by tests/unit/test_github_actions_example.py)
    runs = " ".join(s.get("run", "") for s in history["steps"])
    assert "history.run" in runs and "--continue --bisect" in runs and "history.publish site" in runs
    assert any(s.get("uses", "").startswith("actions/upload-pages-artifact@") for s in history["steps"])
    assert wf["jobs"]["deploy"]["steps"][-1]["uses"].startswith("actions/deploy-pages@")
    return job


def test_the_workflow_tracks_the_newest_commit_against_the_last_good_one(tmp_path, cpu_build, tiny_model):
    job = _workflow()
    step = next(s for s in job["steps"] if "regression.sh" in s.get("run", ""))
    install = next(s for s in job["steps"] if "pip" in s.get("run", ""))
    assert "pip\" install" in install["run"] and "GITHUB_PATH" in install["run"]

    fx = make_fixture(cpu_build.source_dir)
    up = tmp_path / "upstream.git"
    subprocess.run(["git", "init", "-q", "--bare", str(up)], check=True)
    (up / "objects" / "info" / "alternates").write_text(str(fx.path / ".git" / "objects") + "\n")
    ws = tmp_path / "runner-ws"
    ws.mkdir()
    (ws / "pins.toml").write_text((REPO / "pins.toml").read_text())   # what the install step copies

    def night(commit: str) -> subprocess.CompletedProcess:
        subprocess.run(["git", "--git-dir", str(up), "update-ref", "refs/heads/master", commit], check=True)
        env = {**os.environ, **{k: str(v) for k, v in job["env"].items()}}
        env.update(LLAMAFORGE_WORKSPACE=str(ws), LF_SOURCE=f"path:{up}", LF_BACKEND="cpu", LF_MODEL=str(tiny_model),
                   LF_FIRST_BASE=fx.commits[0], LLAMAFORGE=f"{sys.executable} -m llamaforge", NO_COLOR="1",
                   COLUMNS="250", LF_COMPARE_ARGS="--repeats 1 --rounds 4 --prompt-tokens 32 --n-predict 16 "
                                                  "--threads 1 --min-effect 30%")
        return subprocess.run(["bash", "-e", "-c", step["run"]], cwd=REPO, env=env, capture_output=True, text=True,
                              timeout=1500)

    state = ws / "results" / "regression"
    harmless = fx.commits[SLOW_INDEX - 1]
    r = night(harmless)
    out = r.stdout + r.stderr
    assert "no regression" not in out, out
    if r.returncode == 0:      # the judge called every metric same (or better): the new last good commit
        assert "judged same or better at every point and metric" in r.stdout and "INCONCLUSIVE" not in r.stdout, out
        assert (state / "last-good").read_text().strip() == harmless, out
        good, first = harmless, "same-or-better"
    else:                      # not proven either way: exit 4, the last good commit does not move
        assert r.returncode == 4 and re.search(r"^INCONCLUSIVE \(not proven either way: add starts\): ", r.stdout, re.M) \
            and "is not proven either way: add starts" in r.stdout and "WORSE" not in r.stdout, out
        assert not (state / "last-good").exists(), out
        good, first = fx.commits[0], "inconclusive"

    r = night(fx.slow)
    assert r.returncode == 1 and "REGRESSION" in r.stdout and re.search(r"^WORSE: .*\btg at ncmoe 0 ", r.stdout, re.M), r.stdout + r.stderr
    if good == harmless:       # the last good commit stays
        assert (state / "last-good").read_text().strip() == harmless
    else:
        assert not (state / "last-good").exists()

    r = night(fx.slow)   # the next night compares the slow commit against the last good one again
    assert r.returncode == 1 and f"last good: {good}" in r.stdout, r.stdout + r.stderr
    r = night(good)
    assert r.returncode == 0 and "no new commit" in r.stdout, r.stdout + r.stderr

    history = [ln.split("\t") for ln in (state / "history.tsv").read_text().splitlines()]
    assert [(h[1], h[2], h[3]) for h in history] == [(fx.commits[0], harmless, first), (good, fx.slow, "worse"),
                                                     (good, fx.slow, "worse")]
    with Store(ws / "results" / "llamaforge.sqlite") as store:
        runs = store.list_runs(kind="compare")
        assert len(runs) == 3 and all(r.status == "done" for r in runs)
        assert [(r.plan.compare.a.commit, r.plan.compare.b.commit) for r in runs] == \
            [(fx.commits[0], harmless), (good, fx.slow), (good, fx.slow)]
        for run in runs:   # the report the upload step takes along
            assert (ws / "results" / "reports" / run.id / "report.md").is_file()
