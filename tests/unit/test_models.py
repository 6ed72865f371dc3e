"""Models layer: facts, plans, synthetic writer, twins, bad input. Hermetic: a small fake vocab
GGUF stands in for llama.cpp's models/ggml-vocab-*.gguf."""

from __future__ import annotations

import dataclasses
import errno
import hashlib
import importlib
import shutil
from pathlib import Path

import numpy as np
import pytest
from gguf import GGMLQuantizationType as Q
from gguf import TokenType
from models_fake import N_FAKE_TOKENS

from llamaforge.errors import ModelError
from llamaforge.models import facts_from_plan, model_facts, quants, read_plan, synth, synth_plan, twin
from llamaforge.models.gguf_read import parse_header
from llamaforge.models.presets import TINY_QWEN35MOE
from llamaforge.models.synth import with_tokenizer

synth_mod = importlib.import_module("llamaforge.models.synth")  # the module, not the function


@pytest.fixture(scope="session")
def tiny35(tmp_path_factory: pytest.TempPathFactory, vocab_dir: Path) -> Path:
    out = tmp_path_factory.mktemp("m") / "tiny35.gguf"
    synth("tiny-qwen35moe", out, "q4_k_m", vocab_dir=vocab_dir, progress=False)
    return out


def _kv(path: Path) -> list[tuple]:
    return [(k, v, vt, sub) for k, v, vt, sub in parse_header(path).kv]


# ------------------------------------------------------------------------------ facts from plans


def test_full_size_qwen36_facts_from_dry_run_match_the_real_model():
    f = facts_from_plan(synth_plan("qwen3.6-35b-a3b", "iq4_nl"))
    assert f.arch == "qwen35moe"
    assert f.tensor_count == 733
    assert abs(f.params_total / 1e9 - 34.66) < 0.01
    assert f.n_layers == 40
    assert f.full_attention_layers == list(range(3, 40, 4))
    assert len(f.linear_attention_layers) == 30
    assert (f.n_experts, f.n_experts_used, f.has_shared_expert) == (256, 8, True)
    assert f.vocab_size == 248_320 and f.n_ctx_train == 262_144
    assert f.ncmoe_range == (0, 40)
    assert f.kv_bytes_per_token_ctx == 10 * 2 * 512 * 2
    assert abs(f.params_active / 1e9 - 2.95) < 0.01


def test_iq4_nl_mix_is_sized_like_the_seed_ud_iq4_nl_xl():
    f = facts_from_plan(synth_plan("qwen3.6-35b-a3b", "iq4_nl"))
    assert abs(f.file_bytes / 2**30 - 19.0) < 0.05
    assert abs(f.bpw - 4.71) < 0.01
    assert f.types["iq4_nl"] == 3 * 40          # every expert tensor
    assert f.bytes_by_group["experts"] > 0.85 * f.file_bytes


def test_bytes_per_token_grows_with_context_by_the_kv_cache():
    f = facts_from_plan(synth_plan("qwen3.6-35b-a3b", "iq4_nl"))
    assert f.bytes_per_token(1000) - f.bytes_per_token(0) == 1000 * f.kv_bytes_per_token_ctx
    # experts_used/experts of the expert bytes, plus all other weights but the embedding table
    assert f.bytes_per_token(0) < f.file_bytes / 5
    assert f.to_json()["bytes_per_token_ctx0"] == f.bytes_per_token(0)


def test_qwen3_30b_facts():
    f = facts_from_plan(synth_plan("qwen3-30b-a3b"))
    assert f.tensor_count == 579
    assert abs(f.params_total / 1e9 - 30.53) < 0.01
    assert f.full_attention_layers == list(range(48)) and not f.has_shared_expert


def test_linear_attention_layers_have_qkv_and_gate_and_full_layers_have_q_k_v():
    p = synth_plan("qwen3.6-35b-a3b")
    names = {t.name: t for t in p.tensors}
    assert names["blk.0.attn_qkv.weight"].shape == (2048, 8192)
    assert names["blk.0.attn_gate.weight"].shape == (2048, 4096)
    assert names["blk.0.ssm_conv1d.weight"].shape == (4, 8192)
    assert names["blk.3.attn_q.weight"].shape == (2048, 8192)
    assert names["blk.3.attn_output.weight"].shape == (4096, 2048)
    assert names["blk.0.ffn_down_exps.weight"].shape == (512, 2048, 256)
    assert "blk.3.attn_qkv.weight" not in names and "blk.0.attn_q.weight" not in names
    assert names["blk.0.ssm_conv1d.weight"].type == Q.F32 and names["blk.0.ffn_gate_inp.weight"].type == Q.F32


def test_overrides_change_the_shape():
    f = facts_from_plan(synth_plan("qwen3.6-35b-a3b", overrides={"layers": 8, "experts": 64}))
    assert f.n_layers == 8 and f.n_experts == 64 and f.full_attention_layers == [3, 7]


