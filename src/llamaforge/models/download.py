"""Resumable, verified downloads of model files (Hugging Face or any http(s) URL).

``download(url, dest)`` streams into ``dest.part`` and renames it atomically when it is complete
and checked. What is defended (see SECURITY.md):

* **The token goes to the hub only.** ``HF_TOKEN`` is sent as a bearer token only to ``https``
  URLs whose host is exactly ``huggingface.co`` or ``hf.co`` (default port). Redirects are followed
  here hop by hop, and each hop gets the token only if *it* is the hub: the CDN the hub redirects to
  never sees it. The host is the one requests connects to (read from the prepared URL with urllib3's
  parser); a URL that ``urlsplit`` reads as another host (``https://EVIL\\@huggingface.co/``) is
  refused, never sent. A token with whitespace or control characters is refused, never shown.
* **Nothing received is lost.** The body is read as it arrives, so a dropped connection leaves every
  byte received in the part; records (``.part.json``, ``.download.json``) are written whole or not at
  all, and a full or read-only cache is one clear error.
* **The hub's hash is read where the hub sends it.** For LFS files the hub answers the resolve URL
  with a redirect carrying ``X-Linked-ETag`` (the sha256) and ``X-Linked-Size``; the CDN's final
  answer does not. So, like ``huggingface_hub``, a ``HEAD`` without following cross-host redirects
  reads them first. A ``#sha256=`` given by the user wins over the hub's.
* **Resume cannot splice foreign bytes.** ``dest.part.json`` keeps the validator of the response
  the part came from (a strong ``ETag`` or ``Last-Modified``) and the total length; a resume sends
  ``Range`` + ``If-Range``. A ``206`` must start exactly at our offset (``Content-Range``), else the
  part is dropped and the download starts over; a ``200`` to a range request restarts; a part without
  a validator is not resumed.
* **Complete means the announced length.** The total comes from ``Content-Length``, the
  ``Content-Range`` total or the hub's ``X-Linked-Size``; a body that ends early is kept as a part to
  resume and reported; with no length *and* no hash the download is refused (nothing could tell a cut
  body from a complete one).
* **Unverified is said out loud.** With no hash to check, a warning names the file, its computed
  sha256 and how to pin it (``#sha256=``), and ``dest.download.json`` records ``verified: false``;
  runs store that record in their plan.

Every URL in a message goes through :func:`llamaforge.redact.redact_url`.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urljoin, urlsplit

from ..console import byte_progress, warning
from ..errors import ModelError
from ..files import sha256_hash
from ..lazy import lazy
from ..redact import redact_url, scrub

if TYPE_CHECKING:
    import requests
    import urllib3
else:   # loaded on first use (llamaforge.lazy): most commands never download
    requests = lazy("requests")
    urllib3 = lazy("urllib3")

CHUNK = 1 << 20
MAX_REDIRECTS = 10
_SHA = re.compile(r"^[0-9a-f]{64}$")
_TOKEN = re.compile(r"^[\x21-\x7e]+$")      # a bearer token: visible ASCII, nothing that could end the header
_CONTENT_RANGE = re.compile(r"^\s*bytes\s+(\d+)-(\d+)/(\d+|\*)\s*$", re.IGNORECASE)

# (scheme, host, port) that are the Hugging Face hub and get HF_TOKEN. Exact matches only; tests
# point this at a local server, production never changes it.
HUB_ORIGINS: frozenset[tuple[str, str, int]] = frozenset({("https", "huggingface.co", 443), ("https", "hf.co", 443)})
_DEFAULT_PORTS = {"http": 80, "https": 443}


def hf_url(owner_repo_file: str, revision: str = "main") -> str:
    """``OWNER/REPO/path/to/FILE`` -> the hub's resolve URL (no ``.``/``..``/empty parts)."""
    parts = owner_repo_file.strip("/").split("/")
    if len(parts) < 3 or not all(parts) or any(p in (".", "..") or "\\" in p for p in parts):
        raise ModelError(f"bad Hugging Face reference {owner_repo_file!r}",
                         "write hf:OWNER/REPO/FILE.gguf (no '.', '..' or empty path parts)")
    return f"https://huggingface.co/{parts[0]}/{parts[1]}/resolve/{revision}/{'/'.join(parts[2:])}"


