"""Real llama.cpp RPC (issue 43, deliverable 3): the ``rpc`` build of the default pin (GGML_RPC=ON, with its
``ggml-rpc-server``), two local rpc-servers on CPU (127.0.0.1, started by ``bench --rpc local:2``) as a
two-device model, and a real ``-sm layer`` sweep over two ``-ts`` ratios: every point ok, the server command
names both endpoints and the point's ratio, and every RPC device's memory is recorded — and moves with the
split. An unreachable rpc-server and a ratio with more parts than devices are one line each, through the CLI.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest

from llamaforge.builds import Build
from llamaforge.store import Store

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def rpc_build(lf_paths, default_pin) -> Build:
    """The real rpc build of the default pin (built once, then cached; ≈ 2 min cold with a warm ccache)."""
    from conftest import _build  # tests/conftest.py: the session builds' builder, under the fixture lock

    return _build(lf_paths, default_pin, "rpc")


def _lf(env: dict, *args: str, ok: bool = True) -> subprocess.CompletedProcess:
    r = subprocess.run([sys.executable, "-m", "llamaforge", *args], env=env, capture_output=True, text=True,
                       timeout=600)
    assert (r.returncode == 0) == ok, (r.stdout + r.stderr)[-3000:]
    return r


def _bench(env: dict, model, *args: str, ok: bool = True) -> subprocess.CompletedProcess:
    return _lf(env, "bench", "--model", str(model), "--backends", "rpc", "--repeats", "1", "--launches", "1",
               "--prompt-tokens", "32", "--n-predict", "4", "--threads", "1", *args, ok=ok)


def test_the_rpc_build_has_its_server(rpc_build):
    assert rpc_build.manifest["flags"]["GGML_RPC"] == "ON"
    assert rpc_build.manifest["verification"]["ok"], rpc_build.manifest["verification"]["problems"]
    assert rpc_build.capabilities["rpc_server"] == "ggml-rpc-server"
    assert rpc_build.binary("ggml-rpc-server").exists()


def test_two_local_rpc_servers_split_a_model_by_layer_at_two_ratios(rpc_build, tiny_model, tmp_path):
    env = {**os.environ, "LLAMAFORGE_RESULTS": str(tmp_path), "COLUMNS": "250"}
    r = _bench(env, tiny_model, "--rpc", "local:2", "--split", "layer", "--tensor-split", "1:1,3:1", "--name", "rpc")
    assert "RPC is unauthenticated" in r.stderr and "tools/rpc/README.md" in r.stderr
    with Store(tmp_path / "llamaforge.sqlite") as store:
        run = store.get_run("rpc")
        eps = run.plan.rpc.endpoints
        assert run.plan.rpc.local == 2 and len(eps) == 2 and all(e.startswith("127.0.0.1:") for e in eps)
        assert run.plan.rpc.devices == [f"RPC0: {eps[0]}", f"RPC1: {eps[1]}"]
        pts = {p.label: p for p in store.points(run.id)}
        assert sorted(pts) == ["sm=layer ts=1:1", "sm=layer ts=3:1"]
        mem = {}
        for label, p in pts.items():
            assert p.status == "ok", (p.failure_class, p.failure_detail)
            cmd = p.command
            assert cmd[cmd.index("--rpc") + 1] == ",".join(eps) and cmd[cmd.index("-sm") + 1] == "layer"
            assert cmd[cmd.index("-ts") + 1] == label.rpartition("=")[2].replace(":", ",")
            devs = {d["name"]: d for d in p.detail.devices_mem}
            assert set(devs) == {"RPC0", "RPC1", "Host"}
            assert devs["RPC0"]["description"] == eps[0] and devs["RPC1"]["description"] == eps[1]
            assert all(devs[n]["model"] > 0 and devs[n]["self"] > 0 for n in ("RPC0", "RPC1"))
            mem[label] = (devs["RPC0"]["model"], devs["RPC1"]["model"])
        # 3:1 puts more of the model on RPC0 than 1:1 does, and less on RPC1
        assert mem["sm=layer ts=3:1"][0] > mem["sm=layer ts=1:1"][0], mem
        assert mem["sm=layer ts=3:1"][1] < mem["sm=layer ts=1:1"][1], mem
        run_id = run.id
    assert not [ln for ln in subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout.splitlines()
                if "ggml-rpc-server" in ln and any(e.rpartition(":")[2] in ln for e in eps)], "rpc-servers left running"
    _lf(env, "report", "--run", run_id, "--out", str(tmp_path / "rep"))
    md = (tmp_path / "rep" / "report.md").read_text(encoding="utf-8")
    section = md.split("## Devices", 1)[1].split("\n## ", 1)[0]
    for label in ("sm=layer ts=1:1", "sm=layer ts=3:1"):
        for i, e in enumerate(eps):
            assert any(label in ln and f"RPC{i} ({e})" in ln for ln in section.splitlines()), section


def test_an_unreachable_rpc_server_and_too_many_parts_are_one_line(rpc_build, tiny_model, tmp_path):
    env = {**os.environ, "LLAMAFORGE_RESULTS": str(tmp_path)}
    with socket.socket() as s:     # bound, never listening: nothing accepts connections there
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        r = _bench(env, tiny_model, "--rpc", f"127.0.0.1:{port}", ok=False)
    err = [ln for ln in r.stderr.strip().splitlines() if not ln.startswith("warning:")]
    assert len(err) == 1 and f"RPC server 127.0.0.1:{port} is unreachable (connection refused)" in err[0], r.stderr
    assert f"rpc-server -H 127.0.0.1 -p {port}" in err[0] and "Traceback" not in r.stderr
    r = _bench(env, tiny_model, "--rpc", "local:2", "--tensor-split", "1:1:1", ok=False)
    err = [ln for ln in r.stderr.strip().splitlines() if not ln.startswith("warning:")]
    assert len(err) == 1 and "--tensor-split 1:1:1 has 3 parts but the model can be split over 2 devices" in err[0], \
        r.stderr
