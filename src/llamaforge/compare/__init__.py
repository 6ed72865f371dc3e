"""Commit (or backend) comparison: A vs B, measured interleaved, judged on server starts.

* :mod:`.session` — ``compare`` for real: both sides built, measured in ABBA rounds of server starts
  (rounds added while a verdict is open), stored as a run of kind ``compare`` (measures);
* :mod:`.judged` — the judge's call on a compare run: per point and metric, both sides' estimates and the
  verdict on B relative to A, Holm over the run — a pure function of stored points (``fleet compare`` and
  the report may use it without loading the session);
* :mod:`.show` — a stored compare run in the terminal (its report: :mod:`llamaforge.report.kinds.compare`).

This ``__init__`` imports nothing, so loading one of its modules loads no other.
"""
