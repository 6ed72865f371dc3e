"""The sequential-starts options shared by bench, reproduce, compare and bisect:
``--launches auto|K``, ``--max-launches N`` and ``--precision P`` → one :class:`LaunchOptions`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..effect import parse_effect
from ..errors import ConfigError
from ..judge import Policy
from ..judge.sequential import DEFAULT_MAX_STARTS, DEFAULT_MIN_STARTS, DEFAULT_PRECISION
from ._common import as_int

HELP = {
    "launches": "server starts per point: auto (default: from 3, more only where a verdict is still open, up to "
                "--max-launches) or a number K",
    "max_launches": f"with --launches auto: the most starts per point (default {DEFAULT_MAX_STARTS}); a point that "
                    "reaches it still open is reported unresolved, with its spread",
    "precision": f"with --launches auto: wanted half-width of a point's 95 % CI, e.g. 5% (default "
                 f"{DEFAULT_PRECISION:.0%})",
}

#: the most starts per point anyone can ask for (keeps a typo from scheduling a week of measuring)
MAX_LAUNCHES_LIMIT = 100


@dataclass(frozen=True)
class LaunchOptions:
    fixed: int | None          # K, or None for auto
    policy: Policy

    @property
    def auto(self) -> bool:
        return self.fixed is None


def parse_launches(launches: Any = "auto", max_launches: Any = None, precision: Any = None) -> LaunchOptions:
    """The three options checked together; one ConfigError line (with the fix) for anything unusable."""
    text = "auto" if launches is None else str(launches).strip().lower()
    max_n = None if max_launches is None else as_int(max_launches, "--max-launches", minimum=1,
                                                          maximum=MAX_LAUNCHES_LIMIT)
    prec = parse_effect(precision, option="--precision", default=DEFAULT_PRECISION, allow_zero=False)
    if text == "auto":
        top = DEFAULT_MAX_STARTS if max_n is None else max_n
        if top < DEFAULT_MIN_STARTS:
            raise ConfigError(f"--max-launches {top} leaves --launches auto no room (it starts with "
                              f"{DEFAULT_MIN_STARTS} starts per point)",
                              f"give --max-launches {DEFAULT_MIN_STARTS} or more, or a fixed count: --launches {top}")
        return LaunchOptions(None, Policy(max_starts=top, precision=prec))
    k = as_int(launches, "--launches", minimum=1, maximum=MAX_LAUNCHES_LIMIT)
    if max_n is not None and max_n != k:
        raise ConfigError(f"--max-launches {max_n} only applies to --launches auto (got --launches {k})",
                          "leave out --max-launches, or use --launches auto --max-launches N")
    return LaunchOptions(k, Policy(min_starts=k, max_starts=k, precision=prec))
