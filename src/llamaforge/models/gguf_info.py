"""What a GGUF model is, read from its header: :class:`~llamaforge.records.ModelFacts`.

``read_plan(path)`` parses a file's header with gguf-py (metadata + tensor infos, no weights) and
checks that the tensor data really is there (a truncated download is a :class:`ModelError`).
``facts_from_plan`` derives the facts every other module uses — layers (full vs linear
attention), experts, parameter counts, bytes per tensor group, and the roofline input *bytes read
per generated token* — from a plan, so ``model.info --dry-run`` works for a synthetic model that
was never written.

Bytes per generated token (the roofline for token generation, see MODELS.md): all non-expert
weights except the token embedding (one row of it is read) — unless the embeddings are tied (no
``output.weight``, e.g. Gemma): then the embedding matrix *is* the output projection and is read
whole —, plus ``experts_used / experts`` of the expert weights, plus the KV cache read at context
``ctx`` (f16 K and V of the full-attention layers; a sliding-window layer reads at most its window),
plus the recurrent state of linear-attention layers (f32 conv + SSM state, per sequence).

Sliding-window layers (Gemma 2/3, Cohere2, gpt-oss...) come from ``ARCH.attention.sliding_window``
and ``ARCH.attention.sliding_window_pattern`` (a per-layer bool array, or N: every N-th layer is
full attention), with llama.cpp's per-arch default pattern when the file has none (real Gemma 3
GGUFs don't: 5 sliding-window layers, then 1 full).
"""

from __future__ import annotations

import numbers
import os
import re
from pathlib import Path
from typing import Any

from gguf import GGMLQuantizationType as Q
from gguf import GGUFValueType as VT

from ..errors import ModelError
from ..records import ModelFacts
from . import limits, quants
from .gguf_read import parse_header
from .plan import KV, ModelPlan, TensorPlan

_BLK = re.compile(r"^blk\.([0-9]+)\.")
_ARCH = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$")

#: llama.cpp's default sliding-window pattern per arch when the GGUF has no
#: ``sliding_window_pattern``: (N, dense_first) — with dense_first, layers il % N == 0 are full;
#: else il % N == N - 1 are (``llama_hparams::set_swa_pattern``; src/models/*.cpp at 0c1e570)
SWA_DEFAULT_PATTERN: dict[str, tuple[int, bool]] = {
    "gemma2": (2, False), "gemma3": (6, False), "gemma-embedding": (6, False), "gemma3n": (5, False),
    "cohere2": (4, False), "gpt-oss": (2, False), "exaone4": (4, False), "olmo2": (4, False),
    "smallthinker": (4, True),
}

# ------------------------------------------------------------------------------------ reading


def read_plan(path: Path, *, with_arrays: bool = True) -> ModelPlan:
    """Metadata and tensor infos of a GGUF file; ModelError if it is not a complete GGUF file.

    With ``with_arrays=False`` metadata arrays keep their length but not their items (faster)."""
    path = Path(path)
    if not path.is_file():
        raise ModelError(f"no model file at {path}",
                         "give the path of a .gguf file or a model reference (synth:PRESET, hf:OWNER/REPO/FILE)")
    h = parse_header(path, keep_arrays=with_arrays)
    arch = ""
    kv: list[KV] = []
    alignment = 32
    for key, val, vt, sub in h.kv:
        if key == "general.architecture":
            arch = _arch(path, val, vt)
        if key == "general.alignment":
            alignment = int(val)
        kv.append(KV(key, val, vt, sub))
    tensors = []
    end = h.data_start
    for t in h.tensors:
        try:
            tp = TensorPlan(t.name, t.shape, Q(t.type))
        except ValueError as e:
            raise ModelError(f"{path}: tensor {t.name} has unknown type id {t.type}",
                             "use a newer llamaforge/gguf-py, or a file with standard types") from e
        end = max(end, h.data_start + t.offset + tp.nbytes)
        tensors.append(tp)
    if end > h.file_size:
        raise ModelError(f"{path} is truncated: tensor data ends at byte {end:,} but the file has {h.file_size:,}",
                         "re-download or re-generate the file (an interrupted copy or download?)")
    if not arch:
        raise ModelError(f"{path} has no general.architecture", "give a llama.cpp model GGUF")
    return ModelPlan(arch=arch, tensors=tensors, kv=kv, alignment=alignment)


