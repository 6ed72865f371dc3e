"""The fitted context of two points side by side, as the variant matrix states it.

Context is not a sampled metric: llama-server fits the largest ``n_ctx`` that its memory budget holds, once per
start, from the model and the buffers the build allocates. So two variants' contexts are compared by their
values and ratio — no CI and no verdict — and what is said is only what the fit did:

* each side is the ``n_ctx`` its starts reported (``/props``); where the starts of a point fitted different
  contexts, the side is their range and the ratio a range;
* ``native`` is the model's training context, the fit's cap: where the larger side sits there, the ratio is a
  bound (``≥`` / ``≤``), not the memory's whole advantage;
* a context that was not fitted (``-c`` in the variant, ``--ctx``, a build that cannot fit, a refused fit) is
  named by :func:`how_chosen`, because then a difference is a setting, not a fit.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..variants.model import Variant
from .data import Row

Side = tuple[int, int]      # (lowest, highest) n_ctx over a point's starts


def side(r: Row) -> Side | None:
    """The contexts a point's starts fitted: (min, max) over its ok starts, else the point's own ``n_ctx``."""
    launches = r.point.launches if r.point is not None else []
    got = [x.n_ctx for x in launches if isinstance(x.n_ctx, int) and x.ok]
    if not got and isinstance(r.n_ctx, int):
        got = [r.n_ctx]
    return (min(got), max(got)) if got else None


def word(s: Side, native: int | None) -> str:
    """``175,616`` / ``native`` / ``69,376–70,400`` (starts fitted different contexts)."""
    lo, hi = s
    if lo == hi:
        return "native" if native is not None and lo == native else f"{lo:,}"
    return f"{lo:,}–{hi:,}"


def ratio(b: Side, a: Side, native: int | None) -> str:
    """B / A: ``2.53×``, ``≥1.97×`` (B is capped at native), ``≤0.51×`` (A is), ``2.40–2.60×`` (starts varied)."""
    lo, hi = b[0] / a[1], b[1] / a[0]
    text = f"{lo:.2f}×" if f"{lo:.2f}" == f"{hi:.2f}" else f"{lo:.2f}–{hi:.2f}×"
    if native is not None and b == (native, native) and a[1] < native:
        return "≥" + text
    if native is not None and a == (native, native) and b[1] < native:
        return "≤" + text
    return text


def compare(b: Row, a: Row, native: int | None) -> str | None:
    """B against A at one point: ``175,616 vs 69,376 (2.53×)``, ``same (200,448)``, ``both native`` (both at the
    fit's cap); ``None`` when a side has none."""
    sb, sa = side(b), side(a)
    if sb is None or sa is None:
        return None
    if sb == sa and sb[0] == sb[1]:
        return "both native" if word(sb, native) == "native" else f"same ({word(sb, native)})"
    return f"{word(sb, native)} vs {word(sa, native)} ({ratio(sb, sa, native)})"


def differs(b: Row, a: Row) -> bool:
    """Whether the two points' fitted contexts differ (in value or in how their starts agreed)."""
    sb, sa = side(b), side(a)
    return sb is not None and sa is not None and sb != sa


def how_chosen(variants: Sequence[Variant], rows: Sequence[Row]) -> str | None:
    """Why these points' contexts are not (all) llama-server's fit — ``None`` when every one was fitted."""
    from ..findings.labels import FIT_STATUS_NOTES

    if any("--ctx-size" in v.knobs() for v in variants):
        return "set with -c in a variant, not fitted"
    statuses = {r.point.detail.fit_status if r.point is not None else None for r in rows}
    other = sorted(str(s) for s in statuses - {"fitted"} if s is not None)
    if other:
        return "; ".join(FIT_STATUS_NOTES.get(s, s) for s in other)
    if None in statuses:
        return "how the context was chosen is not recorded"
    return None