_PLAIN_URL = "write the URL plainly: http(s)://HOST[:PORT]/PATH (no backslash, whitespace or '@' before the host)"


def _split_origin(url: str) -> tuple[str, str, int] | None:
    """``(scheme, host, port)`` as :func:`urllib.parse.urlsplit` reads ``url`` (None if it cannot)."""
    try:
        p = urlsplit(url)
        return (p.scheme.lower(), (p.hostname or "").lower(), p.port or _DEFAULT_PORTS.get(p.scheme.lower(), 0))
    except ValueError:
        return None


def connect_origin(url: str) -> tuple[str, str, int]:
    """``(scheme, host, port)`` that requests will connect to for ``url``, read from the URL as requests
    prepares it (urllib3's parser, which ends the host at a backslash where ``urlsplit`` reads on to the
    last ``@``). A URL that is not http(s), cannot be parsed, or that ``urlsplit`` reads as another
    origin (before or after preparing) is refused: a check done with one parser must hold for the other."""
    shown = redact_url(url)
    if not url.lower().startswith(("http://", "https://")):
        raise ModelError(f"{shown!r} is not an http(s) URL", "download the file by hand")
    try:
        prepared = requests.models.PreparedRequest()
        prepared.prepare_url(url, None)
        sent = urllib3.util.parse_url(prepared.url or "")
    except (requests.RequestException, urllib3.exceptions.LocationParseError, ValueError):
        raise ModelError(f"cannot parse the URL {shown!r}", _PLAIN_URL) from None
    scheme = (sent.scheme or "").lower()
    got = (scheme, (sent.host or "").lower(), sent.port or _DEFAULT_PORTS.get(scheme, 0))
    if not got[1] or _split_origin(url) != got or _split_origin(prepared.url or "") != got:
        raise ModelError(f"the URL {shown!r} is read differently by URL parsers (requests would connect to "
                         f"{got[1] or 'no host'}:{got[2]}), so it is refused", _PLAIN_URL)
    return got


def origin(url: str) -> tuple[str, str, int] | None:
    """``(scheme, host, port)`` requests connects to for ``url`` (see :func:`connect_origin`); None for a
    URL that is refused there."""
    try:
        return connect_origin(url)
    except ModelError:
        return None


def is_hub(url: str) -> bool:
    """True only for a URL whose (scheme, host, port), as requests will connect, is exactly one of
    :data:`HUB_ORIGINS` and that every URL parser reads the same way."""
    return origin(url) in HUB_ORIGINS


def request_headers(url: str) -> dict[str, str]:
    """Headers for one request to ``url``: ``HF_TOKEN`` only if ``url`` is the hub (see :func:`is_hub`)."""
    h = {"User-Agent": "llamaforge"}
    token = (os.environ.get("HF_TOKEN") or "").strip()
    if token and is_hub(url):
        if not _TOKEN.match(token):   # a CR/LF would split the header: refuse, never show the value
            raise ModelError(f"HF_TOKEN holds whitespace or a control character ({len(token)} characters; the "
                             "value is not shown)", "set HF_TOKEN to the token alone (hf_..., one line)")
        h["Authorization"] = f"Bearer {token}"
    return h


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


@dataclass
class Announced:
    """What the first answer (before any cross-host redirect) says about the file."""

    sha256: str | None = None
    size: int | None = None


def _request(s: requests.Session, method: str, url: str, extra: dict[str, str], timeout: float) -> requests.Response:
    """One ``method`` on ``url``, no redirect followed. The request is prepared first and the token
    decided from the prepared URL, the one the connection is made to (:func:`request_headers`)."""
    want = connect_origin(url)
    prep = s.prepare_request(requests.Request(method, url, headers=extra))
    if connect_origin(prep.url or "") != want:
        raise ModelError(f"the URL {redact_url(url)!r} changes origin when prepared, so it is refused", _PLAIN_URL)
    prep.headers.update(request_headers(prep.url or ""))
    settings = s.merge_environment_settings(prep.url, {}, True, None, None)
    return s.send(prep, timeout=timeout, allow_redirects=False, **settings)


