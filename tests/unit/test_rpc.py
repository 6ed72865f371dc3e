"""llama.cpp RPC and multi-device splits (issue 43, deliverable 3): ``--rpc`` / ``--split`` / ``--tensor-split``
parsed in one line each, the points and their series labels, llama-server's arguments, an unreachable endpoint,
a ratio with more parts than devices, an infeasible ``-sm row``, per-device memory and the rpc build's check."""

from __future__ import annotations

import socket
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from llamaforge.backends.rpc import RPC
from llamaforge.bench.cli_options import bench_options
from llamaforge.bench.multidev import device_args, rpc_section, split_points
from llamaforge.bench.sweep import point_label
from llamaforge.errors import BenchError, ConfigError
from llamaforge.llamacpp import rpc
from llamaforge.records import PointSpec, RunPlan


def test_rpc_endpoints_and_local_servers_parse():
    assert rpc.parse_rpc("10.0.0.9:50052,local:2") == rpc.RpcSpec(("10.0.0.9:50052",), 2)
    assert rpc.parse_rpc("gpu-box.lan:50052").count == 1
    for bad, says in (("nohost", "bad --rpc endpoint 'nohost'"), ("h:0", "bad --rpc endpoint"),
                      ("a:1,a:1", "names a:1 twice"), ("local:0", "start 1 to 8"), ("local:99", "start 1 to 8"),
                      ("", "empty --rpc")):
        with pytest.raises(ConfigError, match=says):
            rpc.parse_rpc(bad)


def test_split_modes_and_ratios_parse():
    assert rpc.parse_split_modes("layer,row") == ["layer", "row"]
    assert rpc.parse_tensor_split("3:1,1:1") == ["3:1", "1:1"]
    assert rpc.ts_arg("3:1") == "3,1"
    for fn, bad, says in ((rpc.parse_split_modes, "layers", "bad --split value 'layers'"),
                          (rpc.parse_tensor_split, "3,1", "a ratio needs a part per device"), (rpc.parse_tensor_split, "3:x", "bad --tensor-split"),
                          (rpc.parse_tensor_split, "0:0", "gives every device 0")):
        with pytest.raises(ConfigError, match=says):
            fn(bad)


def test_a_ratio_with_more_parts_than_devices_is_one_line():
    rpc.check_parts(["1:1", "3:1"], ["RPC0: 127.0.0.1:1", "RPC1: 127.0.0.1:2"])
    with pytest.raises(BenchError) as e:
        rpc.check_parts(["1:1:1"], ["RPC0: 127.0.0.1:1", "RPC1: 127.0.0.1:2"])
    assert "--tensor-split 1:1:1 has 3 parts but the model can be split over 2 devices" in str(e.value)
    assert "\n" not in str(e.value)
    with pytest.raises(BenchError, match="over 0 devices \\(none\\)"):
        rpc.check_parts(["1:1"], [])


def test_an_unreachable_rpc_server_is_one_line_with_the_command_to_start_it():
    with socket.socket() as s:       # a port nothing listens on: bound, never listening
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        with pytest.raises(BenchError) as e:
            rpc.check_reachable(f"127.0.0.1:{port}", timeout=1)
    msg = str(e.value)
    assert f"RPC server 127.0.0.1:{port} is unreachable (connection refused)" in msg
    assert f"rpc-server -H 127.0.0.1 -p {port}" in msg and "\n" not in msg


def test_a_listening_endpoint_is_reachable():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        rpc.check_reachable(f"127.0.0.1:{s.getsockname()[1]}")


def test_binding_every_interface_needs_asking():
    with pytest.raises(ConfigError, match="open to the whole network"):
        rpc.check_bind_host("0.0.0.0")
    rpc.check_bind_host("0.0.0.0", allow_any=True)
    rpc.check_bind_host("127.0.0.1")


