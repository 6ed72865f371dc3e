"""The test tiers (docs/testing.md, Tiers): ``scripts/test.sh`` (the default tier, what .ci/run calls) leaves out the
``full`` tests, those that need a cold build the default tier does not make (the oldest release pin's, through the
``pin_build`` fixture), and ``scripts/test.sh --full`` runs them too. Checked on the real script (the pytest command
lines it runs, with ``ruff`` and ``python3`` stood in for on PATH) and on the real tests/integration, collected by
pytest with each tier's own ``-m``."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

_RECORD = "import json, sys\nwith open(sys.argv[1], 'a') as f:\n    f.write(json.dumps(sys.argv[2:]) + '\\n')\n"
#: a pytest plugin that writes what a collection selected and deselected, with each test's fixtures and markers
_PROBE = '''import json, os
_out = {"selected": {}, "deselected": {}}
def _info(item):
    full = item.get_closest_marker("full")
    return {"fixtures": sorted(getattr(item, "fixturenames", ())), "marks": sorted({m.name for m in item.iter_markers()}),
            "covered_by": list(full.kwargs.get("covered_by", ())) if full else []}
def pytest_deselected(items):
    _out["deselected"].update({it.nodeid: _info(it) for it in items})
def pytest_collection_finish(session):
    _out["selected"] = {it.nodeid: _info(it) for it in session.items}
    with open(os.environ["LF_TIERS_PROBE_OUT"], "w") as f:
        json.dump(_out, f)
'''


def _test_sh(tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess, list[list[str]]]:
    """Run the real ``scripts/test.sh ARGS`` with ``ruff`` and ``python3`` recording, not running: its result and
    the argument lists of the ``python3`` commands it ran (``-m pytest …``), in order."""
    bin_dir, log = tmp_path / "bin", tmp_path / "calls.jsonl"
    bin_dir.mkdir(parents=True)
    (tmp_path / "record.py").write_text(_RECORD)
    (bin_dir / "ruff").write_text("#!/bin/sh\nexit 0\n")
    (bin_dir / "python3").write_text(f"#!/bin/sh\nexec {shlex.quote(sys.executable)} "
                                     f"{shlex.quote(str(tmp_path / 'record.py'))} {shlex.quote(str(log))} \"$@\"\n")
    for exe in bin_dir.iterdir():
        exe.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k not in ("LLAMAFORGE_TEST_ARTIFACTS", "LLAMAFORGE_TEST_WORKERS")}
    env["PATH"] = f"{bin_dir}{os.pathsep}{env['PATH']}"
    r = subprocess.run(["bash", str(REPO / "scripts" / "test.sh"), *args], capture_output=True, text=True, env=env,
                       timeout=60)
    calls = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    return r, calls


def _mark(call: list[str]) -> str:
    """The ``-m`` expression of a pytest command line."""
    return call[call.index("-m", 2) + 1]


def _collect(tmp_path: Path, call: list[str]) -> dict[str, dict]:
    """What the real pytest selects and deselects for the selection (``-m`` and paths) of a phase's command line."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "lf_tiers_probe.py").write_text(_PROBE)
    out = tmp_path / "collected.json"
    paths = [a for a in call[2:] if a.startswith("tests")]
    env = {**os.environ, "LF_TIERS_PROBE_OUT": str(out),
           "PYTHONPATH": os.pathsep.join([str(tmp_path), *filter(None, [os.environ.get("PYTHONPATH")])])}
    r = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "lf_tiers_probe",
                        "-p", "no:cacheprovider", "-m", _mark(call), *paths], cwd=REPO, capture_output=True, text=True,
                       env=env, timeout=300)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return json.loads(out.read_text())


def test_the_default_tier_leaves_out_every_full_test_and_the_full_tier_runs_every_slow_test(tmp_path):
    r, default = _test_sh(tmp_path / "default")
    assert r.returncode == 0, r.stderr
    r, full = _test_sh(tmp_path / "full", "--full")
    assert r.returncode == 0, r.stderr
    assert len(default) == len(full) == 2, (default, full)        # the fast phase, then the slow phase
    assert _mark(default[0]) == _mark(full[0]) == "not slow" and "-n" in default[0]
    slow_default, slow_full = default[1], full[1]
    assert slow_default[-2:] == slow_full[-2:] == ["--durations=40", "tests/integration"]
    assert _mark(slow_default) == "slow and not full" and _mark(slow_full) == "slow"
    assert slow_default[:slow_default.index("-m")] == slow_full[:slow_full.index("-m")]   # the same phase, but -m

    got = _collect(tmp_path / "c-default", slow_default)
    every = {**got["selected"], **got["deselected"]}
    pin = {t for t, i in every.items() if "pin_build" in i["fixtures"]}
    full_marked = {t for t, i in every.items() if "full" in i["marks"]}
    assert pin, "no test uses pin_build: the tiers check nothing (renamed? change this test)"
    assert pin <= full_marked, f"tests using pin_build without @pytest.mark.full: {sorted(pin - full_marked)}"
    assert got["selected"] and not set(got["selected"]) & full_marked
    assert set(got["deselected"]) == full_marked, "the default tier's slow phase leaves out exactly the full tests"
    # a full test that needs no cold build of its own names the default-tier tests that check its capability on real
    # llama.cpp (every capability keeps a real test in the run CI waits on); each name is a test the default tier runs
    for t in sorted(full_marked - pin):
        cover = every[t]["covered_by"]
        assert cover, f"{t} is full without pin_build: give @pytest.mark.full(covered_by=[...default-tier tests...])"
        assert all(c in got["selected"] for c in cover), (t, [c for c in cover if c not in got["selected"]])
    # and the full tier's `-m slow` (asserted above) selects them all: every test of tests/integration is slow
    assert all("slow" in i["marks"] for i in every.values()), [t for t, i in every.items() if "slow" not in i["marks"]]


def test_test_sh_with_pytest_arguments_runs_one_pytest_with_exactly_them(tmp_path):
    args = ["-m", "not slow", "-x", "tests/unit/test_tiers.py"]
    r, calls = _test_sh(tmp_path, *args)
    assert r.returncode == 0, r.stderr
    assert calls == [["-m", "pytest", *args]]


def test_full_takes_no_other_arguments(tmp_path):
    r, calls = _test_sh(tmp_path, "--full", "-x")
    assert r.returncode == 2 and not calls
    assert "--full takes no other arguments" in r.stderr


def test_a_full_test_that_is_not_slow_is_refused_at_collection(pytestconfig):
    root = Path(__file__).resolve().parents[1] / "conftest.py"      # tests/conftest.py, as pytest loaded it
    (conftest,) = [p for p in pytestconfig.pluginmanager.get_plugins() if getattr(p, "__file__", None) == str(root)]

    class Item:
        def __init__(self, *marks: str) -> None:
            self.nodeid, self.marks = "tests/integration/test_x.py::test_x", marks

        def get_closest_marker(self, name: str) -> object | None:
            return object() if name in self.marks else None

    conftest.pytest_collection_modifyitems(None, [Item("slow", "full"), Item("slow"), Item()])
    with pytest.raises(pytest.UsageError, match=r"full tests that are not slow run in the default tier's fast phase"):
        conftest.pytest_collection_modifyitems(None, [Item("slow"), Item("full")])
