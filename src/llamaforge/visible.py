"""Text from data made inert for every reader: no control character reaches a terminal, a report or
a log raw.

Run names, pin names, model metadata (``general.name`` and every other GGUF string), paths, log tails
and error messages are written by strangers. Printed raw, ``ESC ]52;c;…`` writes the clipboard,
``ESC [2J`` clears the screen, ``ESC [8m`` hides text, a C1 ``0x9b`` is a one-byte CSI on some
terminals and U+202E turns the rest of a line around. :func:`visible` replaces each such character
with its escape as Python writes it (``\\x1b``, ``\\x9b``, ``\\u202e``), so it can still be seen and
searched for, and it acts on nothing. A byte that was not UTF-8 (argv and file names are decoded with
``surrogateescape``: ``0xff`` arrives as U+DCFF) is shown as ``\\xff``, so writing the text can never
raise UnicodeEncodeError.

Used by :func:`llamaforge.console.esc` and the consoles themselves (terminal), :mod:`llamaforge.mdtext`
(Markdown) and the Jinja environments of the report and the history site (HTML: :func:`html_templates`). JSON output needs nothing: ``json.dumps`` writes
every non-ASCII and control character as ``\\uXXXX``.
"""

from __future__ import annotations

import re
from typing import Any

# C0 but \t \n \r, DEL, C1; the bidi embeddings/overrides (U+202A–202E) and isolates (U+2066–2069);
# lone surrogates; \r not followed by \n (it sends the cursor back over the line: text hidden).
_UNSAFE = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\ud800-\udfff]|\r(?!\n)")
_UNSAFE_ONE_LINE = re.compile("[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")


def _escape(m: re.Match[str]) -> str:
    cp = ord(m.group())
    if 0xDC80 <= cp <= 0xDCFF:          # a byte that was not UTF-8, decoded with surrogateescape
        return f"\\x{cp - 0xDC00:02x}"
    return f"\\x{cp:02x}" if cp < 0x100 else f"\\u{cp:04x}"


def visible(value: object, *, one_line: bool = False) -> str:
    """``str(value)`` with every control character written as its escape (``\\x1b``). Tabs and line
    breaks stay unless ``one_line`` (then they are escaped too)."""
    text = str(value)
    pattern = _UNSAFE_ONE_LINE if one_line else _UNSAFE
    return pattern.sub(_escape, text) if pattern.search(text) else text


def is_clean(text: str) -> bool:
    """Whether ``text`` has no character :func:`visible` would escape (line breaks and tabs included)."""
    return _UNSAFE_ONE_LINE.search(text) is None


def html_templates(folder: Any) -> Any:
    """A Jinja environment for HTML made from data (the report, the history site): autoescape on, and every
    ``{{ value }}`` through :func:`visible` (autoescape keeps ``ESC`` as it is)."""
    from jinja2 import Environment, FileSystemLoader, select_autoescape
    from markupsafe import Markup

    def shown(value: object) -> object:
        if isinstance(value, Markup):
            return Markup(visible(str(value)))
        return visible(value) if isinstance(value, str) else value

    return Environment(loader=FileSystemLoader(str(folder)), autoescape=select_autoescape(["html", "j2"]),
                       trim_blocks=True, lstrip_blocks=True, finalize=shown)
