"""Keep secrets that ride in URLs out of everything llamaforge stores, prints or exports.

A presigned model URL carries its signature in the query (``?X-Amz-Signature=…``), a git URL may
carry a token as userinfo (``https://user:TOKEN@host/…``), a fragment can hold anything. One helper,
:func:`redact_url`, replaces each of them with ``REDACTED`` and keeps our own ``#sha256=<64 hex>``
(a hash, not a secret, and what makes a reference reproducible). :func:`redact_text` does it for
every URL inside free text (a stored command line, an error message); :func:`redact_obj` for every
string inside JSON-like data (a run's plan). The store applies them when it writes and when it reads
a run, so reports and exports of old stores are clean too. The values of secret environment variables
(:data:`SECRET_ENV`: ``HF_TOKEN``) are replaced wherever they appear, URL or not.
"""

from __future__ import annotations

import os
import re
from typing import Any
from urllib.parse import urlsplit

MARK = "REDACTED"
# Environment variables whose VALUES are secrets wherever they turn up (a log line, an error message).
SECRET_ENV = ("HF_TOKEN",)
_MIN_SECRET = 8        # shorter values would blot out ordinary words; real tokens are far longer
_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*://[^\s'\"<>`]+")
_OUR_FRAGMENT = re.compile(r"sha256=[0-9a-fA-F]{64}")


def redact_url(url: str) -> str:
    """``url`` without credentials: userinfo, query and fragment (except ``#sha256=HEX``) become
    ``REDACTED``; scheme, host, port and path are kept as written. Text without ``://`` (a local
    path, ``synth:…``, ``hf:…``) is returned unchanged."""
    text = str(url)
    if "://" not in text:
        return text
    base, hash_sign, fragment = text.partition("#")
    base, qmark, query = base.partition("?")
    scheme, sep, rest = base.partition("://")
    if sep:
        netloc, slash, path = rest.partition("/")
        if "@" in netloc:
            netloc = MARK + "@" + netloc.rpartition("@")[2]
        base = f"{scheme}://{netloc}{slash}{path}"
    out = base + (f"?{MARK}" if qmark else "")
    if hash_sign:
        out += "#" + (fragment if _OUR_FRAGMENT.fullmatch(fragment) else MARK)
    return out


def env_secrets() -> tuple[str, ...]:
    """The values of :data:`SECRET_ENV` as they may be written out: as set, stripped, escaped as
    ``repr`` writes them, and (a value with line breaks) line by line; longest first."""
    out: set[str] = set()
    for name in SECRET_ENV:
        v = os.environ.get(name) or ""
        forms = [v, v.strip(), repr(v)[1:-1], v.encode("unicode_escape").decode("ascii"), *v.splitlines()]
        out.update(f for f in forms if len(f.strip()) >= _MIN_SECRET)
    return tuple(sorted(out, key=len, reverse=True))


def redact_text(text: str | None, secrets: tuple[str, ...] | None = None) -> str | None:
    """Every ``scheme://…`` URL in ``text`` through :func:`redact_url`, and every secret value
    (:func:`env_secrets`, or ``secrets`` when given) replaced by ``REDACTED``. None stays None."""
    if not text:
        return text
    text = str(text)
    if "://" in text:
        text = _URL.sub(lambda m: redact_url(m.group(0)), text)
    for s in env_secrets() if secrets is None else secrets:
        if s in text:
            text = text.replace(s, MARK)
    return text


def redact_obj(obj: Any, secrets: tuple[str, ...] | None = None) -> Any:
    """A copy of JSON-like ``obj`` with :func:`redact_text` applied to every string (keys too)."""
    if secrets is None:
        secrets = env_secrets()
    if isinstance(obj, str):
        return redact_text(obj, secrets)
    if isinstance(obj, dict):
        return {redact_obj(k, secrets): redact_obj(v, secrets) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [redact_obj(v, secrets) for v in obj]
    return obj


def scrub(message: str, url: str) -> str:
    """``message`` (e.g. a requests exception, which quotes the path and query without the scheme)
    with the secret parts of ``url`` replaced, then every URL in it redacted."""
    try:
        parts = urlsplit(url)
        secrets = [parts.query, parts.password or "", parts.username or ""]
        if parts.fragment and not _OUR_FRAGMENT.fullmatch(parts.fragment):
            secrets.append(parts.fragment)
    except ValueError:
        secrets = []
    for s in sorted((s for s in secrets if len(s) >= 3), key=len, reverse=True):
        message = message.replace(s, MARK)
    return redact_text(message) or ""
