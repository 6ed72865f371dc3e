"""Fleet: fleet.toml is strict (one clear line per mistake), remote command lines are quoted, host
failures are recorded while the others finish, imports are de-duplicated, and a fleet report has a
series per machine × backend. (Real SSH: tests/integration/test_fleet_real.py.)"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from llamaforge.bench.export import export_run
from llamaforge.errors import ConfigError, FleetError, LlamaforgeError
from llamaforge.findings.runs import fleet_children
from llamaforge.fleet import run as fleet_run
from llamaforge.fleet.config import Target, parse_fleet
from llamaforge.fleet.jobs import LineSink, for_each_host
from llamaforge.fleet.merge import import_run, parse_export
from llamaforge.fleet.remote import command_line
from llamaforge.paths import Paths
from llamaforge.store import Point, Sample, Store

GOOD = """
[hosts.desk]
target = "alice@desk.lan:2222"
workspace = "~/lf"
machine = "rtx3090"
backends = ["cuda", "vulkan"]
gateway = "me@bastion"
[hosts.desk.env]
LLAMAFORGE_LOCK_DIR = "/data/locks"

[hosts.cloud]
target = "h200-box"
"""


def test_fleet_toml_gives_typed_hosts_in_file_order():
    f = parse_fleet(GOOD)
    desk, cloud = f.select(None)
    assert (desk.name, desk.machine, desk.workspace, desk.backends) == ("desk", "rtx3090", "lf", ("cuda", "vulkan"))
    assert desk.target == Target("desk.lan", "alice", 2222) and desk.gateway == Target("bastion", "me")
    assert desk.env == {"LLAMAFORGE_LOCK_DIR": "/data/locks"}
    assert (cloud.target, cloud.machine, cloud.workspace, cloud.python) == (Target("h200-box"), "cloud", "llamaforge",
                                                                          "python3")
    assert [h.name for h in f.select(["cloud"])] == ["cloud"]


def test_unknown_host_name_is_one_line_listing_the_hosts():
    with pytest.raises(ConfigError) as e:
        parse_fleet(GOOD).select(["desk", "nope"])
    assert "unknown host 'nope'" in e.value.message and "desk, cloud" in e.value.fix and "\n" not in str(e.value)


@pytest.mark.parametrize("target", ["-oProxyCommand=touch /tmp/x", "a b", "host;rm -rf /", "$(id)@h", "u@h:99999",
                                    "u@h:0", "h:22:33", "", "`id`"])
def test_hostile_or_bad_targets_are_refused(target):
    with pytest.raises(ConfigError) as e:
        parse_fleet(f'[hosts.x]\ntarget = {json.dumps(target)}\n')
    assert "target" in e.value.message and e.value.fix


@pytest.mark.parametrize(("body", "needle"), [
    ('[hosts."a b"]\ntarget = "h"', "host name"),
    ('[hosts.x]\ntarget = "h"\nmachine = "../etc"', "machine"),
    ('[hosts.x]\ntarget = "h"\nworkspace = "-rf"', "workspace"),
    ('[hosts.x]\ntarget = "h"\nworkspace = "~bob/x"', "another user"),
    ('[hosts.x]\ntarget = "h"\npython = "python3 -c evil"', "python"),
    ('[hosts.x]\ntarget = "h"\nbackends = ["cuda", "opencl"]', "unknown backend"),
    ('[hosts.x]\ntarget = "h"\ntargte = "typo"', "unknown key 'targte'"),
    ('[hosts.x]\ntarget = "h"\n[hosts.x.env]\n"A;B" = "1"', "environment variable name"),
    ('[hosts.x]\ntarget = "h"\n[hosts.y]\ntarget = "h2"\nmachine = "x"', "same machine name"),
    ('[hosts.x]\nworkspace = "w"', "no target"),
    ('[hosts.x]\ntarget = "h"\nthreads = 0', "threads must be a whole number"),
    ('[hosts.x]\ntarget = "h"\nthreads = "8"', "threads must be a whole number"),
    ('[hosts.x]\ntarget = "h"\nthreads = true', "threads must be a whole number"),
    ("hosts = 3", "defines no hosts"),
    ("[hosts.x", "not valid TOML"),
])
def test_bad_fleet_files_say_what_and_how_to_fix(body, needle):
    with pytest.raises(ConfigError) as e:
        parse_fleet(body)
    assert needle in e.value.message and e.value.fix


def test_command_line_quotes_every_operand_so_a_shell_runs_exactly_the_argv(tmp_path):
    hostile = ["$(touch pwned)", "; touch pwned2", "a b", "'quote'", "--model=-x", "*", "\\"]
    d = tmp_path / "dir with $(space)"
    d.mkdir()
    line = command_line(["printf", "%s\\n", *hostile], cwd=str(d), env={"LF_X": "v; touch pwned3"})
    assert line.startswith("cd -- ") and "exec env -- " in line
    out = subprocess.run(["sh", "-c", line], capture_output=True, text=True, check=True, cwd=tmp_path)
    assert out.stdout.splitlines() == hostile
    assert not list(tmp_path.rglob("pwned*"))
    env_line = command_line(["sh", "-c", 'printf %s "$LF_X"'], env={"LF_X": "v; touch pwned3"})
    assert subprocess.run(["sh", "-c", env_line], capture_output=True, text=True, cwd=tmp_path).stdout == "v; touch pwned3"


def test_bench_options_become_glued_flags():
    args = fleet_run.option_args({"model": "-weird.gguf", "ncmoe": "0:8:4", "allow_busy": True, "seed": None,
                                  "no_quirks": False, "define": ["A=1", "B=2"]})
    assert args == ["--model=-weird.gguf", "--ncmoe=0:8:4", "--allow-busy", "--define=A=1", "--define=B=2"]


def test_line_sink_splits_carriage_returns_and_strips_colour():
    seen = []

    class P:
        def update(self, host, line):
            seen.append((host, line))

    s = LineSink(P(), "h")  # type: ignore[arg-type]
    s.write("\x1b[32mok\x1b[0m\r\npart")
    s.write("ial\rnext\n\n")
    s.close()
    assert seen == [("h", "ok"), ("h", "partial"), ("h", "next")]


def test_a_failing_host_is_recorded_while_the_others_finish():
    f = parse_fleet('[hosts.a]\ntarget = "a"\n[hosts.b]\ntarget = "b"\n[hosts.c]\ntarget = "c"\n')

    def job(h, sink):
        sink.line(f"working on {h.name}")
        if h.name == "a":
            raise FleetError("host a is unreachable (refused)", "start sshd")
        if h.name == "b":
            raise RuntimeError("surprise")
        return h.name.upper()

    outs = {o.host: o for o in for_each_host(f.select(None), job)}
    assert outs["c"].ok and outs["c"].value == "C"
    assert not outs["a"].ok and outs["a"].error == "host a is unreachable (refused)" and outs["a"].fix == "start sshd"
    assert not outs["b"].ok and "RuntimeError: surprise" in outs["b"].error and outs["b"].tail == ["working on b"]


# ---- merge / fleet run ---------------------------------------------------------------------------
def _remote_run(store: Store, machine: str, tg: float, ncmoe: tuple[int, ...] = (0, 4)) -> str:
    plan = {"model": {"ref": "synth:tiny", "path": "/m/tiny.gguf", "facts": {"arch": "qwen35moe", "n_layers": 8}},
            "backends": ["cpu"]}
    run = store.new_run("sweep", plan, env={"machine": machine, "cpu_model": f"{machine} CPU"}, name="fleet-x")
    store.add_build({"key": "0c1e57098-cpu-k", "backend": "cpu", "pin": "default", "commit": "0c1e57098"}, run)
    for n in ncmoe:
        p = Point(run, "0c1e57098-cpu-k", "server", ncmoe=n, n_ctx=4096, prompt_tokens=64, n_predict=8)
        p.samples = [Sample(0, True, pp_tps=1.0, tg_tps=1.0)] + [Sample(i, False, pp_tps=100.0 + i, tg_tps=tg + i)
                                                                 for i in (1, 2, 3)]
        store.record_point(p)
    store.set_run_status(run, "done")
    return run


def test_import_is_machine_tagged_and_deduplicated(tmp_path):
    with Store(tmp_path / "remote.sqlite") as remote, Store(tmp_path / "local.sqlite") as local:
        rid = _remote_run(remote, "m1", 10.0)
        doc = parse_export(export_run(remote, rid, "json"))
        a = import_run(local, doc, machine="m1", host="h1", fleet_run="F")
        b = import_run(local, doc, machine="m1", host="h1", fleet_run="F")
        assert a == b == f"{rid}.m1"
        run = local.get_run(a)
        assert run.env.machine == "m1" and run.plan.fleet.to_json() == {"run": "F", "host": "h1", "machine": "m1",
                                                                         "remote_run": rid}
        pts = local.points(a)
        assert len(pts) == 2 and all(len(p.samples) == 4 for p in pts)
        assert [s.tg_tps for s in pts[0].samples if not s.warmup] == [11.0, 12.0, 13.0]
        assert local.db.execute("SELECT COUNT(*) FROM samples").fetchone()[0] == 8


def test_malformed_export_is_one_line():
    for text in ("not json", "[]", '{"run": {}, "points": []}'):
        with pytest.raises(FleetError) as e:
            parse_export(text)
        assert "malformed" in e.value.message and e.value.fix


def _pulled_back(remote: Store, rid: str, out: Path) -> dict:
    """What a fake host's bench job returns: its run exported to ``out``, as a real pull-back leaves it."""
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(export_run(remote, rid, "json"))
    return {"export": str(out), "sha256": "x", "remote_run": rid, "bench_error": None, "remote_status": "done"}


