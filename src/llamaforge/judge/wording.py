"""How a ratio of two speeds is said: the one formatter of ratios and their intervals for the terminal and reports.

A ratio near 1 keeps its plain form, ``1.66× [1.35, 2.01]``. A ratio beyond :data:`FAR` either way, with its
whole interval on the same side of 1, is said the way people say it: the faster side and how many times
faster, the interval turned round with it — a lavapipe Vulkan over CPU of 0.0087 [0.0062, 0.0125] reads
``CPU 115× faster [80, 161]``, never ``0.01× [0.01, 0.01]`` (three significant digits; the ends rounded
outwards, so the interval shown never claims more than the judge's). Every number keeps enough digits
that two different ends of an interval never print alike and no ratio prints as 0.

Nothing here computes a statistic: the numbers come from the judge (:mod:`.verdict`, :mod:`.sequential`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

#: beyond this factor either way (and with its interval on the same side of 1) a ratio is said as "X n× faster"
FAR = 2.0
#: significant digits of a ratio said as "n× faster" (115, 11.5, 2.87)
FAR_DIGITS = 3
#: the most decimals any ratio gets while its interval's ends still print alike
MAX_DECIMALS = 6

INTERVALS = ("ci", "starts", "range", "one", "none")


def _decimals_for(x: float, decimals: int) -> int:
    """``decimals``, or more when ``x`` would otherwise print as 0 (two significant digits are kept)."""
    if x <= 0 or not math.isfinite(x) or x >= 10 ** (1 - decimals):
        return decimals
    return min(MAX_DECIMALS, max(decimals, 1 - math.floor(math.log10(x))))


def _far_decimals(x: float, digits: int = FAR_DIGITS) -> int:
    """Decimals that give ``x`` ``digits`` significant digits (3: 115 → 0, 11.5 → 1, 2.87 → 2)."""
    if x <= 0 or not math.isfinite(x):
        return 0
    return max(0, digits - 1 - math.floor(math.log10(x)))


def _ends(low: float, high: float, d_low: int, d_high: int) -> tuple[str, str]:
    """The two ends at their decimals, both given more where two different ends would print alike."""
    while max(d_low, d_high) < MAX_DECIMALS and low != high and f"{low:.{d_low}f}" == f"{high:.{d_high}f}":
        d_low, d_high = d_low + 1, d_high + 1
    return f"{low:.{d_low}f}", f"{high:.{d_high}f}"


def _down(x: float, d: int) -> str:
    return f"{math.floor(x * 10 ** d + 1e-9) / 10 ** d:.{d}f}"


def _up(x: float, d: int) -> str:
    return f"{math.ceil(x * 10 ** d - 1e-9) / 10 ** d:.{d}f}"


def _interval(kind: str, ends: tuple[str, str] | None) -> str:
    """`` [lo, hi]`` (a CI), `` (starts lo–hi)``, `` (range lo–hi)``, `` (1 start each)`` or nothing."""
    if kind == "one":
        return " (1 start each)"
    if kind not in ("ci", "starts", "range") or ends is None:
        return ""
    lo, hi = ends
    return f" [{lo}, {hi}]" if kind == "ci" else f" ({kind} {lo}–{hi})"


def _near_ends(low: float | None, high: float | None, decimals: int) -> tuple[str, str] | None:
    if low is None or high is None:
        return None
    return _ends(low, high, _decimals_for(low, decimals), _decimals_for(high, decimals))


def interval_text(kind: str, low: float | None, high: float | None, decimals: int = 2) -> str:
    """An interval alone, near style: ``[1.35, 2.01]``, ``starts 1.15–2.00``, ``1 start each`` (``""`` for none)."""
    text = _interval(kind, _near_ends(low, high, decimals)).strip()
    return text[1:-1] if text.startswith("(") else text


def is_far(ratio: float, low: float | None = None, high: float | None = None) -> bool:
    """Whether ``ratio`` is said as "X n× faster": beyond :data:`FAR` either way, its interval not reaching 1."""
    if not (ratio > 0 and math.isfinite(ratio)) or 1 / FAR < ratio < FAR:
        return False
    if low is None or high is None:
        return True
    return (low > 1) if ratio > 1 else (high < 1)


@dataclass(frozen=True)
class _Far:
    """A far ratio turned the way it is said: ``who`` is ``x`` times faster, within ``low``–``high``."""

    who: str
    x: float
    low: float | None
    high: float | None

    @classmethod
    def of(cls, ratio: float, low: float | None, high: float | None, num: str, den: str) -> _Far:
        if ratio > 1:
            return cls(num, ratio, low, high)
        return cls(den, 1 / ratio, 1 / high if high else None, 1 / low if low else None)

    @property
    def decimals(self) -> int:
        return _far_decimals(self.x)

    def end_decimals(self, end: float) -> int:
        """The centre's decimals, or more for an end that would keep fewer than two significant digits."""
        return max(self.decimals, _far_decimals(end, 2))

    def ends(self) -> tuple[str, str] | None:
        if self.low is None or self.high is None:
            return None
        lo, hi = _down(self.low, self.end_decimals(self.low)), _up(self.high, self.end_decimals(self.high))
        return (lo, hi) if lo != hi else _ends(self.low, self.high, self.end_decimals(self.low) + 1,
                                               self.end_decimals(self.high) + 1)


