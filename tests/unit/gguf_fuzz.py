"""The GGUF fuzz run of test_gguf_fuzz.py, in a process of its own (so its peak memory can be measured).

Usage: ``python gguf_fuzz.py EXAMPLES WORKDIR`` — prints one JSON line of counts and the peak RSS,
or the falsifying example and exits 1.

Every example is a small GGUF: one of a few valid seeds written with the gguf package (a MoE model with a
tokenizer, a gemma3 with a sliding window, a hybrid with SSM and next-token-prediction layers), or one
written by ``GGUFWriter`` from generated metadata and tensor names (wrong types, huge counts, absurd layer
numbers); then mutated: huge or odd values written over its count, length, type, dimension and offset
fields, flipped bytes, truncation. Each file goes through the reader (as ``model.info``, ``model.twin`` and
the bench's UTF-8 guard read it) and ``model.info`` (the facts, their JSON and the table). Allowed outcomes: success, or a
:class:`~llamaforge.errors.LlamaforgeError` whose message is one line with a fix. Anything else — an
OverflowError, a MemoryError, a KeyError, a message with a line break — fails the run.
"""

from __future__ import annotations

import json
import logging
import os
import resource
import shutil
import struct
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import gguf
import numpy as np
from gguf import GGUFValueType as VT
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from llamaforge.commands.model import print_facts
from llamaforge.console import console
from llamaforge.errors import LlamaforgeError
from llamaforge.models import gguf_info, utf8
from llamaforge.models.gguf_read import parse_header

_WIDTH = {VT.UINT8: 1, VT.INT8: 1, VT.BOOL: 1, VT.UINT16: 2, VT.INT16: 2, VT.UINT32: 4, VT.INT32: 4,
          VT.FLOAT32: 4, VT.UINT64: 8, VT.INT64: 8, VT.FLOAT64: 8}
#: values that break naive readers: 0/1, off-by-one around the bounds, sign bits, all ones
ODD = {1: [0, 1, 7, 8, 9, 12, 13, 0x7F, 0x80, 0xFF],
       2: [0, 1, 0x7FFF, 0x8000, 0xFFFF],
       4: [0, 1, 2, 3, 4, 5, 8, 9, 12, 13, 41, 64, 4095, 4096, 4097, 2**24 + 1, 2**31 - 1, 2**31, 2**32 - 1],
       8: [0, 1, 2, 3, 4, 5, 64, 4096, 4097, 2**17 + 1, 2**22 + 1, 2**31 - 1, 2**31, 2**32 - 1, 2**32, 2**40,
           2**62, 2**63 - 1, 2**63, 2**64 - 1]}


@dataclass
class Seed:
    data: bytes
    fields: list[tuple[int, int]]      # (offset, width) of every count, length, type, dimension, offset, value


def header_fields(data: bytes) -> list[tuple[int, int]]:
    """The (offset, width) of each structural field of a valid GGUF header (the mutation targets)."""
    pos, out = 4, [(4, 4), (8, 8), (16, 8)]
    n_tensors, n_kv = struct.unpack_from("<QQ", data, 8)
    pos = 24

    def string() -> None:
        nonlocal pos
        out.append((pos, 8))
        pos += 8 + struct.unpack_from("<Q", data, pos)[0]

    for _ in range(n_kv):
        string()
        out.append((pos, 4))
        vt = VT(struct.unpack_from("<I", data, pos)[0])
        pos += 4
        if vt == VT.STRING:
            string()
        elif vt == VT.ARRAY:
            sub = VT(struct.unpack_from("<I", data, pos)[0])
            n = struct.unpack_from("<Q", data, pos + 4)[0]
            out += [(pos, 4), (pos + 4, 8)]
            pos += 12
            for _ in range(n):
                if sub == VT.STRING:
                    string()
                else:
                    out.append((pos, _WIDTH[sub]))
                    pos += _WIDTH[sub]
        else:
            out.append((pos, _WIDTH[vt]))
            pos += _WIDTH[vt]
    for _ in range(n_tensors):
        string()
        nd = struct.unpack_from("<I", data, pos)[0]
        out += [(pos, 4)] + [(pos + 4 + 8 * i, 8) for i in range(nd)]
        pos += 4 + 8 * nd
        out += [(pos, 4), (pos + 4, 8)]
        pos += 12
    return out


