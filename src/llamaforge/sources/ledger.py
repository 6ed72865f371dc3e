"""The ledger: which commit each pypi/tarball source was verified to hold, kept beside the mirror.

A commit in the mirror does not say which sources were checked against it, so without a record a warm
cache would accept any pin whose commit is already there. Whenever a source is verified (its sdist's
CHANGELOG or its archive's git header read from bytes whose sha256 was checked), the fact is written
here: ``<mirror>.verified/<hash of the source>.json`` holding the source string, the commit it holds
(``null`` for an archive that names none), the sha256 of the file and how that sha256 was checked.
A fact is about the source, not about a pin: a refusal is recorded as well as an acceptance.

The folder is a cache that anyone with access to it may have changed: a record is read only when it is a
small regular file of the expected shape for exactly that source; anything else is ignored with a notice
(the source is then verified again and the record rewritten), never trusted and never a traceback.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path

from ..config import SourceSpec
from ..console import notice
from ..files import write_problem, write_text_atomic
from .mirror import Mirror
from .pyindex import plain_filename

VERSION = 1
MAX_BYTES = 16 * 1024
_COMMIT = re.compile(r"^[0-9a-f]{7,40}$")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_FIELDS = {"version", "source", "commit", "sha256", "file", "checked"}


@dataclass(frozen=True)
class SourceFact:
    """What one verification of a source found."""

    source: str            # str(SourceSpec)
    commit: str | None     # the llama.cpp commit it holds, as read (None: an archive that names none)
    sha256: str            # of the file whose contents were read
    file: str              # that file's name (for messages)
    checked: str           # how its sha256 was checked ("checked against pins.toml", "local file", ...)


def folder(mirror: Mirror) -> Path:
    """Where the records live: ``mirror.git.verified`` beside the mirror (written under its lock)."""
    return mirror.path.with_name(mirror.path.name + ".verified")


def record_path(mirror: Mirror, source: str) -> Path:
    return folder(mirror) / f"{hashlib.sha256(source.encode()).hexdigest()[:32]}.json"


def _plain_text(value: object, limit: int) -> bool:
    return isinstance(value, str) and 0 < len(value) <= limit and not any(ord(c) < 32 or c == "\x7f" for c in value)


def _problem(data: object, source: str) -> str | None:
    """Why ``data`` is not a valid record of ``source`` (None when it is)."""
    if not isinstance(data, dict) or set(data) != _FIELDS:
        return "not a record"
    if type(data["version"]) is not int or data["version"] != VERSION:
        return f"unknown version {data['version']!r:.20}"
    if data["source"] != source:
        return "it is the record of another source"
    commit = data["commit"]
    if commit is not None and not (isinstance(commit, str) and _COMMIT.match(commit)):
        return "bad commit"
    if not (isinstance(data["sha256"], str) and _SHA256.match(data["sha256"])):
        return "bad sha256"
    if not (isinstance(data["file"], str) and plain_filename(data["file"])):
        return "bad file name"
    if not _plain_text(data["checked"], 300):
        return "bad 'checked'"
    return None


def _read_text(path: Path) -> str | None:
    """The record file's text; None when there is none. ValueError when it is not a small regular file."""
    try:
        st = os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    if not stat.S_ISREG(st.st_mode):
        raise ValueError("not a regular file")
    if st.st_size > MAX_BYTES:
        raise ValueError(f"larger than {MAX_BYTES} bytes")
    with open(path, "rb") as f:
        return f.read(MAX_BYTES + 1).decode("utf-8")


def read(mirror: Mirror, spec: SourceSpec) -> SourceFact | None:
    """The recorded fact of ``spec``; None when there is none or it is damaged (said in one notice)."""
    source = str(spec)
    path = record_path(mirror, source)
    try:
        text = _read_text(path)
        if text is None:
            return None
        data = json.loads(text)
        why = _problem(data, source)
    except (OSError, ValueError, RecursionError) as e:   # UnicodeDecodeError and JSONDecodeError are ValueErrors
        why = str(e).splitlines()[0][:120] if str(e).strip() else type(e).__name__
    if why is not None:
        notice(f"ignoring the damaged check record {path} of {source} ({why}); checking the source again")
        return None
    return SourceFact(source, data["commit"], data["sha256"], data["file"], data["checked"])


def write(mirror: Mirror, fact: SourceFact) -> None:
    """Remember ``fact`` (atomically). A record that cannot be written costs a check next time, nothing more."""
    path = record_path(mirror, fact.source)
    data = {"version": VERSION, "source": fact.source, "commit": fact.commit, "sha256": fact.sha256,
            "file": fact.file, "checked": fact.checked}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(path, json.dumps(data, indent=1, sort_keys=True) + "\n")
    except OSError as e:
        notice(f"the check of {fact.source} is not remembered ({write_problem(path, e)[0]}); "
               "it is checked again next time")
