"""Keep secrets that ride in URLs out of everything llamaforge stores, prints or exports.

A presigned model URL carries its signature in the query (``?X-Amz-Signature=…``), a git URL may
carry a token as userinfo (``https://user:TOKEN@host/…``), a fragment can hold anything. One helper,
:func:`redact_url`, replaces each of them with ``REDACTED`` and keeps our own ``#sha256=<64 hex>``
(a hash, not a secret, and what makes a reference reproducible). :func:`redact_text` does it for
every URL inside free text (a stored command line, an error message); :func:`redact_obj` for every
string inside JSON-like data (a run's plan). The store applies them when it writes and when it reads
a run, so reports and exports of old stores are clean too.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import urlsplit

MARK = "REDACTED"
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


def redact_text(text: str | None) -> str | None:
    """Every ``scheme://…`` URL in ``text`` through :func:`redact_url` (None stays None)."""
    if not text:
        return text
    return _URL.sub(lambda m: redact_url(m.group(0)), str(text))


def redact_obj(obj: Any) -> Any:
    """A copy of JSON-like ``obj`` with :func:`redact_text` applied to every string (keys too)."""
    if isinstance(obj, str):
        return redact_text(obj)
    if isinstance(obj, dict):
        return {redact_obj(k): redact_obj(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [redact_obj(v) for v in obj]
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
