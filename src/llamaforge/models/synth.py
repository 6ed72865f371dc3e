"""Write synthetic, shape-faithful GGUF models at disk speed.

``synth(preset, out, mix)`` writes a model with the real tensor names, shapes and quant types of a
preset (:mod:`.presets`) and random weights; ``twin(src, out)`` does the same for the header of any
GGUF file. Weights are random but valid (finite scales, negative ``ssm_a``, random router, norms
near 1), and deterministic for a seed.

How it stays fast and small in memory: gguf-py's ``GGUFWriter`` writes the header, metadata and
tensor infos; the tensor data is then streamed by :func:`_stream`, which tiles one ~8 MiB random
template per type, block-aligned, starting at a per-tensor offset. Peak RSS stays ~100 MB whatever
the model size. The file is written under a temporary name and renamed at the end; on any error
(disk full included) the partial file is removed and a :class:`ModelError` raised.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from gguf import GGMLQuantizationType as Q
from gguf import GGUFWriter

from ..console import byte_progress
from ..errors import ModelError
from . import quants
from .gguf_info import header_nbytes, read_plan
from .plan import ModelPlan, TensorPlan, plan_synthetic
from .presets import get_mix, get_preset, parse_type_overrides
from .vocab import tokenizer_kv, vocab_path

SMALL_TENSOR = 4 << 20       # tensors up to this size get their own random bytes
TEMPLATE_BYTES = 8 << 20     # larger ones tile a template of this size


@dataclass
class WriteResult:
    path: Path
    file_bytes: int
    seconds: float
    tensor_count: int
    params: int

    @property
    def gib_per_s(self) -> float:
        return self.file_bytes / (1 << 30) / max(self.seconds, 1e-9)


def _write_chunk(fh, data: memoryview | bytes) -> None:  # noqa: ANN001 - a binary file object
    """One write of tensor data (a seam for tests: monkeypatch to simulate a full disk)."""
    fh.write(data)


def _tensor_rng(seed: int, name: str) -> np.random.Generator:
    return np.random.default_rng([seed, zlib.crc32(name.encode())])


def _special_values(t: TensorPlan, rng: np.random.Generator) -> np.ndarray | None:
    """Values for tensors whose meaning constrains them (F32 only)."""
    n = t.n_elements
    if t.name.endswith("ssm_a"):
        return -rng.uniform(1.0, 16.0, n).astype(np.float32)        # a decay: must be negative
    if "ssm_dt" in t.name:
        return rng.normal(0.0, 0.5, n).astype(np.float32)
    if t.name.endswith("norm.weight"):
        return (1.0 + rng.normal(0.0, 0.02, n)).astype(np.float32)
    if "ffn_gate_inp_shexp" in t.name:
        return rng.normal(0.0, 0.1, n).astype(np.float32)
    return None


def _small_tensor_bytes(t: TensorPlan, seed: int) -> bytes:
    rng = _tensor_rng(seed, t.name)
    if t.type == Q.F32:
        special = _special_values(t, rng)
        if special is not None:
            return special.tobytes()
    elems, _ = quants.block_size(t.type)
    return quants.random_blocks(rng, t.type, t.n_elements // elems)


class _Templates:
    """One doubled template per type, so any block-aligned window of TEMPLATE_BYTES is contiguous."""

    def __init__(self, seed: int) -> None:
        self.seed = seed
        self._cache: dict[Q, memoryview] = {}

    def get(self, t: Q) -> memoryview:
        if t not in self._cache:
            one = quants.template(self.seed, t, TEMPLATE_BYTES)
            self._cache[t] = memoryview(one + one)
        return self._cache[t]


def _stream(fh, t: TensorPlan, seed: int, templates: _Templates, advance: Callable[[int], None]) -> None:  # noqa: ANN001
    n = t.nbytes
    if n <= SMALL_TENSOR:
        _write_chunk(fh, _small_tensor_bytes(t, seed))
        advance(n)
        return
    tmpl = templates.get(t.type)
    size = len(tmpl) // 2
    _, block = quants.block_size(t.type)
    pos = (zlib.crc32(t.name.encode()) % (size // block)) * block
    left = n
    while left:
        k = min(left, size)
        _write_chunk(fh, tmpl[pos:pos + k])
        pos = (pos + k) % size
        left -= k
        advance(k)


def _pad(fh, align: int) -> None:  # noqa: ANN001
    over = fh.tell() % align
    if over:
        _write_chunk(fh, bytes(align - over))


def _progress(total: int | None, label: str, enabled: bool):  # noqa: ANN202
    return byte_progress(label, enabled)


def write_plan(plan: ModelPlan, out: Path, *, seed: int = 0, progress: bool = True, overwrite: bool = False,
               fsync: bool = True) -> WriteResult:
    """Write ``plan`` with random valid data to ``out`` (atomically). ModelError on any failure."""
    out = Path(out)
    if out.exists() and not overwrite:
        raise ModelError(f"{out} already exists", "pass --force to overwrite it or choose another --out")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ModelError(f"cannot create the folder {out.parent}: {e.strerror or e}",
                         "choose another --out, in a folder you can write") from None
    total = header_nbytes(plan) + plan.data_bytes
    free = shutil.disk_usage(out.parent).free
    if free < total:
        raise ModelError(f"not enough disk space for {out}: needs {total / 2**30:.2f} GiB, {free / 2**30:.2f} GiB free",
                         "free space or write to another folder (--out)")
    tmp = out.with_name(f".{out.name}.{os.getpid()}.partial")
    writer = GGUFWriter(tmp, plan.arch)
    writer.data_alignment = plan.alignment
    t0 = time.monotonic()
    try:
        for e in plan.kv:
            if e.key != "general.architecture":
                writer.add_key_value(e.key, e.value, e.vtype, e.sub_type)
        for t in plan.tensors:
            writer.add_tensor_info(t.name, tuple(reversed(t.shape)), np.dtype(np.float32), t.nbytes, raw_dtype=t.type)
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_ti_data_to_file()
        assert writer.fout is not None
        fh = writer.fout[0]
        _pad(fh, plan.alignment)
        templates = _Templates(seed)
        with _progress(plan.data_bytes, f"writing {out.name}", progress) as bar:
            task = bar.add_task("write", total=plan.data_bytes) if bar else None
            advance = (lambda k: bar.advance(task, k)) if bar else (lambda k: None)
            for t in plan.tensors:
                _stream(fh, t, seed, templates, advance)
                _pad(fh, plan.alignment)
        fh.flush()
        if fsync:
            os.fsync(fh.fileno())
        writer.close()
        os.replace(tmp, out)
    except BaseException as e:
        with contextlib.suppress(Exception):
            writer.close()
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        if isinstance(e, OSError):
            if e.errno in (errno.ENOSPC, errno.EDQUOT):
                raise ModelError(f"disk full while writing {out}; the partial file was removed",
                                 "free space or write to another folder (--out)") from e
            raise ModelError(f"writing {out} failed: {e.strerror or e}; the partial file was removed",
                             "check the folder is writable and has space") from e
        if isinstance(e, ValueError):
            raise ModelError(f"cannot write {out}: {e}", "check the model metadata") from e
        raise
    return WriteResult(out, out.stat().st_size, time.monotonic() - t0, len(plan.tensors),
                       sum(t.n_elements for t in plan.tensors))


# ------------------------------------------------------------------------------------ front ends


def synth_plan(preset: str, mix: str | None = None, *, overrides: dict[str, int] | None = None,
               type_overrides: list[str] | tuple[str, ...] | str | None = None, seed: int = 0,
               vocab_dir: Path | None = None) -> ModelPlan:
    """The plan of a synthetic model (no tokenizer yet: see :func:`synth`)."""
    shape = get_preset(preset, overrides)
    m = get_mix(mix or "q4_k_m")
    rules = parse_type_overrides(type_overrides)
    vp = (Path(vocab_dir) / shape.vocab_file) if vocab_dir else None
    return plan_synthetic(shape, m, type_overrides=rules, seed=seed, vocab_path=vp)


def with_tokenizer(plan: ModelPlan) -> ModelPlan:
    """Add the tokenizer metadata (padded to the plan's vocab) from ``plan.vocab_path``."""
    if plan.shape is None:
        return plan
    vp = vocab_path(plan.vocab_path.parent if plan.vocab_path else None, plan.shape.vocab_file)
    plan.kv = [e for e in plan.kv if not e.key.startswith("tokenizer.")]
    plan.kv += tokenizer_kv(vp, plan.shape.vocab_size)
    return plan


def synth(preset: str, out: Path, mix: str | None = None, *, overrides: dict[str, int] | None = None,
          type_overrides: list[str] | tuple[str, ...] | str | None = None, seed: int = 0,
          vocab_dir: Path | None = None, progress: bool = True, overwrite: bool = False) -> WriteResult:
    """Write the synthetic model ``preset`` (quant ``mix``) to ``out``."""
    if vocab_dir is None:
        raise ModelError("no llama.cpp models/ folder to take the tokenizer from",
                         "pass --vocab-dir LLAMA_CPP/models")
    plan = with_tokenizer(synth_plan(preset, mix, overrides=overrides, type_overrides=type_overrides,
                                     seed=seed, vocab_dir=vocab_dir))
    return write_plan(plan, out, seed=seed, progress=progress, overwrite=overwrite)


def twin(src: Path, out: Path, *, seed: int = 0, progress: bool = True, overwrite: bool = False) -> WriteResult:
    """Write a file with ``src``'s metadata, tensor names, shapes and types, and random data."""
    src, out = Path(src), Path(out)
    if src.resolve() == out.resolve():
        raise ModelError("twin: the output would overwrite its source", "choose another output path")
    plan = read_plan(src)
    unknown = sorted({quants.type_name(t.type) for t in plan.tensors if not quants.is_known_layout(t.type)})
    if unknown:
        from ..console import notice
        notice(f"twin: no block layout known for {', '.join(unknown)}; those tensors are written as zeros")
    return write_plan(plan, out, seed=seed, progress=progress, overwrite=overwrite)
