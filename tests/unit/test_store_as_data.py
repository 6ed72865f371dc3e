"""A results store is data, never a program: crafted SQLite stores (as a fleet import or a committed
``results/`` folder could bring) must not make llamaforge run a binary the store names, pass llama.cpp an
option that writes or reads files, or write outside the results folder.

The stores are written with plain ``sqlite3`` (no llamaforge API in between), the commands run through
the real CLI, and a marker script stands where the store points: it must never run."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_bench_sweep import _plan, fake_build  # noqa: F401 - fixture

from llamaforge.bench.argcheck import ALLOWED, refused
from llamaforge.bench.plan import split_extra
from llamaforge.bench.stored import stored_plan
from llamaforge.bench.sweep import run_sweep
from llamaforge.errors import BenchError
from llamaforge.pathsafe import component, run_log_dir, under
from llamaforge.store import Run, Store

REPO = Path(__file__).resolve().parents[2]
FAKE = Path(__file__).with_name("bench_fake_server.py")
KEY = "cpu-0c1e570-5eed"


@pytest.fixture
def ws(tmp_path):
    w = tmp_path / "ws"
    w.mkdir()
    shutil.copy(REPO / "pins.toml", w / "pins.toml")
    (w / "results").mkdir()
    (w / "build").mkdir()
    (w / "m.gguf").write_bytes(b"GGUF not really")   # reproduce/resume only check that the model exists
    return w


def cli(ws: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    env = {**os.environ, "LLAMAFORGE_WORKSPACE": str(ws), "LLAMAFORGE_RESULTS": str(ws / "results"),
           "LLAMAFORGE_BUILD_ROOT": str(ws / "build"), "COLUMNS": "400"}
    env.pop("LLAMAFORGE_DEBUG", None)
    return subprocess.run([sys.executable, "-m", "llamaforge", *args], cwd=ws, env=env, capture_output=True,
                          text=True, timeout=timeout)


def one_error(r: subprocess.CompletedProcess) -> str:
    """The command failed with exactly one error line and no traceback; that line, whitespace joined."""
    assert r.returncode != 0, r.stdout + r.stderr
    assert "Traceback" not in r.stderr, r.stderr
    assert sum(1 for ln in r.stderr.splitlines() if ln.startswith("error:")) == 1, r.stderr
    return " ".join(r.stderr.split())


def planted(tmp_path: Path) -> tuple[Path, Path]:
    """A folder of 'llama.cpp binaries' that only record that they ran (the marker file)."""
    d, marker = tmp_path / "planted", tmp_path / "MARKER"
    d.mkdir()
    for name in ("llama-server", "llama-bench", "llama-fit-params"):
        exe = d / name
        exe.write_text(f"#!/bin/sh\necho \"$0 $*\" >> '{marker}'\nexit 1\n")
        exe.chmod(0o755)
    return d, marker


def craft_store(db: Path, run_id: str, *, plan: dict, builds: list[dict], ok_point: bool = True) -> None:
    """A store file as another machine (or an attacker) could hand over: rows written with sqlite3 only."""
    Store(db).close()   # the schema
    con = sqlite3.connect(db)
    now = time.time()
    con.execute("INSERT INTO runs (id, kind, name, status, created, updated, command, plan_json, env_json)"
                " VALUES (?,?,?,?,?,?,?,?,?)", (run_id, "sweep", None, "done", now, now, "llamaforge bench",
                                                json.dumps(plan), "{}"))
    for m in builds:
        con.execute("INSERT INTO builds VALUES (?,?,?,?,?)", (m["key"], m.get("backend"), m.get("pin"),
                                                              m.get("commit"), json.dumps(m)))
        con.execute("INSERT INTO run_builds VALUES (?,?)", (run_id, m["key"]))
    if ok_point:
        cur = con.execute("INSERT INTO points (run_id, build_key, engine, ncmoe, ngl, label, status, n_ctx)"
                          " VALUES (?,?,?,?,?,?,?,?)", (run_id, builds[0]["key"], "server", 0, -1, "", "ok", 4096))
        for i in range(3):
            con.execute("INSERT INTO samples (point_id, idx, warmup, prompt_n, prompt_ms, pp_tps, predicted_n,"
                        " predicted_ms, tg_tps) VALUES (?,?,?,?,?,?,?,?,?)",
                        (cur.lastrowid, i, 0, 200, 100.0, 2000.0 + i, 8, 80.0, 100.0 + i))
    con.commit()
    con.close()


def sweep_plan(ws: Path, key: str, **extra) -> dict:
    return {"model": {"ref": "m.gguf", "path": str(ws / "m.gguf"), "facts": {"n_layers": 4, "n_ctx_train": 8192}},
            "builds": [key], "backends": ["cpu"], "pins": ["default"], "points": [{"ncmoe": 0, "ngl": -1}],
            "engine": "server", "repeats": 1, "prompt_tokens_target": 64, "n_predict": 4, "launches": 1,
            "ctx": 4096, "timeouts": {"load_s": 20, "request_s": 20}, **extra}


# ---------------------------------------------------------------------------------------- builds


def test_reproduce_never_runs_the_external_folder_a_store_names(ws, tmp_path):
    d, marker = planted(tmp_path)
    key = "ext-cpu-deadbeef0-123456"
    craft_store(ws / "results" / "llamaforge.sqlite", "20261201-000000-beef", plan=sweep_plan(ws, key),
                builds=[{"key": key, "backend": "cpu", "commit": "deadbeef0", "pin": "external", "external": True,
                         "dir": str(d)}])
    err = one_error(cli(ws, "reproduce", "latest"))
    assert not marker.exists(), marker.read_text()
    assert f"build(s) {key} of run 20261201-000000-beef are gone from this machine's build root" in err
    assert "--bin-dir DIR" in err and str(d) in err           # what to do, and which folder it will not run


def test_reproduce_uses_the_build_root_not_the_folder_a_stored_manifest_names(ws, tmp_path):
    d, marker = planted(tmp_path)
    craft_store(ws / "results" / "llamaforge.sqlite", "20261201-000000-beef", plan=sweep_plan(ws, KEY),
                builds=[{"key": KEY, "backend": "cpu", "commit": "0c1e57098", "pin": "default", "dir": str(d)}])
    err = one_error(cli(ws, "reproduce", "latest"))
    assert not marker.exists()
    assert "`llamaforge build --backends cpu --pins 0c1e57098`" in err


def test_a_rebuild_hint_quotes_the_stored_text_it_repeats(ws, tmp_path):
    craft_store(ws / "results" / "llamaforge.sqlite", "20261201-000000-beef", plan=sweep_plan(ws, KEY),
                builds=[{"key": KEY, "backend": "cpu; touch x", "commit": "$(touch y)", "pin": "default"}])
    err = one_error(cli(ws, "reproduce", "latest"))
    assert "--backends 'cpu; touch x' --pins '$(touch y)'" in err


def _local_build(ws: Path, tmp_path: Path) -> Path:
    """A managed build in the workspace's build root whose llama-server records its arguments, then
    behaves as the fake server (so a sweep over it completes); returns the argument log."""
    d = ws / "build" / KEY
    (d / "out" / "bin").mkdir(parents=True)
    argv_log = tmp_path / "server-argv.log"
    exe = d / "out" / "bin" / "llama-server"
    exe.write_text(f"#!/bin/sh\necho \"$*\" >> '{argv_log}'\nexec '{sys.executable}' '{FAKE}' \"$@\"\n")
    exe.chmod(0o755)
    data = exe.read_bytes()
    opts = ["-m", "--model", "-np", "--no-mmproj", "--log-jsonl", "-ncmoe", "--n-cpu-moe", "-t", "-ngl", "-c"]
    manifest = {"manifest_version": 1, "status": "ok", "key": KEY, "backend": "cpu", "commit": "0c1e57098",
                "pin": "default", "smoke": "ok", "options": {"llama-server": opts, "llama-bench": None,
                                                             "llama-fit-params": None},
                "binaries": {"llama-server": {"path": "out/bin/llama-server", "size": len(data),
                                              "sha256": hashlib.sha256(data).hexdigest()}}}
    (d / "manifest.json").write_text(json.dumps(manifest))
    return argv_log


@pytest.mark.parametrize("where", ["plan", "point", "runtime"])
def test_resume_refuses_stored_arguments_that_write_files(ws, tmp_path, where):
    """`--log-file` (and the like) from a store never reach llama-server, wherever the plan keeps them."""
    argv_log = _local_build(ws, tmp_path)
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    bad = ["--log-file", str(victim)]
    extra: dict = {"extra_args": bad} if where == "plan" else {}
    plan = sweep_plan(ws, KEY, **extra)
    if where == "point":
        plan["points"] = [{"ncmoe": 0, "ngl": -1}, {"ncmoe": 1, "ngl": -1, "extra_args": bad}]
    if where == "runtime":
        plan["runtime"] = {KEY: {"args": {"llama-server": bad}}}
    plan["points"].append({"ncmoe": 2, "ngl": -1})   # a point left to measure
    craft_store(ws / "results" / "llamaforge.sqlite", "20261201-000000-beef", plan=plan,
                builds=[{"key": KEY, "backend": "cpu", "commit": "0c1e57098", "pin": "default"}])
    err = one_error(cli(ws, "bench", "--resume", "20261201-000000-beef", timeout=300))
    assert "'--log-file'" in err and "does not allow" in err and "a store is data" in err
    assert not argv_log.exists(), argv_log.read_text()       # no llama-server started at all
    assert victim.read_text() == "precious\n"


def test_resume_of_a_clean_stored_plan_measures_with_the_local_build(ws, tmp_path):
    """The same crafted store without the hostile argument resumes on the build root's binary."""
    argv_log = _local_build(ws, tmp_path)
    plan = sweep_plan(ws, KEY, extra_args=["-fa", "on"])
    plan["points"].append({"ncmoe": 2, "ngl": -1})
    craft_store(ws / "results" / "llamaforge.sqlite", "20261201-000000-beef", plan=plan,
                builds=[{"key": KEY, "backend": "cpu", "commit": "0c1e57098", "pin": "default",
                         "dir": str(tmp_path / "elsewhere")}])
    r = cli(ws, "bench", "--resume", "20261201-000000-beef", timeout=300)
    assert r.returncode == 0, r.stderr
    assert "-fa on" in argv_log.read_text() and "--n-cpu-moe 2" in argv_log.read_text()


