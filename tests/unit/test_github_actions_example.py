"""The nightly GitHub Actions example (examples/github-actions/llamaforge-regression.yml) also keeps the
performance history: a job measures the new commits (``history.run --range START..BRANCH --continue
--bisect``), publishes the site and uploads it as a Pages artifact, and a deploy job with the permissions
Pages needs deploys it. Its commands parse with the real CLI. A fourth job runs llamaforge's own full test tier
(``scripts/test.sh --full``, docs/testing.md, Tiers) every night. (The regression job itself is run for real in
tests/integration/test_regression_workflow_real.py.)"""

from __future__ import annotations

import shlex
from pathlib import Path

import yaml
from test_cli_hints import _parse

REPO = Path(__file__).resolve().parents[2]
WORKFLOW = REPO / "examples" / "github-actions" / "llamaforge-regression.yml"


def _wf() -> dict:
    return yaml.safe_load(WORKFLOW.read_text())


def _commands(run: str) -> list[list[str]]:
    """The llamaforge command lines of a step (continuation lines joined, shell variables as placeholders)."""
    text = run.replace("\\\n", " ")
    out = []
    for line in text.splitlines():
        words = shlex.split(line.replace('"${extra[@]}"', ""), comments=True)
        if words and words[0] == "llamaforge":
            out.append(["1" if "$" in w else w for w in words[1:]])
    return out


def test_the_nightly_measures_the_history_publishes_it_and_deploys_it_to_pages():
    wf = _wf()
    jobs = wf["jobs"]
    assert set(jobs) >= {"regression", "history", "deploy"} and wf["permissions"] == {"contents": "read"}
    hist = jobs["history"]
    assert hist["needs"] == "regression" and "!cancelled()" in hist["if"] and "gpu" in hist["runs-on"]
    runs = "\n".join(s.get("run", "") for s in hist["steps"])
    cmds = _commands(runs)
    assert [c[0] for c in cmds] == ["history.run", "history.publish"], cmds
    run_cmd, publish = cmds
    assert {"--continue", "--bisect", "--range", "--source"} <= set(run_cmd)
    assert '--range "$LF_HISTORY_START..$LF_BRANCH"' in runs and publish[1] == "site"
    upload = next(s for s in hist["steps"] if s.get("uses", "").startswith("actions/upload-pages-artifact@"))
    assert upload["with"]["path"] == "site"
    assert wf["env"]["LLAMAFORGE_MACHINE"] and wf["env"]["LLAMAFORGE_MACHINE_ID"]   # one machine across reboots

    deploy = jobs["deploy"]
    assert deploy["needs"] == "history" and deploy["permissions"] == {"pages": "write", "id-token": "write"}
    assert deploy["environment"]["name"] == "github-pages"
    step = deploy["steps"][-1]
    assert step["uses"].startswith("actions/deploy-pages@") and step["id"] == "deployment"
    assert deploy["environment"]["url"] == "${{ steps.deployment.outputs.page_url }}"


def test_the_history_commands_of_the_nightly_parse_with_the_real_cli():
    hist = _wf()["jobs"]["history"]
    runs = "\n".join(s.get("run", "") for s in hist["steps"])
    for cmd in _commands(runs):
        _parse(cmd)


def test_the_nightly_runs_the_full_test_tier_on_a_hosted_runner_from_a_full_clone():
    wf = _wf()
    tests = wf["jobs"]["tests"]
    assert tests["runs-on"] == "ubuntu-latest" and "needs" not in tests     # no GPU, and no measurement waits on it
    steps = tests["steps"]
    assert steps[0]["uses"].startswith("actions/checkout@") and steps[0]["with"]["fetch-depth"] == 0
    runs = [s.get("run", "").replace("\\\n", " ") for s in steps]
    assert runs.index("scripts/setup.sh") < next(i for i, r in enumerate(runs) if "scripts/test.sh --full" in r)
    (test_cmd,) = [shlex.split(r) for r in runs if "scripts/test.sh" in r]
    assert test_cmd[-2:] == ["scripts/test.sh", "--full"] and "LLAMAFORGE_TEST_ARTIFACTS=test-artifacts" in test_cmd
    # the workflow's own workspace and machine name are the nightly's measurements', never the tests'
    assert {"LLAMAFORGE_WORKSPACE", "LLAMAFORGE_MACHINE", "LLAMAFORGE_MACHINE_ID"} <= set(wf["env"])
    unset = {test_cmd[i + 1] for i, w in enumerate(test_cmd) if w == "-u"}
    assert test_cmd[0] == "env" and unset == set(wf["env"])
    upload = next(s for s in steps if s.get("uses", "").startswith("actions/upload-artifact@"))
    assert upload["if"] == "always()" and upload["with"]["path"].rstrip("/") == "test-artifacts"