def test_local_servers_start_wait_and_stop(tmp_path):
    """A stand-in rpc-server (python listening on -p) is started on 127.0.0.1, waited for, and stopped."""
    fake = tmp_path / "rpc-server"
    fake.write_text(f"#!{sys.executable}\nimport socket, sys, time\nport = int(sys.argv[sys.argv.index('-p') + 1])\n"
                    "s = socket.socket(); s.bind(('127.0.0.1', port)); s.listen(); time.sleep(60)\n")
    fake.chmod(0o755)
    with rpc.LocalServers(fake, 2, log_dir=tmp_path / "logs") as servers:
        assert len(servers.endpoints) == 2 and all(e.startswith("127.0.0.1:") for e in servers.endpoints)
        for e in servers.endpoints:
            rpc.check_reachable(e)
        procs = list(servers.procs)
    assert all(p.poll() is not None for p in procs)


@dataclass
class _Build:
    key: str = "k-rpc"
    backend: str = "rpc"
    commit: str = "0c1e57098"
    pin: str = "default"
    dir: Path = Path("/nonexistent")
    manifest: dict = field(default_factory=dict)


def test_each_split_setting_is_its_own_series_and_reaches_the_server():
    o = bench_options(model="m.gguf", rpc="local:2", split="layer", tensor_split="1:1,3:1")
    points = split_points([PointSpec(0)], o)
    assert [(p.split_mode, p.tensor_split) for p in points] == [("layer", "1:1"), ("layer", "3:1")]
    assert [point_label(_Build(), p) for p in points] == ["sm=layer ts=1:1", "sm=layer ts=3:1"]
    assert len(set(points)) == 2 and points[0].to_json() == {"ncmoe": 0, "ngl": -1, "split_mode": "layer",
                                                               "tensor_split": "1:1"}
    assert PointSpec(0).to_json() == {"ncmoe": 0, "ngl": -1}      # nothing stored when not given
    plan = RunPlan(points=points, rpc=rpc_section(o), main_gpu=1, device="RPC0,RPC1")
    plan.rpc.endpoints = ["127.0.0.1:5001", "127.0.0.1:5002"]
    assert device_args(_Build(), points[1], plan) == ["--rpc", "127.0.0.1:5001,127.0.0.1:5002", "-dev", "RPC0,RPC1",
                                                      "-sm", "layer", "-ts", "3,1", "-mg", "1"]
    assert device_args(_Build(), PointSpec(0), RunPlan()) == []
    back = RunPlan.from_json(plan.to_json())
    assert back.rpc.local == 2 and back.rpc.given == ["local:2"] and back.points[1].tensor_split == "3:1"


def test_an_infeasible_split_is_explained_in_one_line():
    tail = "E llama_model_load: error loading model: device RPC0 does not support split buffers\n"
    why = rpc.split_refusal(tail, "row")
    assert why.startswith("-sm row is infeasible here: device RPC0 does not support split buffers") and "\n" not in why
    assert rpc.split_refusal("some other failure", "row") is None


def test_every_devices_memory_from_the_breakdown():
    bd = {"devices": [{"kind": "device", "name": "RPC0", "description": "127.0.0.1:5001", "total": 24105,
                       "free": 24105, "self": 40, "model": 9, "context": 5, "compute": 25, "unaccounted": -40},
                      {"kind": "device", "name": "RPC1", "description": "127.0.0.1:5002", "self": 34, "model": 7}],
          "host": {"kind": "host", "name": "Host", "self": 22, "model": 4}}
    rows = rpc.devices_mem(bd)
    assert [r["name"] for r in rows] == ["RPC0", "RPC1", "Host"]
    assert rows[0]["model"] == 9 and "unaccounted" not in rows[0] and rows[0]["description"] == "127.0.0.1:5001"
    assert rpc.devices_mem({"devices": [], "host": {"name": "Host"}}) is None and rpc.devices_mem(None) is None


def test_the_rpc_build_must_have_its_server():
    caps, problems = RPC.binary_checks({"llama-server": {}, "ggml-rpc-server": {}})
    assert caps == {"rpc_server": "ggml-rpc-server"} and problems == []
    assert RPC.binary_checks({"llama-server": {}, "rpc-server": {}})[0] == {"rpc_server": "rpc-server"}
    caps, problems = RPC.binary_checks({"llama-server": {}})
    assert caps == {} and "no RPC server binary" in problems[0][0]