def test_a_tampered_local_binary_is_refused_on_resume(ws, tmp_path):
    argv_log = _local_build(ws, tmp_path)
    exe = ws / "build" / KEY / "out" / "bin" / "llama-server"
    exe.write_bytes(exe.read_bytes()[:-1] + b"#")    # same size (the manifest's check passes), other bytes
    plan = sweep_plan(ws, KEY)
    plan["points"].append({"ncmoe": 2, "ngl": -1})
    craft_store(ws / "results" / "llamaforge.sqlite", "20261201-000000-beef", plan=plan,
                builds=[{"key": KEY, "backend": "cpu", "commit": "0c1e57098", "pin": "default"}])
    err = one_error(cli(ws, "bench", "--resume", "20261201-000000-beef"))
    assert "llama-server changed since it was built" in err
    assert not argv_log.exists()


def _run(plan: dict) -> Run:
    return Run("r1", "sweep", None, "done", 0.0, 0.0, None, plan, {}, None)


@pytest.mark.parametrize("plan", [
    {"extra_args": ["-m", "/etc/shadow"]},
    {"extra_args": ["--slot-save-path=/tmp/x"]},
    {"points": [{"ncmoe": 0, "extra_args": ["--host", "0.0.0.0"]}]},
    {"runtime": {"k": {"args": {"llama-bench": ["-o", "/tmp/x"]}}}},
    {"runtime": {"k": {"args": {"llama-server": ["--rpc", "10.0.0.1:50052"]}}}},
])
def test_stored_plan_refuses_what_extra_refuses(plan):
    base = {"model": {"path": "/m.gguf"}, "points": [{"ncmoe": 0}]}
    with pytest.raises(BenchError) as e:
        stored_plan(_run({**base, **plan}))
    assert "run r1" in e.value.message and "does not allow" in e.value.message


