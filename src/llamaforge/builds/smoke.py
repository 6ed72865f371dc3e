"""Smoke run of a build: does it load a model and generate, through llama-server AND llama-bench?

Every build is smoke-run after building and by ``verify`` (model or not): a tiny synthetic model
(``synth:tiny-qwen35moe``, ~22 MB, generated once into the model cache) is loaded by llama-server
(``-c 512``, one short ``/completion`` of a few tokens) and by llama-bench (``-p 0 -n 4 -r 1``;
for GPU backends with every expert on the CPU, so the CPU weight path runs too). A few seconds.

A run that only times out (no crash, no wrong answer) gives status ``timeout``: recorded and
warned about, but the build is not marked broken — on a busy machine a CPU Vulkan device
(lavapipe) compiles its pipelines slowly, and a false "broken" would block every later step.

When a run crashes (the process died: a signal or an abnormal exit), the known workarounds of
:mod:`llamaforge.llamacpp.quirks` are tried in order; the first one with which both binaries pass is
returned as the build's quirk, with its evidence. Nothing is recorded for a quirk that does not
help. Logs go to ``<build>/smoke/``.
"""

from __future__ import annotations

import re
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from .. import proc
from ..backends import find as find_backend
from ..console import console, esc, notice, verbose_enabled
from ..errors import LlamaforgeError
from ..llamacpp.llamabench import parse_results
from ..llamacpp.options import help_flags
from ..llamacpp.quirks import QUIRKS, Applied, Quirk, exit_status_in, likely_cause, signal_name
from ..llamacpp.server import PointFailure, ServerSession, read_log_tail
from ..paths import cache_root
from .hostcpu import native_cpu

SMOKE_MODEL = "synth:tiny-qwen35moe"
SMOKE_PROMPT = "The quick brown fox jumps over the lazy dog. Once upon a time"
SMOKE_N_PREDICT = 4
SMOKE_CTX = 512
SERVER_TIMEOUT_S = 300.0
BENCH_TIMEOUT_S = 300.0


@dataclass
class Part:
    """One binary's smoke run."""

    binary: str
    ok: bool
    command: list[str] = field(default_factory=list)
    returncode: int | None = None
    signal: str | None = None
    detail: str = ""
    log_tail: str = ""
    log: str | None = None
    tokens: int | None = None
    seconds: float | None = None
    timed_out: bool = False
    skipped: bool = False       # not run: this binary cannot take the workaround being tried

    @property
    def died(self) -> bool:
        """The process died on its own (signal or non-zero exit), as opposed to a hang or a bad answer."""
        return self.returncode not in (None, 0)


@dataclass
class Attempt:
    quirks: list[str]
    server: Part
    bench: Part

    @property
    def ok(self) -> bool:
        return self.server.ok and (self.bench.ok or self.bench.skipped)

    @property
    def died(self) -> bool:
        return self.server.died or self.bench.died

    def failed_parts(self) -> list[Part]:
        return [p for p in (self.server, self.bench) if not p.ok and not p.skipped]

    @property
    def only_timed_out(self) -> bool:
        return all(p.timed_out for p in self.failed_parts())


@dataclass
class SmokeResult:
    status: str                                  # ok | failed | timeout | skipped
    model: str | None = None
    attempts: list[Attempt] = field(default_factory=list)
    quirks: list[Applied] = field(default_factory=list)
    error: str | None = None
    log_tail: str = ""
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def to_dict(self) -> dict:
        d = asdict(self)
        d["quirks"] = [q.to_dict() for q in self.quirks]
        d["ok"] = self.ok
        return d


# ------------------------------------------------------------------------------------ parts

def _tail(text: str, n: int = 25) -> str:
    return "\n".join((text or "").rstrip().splitlines()[-n:])


