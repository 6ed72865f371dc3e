"""What stored runs say: pure functions of stored records (and the judge), shared by the terminal and the report.

Nothing here measures, builds or starts a process: every function reads stored points, runs and their
summaries, so what ``llamaforge bench``/``reproduce``/``compare``/``bisect`` print and what the report shows
cannot disagree, and :mod:`llamaforge.report` reads only records, the judge, trend and these.

* :mod:`.labels` — the names stored values are shown and recognised by: backends, sentinel points, fit
  statuses, the adaptive sweep's threshold heading and anomalies;
* :mod:`.drift` — drift sentinels: which sentinel launches left their reference point's prediction interval;
* :mod:`.conditions` — the measuring conditions a point's telemetry shows (throttled, loaded, shared);
* :mod:`.comparison` — a stored comparison's texts: sides, ratios, verdict words, how it was judged;
* :mod:`.bisection` — a stored bisection's probes and result lines;
* :mod:`.reproduction` — the verdict on a re-run (``reproduce``, ``--against``): does each point reproduce;
* :mod:`.runs` — the runs a run is made of (a fleet run's host runs).

This ``__init__`` imports nothing, so loading one of them loads no other.
"""
