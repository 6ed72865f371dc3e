"""Small GGUF files for unit tests: a vocab-only one standing in for llama.cpp's models/ggml-vocab-*.gguf
(:func:`fake_vocab`) and a one-tensor MoE model header (:func:`tiny_moe_gguf`)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from gguf import GGUFWriter, TokenType

N_FAKE_TOKENS = 1000


def fake_vocab(path: Path) -> None:
    w = GGUFWriter(path, "qwen2")
    w.add_string("tokenizer.ggml.model", "gpt2")
    w.add_string("tokenizer.ggml.pre", "qwen2")
    w.add_array("tokenizer.ggml.tokens", [f"t{i}" for i in range(N_FAKE_TOKENS)])
    w.add_array("tokenizer.ggml.token_type", [int(TokenType.NORMAL)] * N_FAKE_TOKENS)
    w.add_array("tokenizer.ggml.merges", ["t 0", "t 1"])
    w.add_uint32("tokenizer.ggml.eos_token_id", 1)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    w.close()


def tiny_moe_gguf(path: Path, *, block_count: int | str = 2, context_length: int = 256, name: str | None = None,
                  alignment: int | None = None, strings: dict[str, str] | None = None) -> Path:
    """A qwen3moe GGUF with the facts llamaforge reads (layers, context, experts) and one small tensor.
    ``block_count`` as a string writes a wrong-typed value; ``strings`` adds string keys."""
    w = GGUFWriter(str(path), "qwen3moe")
    if name is not None:
        w.add_name(name)
    if isinstance(block_count, str):
        w.add_string("qwen3moe.block_count", block_count)
    else:
        w.add_block_count(block_count)
    w.add_context_length(context_length)
    w.add_embedding_length(8)
    w.add_head_count(2)
    w.add_expert_count(4)
    w.add_expert_used_count(2)
    if alignment is not None:
        w.add_uint32("general.alignment", alignment)
    for key, value in (strings or {}).items():
        w.add_string(key, value)
    w.add_tensor("token_embd.weight", np.zeros((16, 8), dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path
