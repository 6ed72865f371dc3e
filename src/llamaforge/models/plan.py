"""The plan of a GGUF file before a byte is written: metadata, and every tensor's name, shape, type.

:func:`plan_synthetic` turns a :class:`~.presets.Shape` + :class:`~.presets.Mix` into a
:class:`ModelPlan` (tensor names and shapes as llama.cpp's loader for the arch expects them);
:func:`plan_from_gguf` reads one from an existing file's header (for twins). The writer
(:mod:`.synth`) and the facts (:mod:`.gguf_info`) both work from a plan, which is how
``model.info --dry-run`` describes a 19 GiB model without writing it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gguf import GGMLQuantizationType as Q
from gguf import GGUFValueType as VT

from ..errors import ModelError
from . import quants
from .presets import F32_ALWAYS, Mix, Shape

GENERATOR_VERSION = 1
ALIGNMENT = 32


@dataclass
class TensorPlan:
    name: str
    shape: tuple[int, ...]          # ggml order: row length first
    type: Q
    note: str = ""                  # why this type (rule, fallback)

    @property
    def nbytes(self) -> int:
        return quants.nbytes(self.type, self.shape)

    @property
    def n_elements(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n


@dataclass
class KV:
    key: str
    value: Any
    vtype: VT
    sub_type: VT | None = None


@dataclass
class ModelPlan:
    arch: str
    tensors: list[TensorPlan]
    kv: list[KV] = field(default_factory=list)
    alignment: int = ALIGNMENT
    shape: Shape | None = None
    vocab_path: Path | None = None  # tokenizer source, padded on write (synthetic plans)

    @property
    def data_bytes(self) -> int:
        return sum(_pad(t.nbytes, self.alignment) for t in self.tensors)

    def metadata(self) -> dict[str, Any]:
        return {kv.key: kv.value for kv in self.kv}


def _pad(n: int, align: int) -> int:
    return (n + align - 1) // align * align


# ------------------------------------------------------------------------------------ synthetic


def _gemma3_tensor_names(s: Shape) -> list[tuple[str, tuple[int, ...]]]:
    """gemma3 (llama.cpp ``src/models/gemma3.cpp``): dense FFN, pre- and post-norms, Q/K norms."""
    e, v, hd = s.n_embd, s.vocab_size, s.head_dim
    out: list[tuple[str, tuple[int, ...]]] = [("token_embd.weight", (e, v))]
    for i in range(s.n_layers):
        b = f"blk.{i}."
        out += [(b + "attn_norm.weight", (e,)), (b + "attn_q.weight", (e, s.n_head * hd)),
                (b + "attn_k.weight", (e, s.n_head_kv * hd)), (b + "attn_v.weight", (e, s.n_head_kv * hd)),
                (b + "attn_output.weight", (s.n_head * hd, e)), (b + "attn_q_norm.weight", (hd,)),
                (b + "attn_k_norm.weight", (hd,)), (b + "post_attention_norm.weight", (e,)),
                (b + "ffn_norm.weight", (e,)), (b + "ffn_gate.weight", (e, s.n_ff)), (b + "ffn_up.weight", (e, s.n_ff)),
                (b + "ffn_down.weight", (s.n_ff, e)), (b + "post_ffw_norm.weight", (e,))]
    out.append(("output_norm.weight", (e,)))
    if not s.tied_embeddings:
        out.append(("output.weight", (e, v)))
    return out


def _tensor_names(s: Shape) -> list[tuple[str, tuple[int, ...]]]:
    """(name, ggml shape) of every tensor, in the order llama.cpp's converter writes them."""
    if s.arch == "gemma3":
        return _gemma3_tensor_names(s)
    e, v = s.n_embd, s.vocab_size
    out: list[tuple[str, tuple[int, ...]]] = [("token_embd.weight", (e, v))]
    qwen35 = s.arch == "qwen35moe"
    for i in range(s.n_layers):
        b = f"blk.{i}."
        layer: list[tuple[str, tuple[int, ...]]] = [(b + "attn_norm.weight", (e,))]
        kv_dim = s.n_head_kv * s.head_dim
        if qwen35 and not s.is_full_attention(i):
            key_dim = s.ssm_state_size * s.ssm_group_count
            value_dim = s.ssm_inner_size
            conv_dim = 2 * key_dim + value_dim
            vh = s.ssm_time_step_rank
            layer += [(b + "attn_qkv.weight", (e, conv_dim)), (b + "attn_gate.weight", (e, value_dim)),
                      (b + "ssm_conv1d.weight", (s.ssm_conv_kernel, conv_dim)), (b + "ssm_dt.bias", (vh,)),
                      (b + "ssm_a", (vh,)), (b + "ssm_alpha.weight", (e, vh)), (b + "ssm_beta.weight", (e, vh)),
                      (b + "ssm_norm.weight", (s.ssm_state_size,)), (b + "ssm_out.weight", (value_dim, e))]
        else:
            q_dim = s.n_head * s.head_dim * (2 if qwen35 else 1)  # qwen35: query + gate
            layer += [(b + "attn_q.weight", (e, q_dim)), (b + "attn_k.weight", (e, kv_dim)),
                      (b + "attn_v.weight", (e, kv_dim)), (b + "attn_output.weight", (s.n_head * s.head_dim, e)),
                      (b + "attn_q_norm.weight", (s.head_dim,)), (b + "attn_k_norm.weight", (s.head_dim,))]
        layer += [(b + ("post_attention_norm.weight" if qwen35 else "ffn_norm.weight"), (e,)),
                  (b + "ffn_gate_inp.weight", (e, s.n_experts)),
                  (b + "ffn_gate_exps.weight", (e, s.n_ff_exp, s.n_experts)),
                  (b + "ffn_up_exps.weight", (e, s.n_ff_exp, s.n_experts)),
                  (b + "ffn_down_exps.weight", (s.n_ff_exp, e, s.n_experts))]
        if s.n_ff_shexp:
            f = s.n_ff_shexp
            layer += [(b + "ffn_gate_inp_shexp.weight", (e,)), (b + "ffn_gate_shexp.weight", (e, f)),
                      (b + "ffn_up_shexp.weight", (e, f)), (b + "ffn_down_shexp.weight", (f, e))]
        out += layer
    out += [("output_norm.weight", (e,))]
    if not s.tied_embeddings:
        out.append(("output.weight", (e, v)))
    return out


