"""Benchmarks: plans (:mod:`.plan`), memory sampling (:mod:`.monitor`), prompts (:mod:`.prompts`), the
engines that measure a point (:mod:`.engines`: llama-server, llama-bench, llama-fit-params), the sweep
(:mod:`.sweep`), its summaries (:mod:`.summary`) and display (:mod:`.display`), fit maps (:mod:`.fitmap`),
exports (:mod:`.export`), the bench tasks' options table (:mod:`.cli_options`) and the library entries
those tasks call (:mod:`.start`). What speaks to the llama.cpp binaries themselves (a llama-server
session, ``--help`` options, llama-bench output, quirks) is the floor below: :mod:`llamaforge.llamacpp`.

This ``__init__`` imports nothing, so that a task's ``--help`` (which reads the options table) does not
load the sweep; import the module you need (``from llamaforge.bench.sweep import run_sweep``)."""
