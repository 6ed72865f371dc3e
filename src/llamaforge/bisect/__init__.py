"""Performance bisection: the first commit on a first-parent range that made a metric slower.

* :mod:`.search` — the binary search, pure (two callables: build and measure), testable without
  building anything;
* :mod:`.session` — ``bisect`` for real: commits from the mirror, incremental builds
  (:mod:`llamaforge.builds.incremental`), llama-bench measurements and probes into the store (read back,
  for the terminal and the report, by :mod:`llamaforge.findings.bisection`);
* :mod:`.git_run` — ``bisect-run``, the ``git bisect run`` helper (0 good / 1 bad / 125 skip).
"""

from .git_run import RunOnce, bisect_run_once, bisect_run_verdict
from .search import BisectError, BisectRefused, max_measured, policy_for, search
from .session import BisectRequest, bisect_plan, print_result, run_bisect

__all__ = ["BisectError", "BisectRefused", "BisectRequest", "RunOnce", "bisect_plan", "bisect_run_once",
           "bisect_run_verdict", "max_measured", "policy_for", "print_result", "run_bisect", "search"]
