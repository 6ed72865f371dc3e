"""Tokens whose text is not whole UTF-8 (a byte-fallback token, or a piece of a multi-byte character).

Why: some llama-server releases (seen on llama.cpp 78d2f5246, vendored by llama-cpp-python 0.3.33)
parse every ``/completion`` output with their chat-output parser and answer HTTP 500 ("The model
produced output that does not match the expected Content-only format") when the generated text is
not valid UTF-8. A real model rarely writes such bytes; a synthetic or badly quantized one does,
and ``ignore_eos`` makes long generations likelier to. Banning these tokens with ``logit_bias``
keeps every generated piece whole UTF-8 (a concatenation of valid UTF-8 is valid UTF-8), so the
request completes and its timings can be measured. The server engine does that only after a server has
answered with that error, and records it on the point (:mod:`llamaforge.bench.engines.server`).

Token texts are read from the GGUF header (``tokenizer.ggml.tokens``): byte-level BPE vocabularies
(``tokenizer.ggml.model`` ``gpt2``) store bytes through GPT-2's byte→unicode table; SentencePiece
vocabularies (``llama``) store ``<0xXX>`` byte-fallback tokens, of which 0x80–0xFF are partial.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path

from gguf.vocab import bytes_to_unicode

from .gguf_read import parse_header

_BYTE_TOKEN = re.compile(r"^<0x([0-9A-Fa-f]{2})>$")
_CONTROL_TYPES = {3, 4, 5}   # llama.cpp token types: CONTROL, USER_DEFINED, UNUSED (not produced as text bytes)


@functools.cache
def _unicode_to_byte() -> dict[str, int]:
    """Inverse of GPT-2's byte→unicode table (gguf-py's ``bytes_to_unicode``, which llama.cpp's converter uses)."""
    return {c: b for b, c in bytes_to_unicode().items()}


def token_bytes_bpe(text: str) -> bytes | None:
    """The bytes of a byte-level BPE token, or None if ``text`` is not in the byte alphabet (a special token)."""
    table = _unicode_to_byte()
    try:
        return bytes(table[c] for c in text)
    except KeyError:
        return None


def incomplete_utf8_ids(tokens: list[str], model: str, types: list[int] | None = None) -> list[int]:
    """Ids of the tokens whose bytes are not whole UTF-8 (pure: for tests and :func:`incomplete_utf8_tokens`)."""
    out: list[int] = []
    for i, text in enumerate(tokens):
        if types is not None and i < len(types) and types[i] in _CONTROL_TYPES:
            continue
        if model == "gpt2":
            raw = token_bytes_bpe(text)
            if raw is None:
                continue
            try:
                raw.decode("utf-8")
            except UnicodeDecodeError:
                out.append(i)
        elif (m := _BYTE_TOKEN.match(text)) and int(m.group(1), 16) >= 0x80:
            out.append(i)
    return out


@functools.lru_cache(maxsize=8)
def _cached(path: str, size: int, mtime_ns: int) -> tuple[int, ...]:
    kv = {k: v for k, v, _, _ in parse_header(Path(path), keep_arrays=True).kv}
    raw = kv.get("tokenizer.ggml.tokens")
    tokens = [t.decode("utf-8", "replace") if isinstance(t, bytes) else str(t)
              for t in (raw if isinstance(raw, list) else [])]
    types = kv.get("tokenizer.ggml.token_type")
    if not isinstance(types, list) or not all(isinstance(t, int) for t in types):
        types = None   # missing or not a list of ints (a damaged file): every token is looked at
    model = kv.get("tokenizer.ggml.model") or ""
    model = model.decode("utf-8", "replace") if isinstance(model, bytes) else ""
    return tuple(incomplete_utf8_ids(tokens, model, types))


def incomplete_utf8_tokens(model_path: Path) -> list[int]:
    """Ids of the model's tokens that are not whole UTF-8 (read once per file version)."""
    st = Path(model_path).stat()
    return list(_cached(str(Path(model_path).resolve()), st.st_size, st.st_mtime_ns))
