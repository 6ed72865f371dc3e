"""The one parser of option values that are numbers or lists: a whole number or a number within bounds,
a comma-separated list, a relative effect. Anything unusable is one :class:`~llamaforge.errors.ConfigError`
line naming the option and the value, with a fix that states the valid range (and the option's example,
where it has one).

Every task uses these (through the bench options table, :mod:`llamaforge.bench.cli_options`, for the
bench options); there is no other integer parser for options.

Relative effects (``compare --min-effect``, ``bisect --threshold``, ``report --min-effect``): the rule, the
same for every option, is a **fraction below 1** (``0.05``) or a **percent with its sign** (``5%``, ``0.5%``).
A bare number of 1 or more (``5``) is refused as ambiguous — 5 % or 500 %? — with the two ways to write
what was meant (:func:`parse_effect`).
"""

from __future__ import annotations

import math
from typing import Any

from .errors import ConfigError

#: the largest --seed (a signed 64-bit integer: what the store and every RNG take)
SEED_MAX = 2**63 - 1


def _range_text(minimum: float | None, maximum: float | None) -> str:
    def num(x: float) -> str:
        return f"{x:g}" if isinstance(x, float) else str(x)

    if minimum is not None and maximum is not None:
        return f"{num(minimum)}..{num(maximum)}"
    if minimum is not None:
        return f"at least {num(minimum)}"
    return "" if maximum is None else f"at most {num(maximum)}"


def _fix(what: str, need: str, example: str | None) -> str:
    return f"give {what} {need}" + (f"; {example}" if example else "")


def as_int(value: Any, what: str, *, minimum: int | None = None, maximum: int | None = None,
           example: str | None = None) -> int:
    """``value`` (``3``, ``"3"``, ``" 1_000 "``) as an int within ``minimum``..``maximum`` (either may be
    ``None``), or a ConfigError naming ``what`` with the valid range (and ``example``) as its fix."""
    rng = _range_text(minimum, maximum)
    need = "a whole number" + (f" {rng}" if rng else "")
    if isinstance(value, bool):
        raise ConfigError(f"{what} {value!r} is not a whole number", _fix(what, need, example))
    if not isinstance(value, int) and not str(value).isascii():     # int("３") is 3: a full-width digit is no number here
        raise ConfigError(f"{what} {value!r} is not a whole number (ASCII digits only)", _fix(what, need, example))
    try:
        n = value if isinstance(value, int) else int(str(value).strip().replace("_", ""), 10)
    except ValueError:
        raise ConfigError(f"{what} {value!r} is not a whole number", _fix(what, need, example)) from None
    if (minimum is not None and n < minimum) or (maximum is not None and n > maximum):
        shown = str(n) if len(str(n)) <= 24 else str(n)[:20] + "…"
        raise ConfigError(f"{what} {shown} is out of range", _fix(what, need, example))
    return n


def as_float(value: Any, what: str, *, minimum: float | None = None, positive: bool = False,
             example: str | None = None, maximum: float | None = None) -> float:
    """``value`` as a finite float (``> 0`` with ``positive``, ``≥ minimum``), or a ConfigError with the fix."""
    need = "a number > 0" if positive else (f"a number ≥ {minimum:g}" if minimum is not None else "a number")
    if maximum is not None:
        need += f" and ≤ {maximum:g}"
    if not isinstance(value, int | float) and not str(value).isascii():
        raise ConfigError(f"{what} {value!r} is not a number (ASCII digits only)", _fix(what, need, example))
    try:
        x = float(str(value).strip())
    except ValueError:
        raise ConfigError(f"{what} {value!r} is not a number", _fix(what, need, example)) from None
    if not math.isfinite(x) or (positive and x <= 0) or (minimum is not None and x < minimum) or \
            (maximum is not None and x > maximum):
        raise ConfigError(f"{what} {value!r} is out of range", _fix(what, need, example))
    return x


def csv_list(value: str | None, *, what: str = "value") -> list[str]:
    """``"a, b,c"`` → ``["a", "b", "c"]`` (``None`` → ``[]``); a list with no item is a ConfigError."""
    if value is None:
        return []
    items = [v.strip() for v in str(value).split(",") if v.strip()]
    if not items:
        raise ConfigError(f"empty {what} list", f"give a comma-separated list of {what}s")
    return items


def parse_effect(value: Any, *, option: str = "--min-effect", default: float = 0.05,
                 allow_zero: bool = True) -> float:
    """``"5%"`` / ``"0.05"`` / ``0.05`` → 0.05; ``None`` or ``""`` → ``default``. ConfigError otherwise:
    not a number, ambiguous (a bare number ≥ 1), or out of range (0 ≤ effect < 1; above 0 with
    ``allow_zero=False``)."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return default
    text = str(value).strip()
    if not text.isascii():
        raise ConfigError(f"{option} {value!r} is not a number (ASCII digits only)",
                          f"give a fraction or a percent, e.g. {option} 0.05 or {option} 5%")
    percent = text.endswith("%")
    try:
        v = float(text[:-1].strip() if percent else text)
    except ValueError:
        raise ConfigError(f"{option} {value!r} is not a number", f"give a fraction or a percent, e.g. {option} 0.05 "
                          f"or {option} 5%") from None
    if not percent and v >= 1:
        raise ConfigError(f"{option} {value!r} is ambiguous (a percent or a fraction?)",
                          f"write {option} {text}% for {text} percent, or a fraction below 1 such as 0.05")
    if percent:
        v /= 100.0
    if not (0 <= v < 1) or (v == 0 and not allow_zero):
        lowest = "0" if allow_zero else "more than 0"
        raise ConfigError(f"{option} {value!r} is out of range", f"give an effect from {lowest} up to 100% "
                          f"(not included), e.g. {option} 5%")
    return v
