"""Subprocesses done safely.

Rules (see the README): argument lists only (never ``shell=True``); every child starts in its
own process group (``start_new_session=True``) and the whole group is killed on timeout, on
error and when llamaforge exits (``atexit`` plus a SIGTERM handler), so no ``llama-server`` is
ever left running.
"""

from __future__ import annotations

import atexit
import codecs
import contextlib
import io
import os
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
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
    log_error: str | None = None   # why the log could not be (fully) written, e.g. "[Errno 28] No space left ..."

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out


_READ_CHUNK = 1 << 16


class _Drain:
    """Reads a child's output to EOF whatever happens: bytes are decoded as UTF-8 with replacement
    (one bad byte must not kill the reader, or the child blocks on a full pipe until its timeout),
    a log that cannot be written (disk full) is given up on and the error kept for afterwards, and
    an ``on_line`` callback that raises is ignored."""

    def __init__(self, log: IO[bytes] | None, on_line: Callable[[str], object] | None) -> None:
        self.log = log
        self.on_line = on_line
        self.chunks: list[str] = []
        self.log_error: str | None = None
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._partial = ""
        self._cr = ""

    def _write_log(self, data: bytes) -> None:
        if self.log is None:
            return
        try:
            self.log.write(data)
        except (OSError, ValueError) as e:
            self._give_up_log(e)

    def _give_up_log(self, e: BaseException) -> None:
        if self.log_error is None:
            self.log_error = str(e) or type(e).__name__
        log, self.log = self.log, None
        if log is not None:
            with contextlib.suppress(OSError, ValueError):
                log.close()

    def _text(self, text: str, final: bool = False) -> None:
        # universal newlines, as text mode did: \r\n and a lone \r end a line (a \r at a chunk's end waits)
        text = self._cr + text
        self._cr = ""
        if text.endswith("\r") and not final:
            text, self._cr = text[:-1], "\r"
        text = text.replace("\r\n", "\n").replace("\r", "\n")
        if not text:
            return
        self.chunks.append(text)
        if self.on_line is None:
            return
        lines = (self._partial + text).split("\n")
        self._partial = lines.pop()
        for line in lines:
            with contextlib.suppress(Exception):
                self.on_line(line + "\n")

    def __call__(self, stream: io.BufferedReader) -> None:
        while True:
            try:
                data = stream.read1(_READ_CHUNK)
            except (OSError, ValueError):
                break  # the pipe itself is gone (closed after a kill): nothing more to drain
            if not data:
                break
            self._write_log(data)
            try:
                self._text(self._decoder.decode(data))
            except Exception:  # noqa: BLE001 - never stop draining (a MemoryError still propagates)
                continue
        self._text(self._decoder.decode(b"", final=True), final=True)
        if self._partial and self.on_line is not None:
            with contextlib.suppress(Exception):
                self.on_line(self._partial)
        self.close_log()

    def close_log(self) -> None:
        if self.log is not None:
            try:
                self.log.close()   # a buffered write that fails (ENOSPC) surfaces here
            except (OSError, ValueError) as e:
                self._give_up_log(e)
            self.log = None


def run(args: Sequence[str | os.PathLike], *, cwd: Path | None = None,
        env: Mapping[str, str] | None = None, timeout: float | None = None,
        log_path: Path | None = None, on_line: Callable[[str], object] | None = None) -> Result:
    """Run a command to completion, capturing stdout+stderr (and teeing its bytes to ``log_path``).

    On timeout the whole process group is killed and ``timed_out`` is set. ``on_line`` is
    called for every output line (progress parsing). Output is decoded as UTF-8 with
    replacement; if the log cannot be written (disk full), the output is still drained to the
    end and the error is returned in ``Result.log_error`` — the caller decides what it means.
    """
    t0 = time.monotonic()
    log = open(log_path, "ab") if log_path else None  # noqa: SIM115 - closed by the drain
    drain = _Drain(log, on_line)
    th: threading.Thread | None = None
    try:
        p = spawn(args, cwd=cwd, env=env, stdout=subprocess.PIPE)
        timed_out = False
        deadline = t0 + timeout if timeout else None
        assert p.stdout is not None
        th = threading.Thread(target=drain, args=(p.stdout,), daemon=True)
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
                      "".join(drain.chunks), timed_out, time.monotonic() - t0, drain.log_error)
    finally:
        if th is None or not th.is_alive():   # else the drain closes it at EOF (a grandchild holds the pipe)
            drain.close_log()


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that is free on ``host`` right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def managed(p: subprocess.Popen, grace: float = 5.0) -> Iterator[subprocess.Popen]:
    """Context manager that always kills ``p``'s process group on exit."""
    try:
        yield p
    finally:
        kill_group(p, grace=grace)
