"""The native-context threshold by bisection over fits: exact on every monotone curve, in log2(n) fits."""

import math

import pytest

from llamaforge.bench.adaptive import PointSummary, conclude, native_threshold
from llamaforge.bench.threshold import bisect_threshold, max_fits

NATIVE = 4096


def curve(n: int, t: int | None) -> dict[int, int]:
    """A monotone fitted-context curve over 0..n-1 that reaches native from ``t`` on (never: ``None``)."""
    return {x: NATIVE if t is not None and x >= t else NATIVE // 2 + x for x in range(n)}


@pytest.mark.parametrize("n", [1, 2, 3, 5, 9, 41, 42, 64])
def test_bisection_finds_the_exhaustive_threshold_of_every_monotone_curve_in_at_most_log2_fits(n):
    for t in [*range(n), None]:
        c = curve(n, t)
        calls: list[int] = []
        res = bisect_threshold(range(n), lambda x, c=c, calls=calls: calls.append(x) or c[x], NATIVE)
        assert res.threshold == native_threshold(c, NATIVE) == t
        assert len(calls) == len(set(calls)) == len(res.probes) <= max_fits(n)     # no point fitted twice
        assert res.probes == {x: c[x] for x in calls}
    assert max_fits(n) <= 2 + math.ceil(math.log2(max(n - 1, 1)))


def test_native_on_the_whole_card_takes_one_fit_and_never_native_two():
    assert bisect_threshold(range(41), lambda x: NATIVE, NATIVE).probes == {0: NATIVE}
    never = bisect_threshold(range(41), lambda x: NATIVE - 1, NATIVE)
    assert never.threshold is None and set(never.probes) == {0, 40}


def test_a_failed_fit_does_not_reach_native_and_an_unknown_native_needs_no_fit():
    # the model does not fit at all below x = 7 (llama-fit-params fails there)
    res = bisect_threshold(range(41), lambda x: None if x < 7 else NATIVE, NATIVE)
    assert res.threshold == 7 and all(v is None for x, v in res.probes.items() if x < 7)
    called: list[int] = []
    assert bisect_threshold(range(41), lambda x: called.append(x) or NATIVE, None).threshold is None
    assert called == []


def test_a_sparse_domain_is_searched_over_its_own_points():
    res = bisect_threshold([0, 4, 8, 12, 40], lambda x: NATIVE if x >= 10 else 100, NATIVE)
    assert res.threshold == 12 and set(res.probes) <= {0, 4, 8, 12, 40}


def _pt(v: float, n_ctx: int | None = None) -> PointSummary:
    return PointSummary(v, v * 0.98, v * 1.02, 1, (), n_ctx)


def test_conclusions_from_the_bisection_fits_infer_the_unfitted_points_and_trust_the_servers_context():
    probes = bisect_threshold(range(41), lambda x: NATIVE if x >= 6 else 1000, NATIVE).probes
    assert 8 not in probes and 9 not in probes
    pts = {0: _pt(100.0), 5: _pt(90.0), 8: _pt(80.0), 9: _pt(85.0), 40: _pt(10.0)}
    c = conclude({"cuda": pts}, {"cuda": probes}, NATIVE, list(range(41)))
    assert c.threshold == {"cuda": 6}
    assert c.sweet_spot == {"cuda": 9}          # 8 and 9 are past the threshold: native by monotonicity
    # a measured point's own context (the server's fit) is a fact and wins over the inference
    pts[9] = _pt(85.0, n_ctx=NATIVE - 256)
    assert conclude({"cuda": pts}, {"cuda": probes}, NATIVE, list(range(41))).sweet_spot == {"cuda": 8}
    pts[5] = _pt(90.0, n_ctx=NATIVE)
    c = conclude({"cuda": pts}, {"cuda": probes}, NATIVE, list(range(41)))
    assert c.threshold == {"cuda": 5} and c.sweet_spot == {"cuda": 5}
