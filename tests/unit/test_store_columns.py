"""One list of a point's and a sample's columns: the fields of ``store.Point`` / ``store.Sample`` are the store's
columns, the exports' (``bench.export``) and what the fleet import (``fleet.merge``) keeps — a field added to the
dataclass reaches all of them, and one the schema lacks is caught here."""

from __future__ import annotations

import csv
import dataclasses
import io
import json

from llamaforge.bench.export import export_run
from llamaforge.fleet.merge import import_run, parse_export
from llamaforge.records import LaunchRecord
from llamaforge.store import (
    POINT_COLUMNS,
    POINT_CSV,
    POINT_FIELDS,
    POINT_KEYS,
    SAMPLE_CSV,
    SAMPLE_FIELDS,
    Point,
    Sample,
    Store,
)


def _full_point(run_id: str) -> Point:
    """A point with every field set to a value that is not its default (the samples likewise)."""
    p = Point(run_id, "cpu-0c1e570-abcd", "server", ncmoe=3, ngl=12, label="B", status="failed", failure_class="oom",
              failure_detail="out of\nmemory", log_tail="line 1\nline 2", n_ctx=4096, n_ctx_train=32768,
              vram_used_mib=1000.5, vram_self_mib=900.25, vram_total_mib=24576.0, rss_peak_mib=512.0,
              mem_breakdown={"unit": "MiB", "devices": [], "host": None, "other": []}, prompt_tokens=2500,
              n_predict=128, t_load_s=1.5, t_warmup_s=0.5, t_measure_s=9.5, command=["llama-server", "-c", "4096"],
              build_info="b1 (0c1e570)", detail={"launches": [LaunchRecord(launch=2).to_json()]}, started=100.0, finished=110.0)
    p.samples = [Sample(i, i == 0, test="tg128", prompt_n=2500, prompt_ms=250.0, pp_tps=10000.0, predicted_n=128,
                        predicted_ms=1280.0, tg_tps=100.0 + i, raw={"i": i}, launch=2) for i in range(3)]
    return p


def _columns(store: Store, table: str) -> set[str]:
    return {r[1] for r in store.db.execute(f"PRAGMA table_info({table})")}


def test_the_schema_has_a_column_for_every_point_and_sample_field_and_no_other(store):
    json_fields = [f.name for f in dataclasses.fields(Point) if f.metadata.get("json")]
    assert json_fields == ["mem_breakdown", "command", "detail"]
    assert POINT_KEYS["detail"] == "extra"                 # the detail record keeps the column and export key "extra"
    assert _columns(store, "points") == {"id", *POINT_COLUMNS, *(f"{POINT_KEYS[c]}_json" for c in json_fields)}
    assert _columns(store, "samples") == {"id", "point_id", *(f"{c}_json" if c == "raw" else c for c in SAMPLE_FIELDS)}
    assert set(POINT_FIELDS) == {f.name for f in dataclasses.fields(Point)} - {"samples", "id"}


def test_a_point_round_trips_every_field_through_the_store_the_json_export_and_the_fleet_import(store, tmp_path):
    run = store.new_run("sweep", {"points": [{"ncmoe": 3, "ngl": 12}]})
    store.record_point(_full_point(run))
    (back,) = store.points(run)
    want = _full_point(run)
    assert [getattr(back, c) for c in POINT_FIELDS] == [getattr(want, c) for c in POINT_FIELDS]
    assert back.samples == want.samples

    doc = parse_export(export_run(store, run, "json"))
    (exported,) = doc["points"]
    assert set(exported) == {*POINT_KEYS.values(), "summary", "samples"}
    assert all(set(s) == set(SAMPLE_FIELDS) for s in exported["samples"])
    with Store(tmp_path / "other.sqlite") as other:
        rid = import_run(other, doc, machine="m1", host="h1", fleet_run=None)
        (imported,) = other.points(rid)
        assert imported.run_id == rid
        assert [getattr(imported, c) for c in POINT_FIELDS if c != "run_id"] == \
               [getattr(want, c) for c in POINT_FIELDS if c != "run_id"]
        assert imported.samples == want.samples


def test_the_csv_export_has_the_one_line_fields_of_a_point_and_a_sample(store):
    run = store.new_run("sweep", {})
    store.record_point(_full_point(run))
    rows = list(csv.reader(io.StringIO(export_run(store, run, "csv"))))
    assert rows[0] == [*POINT_CSV, *SAMPLE_CSV]
    assert "log_tail" not in rows[0] and "command" not in rows[0] and "raw" not in rows[0]
    assert len(rows) == 1 + 3 and [r[rows[0].index("warmup")] for r in rows[1:]] == ["1", "0", "0"]
    assert json.loads(export_run(store, run, "json"))["points"][0]["log_tail"] == "line 1\nline 2"
