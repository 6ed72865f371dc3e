"""Resumable, verified downloads of model files (Hugging Face or any http(s) URL).

``download(url, dest)`` streams into ``dest.part``; a later call resumes it with an HTTP ``Range``
request (a server that ignores Range gets a fresh start). The sha256 is checked against the given
hash, else against the hub's: for LFS files Hugging Face sends it as ``X-Linked-ETag`` (or
``ETag``). A mismatch removes the file and raises :class:`ModelError`; success is an atomic rename.
``HF_TOKEN`` in the environment is sent as a bearer token to huggingface.co.
"""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path

import requests

from ..console import byte_progress
from ..errors import ModelError
from ..files import sha256_hash

CHUNK = 1 << 20
_SHA = re.compile(r"^[0-9a-f]{64}$")


def hf_url(owner_repo_file: str, revision: str = "main") -> str:
    """``OWNER/REPO/path/to/FILE`` -> the hub's resolve URL."""
    parts = owner_repo_file.strip("/").split("/")
    if len(parts) < 3 or not all(parts):
        raise ModelError(f"bad Hugging Face reference {owner_repo_file!r}", "write hf:OWNER/REPO/FILE.gguf")
    return f"https://huggingface.co/{parts[0]}/{parts[1]}/resolve/{revision}/{'/'.join(parts[2:])}"


def hub_sha256(headers: requests.structures.CaseInsensitiveDict | dict) -> str | None:
    """The sha256 a hub announces for a file (``X-Linked-ETag``/``ETag`` when it is 64 hex digits)."""
    for key in ("X-Linked-ETag", "ETag"):
        v = headers.get(key)
        if v:
            v = v.strip()
            if v.startswith("W/"):
                v = v[2:]
            v = v.strip('"').lower()
            if _SHA.match(v):
                return v
    return None


def _headers(url: str) -> dict[str, str]:
    h = {"User-Agent": "llamaforge"}
    token = os.environ.get("HF_TOKEN")
    if token and "huggingface.co" in url:
        h["Authorization"] = f"Bearer {token}"
    return h


def _progress(total: int | None, label: str, enabled: bool):  # noqa: ANN202
    return byte_progress(label, enabled)


def _hash_file(path: Path) -> hashlib._Hash:
    return sha256_hash(path)


def download(url: str, dest: Path, *, sha256: str | None = None, progress: bool = True,
             session: requests.Session | None = None, timeout: float = 30.0) -> Path:
    """Download ``url`` to ``dest`` (resuming ``dest.part``), verify its sha256, rename atomically."""
    dest = Path(dest)
    if sha256 is not None:
        sha256 = sha256.strip().lower()
        if not _SHA.match(sha256):
            raise ModelError(f"bad sha256 {sha256!r}", "give 64 hex digits after #sha256=")
    dest.parent.mkdir(parents=True, exist_ok=True)
    part = dest.with_name(dest.name + ".part")
    s = session or requests.Session()
    have = part.stat().st_size if part.exists() else 0
    headers = _headers(url)
    if have:
        headers["Range"] = f"bytes={have}-"
    try:
        r = s.get(url, headers=headers, stream=True, timeout=timeout, allow_redirects=True)
    except requests.RequestException as e:
        raise ModelError(f"cannot download {url}: {e}", "check the URL and your network (a partial file is kept to resume)") from e
    with r:
        if r.status_code == 416 and have:
            # our partial file is already complete (or longer than the file): start over to be safe
            part.unlink()
            return download(url, dest, sha256=sha256, progress=progress, session=s, timeout=timeout)
        if r.status_code not in (200, 206):
            raise ModelError(f"cannot download {url}: HTTP {r.status_code} {r.reason}",
                             "check the reference (owner/repo/file) and, for gated repos, set HF_TOKEN")
        resumed = r.status_code == 206 and have > 0
        expected = sha256 or hub_sha256(r.headers)
        h = _hash_file(part) if resumed else hashlib.sha256()
        if not resumed:
            have = 0
        length = r.headers.get("Content-Length")
        total = have + int(length) if length and length.isdigit() else None
        try:
            with open(part, "ab" if resumed else "wb") as f, _progress(total, dest.name, progress) as bar:
                task = bar.add_task("dl", total=total, completed=have) if bar else None
                for chunk in r.iter_content(CHUNK):
                    if chunk:
                        f.write(chunk)
                        h.update(chunk)
                        if bar:
                            bar.advance(task, len(chunk))
                f.flush()
                os.fsync(f.fileno())
        except requests.RequestException as e:
            raise ModelError(f"download of {url} was interrupted: {e}",
                             "run the same command again to resume") from e
        except OSError as e:
            raise ModelError(f"cannot write {part}: {e.strerror}", "free disk space or fix permissions, then retry") from e
    got = part.stat().st_size
    if total is not None and got != total:
        raise ModelError(f"download of {url} is incomplete ({got:,} of {total:,} bytes)", "run the same command again to resume")
    digest = h.hexdigest()
    if expected and digest != expected:
        part.unlink()
        raise ModelError(f"sha256 mismatch for {url}: expected {expected}, got {digest}; the file was removed",
                         "check the hash (#sha256=...) or the source; download again")
    os.replace(part, dest)
    return dest
