"""Commit (or backend) comparison: A vs B, measured interleaved, judged on server starts.

* :mod:`.session` — ``compare`` for real: both sides built, measured in ABBA rounds of server starts
  (rounds added while a verdict is open), stored as a run of kind ``compare``.

This ``__init__`` imports nothing, so loading one of its modules loads no other.
"""
