"""``llamaforge reproduce``: measure a stored sweep again and say whether it agrees.

* :mod:`.remeasure` — the re-measuring: the stored plan and the very builds of the first run, as a new
  run linked to it (measures);
* :mod:`.verdict` — the verdict on a re-run (or ``--against``): does each point reproduce — a pure
  function of the two stored runs, which the report reads too;
* :mod:`.show` — the verdict in the terminal.

This ``__init__`` imports nothing, so the report can load :mod:`.verdict` without the re-measuring.
"""
