"""The judge: the one place that computes intervals, tests and verdicts from measurements.

The server start is the unit of replication everywhere (:mod:`.starts`); requests are nested in
starts. Everything that concludes something from numbers (report ratios and anomalies, the adaptive
sweep's trend rule, ``reproduce``, ``compare``, fleet compare, drift sentinels, bisect) calls this
package; ``tests/unit/test_architecture.py`` checks that no other module computes a p-value or an
interval.

* :mod:`.starts` — a point's requests grouped by start; start centres.
* :mod:`.estimate` — one point: centre, interval by K (CI / range / single), bimodal modes.
* :mod:`.spread` — between-start spread: own, pooled for a build, or a stated conservative bound.
* :mod:`.verdict` — two sides: ratio, interval, same / differs / inconclusive.
* :mod:`.family` — Holm / Benjamini–Hochberg over many verdicts.
* :mod:`.sequential` — ``--launches auto``: who needs another start; unresolved at the maximum.
* :mod:`.predict` — the prediction interval of one new start (drift sentinels).
* :mod:`.pooled` — one effect pooled over several points (a variant knob's effect "where it holds").
* :mod:`.paired` — factors paired inside one start.
* :mod:`.locate` — locating a change between two commits (bisect's exact rank tests).
* :mod:`.trend` — which way a series goes with offload and which points break it (the report's anomalies
  and the adaptive sweep: one rule); not imported here, so the core loads without it.
"""

from .estimate import Estimate, Mode, estimate
from .family import control
from .pooled import PooledEffect, pooled_effect
from .predict import PredictionInterval, next_start
from .sequential import Policy, Stop, pair, point_stop
from .spread import CONSERVATIVE, Spread, conservative, pooled
from .starts import Starts
from .verdict import DIFFERS, INCONCLUSIVE, MIN_EFFECT, SAME, Judgement, assumptions_note, judge

__all__ = ["CONSERVATIVE", "DIFFERS", "INCONCLUSIVE", "MIN_EFFECT", "SAME", "Estimate", "Judgement", "Mode",
           "Policy", "PooledEffect", "PredictionInterval", "Spread", "Starts", "Stop", "assumptions_note", "conservative", "control", "estimate", "judge",
           "next_start", "pair", "point_stop", "pooled", "pooled_effect"]
