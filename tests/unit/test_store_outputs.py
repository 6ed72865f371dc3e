"""Unusable output places and stores end in one line, with no half-written file left behind: a full file
system under ``export --output`` / ``report -o`` (a real 64 KiB tmpfs), a folder given as the output file,
``LLAMAFORGE_RESULTS`` naming a file, an SQLite file that is not ours (refused, not changed), a full disk
under the store (said to be full, not "damaged"), and a run reference that is not UTF-8."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from test_store_as_data import KEY, cli, craft_store, one_error, sweep_plan, ws  # noqa: F401 - fixture

from llamaforge.store import Store, store_error
from mounts import tmpfs

RUN = "20261201-000000-beef"


def _cli_results(workspace: Path, results: Path, *args: str | bytes) -> subprocess.CompletedProcess:
    """The CLI with ``LLAMAFORGE_RESULTS`` set to ``results`` (arguments may be bytes: not UTF-8)."""
    env = {**os.environ, "LLAMAFORGE_WORKSPACE": str(workspace), "LLAMAFORGE_RESULTS": str(results),
           "COLUMNS": "400"}
    env.pop("LLAMAFORGE_DEBUG", None)
    return subprocess.run([sys.executable, "-m", "llamaforge", *args], cwd=workspace, env=env, capture_output=True,
                          text=True, errors="replace", timeout=120)


@pytest.fixture
def stored(ws):  # noqa: F811
    craft_store(ws / "results" / "llamaforge.sqlite", RUN, plan=sweep_plan(ws, KEY),
                builds=[{"key": KEY, "backend": "cpu", "commit": "0c1e57098", "pin": "default"}])
    return ws


def _fill(mnt: Path, leave: int) -> None:
    """Fill the tmpfs up to ``leave`` bytes (the filler itself is not what is checked afterwards)."""
    with open(mnt / "filler", "wb", buffering=0) as f:
        try:
            while True:
                f.write(b"\0" * 4096)
        except OSError:
            pass
    if leave:
        size = (mnt / "filler").stat().st_size
        with open(mnt / "filler", "r+b") as f:
            f.truncate(max(0, size - leave))


def _left(mnt: Path) -> set[str]:
    return {str(p.relative_to(mnt)) for p in mnt.rglob("*")} - {"filler"}


def test_export_to_a_full_file_system_is_one_line_and_leaves_no_file(stored, tmp_path):
    with tmpfs(tmp_path, "size=64k") as mnt:
        _fill(mnt, leave=1024)
        err = one_error(cli(stored, "export", RUN, "--output", str(mnt / "run.json")))
        assert "No space left on device" in err and "free space" in err
        assert _left(mnt) == set()


def test_report_to_a_full_file_system_is_one_line_and_leaves_no_half_file(stored, tmp_path):
    with tmpfs(tmp_path, "size=64k") as mnt:
        _fill(mnt, leave=8192)
        err = one_error(cli(stored, "report", RUN, "-o", str(mnt / "rep"), timeout=300))
        assert "full" in err          # seen before the work starts (under 1 MiB free), or while writing
        left = _left(mnt)
        assert not any(Path(p).name.startswith(".") for p in left), left       # no temporary file
        for png in (mnt / "rep").glob("*.png"):                                 # what is there is whole
            assert png.read_bytes().endswith(b"IEND\xaeB`\x82")


def test_a_report_that_fills_the_disk_while_writing_leaves_no_half_file(stored, tmp_path):
    """The disk fills while the report is written (the CLI's check before the work saw enough room)."""
    from llamaforge.report import ReportError, write_report

    with tmpfs(tmp_path, "size=64k") as mnt, Store(stored / "results" / "llamaforge.sqlite") as store:
        _fill(mnt, leave=8192)
        with pytest.raises(ReportError) as e:
            write_report(store, RUN, mnt / "rep")
        assert "the disk is full" in e.value.message and "nothing half-written" in e.value.fix
        left = _left(mnt)
        assert not any(Path(p).name.startswith(".") for p in left), left
        for png in (mnt / "rep").glob("*.png"):
            assert png.read_bytes().endswith(b"IEND\xaeB`\x82")
        assert not (mnt / "rep" / "report.html").exists() or "</html>" in (mnt / "rep" / "report.html").read_text()


def test_export_to_an_existing_folder_is_one_line(stored):
    out = stored / "out"
    (out / "keep").mkdir(parents=True)
    err = one_error(cli(stored, "export", RUN, "--output", str(out)))
    assert f"--output {out} is a folder" in err
    assert [p.name for p in out.iterdir()] == ["keep"]


def test_export_writes_the_whole_file(stored):
    r = cli(stored, "export", RUN, "--output", str(stored / "deep" / "run.json"))
    assert r.returncode == 0, r.stderr
    assert (stored / "deep" / "run.json").read_text().startswith("{")
    assert [p.name for p in (stored / "deep").iterdir()] == ["run.json"]


@pytest.mark.parametrize("args", [["runs"], ["report", "latest"], ["export", "latest"]])
def test_results_pointing_at_a_file_is_one_line(ws, args):  # noqa: F811
    f = ws / "not-a-folder"
    f.write_text("mine\n")
    err = one_error(_cli_results(ws, f, *args))
    assert f"the results folder {f} is not a folder" in err and "LLAMAFORGE_RESULTS" in err
    assert f.read_text() == "mine\n"


def test_a_foreign_sqlite_file_is_refused_and_left_unchanged(ws):  # noqa: F811
    db = ws / "results" / "llamaforge.sqlite"
    con = sqlite3.connect(db)
    con.execute("CREATE TABLE customers (id INTEGER, name TEXT)")
    con.execute("INSERT INTO customers VALUES (1, 'ann')")
    con.commit()
    con.close()
    before = db.read_bytes()
    for args in (["runs"], ["report", "latest"], ["export", "latest"]):
        err = one_error(cli(ws, *args))
        assert "is an SQLite database but not a llamaforge store (its tables: customers)" in err
    assert db.read_bytes() == before
    assert sorted(p.name for p in db.parent.iterdir()) == ["llamaforge.sqlite"]


def test_an_empty_sqlite_file_becomes_a_store(tmp_path):
    db = tmp_path / "llamaforge.sqlite"
    sqlite3.connect(db).close()
    with Store(db) as s:
        assert s.schema_version() >= 1


def test_a_full_disk_under_the_store_is_said_to_be_full(tmp_path):
    with tmpfs(tmp_path, "size=256k") as mnt:
        with Store(mnt / "llamaforge.sqlite") as s:
            s.new_run("sweep", {}, name="first")
        _fill(mnt, leave=0)
        ws = tmp_path / "ws"
        ws.mkdir()
        err = one_error(_cli_results(ws, mnt, "runs"))
        assert "is full" in err and "free disk space" in err
        assert "damaged" not in err and "move the file aside" not in err and ".recover" not in err


def test_store_error_of_sqlite_full_says_disk_full(tmp_path):
    e = store_error(tmp_path / "s.sqlite", sqlite3.OperationalError("database or disk is full"))
    assert "is full" in e.message and "damaged" not in e.message and "mv " not in (e.fix or "")


@pytest.mark.parametrize("args", [["runs", "--run", b"\xff\xfe"], ["runs", b"\xff\xfe"], ["runs", "--kind", b"\xff"],
                                  ["export", b"\xff\xfe"], ["report", b"\xff\xfe"]])
def test_a_run_reference_that_is_not_utf8_is_one_line(stored, args):
    err = one_error(_cli_results(stored, stored / "results", *args))
    assert "UTF-8" in err


def test_the_store_refuses_text_sqlite_cannot_take(tmp_path):
    """Below the CLI (which refuses such option values first): the store API itself."""
    from llamaforge.errors import StoreError

    with Store(tmp_path / "s.sqlite") as s:
        for call in (lambda: s.get_run("\udcff\udcfe"), lambda: s.list_runs("\udcff"),
                     lambda: s.new_run("sweep", {}, name="\udcff")):
            with pytest.raises(StoreError, match="is not valid UTF-8 text"):
                call()