def run_server(binary: Path, model: Path, env: dict[str, str], extra: list[str], log_path: Path,
               timeout_s: float | None = None) -> Part:
    """Load ``model`` in llama-server and generate a few tokens."""
    timeout_s = timeout_s or SERVER_TIMEOUT_S
    flags = help_flags(binary, env)
    args = ["-m", str(model), "-np", "1", "-c", str(SMOKE_CTX)]
    if "--no-webui" in flags:
        args.append("--no-webui")
    args += extra
    part = Part("llama-server", False, [str(binary), *args], log=str(log_path))
    t0 = time.monotonic()
    session = None
    try:
        session = ServerSession.start(binary, args, log_path, env=env, load_timeout_s=timeout_s)
        part.command = session.args
        resp = session.complete(SMOKE_PROMPT, SMOKE_N_PREDICT, timeout=timeout_s)
        n = (resp.get("timings") or {}).get("predicted_n")
        part.tokens = n
        part.ok = n == SMOKE_N_PREDICT
        if not part.ok:
            part.detail = f"/completion generated {n} tokens, not {SMOKE_N_PREDICT}"
    except PointFailure as e:
        part.detail = e.detail
        part.timed_out = e.cls in ("hang", "unhealthy") and "status" not in e.detail
        part.log_tail = e.log_tail or read_log_tail(log_path)
        part.returncode = exit_status_in(e.detail)
        if part.returncode is None and session is not None:
            part.returncode = session.proc.poll()
    finally:
        if session is not None:
            rc = session.proc.poll()      # died on its own before we stopped it?
            session.stop()
            if not part.ok and part.returncode is None and rc is not None:
                part.returncode = rc
                part.log_tail = read_log_tail(log_path)
    part.seconds = round(time.monotonic() - t0, 2)
    part.signal = signal_name(part.returncode)
    if not part.ok and not part.log_tail:
        part.log_tail = read_log_tail(log_path)
    return part


def run_bench(binary: Path, model: Path, env: dict[str, str], extra: list[str], log_path: Path,
              cpu_moe_layers: int | None = None, timeout_s: float | None = None) -> Part:
    """A one-repetition llama-bench of a short prompt and a few generated tokens."""
    timeout_s = timeout_s or BENCH_TIMEOUT_S
    # generation only (-p 0): the server part already processes a prompt, and every extra llama-bench
    # test costs a warm-up run and, on lavapipe, slow pipeline compiles
    args = [str(binary), "-m", str(model), "-p", "0", "-n", str(SMOKE_N_PREDICT), "-r", "1", "-o", "jsonl"]
    if cpu_moe_layers and "--n-cpu-moe" in help_flags(binary, env):
        args += ["--n-cpu-moe", str(cpu_moe_layers)]
    args += extra
    part = Part("llama-bench", False, args, log=str(log_path))
    log_path.parent.mkdir(parents=True, exist_ok=True)
    log_path.write_text("")
    r = proc.run(args, env=env, timeout=timeout_s, log_path=log_path)
    part.seconds = round(r.seconds, 2)
    if r.timed_out:
        part.timed_out = True
        part.detail = f"llama-bench did not finish within {timeout_s:.0f} s"
    else:
        part.returncode = r.returncode
        rows = parse_results(r.output)
        gen = [o for o in rows if int(o.get("n_gen") or 0) == SMOKE_N_PREDICT and o.get("avg_ts")]
        part.ok = r.returncode == 0 and bool(gen)
        part.tokens = SMOKE_N_PREDICT if gen else None
        if not part.ok:
            part.detail = (f"llama-bench exited with status {r.returncode}" if r.returncode != 0
                           else "llama-bench printed no generation result")
    part.signal = signal_name(part.returncode)
    if not part.ok:
        part.log_tail = _tail(r.output)
    return part


# ---------------------------------------------------------------------------------- attempts

def _cpu_moe_layers(build: Any, model: Path) -> int | None:
    """For GPU backends: the model's layer count, so llama-bench runs every expert on the CPU."""
    backend = find_backend(build.backend)
    if backend is not None and not backend.offloads:
        return None
    try:
        from ..models import model_facts

        return int(model_facts(model).n_layers or 0) or None
    except Exception:  # noqa: BLE001 - a decoration of the smoke run, never its failure
        return None


def log_dir_for(build: Any) -> Path:
    """``<build>/smoke/`` for our builds; a temporary folder for external ones (``--bin-dir``) and
    read-only build folders."""
    d = Path(build.dir) / "smoke"
    try:
        if (build.manifest or {}).get("external"):
            raise OSError("not our folder")
        d.mkdir(parents=True, exist_ok=True)
        probe = d / ".w"
        probe.write_text("")
        probe.unlink()
        return d
    except OSError:
        return _spare_log_dir(str(build.key))


def _spare_log_dir(key: str) -> Path:
    """``<cache>/smoke-logs/<key>/``: one folder a build, which its next smoke run reuses (a temporary folder
    only when the cache cannot take it), so smoke runs of external builds leave no folder behind each time."""
    safe = re.sub(r"[^A-Za-z0-9._-]", "_", key)[:120].strip(".") or "build"
    try:
        d = cache_root() / "smoke-logs" / safe
        d.mkdir(parents=True, exist_ok=True)
        return d
    except (OSError, LlamaforgeError):
        return Path(tempfile.mkdtemp(prefix=f"llamaforge-smoke-{safe}-"))


