"""The native-context threshold of an adaptive sweep, by bisection over fits.

An adaptive sweep (``bench --ncmoe auto`` / ``--ngl auto``) needs the first offload step ``x`` at
which llama.cpp fits the model's native (training) context. ``x`` counts "more offload": ``-ncmoe``
itself, or ``n_layers + 1 - ngl`` for a layer sweep.

**Why bisection is exact.** Moving one more layer's experts (``-ncmoe``) or one more whole layer
(``-ngl``) to the host only takes bytes off the device: its weights, and for ``-ngl`` its KV cache;
nothing is added there. llama.cpp's fit (``common/fit.cpp``) measures the device memory at the
smallest and the largest context and interpolates linearly to the largest context that leaves the
margin free; more offload lowers the memory at the smallest context and does not raise the memory per
token, so the fitted context never shrinks as ``x`` grows (until the native context caps it). The
only term that could go the other way is the compute buffer; on the H200 sweeps one ncmoe step
frees 432 MiB of expert weights while the compute buffer changes by -4..+136 MiB (it grows with the
context), and every stored context curve is monotone. So "reaches native" is a step function
of ``x`` and the threshold is found with at most ``2 + ceil(log2(n - 1))`` fits (:func:`max_fits`)
instead of one per point. The sweep's own measured points are not fitted again (llama-server fits
itself); their context, as the server reports it, joins the curve (:func:`llamaforge.bench.adaptive.conclude`),
so a measured fact would override the inference should the curve ever not be monotone.

A failed fit counts as "does not reach native" (a model that does not fit at all has no context).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field


@dataclass
class ThresholdSearch:
    """The first ``x`` whose fitted context reaches native (``None``: never, or native unknown) and
    the fits it took (``x`` → fitted context, ``None`` for a failed fit, in the order fitted)."""

    threshold: int | None
    probes: dict[int, int | None] = field(default_factory=dict)


def reaches(ctx: int | None, native: int | None) -> bool:
    return ctx is not None and native is not None and ctx >= native


def bisect_threshold(domain: Sequence[int], fit: Callable[[int], int | None], native: int | None) -> ThresholdSearch:
    """Fit the lowest ``x`` (native there: done), then the highest (not native there: never), then bisect.

    No fit at all when ``native`` is unknown: there is no threshold to find."""
    dom = sorted(set(domain))
    out = ThresholdSearch(None)
    if not dom or not native:
        return out

    def ok(i: int) -> bool:
        x = dom[i]
        if x not in out.probes:
            out.probes[x] = fit(x)
        return reaches(out.probes[x], native)

    lo, hi = 0, len(dom) - 1
    if ok(lo):
        out.threshold = dom[lo]
        return out
    if hi == lo or not ok(hi):
        return out
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if ok(mid):
            hi = mid
        else:
            lo = mid
    out.threshold = dom[hi]
    return out


def max_fits(n: int) -> int:
    """The most fits :func:`bisect_threshold` makes over ``n`` points."""
    return n if n <= 2 else 2 + math.ceil(math.log2(n - 1))
