"""Fetch an sdist from the package index pip is configured for, WITHOUT pip.

``pip download`` of an sdist prepares its metadata, which runs the package's build backend
(``setup.py``, a PEP 517 hook) — code from the download runs before its sha256 can be checked.
So llamaforge reads pip's index settings (``PIP_INDEX_URL`` / ``PIP_EXTRA_INDEX_URL`` and the
``index-url`` / ``extra-index-url`` of ``pip config``), asks each index's simple API (PEP 691 JSON,
else the PEP 503 HTML page) for the file and its sha256, downloads the bytes and checks the hash
before anything opens the archive. Only http(s) and file:// indexes are used.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import unquote, urljoin, urlparse

from .. import proc
from ..errors import SourceError
from ..files import sha256_file
from ..lazy import lazy

if TYPE_CHECKING:
    import requests
else:   # loaded on first use (llamaforge.lazy): most commands never download
    requests = lazy("requests")

DEFAULT_INDEX = "https://pypi.org/simple/"
_ACCEPT = "application/vnd.pypi.simple.v1+json, text/html;q=0.1"


@dataclass(frozen=True)
class IndexFile:
    filename: str
    url: str
    sha256: str | None
    index: str           # the index page it was listed on, without credentials or query (for messages)

    @property
    def public_url(self) -> str:
        return public(self.url)


def plain_filename(name: str) -> bool:
    """True for a file name an index may give: one path component, printable, not ``.``/``..``.
    Callers join it to a folder of theirs, so a ``/``, ``\\`` or ``..`` in it would reach elsewhere."""
    return (bool(name) and name not in (".", "..") and "/" not in name and "\\" not in name
            and not any(ord(c) < 32 or c == "\x7f" for c in name) and len(name) <= 255)


def public(url: str) -> str:
    """``url`` without user:password, query or fragment: safe to print and store."""
    u = urlparse(url)
    host = u.hostname or ""
    netloc = host + (f":{u.port}" if u.port else "")
    return u._replace(netloc=netloc, query="", fragment="").geturl()


def pip_indexes() -> list[str]:
    """The index URLs pip would search, in order (index-url first, then extra-index-urls)."""
    conf: dict[str, str] = {}
    res = proc.run([sys.executable, "-m", "pip", "config", "list"], timeout=60,
                   env={"PIP_DISABLE_PIP_VERSION_CHECK": "1"})
    if res.ok:
        for line in res.output.splitlines():
            m = re.match(r"^([^=\s]+)\.([a-z-]+)='(.*)'$", line.strip())
            if m:   # ":env:", "global", "download", "install"; env wins, then download-specific, then global
                rank = {":env:": 0, "download": 1, "global": 2}.get(m.group(1), 3)
                key = m.group(2)
                if key not in conf or rank < int(conf[key + "#rank"]):
                    conf[key], conf[key + "#rank"] = m.group(3), str(rank)
    index = os.environ.get("PIP_INDEX_URL") or conf.get("index-url") or DEFAULT_INDEX
    extra = (os.environ.get("PIP_EXTRA_INDEX_URL") or conf.get("extra-index-url") or "").split()
    out = []
    for url in [index, *extra]:
        if urlparse(url).scheme in ("http", "https", "file") and url not in out:
            out.append(url)
    return out


class _Links(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.links: list[tuple[str, str]] = []
        self._href: str | None = None
        self._text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            self._href = dict(attrs).get("href") or ""
            self._text = []

    def handle_data(self, data: str) -> None:
        if self._href is not None:
            self._text.append(data)

    def handle_endtag(self, tag: str) -> None:
        if tag == "a" and self._href is not None:
            self.links.append((self._href, "".join(self._text).strip()))
            self._href = None


def _get(url: str, timeout: tuple[float, float]) -> tuple[str, str]:
    """(content type, text) of an index page; file:// pages are read from disk."""
    u = urlparse(url)
    if u.scheme == "file":
        p = Path(unquote(u.path))
        p = p / "index.html" if p.is_dir() else p
        return "text/html", p.read_text(encoding="utf-8", errors="replace")
    r = requests.get(url, timeout=timeout, headers={"Accept": _ACCEPT})
    r.raise_for_status()
    return r.headers.get("content-type", ""), r.text


