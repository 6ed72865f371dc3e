"""One job per host, all hosts in parallel, a one-line progress per host.

A host that fails (unreachable, a remote step exits non-zero, any error) becomes an :class:`Outcome`
with its one-line error; the other hosts finish. Outcomes are yielded to the caller's thread as they
complete, so store writes happen in one thread (SQLite connections are not shared across threads).
"""

from __future__ import annotations

import re
import threading
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from typing import Any

from rich.live import Live
from rich.table import Table

from ..console import console, esc
from ..errors import LlamaforgeError
from .config import FleetHost

_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[@-_]")


@dataclass
class Outcome:
    host: str
    ok: bool
    value: Any = None
    error: str | None = None
    fix: str | None = None
    tail: list[str] = field(default_factory=list)


class Progress:
    """The last output line of every host: a live table on a terminal, prefixed lines otherwise."""

    def __init__(self, hosts: list[str], *, live: bool | None = None) -> None:
        self.hosts = hosts
        self.last = dict.fromkeys(hosts, "waiting")
        self._lock = threading.Lock()
        self._live_on = console.is_terminal if live is None else live
        self._live: Live | None = None
        self._width = max((len(h) for h in hosts), default=4)

    def _table(self) -> Table:
        t = Table.grid(padding=(0, 2))
        t.add_column(style="bold")
        t.add_column(overflow="ellipsis", no_wrap=True)
        for h in self.hosts:
            t.add_row(esc(h), esc(self.last[h]))
        return t

    def update(self, host: str, line: str) -> None:
        with self._lock:
            self.last[host] = line
            if self._live is not None:
                self._live.update(self._table())
            else:
                console.print(f"{host:<{self._width}} │ {line}", markup=False, highlight=False, soft_wrap=True)

    def sink(self, host: str) -> LineSink:
        return LineSink(self, host)

    def __enter__(self) -> Progress:
        if self._live_on:
            self._live = Live(self._table(), console=console, refresh_per_second=4, transient=False)
            self._live.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._live is not None:
            self._live.__exit__(None, None, None)
            self._live = None


class LineSink:
    """A text stream (Invoke's ``out_stream``) that turns output into progress lines and keeps a tail."""

    def __init__(self, progress: Progress | None, host: str, keep: int = 60) -> None:
        self.progress = progress
        self.host = host
        self.tail: deque[str] = deque(maxlen=keep)
        self._buf = ""

    def write(self, text: str) -> int:
        self._buf += text
        *lines, self._buf = re.split(r"\r\n|\r|\n", self._buf)
        for ln in lines:
            self.line(ln)
        return len(text)

    def line(self, text: str) -> None:
        clean = _ANSI.sub("", text).rstrip()
        if not clean.strip():
            return
        self.tail.append(clean)
        if self.progress is not None:
            self.progress.update(self.host, clean)

    def flush(self) -> None:
        pass

    def close(self) -> None:
        if self._buf:
            self.line(self._buf)
            self._buf = ""


def for_each_host(hosts: list[FleetHost], job: Callable[[FleetHost, LineSink], Any],
                  progress: Progress | None = None) -> Iterator[Outcome]:
    """Run ``job(host, sink)`` for every host at once (one job per host); yield outcomes as they finish."""

    def one(h: FleetHost) -> Outcome:
        sink = LineSink(progress, h.name)
        try:
            value = job(h, sink)
            sink.close()
            return Outcome(h.name, True, value, tail=list(sink.tail))
        except LlamaforgeError as e:
            sink.close()
            if progress is not None:
                progress.update(h.name, f"FAILED: {e.message}")
            return Outcome(h.name, False, error=e.message, fix=e.fix, tail=list(sink.tail))
        except Exception as e:  # a host's surprise must not stop the others: recorded, shown, never lost
            sink.close()
            msg = f"host {h.name}: {type(e).__name__}: {' '.join(str(e).split())[:300]}"
            if progress is not None:
                progress.update(h.name, f"FAILED: {msg}")
            return Outcome(h.name, False, error=msg, fix="see the host's output; run with LLAMAFORGE_DEBUG=1 for a traceback",
                           tail=list(sink.tail))

    if not hosts:
        return
    with ThreadPoolExecutor(max_workers=len(hosts), thread_name_prefix="fleet") as pool:
        futs = [pool.submit(one, h) for h in hosts]
        for f in as_completed(futs):
            yield f.result()
