"""Import a run exported on a fleet host (``llamaforge export RUN --format json``) into the local store.

The imported run gets the id ``<remote id>.<machine>``, the machine name in its environment
(``env.machine``) and the fleet run in its plan (``plan.fleet``). Importing the same export again, or a
later export of the same run (after ``--resume``), replaces points key by key: nothing is duplicated.
A build whose key is already stored keeps its stored manifest (the key fixes the compile inputs) and is
only linked.
"""

from __future__ import annotations

import json
import time
from typing import Any

from ..errors import FleetError
from ..records import RECORD_VERSION, Environment, FleetSection, RunPlan, mistyped
from ..store import POINT_FIELDS, POINT_KEYS, SAMPLE_FIELDS, Point, Run, Sample, Store

#: what an imported point keeps of the export (its run is the imported run)
_POINT_FIELDS = tuple(c for c in POINT_FIELDS if c != "run_id")


def imported_id(remote_id: str, machine: str) -> str:
    return f"{remote_id}.{machine}"


def _bad(what: str) -> FleetError:
    return FleetError(f"the pulled export is malformed: {what}",
                      "re-run the fleet command with --resume (the export is made again on the host)")


def parse_export(text: str) -> dict:
    try:
        doc = json.loads(text)
    except ValueError as e:
        raise _bad(f"not JSON ({e})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("run"), dict) or not isinstance(doc.get("points"), list):
        raise _bad("no run/points")
    if not isinstance(doc["run"].get("id"), str) or not doc["run"]["id"]:
        raise _bad("the run has no id")
    return doc


def _point(run_id: str, d: Any) -> Point:
    if not isinstance(d, dict) or not isinstance(d.get("build_key"), str) or not isinstance(d.get("engine"), str):
        raise _bad("a point without build_key/engine")
    try:      # each field under its export key (the detail: ``extra``, read into its record)
        p = Point(run_id=run_id, **{c: d.get(k) for c in _POINT_FIELDS if (k := POINT_KEYS[c]) in d})
    except (TypeError, ValueError) as e:
        raise _bad(f"a point's extra ({e})") from None
    if (why := mistyped(p.detail)) is not None:
        raise _bad(f"a point's extra: {why}")
    p.ncmoe = int(p.ncmoe or 0)
    p.ngl = int(p.ngl if p.ngl is not None else -1)
    p.label = str(p.label or "")
    for s in d.get("samples") or []:
        if not isinstance(s, dict):
            raise _bad("a sample is not an object")
        p.samples.append(Sample(**{k: s[k] for k in SAMPLE_FIELDS if k in s}))
    return p


def import_run(store: Store, doc: dict, *, machine: str, host: str, fleet_run: str | None,
               note: dict | None = None) -> str:
    """Store the exported run ``doc`` as ``<id>.<machine>``; returns the local run id. ``note`` goes into
    ``plan.fleet`` (``fleet.history``: ``remote_updated`` and ``remote_points``, the host's ``updated`` and point count,
    to pull only what changed)."""
    r = doc["run"]
    rid = imported_id(r["id"], machine)
    env = Environment.from_json(r.get("env") or {})
    env.machine = machine
    env.fleet_host = host
    plan = RunPlan.from_json(r.get("plan") or {})
    plan.fleet = FleetSection.from_json(dict(note or {}), RECORD_VERSION).replace(
        run=fleet_run, host=host, machine=machine, remote_run=r["id"])
    now = time.time()
    store.put_run(Run(id=rid, kind=str(r.get("kind") or "sweep"), name=r.get("name"), status=str(r.get("status") or "?"),
                      created=float(r.get("created") or now), updated=now, command=r.get("command"), plan=plan,
                      env=env, summary=r.get("summary")))
    for m in doc.get("builds") or []:
        if not isinstance(m, dict) or not isinstance(m.get("key"), str):
            raise _bad("a build without key")
        if store.get_build(m["key"]) is None:
            store.add_build(dict(m, machine=machine), rid)
        else:
            store.link_build(rid, m["key"])
    for d in doc["points"]:
        store.record_point(_point(rid, d))
    return rid