def choose_type(name: str, shape: tuple[int, ...], mix: Mix, extra: tuple[tuple[str, Q], ...] = ()) -> tuple[Q, str]:
    """The type of one tensor under ``mix`` + user rules ``extra``, with its reason.

    A mix rule whose block size does not divide the row falls back to Q8_0, then F16 (noted); a
    user rule that does not fit is an error.
    """
    user = next((p for p, _ in extra if re.search(p, name)), None)
    if user is None and (len(shape) == 1 or F32_ALWAYS.search(name)):
        return Q.F32, "kept F32 (1-D, router or conv)"
    t, rule = mix.type_for(name, extra)
    if quants.fits(t, shape[0]):
        return t, rule
    if any(rule == p for p, _ in extra):
        raise ModelError(f"type {quants.type_name(t)} does not fit {name}: its rows of {shape[0]} are not a multiple "
                         f"of the block size {quants.block_size(t)[0]}",
                         f"choose a type with a smaller block (q8_0 needs rows % 32, K/IQ types rows % 256) for {rule!r}")
    for fb in (Q.Q8_0, Q.F16):
        if quants.fits(fb, shape[0]):
            return fb, f"fallback from {quants.type_name(t)}: row {shape[0]} % {quants.block_size(t)[0]} != 0"
    return Q.F32, "fallback"  # pragma: no cover - F16 always fits


def _u32(arch: str, pairs: list[tuple[str, Any]]) -> list[KV]:
    """UINT32 metadata of architecture ``arch`` (``arch.key``), in the order given."""
    return [KV(f"{arch}.{key}", value, VT.UINT32) for key, value in pairs]


