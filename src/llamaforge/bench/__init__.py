"""Benchmarks: plans (:mod:`.plan`), llama-server sessions (:mod:`.server`), memory sampling
(:mod:`.monitor`), prompts (:mod:`.prompts`), the sweep runner (:mod:`.runner`), the llama-bench
engine (:mod:`.llamabench`), fit maps (:mod:`.fitmap`) and exports (:mod:`.export`)."""

from .plan import BuildLike, FitOptions, Plan, PointSpec, make_points, parse_int_list
from .runner import measure_point, point_summary, run_sweep

__all__ = ["BuildLike", "FitOptions", "Plan", "PointSpec", "make_points", "measure_point", "parse_int_list",
           "point_summary", "run_sweep"]
