"""Performance history: llama.cpp commits as a time series per machine × backend × model × point × metric.

* :mod:`.model` — the series, its commit levels, steps and backend ratios (pure dataclasses; the site's JSON).
* :mod:`.select` — which commits: ``--range A..B`` (first-parent), ``--every N``, ``--releases``, ``--commits``.
* :mod:`.run` — build and measure them in sequential starts into the store (run kind ``history``), ``--continue``.
* :mod:`.load` — the store's history runs → series (never mixing machines).
* :mod:`.steps` — change points: a segmentation proposes, the judge confirms at the start level (Holm).
* :mod:`.locate` — each step's exact commit by the noise-aware bisect (``--bisect``).
* :mod:`.ratio` — two backends side by side over time: the ratio per commit with its CI.
* :mod:`.site` — ``history.publish``: a static site (vendored plotly.js), no server code.
* :mod:`.show` — what the commands print.

This ``__init__`` imports nothing, so the pure parts load without the measuring ones.
"""
