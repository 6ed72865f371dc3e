"""A point's detail is one typed, versioned record (``records.PointDetail``, issue 42): stored as ``points.extra_json``
as before, every field written by a producer, an old row read and written back unchanged (keys it does not know
included), a wrongly typed value a damaged row, and every committed store under ``results/`` readable."""

from __future__ import annotations

import ast
import json
import lzma
import shutil
import sqlite3
from pathlib import Path

import pytest
from test_bench_sweep import _plan

from fakes import FakeBuild, fake_binaries
from llamaforge.bench.export import export_run
from llamaforge.bench.plan import PointSpec
from llamaforge.bench.sweep import measure_point
from llamaforge.errors import FleetError
from llamaforge.fleet.merge import import_run, parse_export
from llamaforge.records import VERSION_KEY, LaunchRecord, PointDetail, field_table, mistyped
from llamaforge.store import Point, Sample, Store

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src" / "llamaforge"

#: a point's extra_json as the writer before the record stored it (a real sweep's keys), plus one no field knows
OLD_EXTRA = {"fit_status": "fitted", "prompt": {"n_tokens": 32, "cut": True}, "model_meta": {"n_ctx_train": 4096},
             "host_mem": {"rss_anon_peak_mib": 10.5, "rss_file_peak_mib": 20.0, "source": "smaps_rollup"},
             "telemetry": {"samples": 3}, "vram_self_source": "fit_memory_breakdown",
             "launches": [{"launch": 1, "seq": 1, "status": "ok", "failure_class": None, "started": 1.0, "finished": 2.0,
                           "n_ctx": 4096, "rss_peak_mib": 100.0, "vram_self_mib": None, "vram_used_mib": None,
                           "t_load_s": 0.5, "telemetry": None, "host_mem": None, "busy": None}],
             "a_future_key": {"kept": [1, 2]}}


def _old_row(store: Store, run: str, extra: object) -> int:
    """A point row written as an older llamaforge wrote it (``extra_json`` text without a version key)."""
    store.record_point(Point(run, "cpu-k", "server", samples=[Sample(1, False, tg_tps=10.0)]))
    text = extra if isinstance(extra, str) else json.dumps(extra, sort_keys=True)
    store.db.execute("UPDATE points SET extra_json=? WHERE run_id=?", (text, run))
    return int(store.db.execute("SELECT id FROM points WHERE run_id=?", (run,)).fetchone()[0])


def _column(store: Store, run: str) -> dict | None:
    text = store.db.execute("SELECT extra_json FROM points WHERE run_id=?", (run,)).fetchone()[0]
    return None if text is None else json.loads(text)


def test_an_old_extra_json_reads_as_typed_fields_and_round_trips_unchanged_with_its_unknown_keys(store, tmp_path):
    run = store.new_run("sweep", {})
    _old_row(store, run, OLD_EXTRA)
    (p,) = store.points(run)
    d = p.detail
    assert (d.fit_status, d.prompt["n_tokens"], d.vram_self_source) == ("fitted", 32, "fit_memory_breakdown")
    assert d.unknown == {"a_future_key": {"kept": [1, 2]}} and isinstance(d.launches[0], LaunchRecord)
    assert p.launches[0].n_ctx == 4096 and d.launches[0].to_json() == OLD_EXTRA["launches"][0]   # nulls kept
    assert d.to_json() == OLD_EXTRA and d.warnings == [] and "warnings" not in d.to_json()
    # the JSON export gives the stored form as it was; written back, the row gains only the version key
    (exported,) = parse_export(export_run(store, run, "json"))["points"]
    assert exported["extra"] == OLD_EXTRA
    store.record_point(p)
    assert _column(store, run) == {**OLD_EXTRA, VERSION_KEY: 1}
    (again,) = store.points(run)
    assert again.detail.to_json() == OLD_EXTRA
    assert parse_export(export_run(store, run, "json"))["points"][0]["extra"] == {**OLD_EXTRA, VERSION_KEY: 1}
    # ... and the fleet import keeps it, unknown key included
    with Store(tmp_path / "fleet.sqlite") as other:
        rid = import_run(other, parse_export(export_run(store, run, "json")), machine="m", host="h", fleet_run=None)
        (imported,) = other.points(rid)
        assert imported.detail.to_json() == OLD_EXTRA


def test_a_point_with_no_detail_keeps_a_null_column_and_exports_null(store):
    run = store.new_run("sweep", {})
    store.record_point(Point(run, "cpu-k", "server", status="failed", failure_class="error"))
    assert _column(store, run) is None
    (p,) = store.points(run)
    assert p.detail.empty and parse_export(export_run(store, run, "json"))["points"][0]["extra"] is None


def test_a_null_a_writer_stored_stays_stored():
    d = PointDetail.from_json({"n_ctx_source": None, "placement": None, "fit_status": "unsupported"})
    assert d.to_json() == {"n_ctx_source": None, "placement": None, "fit_status": "unsupported"}
    assert PointDetail(n_ctx_source=None).keep_nulls("n_ctx_source").to_json() == {"n_ctx_source": None}