def attempt(build: Any, model: Path, env: dict[str, str], quirks: list[Quirk], log_dir: Path,
            skip_bench: str | None = None) -> Attempt:
    """Both smoke parts with ``quirks``' arguments; ``skip_bench`` (why) leaves llama-bench out:
    it cannot take the workaround, so running it would only repeat its crash."""
    names = [q.name for q in quirks]
    tag = "-".join(names) or "plain"
    srv_extra = [a for q in quirks for a in q.args_for("llama-server")]
    bench_extra = [a for q in quirks for a in q.args_for("llama-bench")]
    server = run_server(build.binary("llama-server"), model, env, srv_extra, log_dir / f"server-{tag}.log")
    if skip_bench:
        bench = Part("llama-bench", False, detail=f"not run: {skip_bench}", skipped=True)
    else:
        bench = run_bench(build.binary("llama-bench"), model, env, bench_extra, log_dir / f"bench-{tag}.log",
                          cpu_moe_layers=_cpu_moe_layers(build, model))
    return Attempt(names, server, bench)


def _lacking(build: Any, env: dict[str, str], q: Quirk) -> dict[str, list[str]]:
    """binary → the quirk's options that this build's binary lacks (llama-fit-params only when built)."""
    out: dict[str, list[str]] = {}
    for binary in q.args:
        try:
            exe = Path(build.binary(binary))
        except Exception:  # noqa: BLE001 - BuildError/BenchError: a tool this build does not have
            continue
        if binary == "llama-fit-params" and not exe.exists():
            continue
        missing = q.lacking(binary, help_flags(exe, env))
        if missing:
            out[binary] = missing
    return out


def _not_tried(build: Any, first: Attempt, q: Quirk, lacking: dict[str, list[str]]) -> str | None:
    """Why ``q`` cannot be tried on this build (None: it can). llama-server must take it (bench's
    default engine, and the part a retry can prove); a llama-bench that cannot is left out of the
    retry only when llama-server crashed too (else the retry would prove nothing)."""
    backend = find_backend(build.backend)
    if backend is not None and q not in backend.quirks:
        return f"quirk {q.name} not tried: not for {build.backend} builds"
    if "llama-server" in lacking:
        return f"quirk {q.name} not tried: this build's llama-server lacks {' '.join(lacking['llama-server'])}"
    if "llama-bench" in lacking and not first.server.died:
        return (f"quirk {q.name} not tried: this build's llama-bench lacks {' '.join(lacking['llama-bench'])} "
                "and llama-server did not crash")
    return None


def _evidence(failed: Attempt) -> dict:
    parts = failed.failed_parts()
    text = "\n".join(p.log_tail for p in parts)
    rc = next((p.returncode for p in parts if p.died), None)
    cause = likely_cause(text, rc)
    return {"failed": [p.binary for p in parts], "returncode": rc, "signal": signal_name(rc),
            "detail": "; ".join(f"{p.binary}: {p.detail}" for p in parts),
            "cause": cause[0] if cause else None,
            "log_lines": cause[2] if cause else _tail(text, 5).splitlines()}


def _describe(a: Attempt) -> str:
    p = a.failed_parts()[0]
    out = p.detail + (f" ({p.signal})" if p.signal and p.signal not in p.detail else "")
    cause = likely_cause(p.log_tail, p.returncode)
    if cause:
        out += f"; likely cause: {cause[1]}"
    return out


def _cc_major(build: Any) -> int | None:
    """The major version of the gcc that compiled ``build`` (its manifest's toolchain), ``None`` when it is not
    known to be gcc (clang, an external build, an older manifest)."""
    cc = ((getattr(build, "manifest", None) or {}).get("toolchain") or {}).get("cc") or {}
    path, version = str(cc.get("path") or ""), str(cc.get("version") or "")
    try:
        name = Path(path).resolve().name if path else ""
    except OSError:
        name = Path(path).name
    m = re.match(r"(\d+)\.", version)
    return int(m.group(1)) if m and "clang" not in name.lower() and path else None


def known_issue(build: Any, q: Quirk) -> str | None:
    """The quirk's known issue where this host and build show it (an AMX CPU, a gcc < 13 build), else ``None``."""
    if not q.known_issue or not any(f.startswith(q.known_isa) for f in native_cpu()["isa"]):
        return None
    major = _cc_major(build)
    return q.known_issue if major is not None and major < 13 else None


