"""The one way text from a store (or any data) becomes part of a path: :func:`component`.

A store is data that travels (fleet imports, committed ``results/``): a run id ``/abs/path`` or
``../../x``, a build key or a label must never choose where llamaforge writes. Every path built from
such text joins :func:`component` of it (or :func:`under`, which does the join): only
``A-Z a-z 0-9 . _ -`` are kept, anything else becomes ``_``, a leading dot becomes ``_`` (so no
``.``, ``..`` or hidden names), and a name that had to change, or is too long, gets a short hash of
the original so two different ids never share a folder. Ordinary ids (``20261201-101500-ab12``,
``cpu-0c1e570-1a2b``) are unchanged.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")
MAX_LEN = 120   # well under every file system's 255-byte name limit, with room for a suffix


def component(text: object) -> str:
    """``text`` as one safe path component (never empty, ``.``/``..``, hidden, or containing ``/``)."""
    raw = str(text)
    safe = _UNSAFE.sub("_", raw)
    if safe.startswith("."):
        safe = "_" + safe[1:]
    if safe != raw or not safe or len(safe) > MAX_LEN:
        digest = hashlib.sha256(raw.encode("utf-8", "surrogatepass")).hexdigest()[:8]
        safe = f"{safe[:MAX_LEN - 9] or '_'}-{digest}"
    return safe


def under(root: Path, *parts: object) -> Path:
    """``root`` joined with :func:`component` of every part: always a path inside ``root``."""
    return Path(root).joinpath(*(component(p) for p in parts))


def run_log_dir(store_path: Path, run_id: str) -> Path:
    """``logs/<run id>/`` beside the store: where a run's llama.cpp logs go."""
    return under(Path(store_path).parent / "logs", run_id)
