"""``hf:`` files already in the user's Hugging Face cache, used in place (issue 40).

Before ``hf:OWNER/REPO/FILE`` is downloaded, the file is looked up in the cache ``huggingface_hub`` keeps
(its own rule for where: ``HF_HUB_CACHE``, else ``HF_HOME/hub``, else ``~/.cache/huggingface/hub``; read
when ``huggingface_hub`` is first imported) with ``huggingface_hub.try_to_load_from_cache`` at revision
``main`` — what ``refs/main`` of ``models--OWNER--REPO`` names. A file found there is used where it is: no
copy, no request, ``HF_HUB_OFFLINE=1`` or not.

That cache is **only read**. Nothing is written into it, not even a record: how the file was checked goes
to ``Paths.model_cache/hf-cache/<key>.download.json`` (:func:`record_file`; ``origin:
"huggingface-cache"``, the snapshot path and commit), which :func:`record` finds again from the path. The
checks are the downloader's: the file's sha256 is computed once (then kept in the record, valid while the
file's size and mtime stay) and compared with the ``#sha256=`` pin, else with the hub's hash as
``huggingface_hub`` stored it (an LFS blob is named by the sha256 the hub announced), else the file is
used UNVERIFIED, said loudly. A mismatch is one error and the file is not used.

Why not download into that cache with ``huggingface_hub.hf_hub_download``: it keeps none of
:mod:`.download`'s guarantees under our control. It names a blob after the announced sha256 without
checking the bytes (a wrong body is kept under the right name), Xet-backed repos are fetched by the
``hf_xet`` extension over its own connections (the exact-host, hop-by-hop token rule cannot see them),
``HF_ENDPOINT`` decides the host, and its partial files are not resumed with ``If-Range``. So llamaforge's
own downloader keeps writing into llamaforge's cache, and the Hugging Face cache is a read-only source.

With ``huggingface_hub`` not installed, or no hub cache folder, nothing here runs and ``hf:`` references
behave as before. With ``HF_HUB_OFFLINE`` set, a file in neither cache is one error instead of a download.
"""

from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from ..console import byte_progress
from ..errors import ModelError
from ..paths import Paths
from .download import make_dir, read_record, warn_unverified, write_record

ORIGIN = "huggingface-cache"
CHUNK = 1 << 20
_SHA = re.compile(r"^[0-9a-f]{64}$")


def _constants() -> ModuleType | None:
    """``huggingface_hub.constants`` (its reading of ``HF_HOME``/``HF_HUB_CACHE``/``HF_HUB_OFFLINE``), or
    None when ``huggingface_hub`` is not installed."""
    try:
        from huggingface_hub import constants
    except ImportError:
        return None
    return constants


def hub_cache_dir() -> Path | None:
    """The Hugging Face hub cache folder ``huggingface_hub`` uses, None without ``huggingface_hub``."""
    c = _constants()
    return Path(c.HF_HUB_CACHE) if c is not None else None


def offline() -> bool:
    """True when ``HF_HUB_OFFLINE`` (as ``huggingface_hub`` reads it) says not to call the hub."""
    c = _constants()
    return bool(c is not None and c.HF_HUB_OFFLINE)


@dataclass(frozen=True)
class Cached:
    """A file of the Hugging Face cache: its snapshot path and the commit of that snapshot."""

    path: Path
    revision: str


def find(spec: str, revision: str = "main") -> Cached | None:
    """``OWNER/REPO/FILE`` (already checked by :func:`.refs.hf_cache_path`) in the Hugging Face cache at
    ``revision``, or None (no ``huggingface_hub``, no cache folder, not cached, or a name it refuses)."""
    cache = hub_cache_dir()
    if cache is None or not cache.is_dir():
        return None
    owner, repo, *rest = spec.split("/")
    from huggingface_hub import try_to_load_from_cache  # third-party, loaded only where a hub cache exists

    try:
        got = try_to_load_from_cache(repo_id=f"{owner}/{repo}", filename="/".join(rest), cache_dir=cache,
                                     revision=revision)
    except (ValueError, OSError):          # HFValidationError is a ValueError: a name the hub would refuse
        return None
    if not isinstance(got, str):           # None, or the cached fact that the file does not exist
        return None
    path = Path(got)
    snapshots = cache / f"models--{owner}--{repo}" / "snapshots"
    try:
        commit = path.relative_to(snapshots).parts[0]
    except (ValueError, IndexError):
        return None
    return Cached(path, commit)