def synth_kv(s: Shape, mix: Mix, *, seed: int, preset: str) -> list[KV]:
    """Model metadata (tokenizer excluded: added from the vocab file on write)."""
    a = s.arch
    kv = [KV("general.type", "model", VT.STRING),
          KV("general.name", f"llamaforge synthetic {s.name} {mix.name}", VT.STRING),
          KV("general.file_type", mix.ftype, VT.UINT32),
          KV("general.quantization_version", 2, VT.UINT32),
          *_u32(a, [("block_count", s.n_layers), ("context_length", s.n_ctx_train),
                    ("embedding_length", s.n_embd)])]
    if s.n_ff:
        kv.append(KV(f"{a}.feed_forward_length", s.n_ff, VT.UINT32))
    kv += _u32(a, [("attention.head_count", s.n_head), ("attention.head_count_kv", s.n_head_kv),
                   ("attention.key_length", s.head_dim), ("attention.value_length", s.head_dim)])
    kv += [KV(f"{a}.attention.layer_norm_rms_epsilon", s.rms_eps, VT.FLOAT32),
           KV(f"{a}.rope.freq_base", s.rope_theta, VT.FLOAT32)]
    if s.is_moe:
        kv += _u32(a, [("expert_count", s.n_experts), ("expert_used_count", s.n_experts_used),
                       ("expert_feed_forward_length", s.n_ff_exp)])
    if s.sliding_window:
        kv.append(KV(f"{a}.attention.sliding_window", s.sliding_window, VT.UINT32))
        if s.sliding_window_pattern:
            kv.append(KV(f"{a}.attention.sliding_window_pattern", s.sliding_window_pattern, VT.UINT32))
        if s.rope_theta_swa:
            kv.append(KV(f"{a}.rope.freq_base_swa", s.rope_theta_swa, VT.FLOAT32))
    if s.rope_dims:
        kv.append(KV(f"{a}.rope.dimension_count", s.rope_dims, VT.UINT32))
    if s.rope_sections:
        kv.append(KV(f"{a}.rope.dimension_sections", list(s.rope_sections), VT.ARRAY, VT.INT32))
    if s.n_ff_shexp:
        kv.append(KV(f"{a}.expert_shared_feed_forward_length", s.n_ff_shexp, VT.UINT32))
    if s.full_attention_interval:
        kv += _u32(a, [("ssm.conv_kernel", s.ssm_conv_kernel), ("ssm.state_size", s.ssm_state_size),
                       ("ssm.group_count", s.ssm_group_count), ("ssm.time_step_rank", s.ssm_time_step_rank),
                       ("ssm.inner_size", s.ssm_inner_size), ("full_attention_interval", s.full_attention_interval)])
    kv += [KV("llamaforge.synthetic", True, VT.BOOL),
           KV("llamaforge.preset", preset, VT.STRING),
           KV("llamaforge.mix", mix.name, VT.STRING),
           KV("llamaforge.seed", seed, VT.UINT32),
           KV("llamaforge.generator_version", GENERATOR_VERSION, VT.UINT32)]
    return kv


def plan_synthetic(s: Shape, mix: Mix, *, type_overrides: tuple[tuple[str, Q], ...] = (), seed: int = 0,
                   vocab_path: Path | None = None) -> ModelPlan:
    """The full plan of a synthetic model of shape ``s`` quantised with ``mix``."""
    tensors = []
    for name, shape in _tensor_names(s):
        if name == "token_embd.weight" and s.tied_embeddings:
            # like llama-quantize: a tied embedding is the output projection and gets the output's type
            t, note = choose_type("output.weight", shape, mix, type_overrides)
            note = f"tied embedding, typed as output ({note})"
            if any(re.search(p, name) for p, _ in type_overrides):
                t, note = choose_type(name, shape, mix, type_overrides)
        else:
            t, note = choose_type(name, shape, mix, type_overrides)
        tensors.append(TensorPlan(name, shape, t, note))
    for pattern, _ in type_overrides:
        if not any(re.search(pattern, t.name) for t in tensors):
            raise ModelError(f"type override {pattern!r} matches no tensor of {s.name}",
                             "check the regex against the tensor names (`model.synth --plan` lists them)")
    return ModelPlan(arch=s.arch, tensors=tensors, kv=synth_kv(s, mix, seed=seed, preset=s.name), shape=s,
                     vocab_path=vocab_path)
