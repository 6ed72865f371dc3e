"""Helpers shared by every command module: the task decorator that turns LlamaforgeError into
one red line and a non-zero exit, output paths checked up front; the number and list parsers are
:mod:`llamaforge.values` (re-exported here)."""

from __future__ import annotations

import errno
import functools
import os
import sqlite3
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from invoke import task as invoke_task

from ..config import Pins, load_pins
from ..console import debug_enabled, harden_streams, print_error, quiet_broken_pipe
from ..errors import ConfigError, LlamaforgeError
from ..files import folder_problem
from ..invoke_help import ERROR_EXIT, LfTask
from ..paths import Paths
from ..values import SEED_MAX, as_float, as_int, csv_list

__all__ = ["SEED_MAX", "as_float", "as_int", "csv_list", "lf_task", "os_error", "paths", "pins", "pins_or_empty",
           "writable_dir",
           "write_output"]


def lf_task(*dargs: Any, **dkwargs: Any) -> Callable:
    """Like ``invoke.task`` but user errors (and a damaged results store, and a path the system refuses)
    print one line and exit non-zero (no traceback unless ``LLAMAFORGE_DEBUG=1``); option values with
    control characters or bytes that are not UTF-8 are refused before the task runs; a closed stdout
    (``| head``) ends quietly; Ctrl-C exits 130 after children are killed; options get only the short
    flags of :data:`~llamaforge.invoke_help.SHORT_FLAGS`. ``error_exit`` replaces the exit status of
    every such error (``bisect-run``: 128, which stops ``git bisect``)."""
    error_exit = dkwargs.pop("error_exit", None)

    def wrap(fn: Callable) -> Any:
        if error_exit:
            ERROR_EXIT[dkwargs.get("name") or fn.__name__] = error_exit   # values the parser refuses, too
        @functools.wraps(fn)
        def body(*args: Any, **kwargs: Any) -> Any:
            harden_streams()
            try:
                check_option_text(args[1:], kwargs)
                out = fn(*args, **kwargs)
                sys.stdout.flush()    # a closed pipe shows here, not as "Exception ignored" at exit
                return out
            except BrokenPipeError:
                quiet_broken_pipe()
            except (LlamaforgeError, sqlite3.Error, OSError) as e:
                if debug_enabled():
                    raise
                err = _as_user_error(e)
                print_error(err)
                sys.exit(error_exit or err.exit_code)
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


def _as_user_error(e: Exception) -> LlamaforgeError:
    if isinstance(e, LlamaforgeError):
        return e
    if isinstance(e, sqlite3.Error):   # the store went bad under us (a damaged page, a full disk)
        from ..store import store_error

        return store_error(paths().store_db, e)
    assert isinstance(e, OSError)
    return os_error(e)


#: errno -> the fix for a path the system refused
_OS_FIXES = {errno.ENOSPC: "free space on that filesystem, or choose a location on another one",
             errno.EDQUOT: "free space (your disk quota is full), or choose another location",
             errno.EROFS: "choose a location on a writable filesystem",
             errno.EACCES: "choose a location you may write to (or fix its permissions)",
             errno.EPERM: "choose a location you may write to (or fix its permissions)",
             errno.EISDIR: "give a file name, not a directory",
             errno.ENOTDIR: "a part of that path is a file, not a folder: give another path",
             errno.EEXIST: "a file is where a folder is needed: move it, or give another path",
             errno.ENOENT: "check the path (its folder must exist)",
             errno.ENAMETOOLONG: "give a shorter path"}


def os_error(e: OSError, path: Path | None = None) -> LlamaforgeError:
    """An OSError the task did not expect (ENOSPC, EACCES, EISDIR ...) as one line naming the path (the
    error's own, else ``path``) and the system's reason, with a fix."""
    from ..redact import redact_text

    what = e.strerror or type(e).__name__
    filename = e.filename if e.filename is not None else path
    if filename is not None:
        where = f"{filename}" + (f" → {e.filename2}" if e.filename2 is not None else "")
        msg = f"{where}: {what}"
    else:
        msg = redact_text(str(e)) or what
    return LlamaforgeError(msg, _OS_FIXES.get(e.errno or -1, "check the path and try again"))


def check_option_text(args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    """Refuse option values with control characters (``ESC``, a newline, C1, bidi overrides) or bytes that
    were not UTF-8: no name, path, reference or list llamaforge takes has them, and they would reach the
    store, the reports and the terminal."""
    from ..visible import is_clean, visible

    named = [(f"--{k.replace('_', '-')}", v) for k, v in kwargs.items()] + [("an argument", v) for v in args]
    for what, value in named:
        for v in value if isinstance(value, (list, tuple)) else [value]:
            if isinstance(v, str) and not is_clean(v):
                kind = "a byte that is not UTF-8" if any(0xD800 <= ord(ch) <= 0xDFFF for ch in v) \
                    else "a control character"
                raise ConfigError(f"{what} '{visible(v, one_line=True)}' contains {kind}",
                                  f"give {what} as plain text (UTF-8, no control characters)")


def paths() -> Paths:
    return Paths.default()


def pins() -> Pins:
    return load_pins(paths().pins_file)


def pins_or_empty() -> Pins:
    """The pins in force, or none when they cannot be read (a checkout revision needs no pins)."""
    try:
        return pins()
    except ConfigError:
        return Pins()


def writable_dir(value: Any, what: str) -> Path:
    """An output folder (created later, when there is something to write) checked now
    (:func:`~llamaforge.files.folder_problem`): a problem is one line."""
    d = Path(str(value)).expanduser()
    problem = folder_problem(d)
    if problem is not None:
        raise ConfigError(f"{what} {d}{problem[0]}", f"{what}: {problem[1]}")
    return d


def write_output(value: Any, text: str, what: str) -> Path:
    """Write an output file the user named (``--output``): refused in one line when it is a folder or
    under a file; a regular file is written whole or not at all (temporary sibling, then renamed: a full
    disk leaves nothing behind); a device or pipe (``/dev/stdout``) is written in place."""
    out = Path(str(value)).expanduser()
    if out.is_dir():
        raise ConfigError(f"{what} {out} is a folder", f"give {what} a file name, e.g. {out / 'run.json'}")
    near = out.parent
    while not near.exists() and near != near.parent:
        near = near.parent
    if not near.is_dir():
        raise ConfigError(f"{what} {out}: {near} is a file, not a folder", f"give {what} a path in a folder")
    tmp = out.with_name(f".{out.name}.tmp{os.getpid()}")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        if out.exists() and not out.is_file():
            with open(out, "w", encoding="utf-8") as f:
                f.write(text)
            return out
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, out)
    except OSError as e:
        raise os_error(e, out) from None
    finally:
        tmp.unlink(missing_ok=True)
    return out
