"""One llama-server process for one offload point: start, wait until healthy, talk HTTP, stop.

The server binds 127.0.0.1 on a free port (another is tried if the port got taken in between),
runs in its own process group (:mod:`llamaforge.proc`) and is always stopped with SIGTERM, then
SIGKILL after a grace period — a graceful stop lets it print its final ``fit_memory_breakdown``.
Its output goes to a per-point log file; failures become a :class:`PointFailure` with a class
(``oom``, ``crash``, ``hang``, ``unhealthy``, ``bad-response``, ``error``) and the log tail.

Arguments are built from the binary's ``--help`` options (:mod:`llamaforge.llamacpp.options`), so we
never pass unknown ones.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .. import proc
from ..lazy import lazy
from . import kernel

if TYPE_CHECKING:
    import requests
else:   # loaded on first use (llamaforge.lazy): most commands never start a server
    requests = lazy("requests")

_OOM_PATTERNS = (
    "failed to allocate", "out of memory", "cudamalloc failed", "erroroutofdevicememory",
    "vk::outofdevicememoryerror", "outofdevicememory", "unable to allocate", "std::bad_alloc",
    "failed to fit params", "not enough memory", "cuda error: out of memory",
)
_LOAD_FAIL_PATTERNS = ("failed to load model", "error loading model", "failed to initialize")
_ARG_PATTERNS = ("error: invalid argument", "unknown argument", "error while handling argument",
                 "invalid value", "error: unknown value")


class PointFailure(Exception):
    """A point could not be measured. ``cls`` is the failure class stored with the point."""

    def __init__(self, cls: str, detail: str, log_tail: str | None = None) -> None:
        super().__init__(f"{cls}: {detail}")
        self.cls = cls
        self.detail = detail
        self.log_tail = log_tail


def classify_failure(log_tail: str, *, returncode: int | None = None, phase: str = "load") -> str:
    """The failure class of a point from its log tail, the server's exit status and the phase.

    ``oom`` wins whenever the log says an allocation failed (even if the process then crashed);
    an exit on a signal or a non-zero exit without an allocation message is a ``crash``
    (``error`` for a rejected command line); a live server that never became healthy is
    ``unhealthy``; a request that did not answer in time is a ``hang``.
    """
    low = (log_tail or "").lower()
    if any(p in low for p in _OOM_PATTERNS):
        return "oom"
    if returncode is not None:
        if any(p in low for p in _ARG_PATTERNS):
            return "error"
        if returncode == -9 or returncode == 137:
            # SIGKILL without a message: the kernel OOM killer is the usual culprit at load time
            return "oom" if phase == "load" else "crash"
        return "crash"
    if any(p in low for p in _LOAD_FAIL_PATTERNS):
        return "crash"
    if phase == "load":
        return "unhealthy"
    if phase == "request":
        return "hang"
    return "error"


def _text_of(line: str) -> str:
    """A log line as text: ``--log-jsonl`` lines are unwrapped to their message."""
    s = line.rstrip("\n")
    if s.startswith("{") and '"type"' in s:
        try:
            obj = json.loads(s)
        except ValueError:
            return s
        if obj.get("type") == "log":
            return str(obj.get("msg", "")).rstrip("\n")
        return f"[{obj.get('type')}] {json.dumps(obj.get('data'), sort_keys=True)}"
    return s


def read_log_tail(path: Path, n: int = 40) -> str:
    """The last ``n`` lines of a server log, as readable text."""
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            lines = deque(fh, maxlen=n)
    except OSError:
        return ""
    return "\n".join(_text_of(line) for line in lines)


def parse_memory_breakdown(log_path: Path) -> dict | None:
    """The last ``fit_memory_breakdown`` record of a ``--log-jsonl`` log (per device: total, free,
    self, model, context, compute, MiB; plus ``host``). The last one is the real context's: the
    server prints one per fitting probe at load and a final one at shutdown."""
    last = None
    try:
        with open(log_path, encoding="utf-8", errors="replace") as fh:
            for line in fh:
                if '"fit_memory_breakdown"' not in line:
                    continue
                try:
                    obj = json.loads(line)
                except ValueError:
                    continue
                if obj.get("type") == "fit_memory_breakdown":
                    last = obj.get("data")
    except OSError:
        return None
    if not last:
        return None
    out: dict[str, Any] = {"unit": last.get("unit", "MiB"), "devices": [], "host": None, "other": []}
    for row in last.get("rows", []):
        kind = row.get("kind")
        if kind == "device":
            out["devices"].append(row)
        elif kind == "host":
            out["host"] = row
        else:
            out["other"].append(row)
    return out


# Exec wrapper: the server gets SIGKILL when the benchmarking process dies, even by ``kill -9``
# (Linux prctl PR_SET_PDEATHSIG survives execve), so no llama-server outlives its bench.
_PDEATHSIG = (
    "import ctypes, os, signal, sys\n"
    "ppid = int(sys.argv[1])\n"
    "ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL, 0, 0, 0)\n"
    "if os.getppid() != ppid: sys.exit(137)\n"
    "os.execv(sys.argv[2], sys.argv[2:])\n"
)


def die_with_parent(args: list[str]) -> list[str]:
    """``args`` wrapped so the child is killed when this process dies (Linux; unchanged elsewhere)."""
    if not sys.platform.startswith("linux"):
        return args
    return [sys.executable, "-S", "-c", _PDEATHSIG, str(os.getpid()), *args]


_FIT_REFUSED = re.compile(r"failed to fit (?:CLI arguments|params)[^:]*:\s*(.*)$", re.I)


def fit_refusal(log_path: Path) -> str | None:
    """Why llama-server did not fit its parameters (``common_fit_params: failed to fit params to
    free device memory: model_params::tensor_buft_overrides already set by user, abort``), or None.

    A server that refuses to fit still loads — unfitted, with whatever context it was given — so
    this is read from the log of a healthy server, not from a failure."""
    try:
        with open(log_path, encoding="utf-8", errors="replace") as fh:
            for line in fh:
                if "failed to fit" not in line:
                    continue
                m = _FIT_REFUSED.search(_text_of(line).strip())
                if m:
                    return m.group(1).strip() or "no reason given"
    except OSError:
        return None
    return None


def local_http_session() -> requests.Session:
    """An HTTP session for the local llama-server: ``trust_env=False``, so HTTP_PROXY / HTTPS_PROXY /
    ALL_PROXY, ``.netrc`` credentials and REQUESTS_CA_BUNDLE never apply to 127.0.0.1 (a proxy would
    make every point "unhealthy")."""
    s = requests.Session()
    s.trust_env = False
    return s


@dataclass
class ServerSession:
    """A running llama-server. Use :meth:`start` (classmethod) and always :meth:`stop`."""

    proc: subprocess.Popen
    port: int
    args: list[str]
    log_path: Path
    env: dict[str, str] = field(default_factory=dict)
    t_load_s: float | None = None
    started_uptime: float | None = None    # seconds since boot at the spawn (the kernel log's clock)
    _http: requests.Session = field(default_factory=local_http_session)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    # ---- lifecycle ---------------------------------------------------------------------------
    @classmethod
    def start(cls, binary: Path, server_args: list[str], log_path: Path, *, env: dict[str, str] | None = None,
              load_timeout_s: float = 600.0, port_attempts: int = 3, on_phase: Any = None,
              on_spawn: Any = None) -> ServerSession:
        """Start ``binary server_args --host 127.0.0.1 --port P`` and wait for ``/health`` = ok.

        Raises :class:`PointFailure` (the server is already stopped then)."""
        log_path.parent.mkdir(parents=True, exist_ok=True)
        last: PointFailure | None = None
        for attempt in range(port_attempts):
            port = proc.free_port()
            args = [str(binary), *server_args, "--host", "127.0.0.1", "--port", str(port)]
            with open(log_path, "a" if attempt else "w", encoding="utf-8") as fh:
                fh.write("")
            log = open(log_path, "ab")  # noqa: SIM115 - handed to the child, closed in stop()
            spawned = kernel.uptime()
            try:
                p = proc.spawn(die_with_parent(args), env=env, stdout=log, stderr=subprocess.STDOUT)
            finally:
                log.close()
            s = cls(p, port, args, log_path, dict(env or {}), started_uptime=spawned)
            if on_spawn:
                on_spawn(p.pid)
            if on_phase:
                on_phase("loading")
            try:
                s._wait_healthy(load_timeout_s)
                return s
            except PointFailure as e:
                s.stop()
                if e.cls == "port-in-use":
                    last = e
                    continue
                raise
        assert last is not None
        raise PointFailure("error", f"could not bind a free port after {port_attempts} attempts", last.log_tail)

    def _wait_healthy(self, timeout_s: float) -> None:
        t0 = time.monotonic()
        deadline = t0 + timeout_s
        while True:
            rc = self.proc.poll()
            if rc is not None:
                tail = read_log_tail(self.log_path)
                low = tail.lower()
                if "address already in use" in low or "couldn't bind" in low or "failed to bind" in low:
                    raise PointFailure("port-in-use", f"port {self.port} was taken", tail)
                cls = classify_failure(tail, returncode=rc, phase="load")
                raise PointFailure(cls, f"llama-server exited with status {rc} while loading" + self._fault(rc), tail)
            try:
                r = self._http.get(self.url + "/health", timeout=2)
                if r.status_code == 200:
                    self.t_load_s = time.monotonic() - t0
                    return
            except requests.RequestException:
                pass
            if time.monotonic() > deadline:
                tail = read_log_tail(self.log_path)
                cls = classify_failure(tail, returncode=None, phase="load")
                raise PointFailure(cls, f"llama-server was not healthy after {timeout_s:.0f} s", tail)
            time.sleep(0.1)

    def _fault(self, rc: int | None) -> str:
        """``; kernel: …`` — the kernel's fault line for a server that died of a signal, where it can be read."""
        if rc is None or rc >= 0:
            return ""
        since = self.started_uptime - 1 if self.started_uptime is not None else None
        rep = kernel.fault_report(self.proc.pid, since=since)
        return f"; kernel: {rep}" if rep else ""

    def stop(self, grace: float = 10.0) -> int | None:
        """SIGTERM the server's process group, SIGKILL after ``grace`` seconds."""
        self._http.close()
        return proc.kill_group(self.proc, grace=grace)

    def alive(self) -> bool:
        return self.proc.poll() is None

    # ---- HTTP --------------------------------------------------------------------------------
    def _request(self, method: str, path: str, *, timeout: float, phase: str = "request", **kw: Any) -> Any:
        try:
            r = self._http.request(method, self.url + path, timeout=timeout, **kw)
        except requests.Timeout as e:
            raise PointFailure("hang", f"{path} did not answer within {timeout:.0f} s",
                               read_log_tail(self.log_path)) from e
        except requests.RequestException as e:
            time.sleep(0.3)  # let a dying server finish dying so its exit status is known
            rc = self.proc.poll()
            tail = read_log_tail(self.log_path)
            cls = classify_failure(tail, returncode=rc if rc is not None else -1, phase=phase)
            raise PointFailure(cls, f"{path} failed: {type(e).__name__}"
                               + (f" (server exited with status {rc})" if rc is not None else "") + self._fault(rc),
                               tail) from e
        if r.status_code != 200:
            tail = read_log_tail(self.log_path)
            cls = "oom" if classify_failure(tail, phase=phase) == "oom" else "bad-response"
            raise PointFailure(cls, f"{path} answered HTTP {r.status_code}: {r.text[:300]}", tail)
        try:
            return r.json()
        except ValueError as e:
            raise PointFailure("bad-response", f"{path} answered non-JSON: {r.text[:200]!r}",
                               read_log_tail(self.log_path)) from e

    def props(self) -> dict:
        return self._request("GET", "/props", timeout=30)

    def model_meta(self) -> dict:
        """``/v1/models`` → ``data[0].meta`` (n_ctx, n_ctx_train, n_params, size, ...) or {}."""
        try:
            d = self._request("GET", "/v1/models", timeout=30)
            return dict((d.get("data") or [{}])[0].get("meta") or {})
        except (PointFailure, AttributeError, IndexError):
            return {}

    def tokenize(self, text: str) -> list[int]:
        """Tokens the way ``/completion`` tokenizes a string prompt (special tokens parsed)."""
        d = self._request("POST", "/tokenize", timeout=60,
                          json={"content": text, "add_special": True, "parse_special": True})
        return list(d.get("tokens") or [])

    def apply_template(self, messages: list[dict]) -> str | None:
        """The chat-templated prompt for ``messages`` (``None`` if the model has no usable template)."""
        try:
            d = self._request("POST", "/apply-template", timeout=60, json={"messages": messages})
        except PointFailure as e:
            if e.cls == "bad-response":
                return None
            raise
        return d.get("prompt") if isinstance(d, dict) else None

    def complete(self, prompt: list[int] | str, n_predict: int, *, timeout: float,
                 banned: list[int] | None = None, overrides: dict | None = None) -> dict:
        """One measured ``/completion``: greedy, no prompt cache, EOS ignored; ``banned`` token ids
        are never generated (``logit_bias`` false; see :mod:`llamaforge.models.utf8`); ``overrides``
        replace fields of the request body (the engine-gap variants, :mod:`llamaforge.bench.engine_gap`)."""
        body = completion_body(prompt, n_predict, banned, overrides)
        if body.get("stream"):
            return self._complete_stream(body, timeout=timeout)
        d = self._request("POST", "/completion", timeout=timeout, json=body)
        if not isinstance(d, dict) or "timings" not in d:
            raise PointFailure("bad-response", "/completion answered without timings",
                               read_log_tail(self.log_path))
        return d

    def _complete_stream(self, body: dict, *, timeout: float) -> dict:
        """A streamed ``/completion`` (server-sent events): the final event (with the server's ``timings``)
        plus ``client``: when this client saw the first and the last generated token and how many it got."""
        t_sent = time.monotonic()
        try:
            with self._http.post(self.url + "/completion", json=body, timeout=timeout, stream=True) as r:
                if r.status_code != 200:
                    tail = read_log_tail(self.log_path)
                    cls = "oom" if classify_failure(tail, phase="request") == "oom" else "bad-response"
                    raise PointFailure(cls, f"/completion answered HTTP {r.status_code}: {r.text[:300]}", tail)
                final, client = read_events(r.iter_lines(chunk_size=None))
        except requests.Timeout as e:
            raise PointFailure("hang", f"streamed /completion did not finish within {timeout:.0f} s",
                               read_log_tail(self.log_path)) from e
        except requests.RequestException as e:   # as _request: a server that died mid-stream is a crash
            time.sleep(0.3)
            rc = self.proc.poll()
            tail = read_log_tail(self.log_path)
            cls = classify_failure(tail, returncode=rc if rc is not None else -1, phase="request")
            raise PointFailure(cls, f"streamed /completion failed: {type(e).__name__}"
                               + (f" (server exited with status {rc})" if rc is not None else "") + self._fault(rc),
                               tail) from e
        if final is None or "timings" not in final:
            time.sleep(0.3 if final is None else 0)
            rc = self.proc.poll()      # a stream cut short by a dying server is that server's crash
            tail = read_log_tail(self.log_path)
            cls = classify_failure(tail, returncode=rc, phase="request") if rc is not None else "bad-response"
            raise PointFailure(cls, "streamed /completion ended without timings"
                               + (f" (server exited with status {rc})" if rc is not None else "") + self._fault(rc), tail)
        return {**final, "client": {"t_sent": t_sent, **client}}


