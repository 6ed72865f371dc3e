"""What a benchmark run measures: the :class:`Plan` (builds × points × engine × repeats × prompt).

A plan is pure data. Its stored form is the record :class:`records.RunPlan` (``runs.plan_json``):
``Plan.to_record()`` writes it (what the store keeps and the report reads), ``Plan.from_record`` rebuilds
the plan from it for ``--resume`` and ``reproduce``; there is no other plan shape. Its fit options are the
record's own :class:`records.FitSection` (``FitOptions``).

Offload points are written like llama-bench ranges, but inclusive and Python-ish:
``0:40`` (0..40), ``0:40:2`` (0, 2, ..., 40), ``0,2,5-8`` (0, 2, 5, 6, 7, 8), ``12``. Every value
must lie in ``0..n_layers`` of the model (``-ncmoe N`` moves the experts of the first N layers to
the CPU; N = n_layers moves all of them).

Why ``n_predict`` defaults to 128 (the seed generated up to 6,144 tokens): generation speed is a
steady-state rate that 128 tokens already measure well (the per-token time is flat after the first
few tokens), and a point then takes seconds instead of minutes, so repeats and full 0..40 sweeps are
affordable. What 128 does *not* show is how tg falls as the context fills during a long answer; for
that, raise ``--n-predict`` (or measure llama-bench depths with ``-d``).
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from ..errors import BenchError
from ..models import model_facts
from ..models import resolve_model as resolve
from ..models.refs import download_record
from ..records import RECORD_VERSION, FitSection, ModelFacts, ModelSection, RunPlan
from ..redact import redact_url
from .argcheck import check_extra

ENGINES = ("server", "llama-bench", "both")   # both: llama-server, then llama-bench as a cross-check
DEFAULT_REPEATS = 3
DEFAULT_PROMPT_TOKENS = 2500
DEFAULT_N_PREDICT = 128
#: server starts per point for ``llamaforge bench`` (the Plan default stays 1 for callers that
#: replicate themselves, such as compare's rounds and bisect's probes)
DEFAULT_LAUNCHES = 2


@runtime_checkable
class BuildLike(Protocol):
    """What the bench needs from a build (``llamaforge.builds.Build`` satisfies it)."""

    key: str
    backend: str
    commit: str
    pin: str
    dir: Path
    manifest: dict

    def binary(self, name: str) -> Path: ...

    @property
    def env(self) -> dict[str, str]: ...


@dataclass(frozen=True)
class PointSpec:
    """One offload setting to measure. ``ngl=-1`` means llama.cpp's default (all layers).
    ``extra_args`` are added for this point only (rarely needed; used to inject faults in tests)."""

    ncmoe: int
    ngl: int = -1
    extra_args: tuple[str, ...] = ()

    def to_dict(self) -> dict:
        d: dict[str, Any] = {"ncmoe": self.ncmoe, "ngl": self.ngl}
        if self.extra_args:
            d["extra_args"] = list(self.extra_args)
        return d

    @classmethod
    def from_dict(cls, d: dict) -> PointSpec:
        return cls(int(d["ncmoe"]), int(d.get("ngl", -1)), tuple(d.get("extra_args") or ()))


#: how llama.cpp fits the context: the plan's options are their stored record (``target()`` is the ``-fitt`` value)
FitOptions = FitSection


@dataclass
class Plan:
    model_ref: str
    model_path: Path
    model_facts: ModelFacts          # a dict (a stored ``ModelFacts``) given here is read into the record
    points: list[PointSpec]
    backends: list[str] = field(default_factory=lambda: ["cpu"])
    pins: list[str] = field(default_factory=lambda: ["default"])
    engine: str = "server"
    repeats: int = DEFAULT_REPEATS
    prompt_tokens: int = DEFAULT_PROMPT_TOKENS
    n_predict: int = DEFAULT_N_PREDICT
    fit: FitOptions = field(default_factory=FitOptions)
    extra_args: list[str] = field(default_factory=list)
    threads: int | None = None
    load_timeout_s: float = 600.0
    request_timeout_s: float = 900.0
    warmup: bool = True
    bench_depths: list[int] = field(default_factory=list)   # llama-bench -d
    ctx: int | None = None        # -c for every point (else llama.cpp fits it, where the build can)
    build_keys: list[str] = field(default_factory=list)     # filled when the run starts
    launches: int = 1                   # server starts per point (K); with ``sequential``: the first K of each point
    # --launches auto: {"max_launches", "precision", "min_effect"} (bench.sequential adds starts where a verdict is open)
    sequential: dict | None = None
    seed: int | None = None             # schedule seed (drawn and recorded when the run starts)
    sentinel_every: int | None = None   # None = automatic (see bench.schedule); 0 = off
    # how a downloaded model was checked ({"sha256", "verified", "checked_against", ...}); read from the
    # model cache's record when not given; None for models llamaforge did not download
    model_download: dict | None = None
    quirks: bool = True                                     # apply recorded quirks / CPU-Vulkan defaults
    runtime: dict[str, dict] = field(default_factory=dict)  # per build key: bench.adjust.Runtime
    # --variant: one record per variant (llamaforge.variants.VariantBuild.to_record: name, backend, pin, defines,
    # env, args, build key, device listings); its points carry the variant's name as their label
    variants: list[dict] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not isinstance(self.model_facts, ModelFacts):
            self.model_facts = ModelFacts.from_json(self.model_facts or {}, RECORD_VERSION)
        if self.model_download is None and self.model_ref.startswith(("hf:", "https://", "http://")):
            self.model_download = download_record(self.model_path)
        if self.launches < 1:
            raise BenchError(f"--launches must be at least 1 (got {self.launches})",
                             "e.g. --launches 2 (each point measured in 2 separate server starts)")
        if self.sentinel_every is not None and self.sentinel_every < 0:
            raise BenchError(f"--sentinel-every must be ≥ 0 (got {self.sentinel_every})",
                             "give N > 0 to re-measure the reference points every N launches, or 0 to disable")
        if self.engine not in ENGINES:
            raise BenchError(f"unknown engine {self.engine!r}", f"use one of: {', '.join(ENGINES)}")
        if self.repeats < 1:
            raise BenchError(f"--repeats must be at least 1 (got {self.repeats})", "e.g. --repeats 3")
        if self.n_predict < 1:
            raise BenchError(f"--n-predict must be at least 1 (got {self.n_predict})", "e.g. --n-predict 128")
        if self.prompt_tokens < 8:
            raise BenchError(f"--prompt-tokens must be at least 8 (got {self.prompt_tokens})",
                             "e.g. --prompt-tokens 2500 (short prompts make pp t/s overhead-bound)")
        if not self.points:
            raise BenchError("the plan has no points", "give --ncmoe, e.g. --ncmoe 0:40:2")
        if self.ctx is not None and self.ctx < 16:
            raise BenchError(f"--ctx must be at least 16 tokens (got {self.ctx})",
                             "e.g. --ctx 8192, or leave it out to let llama.cpp fit the context")

    @property
    def n_layers(self) -> int | None:
        v = self.model_facts.n_layers
        return int(v) if v is not None else None

    def to_record(self) -> RunPlan:
        """The plan as its stored record (``runs.plan_json``): what the store keeps, the report reads and
        ``--resume`` measures again (:meth:`from_record`)."""
        fit = self.fit.replace(fitt_arg=self.fit.target())
        return RunPlan(
            model=ModelSection(ref=redact_url(self.model_ref), path=str(self.model_path),
                               facts=ModelFacts.from_json(self.model_facts),
                               download=self.model_download),
            builds=list(self.build_keys), backends=list(self.backends), pins=list(self.pins),
            points=[p.to_dict() for p in self.points], engine=self.engine, repeats=self.repeats,
            prompt_tokens_target=self.prompt_tokens, n_predict=self.n_predict,
            fit=fit.keep_nulls("fitt_mib", "vram_budget_gib", "margins_mib", "fitt_arg", "notice"),
            extra_args=list(self.extra_args), threads=self.threads,
            timeouts={"load_s": self.load_timeout_s, "request_s": self.request_timeout_s}, warmup=self.warmup,
            bench_depths=list(self.bench_depths), launches=self.launches,
            sequential=dict(self.sequential) if self.sequential else None, seed=self.seed,
            sentinel_every=self.sentinel_every, ctx=self.ctx, quirks=self.quirks, runtime=dict(self.runtime),
            variants=[dict(v) for v in self.variants],
        ).keep_nulls("threads", "seed", "sentinel_every", "ctx")

    def to_json(self) -> dict:
        return self.to_record().to_json()

    @classmethod
    def from_record(cls, rec: RunPlan) -> Plan:
        """The plan a stored record describes (``--resume``, ``reproduce``); defaults where an older plan lacks a value."""
        m, t = rec.model, rec.timeouts or {}

        def given(v: Any, default: Any) -> Any:
            return default if v is None else v

        return cls(model_ref=m.ref or "", model_path=Path(m.path or ""), model_facts=ModelFacts.from_json(m.facts),
                   points=[PointSpec.from_dict(p) for p in rec.points],
                   backends=list(rec.backends or ["cpu"]), pins=list(rec.pins or ["default"]),
                   engine=given(rec.engine, "server"), repeats=int(given(rec.repeats, DEFAULT_REPEATS)),
                   prompt_tokens=int(given(rec.prompt_tokens_target, DEFAULT_PROMPT_TOKENS)),
                   n_predict=int(given(rec.n_predict, DEFAULT_N_PREDICT)), fit=FitSection.from_json(rec.fit),
                   extra_args=list(rec.extra_args), threads=rec.threads,
                   load_timeout_s=float(t.get("load_s", 600.0)), request_timeout_s=float(t.get("request_s", 900.0)),
                   warmup=bool(given(rec.warmup, True)), bench_depths=list(rec.bench_depths),
                   build_keys=list(rec.builds), launches=int(rec.launches or 1),
                   sequential=dict(rec.sequential) if isinstance(rec.sequential, dict) else None,
                   seed=rec.seed, sentinel_every=rec.sentinel_every, ctx=int(rec.ctx) if rec.ctx else None,
                   model_download=m.download, quirks=bool(given(rec.quirks, True)), runtime=dict(rec.runtime),
                   variants=[dict(v) for v in rec.variants if isinstance(v, dict)])

    @classmethod
    def from_json(cls, d: dict | RunPlan) -> Plan:
        return cls.from_record(RunPlan.from_json(d))


# ------------------------------------------------------------------------------ parsing options

_INT = r"-?\d+"
MAX_VALUE = 100_000   # no option takes a layer/depth/ctx value beyond this when the model does not bound it
MAX_POINTS = 4096     # values per option: a sweep of more points is a typo, not a plan


def parse_int_list(spec: str | int | None, *, what: str = "--ncmoe", upper: int | None = None,
                   limit: int = MAX_VALUE) -> list[int]:
    """Parse ``0:40``, ``0:40:2``, ``0,2,5-8`` or ``12`` into a sorted list without duplicates.

    Ranges are inclusive at both ends. ``upper`` (the model's layer count) bounds every value, else
    ``limit``; at most :data:`MAX_POINTS` values. Bounds are checked before a range is expanded.
    """
    if spec is None or str(spec).strip() == "":
        raise BenchError(f"empty {what} value", f"e.g. {what} 0:40:2 or {what} 0,2,5-8")
    text = str(spec).replace(" ", "")
    values: list[int] = []
    fix = f"write {what} as A:B (inclusive), A:B:STEP, or a list like 0,2,5-8"
    hi = upper if upper is not None else limit

    def bounded(part: str, a: int, b: int, step: int = 1) -> None:
        # checked before a range is expanded: 0:100000000 must not build a list of 10^8 ints first
        if b > hi:
            where = f"the model's {upper} layers" if upper is not None else f"the largest {what} accepted ({hi})"
            raise BenchError(f"{what} {part} goes beyond {where}", f"use values in 0..{hi}, e.g. {what} 0:{min(hi, 40)}")
        if len(values) + (b - a) // step + 1 > MAX_POINTS * 8:
            raise BenchError(f"{what} {spec} has too many values", f"give at most {MAX_POINTS} values in 0..{hi}")
    for part in text.split(","):
        if not part:
            raise BenchError(f"bad {what} value {spec!r} (empty item)", fix)
        if ":" in part:
            bits = part.split(":")
            if len(bits) not in (2, 3) or not all(re.fullmatch(_INT, b) for b in bits):
                raise BenchError(f"bad {what} range {part!r}", fix)
            a, b = int(bits[0]), int(bits[1])
            step = int(bits[2]) if len(bits) == 3 else 1
            if step <= 0:
                raise BenchError(f"bad {what} range {part!r}: the step must be positive", fix)
            if b < a:
                raise BenchError(f"bad {what} range {part!r}: the end is before the start", fix)
            bounded(part, a, b, step)
            values.extend(range(a, b + 1, step))
        elif re.fullmatch(r"\d+-\d+", part):
            a, b = (int(x) for x in part.split("-"))
            if b < a:
                raise BenchError(f"bad {what} range {part!r}: the end is before the start", fix)
            bounded(part, a, b)
            values.extend(range(a, b + 1))
        elif re.fullmatch(_INT, part):
            bounded(part, int(part), int(part))
            values.append(int(part))
        else:
            raise BenchError(f"bad {what} value {part!r}", fix)
    out = sorted(set(values))
    if len(out) > MAX_POINTS:
        raise BenchError(f"{what} {spec} has {len(out)} values", f"give at most {MAX_POINTS} values in 0..{hi}")
    if what == "--ncmoe" and out and out[0] < 0:
        raise BenchError(f"{what} values must be ≥ 0 (got {out[0]})", fix)
    if upper is not None and out and out[-1] > upper:
        raise BenchError(f"{what} {spec} goes beyond the model's {upper} layers (largest value {out[-1]})",
                         f"use values in 0..{upper}, e.g. {what} 0:{upper}")
    return out


def make_points(ncmoe: str | int, ngl: str | int | None = None, *, n_layers: int | None = None,
                n_experts: int | None = None, model: str = "the model") -> list[PointSpec]:
    """The cross product of the ``-ncmoe`` values and (optionally) ``-ngl`` values.

    ``n_experts == 0`` (a dense model) allows only ``-ncmoe 0``: there are no experts to offload,
    so the layer split is swept with ``--ngl`` instead. ``None``: not known, not checked."""
    ncm = parse_int_list(ncmoe, what="--ncmoe", upper=n_layers)
    if n_experts == 0 and ncm != [0]:
        top = f"0:{n_layers}" if n_layers else "0:N"
        raise BenchError(f"{model} is not a MoE model (no experts), so --ncmoe {ncmoe} has nothing to offload",
                         f"sweep the layers on the GPU with --ngl instead, e.g. --ngl {top} (leave --ncmoe at 0)")
    if ngl is None or str(ngl).strip() == "":
        ngls = [-1]
    else:
        # llama.cpp clamps -ngl to the layer count; 999 ("all") is the customary spelling
        ngls = parse_int_list(ngl, what="--ngl", limit=max(999, (n_layers or 0) + 1))
        if any(v < -1 for v in ngls):
            raise BenchError(f"--ngl values must be ≥ -1 (got {ngl})", "-1 means all layers (llama.cpp's default)")
    return [PointSpec(n, g) for g in ngls for n in ncm]


def split_extra(extra: str | list[str] | None) -> list[str]:
    """``--extra "-fa on --no-warmup"`` → argument list (shell-like quoting, never run by a shell), every
    option on the allow-list of :mod:`.argcheck` (the same list a stored plan's arguments must pass)."""
    if not extra:
        return []
    if isinstance(extra, list):
        args = [str(x) for x in extra]
    else:
        try:
            args = shlex.split(extra)
        except ValueError as e:
            raise BenchError(f"cannot parse --extra {extra!r}: {e}", "quote it like --extra \"-fa on -b 512\"") from e
    return check_extra(args, where="--extra", fix="leave them out: --extra takes options that tune a run, e.g. "
                       "\"-fa on -b 512 --no-mmap\" (the list: llamaforge.bench.argcheck.ALLOWED)")


def resolve_model(ref: str, paths: Any) -> Path:
    """A model reference (path, ``synth:PRESET[:MIX]``, ``hf:…``, URL) → a local GGUF path."""
    return Path(resolve(ref, paths))


def read_facts(path: Path) -> ModelFacts:
    """The facts of a model file (what the plan stores and the report reads)."""
    return model_facts(path)