def number(x: float, decimals: int = 2) -> str:
    """A ratio's number alone: ``1.66``, ``115``, ``0.0087`` (never ``0.00``)."""
    if is_far(x) and x > 1:
        return f"{x:.{_far_decimals(x)}f}"
    return f"{x:.{_decimals_for(x, decimals)}f}"


def ratio_parts(ratio: float, low: float | None = None, high: float | None = None, *, interval: str = "ci",
                num: str = "B", den: str = "A", metric: str | None = None, decimals: int = 2,
                unit: str = "×", phrase: bool = True) -> tuple[str, str]:
    """:func:`ratio_text` in its two parts, for a page that shows them apart: (``CPU 115× faster``, ``[80, 162]``)."""
    if not (phrase and is_far(ratio, low, high)):
        ends = _near_ends(low, high, decimals) if interval in ("ci", "starts", "range") else None
        d = max(_decimals_for(ratio, decimals), min((len(e.partition(".")[2]) for e in ends or ()), default=0))
        return f"{ratio:.{d}f}{unit}", _interval(interval, ends).strip()
    f = _Far.of(ratio, low, high, num, den)
    what = f" ({metric})" if metric else ""
    return f"{f.who} {f.x:.{f.decimals}f}× faster{what}", _interval(interval, f.ends()).strip()


def ratio_text(ratio: float, low: float | None = None, high: float | None = None, *, interval: str = "ci",
               num: str = "B", den: str = "A", metric: str | None = None, decimals: int = 2,
               unit: str = "×", phrase: bool = True) -> str:
    """``ratio`` = ``num`` / ``den`` with its interval (``interval``: one of :data:`INTERVALS`).

    Near 1 (or ``phrase=False``): ``1.66× [1.35, 2.01]``, ``0.952 (starts 0.948–0.957)``. Far from 1:
    ``CPU 115× faster [80, 162]`` (``metric`` adds ``(tg)`` after "faster"), the interval turned round with
    the ratio when it is below 1."""
    head, ends = ratio_parts(ratio, low, high, interval=interval, num=num, den=den, metric=metric,
                             decimals=decimals, unit=unit, phrase=phrase)
    return f"{head} {ends}" if ends else head


def span_text(low: float, high: float, *, num: str = "B", den: str = "A", decimals: int = 2) -> str:
    """A range of ratios (over a series' points): ``0.80–1.30×``; all beyond 1 on one side and the far end
    beyond :data:`FAR`: ``CPU 1.08–115× faster`` (turned round when below 1)."""
    if high < 1 and low <= 1 / FAR:
        a, b, who = 1 / high, 1 / low, den
    elif low > 1 and high >= FAR:
        a, b, who = low, high, num
    else:
        lo, hi = _near_ends(low, high, decimals) or ("", "")
        return f"{lo}–{hi}×"
    lo, hi = _ends(a, b, _far_decimals(a), _far_decimals(b))
    return f"{who} {lo}–{hi}× faster"


def at_least(ratio: float, low: float, high: float, *, num: str = "B", den: str = "A") -> str | None:
    """The conservative end of the interval in words: ``CPU faster at least 80×`` — the lower end as
    :func:`ratio_text` prints it (rounded down, so it never overstates); ``None`` when the interval reaches 1
    (no side is faster for sure)."""
    if not (low > 1 or high < 1):
        return None
    f = _Far.of(ratio, low, high, num, den)
    if f.low is None:
        return None
    return f"{f.who} faster at least {_down(f.low, f.end_decimals(f.low))}×"


def percent(x: float) -> str:
    """``5 %``, ``2.5 %``: a margin or a precision as the sentences here print it."""
    return f"{x * 100:g} %"


def differs_unresolved(ratio: float, low: float, high: float, *, k: int, precision: float, num: str = "B",
                       den: str = "A") -> str:
    """One sentence for a verdict "differs" whose points stopped unresolved (``--launches auto`` at its maximum):
    ``differs (CPU faster at least 80×); not resolved to ±5 % at K=4``."""
    bound = at_least(ratio, low, high, num=num, den=den)
    return (f"differs ({bound})" if bound else "differs") + f"; not resolved to ±{percent(precision)} at K={k}"


def needs_text(verdict: str, min_effect: float, k: int | None, *, cap: int = 1000) -> str:
    """What an inconclusive verdict would take (:mod:`.needs`): ``same within ±5 % needs ≈ K=22``,
    ``differs beyond ±5 % needs ≈ K=9``; ``… needs more than K=1000`` where no K within ``cap`` would do."""
    what = f"same within ±{percent(min_effect)}" if verdict == "same" else f"differs beyond ±{percent(min_effect)}"
    return f"{what} needs ≈ K={k}" if k is not None else f"{what} needs more than K={cap}"
