"""Text from data (run names, pins, ids) reaches the terminal verbatim, through the real CLI: rich
markup in it is not interpreted (no crash, nothing vanishes) and emoji codes stay text."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from llamaforge.errors import StoreError
from llamaforge.store import Store

REPO = Path(__file__).resolve().parents[2]
HOSTILE = "[/x] test [bold]A:b:STEP[/bold] :thumbs_up:"


@pytest.fixture
def ws(tmp_path):
    shutil.copy(REPO / "pins.toml", tmp_path / "pins.toml")
    (tmp_path / "results").mkdir()
    return tmp_path


def cli(ws: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "LLAMAFORGE_WORKSPACE": str(ws), "LLAMAFORGE_RESULTS": str(ws / "results"),
           "COLUMNS": "400"}
    env.pop("LLAMAFORGE_DEBUG", None)
    return subprocess.run([sys.executable, "-m", "llamaforge", *args], cwd=ws, env=env, capture_output=True,
                          text=True, timeout=120)


def _store(ws: Path) -> Store:
    return Store(ws / "results" / "llamaforge.sqlite")


def test_runs_lists_a_run_whose_name_is_markup(ws):
    with _store(ws) as s:
        s.new_run("sweep", {"backends": ["cpu[/]"]}, name=HOSTILE)
    r = cli(ws, "runs")
    assert r.returncode == 0, r.stderr
    assert "Traceback" not in r.stderr
    assert HOSTILE in r.stdout and "cpu[/]" in r.stdout
    assert "👍" not in r.stdout


@pytest.mark.parametrize("pin", ["[/x]", "A:b:STEP"])
def test_unknown_pin_error_keeps_its_text(ws, pin):
    r = cli(ws, "build", "--backends", "cpu", "--pins", pin)
    assert r.returncode == 2
    assert "Traceback" not in r.stderr
    err = " ".join(r.stderr.split())
    assert f"unknown pin '{pin}'" in err
    assert f"[pins.{pin}]" in err          # the fix hint keeps its TOML table name
    assert "🅱" not in r.stderr


def test_percent_and_underscore_are_not_wildcards(ws):
    with _store(ws) as s:
        first = s.new_run("sweep", {}, name="one")
        s.new_run("sweep", {}, name="two")
        for pattern in ("%", "_", first[:4] + "%", "_" * len(first)):
            with pytest.raises(StoreError, match="no run"):
                s.get_run(pattern)
        assert s.get_run(first).id == first
    r = cli(ws, "export", "%")
    assert r.returncode == 2 and "no run '%'" in r.stderr and "Traceback" not in r.stderr
