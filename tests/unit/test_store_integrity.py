"""The store survives: a damaged or foreign file gives one line with the way out (not a traceback),
and the versioned migration ladder takes a real v1 store to the current schema with a backup first,
all or nothing. The v1 store is tests/fixtures/store-v1-h200.sqlite: the H200 store as committed on
2026-11-30 (schema v1), cut to its whole-card sweep's ncmoe 0, 20 and 40 (results/h200's own store has
since been migrated to v2 by the session that added to it)."""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from llamaforge import store as store_mod
from llamaforge.errors import StoreError
from llamaforge.files import sha256_file
from llamaforge.store import SCHEMA_VERSION, Store

REPO = Path(__file__).resolve().parents[2]
H200 = REPO / "tests" / "fixtures" / "store-v1-h200.sqlite"


def _counts(path: Path) -> dict[str, int]:
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return {t: db.execute(f"SELECT count(*) FROM {t}").fetchone()[0]  # noqa: S608 - fixed table names
                for t in ("runs", "builds", "run_builds", "points", "samples", "probes")}
    finally:
        db.close()


def _version(path: Path) -> int:
    # immutable: reading the committed file must not leave -wal/-shm files beside it
    db = sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)
    try:
        return int(db.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()[0])
    finally:
        db.close()


def _indexes(path: Path) -> set[str]:
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='index'")}
    finally:
        db.close()


@pytest.fixture
def h200_copy(tmp_path) -> Path:
    assert _version(H200) == 1, "the committed store is the v1 fixture of this test"
    dest = tmp_path / "results" / "llamaforge.sqlite"
    dest.parent.mkdir()
    shutil.copy(H200, dest)
    return dest


def test_v1_to_v2_on_a_copy_of_the_h200_store(h200_copy):
    before_sha = sha256_file(H200)
    before = _counts(h200_copy)
    with Store(h200_copy) as s:
        assert s.schema_version() == SCHEMA_VERSION == 3
        runs = s.list_runs()
        assert len(runs) == before["runs"] and all(s.points(r.id) is not None for r in runs)
        backup = s.backup
    assert backup is not None and backup.name == "llamaforge.v1-backup.sqlite"
    assert _version(backup) == 1 and _counts(backup) == before      # the untouched v1 copy
    assert _counts(h200_copy) == before                               # no data lost or added
    assert {"runs_parent", "probes_run", "runs_kind_created"} <= _indexes(h200_copy)
    assert not {"runs_parent", "probes_run", "runs_kind_created"} & _indexes(backup)
    db = sqlite3.connect(f"file:{h200_copy}?mode=ro", uri=True)
    assert "parent_run" in {r[1] for r in db.execute("PRAGMA table_info(runs)")}   # what `reproduce` needs
    assert "launch" in {r[1] for r in db.execute("PRAGMA table_info(samples)")}
    db.close()
    assert sha256_file(H200) == before_sha                            # the committed file is never touched
    with Store(h200_copy) as s:                                       # the next open has nothing to do
        assert s.backup is None


def test_a_new_store_starts_at_the_current_version_without_a_backup(tmp_path):
    with Store(tmp_path / "new.sqlite") as s:
        assert s.schema_version() == SCHEMA_VERSION and s.backup is None
    assert [p.name for p in tmp_path.iterdir() if "backup" in p.name] == []


def test_a_failing_migration_leaves_the_store_unchanged(h200_copy, monkeypatch):
    def broken(db: sqlite3.Connection) -> None:
        db.execute("CREATE INDEX probes_run ON probes(run_id)")
        db.execute("SELECT no_such_column FROM runs")

    monkeypatch.setattr(store_mod, "MIGRATIONS", [broken])
    with pytest.raises(StoreError, match="from schema v1 to v2 failed"):
        Store(h200_copy)
    assert _version(h200_copy) == 1 and "probes_run" not in _indexes(h200_copy)


def test_a_store_from_a_newer_llamaforge_is_refused(tmp_path):
    path = tmp_path / "s.sqlite"
    Store(path).close()
    db = sqlite3.connect(path)
    db.execute("UPDATE meta SET value='99' WHERE key='schema_version'")
    db.commit()
    db.close()
    with pytest.raises(StoreError, match="newer than this llamaforge"):
        Store(path)


def _cli(ws: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "LLAMAFORGE_WORKSPACE": str(ws), "LLAMAFORGE_RESULTS": str(ws / "results")}
    env.pop("LLAMAFORGE_DEBUG", None)
    return subprocess.run([sys.executable, "-m", "llamaforge", *args], cwd=ws, env=env, capture_output=True,
                          text=True, timeout=120)


def _assert_one_clear_line(r: subprocess.CompletedProcess, path: Path) -> None:
    assert r.returncode == 2, r.stderr
    assert "Traceback" not in r.stderr and "DatabaseError" not in r.stderr
    err = " ".join(r.stderr.split())
    assert f"the results store {path} is damaged" in err
    assert ".recover" in err and f"mv {path}" in err


def test_cli_on_a_file_that_is_not_a_database(tmp_path):
    shutil.copy(REPO / "pins.toml", tmp_path / "pins.toml")
    db = tmp_path / "results" / "llamaforge.sqlite"
    db.parent.mkdir()
    db.write_bytes(b"this is not an SQLite file\n" * 200)
    for args in (["runs"], ["export", "latest"], ["report", "latest"]):
        _assert_one_clear_line(_cli(tmp_path, *args), db)


def test_cli_on_a_store_with_damaged_pages(tmp_path, h200_copy):
    shutil.copy(REPO / "pins.toml", tmp_path / "pins.toml")
    n = h200_copy.stat().st_size
    with open(h200_copy, "r+b") as f:   # the header and schema survive; the data pages don't
        f.seek(n // 4)
        f.write(bytes(range(256)) * (n // 512))
    _assert_one_clear_line(_cli(tmp_path, "runs"), h200_copy)
