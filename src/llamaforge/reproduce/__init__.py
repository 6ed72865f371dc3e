"""``llamaforge reproduce``: measure a stored sweep again and say whether it agrees.

* :mod:`.remeasure` — the re-measuring: the stored plan and the very builds of the first run, as a new
  run linked to it (measures);
* :mod:`.show` — the verdict in the terminal.

The verdict itself (does each point reproduce — a pure function of the two stored runs, which the report reads
too) is :mod:`llamaforge.findings.reproduction`: the report never imports this package.
"""
