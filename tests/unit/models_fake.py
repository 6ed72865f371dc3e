"""A small vocab-only GGUF standing in for llama.cpp's models/ggml-vocab-*.gguf in unit tests."""

from __future__ import annotations

from pathlib import Path

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
