"""The fit decision: ``-fitt`` margins from ``--fitt`` or ``--vram-budget``, per build.

One home for what every engine (llama-server, llama-bench, llama-fit-params) passes as ``-fitt``,
so the engines (:mod:`.engines`: server, llama-bench, fit) cannot disagree.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..backends import find as find_backend
from ..console import notice
from ..errors import BenchError
from ..gpu import free_vram_mib
from .plan import BuildLike, FitOptions, Plan

#: llama.cpp's own default ``-fitt`` margin (MiB per device)
LLAMA_DEFAULT_FIT_MARGIN_MIB = 1024


def budget_margins(free_mib: Sequence[float], budget_gib: float) -> list[int]:
    """``-fitt`` margins that make each device behave like a card of ``budget_gib``.

    A real card of that size would still get llama.cpp's default 1 GiB margin and lose some
    memory to the driver context, so the margin is free − budget + 1 GiB: the model, context and
    compute buffers then get budget − 1 GiB, and the process (CUDA context included) ends near
    the budget. (Until 2026-11-29 the margin was free − budget, which let a "24 GiB card" use
    about 25.3 GiB in all — the committed H200 report says which it used.)"""
    budget = budget_gib * 1024
    return [max(0, int(f - budget + LLAMA_DEFAULT_FIT_MARGIN_MIB)) for f in free_mib]


def _offloads(name: str) -> bool:
    """Whether a backend has device memory (a VRAM budget means nothing to those that run on the CPU)."""
    backend = find_backend(name)
    return backend is None or backend.offloads


def resolve_fit(fit: FitOptions, backends: Sequence[str]) -> FitOptions:
    """Turn ``vram_budget_gib`` into per-device ``-fitt`` margins (see :func:`budget_margins`)."""
    if fit.vram_budget_gib is None or fit.margins_mib is not None:
        return fit
    if fit.fitt_mib is not None:
        raise BenchError("--vram-budget and --fitt both set the fit margin", "give only one of them")
    if not any(_offloads(b) for b in backends):
        fit.notice = "--vram-budget ignored: only CPU builds in this run"
        notice(fit.notice)
        return fit
    free = free_vram_mib()
    if not free:
        fit.notice = "--vram-budget ignored: no NVIDIA GPU visible through NVML"
        notice(fit.notice)
        return fit
    budget = fit.vram_budget_gib * 1024
    fit.margins_mib = budget_margins(free, fit.vram_budget_gib)
    small = [i for i, f in enumerate(free) if f < budget]
    if small:
        fit.notice = (f"device(s) {small} have less free memory than the {fit.vram_budget_gib:g} GiB budget; "
                      "they use all their free memory")
        notice(fit.notice)
    return fit


def fitt_for(build: BuildLike, plan: Plan) -> str | None:
    """The ``-fitt`` argument for a build (budget-derived margins only apply to GPU backends)."""
    if plan.fit.fitt_mib is not None:
        return str(plan.fit.fitt_mib)
    if plan.fit.margins_mib and _offloads(build.backend):
        return plan.fit.target()
    return None
