"""What a real measurement may conclude: any of the judge's three verdicts, as long as it agrees with its interval.

A real-llama.cpp test on a shared machine cannot demand a particular verdict from a fixed number of
starts: "inconclusive" is the honest answer when the starts scatter more than the effect. What it can
demand is that the verdict is one the judge gives and that it follows from the stored interval
(Holm's adjustment may only turn a verdict into "inconclusive", never the other way).
"""

from __future__ import annotations

import math

VERDICTS = ("same", "differs", "inconclusive")


def assert_coherent(j: dict) -> None:
    """``j`` is a stored :meth:`Judgement.to_dict`: its verdict follows from its ratio interval and minimum effect."""
    assert j["verdict"] in VERDICTS, j
    assert j["ratio"] > 0 and math.isfinite(j["ratio"]), j
    if j.get("low") is None or j.get("high") is None:
        return                               # an assumed-spread (small-K) verdict: no interval to check against
    assert j["low"] <= j["ratio"] <= j["high"], j
    d = math.log1p(j["min_effect"])
    lo, hi = math.log(j["low"]), math.log(j["high"])
    if j["verdict"] == "same":
        assert -d < lo and hi < d, j
    elif j["verdict"] == "differs":
        assert lo > d or hi < -d, j