def test_type_override_applies_and_mix_fallback_is_noted():
    p = synth_plan("tiny-qwen35moe", "q4_k_m", overrides={"n_ff_exp": 128}, type_overrides=["ffn_up_exps=q8_0"])
    names = {t.name: t for t in p.tensors}
    assert names["blk.0.ffn_up_exps.weight"].type == Q.Q8_0
    down = names["blk.0.ffn_down_exps.weight"]          # rows of 128 cannot hold Q6_K blocks of 256
    assert down.type == Q.Q8_0 and "fallback" in down.note


# ------------------------------------------------------------------------------ bad input


@pytest.mark.parametrize("call, what", [
    (lambda: synth_plan("llama-7b"), "unknown model preset"),
    (lambda: synth_plan("tiny-qwen3moe", "q3_zz"), "unknown quant mix"),
    (lambda: synth_plan("tiny-qwen3moe", type_overrides=["ffn_.*=q9_k"]), "unknown tensor type"),
    (lambda: synth_plan("tiny-qwen3moe", type_overrides=["no-equals-sign"]), "bad type override"),
    (lambda: synth_plan("qwen3.6-35b-a3b", type_overrides=["ssm_conv1d=q8_0"]), "block size"),
    (lambda: synth_plan("tiny-qwen3moe", overrides={"n_ff_exp": 128}, type_overrides=["ffn_down_exps=q4_k"]),
     "block size"),
    (lambda: synth_plan("tiny-qwen3moe", overrides={"experts_used": 9}), "experts used"),
    (lambda: synth_plan("tiny-qwen3moe", overrides={"bogus": 1}), "unknown preset override"),
    (lambda: synth_plan("tiny-qwen3moe", type_overrides=["nothing_matches=q8_0"]), "matches no tensor"),
])
def test_bad_synth_input_is_a_clear_model_error(call, what):
    with pytest.raises(ModelError, match=what) as ei:
        call()
    assert ei.value.fix


def test_info_of_a_non_gguf_file_is_a_model_error(tmp_path):
    p = tmp_path / "x.gguf"
    p.write_bytes(b"not a gguf at all" * 10)
    with pytest.raises(ModelError, match="not a GGUF"):
        model_facts(p)
    with pytest.raises(ModelError, match="no model file"):
        model_facts(tmp_path / "missing.gguf")


@pytest.mark.parametrize("keep", [0.5, 0.001])
def test_truncated_file_is_a_model_error_for_info_and_twin(tmp_path, tiny35, keep):
    cut = tmp_path / "cut.gguf"
    data = tiny35.read_bytes()
    cut.write_bytes(data[: int(len(data) * keep)])
    with pytest.raises(ModelError, match="truncated"):
        model_facts(cut)
    with pytest.raises(ModelError, match="truncated"):
        twin(cut, tmp_path / "twin.gguf", progress=False)
    assert not (tmp_path / "twin.gguf").exists()


def test_disk_full_removes_the_partial_file(tmp_path, vocab_dir, monkeypatch):
    calls = {"n": 0}
    real = synth_mod._write_chunk

    def full_after_a_few(fh, data):
        calls["n"] += 1
        if calls["n"] > 20:
            raise OSError(errno.ENOSPC, "No space left on device")
        real(fh, data)

    monkeypatch.setattr(synth_mod, "_write_chunk", full_after_a_few)
    out = tmp_path / "m.gguf"
    with pytest.raises(ModelError, match="disk full"):
        synth("tiny-qwen3moe", out, vocab_dir=vocab_dir, progress=False)
    assert list(tmp_path.iterdir()) == []


def test_existing_output_is_not_overwritten_without_force(tmp_path, vocab_dir):
    out = tmp_path / "m.gguf"
    out.write_bytes(b"keep me")
    with pytest.raises(ModelError, match="already exists"):
        synth("tiny-qwen3moe", out, vocab_dir=vocab_dir, progress=False)
    assert out.read_bytes() == b"keep me"


# ------------------------------------------------------------------------------ written files


def test_tiny_model_file_matches_its_plan(tiny35, vocab_dir):
    plan = with_tokenizer(synth_plan("tiny-qwen35moe", "q4_k_m", vocab_dir=vocab_dir))
    back = read_plan(tiny35)
    assert [(t.name, t.shape, t.type) for t in back.tensors] == [(t.name, t.shape, t.type) for t in plan.tensors]
    f = model_facts(tiny35)
    assert f.file_bytes == tiny35.stat().st_size == facts_from_plan(plan).file_bytes
    assert f.synthetic and f.arch == "qwen35moe" and f.full_attention_layers == [3, 7]
    assert 1 << 20 < f.file_bytes < 80 << 20


