"""The one rich Console of the program, and how errors are shown.

Values that come from data (run names, pins, paths, model metadata, log lines, error messages) are
written by strangers: every one interpolated into rich markup goes through :func:`esc`, and the
consoles have emoji codes off (``A:b:STEP`` stays text). :func:`notice` and :func:`print_error`
escape their whole message themselves.
"""

from __future__ import annotations

import os
import sys

from rich.console import Console
from rich.markup import escape

from .errors import LlamaforgeError
from .redact import redact_text

# Piped output (CI logs, `| tee`) gets a wide console instead of rich's 80 columns, so tables stay readable.
_WIDTH = None if sys.stdout.isatty() or os.environ.get("COLUMNS") else 160
console = Console(stderr=False, highlight=False, width=_WIDTH, emoji=False)
err_console = Console(stderr=True, highlight=False, emoji=False)


def esc(value: object) -> str:
    """``value`` as text that rich prints verbatim (``[/x]`` stays ``[/x]``)."""
    return escape(str(value))


def debug_enabled() -> bool:
    return os.environ.get("LLAMAFORGE_DEBUG", "") not in ("", "0")


def print_error(exc: LlamaforgeError) -> None:
    """Print an error as one red line, followed by the fix (if any)."""
    line = f"[bold red]error:[/] {esc(redact_text(exc.message))}"
    if exc.fix:
        line += f"  [yellow]fix:[/] {esc(redact_text(exc.fix))}"
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
    import contextlib

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
    from rich.markup import escape

    err_console.print(f"[bold yellow]warning:[/] {escape(redact_text(msg) or '')}", soft_wrap=True)
