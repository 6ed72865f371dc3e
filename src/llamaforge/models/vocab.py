"""Tokenizer metadata for synthetic models, copied from a vocab-only GGUF of the llama.cpp tree.

``models/ggml-vocab-qwen35.gguf`` (and ``ggml-vocab-qwen2.gguf``) hold a real 151,936-token BPE
tokenizer; the tiny presets take ``ggml-vocab-llama-spm.gguf`` (32,000 SentencePiece tokens). A model
whose embedding has more rows gets ``[PADn]`` tokens of type UNUSED appended, as llama.cpp's converter
pads (``n`` is the token id).
"""

from __future__ import annotations

from pathlib import Path

from gguf import TokenType

from ..errors import ModelError
from ..paths import Paths
from .gguf_read import parse_header
from .plan import KV

_PAD_ARRAYS = {"tokenizer.ggml.tokens", "tokenizer.ggml.token_type", "tokenizer.ggml.scores"}


def find_vocab_dir(paths: Paths | None = None) -> Path | None:
    """A llama.cpp ``models/`` folder holding the vocab GGUFs: a worktree under ``vendor/``, then the
    dev source tree in the cache (``<cache>/dev/src-*``). None if there is none."""
    paths = paths or Paths.default()
    candidates: list[Path] = []
    for root in (paths.vendor, paths.cache / "dev"):
        if root.is_dir():
            candidates += sorted(root.glob("*/models"))
    for d in candidates:
        if (d / "ggml-vocab-qwen35.gguf").is_file():
            return d
    return None


def vocab_path(vocab_dir: Path | None, filename: str) -> Path:
    if vocab_dir is None:
        raise ModelError("no llama.cpp source tree to take the tokenizer from",
                         "pass --vocab-dir LLAMA_CPP/models (or build a pin so vendor/ has a worktree)")
    p = Path(vocab_dir) / filename
    if not p.is_file():
        raise ModelError(f"tokenizer file {p} not found", f"pass --vocab-dir pointing to a llama.cpp models/ folder with {filename}")
    return p


def tokenizer_kv(path: Path, vocab_size: int) -> list[KV]:
    """The ``tokenizer.*`` metadata of ``path``, padded to ``vocab_size`` tokens."""
    h = parse_header(path)
    out: list[KV] = []
    n_tokens = None
    for key, val, vt, sub in h.kv:
        if not key.startswith("tokenizer."):
            continue
        if key == "tokenizer.ggml.tokens":
            if not isinstance(val, list):
                raise ModelError(f"{path}: tokenizer.ggml.tokens is not an array",
                                 "use a vocab GGUF from the llama.cpp models/ folder")
            n_tokens = len(val)
        out.append(KV(key, val, vt, sub))
    if n_tokens is None:
        raise ModelError(f"{path} has no tokenizer.ggml.tokens", "use a vocab GGUF from the llama.cpp models/ folder")
    if vocab_size < n_tokens:
        raise ModelError(f"vocab size {vocab_size} is smaller than the tokenizer's {n_tokens} tokens",
                         f"use --vocab {n_tokens} or more")
    pad = range(n_tokens, vocab_size)
    for e in out:
        if e.key == "tokenizer.ggml.tokens":
            e.value = e.value + [f"[PAD{i}]".encode() for i in pad]
        elif e.key == "tokenizer.ggml.token_type":
            e.value = e.value + [int(TokenType.UNUSED)] * len(pad)
        elif e.key == "tokenizer.ggml.scores":
            e.value = e.value + [-1000.0] * len(pad)
    return out