def _fake_fleet(tmp_path: Path):
    f = parse_fleet('[hosts.a]\ntarget = "a"\nmachine = "box-a"\n[hosts.b]\ntarget = "b"\nmachine = "box-b"\n')
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "pins.toml").write_text("")
    return f, Paths(ws)


def test_fleet_bench_records_failures_and_resume_redoes_only_missing_hosts(tmp_path, monkeypatch):
    f, paths = _fake_fleet(tmp_path)
    remote_dbs = {"a": tmp_path / "ra.sqlite", "b": tmp_path / "rb.sqlite"}
    calls: list[str] = []
    broken = {"b"}

    def fake_job(fleet_id, plan, pins_file, local_dir, detach):
        def job(h, sink):
            calls.append(h.name)
            if h.name in broken:
                raise FleetError(f"host {h.name} ({h.target}) is unreachable (refused)", "start sshd")
            with Store(remote_dbs[h.name]) as rs:
                rid = _remote_run(rs, h.machine, 10.0 if h.name == "a" else 20.0)
                return _pulled_back(rs, rid, local_dir / f"{h.name}.json")
        return job

    monkeypatch.setattr(fleet_run, "_bench_job", fake_job)
    with Store(paths.store_db) as store:
        fid = fleet_run.bench_all(store, paths, f, f.select(None), options={"model": "synth:tiny"})
        run = store.get_run(fid)
        hosts = run.summary.hosts
        assert run.kind == "fleet" and run.status == "partial"
        assert hosts["a"]["status"] == "ok" and hosts["a"]["run"].endswith(".box-a")
        assert hosts["b"]["status"] == "failed" and "unreachable" in hosts["b"]["error"]
        assert run.plan.bench_args == ["--model=synth:tiny"] and run.plan.host_backends == {"a": "cpu", "b": "cpu"}
        broken.clear()
        calls.clear()
        assert fleet_run.bench_all(store, paths, f, [], resume=fid) == fid
        assert calls == ["b"]                       # a was done: not touched again
        run = store.get_run(fid)
        assert run.status == "done" and {h["status"] for h in run.summary.hosts.values()} == {"ok"}
        assert fleet_children(store, fid) == [("box-a", hosts["a"]["run"]),
                                              ("box-b", run.summary.hosts["b"]["run"])]

        from llamaforge.report.data import load

        data = load(store, fid)
        assert [s.name for s in data.series] == ["box-a · CPU", "box-b · CPU"]
        assert [r.ncmoe for r in data.series[1].rows] == [0, 4]
        assert data.series[1].rows[0].tg == [21.0, 22.0, 23.0]
        assert set(data.machine_envs) == {"box-a", "box-b"} and data.model_ref == "synth:tiny"