def recovery_line(build: Any, q: Quirk) -> str:
    """The one calm line for a smoke run the quirk rescued: what was detected, what was done, where it is
    documented — ``<key>: smoke run crashed in the CPU repack path (known AMX + gcc-12 issue); re-ran with the
    no-repack quirk: ok — see docs/builds.md#runtime-quirks``."""
    site = f" in {q.crash_site}" if q.crash_site else ""
    known = known_issue(build, q)
    return (f"{build.key}: smoke run crashed{site}" + (f" ({known})" if known else "")
            + f"; re-ran with the {q.name} quirk: ok — see {q.docs}")


def _record(res: SmokeResult, build: Any, first: Attempt, q: Quirk, lacking: dict[str, list[str]]) -> None:
    """``q`` made the build run: record it (with the binaries that cannot take it, said loudly)."""
    ev = _evidence(first)
    ran = "llama-server" + ("" if "llama-bench" in lacking else " and llama-bench")
    ev["with_quirk"] = f"{ran} ran"
    res.quirks = [Applied(q.name, q.summary, {b: list(v) for b, v in q.args.items() if b not in lacking}, ev,
                          {b: list(q.args[b]) for b in lacking})]
    res.status = "ok"
    res.notes.append(f"the {q.name} workaround made the build run: recorded as a quirk")
    console.print(esc(recovery_line(build, q)), soft_wrap=True)
    if verbose_enabled():
        notice(f"{build.key}: the first smoke run: {res.error}; the {q.name} quirk is recorded (bench applies it)")
    if "llama-bench" in lacking:
        msg = (f"this build's llama-bench has no {' '.join(lacking['llama-bench'])}, so it cannot avoid the crash: "
               "bench measures this build with llama-server only (`--engine server`), or rebuild with `--no-amx`")
        res.notes.append(msg)
        notice(f"{build.key}: {msg}")


def run_smoke(build: Any, model: Path, env: dict[str, str], *, quirks: bool = True,
              registry: tuple[Quirk, ...] = QUIRKS) -> SmokeResult:
    """Smoke-run ``build`` on ``model``; on a crash try the registry's workarounds (see module doc)."""
    log_dir = log_dir_for(build)
    res = SmokeResult("failed", str(model))
    first = attempt(build, model, env, [], log_dir)
    res.attempts.append(first)
    if first.ok:
        res.status = "ok"
        return res
    res.error = _describe(first)
    res.log_tail = "\n".join(p.log_tail for p in first.failed_parts())
    if first.only_timed_out:   # a busy machine, or a slow first start (e.g. lavapipe's shaders): once more
        notice(f"{build.key}: smoke run timed out ({res.error}); trying once more")
        again = attempt(build, model, env, [], log_dir)
        res.attempts.append(again)
        if again.ok:
            res.status, res.error, res.log_tail = "ok", "", ""
            res.notes.append(f"the first smoke run timed out ({_describe(first)}); the second ran")
            return res
        first = again   # what the second attempt did decides (a crash there goes to the workarounds)
        res.error = _describe(first)
        res.log_tail = "\n".join(p.log_tail for p in first.failed_parts())
    if first.only_timed_out:
        res.status = "timeout"
        res.notes.append("the smoke run did not finish in time (a busy machine?); the build is not marked broken")
        notice(f"{build.key}: smoke run timed out ({res.error}); not marked broken — `llamaforge verify` retries")
        return res
    if not first.died or not quirks:
        return res
    for q in registry:
        lacking = _lacking(build, env, q)
        why_not = _not_tried(build, first, q, lacking)
        if why_not:
            res.notes.append(why_not)
            continue
        if verbose_enabled():   # the crash itself only when asked: a rescued build says so in one calm line (_record)
            notice(f"{build.key}: smoke run crashed ({res.error}); retrying with the {q.name} workaround")
        skip = (f"this llama-bench has no {' '.join(lacking['llama-bench'])}" if "llama-bench" in lacking else None)
        a = attempt(build, model, env, [q], log_dir, skip_bench=skip)
        res.attempts.append(a)
        if a.ok:
            _record(res, build, first, q, lacking)
            return res
        res.notes.append(f"quirk {q.name} did not help: {_describe(a)}")
        notice(f"{build.key}: the {q.name} workaround did not help ({_describe(a)})")
    return res