def _send(s: requests.Session, method: str, url: str, extra: dict[str, str], timeout: float, *,
          stop: Callable[[str, str], bool]) -> requests.Response:
    """``method`` on ``url``, following redirects hop by hop with :func:`request_headers` computed
    per hop, until ``stop(from_url, to_url)`` says so (the redirect response is then returned).
    Every hop's URL goes through :func:`connect_origin` (a confusing one is refused, never sent)."""
    for _ in range(MAX_REDIRECTS + 1):
        r = _request(s, method, url, extra, timeout)
        loc = r.headers.get("Location")
        if not (r.is_redirect and loc):
            return r
        try:
            nxt = urljoin(url, loc)
        except ValueError:
            r.close()
            raise ModelError(f"{redact_url(url)} redirects to an unparsable URL", "download the file by hand") from None
        if stop(url, nxt):
            return r
        r.close()
        if not nxt.lower().startswith(("http://", "https://")):
            raise ModelError(f"{redact_url(url)} redirects to a non-http URL", "download the file by hand")
        url = nxt
    raise ModelError(f"too many redirects for {redact_url(url)}", "check the URL")


def announced(s: requests.Session, url: str, timeout: float) -> Announced:
    """``HEAD`` ``url`` without following cross-host redirects (as ``huggingface_hub`` does) and
    read ``X-Linked-ETag``/``X-Linked-Size`` (or a 64-hex ``ETag``) from that answer."""
    try:
        r = _send(s, "HEAD", url, {"Accept-Encoding": "identity"}, timeout,
                  stop=lambda a, b: origin(a) != origin(b))
    except requests.RequestException:
        return Announced()   # the GET says what is wrong
    with r:
        if r.status_code >= 400:
            return Announced()
        size = r.headers.get("X-Linked-Size", "").strip()
        return Announced(hub_sha256(r.headers), int(size) if size.isdigit() else None)


def _validator(r: requests.Response) -> dict[str, str] | None:
    etag = (r.headers.get("ETag") or "").strip()
    if etag and not etag.startswith("W/"):
        return {"etag": etag}
    lm = (r.headers.get("Last-Modified") or "").strip()
    return {"last_modified": lm} if lm else None


def _url_key(url: str) -> str:
    return hashlib.sha256(url.encode()).hexdigest()


class _Restart(Exception):
    """The partial file cannot be continued: drop it and start over from byte 0."""


@dataclass
class _Part:
    path: Path
    meta_path: Path

    def offset(self, url: str) -> tuple[int, dict | None]:
        """Bytes we may resume from (0 without a usable record) and the record."""
        if not self.path.exists():
            return 0, None
        try:
            meta = json.loads(self.meta_path.read_text())
        except (OSError, ValueError):
            meta = None
        if not isinstance(meta, dict) or meta.get("url") != _url_key(url) or not meta.get("validator"):
            self.drop()
            return 0, None
        return self.path.stat().st_size, meta

    def record(self, url: str, validator: dict | None, total: int | None) -> None:
        """Start a part: its record is written whole (a full disk leaves neither record nor part)."""
        try:
            write_whole(self.meta_path, json.dumps({"url": _url_key(url), "validator": validator, "total": total}))
        except ModelError:
            self.drop()
            raise

    def drop(self) -> None:
        for p in (self.path, self.meta_path):
            p.unlink(missing_ok=True)


_WRITABLE = "free disk space, or set LLAMAFORGE_CACHE to a writable folder with room for the model"


def make_dir(path: Path) -> Path:
    """``mkdir -p path``; a read-only or full filesystem, or a file in the way, is one clear error."""
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ModelError(f"cannot create the folder {path}: {e.strerror or e}", _WRITABLE) from None
    return path


def write_whole(path: Path, text: str) -> None:
    """Write ``path`` whole or not at all (through a temporary file and a rename); a full or
    read-only filesystem is one clear error and leaves nothing behind."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except OSError as e:
        tmp.unlink(missing_ok=True)
        raise ModelError(f"cannot write {path}: {e.strerror or e}", _WRITABLE) from None


def _total(r: requests.Response, offset: int) -> int | None:
    """The file's full length as this response states it (``Content-Range`` total or ``Content-Length``)."""
    length = (r.headers.get("Content-Length") or "").strip()
    if r.status_code == 206:
        m = _CONTENT_RANGE.match(r.headers.get("Content-Range") or "")
        if m and m.group(3) != "*":
            return int(m.group(3))
        return offset + int(length) if length.isdigit() else None
    return int(length) if length.isdigit() else None


