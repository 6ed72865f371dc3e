"""Values interpolated into Markdown, made inert.

Markdown renderers (GitHub, most static-site tools) pass raw HTML through, so a run named
``<script>…</script>``, a model path with ``<img onerror=…>`` or a commit subject with
``[x](javascript:…)`` would become live markup in a rendered ``report.md``. Every value that comes
from data (run names and ids, model references, build keys, commands, log tails, commit subjects)
goes through :func:`md_text` (prose and table cells) or :func:`md_code` (a code span). Both also make
control characters visible (:func:`llamaforge.visible.visible`: ``ESC`` becomes ``\\x1b``), so
``cat report.md`` in a terminal runs no escape sequence.
"""

from __future__ import annotations

import html
import re

from .visible import visible

# Characters that open inline syntax in CommonMark/GFM (links, images, emphasis, code, tables,
# strikethrough); ``(`` only matters after ``]``. ``<``/``>``/``&`` become HTML entities.
_INLINE = re.compile(r"([\\`*_\[\]!|~])")


def md_text(value: object) -> str:
    """``value`` as literal Markdown text on one line: HTML escaped, inline syntax backslash-escaped."""
    text = visible(" ".join(str(value).split()), one_line=True)
    return _INLINE.sub(r"\\\1", html.escape(text, quote=False))


def md_code(value: object, *, in_table: bool = False) -> str:
    """``value`` as one inline code span that no backtick inside it can close early (code spans are
    never parsed as HTML). ``in_table`` escapes ``|`` (GFM splits table cells before code spans)."""
    text = visible(" ".join(str(value).split()), one_line=True)
    longest = max((len(m) for m in re.findall(r"`+", text)), default=0)
    fence = "`" * (longest + 1)
    if text.startswith("`") or text.endswith("`"):
        text = f" {text} "
    if in_table:
        text = text.replace("|", "\\|")
    return f"{fence}{text}{fence}" if text else "` `"