@pytest.mark.parametrize(("extra", "said"), [
    ({"fit_status": 5}, "fit_status holds int"),
    ({"fit_reused": "yes"}, "fit_reused holds str"),
    ({"warnings": ["ok", 3]}, "warnings[1] holds int"),
    ({"telemetry": [1]}, "telemetry holds list"),
    ({"launches": [{"launch": 1, "status": 7}]}, "launches[0].status holds int"),
    ({"launches": [{"launch": 1, "machine": {"id": 5}}]}, "launches[0].machine.id holds int"),
    ({"launches": 5}, "damaged (TypeError"),
    ('{"llama_bench": "x"}', "llama_bench holds str 'x', not list[dict] | None"),
])
def test_a_wrongly_typed_stored_value_is_a_damaged_row_skipped_with_one_notice(store, capsys, extra, said):
    run = store.new_run("sweep", {})
    _old_row(store, run, extra)
    store.record_point(Point(run, "cpu-k", "server", ncmoe=1, detail=PointDetail(fit_status="fitted")))
    capsys.readouterr()
    assert [p.ncmoe for p in store.points(run)] == [1]           # the sound point is read, the damaged one left out
    err = capsys.readouterr().err
    assert "skipped 1 damaged points" in err and said in err, err


def test_a_wrongly_typed_detail_in_a_fleet_export_is_refused_in_one_line(store):
    run = store.new_run("sweep", {})
    store.record_point(Point(run, "cpu-k", "server", detail={"fit_status": "fitted"}))
    doc = parse_export(export_run(store, run, "json"))
    doc["points"][0]["extra"]["fit_status"] = ["not", "text"]
    with pytest.raises(FleetError, match="fit_status holds list"):
        import_run(store, doc, machine="m", host="h", fleet_run=None)


# ---- every field has a producer, and producers write nothing else ------------------------------------------------

def _written_fields() -> set[str]:
    """The PointDetail fields some module under src/ writes: ``….detail.NAME = …`` (a tuple target too),
    ``….detail.NAME.append(…)`` / ``extend``, or ``PointDetail(NAME=…)``."""
    out: set[str] = set()

    def detail_attr(node: ast.AST) -> str | None:
        if isinstance(node, ast.Attribute) and (
                (isinstance(node.value, ast.Attribute) and node.value.attr == "detail")
                or (isinstance(node.value, ast.Name) and node.value.id == "detail")):
            return node.attr
        return None

    for path in SRC.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Assign):
                for t in node.targets:
                    for e in (t.elts if isinstance(t, ast.Tuple) else [t]):
                        if (name := detail_attr(e)) is not None:
                            out.add(name)
            elif isinstance(node, ast.Call):
                f = node.func
                if isinstance(f, ast.Name) and f.id == "PointDetail":
                    out |= {k.arg for k in node.keywords if k.arg}
                elif isinstance(f, ast.Attribute) and f.attr in ("append", "extend") and (
                        name := detail_attr(f.value)) is not None:
                    out.add(name)
    return out


def test_every_field_of_the_point_detail_is_written_by_a_producer():
    fields = set(field_table(PointDetail)["PointDetail"]) - {"unknown"}
    assert fields - _written_fields() == set()


def test_a_fake_servers_cross_check_sweep_writes_only_typed_fields(tmp_path, store):
    build = FakeBuild("fake-ok", fake_binaries(tmp_path / "bin", llamabench=False), "ok")
    run = store.new_run("sweep", {})
    p = measure_point(build, Path("/m.gguf"), PointSpec(0), _plan(engine="both", repeats=2), store, run,
                      engine="server")
    assert p.status == "ok", p.log_tail
    (stored,) = store.points(run)
    d = stored.detail
    assert d.unknown == {} and mistyped(d) is None
    assert {"fit_status", "prompt", "model_meta", "engine_gap"} <= set(d.to_json())
    assert set(_column(store, run) or {}) == {*d.to_json(), VERSION_KEY}


# ---- the committed stores -------------------------------------------------------------------------------------

def _committed_stores() -> list[Path]:
    return sorted({*(ROOT / "results").rglob("llamaforge.sqlite"), *(ROOT / "results").rglob("llamaforge.sqlite.xz")})


@pytest.mark.parametrize("src", _committed_stores(), ids=lambda p: str(p.relative_to(ROOT / "results")))
def test_every_point_of_a_committed_store_reads_its_detail_without_error(src, tmp_path, capsys):
    db = tmp_path / "llamaforge.sqlite"     # a copy: a committed store is never opened for writing
    if src.suffix == ".xz":
        with lzma.open(src) as f, open(db, "wb") as out:
            shutil.copyfileobj(f, out)
    else:
        shutil.copyfile(src, db)
        if Path(f"{src}-wal").is_file():
            shutil.copyfile(f"{src}-wal", f"{db}-wal")
    with sqlite3.connect(db) as c:
        raw = {r[0]: None if r[1] is None else json.loads(r[1]) for r in c.execute("SELECT id, extra_json FROM points")}
    read = 0
    with Store(db) as store:
        for run in store.list_runs():
            for p in store.points(run.id, with_samples=False):
                assert mistyped(p.detail) is None
                assert p.detail.exported() == raw[p.id], p.id          # read and written back as it was
                assert [r.launch for r in p.launches] == [r.launch for r in p.detail.launches]
                read += 1
    assert read == len(raw) and "damaged" not in capsys.readouterr().err
