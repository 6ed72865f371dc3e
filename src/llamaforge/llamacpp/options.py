"""What each built binary supports: its ``--help``, read once and kept in the build manifest.

llama.cpp's options appear, change and vanish across its history (``-ncmoe`` arrived in Aug 2025,
``--fit``/``-fitt`` and ``llama-fit-params`` around Dec 2025), so every command line llamaforge
builds is checked against what *that* binary says it accepts. :func:`probe_build` runs
``--help`` of llama-server, llama-bench and llama-fit-params (when built) and returns the option
names per tool — the manifest's ``options`` entry; :func:`build_options` gives them for any build
(probing builds made before this existed once, and adding them to their manifest).

:class:`BinaryOptions` answers the questions the bench asks (``has -ncmoe?``, ``can fit?``) and
:func:`ncmoe_overrides` gives the ``-ot`` equivalent of ``-ncmoe N`` for binaries without it:
exactly llama.cpp's own definition (``common/common.h``: ``llm_add_n_cpu_ffn_overrides`` adds one
override ``blk\\.<i>\\.ffn_(up|down|gate|gate_up)_(ch|)exps`` → the CPU buffer for each of the first N
layers; older trees spelled the group ``ffn_(up|down|gate)_exps``, which the newer one contains).
"""

from __future__ import annotations

import contextlib
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from .. import proc
from ..errors import BuildError

TOOLS = ("llama-server", "llama-bench", "llama-fit-params")
REQUIRED = ("llama-server", "llama-bench")

#: llama.cpp's LLM_FFN_EXPS_REGEX (common/common.h) — what ``-ncmoe`` keeps on the CPU per layer
FFN_EXPS_REGEX = r"\.ffn_(up|down|gate|gate_up)_(ch|)exps"
#: the name of the CPU buffer type (``ggml_backend_cpu_buffer_type()``) in ``-ot`` values
CPU_BUFFER = "CPU"

_FLAG = re.compile(r"(?<![\w-])(--?[A-Za-z][\w-]*)")
# an option line of `--help`: indented (or not) and starting with a dash, e.g.
# "  -ncmoe, --n-cpu-moe N   keep ..." (llama-server) or "  -ncmoe, --n-cpu-moe <n>   (default: 0)"
_OPTION_LINE = re.compile(r"^\s*(-{1,2}[A-Za-z][\w-]*(?:[ ,]+-{1,2}[A-Za-z][\w-]*)*)")


def parse_help(text: str) -> list[str]:
    """The option names (``-x``, ``--xyz``) that a ``--help`` text declares at the start of its lines.

    Only names at the start of an option line count, so a flag merely mentioned in another one's
    description (``(for MoE expert weights use --n-cpu-moe)``) is not taken as supported."""
    out: set[str] = set()
    for line in text.splitlines():
        m = _OPTION_LINE.match(line)
        if m:
            out.update(_FLAG.findall(m.group(1)))
    return sorted(out)


@lru_cache(maxsize=64)
def _help(binary: str, env_items: tuple[tuple[str, str], ...]) -> frozenset[str]:
    return frozenset(parse_help(proc.run([binary, "--help"], env=dict(env_items), timeout=120).output))


def help_flags(binary: Path, env: dict[str, str] | None = None) -> frozenset[str]:
    """The options ``binary --help`` declares (cached per binary and environment); for a binary that
    is not (yet) part of a build with a manifest — the smoke run's, before the manifest is written."""
    return _help(str(binary), tuple(sorted((env or {}).items())))


def ncmoe_overrides(n: int) -> list[str]:
    """``-ot`` entries equivalent to ``-ncmoe n``: the experts of layers 0..n-1 on the CPU."""
    return [rf"blk\.{i}{FFN_EXPS_REGEX}={CPU_BUFFER}" for i in range(n)]