def test_resume_of_a_non_fleet_run_or_changed_machine_is_one_line(tmp_path):
    f, paths = _fake_fleet(tmp_path)
    with Store(paths.store_db) as store:
        rid = _remote_run(store, "m", 1.0)
        with pytest.raises(FleetError, match="not a fleet run"):
            fleet_run.bench_all(store, paths, f, [], resume=rid)
        fid = store.new_run("fleet", {"fleet": {"hosts": {"a": {"machine": "old-name"}}}})
        with pytest.raises(LlamaforgeError, match="machine 'box-a' in fleet.toml but 'old-name'"):
            fleet_run.bench_all(store, paths, f, [], resume=fid)


def test_connection_failures_are_one_line_each_with_a_fix():
    import socket

    import paramiko

    from llamaforge.fleet.remote import unreachable

    h = parse_fleet('[hosts.gpu]\ntarget = "me@gpu.lan:2222"\n').hosts["gpu"]
    refused = unreachable(h, paramiko.ssh_exception.NoValidConnectionsError({("10.0.0.1", 2222): OSError(111, "x")}))
    login = unreachable(h, paramiko.AuthenticationException("Authentication failed."))
    dns = unreachable(h, socket.gaierror(-2, "Name or service not known"))
    assert refused.message.startswith("host gpu (me@gpu.lan:2222) is unreachable") and "sshd" in refused.fix
    assert "SSH login refused" in login.message and "identity" in login.fix
    assert "unknown host name" in dns.message and "fleet.toml" in dns.fix
    assert all("\n" not in str(e) for e in (refused, login, dns))


