"""The options of every command, declared once (issue 42): :mod:`.table`.

One row per option (name, type, default, bounds, help) and, per task, which options it takes and what it states
differently — each default that differs with its reason. ``bench``, ``fitmap``, ``demo``, ``fleet.bench``,
``reproduce``, ``compare``, ``bisect``, ``bisect-run`` and ``history.run`` read their help and defaults from it;
``tests/unit/test_bench_cli_options.py`` and ``tests/unit/test_options_table.py`` check every task against it.

This ``__init__`` imports nothing.
"""
