"""Which machine measured a launch: the identity, the resume warning, the report and the verdict notes."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from nvml_fake import FakePynvml
from test_replication import _fake_once, _plan

from fakes import FakeBuild
from llamaforge import machine
from llamaforge.bench import sweep
from llamaforge.bench.display import print_run
from llamaforge.bench.plan import Plan
from llamaforge.findings.reproduction import check_points
from llamaforge.records import LaunchRecord, MachineRecord
from llamaforge.report import data as rdata
from llamaforge.report.contents import build_sections
from llamaforge.store import Point, Sample, Store

FIXTURE_V1 = Path(__file__).resolve().parents[1] / "fixtures" / "store-v1-h200.sqlite"


def _root(tmp_path: Path, boot: str | None = "b0", mid: str | None = "m0") -> Path:
    root = tmp_path / f"root-{boot}-{mid}"
    if boot is not None:
        (root / "proc/sys/kernel/random").mkdir(parents=True, exist_ok=True)
        (root / machine.BOOT_ID).write_text(boot + "\n")
    if mid is not None:
        (root / "etc").mkdir(parents=True, exist_ok=True)
        (root / machine.MACHINE_ID).write_text(mid + "\n")
    return root


def _id(root: Path, nvml=None, **kw) -> machine.MachineRecord:
    return machine.identify(root, nvml_module=nvml or FakePynvml(fail_init=True), env=kw.get("env", {}), host="vm")


# ------------------------------------------------------------------------------------ identity


def test_the_id_changes_with_the_boot_the_os_install_and_the_gpus_but_not_the_host_name(tmp_path):
    a = _id(_root(tmp_path, "boot-1", "mid-1"))
    assert a.id == _id(_root(tmp_path, "boot-1", "mid-1")).id and len(a.id) == 12
    assert a.parts == ["boot_id", "machine_id"] and a.host == "vm"
    assert _id(_root(tmp_path, "boot-2", "mid-1")).id != a.id          # a reboot, or another VM of one image
    assert _id(_root(tmp_path, "boot-1", "mid-2")).id != a.id          # another OS install
    one_gpu = _id(_root(tmp_path, "boot-1", "mid-1"), FakePynvml(1))
    assert one_gpu.id != a.id and one_gpu.parts == ["boot_id", "machine_id", "gpu_uuids×1"]
    assert _id(_root(tmp_path, "boot-1", "mid-1"), FakePynvml(2)).id != one_gpu.id   # another card set
    assert "boot-1" not in str(one_gpu.to_json()) and "GPU-" not in str(one_gpu.to_json())   # only the hash


def test_without_proc_files_or_nvml_the_host_name_is_all_there_is_and_the_parts_say_so(tmp_path):
    rec = _id(_root(tmp_path, None, None))
    assert rec.parts == ["host"] and len(rec.id) == 12


def test_the_override_variable_replaces_the_derived_id(tmp_path, monkeypatch):
    rec = _id(_root(tmp_path), env={machine.OVERRIDE_ENV: "vm-2"})
    assert rec.id == "vm-2" and rec.parts == ["override"]
    monkeypatch.setenv(machine.OVERRIDE_ENV, "box-b")
    assert machine.current().id == "box-b"
    monkeypatch.delenv(machine.OVERRIDE_ENV)
    assert machine.current().id != "box-b" and machine.current().id == machine.current().id


# ------------------------------------------------------------------------------- resume (faked)


def _interrupted_then_resumed(store: Store, monkeypatch, first: str, second: str, capsys) -> tuple[str, str]:
    builds = [FakeBuild("cpu-a", mode=None)]
    monkeypatch.setenv(machine.OVERRIDE_ENV, first)
    monkeypatch.setattr(sweep, "_measure_once", _fake_once([], stop_after=2))
    with pytest.raises(KeyboardInterrupt):
        sweep.run_sweep(_plan("0:2", launches=2, seed=1, sentinel_every=0), builds, store, progress=False)
    run = store.list_runs()[0].id
    capsys.readouterr()
    monkeypatch.setenv(machine.OVERRIDE_ENV, second)
    monkeypatch.setattr(sweep, "_measure_once", _fake_once([]))
    sweep.run_sweep(Plan.from_json(store.get_run(run).plan), builds, store, resume_run=run, progress=False)
    return run, capsys.readouterr().err


def test_a_resume_on_another_machine_warns_once_and_is_recorded(store, monkeypatch, capsys):
    run, err = _interrupted_then_resumed(store, monkeypatch, "vm-1", "vm-2", capsys)
    warn = [line for line in err.splitlines() if "warning:" in line]
    assert len(warn) == 1 and "on machine vm-2" in warn[0] and "vm-1" in warn[0] and "2 earlier launches" in warn[0]
    r = store.get_run(run)
    env = r.env
    assert env.machine_identity.id == "vm-1"
    (res,) = env.resumes
    assert res.machine.id == "vm-2" and res.earlier == {"vm-1": 2} and res.warning == warn[0].split("warning: ", 1)[1]
    assert r.summary.machines["launches"] == {"vm-1": {"host": res.machine.host, "launches": 2},
                                                 "vm-2": {"host": res.machine.host, "launches": 4}}
    mixed = r.summary.machines["mixed_points"]
    assert len(mixed) == 2 and all(m["machines"] == {"vm-1": 1, "vm-2": 1} for m in mixed)
    # the report: the summary counts launches per machine, the mixed points say so
    text = _report_text(store, run)
    assert "launches were measured on 2 machines" in text and "vm-1 (" in text and ": 4" in text
    assert text.count("launches from 2 machines") >= 2 * 2     # points table + replication table, 2 points
    print_run(store, run)                                       # the terminal's end-of-run table and notes
    assert "launches come from 2 machines (vm-2" in capsys.readouterr().err


def test_a_resume_on_the_same_machine_records_it_without_a_warning(store, monkeypatch, capsys):
    run, err = _interrupted_then_resumed(store, monkeypatch, "vm-1", "vm-1", capsys)
    assert "warning:" not in err
    (res,) = store.get_run(run).env.resumes
    assert res.warning is None and res.earlier == {"vm-1": 2}
    assert "launches from 2 machines" not in _report_text(store, run)


def _report_text(store: Store, run: str) -> str:
    d = rdata.load(store, run)
    out = []
    for sec in build_sections(d, []):
        out += sec.notes + [sec.intro or ""]
        out += [" | ".join(row) for t in sec.tables for row in t.rows]
    return "\n".join(out)


# ------------------------------------------------------------------------------------ old stores


def test_an_old_store_without_machines_loads_and_its_launches_are_unknown(tmp_path):
    db = tmp_path / "old.sqlite"
    shutil.copy(FIXTURE_V1, db)
    with Store(db) as s:
        for r in s.list_runs():
            pts = s.points(r.id)
            assert set(machine.launch_machines(lr for p in pts for lr in p.launches)) <= {"unknown"}
            assert r.env.resumes == []
            if r.kind == "sweep":
                assert "launches from" not in _report_text(s, r.id)
    assert LaunchRecord.from_json({"launch": 2, "seq": 7}).machine_id == "unknown"


# ------------------------------------------------------------------------------------ reproduce


def _pt(machines: list[str], tg: float = 100.0) -> Point:
    """One server start per machine named (start levels 1 % apart), three requests each."""
    p = Point(run_id="r", build_key="b", engine="server", ncmoe=4)
    p.samples = [Sample(i, False, tg_tps=tg * (1 + 0.01 * k) + i % 2, pp_tps=1000.0 * (1 + 0.01 * k) + i, launch=k + 1)
                 for k in range(len(machines)) for i in range(3)]
    p.detail.launches = [LaunchRecord(launch=k + 1, seq=k + 1, machine=MachineRecord(id=m, host="vm"))
                         for k, m in enumerate(machines)]
    return p


def test_the_reproduce_verdict_names_a_point_whose_launches_mix_machines():
    v = check_points([_pt(["vm-1", "vm-2", "vm-2"], 72.0)], [_pt(["vm-2", "vm-2", "vm-2"], 102.0)], {"b": "vulkan"})
    (pc,) = v.points
    assert pc.status == "differs" and pc.note == "first run: launches from 2 machines"
    assert "first run: launches from 2 machines" in v.line()
    same = check_points([_pt(["vm-1", "vm-1", "vm-1"])], [_pt(["vm-2", "vm-2", "vm-2"])], {"b": "vulkan"})
    assert same.points[0].note == ""
