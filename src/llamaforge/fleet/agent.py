"""Runs ON a fleet host, in its venv: ``python -m llamaforge.fleet.agent COMMAND -- ARGS``.

Prints one JSON line the controller reads (never rich tables to scrape):
  info              llamaforge version, Python, machine name
  doctor            the backends this host can build and run (``build.doctor.check``)
  run-status NAME   the stored run NAME (``exists``, ``id``, ``status``, point counts)
  sha256 FILE       the file's sha256 and size
  history-runs      the stored history runs and the bisect runs their steps link (id, status, updated, points)
An error is ``{"error": ..., "fix": ...}`` with exit 2.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import sys
from pathlib import Path
from typing import Any

from .. import __version__
from ..errors import LlamaforgeError


def info() -> dict:
    import llamaforge

    return {"version": __version__, "python": platform.python_version(), "node": platform.node(),
            "machine": os.environ.get("LLAMAFORGE_MACHINE"), "module": str(Path(llamaforge.__file__).parent)}


def doctor() -> dict:
    from ..builds.doctor import check

    return {"backends": [{"backend": s.backend, "can_build": s.can_build, "can_run": s.can_run,
                          "devices": s.devices, "reasons": [list(r) for r in s.reasons], "tested": s.tested}
                         for s in check()]}


def run_status(name: str) -> dict:
    from ..locks import run_lock_path
    from ..paths import Paths
    from ..store import Store

    db = Paths.default().store_db
    if not db.is_file():   # a sweep still resolving its model has not stored its run yet
        return {"exists": False, "measuring": _host_lock_for(name)}
    with Store(db) as store:
        row = store.db.execute("SELECT id FROM runs WHERE name=? ORDER BY created DESC LIMIT 1", (name,)).fetchone()
        if row is None:
            return {"exists": False, "measuring": _host_lock_for(name)}
        run = store.get_run(row[0])
        pts = store.points(run.id, with_samples=False)
        return {"exists": True, "id": run.id, "status": run.status, "points": len(pts),
                "ok": sum(1 for p in pts if p.status == "ok"), "measuring": _held(run_lock_path(db, run.id)) or _host_lock_for(name)}


def _host_lock_for(name: str) -> bool:
    """Whether the host's measurement lock is held by a sweep of run ``name`` (it takes that lock before it
    stores its run and takes the run's own lock)."""
    from ..hostlock import LOCK_NAME, holder, lock_dir

    path = lock_dir() / LOCK_NAME
    cmd = str(holder(path).get("command") or "") if path.is_file() else ""
    return _held(path) and any(a in (f"--name={name}", f"--resume={name}") for a in cmd.split())


def _held(path: Path) -> bool:
    """Whether a live process holds the lock file ``path`` (a sweep measuring that run right now)."""
    import fcntl

    from ..locks import open_lock_file

    try:
        fd = open_lock_file(path, create=False)   # never through a symlink, never created here
    except LlamaforgeError:
        return False
    with os.fdopen(fd, "r+") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(f, fcntl.LOCK_UN)
        return False


def sha256(path: str) -> dict:
    h = hashlib.sha256()
    p = Path(path)
    with p.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return {"sha256": h.hexdigest(), "size": p.stat().st_size}


def _brief(store: Any, run: Any) -> dict:
    return {"id": run.id, "status": run.status, "updated": run.updated,
            "points": len(store.points(run.id, with_samples=False))}


def history_listing(store: Any) -> dict:
    """The store's history runs (oldest first), each with the bisect runs its located steps link
    (``HistorySummary.culprits[i]["run"]``): what ``fleet.history`` pulls back."""
    from ..errors import StoreError
    from ..records import HistorySummary

    out = []
    for run in store.list_runs("history"):
        refs = [c.get("run") for c in run.summary_as(HistorySummary).culprits] if run.summary else []
        linked = []
        for ref in dict.fromkeys(r for r in refs if isinstance(r, str) and r):
            try:
                b = store.get_run(ref)
            except StoreError:       # a bisect run deleted on the host: the step keeps its culprit
                continue
            if b.id == ref:          # the exact id (never a name or prefix match)
                linked.append(_brief(store, b))
        out.append({**_brief(store, run), "bisect": linked})
    return {"runs": out}


def history_runs() -> dict:
    from ..paths import Paths
    from ..store import Store

    db = Paths.default().store_db
    if not db.is_file():
        return {"runs": []}
    with Store(db) as store:
        return history_listing(store)


COMMANDS = {"info": info, "doctor": doctor, "run-status": run_status, "sha256": sha256, "history-runs": history_runs}


def main(argv: list[str]) -> int:
    args = [a for a in argv if a != "--"]
    if not args or args[0] not in COMMANDS:
        print(json.dumps({"error": f"unknown agent command {args[:1]}", "fix": f"use one of {sorted(COMMANDS)}"}))
        return 2
    try:
        out = COMMANDS[args[0]](*args[1:])
    except LlamaforgeError as e:
        print(json.dumps({"error": e.message, "fix": e.fix}))
        return 2
    except (OSError, TypeError) as e:
        print(json.dumps({"error": f"{args[0]}: {e}", "fix": "check the host's workspace"}))
        return 2
    print(json.dumps(out, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