def test_tokenizer_is_padded_with_unused_pad_tokens(tiny35):
    md = {k: v for k, v, _, _ in parse_header(tiny35).kv}
    tokens, types = md["tokenizer.ggml.tokens"], md["tokenizer.ggml.token_type"]
    assert len(tokens) == len(types) == TINY_QWEN35MOE.vocab_size == 32_000
    assert tokens[N_FAKE_TOKENS - 1] == f"t{N_FAKE_TOKENS - 1}".encode()
    assert tokens[N_FAKE_TOKENS] == f"[PAD{N_FAKE_TOKENS}]".encode()
    assert set(types[N_FAKE_TOKENS:]) == {int(TokenType.UNUSED)}


def _tensor_bytes(path: Path) -> dict[str, tuple[Q, bytes]]:
    h = parse_header(path)
    raw = path.read_bytes()
    out = {}
    for t in h.tensors:
        tq = Q(t.type)
        start = h.data_start + t.offset
        out[t.name] = (tq, raw[start:start + quants.nbytes(tq, t.shape)])
    return out


def test_every_scale_is_finite_and_ssm_a_is_negative(tiny35):
    data = _tensor_bytes(tiny35)
    for name, (t, b) in data.items():
        assert quants.scales_finite(t, b), name
    ssm_a = np.frombuffer(data["blk.0.ssm_a"][1], dtype=np.float32)
    assert (ssm_a < 0).all()
    router = np.frombuffer(data["blk.0.ffn_gate_inp.weight"][1], dtype=np.float32)
    assert router.std() > 0 and len(np.unique(router)) == router.size


def test_same_seed_same_bytes_other_seed_other_bytes(tmp_path, vocab_dir):
    def digest(seed: int, name: str) -> str:
        out = tmp_path / name
        synth("tiny-qwen3moe", out, "q8_0", seed=seed, vocab_dir=vocab_dir, progress=False)
        return hashlib.sha256(out.read_bytes()).hexdigest()

    assert digest(1, "a.gguf") == digest(1, "b.gguf")
    assert digest(1, "c.gguf") != digest(2, "d.gguf")


def test_twin_has_identical_metadata_tensors_shapes_and_types(tmp_path, tiny35):
    out = tmp_path / "twin.gguf"
    twin(tiny35, out, seed=7, progress=False)
    assert _kv(out) == _kv(tiny35)
    a, b = parse_header(tiny35), parse_header(out)
    assert [(t.name, t.shape, t.type, t.offset) for t in a.tensors] == [(t.name, t.shape, t.type, t.offset) for t in b.tensors]
    assert out.stat().st_size == tiny35.stat().st_size
    assert out.read_bytes() != tiny35.read_bytes()


def test_twin_refuses_to_overwrite_its_source(tmp_path, tiny35):
    src = tmp_path / "src.gguf"
    shutil.copy(tiny35, src)
    with pytest.raises(ModelError, match="overwrite its source"):
        twin(src, src, progress=False, overwrite=True)


# ------------------------------------------------------------------------------ quant blocks


@pytest.mark.parametrize("tname", quants.USER_TYPES)
def test_random_blocks_have_finite_scales(tname):
    t = quants.parse_type(tname)
    rng = np.random.default_rng(0)
    b = quants.random_blocks(rng, t, 4096)
    assert len(b) == 4096 * quants.block_size(t)[1]
    assert quants.scales_finite(t, b)


def test_raw_random_bytes_would_have_nan_scales():
    # the reason random_blocks fixes scale fields: ~3% of random fp16 values are NaN/Inf
    raw = np.random.default_rng(0).integers(0, 256, 34 * 4096, dtype=np.uint8).tobytes()
    assert not quants.scales_finite(Q.Q8_0, raw)


def test_tiny_presets_share_a_small_tokenizer_that_exported_trees_keep_and_the_bpe_twin_differs_only_there():
    from llamaforge.models.presets import PRESETS, TINY_QWEN35MOE_BPE, TINY_VOCAB
    from llamaforge.sources.export import KEEP_VOCABS

    tiny = [s for name, s in PRESETS.items() if name.startswith("tiny-") and name != TINY_QWEN35MOE_BPE.name]
    assert len(tiny) == 3 and all(s.vocab_file == TINY_VOCAB and s.vocab_size == 32_000 for s in tiny)
    assert f"models/{TINY_VOCAB}" in KEEP_VOCABS          # a bisect tarball of a pin can still synth them
    assert f"models/{TINY_QWEN35MOE_BPE.vocab_file}" in KEEP_VOCABS
    same = dataclasses.replace(TINY_QWEN35MOE_BPE, name=TINY_QWEN35MOE.name, vocab_size=TINY_QWEN35MOE.vocab_size,
                               vocab_file=TINY_QWEN35MOE.vocab_file)
    assert same == TINY_QWEN35MOE and TINY_QWEN35MOE_BPE.vocab_size == 151_936