def _range_start(r: requests.Response) -> int | None:
    m = _CONTENT_RANGE.match(r.headers.get("Content-Range") or "")
    return int(m.group(1)) if m else None


def record_path(dest: Path) -> Path:
    """Where the verification record of a downloaded file lives (``NAME.download.json``)."""
    return dest.with_name(dest.name + ".download.json")


def write_record(dest: Path, url: str, digest: str, checked: str | None, *, at: Path | None = None,
                 extra: dict | None = None) -> dict:
    """Record how ``dest`` was checked: ``checked`` is ``"pinned"``, ``"hub"`` or None (unverified). The
    record goes to ``at`` (default :func:`record_path`: beside the file); ``extra`` adds fields (an origin)."""
    st = dest.stat()
    rec = {"url": redact_url(url), "sha256": digest, "verified": checked is not None,
           "checked_against": checked, "bytes": st.st_size, "mtime_ns": st.st_mtime_ns, "time": time.time(),
           **(extra or {})}
    write_whole(at or record_path(dest), json.dumps(rec, indent=1))
    return rec


def read_record(dest: Path, *, at: Path | None = None) -> dict | None:
    """The record of ``dest`` (read from ``at``, default beside it); None if absent or if the file
    changed since (size or mtime)."""
    try:
        rec = json.loads((at or record_path(Path(dest))).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(rec, dict):
        return None
    try:
        st = Path(dest).stat()
    except OSError:
        return None
    return rec if (rec.get("bytes"), rec.get("mtime_ns")) == (st.st_size, st.st_mtime_ns) else None


def warn_unverified(dest: Path, ref: str, digest: str | None) -> None:
    """The loud line for a model file whose bytes nothing checked."""
    base, frag = ref.split("#")[0], f"#sha256={digest or '<64 hex digits>'}"
    pin = f"{base}{frag}" if redact_url(base) == base else f"append {frag} to the reference (the URL as you gave it)"
    warning(f"{dest.name} is UNVERIFIED: no sha256 was pinned or announced by the server, so nothing checked "
            f"its bytes (its sha256 is {digest or 'unknown'}). Pin it to check it: {pin}")


def _body(r: requests.Response) -> Iterator[bytes]:
    """The body as it arrives: each read returns what the connection has (up to :data:`CHUNK`), so a
    connection dropped mid-chunk loses none of the bytes already received (``iter_content`` buffers up
    to a whole chunk and drops it with the error). Read errors come out as ``requests.ConnectionError``."""
    raw = r.raw
    read = raw.read1 if hasattr(raw, "read1") else raw.read
    while True:
        try:
            data = read(CHUNK, decode_content=True)
        except (urllib3.exceptions.HTTPError, OSError) as e:
            raise requests.ConnectionError(e) from None
        if not data:
            return
        yield data


@contextlib.contextmanager
def _progress(total: int | None, label: str, enabled: bool, done: int) -> Iterator[Callable[[int], None]]:
    with byte_progress(label, enabled) as bar:
        if bar is None:
            yield lambda n: None
            return
        task = bar.add_task("dl", total=total, completed=done)
        yield lambda n: bar.advance(task, n)


def _fetch(s: requests.Session, url: str, part: _Part, expected: str | None, hinted: int | None,
           progress: bool, label: str, timeout: float) -> tuple[hashlib._Hash, int | None]:
    """One GET into ``part`` (resuming it when it can be): the running hash and the total length."""
    have, meta = part.offset(url)
    extra = {"Accept-Encoding": "identity"}
    if have:
        v = meta["validator"] if meta else {}
        extra["Range"] = f"bytes={have}-"
        extra["If-Range"] = v.get("etag") or v.get("last_modified") or ""
    try:
        r = _send(s, "GET", url, extra, timeout, stop=lambda a, b: False)
    except requests.RequestException as e:
        raise ModelError(f"cannot download {redact_url(url)}: {scrub(str(e), url)}",
                         "check the URL and your network (a partial file is kept to resume)") from None
    with r:
        if r.status_code == 416 and have:
            raise _Restart
        if r.status_code not in (200, 206):
            raise ModelError(f"cannot download {redact_url(url)}: HTTP {r.status_code} {r.reason}",
                             "check the reference (owner/repo/file) and, for gated repos, set HF_TOKEN")
        if r.status_code == 206:
            if _range_start(r) != have:   # a range we did not ask for: never splice it in
                raise _Restart
        elif have:
            have = 0                      # 200 to a range request: the whole file, start over with it
        total = _total(r, have)
        if total is None:
            total = hinted
        elif hinted is not None and total != hinted:
            raise ModelError(f"{redact_url(url)} is {total:,} bytes but the hub announced {hinted:,}",
                             "download again later (the file may be changing) or report it to the repo")
        if total is None and expected is None:
            raise ModelError(f"{redact_url(url)} did not say how long the file is and no sha256 is known, so a "
                             "cut-off download could not be told from a complete one",
                             "pin the file's hash: URL#sha256=<64 hex digits>")
        if have and meta and meta.get("total") not in (None, total):
            raise _Restart
        if not have:
            part.record(url, _validator(r), total)
        h = sha256_hash(part.path) if have else hashlib.sha256()
        try:
            with open(part.path, "ab" if have else "wb") as f, _progress(total, label, progress, have) as advance:
                for chunk in _body(r):
                    if chunk:
                        f.write(chunk)
                        h.update(chunk)
                        advance(len(chunk))
                f.flush()
                os.fsync(f.fileno())
        except requests.RequestException as e:
            raise ModelError(f"download of {redact_url(url)} was interrupted: {scrub(str(e), url)}",
                             "run the same command again to resume") from None
        except OSError as e:
            raise ModelError(f"cannot write {part.path}: {e.strerror or e} (the bytes received so far are kept)",
                             f"{_WRITABLE}; then run the same command again to resume") from None
    return h, total


def download(url: str, dest: Path, *, sha256: str | None = None, progress: bool = True,
             session: requests.Session | None = None, timeout: float = 30.0, ref: str | None = None) -> Path:
    """Download ``url`` to ``dest`` (resuming ``dest.part``), verify it, rename atomically.

    ``ref`` is the model reference the user wrote (for the "pin it" hint); it defaults to ``url``.
    """
    dest = Path(dest)
    if sha256 is not None:
        sha256 = sha256.strip().lower()
        if not _SHA.match(sha256):
            raise ModelError(f"bad sha256 {sha256!r}", "give 64 hex digits after #sha256=")
    connect_origin(url)
    make_dir(dest.parent)
    part = _Part(dest.with_name(dest.name + ".part"), dest.with_name(dest.name + ".part.json"))
    s = session or requests.Session()
    hub = announced(s, url, timeout)
    expected = sha256 or hub.sha256
    for attempt in range(3):
        try:
            h, total = _fetch(s, url, part, expected, hub.size, progress, dest.name, timeout)
            break
        except _Restart:
            part.drop()
            if attempt == 2:
                raise ModelError(f"{redact_url(url)} keeps answering range requests with other ranges",
                                 "download the file by hand into the model cache") from None
    got = part.path.stat().st_size
    if total is not None and got < total:
        raise ModelError(f"download of {redact_url(url)} is incomplete ({got:,} of {total:,} bytes)",
                         "run the same command again to resume")
    if total is not None and got > total:
        part.drop()
        raise ModelError(f"download of {redact_url(url)} is longer than announced ({got:,} > {total:,} bytes); "
                         "the file was removed", "download again")
    digest = h.hexdigest()
    if expected and digest != expected:
        part.drop()
        raise ModelError(f"sha256 mismatch for {redact_url(url)}: expected {expected}, got {digest}; the file "
                         "was removed", "check the hash (#sha256=...) or the source; download again")
    os.replace(part.path, dest)
    part.meta_path.unlink(missing_ok=True)
    write_record(dest, url, digest, "pinned" if sha256 else ("hub" if expected else None))
    if not expected:
        warn_unverified(dest, ref or url, digest)
    return dest
