"""The one parser for relative effects (``compare --min-effect``, ``bisect --threshold``, ``report --min-effect``).

The rule, the same for every option: a **fraction below 1** (``0.05``) or a **percent with its sign**
(``5%``, ``0.5%``). A bare number of 1 or more (``5``) is refused as ambiguous — 5 % or 500 %? —
with the two ways to write what was meant.
"""

from __future__ import annotations

from typing import Any

from .errors import ConfigError


def parse_effect(value: Any, *, option: str = "--min-effect", default: float = 0.05,
                 allow_zero: bool = True) -> float:
    """``"5%"`` / ``"0.05"`` / ``0.05`` → 0.05; ``None`` or ``""`` → ``default``. ConfigError otherwise:
    not a number, ambiguous (a bare number ≥ 1), or out of range (0 ≤ effect < 1; above 0 with
    ``allow_zero=False``)."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return default
    text = str(value).strip()
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