def completion_body(prompt: list[int] | str, n_predict: int, banned: list[int] | None = None,
                    overrides: dict | None = None) -> dict[str, Any]:
    """The body of a measured ``/completion`` (see :meth:`ServerSession.complete`)."""
    body: dict[str, Any] = {"prompt": prompt, "n_predict": n_predict, "ignore_eos": True, "cache_prompt": False,
                            "temperature": 0, "stream": False}
    if banned:
        body["logit_bias"] = [[int(t), False] for t in banned]
    body.update(overrides or {})
    return body


def read_events(lines: Any) -> tuple[dict | None, dict]:
    """The final event of a server-sent-event stream of ``/completion`` and what the client saw: the
    arrival times (monotonic s) of the first and the last event that carried tokens, the tokens in the
    first such event and in all of them, and ``gaps_ms``: per later token event, the time since the one
    before it divided by its tokens (the inter-token latency as the client sees it), and ``server_gaps_ms``: the
    same gaps as llama-server timed them, where its events carry their timings (``timings_per_token``): the
    generation time between two events over the tokens between them. A client that was not scheduled for a
    while reads several events at once and sees gaps near 0 between them; the server's own clock does not."""
    final: dict | None = None
    first = last = None
    n_first = n_all = 0
    gaps: list[float] = []
    server: list[float] = []
    prev: tuple[float, float] | None = None     # the last event's (predicted_n, predicted_ms)
    for raw in lines:
        line = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)
        if not line.startswith("data:"):
            continue
        try:
            ev = json.loads(line[5:].strip())
        except ValueError:
            continue
        if not isinstance(ev, dict):
            continue
        n = len(ev.get("tokens") or [])
        if n:
            now = time.monotonic()
            if first is None:
                first, n_first = now, n
            else:
                gaps.append(round((now - last) * 1000.0 / n, 3))
            last = now
            n_all += n
        t = ev.get("timings") if n and not ev.get("stop") else None
        if isinstance(t, dict) and isinstance(t.get("predicted_n"), int | float) \
                and isinstance(t.get("predicted_ms"), int | float):
            cur = (float(t["predicted_n"]), float(t["predicted_ms"]))
            if prev is not None and cur[0] > prev[0]:
                server.append(round((cur[1] - prev[1]) / (cur[0] - prev[0]), 3))
            prev = cur
        if ev.get("stop"):
            final = ev
            break
    return final, {"t_first": first, "t_last": last, "n_first": n_first, "n_tokens": n_all, "gaps_ms": gaps,
                   "server_gaps_ms": server}
