"""Subprocesses done safely.

Rules (see the README): argument lists only (never ``shell=True``); every child starts in its
own process group (``start_new_session=True``) and the whole group is killed on timeout, on
error and when llamaforge exits (``atexit`` plus a SIGTERM handler), so no ``llama-server`` is
ever left running.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

_live: set[subprocess.Popen] = set()
_lock = threading.Lock()


def _register(p: subprocess.Popen) -> None:
    with _lock:
        _live.add(p)


def _unregister(p: subprocess.Popen) -> None:
    with _lock:
        _live.discard(p)


def kill_group(p: subprocess.Popen, grace: float = 5.0) -> int | None:
    """SIGTERM the child's process group, wait ``grace`` seconds, then SIGKILL it."""
    if p.poll() is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(p.pid, signal.SIGTERM)
        try:
            p.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            pass
    # the leader may be gone while others in its group live on: always sweep the group
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(p.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        p.wait(timeout=grace)
    _unregister(p)
    return p.returncode


def kill_all() -> None:
    with _lock:
        procs = list(_live)
    for p in procs:
        kill_group(p, grace=2.0)


atexit.register(kill_all)


def _on_sigterm(signum: int, frame: object) -> None:  # pragma: no cover - exercised by tests via subprocess
    kill_all()
    raise SystemExit(128 + signum)


def install_signal_handlers() -> None:
    """Make SIGTERM/SIGHUP clean up children like Ctrl-C does (call once from the CLI)."""
    if threading.current_thread() is threading.main_thread():
        for s in (signal.SIGTERM, signal.SIGHUP):
            signal.signal(s, _on_sigterm)


def _env(extra: Mapping[str, str] | None) -> dict[str, str]:
    env = dict(os.environ)
    if extra:
        env.update(extra)
    return env


def spawn(args: Sequence[str | os.PathLike], *, cwd: Path | None = None,
          env: Mapping[str, str] | None = None, stdout: IO | int | None = None,
          stderr: IO | int | None = subprocess.STDOUT, stdin: IO | int | None = subprocess.DEVNULL,
          text: bool = False) -> subprocess.Popen:
    """Start a child in its own process group and register it for cleanup."""
    p = subprocess.Popen([str(a) for a in args], cwd=cwd, env=_env(env), stdout=stdout, stderr=stderr,
                         stdin=stdin, start_new_session=True, text=text)
    _register(p)
    return p


@dataclass
class Result:
    args: list[str]
    returncode: int
    output: str
    timed_out: bool
    seconds: float

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out


def run(args: Sequence[str | os.PathLike], *, cwd: Path | None = None,
        env: Mapping[str, str] | None = None, timeout: float | None = None,
        log_path: Path | None = None, on_line: callable | None = None) -> Result:
    """Run a command to completion, capturing stdout+stderr (and teeing it to ``log_path``).

    On timeout the whole process group is killed and ``timed_out`` is set. ``on_line`` is
    called for every output line (progress parsing).
    """
    t0 = time.monotonic()
    log = open(log_path, "a", encoding="utf-8", errors="replace") if log_path else None
    chunks: list[str] = []
    try:
        p = spawn(args, cwd=cwd, env=env, stdout=subprocess.PIPE, text=True)
        timed_out = False
        deadline = t0 + timeout if timeout else None

        def reader() -> None:
            assert p.stdout is not None
            for line in p.stdout:
                chunks.append(line)
                if log:
                    log.write(line)
                if on_line:
                    with contextlib.suppress(Exception):
                        on_line(line)

        th = threading.Thread(target=reader, daemon=True)
        th.start()
        try:
            while True:
                try:
                    p.wait(timeout=0.2)
                    break
                except subprocess.TimeoutExpired:
                    if deadline and time.monotonic() > deadline:
                        timed_out = True
                        kill_group(p, grace=3.0)
                        break
        except BaseException:
            kill_group(p, grace=3.0)
            raise
        th.join(timeout=5)
        _unregister(p)
        return Result([str(a) for a in args], p.returncode if p.returncode is not None else -9,
                      "".join(chunks), timed_out, time.monotonic() - t0)
    finally:
        if log:
            log.close()


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that is free on ``host`` right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def port_in_use(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((host, port))
        except OSError:
            return True
    return False


@contextlib.contextmanager
def managed(p: subprocess.Popen, grace: float = 5.0) -> Iterator[subprocess.Popen]:
    """Context manager that always kills ``p``'s process group on exit."""
    try:
        yield p
    finally:
        kill_group(p, grace=grace)
