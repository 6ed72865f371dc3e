"""What a benchmark run measures: the :class:`Plan` (builds × points × engine × repeats × prompt).

A plan is pure data, and it *is* its stored record: ``Plan`` is :class:`records.RunPlan` (``runs.plan_json``),
what the store keeps, the report reads and ``--resume`` and ``reproduce`` measure again; there is no other
plan shape. A new sweep's plan is made by :func:`make_plan` (the model section from its reference, file and
facts, every value checked by :func:`check_plan`); a stored one is checked again before it is measured
(``bench.stored``). Its points are :class:`records.PointSpec` records, its fit options the record's own
:class:`records.FitSection` (``FitOptions``), its timeouts :class:`records.Timeouts`.

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
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from ..errors import BenchError
from ..models import model_facts
from ..models import resolve_model as resolve
from ..models.refs import download_record
from ..records import (  # noqa: F401 (the defaults, PointSpec and Timeouts: re-exported with the plan)
    DEFAULT_N_PREDICT,
    DEFAULT_PROMPT_TOKENS,
    DEFAULT_REPEATS,
    RECORD_VERSION,
    FitSection,
    ModelFacts,
    ModelSection,
    PointSpec,
    RunPlan,
    Timeouts,
)
from ..redact import redact_url
from .argcheck import check_extra

ENGINES = ("server", "llama-bench", "both")   # both: llama-server, then llama-bench as a cross-check


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


#: how llama.cpp fits the context: the plan's options are their stored record (``target()`` is the ``-fitt`` value)
FitOptions = FitSection
#: the sweep plan is the run-plan record (``runs.plan_json``)
Plan = RunPlan
#: keys a sweep's plan always stores, as ``null`` while unset (as every writer since the first has)
_PLAN_NULLS = ("threads", "seed", "sentinel_every", "ctx")
_FIT_NULLS = ("fitt_mib", "vram_budget_gib", "margins_mib", "fitt_arg", "notice")


def make_plan(model_ref: str, model_path: Path | str, model_facts: dict | ModelFacts,
              points: Sequence[PointSpec], *, backends: Sequence[str] = ("cpu",), pins: Sequence[str] = ("default",),
              model_download: dict | None = None, **options: Any) -> Plan:
    """A new sweep's plan, checked (:func:`check_plan`): the model section from the reference (stored without
    URL secrets), the file and its facts (``ModelFacts.to_dict()`` or the record), and how a downloaded model
    was checked (read from the model cache's record when not given); ``options`` are the plan's other fields."""
    if model_download is None and model_ref.startswith(("hf:", "https://", "http://")):
        model_download = download_record(Path(model_path))
    facts = ModelFacts.from_json(model_facts or {}, RECORD_VERSION)
    # llama-server's measured requests are streamed, so the client times every token (time to first token and
    # inter-token latency as a user sees them); the engine cross-check keeps its unstreamed reference request
    options.setdefault("stream", options.get("engine", "server") == "server")
    model = ModelSection(ref=redact_url(model_ref), path=str(model_path), facts=facts, download=model_download)
    plan = Plan(model=model, points=list(points), backends=list(backends), pins=list(pins), **options)
    plan.fit = plan.fit.keep_nulls(*_FIT_NULLS)
    return check_plan(plan.keep_nulls(*_PLAN_NULLS))


def check_plan(plan: Plan) -> Plan:
    """``plan`` if it can be measured, else a :class:`BenchError` naming the option to fix."""
    if plan.launches < 1:
        raise BenchError(f"--launches must be at least 1 (got {plan.launches})",
                         "e.g. --launches 2 (each point measured in 2 separate server starts)")
    if plan.sentinel_every is not None and plan.sentinel_every < 0:
        raise BenchError(f"--sentinel-every must be ≥ 0 (got {plan.sentinel_every})",
                         "give N > 0 to re-measure the reference points every N launches, or 0 to disable")
    if plan.engine not in ENGINES:
        raise BenchError(f"unknown engine {plan.engine!r}", f"use one of: {', '.join(ENGINES)}")
    if plan.repeats < 1:
        raise BenchError(f"--repeats must be at least 1 (got {plan.repeats})", "e.g. --repeats 3")
    if plan.n_predict < 1:
        raise BenchError(f"--n-predict must be at least 1 (got {plan.n_predict})", "e.g. --n-predict 128")
    if plan.prompt_tokens < 8:
        raise BenchError(f"--prompt-tokens must be at least 8 (got {plan.prompt_tokens})",
                         "e.g. --prompt-tokens 2500 (short prompts make pp t/s overhead-bound)")
    if not plan.points:
        raise BenchError("the plan has no points", "give --ncmoe, e.g. --ncmoe 0:40:2")
    bad = [p.to_json() for p in plan.points if not all(type(v) is int for v in (p.ncmoe, p.ngl))]
    if bad:   # only a stored plan can hold one (``bench.stored`` names it malformed)
        raise TypeError(f"point {bad[0]} is not a number")
    if plan.ctx is not None and plan.ctx < 16:
        raise BenchError(f"--ctx must be at least 16 tokens (got {plan.ctx})",
                         "e.g. --ctx 8192, or leave it out to let llama.cpp fit the context")
    return plan


# ------------------------------------------------------------------------------ parsing options

_INT = r"-?[0-9]+"     # ASCII digits only: "３" (full-width) is no number here
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
        elif re.fullmatch(r"[0-9]+-[0-9]+", part):
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
    out = _once_each(values, spec, what)
    if len(out) > MAX_POINTS:
        raise BenchError(f"{what} {spec} has {len(out)} values", f"give at most {MAX_POINTS} values in 0..{hi}")
    if what != "--ngl" and out and out[0] < 0:     # -ngl -1 is llama.cpp's "all layers"; nothing else is negative
        raise BenchError(f"{what} values must be ≥ 0 (got {out[0]})", fix)
    if upper is not None and out and out[-1] > upper:
        raise BenchError(f"{what} {spec} goes beyond the model's {upper} layers (largest value {out[-1]})",
                         f"use values in 0..{upper}, e.g. {what} 0:{upper}")
    return out


def _once_each(values: list[int], spec: str | int, what: str) -> list[int]:
    """``values`` sorted, refused in one line when one is given twice ("1,1,1" would measure one point three times)."""
    out = sorted(set(values))
    if len(out) < len(values):
        seen: set[int] = set()
        dup = next(v for v in values if v in seen or seen.add(v))    # type: ignore[func-returns-value]
        raise BenchError(f"{what} {spec} names {dup} more than once", f"give each value once, e.g. {what} "
                         + ",".join(str(v) for v in out[:4]))
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