def test_a_malformed_stored_plan_is_one_line():
    with pytest.raises(BenchError, match="malformed stored plan"):
        stored_plan(_run({"points": [{"ncmoe": "x"}]}))


def test_extra_takes_tuning_options_and_refuses_files_urls_and_addresses():
    assert split_extra("-fa on -b 512 --no-mmap -ngl -1 --temp=0.5 -ot 'blk\\.1\\.=CPU'") == [
        "-fa", "on", "-b", "512", "--no-mmap", "-ngl", "-1", "--temp=0.5", "-ot", "blk\\.1\\.=CPU"]
    for bad in ("--log-file /x", "--log-file=/x", "-m x.gguf", "--model-url http://x", "-hf o/r", "--lora a",
                "--slot-save-path /x", "--host 0.0.0.0", "--port 1", "--rpc h:1", "--path /", "-o x",
                "--chat-template-file /x", "--grammar-file /x", "--mmproj /x", "-md /x", "--api-key-file /x"):
        with pytest.raises(BenchError, match="does not allow"):
            split_extra(bad)
    assert not {"-m", "--model", "--log-file", "--host", "--port", "--path", "-o", "-hf", "--rpc"} & ALLOWED
    assert refused(["-1", "-0.5", "on", "--temp", "--bogus", "--bogus=1"]) == ["--bogus"]


