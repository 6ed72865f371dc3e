"""Tiny GGUFs that claim huge things are refused with one line, before anything is sized by the claim
(issue 22, item 6 and its tracebacks): 2³¹ layers with a sliding window, a ``blk.10²⁰.*`` tensor, a
string-array element of 2⁶³ bytes, 2⁴⁰ tensors or array items, five dimensions, a next-token-prediction
layer count past the layer count, an integer ``general.architecture``; and ``model.synth --layers`` past
what llama.cpp loads. Files are written with the gguf package, then patched where a writer would not go.

The CLI runs under a 2 GiB address-space limit: on code without the bounds a bomb ends in a quick
MemoryError (and a failed test) instead of a swapping machine.
"""

from __future__ import annotations

import os
import resource
import struct
import subprocess
import sys
from pathlib import Path

import gguf
import numpy as np
import pytest

from llamaforge.errors import ModelError
from llamaforge.models import limits
from llamaforge.models.gguf_info import model_facts
from llamaforge.models.gguf_read import parse_header
from llamaforge.models.presets import get_preset

SRC = Path(__file__).resolve().parents[2] / "src"


def _gguf(path: Path, arch: str = "gemma3", kv: dict | None = None, tensors: tuple[str, ...] = ("token_embd.weight",),
          tokens: list[str] | None = None) -> Path:
    w = gguf.GGUFWriter(str(path), arch)
    for key, val in {f"{arch}.block_count": 2, f"{arch}.embedding_length": 8, f"{arch}.attention.head_count": 2,
                     **(kv or {})}.items():
        if val is None:
            continue
        if isinstance(val, str):
            w.add_string(key, val)
        elif val >= 1 << 32:
            w.add_uint64(key, val)
        else:
            w.add_uint32(key, val)
    if tokens is not None:
        w.add_array("tokenizer.ggml.tokens", tokens)
    for name in tensors:
        w.add_tensor(name, np.zeros((16, 8), dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def _patch(path: Path, offset: int, fmt: str, value: int) -> Path:
    data = bytearray(path.read_bytes())
    struct.pack_into(fmt, data, offset, value)
    path.write_bytes(bytes(data))
    return path


def _after(path: Path, marker: bytes) -> int:
    """The offset just past ``marker`` (a key or a string) in the file."""
    i = path.read_bytes().index(marker)
    return i + len(marker)


def _limit() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))


