"""GGML tensor types: names, block sizes, and random-but-valid block templates.

A synthetic model only needs the right shapes and types; the weight values may be random, with
one exception: every scale field (fp16 ``d``/``dmin``, MXFP4's E8M0 exponent) must be finite and
small, or llama.cpp computes NaNs. :func:`template` builds a block-aligned buffer of random blocks
with those fields fixed; the writer tiles it over a tensor's bytes, which runs at disk speed.

Types whose block layout is not described here get all-zero blocks (always valid: scale 0).
"""

from __future__ import annotations

import numpy as np
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

from ..errors import ModelError

Q = GGMLQuantizationType

#: fp16 scale fields per block: (byte offset, typical magnitude) — weights come out ~N(0, 0.02).
_F16_SCALES: dict[Q, tuple[tuple[int, float], ...]] = {
    Q.Q4_0: ((0, 4e-3),),
    Q.Q4_1: ((0, 2.5e-3), (2, 1e-2)),
    Q.Q5_0: ((0, 2e-3),),
    Q.Q5_1: ((0, 1.2e-3), (2, 1e-2)),
    Q.Q8_0: ((0, 2.7e-4),),
    Q.Q8_1: ((0, 2.7e-4), (2, 1e-2)),
    Q.Q2_K: ((80, 1e-2), (82, 1e-3)),
    Q.Q3_K: ((108, 1e-3),),
    Q.Q4_K: ((0, 1.4e-4), (2, 1e-4)),
    Q.Q5_K: ((0, 7e-5), (2, 1e-4)),
    Q.Q6_K: ((208, 1.5e-5),),
    Q.IQ2_XXS: ((0, 1e-3),),
    Q.IQ2_XS: ((0, 1e-3),),
    Q.IQ2_S: ((0, 1e-3),),
    Q.IQ3_XXS: ((0, 1e-3),),
    Q.IQ3_S: ((0, 1e-3),),
    Q.IQ1_S: ((0, 1e-3),),
    Q.IQ4_NL: ((0, 3e-4),),
    Q.IQ4_XS: ((0, 3e-4),),
    Q.TQ1_0: ((52, 2e-2),),
    Q.TQ2_0: ((64, 2e-2),),
}
#: E8M0 exponent bytes per block (MXFP4): scale 2^(e-127); 0xFF would be NaN.
_E8M0_SCALES: dict[Q, tuple[int, ...]] = {Q.MXFP4: (0,)}
_FLOAT_TYPES = {Q.F32: np.float32, Q.F16: np.float16, Q.F64: np.float64}
_INT_TYPES = {Q.I8: np.int8, Q.I16: np.int16, Q.I32: np.int32, Q.I64: np.int64}

#: types a user may ask for (mixes, --type-override); the others appear only in twins.
USER_TYPES = ("f32", "f16", "bf16", "q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "q2_k", "q3_k", "q4_k",
              "q5_k", "q6_k", "iq4_nl", "iq4_xs", "mxfp4")


def parse_type(name: str) -> Q:
    """``'q4_k'``/``'Q4_K'`` -> ``GGMLQuantizationType.Q4_K``; ModelError for anything unknown."""
    key = name.strip().lower()
    if key not in USER_TYPES:
        raise ModelError(f"unknown tensor type {name!r}", f"use one of: {', '.join(USER_TYPES)}")
    return Q[key.upper()]


def type_name(t: Q | int) -> str:
    return Q(t).name.lower()


def block_size(t: Q) -> tuple[int, int]:
    """(elements per block, bytes per block)."""
    return GGML_QUANT_SIZES[Q(t)]


def fits(t: Q, row_len: int) -> bool:
    """True when a row of ``row_len`` elements is a whole number of ``t`` blocks."""
    return row_len % block_size(t)[0] == 0


def nbytes(t: Q, shape: tuple[int, ...]) -> int:
    """Bytes of a tensor of ``shape`` (ggml order, row length first) stored as ``t``."""
    elems, size = block_size(t)
    n = 1
    for d in shape:
        n *= int(d)
    return n // elems * size


def is_known_layout(t: Q) -> bool:
    t = Q(t)
    return t in _F16_SCALES or t in _E8M0_SCALES or t in _FLOAT_TYPES or t == Q.BF16 or t in _INT_TYPES


def random_values(rng: np.random.Generator, t: Q, count: int, *, std: float = 0.02) -> bytes:
    """``count`` elements of a float/int type ``t`` as bytes (normal(0, std) for floats)."""
    t = Q(t)
    if t in _FLOAT_TYPES:
        return rng.normal(0.0, std, count).astype(_FLOAT_TYPES[t]).tobytes()
    if t == Q.BF16:
        f = rng.normal(0.0, std, count).astype(np.float32)
        return (f.view(np.uint32) >> 16).astype(np.uint16).tobytes()
    if t in _INT_TYPES:
        return rng.integers(-8, 8, count).astype(_INT_TYPES[t]).tobytes()
    raise ModelError(f"{type_name(t)} is not a float or integer type", "use random_blocks for quantized types")


def random_blocks(rng: np.random.Generator, t: Q, nblocks: int) -> bytes:
    """``nblocks`` random blocks of quantized type ``t`` whose scale fields are finite and small."""
    t = Q(t)
    elems, size = block_size(t)
    if t in _FLOAT_TYPES or t == Q.BF16 or t in _INT_TYPES:
        return random_values(rng, t, nblocks * elems)
    if not is_known_layout(t):
        return bytes(nblocks * size)  # zero blocks: valid for every type
    buf = rng.integers(0, 256, size=(nblocks, size), dtype=np.uint8)
    for off, mag in _F16_SCALES.get(t, ()):
        d = (rng.uniform(0.5, 1.5, nblocks) * mag).astype(np.float16)
        buf[:, off:off + 2] = d.view(np.uint8).reshape(nblocks, 2)
    for off in _E8M0_SCALES.get(t, ()):
        buf[:, off] = rng.integers(117, 122, nblocks, dtype=np.uint8)
    return buf.tobytes()


def template(seed: int, t: Q, target_bytes: int = 8 << 20) -> bytes:
    """A deterministic, block-aligned buffer of about ``target_bytes`` random valid blocks."""
    _, size = block_size(t)
    nblocks = max(1, target_bytes // size)
    rng = np.random.default_rng([seed, int(Q(t))])
    return random_blocks(rng, t, nblocks)


def scales_finite(t: Q, data: bytes) -> bool:
    """Check that every fp16 scale field in ``data`` (whole blocks of ``t``) is finite."""
    t = Q(t)
    _, size = block_size(t)
    arr = np.frombuffer(data, dtype=np.uint8)
    if t == Q.F16:
        return bool(np.isfinite(arr.view(np.float16)).all())
    if t == Q.F32:
        return bool(np.isfinite(arr.view(np.float32)).all())
    blocks = arr.reshape(-1, size)
    for off, _ in _F16_SCALES.get(t, ()):
        d = np.ascontiguousarray(blocks[:, off:off + 2]).view(np.float16)
        if not np.isfinite(d).all():
            return False
    return all((blocks[:, off] != 0xFF).all() for off in _E8M0_SCALES.get(t, ()))