def test_bench_extra_is_checked_before_anything_is_resolved(ws):
    err = one_error(cli(ws, "bench", "--model", "/nonexistent.gguf", "--extra", "--log-file /tmp/x"))
    assert "--extra passes llama.cpp option(s) llamaforge does not allow: '--log-file'" in err


# ----------------------------------------------------------------------------------------- paths


@pytest.mark.parametrize("run_id", ["ABS", "../../escaped", "..", "a/../../../escaped", "x\ny"])
def test_report_of_a_crafted_run_id_writes_only_under_results(ws, tmp_path, run_id):
    run_id = str(tmp_path / "escaped") if run_id == "ABS" else run_id
    craft_store(ws / "results" / "llamaforge.sqlite", run_id, plan=sweep_plan(ws, KEY),
                builds=[{"key": KEY, "backend": "cpu", "commit": "0c1e57098", "pin": "default"}])
    r = cli(ws, "report", "latest", timeout=300)
    assert r.returncode == 0, r.stderr
    written = [p for p in tmp_path.rglob("report.md")]
    assert written and all(p.is_relative_to(ws / "results" / "reports") for p in written), written
    assert not (tmp_path / "escaped").exists() and not (ws / "escaped").exists()
    assert written[0].parent == under(ws / "results" / "reports", run_id)


def test_logs_of_a_crafted_run_id_stay_under_results_logs(fake_build, store, tmp_path):  # noqa: F811
    b = fake_build("good")
    crafted = "../../escaped-logs"
    store.db.execute("INSERT INTO runs (id, kind, status, created, updated, plan_json, env_json) VALUES"
                     " (?,?,?,?,?,?,?)", (crafted, "sweep", "running", 0, 0, json.dumps({"builds": [b.key]}), "{}"))
    run_sweep(_plan("0", repeats=1), [b], store, resume_run=crafted, progress=False)
    assert not (tmp_path / "escaped-logs").exists()
    logs = list((tmp_path / "results" / "logs").rglob("*.log"))
    assert logs and all(p.parent == run_log_dir(store.path, crafted) for p in logs)


def test_a_crafted_point_label_names_no_path():
    from llamaforge.bench.sweep import _log_path

    p = _log_path(Path("/r/logs/x"), type("B", (), {"key": "../../k"})(), type("S", (), {"ncmoe": 0, "ngl": -1})(),
                  "server", "../../../etc/passwd")
    assert p.parent == Path("/r/logs/x") and p.name.endswith(".log") and "/" not in p.name


@pytest.mark.parametrize("text", ["", ".", "..", "/abs", "../x", "a/b", "x" * 400, "\udcff", "-x", ".hidden",
                                  "a\x00b", "\x1b]52;c;aGk=\x07"])