def record_file(path: Path, paths: Paths) -> Path:
    """Where the record of a Hugging Face cache file lives: in llamaforge's model cache, keyed by its path."""
    key = hashlib.sha256(str(Path(path).absolute()).encode()).hexdigest()[:32]
    return paths.model_cache / "hf-cache" / f"{key}.download.json"


def in_hub_cache(path: Path) -> bool:
    """True for a path inside the Hugging Face hub cache folder (as given, symlinks not followed)."""
    cache = hub_cache_dir()
    return cache is not None and Path(os.path.abspath(path)).is_relative_to(os.path.abspath(cache))


def record(path: Path, paths: Paths | None = None) -> dict | None:
    """The record of a Hugging Face cache file (None for any other path, or if it changed since)."""
    if not in_hub_cache(path):
        return None
    return read_record(Path(path), at=record_file(path, paths or Paths.default()))


def _sha256(path: Path, progress: bool) -> str:
    h = hashlib.sha256()
    try:
        with open(path, "rb") as f, byte_progress(f"sha256 of {path.name}", progress) as bar:
            task = bar.add_task("sha256", total=path.stat().st_size) if bar is not None else None
            for chunk in iter(lambda: f.read(CHUNK), b""):
                h.update(chunk)
                if bar is not None and task is not None:
                    bar.advance(task, len(chunk))
    except OSError as e:
        raise ModelError(f"cannot read {path} in the Hugging Face cache: {e.strerror or e}",
                         "check the file's permissions, or set HF_HUB_CACHE to another cache") from None
    return h.hexdigest()


def _mismatch(spec: str, found: Cached, digest: str, expected: str, pinned: bool) -> ModelError:
    owner, repo, *rest = spec.split("/")
    again = f"hf download {owner}/{repo} {'/'.join(rest)} --force-download"
    if pinned:
        return ModelError(f"hf:{spec} in the Hugging Face cache ({found.path}, commit {found.revision}) has sha256 "
                          f"{digest}, not the pinned {expected}; it was not used",
                          f"check the #sha256= pin; if the repo's main has moved, update the cache ({again})")
    return ModelError(f"hf:{spec} in the Hugging Face cache ({found.path}) has sha256 {digest}, not {expected} that "
                      "the hub announced (its blob's name): the cached file is damaged and was not used",
                      f"download it again ({again}) or delete it from the Hugging Face cache")


def use(found: Cached, spec: str, sha: str | None, ref: str, url: str, paths: Paths, *,
        progress: bool = True) -> Path:
    """``found``, checked: against the pinned ``sha`` (already lower-case 64 hex), else the hub's hash (its
    blob's name), else used UNVERIFIED with the warning. The sha256 is computed once and recorded in
    llamaforge's cache (:func:`record_file`); a mismatch raises :class:`ModelError`. Nothing is written
    into the Hugging Face cache."""
    at = record_file(found.path, paths)
    rec = read_record(found.path, at=at) or {}
    blob = found.path.resolve().name.lower()
    announced = blob if _SHA.match(blob) else None
    expected = sha or announced
    digest = rec.get("sha256")
    if not isinstance(digest, str) or (expected is not None and digest != expected):
        digest = _sha256(found.path, progress)   # never trust a record that disagrees: hash again first
    if expected is not None and digest != expected:
        raise _mismatch(spec, found, digest, expected, pinned=sha is not None)
    checked = "pinned" if sha else ("hub" if announced else None)
    if (rec.get("sha256"), rec.get("checked_against")) != (digest, checked):
        make_dir(at.parent)
        write_record(found.path, url, digest, checked, at=at,
                     extra={"origin": ORIGIN, "path": str(found.path), "revision": found.revision})
    if checked is None:
        warn_unverified(found.path, ref, digest)
    return found.path


def refuse_offline(spec: str) -> None:
    """With ``HF_HUB_OFFLINE`` set, a file in neither cache is one error, not a download."""
    if offline():
        owner, repo, *rest = spec.split("/")
        raise ModelError(f"hf:{spec} is in neither llamaforge's model cache nor the Hugging Face cache "
                         f"({hub_cache_dir()}), and HF_HUB_OFFLINE is set, so it is not downloaded",
                         f"unset HF_HUB_OFFLINE, or fetch it first: hf download {owner}/{repo} {'/'.join(rest)}")

