"""The engine interface: what an engine is given (:class:`MeasureContext`) and returns.

An engine measures one point on one build in one launch: it fills the context's unstored
:class:`~llamaforge.store.Point` (samples, memory, context, command) and returns it, or raises
:class:`~llamaforge.llamacpp.server.PointFailure` after filling what it could. The sweep
(:mod:`llamaforge.bench.sweep`) creates the point, picks the engine from the registry
(:mod:`llamaforge.bench.engines`), stores the result and folds launches together.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from ...store import Point
from ..plan import BuildLike, Plan, PointSpec
from ..prompts import Prompt

PhaseFn = Callable[[str], None]
#: what an engine returns: the point it was given, filled (not yet stored)
Measurement = Point


@dataclass
class SweepState:
    """Per-run caches shared by the points of a run."""

    prompts: dict[str, Prompt] = field(default_factory=dict)   # by build key (tokenizers may differ)
    # builds whose server rejects non-UTF-8 output (HTTP 500): token ids banned in their requests
    banned: dict[str, list[int]] = field(default_factory=dict)
    banned_why: dict[str, str] = field(default_factory=dict)


@dataclass
class MeasureContext:
    """Everything one measurement of one point needs."""

    point: Point                  # created by the sweep (identity, label, start time); the engine fills it
    build: BuildLike
    model_path: Path
    spec: PointSpec
    plan: Plan
    log_path: Path
    state: SweepState = field(default_factory=SweepState)
    on_phase: PhaseFn = lambda _s: None


class Engine(Protocol):
    """One way of measuring a point (llama-server, llama-bench, llama-fit-params)."""

    name: str

    def measure(self, ctx: MeasureContext) -> Measurement:
        """Fill ``ctx.point`` and return it; raise PointFailure after filling what it could."""
        ...
