"""Helpers shared by every command module: the task decorator that turns LlamaforgeError into
one red line and a non-zero exit, and small option parsers."""

from __future__ import annotations

import functools
import math
import sqlite3
import sys
from collections.abc import Callable
from typing import Any

from invoke import task as invoke_task

from ..config import Pins, load_pins
from ..console import debug_enabled, print_error
from ..errors import ConfigError, LlamaforgeError
from ..invoke_help import LfTask
from ..paths import Paths


def lf_task(*dargs: Any, **dkwargs: Any) -> Callable:
    """Like ``invoke.task`` but user errors (and a damaged results store) print one line and exit
    non-zero (no traceback unless ``LLAMAFORGE_DEBUG=1``); Ctrl-C exits 130 after children are killed;
    options get only the short flags of :data:`~llamaforge.invoke_help.SHORT_FLAGS`."""

    def wrap(fn: Callable) -> Any:
        @functools.wraps(fn)
        def body(*args: Any, **kwargs: Any) -> Any:
            try:
                return fn(*args, **kwargs)
            except LlamaforgeError as e:
                if debug_enabled():
                    raise
                print_error(e)
                sys.exit(e.exit_code)
            except sqlite3.Error as e:   # the store went bad under us (a damaged page, a full disk)
                if debug_enabled():
                    raise
                from ..store import store_error

                err = store_error(paths().store_db, e)
                print_error(err)
                sys.exit(err.exit_code)
            except KeyboardInterrupt:
                from ..proc import kill_all

                kill_all()
                print("\ninterrupted", file=sys.stderr)
                sys.exit(130)

        return invoke_task(*dargs, **{"klass": LfTask, **dkwargs})(body)

    if len(dargs) == 1 and callable(dargs[0]) and not dkwargs:
        fn = dargs[0]
        dargs = ()
        return wrap(fn)
    return wrap


def paths() -> Paths:
    return Paths.default()


def pins() -> Pins:
    return load_pins(paths().pins_file)


def csv_list(value: str | None, *, what: str = "value") -> list[str]:
    if value is None:
        return []
    items = [v.strip() for v in str(value).split(",") if v.strip()]
    if not items:
        raise ConfigError(f"empty {what} list", f"give a comma-separated list of {what}s")
    return items


def as_int(value: Any, what: str, *, minimum: int | None = None, maximum: int | None = None) -> int:
    """An integer option (``--repeats 3``) or a ConfigError naming the option and the valid range."""
    rng = (f"{minimum}..{maximum}" if maximum is not None else f"≥ {minimum}") if minimum is not None else None
    try:
        n = int(str(value).strip().replace("_", ""), 10) if not isinstance(value, int) else value
    except ValueError:
        raise ConfigError(f"{what} {value!r} is not a whole number",
                          f"give {what} a whole number" + (f" ({rng})" if rng else "")) from None
    if (minimum is not None and n < minimum) or (maximum is not None and n > maximum):
        raise ConfigError(f"{what} {n} is out of range", f"give {what} a whole number {rng}")
    return n


def as_float(value: Any, what: str, *, minimum: float | None = None, positive: bool = False) -> float:
    """A number option (``--vram-budget 24``, ``--load-timeout 600``) or a ConfigError with the fix."""
    need = "a number > 0" if positive else (f"a number ≥ {minimum:g}" if minimum is not None else "a number")
    try:
        x = float(str(value).strip())
    except ValueError:
        raise ConfigError(f"{what} {value!r} is not a number", f"give {what} {need}") from None
    if not math.isfinite(x) or (positive and x <= 0) or (minimum is not None and x < minimum):
        raise ConfigError(f"{what} {value!r} is out of range", f"give {what} {need}")
    return x
