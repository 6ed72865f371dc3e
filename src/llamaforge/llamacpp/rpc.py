"""llama.cpp's RPC backend: ``rpc-server`` processes that lend their devices to a llama-server elsewhere
(``llama-server --rpc host:port,…``), and the multi-device arguments that place a model on them.

* :func:`parse_rpc` — ``--rpc`` as written: ``host:port`` endpoints and ``local:N`` (N rpc-servers started
  here, on 127.0.0.1, for the sweep); one line on anything else.
* :class:`LocalServers` — starts and stops rpc-servers (each in its own process group, killed on exit; bound to
  127.0.0.1 unless a host is named, never ``0.0.0.0`` unless asked for in so many words) and waits until each
  port accepts connections.
* :func:`check_reachable` — one line for an endpoint that does not answer. llama.cpp itself aborts with a
  backtrace ("RPC handshake failed") when a ``--rpc`` server is unreachable, so every endpoint is tried first.
* :func:`list_rpc_devices` — the devices a binary sees with the endpoints (``--rpc`` must come before
  ``--list-devices``, which exits at once): ``RPC0: 127.0.0.1:50052 (24105 MiB, 24105 MiB free)``.
* :func:`parse_tensor_split`, :func:`check_parts`, :func:`split_refusal`, :func:`devices_mem` — ``-ts`` ratios,
  the count of their parts against the devices, an infeasible ``-sm`` explained in one line (``-sm row`` on a
  device without split buffers), and every device's memory from llama.cpp's ``fit_memory_breakdown``.

RPC is unauthenticated: :func:`warn_unauthenticated` says so once per process, with llama.cpp's own warning.
"""

from __future__ import annotations

import re
import socket
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from .. import proc
from ..console import warning
from ..errors import BenchError, ConfigError

#: llama.cpp's own warning about its RPC server
RPC_WARNING_URL = "https://github.com/ggml-org/llama.cpp/blob/master/tools/rpc/README.md"
#: the split modes llama-server's ``-sm`` knows (``tensor``: newer releases)
SPLIT_MODES = ("none", "layer", "row", "tensor")
#: the most rpc-servers ``local:N`` starts
MAX_LOCAL = 8
_LOCAL = re.compile(r"local:([0-9]+)")
_ENDPOINT = re.compile(r"(\[[0-9a-fA-F:]+\]|[A-Za-z0-9][A-Za-z0-9.-]*):([0-9]{1,5})")
_DEVICE_LINE = re.compile(r"^\s*(RPC[0-9]+):\s*(\S+)\s*\((\d+) MiB, (\d+) MiB free\)", re.M)
_warned = False


@dataclass(frozen=True)
class RpcSpec:
    """``--rpc`` parsed: remote endpoints as given and how many local servers to start."""

    endpoints: tuple[str, ...] = ()
    local: int = 0

    @property
    def count(self) -> int:
        return len(self.endpoints) + self.local


def parse_rpc(text: str | None) -> RpcSpec:
    """``--rpc 10.0.0.9:50052,local:2`` → :class:`RpcSpec`; a :class:`ConfigError` line on a bad item."""
    fix = "write --rpc HOST:PORT[,HOST:PORT…] (rpc-servers), or local:N to start N here on 127.0.0.1"
    items = [x.strip() for x in str(text or "").split(",")]
    if not any(items):
        raise ConfigError("empty --rpc value", fix)
    endpoints: list[str] = []
    local = 0
    for item in items:
        if m := _LOCAL.fullmatch(item):
            local += int(m.group(1))
            continue
        m = _ENDPOINT.fullmatch(item)
        if not m or not 0 < int(m.group(2)) < 65536:
            raise ConfigError(f"bad --rpc endpoint {item!r}", fix)
        if item in endpoints:
            raise ConfigError(f"--rpc names {item} twice", "give each rpc-server once")
        endpoints.append(item)
    if not 0 <= local <= MAX_LOCAL or (local == 0 and not endpoints):
        raise ConfigError(f"--rpc local:{local}: start 1 to {MAX_LOCAL} local rpc-servers", fix)
    return RpcSpec(tuple(endpoints), local)


def warn_unauthenticated() -> None:
    """Once per process: RPC has no authentication, and llama.cpp says never to expose it."""
    global _warned
    if not _warned:
        _warned = True
        warning("llama.cpp's RPC is unauthenticated and not secure: keep rpc-servers on 127.0.0.1 or a network "
                f"you trust, never an open one (llama.cpp's own warning: {RPC_WARNING_URL})")


