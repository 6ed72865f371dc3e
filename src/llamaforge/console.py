"""The one rich Console of the program, and how errors are shown.

Values that come from data (run names, pins, paths, model metadata, log lines, error messages) are
written by strangers: every one interpolated into rich markup goes through :func:`esc` (markup escaped,
control characters made visible by :func:`llamaforge.visible.visible`), and the consoles have emoji
codes off (``A:b:STEP`` stays text). :func:`notice` and :func:`print_error` escape their whole message
themselves. As a second line of defence the consoles make every control character visible in whatever
they render (a ``markup=False`` log tail, a table title), so nothing printed through them can move the
cursor, write the clipboard or fail to encode; a closed pipe (``| head``) ends the program quietly.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterable

from rich.console import Console, ConsoleOptions, RenderableType
from rich.markup import escape
from rich.segment import Segment

from .errors import LlamaforgeError
from .redact import redact_text
from .visible import visible


class SafeConsole(Console):
    """A rich Console that writes no control character it was given: text segments pass through
    :func:`~llamaforge.visible.visible` (rich's own styles and cursor controls are added after)."""

    def render(self, renderable: RenderableType, options: ConsoleOptions | None = None) -> Iterable[Segment]:
        for seg in super().render(renderable, options):
            yield seg if seg.control or not seg.text else Segment(visible(seg.text), seg.style)

    def on_broken_pipe(self) -> None:
        quiet_broken_pipe()


# Piped output (CI logs, `| tee`) gets a wide console instead of rich's 80 columns, so tables stay readable.
_WIDTH = None if sys.stdout.isatty() or os.environ.get("COLUMNS") else 160
console = SafeConsole(stderr=False, highlight=False, width=_WIDTH, emoji=False)
err_console = SafeConsole(stderr=True, highlight=False, emoji=False)


def esc(value: object) -> str:
    """``value`` as text that rich prints verbatim (``[/x]`` stays ``[/x]``) with its control characters
    made visible (``ESC`` prints as ``\\x1b``): the one function for data interpolated into markup."""
    return escape(visible(value))


def harden_streams() -> None:
    """stdout/stderr write what they cannot encode as ``\\xNN``/``\\uNNNN`` instead of raising
    (a lone surrogate from a non-UTF-8 argument); idempotent, a no-op on streams without ``reconfigure``."""
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            with contextlib.suppress(ValueError, OSError):
                reconfigure(errors="backslashreplace")


def quiet_broken_pipe() -> None:
    """The reader of stdout went away (``| head -5``): end quietly with exit 1, as rich and Python's own
    advice do; stdout is pointed at /dev/null so the flush at exit cannot fail again."""
    with contextlib.suppress(OSError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    raise SystemExit(1)


def debug_enabled() -> bool:
    return os.environ.get("LLAMAFORGE_DEBUG", "") not in ("", "0")


def verbose_enabled() -> bool:
    """``llamaforge --verbose`` (``LLAMAFORGE_VERBOSE=1``) or ``LLAMAFORGE_DEBUG=1``: the details behind a calm line
    (a rescued smoke run's crash); debug also shows tracebacks."""
    return debug_enabled() or os.environ.get("LLAMAFORGE_VERBOSE", "") not in ("", "0")


def print_error(exc: LlamaforgeError) -> None:
    """Print an error as one red line, followed by the fix (if any)."""
    line = f"[bold red]error:[/] {escape(visible(redact_text(exc.message), one_line=True))}"
    if exc.fix:
        line += f"  [yellow]fix:[/] {escape(visible(redact_text(exc.fix), one_line=True))}"
    err_console.print(line, soft_wrap=True)


def info(msg: str) -> None:
    """Print rich markup: escape interpolated values with :func:`esc`."""
    console.print(msg, soft_wrap=True)


def notice(msg: str) -> None:
    """A one-line notice (e.g. a source fell through to the next) on stderr; ``msg`` is plain text."""
    err_console.print(f"[yellow]notice:[/] {esc(redact_text(msg))}", soft_wrap=True)


def byte_progress(label: str, enabled: bool = True):  # noqa: ANN201
    """A rich progress bar for byte streams (downloads, model writes); a no-op context when disabled.
    Tasks are added by the caller: ``bar.add_task(label, total=nbytes)``."""
    if not enabled:
        return contextlib.nullcontext(None)
    from rich.progress import (
        BarColumn,
        DownloadColumn,
        Progress,
        TextColumn,
        TimeRemainingColumn,
        TransferSpeedColumn,
    )

    return Progress(TextColumn(esc(label)), BarColumn(), DownloadColumn(binary_units=True), TransferSpeedColumn(),
                    TimeRemainingColumn(), console=console)


def warning(msg: str) -> None:
    """A loud one-line warning on stderr (``msg`` is data: printed literally, no rich markup)."""
    err_console.print(f"[bold yellow]warning:[/] {esc(redact_text(msg) or '')}", soft_wrap=True)