def _cli(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    (tmp_path / "pins.toml").write_text('default = "d"\n[pins.d]\ncommit = "0c1e57098"\nsources = ["git"]\n')
    env = {**os.environ, "LLAMAFORGE_WORKSPACE": str(tmp_path), "LLAMAFORGE_RESULTS": str(tmp_path / "results"),
           "COLUMNS": "400", "OPENBLAS_NUM_THREADS": "1", "PYTHONPATH": str(SRC)}
    env.pop("LLAMAFORGE_DEBUG", None)
    return subprocess.run([sys.executable, "-m", "llamaforge", *args], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=120, preexec_fn=_limit)


def _one_line(r: subprocess.CompletedProcess, *needles: str) -> None:
    assert r.returncode == 2, (r.stdout[-2000:], r.stderr[-4000:])
    assert "Traceback" not in r.stderr, r.stderr[-4000:]
    err = " ".join(r.stderr.split())
    assert err.startswith("error:") and "fix:" in err and r.stderr.strip().count("\nerror:") == 0, r.stderr
    for n in needles:
        assert n in err, err


def _swa_bomb(p: Path) -> Path:
    return _gguf(p, kv={"gemma3.block_count": 2**31 - 1, "gemma3.attention.sliding_window": 512})


def _blk_bomb(p: Path) -> Path:
    return _gguf(p, "qwen3moe", kv={"qwen3moe.block_count": None},
                 tensors=("token_embd.weight", "blk.100000000000000000000.attn_q.weight"))


def _blk_digits(p: Path) -> Path:   # 4,000 digits (names are bounded at 4,096 bytes)
    return _gguf(p, "qwen3moe", kv={"qwen3moe.block_count": None},
                 tensors=("token_embd.weight", "blk." + "9" * 4000 + ".attn_q.weight"))


def _nextn(p: Path) -> Path:
    return _gguf(p, "qwen3moe", kv={"qwen3moe.expert_count": 4, "qwen3moe.nextn_predict_layers": 1000})


def _int_arch(p: Path) -> Path:
    return _gguf(p, kv={"general.architecture": 7})   # replaces the writer's string


def _string_element(p: Path) -> Path:
    _gguf(p, tokens=["a", "bb", "ccc"])
    # key, u32 ARRAY, u32 STRING, u64 count, then the first element's u64 length
    return _patch(p, _after(p, b"tokenizer.ggml.tokens") + 16, "<Q", 2**63)


def _huge_array(p: Path) -> Path:
    _gguf(p, tokens=["a", "bb"])
    return _patch(p, _after(p, b"tokenizer.ggml.tokens") + 8, "<Q", 2**40)


def _huge_tensor_count(p: Path) -> Path:
    return _patch(_gguf(p), 8, "<Q", 2**40)


def _five_dims(p: Path) -> Path:
    _gguf(p)
    return _patch(p, _after(p, b"token_embd.weight"), "<I", 5)


def _many_experts(p: Path) -> Path:
    return _gguf(p, "qwen3moe", kv={"qwen3moe.expert_count": 1 << 30, "qwen3moe.expert_used_count": 8})


def _long_context(p: Path) -> Path:
    return _gguf(p, kv={"gemma3.context_length": 2**31 - 1})


BOMBS = {  # builder, words the one line must have
    "swa-2^31-layers": (_swa_bomb, ["gemma3.block_count is 2,147,483,647", "at most 4,096"]),
    "blk.10^20": (_blk_bomb, ["blk.100000000000000000000.attn_q.weight", "at most 4,096 layers"]),
    "blk.4000-digits": (_blk_digits, ["names layer 9999", "at most 4,096 layers"]),
    "nextn>layers": (_nextn, ["nextn_predict_layers is 1,000", "2 layers"]),
    "int-architecture": (_int_arch, ["general.architecture", "not an architecture name"]),
    "string-element-2^63": (_string_element, ["truncated or corrupt"]),
    "array-2^40-items": (_huge_array, ["1,099,511,627,776 items in one metadata array"]),
    "2^40-tensors": (_huge_tensor_count, ["1,099,511,627,776 tensors", "131,072"]),
    "five-dimensions": (_five_dims, ["5 dimensions of tensor 'token_embd.weight'"]),
    "2^30-experts": (_many_experts, ["qwen3moe.expert_count is 1,073,741,824"]),
    "context-2^31": (_long_context, ["gemma3.context_length is 2,147,483,647"]),
}


@pytest.mark.parametrize("case", list(BOMBS))
def test_crafted_claims_are_one_line_from_model_info(tmp_path, case):
    build, needles = BOMBS[case]
    _one_line(_cli(tmp_path, "model.info", str(build(tmp_path / "bomb.gguf"))), *needles)


@pytest.mark.parametrize("task", [["model.twin"], ["bench", "--model"]])
def test_a_string_element_of_2_63_bytes_is_one_line_for_twin_and_bench(tmp_path, task):
    model = _string_element(tmp_path / "bomb.gguf")
    args = [*task, str(model)] + ([str(tmp_path / "twin.gguf")] if task == ["model.twin"] else [])
    _one_line(_cli(tmp_path, *args), "truncated or corrupt")
    assert not (tmp_path / "twin.gguf").exists()


def test_the_bounds_are_the_documented_ones_and_a_real_sized_model_passes(tmp_path):
    assert (limits.MAX_LAYERS, limits.MAX_EXPERTS, limits.MAX_CONTEXT) == (4096, 4096, 1 << 24)
    f = model_facts(_gguf(tmp_path / "ok.gguf", "qwen3moe", kv={
        "qwen3moe.block_count": 4096, "qwen3moe.expert_count": 384, "qwen3moe.expert_used_count": 8,
        "qwen3moe.context_length": 10_485_760}, tensors=("token_embd.weight", "blk.4095.attn_q.weight")))
    assert (f.n_layers, f.n_experts, f.n_ctx_train, f.full_attention_layers) == (4096, 384, 10_485_760, [4095])
    with pytest.raises(ModelError, match="block_count is 4,097"):
        model_facts(_gguf(tmp_path / "over.gguf", "qwen3moe", kv={"qwen3moe.block_count": 4097}))
    with pytest.raises(ModelError, match="expert_used_count is 9, more than its 8 experts"):
        model_facts(_gguf(tmp_path / "used.gguf", "qwen3moe", kv={"qwen3moe.expert_count": 8,
                                                                  "qwen3moe.expert_used_count": 9}))


def test_names_are_bounded_before_they_are_read(tmp_path):
    p = _gguf(tmp_path / "key.gguf")
    _patch(p, 24, "<Q", 1 << 20)   # the first key's length: 1 MiB
    with pytest.raises(ModelError, match="metadata key of 1,048,576 bytes"):
        parse_header(p, keep_arrays=False)


def test_synth_layers_past_what_llama_cpp_loads_are_refused_before_planning(tmp_path):
    with pytest.raises(ModelError, match=f"more than llama.cpp loads \\({limits.SYNTH_MAX_LAYERS}\\)"):
        get_preset("tiny-gemma3", {"layers": limits.SYNTH_MAX_LAYERS + 1})
    assert get_preset("tiny-gemma3", {"layers": limits.SYNTH_MAX_LAYERS}).n_layers == 512
    _one_line(_cli(tmp_path, "model.synth", "tiny-gemma3", "--layers", "1048576", "--plan"), "--layers", "1..512")