def _arch(path: Path, val: Any, vt: VT) -> str:
    """``general.architecture``: a string naming an architecture (``qwen3moe``, ``gemma3``, ``gpt-oss``...)."""
    text = val.decode("utf-8", "replace") if vt == VT.STRING and isinstance(val, bytes) else None
    if text is None or not _ARCH.match(text):
        shown = text if text is not None else val
        raise ModelError(f"{path}: general.architecture is {str(shown)[:80]!r}, not an architecture name",
                         "use a GGUF written by llama.cpp or gguf-py (general.architecture is a string such as "
                         "'qwen3moe'); this one is damaged or crafted")
    return text


# ------------------------------------------------------------------------------------- facts


def tensor_group(name: str, linear_layer: bool = False) -> str:
    """The group a tensor's bytes are reported under."""
    if name.startswith("token_embd"):
        return "embedding"
    if name.startswith("output"):
        return "output"
    if "_exps" in name:
        return "experts"
    if "_shexp" in name:
        return "shared_expert"
    if "ffn_gate_inp" in name:
        return "router"
    if "ssm_" in name or (linear_layer and ("attn_qkv" in name or "attn_gate" in name)):
        return "linear_attention"
    if "norm" in name:
        return "norms"
    if "attn_" in name:
        return "attention"
    if name.startswith("blk.") and "ffn_" in name:
        return "ffn"
    return "other"


def _as_int(v: Any, default: int = 0, key: str = "a count", limit: int = limits.MAX_COUNT) -> int:
    """A count from the metadata (an integer, or the largest of a per-layer array) — anything else
    (a string where an int belongs, a negative value, one past ``limit``) is a :class:`ModelError`."""
    if v is None:
        return default
    vals = [x for x in v if x is not None] if isinstance(v, list) else [v]
    for x in vals:
        if isinstance(x, bool) or not isinstance(x, numbers.Integral) or x < 0:
            shown = x.decode("utf-8", "replace") if isinstance(x, bytes) else x
            raise ModelError(f"the model's metadata {key} is {str(shown)[:80]!r}, not a count (a whole number ≥ 0)",
                             limits.CRAFTED_FIX)
        if x > limit:
            raise ModelError(f"the model's metadata {key} is {x:,}; a real model has at most {limit:,}",
                             limits.CRAFTED_FIX)
    return int(max(vals)) if vals else default


def _block_index(name: str) -> int | None:
    """The layer a ``blk.N.*`` tensor belongs to (None for other tensors); past :data:`limits.MAX_LAYERS`
    it is a :class:`ModelError` (checked on the digits, before a 10,000-digit number is converted)."""
    m = _BLK.match(name)
    if not m:
        return None
    digits = m.group(1).lstrip("0") or "0"
    if len(digits) > len(str(limits.MAX_LAYERS)) or int(digits) >= limits.MAX_LAYERS:
        raise ModelError(f"tensor {name[:80]!r} names layer {digits[:24]}{'…' if len(digits) > 24 else ''}; "
                         f"a real model has at most {limits.MAX_LAYERS:,} layers", limits.CRAFTED_FIX)
    return int(digits)


