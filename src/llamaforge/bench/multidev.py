"""``bench --rpc / --split / --tensor-split / --main-gpu / --device``: a sweep over several devices.

* :func:`check_options` — the values as written, before the model is read (one line each): ``--rpc`` endpoints
  or ``local:N``, split modes, ratios; only the server engine measures them.
* :func:`split_points` — every point × every ``-sm`` × every ``-ts`` setting (each combination its own series,
  ``sm=layer ts=3:1``: :func:`llamaforge.llamacpp.rpc.series_of`).
* :func:`devices_session` — around the sweep: starts ``local:N`` rpc-servers (the rpc build's own, on 127.0.0.1,
  stopped after the sweep), tries every endpoint (an unreachable one is one line, not llama.cpp's abort), lists
  the devices llama.cpp sees with them into ``plan.rpc`` and refuses a ratio with more parts than devices.
* :func:`device_args` — a point's ``--rpc``, ``-sm``, ``-ts``, ``-mg``, ``-dev`` for llama-server.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from pathlib import Path

from ..backends.rpc import RPC_SERVER_NAMES
from ..errors import BenchError
from ..llamacpp import rpc
from ..llamacpp.options import build_options
from ..records import PointSpec, RpcSection
from .cli_options import BenchOptions
from .plan import BuildLike, Plan


def wanted(o: BenchOptions) -> bool:
    return bool(o.rpc or o.split or o.tensor_split or o.main_gpu is not None or o.device)


def check_options(o: BenchOptions) -> None:
    """Every multi-device option parsed (a bad one is one line) and the engine that can measure them."""
    if o.rpc:
        rpc.parse_rpc(o.rpc)
    if o.split:
        rpc.parse_split_modes(o.split)
    if o.tensor_split:
        rpc.parse_tensor_split(o.tensor_split)
    if o.engine != "server":
        raise BenchError(f"--rpc, --split, --tensor-split, --main-gpu and --device are measured with --engine server "
                         f"(got {o.engine})", "leave --engine out (server is the default)")


def split_points(points: Sequence[PointSpec], o: BenchOptions) -> list[PointSpec]:
    """``points`` × the ``--split`` modes × the ``--tensor-split`` ratios (unchanged when neither is given)."""
    modes = rpc.parse_split_modes(o.split) if o.split else [""]
    ratios = rpc.parse_tensor_split(o.tensor_split) if o.tensor_split else [""]
    return [p.replace(split_mode=m, tensor_split=r) for m in modes for r in ratios for p in points]


def rpc_section(o: BenchOptions) -> RpcSection | None:
    if not o.rpc:
        return None
    spec = rpc.parse_rpc(o.rpc)
    return RpcSection(given=[x.strip() for x in o.rpc.split(",")], endpoints=list(spec.endpoints), local=spec.local)


def _rpc_server(builds: Sequence[BuildLike]) -> Path:
    for b in builds:
        for name in RPC_SERVER_NAMES:
            p = b.dir / "out" / "bin" / name
            if p.exists():
                return p
    raise BenchError("--rpc local:N starts rpc-servers from an rpc build, and none of these builds has one",
                     "build it: `llamaforge build --backends rpc`, and bench --backends rpc")


def _local_devices(build: BuildLike) -> list[str]:
    """A build's own devices a model can be split over (the indexed ones: CUDA0, Vulkan0; not the CPU or BLAS)."""
    devs = (build.manifest.get("verification") or {}).get("devices") or []
    return [f"{d.get('backend', '')}{d.get('index', '')}: {d.get('name', '')}" for d in devs if d.get("indexed")]


def _check_builds(plan: Plan, builds: Sequence[BuildLike]) -> None:
    for b in builds:
        if plan.rpc and "--rpc" not in build_options(b).server:
            raise BenchError(f"{b.key}'s llama-server has no --rpc (built without GGML_RPC)",
                             "bench an rpc build: `llamaforge build --backends rpc`, then --backends rpc")


@contextlib.contextmanager
def devices_session(plan: Plan, builds: Sequence[BuildLike], log_dir: Path | None = None) -> Iterator[None]:
    """The sweep's devices, ready while it runs (see the module doc); local rpc-servers stop on exit."""
    _check_builds(plan, builds)
    with contextlib.ExitStack() as stack:
        if plan.rpc:
            sec = plan.rpc
            remote = [e for e in sec.given if not e.startswith("local:")]
            if sec.local:
                local = stack.enter_context(rpc.LocalServers(_rpc_server(builds), sec.local, threads=plan.threads,
                                                              log_dir=log_dir))
                sec.endpoints = [*remote, *local.endpoints]
            else:
                rpc.warn_unauthenticated()
            for e in sec.endpoints:
                rpc.check_reachable(e)
            sec.devices = rpc.list_rpc_devices(builds[0].binary("llama-server"), sec.endpoints, builds[0].env)
        ratios = sorted({p.tensor_split for p in plan.points if p.tensor_split})
        for b in builds:
            rpc.check_parts(ratios, _local_devices(b) + (list(plan.rpc.devices) if plan.rpc else []))
        yield


def device_args(build: BuildLike, spec: PointSpec, plan: Plan) -> list[str]:
    """The point's multi-device arguments for llama-server (empty for a one-device sweep)."""
    args: list[str] = []
    if plan.rpc and plan.rpc.endpoints:
        args += ["--rpc", ",".join(plan.rpc.endpoints)]
    if plan.device:
        args += ["-dev", plan.device]
    if spec.split_mode:
        args += ["-sm", spec.split_mode]
    if spec.tensor_split:
        args += ["-ts", rpc.ts_arg(spec.tensor_split)]
    if plan.main_gpu is not None:
        args += ["-mg", str(plan.main_gpu)]
    return args
