"""A sweep point that dies in the CPU repacking path on a build without a recorded quirk is started once more
with the no-repack quirk (bench.quirk_retry), against the fake binaries: ``FAKE_MODE=amx-crash`` logs AMX and
CPU_REPACK buffers and dies of SIGSEGV unless given ``--no-repack``; ``crash-always`` dies whatever it gets.
The real crash (a Vulkan build's CPU experts on an AMX CPU) is in tests/integration/test_quirk_real_crash.py."""

from __future__ import annotations

import json
from pathlib import Path

from fakes import FakeBuild, fake_binaries, fake_plan
from llamaforge.bench.plan import Plan, PointSpec
from llamaforge.bench.sweep import measure_point, run_sweep
from llamaforge.builds.manifest import MANIFEST, MANIFEST_VERSION
from llamaforge.llamacpp.options import probe_build


def _build(tmp_path: Path, mode: str) -> FakeBuild:
    d = fake_binaries(tmp_path / mode, model=True)
    b = FakeBuild(f"fake-{mode}", d, mode)
    b.manifest = {"options": probe_build(b), "manifest_version": MANIFEST_VERSION, "status": "ok", "binaries": {}}
    (d / MANIFEST).write_text(json.dumps(b.manifest))
    return b


def _plan(b: FakeBuild, **kw) -> Plan:
    return fake_plan(b, **kw)


def test_a_repack_crash_is_started_again_with_the_quirk_which_is_then_recorded_everywhere(tmp_path, store):
    b = _build(tmp_path, "amx-crash")
    plan = _plan(b)
    run = store.new_run("sweep", plan)
    p = measure_point(b, b.dir / "m.gguf", PointSpec(0), plan, store, run)
    assert p.status == "ok" and "--no-repack" in p.command, (p.failure_detail, p.log_tail)
    retry = p.extra["quirk_retry"]
    assert retry["quirk"] == "no-repack" and retry["helped"] and "SIGSEGV" in retry["first_start"]
    [q] = b.manifest["quirks"]
    assert q["name"] == "no-repack" and q["evidence"]["cause"] in ("AMX", "CPU_REPACK")
    assert q["evidence"]["signal"] == "SIGSEGV" and f"of run {run}" in q["evidence"]["seen_in"]
    assert [x["name"] for x in json.loads((b.dir / MANIFEST).read_text())["quirks"]] == ["no-repack"]   # on disk
    stored = store.get_run(run)
    assert stored.plan.runtime[b.key]["args"]["llama-server"] == ["--no-repack"]
    assert store.get_build(b.key)["quirks"][0]["name"] == "no-repack"
    # the next start carries it from the first try
    again = measure_point(b, b.dir / "m.gguf", PointSpec(0), plan, store, run, label="next")
    assert again.status == "ok" and "quirk_retry" not in again.extra and "--no-repack" in again.command


def test_a_whole_sweep_loses_no_point_to_the_crash(tmp_path, store):
    b = _build(tmp_path, "amx-crash")
    plan = _plan(b, points=[PointSpec(0), PointSpec(2)], launches=2)
    run = run_sweep(plan, [b], store, progress=False)
    pts = store.points(run)
    assert len(pts) == 2 and all(p.status == "ok" and len(p.launches) == 2 for p in pts)
    assert sum("quirk_retry" in (p.extra or {}) for p in pts) == 1      # the first start only


def test_a_retry_that_dies_too_keeps_the_first_failure_and_records_nothing(tmp_path, store):
    b = _build(tmp_path, "crash-always")
    plan = _plan(b)
    run = store.new_run("sweep", plan)
    p = measure_point(b, b.dir / "m.gguf", PointSpec(0), plan, store, run)
    assert p.status == "failed" and "SIGSEGV" in p.failure_detail and "--no-repack" not in p.command
    assert p.extra["quirk_retry"]["helped"] is False and "SIGSEGV" in p.extra["quirk_retry"]["retry"]
    assert not b.manifest.get("quirks") and "quirks" not in json.loads((b.dir / MANIFEST).read_text())
    assert plan.runtime[b.key]["quirks"] == []


def test_no_retry_with_quirks_off_or_for_a_crash_elsewhere(tmp_path, store):
    b = _build(tmp_path, "amx-crash")
    run = store.new_run("sweep", {})
    off = measure_point(b, b.dir / "m.gguf", PointSpec(0), _plan(b, quirks=False), store, run)
    assert off.status == "failed" and "quirk_retry" not in (off.extra or {}) and not b.manifest.get("quirks")
    other = _build(tmp_path, "crash-request")      # dies during /completion, no repack buffers in its log
    p = measure_point(other, other.dir / "m.gguf", PointSpec(0), _plan(other), store, run)
    assert p.status == "failed" and "quirk_retry" not in (p.extra or {}) and not other.manifest.get("quirks")
