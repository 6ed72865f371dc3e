"""Benchmarks: plans (:mod:`.plan`), llama-server sessions (:mod:`.server`), memory sampling
(:mod:`.monitor`), prompts (:mod:`.prompts`), the engines that measure a point (:mod:`.engines`:
llama-server, llama-bench, llama-fit-params), the sweep (:mod:`.sweep`), its summaries
(:mod:`.summary`) and display (:mod:`.display`), fit maps (:mod:`.fitmap`) and exports (:mod:`.export`)."""

from .plan import BuildLike, FitOptions, Plan, PointSpec, make_points, parse_int_list
from .summary import point_summary
from .sweep import measure_point, run_sweep

__all__ = ["BuildLike", "FitOptions", "Plan", "PointSpec", "make_points", "measure_point", "parse_int_list",
           "point_summary", "run_sweep"]