@dataclass(frozen=True)
class BinaryOptions:
    """The options of one build's binaries (``None`` for a tool the build lacks)."""

    server: frozenset[str]
    bench: frozenset[str]
    fit_params: frozenset[str] | None = None

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> BinaryOptions:
        fp = d.get("llama-fit-params")
        return cls(frozenset(d.get("llama-server") or ()), frozenset(d.get("llama-bench") or ()),
                   frozenset(fp) if fp is not None else None)

    def of(self, tool: str) -> frozenset[str]:
        return {"llama-server": self.server, "llama-bench": self.bench}.get(tool, self.fit_params or frozenset())

    @property
    def server_ncmoe(self) -> bool:
        return "--n-cpu-moe" in self.server

    @property
    def server_fit(self) -> bool:
        """llama-server fits unset arguments to free memory (``--fit``, on by default, with ``-fitt``)."""
        return "--fit" in self.server or "--fit-target" in self.server

    @property
    def bench_ncmoe(self) -> bool:
        return "--n-cpu-moe" in self.bench

    @property
    def has_fit_params(self) -> bool:
        return self.fit_params is not None

    def ncmoe_args(self, tool: str, n: int) -> list[str]:
        """``-ncmoe n`` for ``tool``, or its ``-ot`` equivalent when the binary has no ``-ncmoe``.

        llama-server takes ``-ot A=CPU,B=CPU``; llama-bench separates the overrides of one run with
        ``;`` (``,`` separates alternative runs there). Raises :class:`BuildError` when neither exists."""
        flags = self.of(tool)
        if "--n-cpu-moe" in flags:
            return ["--n-cpu-moe", str(n)]
        if n == 0:
            return []
        if "--override-tensor" in flags or "-ot" in flags:
            sep = ";" if tool == "llama-bench" else ","
            return ["--override-tensor" if "--override-tensor" in flags else "-ot", sep.join(ncmoe_overrides(n))]
        raise BuildError(f"this {tool} has neither -ncmoe nor -ot (--override-tensor), so experts cannot be "
                         "kept on the CPU", "use a llama.cpp from April 2025 or later (pick another pin)")

    def ot_args(self, tool: str, entries: tuple[str, ...] | list[str]) -> list[str]:
        """``-ot PATTERN=BUF,…`` for ``tool`` (llama-bench: ``;`` between the overrides of one run); a
        placement strategy's overrides (:mod:`.placement`). Raises :class:`BuildError` without ``-ot``."""
        flags = self.of(tool)
        if "--override-tensor" not in flags and "-ot" not in flags:
            raise BuildError(f"this {tool} has no -ot (--override-tensor), so experts cannot be placed",
                             "use a llama.cpp from April 2025 or later (pick another pin)")
        sep = ";" if tool == "llama-bench" else ","
        return ["--override-tensor" if "--override-tensor" in flags else "-ot", sep.join(entries)]

    def offload_args(self, tool: str, ncmoe: int, ngl: int, *, fitt: str | None = None,
                     threads: int | None = None, ot: tuple[str, ...] | list[str] = ()) -> list[str]:
        """The offload arguments every engine passes, one encoding for llama-server, llama-bench and
        llama-fit-params: ``-ncmoe`` (or its ``-ot`` equivalent, :meth:`ncmoe_args`) for a point with
        experts on the CPU — at ncmoe 0 nothing (llama.cpp's default, so a dense model's command line
        carries no MoE option); ``-ngl`` only when set (``-1`` = llama.cpp's default, all layers);
        ``--fit-target`` only when the caller passes one (the decision is
        :func:`llamaforge.bench.fit.fitt_for`'s; llama-bench never gets one); ``-t`` when given.
        A placed point (``ot``: its strategy's ``-ot`` entries) passes those instead of ``-ncmoe``.
        Raises :class:`BuildError` when the binary cannot keep experts on the CPU and ``ncmoe`` asks it to."""
        args = self.ot_args(tool, ot) if ot else self.ncmoe_args(tool, ncmoe) if ncmoe else []
        if ngl != -1:
            args += ["-ngl", str(ngl)]
        if fitt is not None:
            args += ["--fit-target", fitt]
        if threads:
            args += ["-t", str(threads)]
        return args

    def to_dict(self) -> dict[str, list[str] | None]:
        return {"llama-server": sorted(self.server), "llama-bench": sorted(self.bench),
                "llama-fit-params": sorted(self.fit_params) if self.fit_params is not None else None}


def probe_binary(exe: Path, env: dict[str, str] | None = None) -> list[str]:
    """The options ``exe --help`` declares; :class:`BuildError` (with the output's last line) when
    it cannot be run or its help lists no options we can read."""
    try:
        r = proc.run([exe, "--help"], env=env, timeout=120)
    except OSError as e:
        raise BuildError(f"cannot run {exe.name} --help: {e}", f"check that {exe} is a working llama.cpp binary") from e
    flags = parse_help(r.output)
    if "--model" not in flags and "-m" not in flags:
        last = next((ln.strip() for ln in reversed(r.output.splitlines()) if ln.strip()),
                    "no output" if not r.timed_out else "timed out")
        raise BuildError(f"cannot read the options of {exe.name}: its --help lists no -m/--model option "
                         f"(exit {r.returncode}: {last[:160]})",
                         f"run `{exe} --help` by hand; rebuild with `llamaforge build --rebuild` if it is broken")
    return flags


def probe_build(build: Any, *, strict: bool = True) -> dict[str, list[str] | None]:
    """``--help`` options of every tool of ``build`` (``None`` for a tool it lacks; with ``strict``,
    a missing llama-server or llama-bench is an error)."""
    out: dict[str, list[str] | None] = {}
    for tool in TOOLS:
        try:
            exe = Path(build.binary(tool))
        except Exception:   # noqa: BLE001 - BuildError / BenchError: the tool is not part of this build
            exe = None
        if exe is None or not exe.exists():
            if strict and tool in REQUIRED:
                raise BuildError(f"{tool} is not part of build {build.key}",
                                 f"rebuild with `llamaforge build --backends {build.backend} --rebuild`")
            out[tool] = None
            continue
        out[tool] = probe_binary(exe, build.env)
    return out


_PROBED: dict[tuple[str, str], BinaryOptions] = {}


def build_options(build: Any) -> BinaryOptions:
    """The options of ``build``'s binaries: from its manifest, else probed once (then added to the
    manifest when it is ours and writable, so the next process reads them)."""
    m = build.manifest or {}
    if isinstance(m.get("options"), dict):
        return BinaryOptions.from_dict(m["options"])
    cache_key = (str(build.dir), build.key)
    if cache_key not in _PROBED:
        probed = probe_build(build, strict=False)
        _PROBED[cache_key] = BinaryOptions.from_dict(probed)
        m["options"] = probed
        if not m.get("external"):
            from ..files import write_json_atomic

            manifest_file = Path(build.dir) / "manifest.json"
            if manifest_file.is_file():
                with contextlib.suppress(OSError):
                    write_json_atomic(manifest_file, m)
    return _PROBED[cache_key]