def _scalar_meta(kv: list[KV]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for e in kv:
        if e.vtype == VT.ARRAY:
            if len(e.value) > 64 and (e.key.startswith("tokenizer.") or e.value[0] is None):
                out[e.key] = f"[{len(e.value)} items]"   # a tokenizer, or items left unread
            else:
                out[e.key] = [x.decode("utf-8", "replace") if isinstance(x, bytes) else x for x in e.value]
        else:
            v = e.value.decode("utf-8", "replace") if isinstance(e.value, bytes) else e.value
            if isinstance(v, str) and len(v) > 200:
                v = v[:200] + "…"
            out[e.key] = v
    return out


def header_nbytes(plan: ModelPlan) -> int:
    """Bytes of the GGUF header (magic..tensor infos, padded) that ``plan`` will produce."""

    def val_size(v: Any, vt: VT, sub: VT | None) -> int:
        if vt == VT.STRING:
            return 8 + len(v if isinstance(v, bytes) else str(v).encode())
        if vt == VT.ARRAY:
            assert sub is not None
            return 4 + 8 + sum(val_size(x, sub, None) for x in v)
        return {VT.UINT8: 1, VT.INT8: 1, VT.BOOL: 1, VT.UINT16: 2, VT.INT16: 2, VT.UINT32: 4, VT.INT32: 4,
                VT.FLOAT32: 4, VT.UINT64: 8, VT.INT64: 8, VT.FLOAT64: 8}[vt]

    n = 4 + 4 + 8 + 8
    arch_kv = [KV("general.architecture", plan.arch, VT.STRING)]
    for e in arch_kv + [e for e in plan.kv if e.key != "general.architecture"]:
        n += 8 + len(e.key.encode()) + 4 + val_size(e.value, e.vtype, e.sub_type)
    for t in plan.tensors:
        n += 8 + len(t.name.encode()) + 4 + 8 * len(t.shape) + 4 + 8
    return (n + plan.alignment - 1) // plan.alignment * plan.alignment


def _tensor_sums(plan: ModelPlan, linear: set[int]) -> tuple[dict[str, int], dict[str, int], dict[str, int],
                                                              tuple[int, int, int]]:
    """Bytes per tensor group and per type, tensors per type, and (parameters, expert parameters,
    expert bytes) of a plan's tensors (``linear``: the linear-attention layers)."""
    by_group: dict[str, int] = {}
    by_type: dict[str, int] = {}
    types: dict[str, int] = {}
    params_total = params_expert = bytes_expert = 0
    for t in plan.tensors:
        g = tensor_group(t.name, _block_index(t.name) in linear)
        by_group[g] = by_group.get(g, 0) + t.nbytes
        tn = quants.type_name(t.type)
        by_type[tn] = by_type.get(tn, 0) + t.nbytes
        types[tn] = types.get(tn, 0) + 1
        params_total += t.n_elements
        if g == "experts":
            params_expert += t.n_elements
            bytes_expert += t.nbytes
    return by_group, by_type, types, (params_total, params_expert, bytes_expert)


def _recurrent_bytes(n_linear: int, num) -> int:  # noqa: ANN001 - num: the arch-prefixed int getter
    """f32 recurrent state per sequence of ``n_linear`` linear-attention (SSM) layers: conv state + SSM state."""
    d_conv = num("ssm.conv_kernel")
    d_state = num("ssm.state_size")
    groups = num("ssm.group_count")
    inner = num("ssm.inner_size")
    v_heads = num("ssm.time_step_rank")
    conv_dim = 2 * d_state * groups + inner
    return n_linear * ((d_conv - 1) * conv_dim + d_state * d_state * v_heads) * 4


def _layers(names: list[str], arch: str, num) -> tuple[int, int, list[int], list[int]]:  # noqa: ANN001
    """(layers, trunk layers without the next-token-prediction ones, full-attention layers, linear-attention
    layers) from the metadata and the ``blk.N.*`` tensor names, each bounded by :data:`limits.MAX_LAYERS`."""
    layer_tensors: dict[int, list[str]] = {}
    for n in names:
        i = _block_index(n)
        if i is not None:
            layer_tensors.setdefault(i, []).append(n)
    n_layers = num("block_count", (max(layer_tensors) + 1) if layer_tensors else 0, limit=limits.MAX_LAYERS)
    n_nextn = num("nextn_predict_layers", 0, limit=limits.MAX_LAYERS)
    if n_nextn and n_nextn >= n_layers:
        raise ModelError(f"the model's metadata {arch}.nextn_predict_layers is {n_nextn:,}, not fewer than its "
                         f"{n_layers:,} layers ({arch}.block_count)", limits.CRAFTED_FIX)
    trunk = n_layers - n_nextn
    linear = sorted(i for i, ns in layer_tensors.items() if i < trunk and any(".ssm_" in x for x in ns))
    full = sorted(i for i, ns in layer_tensors.items() if i < trunk and i not in linear
                  and any(re.search(r"\.attn_(q|k|v|qkv)\.", x) for x in ns))
    return n_layers, trunk, full, linear


def _experts(arch: str, num) -> tuple[int, int]:  # noqa: ANN001 - num: the arch-prefixed int getter
    """(experts, experts used per token), bounded by :data:`limits.MAX_EXPERTS` and each other."""
    n_experts = num("expert_count", limit=limits.MAX_EXPERTS)
    n_used = num("expert_used_count", limit=limits.MAX_EXPERTS)
    if n_experts and n_used > n_experts:
        raise ModelError(f"the model's metadata {arch}.expert_used_count is {n_used:,}, more than its "
                         f"{n_experts:,} experts ({arch}.expert_count)", limits.CRAFTED_FIX)
    return n_experts, n_used


def _n_tokens(md: dict[str, Any]) -> int:
    """The vocabulary size from ``tokenizer.ggml.tokens`` (for a file without ``token_embd.weight``)."""
    tokens = md.get("tokenizer.ggml.tokens")
    if tokens is None:
        return 0
    if not isinstance(tokens, list):
        raise ModelError("the model's metadata tokenizer.ggml.tokens is not an array of strings", limits.CRAFTED_FIX)
    return len(tokens)


def facts_from_plan(plan: ModelPlan, *, path: str = "", file_bytes: int | None = None) -> ModelFacts:
    """Derive :class:`ModelFacts` from a plan (a file's header or a synthetic plan)."""
    md = plan.metadata()
    arch = plan.arch
    get = lambda k, d=None: md.get(f"{arch}.{k}", d)  # noqa: E731
    num = lambda k, d=0, limit=limits.MAX_COUNT: _as_int(get(k), d, key=f"{arch}.{k}", limit=limit)  # noqa: E731
    names = [t.name for t in plan.tensors]
    n_layers, trunk, full, linear = _layers(names, arch, num)

    swa, n_swa = _swa_layers(arch, md, get, n_layers)
    swa = [i for i in swa if i in full]
    full = [i for i in full if i not in set(swa)]

    n_experts, n_used = _experts(arch, num)
    n_embd = num("embedding_length")
    n_head = num("attention.head_count")
    n_head_kv = num("attention.head_count_kv", n_head)
    head_k = num("attention.key_length", n_embd // n_head if n_head else 0)
    head_v = num("attention.value_length", head_k)
    embd = next((t for t in plan.tensors if t.name == "token_embd.weight"), None)
    vocab = embd.shape[1] if embd and len(embd.shape) > 1 else _n_tokens(md)

    by_group, by_type, types, (params_total, params_expert, bytes_expert) = _tensor_sums(plan, set(linear))
    frac = (n_used / n_experts) if n_experts else 1.0
    tied = embd is not None and "output.weight" not in names
    # tied: the embedding is the output projection, read whole for every token (+ the input row)
    embd_params = embd.n_elements if embd and not tied else 0
    embd_bytes = embd.nbytes if embd and not tied else 0
    row = (embd.nbytes // vocab) if (embd and vocab) else 0
    nonexp_params = params_total - params_expert
    nonexp_bytes = sum(by_type.values()) - bytes_expert
    params_active = nonexp_params - embd_params + round(params_expert * frac)
    weight_bytes = nonexp_bytes - embd_bytes + row + round(bytes_expert * frac)

    kv_per_ctx = len(full) * (head_k + head_v) * n_head_kv * 2
    head_k_swa = num("attention.key_length_swa", head_k)
    head_v_swa = num("attention.value_length_swa", head_v)
    kv_swa = len(swa) * (head_k_swa + head_v_swa) * n_head_kv * 2
    recurrent = _recurrent_bytes(len(linear), num) if linear else 0

    name = md.get("general.name", "")
    if isinstance(name, bytes):
        name = name.decode("utf-8", "replace")
    estimated = file_bytes is None
    if file_bytes is None:
        file_bytes = header_nbytes(plan) + plan.data_bytes
    return ModelFacts(
        path=path, arch=arch, name=str(name), n_layers=n_layers, full_attention_layers=full,
        linear_attention_layers=linear, n_experts=n_experts, n_experts_used=n_used,
        has_shared_expert=any("_shexp" in n for n in names), vocab_size=vocab,
        n_ctx_train=num("context_length", limit=limits.MAX_CONTEXT), n_embd=n_embd, n_head=n_head, n_head_kv=n_head_kv,
        head_dim=head_k, file_bytes=file_bytes, tensor_count=len(plan.tensors), params_total=params_total,
        params_active=params_active, bytes_by_group=dict(sorted(by_group.items(), key=lambda kv: -kv[1])),
        types=types, bytes_by_type=by_type, weight_bytes_per_token=weight_bytes,
        kv_bytes_per_token_ctx=kv_per_ctx, recurrent_state_bytes=recurrent,
        ncmoe_range=(0, trunk if n_experts else 0),
        synthetic=bool(md.get("llamaforge.synthetic", False)), file_bytes_estimated=estimated,
        metadata=_scalar_meta(plan.kv), tied_embeddings=tied, sliding_window=n_swa if swa else 0, swa_layers=swa,
        kv_bytes_per_token_swa=kv_swa, bytes_per_token_ctx0=weight_bytes + recurrent,
        bpw=round(8 * sum(by_type.values()) / max(1, params_total), 4))


def _swa_layers(arch: str, md: dict[str, Any], get: Any, n_layers: int) -> tuple[list[int], int]:
    """(sliding-window layers, window) from the metadata, as llama.cpp decides them."""
    n_swa = _as_int(get("attention.sliding_window"), 0, key=f"{arch}.attention.sliding_window",
                    limit=limits.MAX_CONTEXT)
    if n_swa <= 0:
        return [], 0
    pattern = get("attention.sliding_window_pattern")
    if isinstance(pattern, list) and pattern:
        return [i for i, v in enumerate(pattern[:n_layers]) if v], n_swa
    if pattern is not None and not isinstance(pattern, list):
        n = _as_int(pattern, key=f"{arch}.attention.sliding_window_pattern")
        dense_first = SWA_DEFAULT_PATTERN.get(arch, (0, False))[1]
    elif arch in SWA_DEFAULT_PATTERN:
        n, dense_first = SWA_DEFAULT_PATTERN[arch]
    else:
        return [], n_swa  # a window without a known pattern: every layer counted as full attention
    if n == 0:
        return list(range(n_layers)), n_swa
    if dense_first:
        return [i for i in range(n_layers) if i % n != 0], n_swa
    return [i for i in range(n_layers) if i % n < n - 1], n_swa


def model_facts(path: Path) -> ModelFacts:
    """Facts of a GGUF file on disk (header only)."""
    path = Path(path)
    plan = read_plan(path, with_arrays=False)
    return facts_from_plan(plan, path=str(path), file_bytes=os.path.getsize(path))