def test_component_is_one_safe_path_part(text):
    c = component(text)
    assert c and c not in (".", "..") and "/" not in c and "\x00" not in c and not c.startswith(".")
    assert len(c) <= 120 and c.isascii()
    assert (Path("/root") / c).parent == Path("/root")


def test_component_keeps_ordinary_ids_and_keeps_different_ids_apart():
    for ok in ("20261201-101500-ab12", "cpu-0c1e570-1a2b", "20261201-101500-ab12.h200"):
        assert component(ok) == ok
    assert component("a/b") != component("a_b") and component("a b") != component("a_b")



# ----------------------------------------------------------------------------------------- fleet


@pytest.mark.parametrize(("args", "backends", "match"), [
    (["--model=m.gguf", "--bin-dir=/tmp/planted"], "cpu", "fleet.bench never passes"),
    (["--model=m.gguf", "--extra=--log-file /tmp/x"], "cpu", "does not allow: '--log-file'"),
    (["--model=m.gguf"], "cpu,--upload-pack=x", "unknown backend"),
    ("--model=m.gguf", "cpu", "no stored host options"),
    # values through the bench options table
    (["--model=m.gguf", "--repeats=abc", "--allow-busy"], "cpu", "--repeats 'abc' is not a whole number"),
    (["--model=m.gguf", "--seed=-1"], "cpu", "--seed -1 is out of range"),
    (["--model=m.gguf", "--launches=0"], "cpu", "--launches 0 is out of range"),
])
def test_a_resumed_fleet_run_checks_its_stored_host_command_lines(store, tmp_path, args, backends, match):
    from test_fleet import _fake_fleet

    from llamaforge.errors import LlamaforgeError
    from llamaforge.fleet.run import bench_all

    fleet, paths = _fake_fleet(tmp_path)
    plan = {"fleet": {"hosts": {"a": {"machine": "box-a"}}}, "bench_args": args, "host_backends": {"a": backends}}
    run_id = store.new_run("fleet", plan, env={})
    with pytest.raises(LlamaforgeError, match=match):
        bench_all(store, paths, fleet, [], resume=run_id)   # no host is reached: the fake hosts do not exist


def test_fleet_bench_checks_extra_before_reaching_any_host(ws):
    err = one_error(cli(ws, "fleet.bench", "--model", "m.gguf", "--extra", "--slot-save-path /tmp"))
    assert "does not allow: '--slot-save-path'" in err


def _external_bin(tmp_path: Path, name: str) -> Path:
    """A folder of 'external binaries' the user names: a llama-server that answers --version and otherwise
    behaves as the fake server."""
    d = tmp_path / name
    d.mkdir()
    exe = d / "llama-server"
    exe.write_text(f"#!/bin/sh\n[ \"$1\" = --version ] && echo 'version: 4242 (0c1e570)' && exit 0\n"
                   f"exec '{sys.executable}' '{FAKE}' \"$@\"\n")
    exe.chmod(0o755)
    return d


def test_reproduce_of_an_external_build_runs_only_the_folder_the_user_names(ws, tmp_path):
    from llamaforge.bench.external import external_build

    mine, other = _external_bin(tmp_path, "mine"), _external_bin(tmp_path, "other")
    key = external_build(mine, "cpu").key
    craft_store(ws / "results" / "llamaforge.sqlite", "20261201-000000-beef", plan=sweep_plan(ws, key),
                builds=[{"key": key, "backend": "cpu", "commit": "0c1e570", "pin": "external", "external": True,
                         "dir": str(mine)}])
    err = one_error(cli(ws, "reproduce", "latest", "--bin-dir", str(other)))
    assert f"holds build {external_build(other, 'cpu').key}, but run 20261201-000000-beef measured {key}" in err
    r = cli(ws, "reproduce", "latest", "--bin-dir", str(mine), "--launches", "1", timeout=300)
    assert r.returncode == 0, r.stderr
    with Store(ws / "results" / "llamaforge.sqlite") as s:
        child = [x for x in s.list_runs() if x.parent_run == "20261201-000000-beef"]
        assert len(child) == 1 and s.points(child[0].id)[0].build_key == key