def list_files(index: str, project: str, timeout: tuple[float, float]) -> list[IndexFile]:
    """The files the simple index lists for ``project`` (name normalised as PEP 503 says)."""
    norm = re.sub(r"[-_.]+", "-", project).lower()
    page = urljoin(index.rstrip("/") + "/", norm + "/")
    ctype, text = _get(page, timeout)
    files: list[IndexFile] = []
    if "json" in ctype:
        for f in json.loads(text).get("files", []):
            sha = (f.get("hashes") or {}).get("sha256")
            files.append(IndexFile(str(f.get("filename", "")), urljoin(page, str(f.get("url", ""))),
                                   str(sha).lower() if sha else None, public(page)))
        return files
    parser = _Links()
    parser.feed(text)
    for href, name in parser.links:
        url, _, frag = href.partition("#")
        sha = frag[len("sha256="):].lower() if frag.startswith("sha256=") else None
        files.append(IndexFile(name or unquote(Path(urlparse(url).path).name), urljoin(page, url), sha, public(page)))
    return files


def list_everywhere(project: str, timeout: tuple[float, float]) -> list[IndexFile]:
    """Every file pip's indexes list for ``project``, in index order (an index that answers 404 lists
    nothing). Raises SourceError when no index answered at all."""
    files: list[IndexFile] = []
    answered, errors = 0, []
    for index in pip_indexes():
        try:
            files += list_files(index, project, timeout)
            answered += 1
        except requests.HTTPError as e:
            if e.response is not None and e.response.status_code == 404:
                answered += 1            # the index answered: no such project there
            else:
                errors.append(f"{public(index)}: HTTP {e.response.status_code if e.response is not None else '?'}")
        except (requests.RequestException, OSError, ValueError) as e:
            errors.append(f"{public(index)}: {type(e).__name__}")
    if not answered:
        raise SourceError(f"no package index reachable for {project} ({'; '.join(errors)})",
                          "check the network / pip index settings (pip config list)")
    return files


def find(project: str, filenames: list[str], timeout: tuple[float, float]) -> IndexFile | None:
    """The first of ``filenames`` listed on any of pip's indexes (None when no index lists it).
    Raises SourceError when no index could be asked at all."""
    try:
        files = list_everywhere(project, timeout)
    except SourceError as e:
        raise SourceError(e.message, f"{e.fix}, or put the sdist in the downloads cache") from None
    return next((f for f in files if f.filename in filenames), None)


def fetch(f: IndexFile, dest: Path, download) -> Path:  # noqa: ANN001 - download(url, dest) -> Path
    """Copy a file:// link, or ``download`` an http(s) one, to ``dest`` (no hash check here)."""
    if not plain_filename(f.filename):
        raise SourceError(f"{f.index} lists a file name that is a path: {f.filename!r}",
                          "use another package index (this one serves hostile file names)")
    u = urlparse(f.url)
    if u.scheme == "file":
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(unquote(u.path), dest)
        return dest
    if u.scheme not in ("http", "https"):
        raise SourceError(f"{f.index} links {f.filename} to an unsupported URL {f.public_url!r}",
                          "use an index that serves files over http(s) or file://")
    try:
        return download(f.url, dest)
    except SourceError as e:   # its message carries the URL as given, which may hold index credentials
        cause = type(e.__cause__).__name__ if e.__cause__ else "error"
        raise SourceError(f"cannot download {f.public_url} ({cause})", e.fix) from None


def sha256_ok(path: Path, expected: str) -> tuple[bool, str]:
    digest = sha256_file(path)
    return digest == expected.lower(), digest
