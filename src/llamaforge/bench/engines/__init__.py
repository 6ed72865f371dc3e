"""Engines: the ways a point is measured, behind one interface (:mod:`.base`).

* ``server`` (:mod:`.server`): a fresh llama-server per launch, warm-up + ``repeats`` requests;
* ``llama-bench`` (:mod:`.llamabench`): one ``llama-bench -o jsonl`` call;
* ``fit`` (:mod:`.fit`): one ``llama-fit-params`` call (the fitted context, no samples).

All build their offload arguments with
:meth:`llamaforge.llamacpp.options.BinaryOptions.offload_args`. :func:`engine` is the
registry the sweep and the fit map pick from by the point's ``engine`` name.
"""

from __future__ import annotations

from ...errors import BenchError
from .base import Engine, MeasureContext, Measurement, PhaseFn, SweepState
from .fit import FitEngine
from .llamabench import LlamaBenchEngine
from .server import ServerEngine

ENGINES: dict[str, Engine] = {e.name: e for e in (ServerEngine(), LlamaBenchEngine(), FitEngine())}


def engine(name: str) -> Engine:
    """The engine registered as ``name`` (BenchError naming the known ones otherwise)."""
    try:
        return ENGINES[name]
    except KeyError:
        raise BenchError(f"unknown engine {name!r}", f"use one of: {', '.join(ENGINES)}") from None


__all__ = ["ENGINES", "Engine", "MeasureContext", "Measurement", "PhaseFn", "SweepState", "engine"]