def _write(path: Path, arch: str, kv: list[tuple[str, object, VT, VT | None]],
           tensors: list[tuple[str, tuple[int, ...]]]) -> bytes:
    w = gguf.GGUFWriter(str(path), arch)
    for key, val, vt, sub in kv:
        w.add_key_value(key, val, vt, sub)
    for name, shape in tensors:
        w.add_tensor(name, np.zeros(shape, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path.read_bytes()


def seeds(work: Path) -> list[Seed]:
    """Three small valid models, each ~1-2 KB."""
    moe = _write(work / "moe.gguf", "qwen3moe", [
        ("general.name", "fuzz moe", VT.STRING, None), ("qwen3moe.block_count", 2, VT.UINT32, None),
        ("qwen3moe.context_length", 4096, VT.UINT32, None), ("qwen3moe.embedding_length", 8, VT.UINT32, None),
        ("qwen3moe.attention.head_count", 2, VT.UINT32, None), ("qwen3moe.expert_count", 4, VT.UINT32, None),
        ("qwen3moe.expert_used_count", 2, VT.UINT32, None),
        ("tokenizer.ggml.tokens", ["a", "bb", "ccc", "<0xFF>"], VT.ARRAY, VT.STRING),
        ("tokenizer.ggml.token_type", [1, 1, 3, 6], VT.ARRAY, VT.INT32),
        ("tokenizer.ggml.scores", [0.0, -1.0, -2.0, -3.0], VT.ARRAY, VT.FLOAT32)],
        [("token_embd.weight", (4, 8)), ("blk.0.attn_q.weight", (8, 8)), ("blk.1.attn_k.weight", (4, 8)),
         ("blk.1.ffn_gate_exps.weight", (4, 2, 8)), ("output.weight", (4, 8))])
    gemma = _write(work / "gemma.gguf", "gemma3", [
        ("gemma3.block_count", 3, VT.UINT32, None), ("gemma3.attention.sliding_window", 16, VT.UINT32, None),
        ("gemma3.attention.sliding_window_pattern", [True, True, False], VT.ARRAY, VT.BOOL),
        ("gemma3.embedding_length", 8, VT.UINT32, None), ("gemma3.attention.head_count", 2, VT.UINT32, None),
        ("gemma3.context_length", 8192, VT.UINT64, None)],
        [("token_embd.weight", (4, 8)), ("blk.0.attn_q.weight", (8, 8)), ("blk.2.attn_v.weight", (8, 8))])
    hybrid = _write(work / "hybrid.gguf", "qwen35moe", [
        ("qwen35moe.block_count", 3, VT.UINT32, None), ("qwen35moe.nextn_predict_layers", 1, VT.UINT32, None),
        ("qwen35moe.expert_count", 2, VT.UINT32, None), ("qwen35moe.expert_used_count", 1, VT.UINT32, None),
        ("qwen35moe.ssm.state_size", 4, VT.UINT32, None), ("qwen35moe.ssm.conv_kernel", 4, VT.UINT32, None),
        ("qwen35moe.rope.dimension_sections", [1, 1, 0, 0], VT.ARRAY, VT.INT32),
        ("general.alignment", 64, VT.UINT32, None)],
        [("blk.0.ssm_a", (4,)), ("blk.1.attn_q.weight", (8, 8)), ("blk.2.attn_q.weight", (8, 8))])
    return [Seed(d, header_fields(d)) for d in (moe, gemma, hybrid)]


# ------------------------------------------------------------------------------------------ strategies

_ARCHS = ["qwen3moe", "gemma3", "qwen35moe", "llama"]
_SUFFIXES = ["block_count", "expert_count", "expert_used_count", "nextn_predict_layers", "context_length",
             "embedding_length", "attention.head_count", "attention.head_count_kv", "attention.key_length",
             "attention.sliding_window", "attention.sliding_window_pattern", "ssm.state_size", "ssm.inner_size"]
_GLOBAL_KEYS = ["general.architecture", "general.name", "general.alignment", "tokenizer.ggml.tokens",
                "tokenizer.ggml.token_type", "tokenizer.ggml.model"]
_INT_TYPES = {VT.UINT8: (0, 255), VT.INT8: (-128, 127), VT.UINT16: (0, 65535), VT.INT16: (-32768, 32767),
              VT.UINT32: (0, 2**32 - 1), VT.INT32: (-2**31, 2**31 - 1), VT.UINT64: (0, 2**64 - 1),
              VT.INT64: (-2**63, 2**63 - 1)}


def _int_of(vt: VT) -> st.SearchStrategy[int]:
    lo, hi = _INT_TYPES[vt]
    odd = [v for v in (0, 1, 2, 3, 4095, 4096, 4097, 2**24 + 1, 2**31 - 1, 2**32 - 1, 2**63, 2**64 - 1, -1)
           if lo <= v <= hi]
    return st.one_of(st.sampled_from(odd), st.integers(lo, hi))


def _tagged(values: st.SearchStrategy, vt: VT, sub: VT | None = None) -> st.SearchStrategy:
    return values.map(lambda v: (v, vt, sub))


_ELEMENT = {VT.UINT32: _int_of(VT.UINT32), VT.INT32: _int_of(VT.INT32), VT.UINT64: _int_of(VT.UINT64),
            VT.BOOL: st.booleans(), VT.STRING: st.text(max_size=6)}
#: a metadata value of any type — the right one for its key, or a wrong one (a string, a float, an array);
#: built once (building strategies per draw costs more than the reading being tested)
VALUES = st.one_of(
    st.one_of(*[_tagged(_int_of(vt), vt) for vt in _INT_TYPES]),
    _tagged(st.text(max_size=12), VT.STRING), _tagged(st.floats(width=32), VT.FLOAT32),
    _tagged(st.booleans(), VT.BOOL),
    st.one_of(*[_tagged(st.lists(e, min_size=1, max_size=8), VT.ARRAY, sub) for sub, e in _ELEMENT.items()]))
_KEYS = st.lists(st.sampled_from([f"{{arch}}.{k}" for k in _SUFFIXES] + _GLOBAL_KEYS), max_size=6, unique=True)


_LAYER = st.one_of(st.integers(0, 5), st.sampled_from([4095, 4096, 2**31, 10**20]), st.integers(0, 10**30))
_TENSOR = st.builds(lambda i, part: f"blk.{i}.{part}", _LAYER,
                    st.sampled_from(["attn_q.weight", "attn_k.weight", "ssm_a", "ffn_gate_exps.weight"]))
_SHAPE = st.lists(st.integers(1, 8), min_size=1, max_size=3).map(tuple)


@dataclass
class Pool:
    """The seeds and the work folder (module state, so a failure report does not print them)."""

    seeds: list[Seed]
    work: Path


POOL: Pool


_NAMES = st.lists(st.one_of(_TENSOR, st.sampled_from(["token_embd.weight", "output.weight"])), max_size=4,
                  unique=True)


@st.composite
def generated(draw: st.DrawFn) -> bytes:
    """A file written by GGUFWriter from generated metadata and tensors (a generated general.architecture,
    an int or an array, replaces the string GGUFWriter starts with)."""
    arch = draw(st.sampled_from(_ARCHS))
    kv = [(k.format(arch=arch), *draw(VALUES)) for k in draw(_KEYS)]
    tensors = [(n, draw(_SHAPE)) for n in draw(_NAMES)]
    return _write(POOL.work / "gen.gguf", arch, kv, tensors)


_ODD_VALUE = {w: st.one_of(st.sampled_from(v), st.integers(0, 2 ** (8 * w) - 1)) for w, v in ODD.items()}
_OP = st.sampled_from(["field", "field", "field", "flip", "truncate"])
_BYTE = st.integers(0, 255)


@st.composite
def files(draw: st.DrawFn) -> bytes:
    """A seed or a generated file, then up to 4 mutations (strategies built once: building them per draw
    costs more than the reading being tested)."""
    if draw(st.integers(0, 3)) == 0:
        base = draw(generated())
        seed = Seed(base, header_fields(base))
    else:
        seed = POOL.seeds[draw(st.integers(0, len(POOL.seeds) - 1))]
    data = bytearray(seed.data)
    for _ in range(draw(st.integers(0, 4))):
        op = draw(_OP)
        if op == "field" and seed.fields:
            off, width = seed.fields[draw(st.integers(0, len(seed.fields) - 1))]
            data[off:off + width] = draw(_ODD_VALUE[width]).to_bytes(width, "little")
        elif op == "flip" and data:
            data[draw(st.integers(0, len(data) - 1))] = draw(_BYTE)
        elif op == "truncate":
            del data[draw(st.integers(0, len(data))):]
    return bytes(data)


# ---------------------------------------------------------------------------------------------- checks

@dataclass
class Tally:
    files: int = 0
    accepted: int = 0
    rejected: int = 0


def _refused(e: LlamaforgeError) -> None:
    text = str(e)
    assert e.fix, f"no fix in {text!r}"
    assert "\n" not in text and "\r" not in text, f"not one line: {text!r}"


def check(path: Path, data: bytes, tally: Tally) -> None:
    """The reader (as model.info, model.twin and bench read), and model.info on one file: success or one line with a fix, nothing else."""
    path.write_bytes(data)
    tally.files += 1
    for read in (lambda: parse_header(path, keep_arrays=False), lambda: gguf_info.read_plan(path),  # twin's read
                 lambda: utf8.incomplete_utf8_tokens(path)):                                       # bench's read
        try:
            read()
        except LlamaforgeError as e:
            _refused(e)
    utf8._cached.cache_clear()
    try:
        facts = gguf_info.model_facts(path)
    except LlamaforgeError as e:
        _refused(e)
        tally.rejected += 1
        return
    json.dumps(facts.to_json())
    with console.capture():
        print_facts(facts, 4096)
    tally.accepted += 1


def main(examples: int, work: Path) -> int:
    logging.getLogger("gguf").setLevel(logging.ERROR)   # "Duplicated key name": wanted here
    shm = Path("/dev/shm")
    if shm.is_dir() and os.access(shm, os.W_OK):   # thousands of small files: a disk-backed /tmp is slow
        work = Path(tempfile.mkdtemp(prefix="lf-gguf-fuzz-", dir=shm))
    try:
        return _run(examples, work)
    finally:
        if work.parent == shm:
            shutil.rmtree(work, ignore_errors=True)


def _peak_rss_mib() -> float:
    """This process's own peak resident memory: ``VmHWM`` belongs to the address space made at exec.
    (``ru_maxrss`` may carry a forked parent's size over ``execve``.) The caller runs a short warm-up
    first, so that hypothesis's first-use Unicode table is not counted as the reader's memory.)"""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _run(examples: int, work: Path) -> int:
    global POOL
    POOL = Pool(seeds(work), work)
    tally = Tally()
    target = work / "fuzz.gguf"

    @settings(max_examples=examples, deadline=None, database=None, derandomize=True, print_blob=True,
              suppress_health_check=list(HealthCheck))
    @given(files())
    def run(data: bytes) -> None:
        check(target, data, tally)

    run()
    peak_mb = _peak_rss_mib()
    print(json.dumps({"files": tally.files, "accepted": tally.accepted, "rejected": tally.rejected,
                      "peak_rss_mb": round(peak_mb, 1)}))
    return 0


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1]), Path(sys.argv[2])))