def _split(endpoint: str) -> tuple[str, int]:
    host, _, port = endpoint.rpartition(":")
    return host.strip("[]"), int(port)


def check_reachable(endpoint: str, timeout: float = 3.0) -> None:
    """A :class:`BenchError` line when nothing accepts connections at ``endpoint`` (``host:port``)."""
    host, port = _split(endpoint)
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return
    except OSError as e:
        why = "connection refused" if isinstance(e, ConnectionRefusedError) else (
            "timed out" if isinstance(e, TimeoutError | socket.timeout) else (e.strerror or type(e).__name__).lower())
    raise BenchError(f"RPC server {endpoint} is unreachable ({why})",
                     f"start `rpc-server -H {host} -p {port}` there (llama.cpp's ggml-rpc-server), or leave it out of --rpc")


def _accepts(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


def check_bind_host(host: str, allow_any: bool = False) -> None:
    """Refuse to bind an rpc-server to every interface unless asked for explicitly."""
    if host in ("0.0.0.0", "::", "[::]", "") and not allow_any:
        raise ConfigError(f"an rpc-server bound to {host or 'every interface'} is open to the whole network "
                          "(RPC is unauthenticated)", "bind it to 127.0.0.1 or the address of a trusted network")


@dataclass
class LocalServers:
    """``n`` rpc-servers of ``binary`` on ``host`` (free ports), each in its own process group: use as a
    context manager (or :meth:`start` / :meth:`stop`). ``endpoints`` are ``host:port`` once started."""

    binary: Path
    n: int
    host: str = "127.0.0.1"
    threads: int | None = None
    log_dir: Path | None = None
    allow_any: bool = False
    timeout_s: float = 30.0
    procs: list[subprocess.Popen] = field(default_factory=list)
    endpoints: list[str] = field(default_factory=list)

    def __enter__(self) -> LocalServers:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> LocalServers:
        check_bind_host(self.host, self.allow_any)
        warn_unauthenticated()
        try:
            for i in range(self.n):
                self.endpoints.append(self._start_one(i))
        except BaseException:
            self.stop()
            raise
        return self

    def _start_one(self, i: int) -> str:
        last = ""
        for _attempt in range(3):      # a free port may be taken between choosing and binding it
            port = proc.free_port(self.host)
            args = [str(self.binary), "-H", self.host, "-p", str(port)]
            if self.threads:
                args += ["-t", str(self.threads)]
            log = self._log(i)
            p = proc.spawn(args, stdout=log, stderr=subprocess.STDOUT)
            if log is not None:
                log.close()
            self.procs.append(p)
            if self._wait(p, port):
                return f"{self.host}:{port}"
            last = f"exit {p.returncode}" if p.poll() is not None else f"no answer after {self.timeout_s:.0f} s"
            proc.kill_group(p, grace=1)
            self.procs.remove(p)
        raise BenchError(f"could not start a local rpc-server ({self.binary.name}: {last})",
                         "check that the rpc build works: `llamaforge verify --backends rpc`")

    def _log(self, i: int):  # noqa: ANN202 - an open file or None
        if self.log_dir is None:
            return None
        self.log_dir.mkdir(parents=True, exist_ok=True)
        return open(self.log_dir / f"rpc-server-{i}.log", "ab")  # noqa: SIM115 - handed to the child

    def _wait(self, p: subprocess.Popen, port: int) -> bool:
        deadline = time.monotonic() + self.timeout_s
        while time.monotonic() < deadline:
            if p.poll() is not None:
                return False
            if _accepts(self.host, port):
                return True
            time.sleep(0.05)
        return False

    def stop(self) -> None:
        for p in self.procs:
            proc.kill_group(p, grace=3)
        self.procs.clear()


def list_rpc_devices(binary: Path, endpoints: Sequence[str], env: dict[str, str] | None = None) -> list[str]:
    """The RPC devices ``binary`` (llama-server) sees with ``endpoints``: ``["RPC0: 127.0.0.1:50052", …]``."""
    res = proc.run([str(binary), "--rpc", ",".join(endpoints), "--list-devices"], env=env, timeout=60)
    return [f"{m.group(1)}: {m.group(2)}" for m in _DEVICE_LINE.finditer(res.output)]


# ------------------------------------------------------------------------------ multi-device arguments
def parse_split_modes(text: str | None) -> list[str]:
    """``--split layer,row`` → ``["layer", "row"]`` (each once, each a mode llama.cpp's ``-sm`` knows)."""
    modes = [x.strip().lower() for x in str(text or "").split(",")]
    bad = [m for m in modes if m not in SPLIT_MODES]
    if bad or not modes:
        raise ConfigError(f"bad --split value {bad[0] if bad else text!r}",
                          f"use one or more of {', '.join(SPLIT_MODES)}, e.g. --split layer,row")
    if len(set(modes)) < len(modes):
        raise ConfigError(f"--split {text} names a mode twice", "give each split mode once")
    return modes


def parse_tensor_split(text: str | None) -> list[str]:
    """``--tensor-split 3:1,1:1`` → ``["3:1", "1:1"]``: ratios of non-negative numbers, ``:`` between parts,
    ``,`` between the settings swept."""
    fix = "write each ratio with ':' between devices and ',' between settings, e.g. --tensor-split 3:1,1:1"
    out: list[str] = []
    for item in (x.strip() for x in str(text or "").split(",")):
        parts = item.split(":")
        if not item or not all(re.fullmatch(r"[0-9]+(\.[0-9]+)?", p) for p in parts):
            raise ConfigError(f"bad --tensor-split ratio {item!r}", fix)
        if len(parts) < 2:
            raise ConfigError(f"--tensor-split {text}: a ratio needs a part per device ({item!r} has one)",
                              "write 3:1 for llama.cpp's -ts 3,1 (':' between devices, ',' between settings)")
        if not any(float(p) > 0 for p in parts):
            raise ConfigError(f"--tensor-split {item} gives every device 0", fix)
        if item in out:
            raise ConfigError(f"--tensor-split names {item} twice", "give each ratio once")
        out.append(item)
    return out


def ts_arg(ratio: str) -> str:
    """``3:1`` → llama.cpp's ``-ts`` value ``3,1``."""
    return ratio.replace(":", ",")


def check_parts(ratios: Sequence[str], devices: Sequence[str]) -> None:
    """A :class:`BenchError` line when a ratio has more parts than there are devices to split over
    (llama.cpp ignores the extra parts without a word)."""
    for r in ratios:
        n = len(r.split(":"))
        if n > len(devices):
            seen = ", ".join(devices) or "none"
            raise BenchError(f"--tensor-split {r} has {n} parts but the model can be split over {len(devices)} "
                             f"device{'s' if len(devices) != 1 else ''} ({seen})",
                             f"give at most {len(devices)} parts, or add devices (--rpc HOST:PORT, another GPU)")


def series_of(split_mode: str, tensor_split: str) -> str:
    """A point's split settings as its series label: ``sm=layer ts=3:1`` (empty: llama.cpp's defaults)."""
    return " ".join(x for x in (f"sm={split_mode}" if split_mode else "",
                                f"ts={tensor_split}" if tensor_split else "") if x)


_NO_SPLIT_BUFFERS = re.compile(r"device (\S+) does not support split buffers")


def split_refusal(log_tail: str, split_mode: str) -> str | None:
    """Why llama.cpp could not load a split, in one line (None: the log says nothing about the split)."""
    m = _NO_SPLIT_BUFFERS.search(log_tail or "")
    if m:
        return (f"-sm {split_mode or 'row'} is infeasible here: device {m.group(1)} does not support split buffers "
                "(llama.cpp splits rows only on CUDA/SYCL devices); use -sm layer")
    if "not implemented for SPLIT_MODE_TENSOR" in (log_tail or ""):
        return "-sm tensor is infeasible here: llama.cpp cannot fit the context with it; give --ctx, or use -sm layer"
    return None


_MEM_KEYS = ("name", "description", "total", "free", "self", "model", "context", "compute")


def devices_mem(breakdown: dict | None) -> list[dict] | None:
    """Every device's row of a parsed ``fit_memory_breakdown`` (:func:`~.server.parse_memory_breakdown`), then
    the host's (``name`` ``Host``): MiB each. None when the log had no device in its breakdown."""
    rows = [{k: d[k] for k in _MEM_KEYS if k in d} for d in (breakdown or {}).get("devices") or []]
    if not rows:      # the host alone (a CPU build): nothing per device to say
        return None
    host = (breakdown or {}).get("host")
    if isinstance(host, dict):
        rows.append({k: host[k] for k in _MEM_KEYS if k in host})
    return rows