def test_fleet_commands_refuse_bad_input_before_contacting_any_host(tmp_path, monkeypatch, capsys):
    from llamaforge.cli import program

    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "pins.toml").write_text((Path(__file__).resolve().parents[2] / "pins.toml").read_text())
    (ws / "fleet.toml").write_text('[hosts.a]\ntarget = "nohost.invalid"\n')
    monkeypatch.setenv("LLAMAFORGE_WORKSPACE", str(ws))
    for argv, needle in ((["fleet.bench", "--model", "m", "--backends", "cuda,opengl"], "opengl"),
                         (["fleet.bench", "--model", "m", "--hosts", "b"], "unknown host 'b'"),
                         (["fleet.bench", "--model", "m", "--repeats", "0"], "--repeats"),
                         (["fleet.bench"], "no model given"),
                         (["fleet.doctor", "--fleet", str(tmp_path / "none.toml")], "no fleet file")):
        with pytest.raises(SystemExit) as e:
            program.run(["llamaforge", *argv], exit=True)
        err = capsys.readouterr().err
        assert e.value.code == 2 and needle in err and len(err.strip().splitlines()) == 1, (argv, err)


def test_host_key_policy_is_strict_by_default_and_checked():
    h = parse_fleet('[hosts.gpu]\ntarget = "gpu"\n').hosts["gpu"]
    assert h.host_key == "strict" and h.known_hosts == str(Path("~/.ssh/known_hosts").expanduser())
    h = parse_fleet('[hosts.gpu]\ntarget = "gpu"\nhost_key = "accept-new"\nknown_hosts = "/tmp/kh"\n').hosts["gpu"]
    assert (h.host_key, h.known_hosts) == ("accept-new", "/tmp/kh")
    with pytest.raises(ConfigError) as e:
        parse_fleet('[hosts.gpu]\ntarget = "gpu"\nhost_key = "no"\n')
    assert "host_key 'no'" in e.value.message and "accept-new" in e.value.fix


def test_unknown_and_changed_host_keys_are_one_line_with_the_fix(tmp_path):
    import paramiko

    from llamaforge.fleet.remote import UnknownHostKey, _policy, fingerprint, unreachable

    kh = tmp_path / "ssh" / "known_hosts"
    h = parse_fleet(f'[hosts.gpu]\ntarget = "me@gpu.lan:2222"\nknown_hosts = "{kh}"\n').hosts["gpu"]
    key = paramiko.RSAKey.generate(1024)
    other = paramiko.RSAKey.generate(1024)
    unknown = unreachable(h, UnknownHostKey("[gpu.lan]:2222", key))
    assert f"SSH host key of [gpu.lan]:2222 is not in {kh}" in unknown.message and fingerprint(key) in unknown.message
    assert f"ssh-keyscan -p 2222 gpu.lan >> {kh}" in unknown.fix and "accept-new" in unknown.fix
    changed = unreachable(h, paramiko.BadHostKeyException("[gpu.lan]:2222", key, other))
    assert "CHANGED" in changed.message and fingerprint(other) in changed.message and "ssh-keygen -R" in changed.fix
    assert all("\n" not in str(e) for e in (unknown, changed))

    with pytest.raises(UnknownHostKey):   # strict: the policy refuses, nothing is written
        _policy("strict", str(kh)).missing_host_key(paramiko.SSHClient(), "[gpu.lan]:2222", key)
    assert not kh.exists()
    client = paramiko.SSHClient()
    _policy("accept-new", str(kh)).missing_host_key(client, "[gpu.lan]:2222", key)
    stored = paramiko.HostKeys(str(kh))   # appended in OpenSSH's format; the next connection reads it
    assert stored.lookup("[gpu.lan]:2222")["ssh-rsa"] == key and client.get_host_keys().lookup("[gpu.lan]:2222")


