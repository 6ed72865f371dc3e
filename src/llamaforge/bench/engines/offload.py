"""The offload arguments every engine passes: ``-ncmoe`` (or its ``-ot`` equivalent), ``-ngl``,
``-fitt`` and ``-t`` — one encoding for llama-server, llama-bench and llama-fit-params.

``-ncmoe`` comes from :meth:`~llamaforge.llamacpp.options.BinaryOptions.ncmoe_args` for every
point with experts on the CPU; at ncmoe 0 nothing is passed (llama.cpp's default, and a dense
model's command line then carries no MoE option);
``-ngl`` only when the point sets it (``-1`` = llama.cpp's default, all layers); ``-fitt`` only
when the caller passes one (the decision is :func:`llamaforge.bench.fit.fitt_for`'s; llama-bench
never gets one, see :mod:`.llamabench`).
"""

from __future__ import annotations

from ...llamacpp.options import BinaryOptions
from ..plan import PointSpec


def offload_args(opts: BinaryOptions, tool: str, spec: PointSpec, *, fitt: str | None = None,
                 threads: int | None = None) -> list[str]:
    """The offload arguments of ``spec`` for ``tool`` (raises BuildError when the binary cannot
    keep experts on the CPU and the point asks it to)."""
    args = opts.ncmoe_args(tool, spec.ncmoe) if spec.ncmoe else []
    if spec.ngl != -1:
        args += ["-ngl", str(spec.ngl)]
    if fitt is not None:
        args += ["--fit-target", fitt]
    if threads:
        args += ["-t", str(threads)]
    return args
