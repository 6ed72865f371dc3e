"""Model shapes (presets) and quantisation mixes for synthetic models.

A :class:`Shape` holds every hyper-parameter that decides tensor shapes; :data:`PRESETS` names the
real models we mirror (facts in ``MODELS.md``, checked against llama.cpp 0c1e570) plus tiny ones
for tests. A :class:`Mix` maps tensor names to GGML types with ordered regex rules, like
``llama-quantize``'s ``--tensor-type``; 1-D tensors, the router and ``ssm_conv1d`` stay F32 as
``llama-quantize`` leaves them.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field

from gguf import GGMLQuantizationType as Q

from ..errors import ModelError
from .limits import SYNTH_MAX_LAYERS
from .quants import parse_type

ARCHS = ("qwen35moe", "qwen3moe", "gemma3")
DENSE_ARCHS = ("gemma3",)


@dataclass(frozen=True)
class Shape:
    """Hyper-parameters of a Qwen3-style MoE (``qwen35moe`` hybrid or plain ``qwen3moe``) or of a
    dense ``gemma3`` (``n_experts = 0``, FFN length ``n_ff``, sliding-window layers, tied embeddings)."""

    arch: str
    name: str
    n_layers: int
    n_embd: int
    vocab_size: int
    n_ctx_train: int
    n_head: int
    n_head_kv: int
    head_dim: int
    n_experts: int
    n_experts_used: int
    n_ff_exp: int
    n_ff_shexp: int = 0                 # 0: no shared expert
    n_ff: int = 0                       # dense FFN length (gemma3; metadata only for qwen3moe)
    rope_theta: float = 1e6
    rope_dims: int = 0                  # 0: head_dim
    rope_sections: tuple[int, ...] = ()
    rms_eps: float = 1e-6
    # qwen35moe linear attention (Gated DeltaNet)
    full_attention_interval: int = 0    # 0: every layer is full attention
    ssm_conv_kernel: int = 0
    ssm_state_size: int = 0             # key/value head dim
    ssm_group_count: int = 0            # key heads
    ssm_time_step_rank: int = 0         # value heads
    vocab_file: str = "ggml-vocab-qwen2.gguf"
    # gemma3: sliding-window attention (llama.cpp's default pattern: 5 SWA layers, then 1 full)
    sliding_window: int = 0             # 0: no sliding-window layers
    sliding_window_pattern: int = 0     # written only when non-zero (else llama.cpp's arch default)
    rope_theta_swa: float = 0.0
    tied_embeddings: bool = False       # no output.weight: the token embedding is the output projection

    @property
    def is_moe(self) -> bool:
        return self.n_experts > 0

    @property
    def ssm_inner_size(self) -> int:
        return self.ssm_state_size * self.ssm_time_step_rank

    def is_full_attention(self, layer: int) -> bool:
        if self.full_attention_interval <= 0:
            return True
        return (layer + 1) % self.full_attention_interval == 0

    @property
    def full_attention_layers(self) -> list[int]:
        return [i for i in range(self.n_layers) if self.is_full_attention(i)]

    def validate(self) -> None:
        bad = [f.name for f in dataclasses.fields(self)
               if isinstance(getattr(self, f.name), int) and not isinstance(getattr(self, f.name), bool)
               and getattr(self, f.name) < 0]
        dense = self.arch in DENSE_ARCHS
        if bad or self.n_layers < 1 or self.n_embd < 1 or (not dense and (self.n_experts < 1 or self.n_ff_exp < 1)):
            raise ModelError(f"preset {self.name!r}: sizes must be positive ({', '.join(bad) or 'layers/embd/experts/ffn'})",
                             "give positive values for --layers, --experts, --n-embd, --n-ff-exp")
        if self.n_layers > SYNTH_MAX_LAYERS:
            raise ModelError(f"preset {self.name!r}: {self.n_layers:,} layers is more than llama.cpp loads "
                             f"({SYNTH_MAX_LAYERS})", f"use at most {SYNTH_MAX_LAYERS} layers (--layers)")
        if dense:
            if self.n_experts or self.n_ff < 1:
                raise ModelError(f"preset {self.name!r} is a dense {self.arch} model: it takes no experts",
                                 "drop --experts/--experts-used/--n-ff-exp for this preset")
            return
        if not 1 <= self.n_experts_used <= self.n_experts:
            raise ModelError(f"preset {self.name!r}: experts used ({self.n_experts_used}) must be 1..{self.n_experts}",
                             "lower --experts-used or raise --experts")
        if self.n_experts > 512:
            raise ModelError(f"preset {self.name!r}: {self.n_experts} experts is more than llama.cpp allows (512)",
                             "use at most 512 experts")
        if self.n_head_kv < 1 or self.n_head % self.n_head_kv:
            raise ModelError(f"preset {self.name!r}: heads ({self.n_head}) must be a multiple of KV heads ({self.n_head_kv})",
                             "fix the head counts")


QWEN36_35B_A3B = Shape(
    arch="qwen35moe", name="qwen3.6-35b-a3b", n_layers=40, n_embd=2048, vocab_size=248_320,
    n_ctx_train=262_144, n_head=16, n_head_kv=2, head_dim=256, n_experts=256, n_experts_used=8,
    n_ff_exp=512, n_ff_shexp=512, rope_theta=1e7, rope_dims=64, rope_sections=(11, 11, 10, 0),
    full_attention_interval=4, ssm_conv_kernel=4, ssm_state_size=128, ssm_group_count=16,
    ssm_time_step_rank=32, vocab_file="ggml-vocab-qwen35.gguf")

QWEN3_30B_A3B = Shape(
    arch="qwen3moe", name="qwen3-30b-a3b", n_layers=48, n_embd=2048, vocab_size=151_936,
    n_ctx_train=40_960, n_head=32, n_head_kv=4, head_dim=128, n_experts=128, n_experts_used=8,
    n_ff_exp=768, n_ff=6144, rope_theta=1e6, vocab_file="ggml-vocab-qwen2.gguf")

#: The tiny models' tokenizer: llama.cpp's 32,000-token SentencePiece test vocabulary. A tiny model's cost is
#: mostly its vocabulary (with Qwen's 151,936 tokens and n_embd 256 the output matrix was 39 M of ~96 M
#: parameters, and loading the tokenizer ~0.55 s of a ~0.9 s llama-server start; with this one a start takes
#: ~0.2 s). The shapes that matter for what the tool measures (MoE layout, experts, attention kinds) stay.
TINY_VOCAB = "ggml-vocab-llama-spm.gguf"

TINY_QWEN35MOE = dataclasses.replace(
    QWEN36_35B_A3B, name="tiny-qwen35moe", n_layers=8, n_embd=256, vocab_size=32_000, n_ctx_train=4096,
    n_head=2, n_head_kv=1, n_experts=8, n_experts_used=2, n_ff_exp=256, n_ff_shexp=256,
    ssm_group_count=2, ssm_time_step_rank=4, vocab_file=TINY_VOCAB)

#: tiny-qwen35moe with its family's own tokenizer (151,936 byte-level BPE tokens): ~0.9 s a llama-server start
#: instead of ~0.2 s, and ~4x slower a token. What it has that the SentencePiece one has not: a random model
#: over a byte-level vocabulary writes partial UTF-8 often (older servers answer HTTP 500 to it: the output guard
#: of :mod:`llamaforge.models.utf8`), and its longer decode steps are steadier per start on a small machine.
TINY_QWEN35MOE_BPE = dataclasses.replace(TINY_QWEN35MOE, name="tiny-qwen35moe-bpe", vocab_size=151_936,
                                         vocab_file=QWEN36_35B_A3B.vocab_file)

TINY_QWEN3MOE = dataclasses.replace(
    QWEN3_30B_A3B, name="tiny-qwen3moe", n_layers=8, n_embd=256, vocab_size=32_000, n_ctx_train=4096, n_head=4,
    n_head_kv=2, head_dim=64, n_experts=8, n_experts_used=2, n_ff_exp=256, n_ff=512, vocab_file=TINY_VOCAB)

#: Gemma 3 270M (google/gemma-3-270m): dense, 18 layers of which every 6th is full attention and the
#: rest see a 512-token sliding window, tied embeddings (262,144-token vocab: Gemma 4's tokenizer
#: file has the same size).
GEMMA3_270M = Shape(
    arch="gemma3", name="gemma3-270m", n_layers=18, n_embd=640, vocab_size=262_144, n_ctx_train=32_768,
    n_head=4, n_head_kv=1, head_dim=256, n_experts=0, n_experts_used=0, n_ff_exp=0, n_ff=2048,
    rope_theta=1e6, rms_eps=1e-6, sliding_window=512, rope_theta_swa=1e4, tied_embeddings=True,
    vocab_file="ggml-vocab-gemma-4.gguf")

#: a tiny gemma3 for tests: 8 layers (full attention at layer 5), a 128-token window, the tiny models' tokenizer
TINY_GEMMA3 = dataclasses.replace(
    GEMMA3_270M, name="tiny-gemma3", n_layers=8, n_embd=256, vocab_size=32_000, n_ctx_train=4096,
    head_dim=64, n_ff=512, sliding_window=128, vocab_file=TINY_VOCAB)

PRESETS: dict[str, Shape] = {s.name: s for s in (QWEN36_35B_A3B, QWEN3_30B_A3B, TINY_QWEN35MOE, TINY_QWEN35MOE_BPE,
                                                 TINY_QWEN3MOE, GEMMA3_270M, TINY_GEMMA3)}

#: override name (CLI) -> Shape field
OVERRIDES = {"layers": "n_layers", "experts": "n_experts", "experts_used": "n_experts_used",
             "n_embd": "n_embd", "n_ff_exp": "n_ff_exp", "n_ff_shexp": "n_ff_shexp", "vocab": "vocab_size",
             "ctx": "n_ctx_train", "heads": "n_head", "kv_heads": "n_head_kv", "head_dim": "head_dim",
             "n_ff": "n_ff", "sliding_window": "sliding_window"}


def get_preset(name: str, overrides: dict[str, int] | None = None) -> Shape:
    """A preset by name, with ``overrides`` (keys of :data:`OVERRIDES`) applied and validated."""
    if name not in PRESETS:
        raise ModelError(f"unknown model preset {name!r}", f"use one of: {', '.join(PRESETS)}")
    shape = PRESETS[name]
    changes: dict[str, int] = {}
    for key, value in (overrides or {}).items():
        if value is None:
            continue
        if key not in OVERRIDES:
            raise ModelError(f"unknown preset override {key!r}", f"use one of: {', '.join(OVERRIDES)}")
        try:
            changes[OVERRIDES[key]] = int(value)
        except (TypeError, ValueError) as e:
            raise ModelError(f"override {key}={value!r} is not an integer", f"give {key} as a whole number") from e
    if changes:
        shape = dataclasses.replace(shape, **changes)
    shape.validate()
    return shape


# ---------------------------------------------------------------------------------------- mixes

F32_ALWAYS = re.compile(r"(ffn_gate_inp\.weight$|ssm_conv1d|_norm\.weight$|\.bias$|ssm_a$|ssm_dt)")


@dataclass(frozen=True)
class Mix:
    """Ordered ``(regex, type)`` rules; the first rule whose regex ``search``-es the tensor name wins."""

    name: str
    description: str
    rules: tuple[tuple[str, Q], ...]
    default: Q
    ftype: int = 0      # general.file_type (LLAMA_FTYPE_*), informational

    def type_for(self, tensor: str, extra: tuple[tuple[str, Q], ...] = ()) -> tuple[Q, str]:
        """(type, which rule matched) for a 2-D+ tensor; ``extra`` rules (user overrides) go first."""
        for pattern, t in (*extra, *self.rules):
            if re.search(pattern, tensor):
                return t, pattern
        return self.default, "default"


MIXES: dict[str, Mix] = {m.name: m for m in (
    Mix("q4_k_m", "like llama-quantize Q4_K_M: Q4_K, with Q6_K for attn_v, ffn_down and output",
        rules=((r"^output\.", Q.Q6_K), (r"attn_v\.", Q.Q6_K), (r"ffn_down", Q.Q6_K)), default=Q.Q4_K, ftype=15),
    Mix("iq4_nl", "like Unsloth UD-IQ4_NL_XL: IQ4_NL experts, Q8_0 attention and shared experts, Q6_K output",
        rules=((r"^output\.", Q.Q6_K), (r"^token_embd\.", Q.Q4_K), (r"_exps\.", Q.IQ4_NL)), default=Q.Q8_0, ftype=25),
    Mix("q8_0", "Q8_0 everywhere", rules=(), default=Q.Q8_0, ftype=7),
    Mix("mxfp4", "MXFP4 experts, Q8_0 elsewhere (like gpt-oss releases)",
        rules=((r"_exps\.", Q.MXFP4),), default=Q.Q8_0, ftype=38),
    Mix("f16", "F16 everywhere", rules=(), default=Q.F16, ftype=1),
)}


def get_mix(name: str) -> Mix:
    key = name.strip().lower()
    if key not in MIXES:
        raise ModelError(f"unknown quant mix {name!r}", f"use one of: {', '.join(MIXES)}")
    return MIXES[key]


def parse_type_overrides(items: list[str] | tuple[str, ...] | str | None) -> tuple[tuple[str, Q], ...]:
    """``['ffn_.*_exps=q4_k', ...]`` (or one comma-separated string) -> ordered rules."""
    if not items:
        return ()
    if isinstance(items, str):
        items = [items]
    out: list[tuple[str, Q]] = []
    for item in items:
        for part in str(item).split(","):
            part = part.strip()
            if not part:
                continue
            pattern, sep, tname = part.rpartition("=")
            if not sep or not pattern:
                raise ModelError(f"bad type override {part!r}", "write REGEX=TYPE, e.g. 'ffn_.*_exps=q4_k'")
            try:
                re.compile(pattern)
            except re.error as e:
                raise ModelError(f"bad regex in type override {part!r}: {e}", "fix the regular expression") from e
            out.append((pattern, parse_type(tname)))
    return tuple(out)


@dataclass
class SynthSpec:
    """Everything that determines a synthetic file's bytes (hashed for the model cache)."""

    preset: str
    mix: str = ""
    seed: int = 0
    overrides: dict[str, int] = field(default_factory=dict)
    type_overrides: tuple[str, ...] = ()

    def default_mix(self) -> str:
        return self.mix or "q4_k_m"
