"""One launch of a point as a record (issue 24): ``merge_launch`` builds :class:`LaunchRecord`, ``Point.launches``
reads records, and the stored JSON is the one older llamaforge wrote (old stores read, and are written back, as
they were)."""

from __future__ import annotations

import dataclasses
import json

from llamaforge.bench.export import export_run
from llamaforge.bench.sweep import merge_launch
from llamaforge.fleet.merge import import_run, parse_export
from llamaforge.machine import current as current_machine
from llamaforge.machine import hosts_of, launch_machines
from llamaforge.records import LaunchRecord, MachineRecord, field_table
from llamaforge.store import Point, Sample, Store

#: a launch as the first writer stored it (K launches per point: before machines and the engine gap)
OLD_LAUNCH = {"launch": 2, "seq": 7, "status": "ok", "failure_class": None, "started": 100.0, "finished": 130.5,
              "n_ctx": 4096, "rss_peak_mib": 812.25, "vram_self_mib": None, "vram_used_mib": None, "t_load_s": 2.5,
              "telemetry": {"samples": 12, "gpu": []}, "host_mem": None, "busy": None}
#: ... once the machine was recorded, and a failed start
MACHINE_LAUNCH = {**OLD_LAUNCH, "launch": 3, "seq": 9, "status": "failed", "failure_class": "oom",
                  "machine": {"id": "a1b2c3d4e5f6", "host": "vm", "parts": ["boot_id", "machine_id"]}}


def _point(run_id: str, launches: list[dict]) -> Point:
    return Point(run_id=run_id, build_key="cpu-k", engine="server", ncmoe=0, status="ok",
                 detail={"launches": launches, "fit_status": "fitted"},
                 samples=[Sample(0, False, tg_tps=10.0, launch=2)])


def test_an_old_style_launch_dict_reads_as_a_record_and_writes_back_unchanged(store):
    run = store.new_run("sweep", {})
    store.record_point(_point(run, [OLD_LAUNCH, MACHINE_LAUNCH, {"launch": 4, "future_key": [1]}]))
    old, with_machine, newer = store.points(run)[0].launches
    assert (old.launch, old.seq, old.status, old.n_ctx, old.rss_peak_mib, old.t_load_s) == (2, 7, "ok", 4096, 812.25, 2.5)
    assert old.ok and old.seconds() == 30.5 and old.machine is None and old.machine_id == "unknown"
    assert old.engine_gap is None and old.telemetry == {"samples": 12, "gpu": []}
    assert not with_machine.ok and with_machine.failure_class == "oom" and with_machine.machine_id == "a1b2c3d4e5f6"
    assert newer.unknown == {"future_key": [1]} and newer.ok            # no status: stored before one was written
    # the stored form: the same keys (nulls kept, absent keys left absent) and the same JSON text
    for rec, stored in ((old, OLD_LAUNCH), (with_machine, MACHINE_LAUNCH), (newer, {"launch": 4, "future_key": [1]})):
        assert rec.to_json() == stored
        assert json.dumps(rec.to_json(), sort_keys=True) == json.dumps(stored, sort_keys=True)
    assert launch_machines([old, with_machine]) == {"unknown": 1, "a1b2c3d4e5f6": 1}
    assert hosts_of([old, with_machine]) == {"a1b2c3d4e5f6": "vm"}


def test_a_point_without_launches_has_none_and_non_dict_entries_are_skipped():
    assert Point(run_id="r", build_key="k", engine="server").launches == []
    assert [r.launch for r in _point("r", ["junk", None, {"launch": 5}]).launches] == [5]  # type: ignore[list-item]


def test_merge_launch_stores_every_field_as_the_writer_before_records_did():
    one = Point(run_id="r", build_key="k", engine="server", status="ok", started=10.0, finished=12.0, n_ctx=2048,
                rss_peak_mib=100.0, t_load_s=1.0, detail={"telemetry": {"samples": 3}, "engine_gap": {"version": 1}})
    merged = merge_launch(None, one, 1, 4)
    (stored,) = merged.detail.to_json()["launches"]
    assert stored == {"launch": 1, "seq": 4, "status": "ok", "failure_class": None, "started": 10.0, "finished": 12.0,
                      "n_ctx": 2048, "rss_peak_mib": 100.0, "vram_self_mib": None, "vram_used_mib": None,
                      "t_load_s": 1.0, "telemetry": {"samples": 3}, "host_mem": None, "busy": None,
                      "machine": current_machine().to_json(), "engine_gap": {"version": 1}}
    assert set(stored) == set(field_table(LaunchRecord)["LaunchRecord"]) - {"unknown"}   # every field, None as null
    (rec,) = merged.launches
    assert rec == LaunchRecord.from_json(stored) and isinstance(rec.machine, MachineRecord)
    two = dataclasses.replace(one, status="failed", failure_class="crash", detail={})
    merged = merge_launch(merged, two, 2, 9)
    assert [(r.launch, r.seq, r.status, r.engine_gap) for r in merged.launches] == [(1, 4, "ok", {"version": 1}),
                                                                                   (2, 9, "failed", None)]
    assert merged.detail.to_json()["launches"][0] == stored                   # the earlier launch's stored form is kept as it is


def test_launches_survive_the_json_export_and_the_fleet_import(store, tmp_path):
    run = store.new_run("sweep", {})
    store.record_point(_point(run, [OLD_LAUNCH, MACHINE_LAUNCH]))
    doc = parse_export(export_run(store, run, "json"))
    with Store(tmp_path / "fleet.sqlite") as other:
        rid = import_run(other, doc, machine="m1", host="h1", fleet_run=None)
        (p,) = other.points(rid)
        assert p.detail.to_json()["launches"] == [OLD_LAUNCH, MACHINE_LAUNCH]
        assert [r.machine_id for r in p.launches] == ["unknown", "a1b2c3d4e5f6"]
