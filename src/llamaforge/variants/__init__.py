"""Variants: named combinations of a build, runtime environment and llama.cpp arguments, compared as a matrix.

* :mod:`.model` — the :class:`Variant` (name, backend, pin, defines, env, args), its knobs, ``--variant`` parsing.
* :mod:`.files` — ``variants.toml`` and choosing a run's variants.
* :mod:`.knobs` — the allow-list of environment variables and the device-line field each changes.
* :mod:`.check` — bind variants to builds and check every knob before anything is measured.
* :mod:`.build` — :class:`VariantBuild`: a build with the variant's environment and arguments (one series).
* :mod:`.observe` — what a server start really ran with, from llama.cpp's log and device line.
* :mod:`.took` — whether a knob took effect (took / not taken / unverified).

The matrix report (head-to-head verdicts, placements, per-knob effects) is :mod:`llamaforge.report.matrix`;
its statistics are the judge's (:mod:`llamaforge.judge`).

This ``__init__`` imports nothing: the report reads :mod:`.model`, :mod:`.status` and :mod:`.took` without
loading what a sweep measures (:mod:`.build`, :mod:`.check`).
"""