def test_compare_across_two_hosts_uses_launches_as_clusters_and_says_it_is_not_interleaved(tmp_path, monkeypatch):
    from llamaforge.bench.plan import make_points
    from llamaforge.compare.judged import worse_rows
    from llamaforge.compare.session import CompareRequest, Side
    from llamaforge.findings.comparison import verdict_word
    from llamaforge.fleet.cross_host import CROSS_MACHINE, run_host_compare

    f, paths = _fake_fleet(tmp_path)
    speed = {"a": 10.0, "b": 20.0}   # host b generates twice as fast; prompt processing is the same

    def fake_job(fleet_id, plan, pins_file, local_dir, detach):
        def job(h, sink):
            with Store(tmp_path / f"r{h.name}.sqlite") as rs:
                rid = rs.new_run("sweep", {"model": {"ref": "synth:tiny"}})
                p = Point(rid, f"0c1e57098-cpu-{h.name}", "server", ncmoe=0, n_ctx=4096)
                p.samples = [Sample(i, False, pp_tps=100.0 + i % 3, tg_tps=speed[h.name] + i % 3, launch=i // 2)
                             for i in range(8)]   # 4 launches × 2 requests
                rs.record_point(p)
                rs.set_run_status(rid, "done")
                return _pulled_back(rs, rid, local_dir / f"{h.name}.json")
        return job

    monkeypatch.setattr(fleet_run, "_bench_job", fake_job)
    req = CompareRequest(base=Side("A", "default", "cpu"), head=Side("B", "default", "cpu"), model="synth:tiny",
                         points=make_points("0"), repeats=2, rounds=4)   # 2 requests per start, 4 starts
    with Store(paths.store_db) as store:
        cid = run_host_compare(store, paths, f, req, "0", base_host="a", head_host="b")
        run = store.get_run(cid)
        c = run.plan.compare.to_json()
        assert run.kind == "compare" and c["interleave"] == CROSS_MACHINE and "not interleaved" in CROSS_MACHINE
        assert (c["A"]["machine"], c["B"]["machine"]) == ("box-a", "box-b") and c["A"]["run"].endswith(".box-a")
        fleet = store.get_run(c["fleet_run"])
        assert fleet.plan.bench_args == ["--model=synth:tiny", "--pins=default", "--ncmoe=0", "--repeats=2",
                                            "--launches=4", "--engine=server", "--prompt-tokens=2500",
                                            "--n-predict=128"]   # the options table's defaults, given
        rows = {r["metric"]: r for r in run.summary.comparisons}
        tg, pp = rows["tg"]["comparison"], rows["pp"]["comparison"]
        assert (rows["tg"]["A"]["k"], rows["tg"]["A"]["n_requests"], rows["tg"]["A"]["shape"]) == (4, 8, "4×2")
        assert tg["a"]["k"] == 4 and tg["b"]["k"] == 4        # the judge's replicates: the launches, not the requests
        assert verdict_word(tg) == "better" and tg["ratio"] > 1.5 and pp["verdict"] == "same"
        assert not store.points(cid)   # the points stay in the two imported runs

        assert worse_rows(run) == []   # compare --fail-on-worse: B faster is not a failure; B slower is
        swapped = store.get_run(run_host_compare(store, paths, f, req, "0", base_host="b", head_host="a"))
        assert [w.split(" (")[0] for w in worse_rows(swapped)] == ["tg at ncmoe 0"]

        from llamaforge.report.kinds.compare import lead

        md = lead(store, run)
        assert "box-a" in md and "box-b" in md and "not interleaved across machines" in md
        from llamaforge.report import write_report

        rp = write_report(store, cid, tmp_path / "report")
        full = rp.md.read_text()
        assert "| box-a · " in full and "| box-b · " in full, full   # the per-machine series follow the lead
        assert "not interleaved across machines" in full, full
        with pytest.raises(FleetError, match="both 'a'"):
            run_host_compare(store, paths, f, req, "0", base_host="a", head_host="a")
        other = CompareRequest(base=Side("A", "default", "cpu"), head=Side("B", "b1234", "cpu"), model="m",
                               points=make_points("0"))
        with pytest.raises(FleetError, match="both sides are one build"):
            run_host_compare(store, paths, f, other, "0", base_host="a", head_host="b")


@pytest.mark.parametrize("name", ["GIT_CONFIG_COUNT", "GIT_CONFIG_KEY_0", "GIT_CONFIG_VALUE_0", "LD_PRELOAD",
                                  "LD_LIBRARY_PATH", "PATH", "PYTHONPATH", "PYTHONSTARTUP", "BASH_ENV",
                                  "VK_ICD_FILENAMES", "GIT_SSH_COMMAND", "ld_preload", "HOME"])
def test_env_that_could_run_code_on_the_host_is_refused_by_name(name):
    """``GIT_CONFIG_COUNT=1 GIT_CONFIG_KEY_0=core.fsmonitor GIT_CONFIG_VALUE_0=CMD`` ran CMD at the builder's
    first ``git status``; only the allow-list (llamaforge's settings, GPU selection, proxies) may be set."""
    body = f'[hosts.x]\ntarget = "h"\n[hosts.x.env]\n{name} = "1"\n'
    with pytest.raises(ConfigError) as e:
        parse_fleet(body)
    assert f"env: {name} is not an allowed variable" in e.value.message and "CUDA_VISIBLE_DEVICES" in e.value.fix
    assert "\n" not in str(e.value)


def test_the_fsmonitor_attack_is_refused_as_a_whole():
    body = ('[hosts.x]\ntarget = "h"\n[hosts.x.env]\nGIT_CONFIG_COUNT = "1"\nGIT_CONFIG_KEY_0 = "core.fsmonitor"\n'
            'GIT_CONFIG_VALUE_0 = "touch /tmp/pwned"\n')
    with pytest.raises(ConfigError, match="GIT_CONFIG_COUNT is not an allowed variable"):
        parse_fleet(body)


@pytest.mark.parametrize(("name", "fix"), [("LLAMAFORGE_WORKSPACE", 'workspace = "..."'),
                                           ("LLAMAFORGE_MACHINE", 'machine = "..."'),
                                           ("LLAMAFORGE_FLEET_LOG", "remove LLAMAFORGE_FLEET_LOG")])
def test_env_the_fleet_sets_itself_points_at_the_host_table(name, fix):
    with pytest.raises(ConfigError) as e:
        parse_fleet(f'[hosts.x]\ntarget = "h"\n[hosts.x.env]\n{name} = "v"\n')
    assert "set by llamaforge itself" in e.value.message and fix in e.value.fix


def test_allowed_env_passes_through():
    names = ["LLAMAFORGE_CACHE", "LLAMAFORGE_LOCK_DIR", "CUDA_VISIBLE_DEVICES", "GGML_VK_VISIBLE_DEVICES",
             "HIP_VISIBLE_DEVICES", "HTTPS_PROXY", "no_proxy"]
    body = '[hosts.x]\ntarget = "h"\n[hosts.x.env]\n' + "".join(f'{n} = "v{i}"\n' for i, n in enumerate(names))
    assert parse_fleet(body).hosts["x"].env == {n: f"v{i}" for i, n in enumerate(names)}


def test_every_llamaforge_variable_the_code_reads_is_classified():
    """A new LLAMAFORGE_* setting must be put on the allow-list (or in the fleet-set ones) deliberately."""
    import re

    from llamaforge.fleet import config as fleet_config

    src = Path(fleet_config.__file__).resolve().parents[1]
    used = {m for f in src.rglob("*.py") for m in re.findall(r"LLAMAFORGE_[A-Z0-9_]+", f.read_text())}
    known = set(fleet_config.ENV_ALLOWED) | set(fleet_config._ENV_FROM_TABLE) | set(fleet_config.ENV_HOST_ONLY)
    assert used - known == set(), "classify these in fleet/config.py (ENV_ALLOWED, ENV_HOST_ONLY or _ENV_FROM_TABLE)"


def test_a_fleet_file_that_is_not_utf8_is_one_line(tmp_path):
    from llamaforge.fleet.config import load_fleet

    f = tmp_path / "fleet.toml"
    f.write_bytes(b'[hosts.x]\ntarget = "h\xff"\n')
    with pytest.raises(ConfigError) as e:
        load_fleet(f)
    assert str(f) in e.value.message and "byte 0xff on line 2" in e.value.message and "UTF-8" in e.value.fix
