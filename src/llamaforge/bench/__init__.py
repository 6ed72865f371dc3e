"""Benchmarks: plans (:mod:`.plan`), memory sampling (:mod:`.monitor`), prompts (:mod:`.prompts`), the
engines that measure a point (:mod:`.engines`: llama-server, llama-bench, llama-fit-params), the sweep
(:mod:`.sweep`), its summaries (:mod:`.summary`) and display (:mod:`.display`), fit maps (:mod:`.fitmap`)
and exports (:mod:`.export`). What speaks to the llama.cpp binaries themselves (a llama-server session,
``--help`` options, llama-bench output, quirks) is the floor below: :mod:`llamaforge.llamacpp`."""

from .plan import BuildLike, FitOptions, Plan, PointSpec, make_points, parse_int_list
from .summary import point_summary
from .sweep import measure_point, run_sweep

__all__ = ["BuildLike", "FitOptions", "Plan", "PointSpec", "make_points", "measure_point", "parse_int_list",
           "point_summary", "run_sweep"]
