"""A fast GGUF header parser (metadata + tensor infos), for files of any size.

gguf-py's ``GGUFReader`` builds numpy views for every item of every metadata array, which takes
~10 s for a 250k-token tokenizer on a small machine; this reads the same header in well under a
second by decoding numeric arrays with ``numpy.frombuffer`` and walking string arrays directly.
Format: https://github.com/ggml-org/ggml/blob/master/docs/gguf.md (little-endian, version 2/3).
"""

from __future__ import annotations

import mmap
import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from gguf import GGUFValueType as VT

from ..errors import ModelError
from . import limits

_SCALAR = {VT.UINT8: ("<B", 1), VT.INT8: ("<b", 1), VT.UINT16: ("<H", 2), VT.INT16: ("<h", 2),
           VT.UINT32: ("<I", 4), VT.INT32: ("<i", 4), VT.FLOAT32: ("<f", 4), VT.BOOL: ("<?", 1),
           VT.UINT64: ("<Q", 8), VT.INT64: ("<q", 8), VT.FLOAT64: ("<d", 8)}
_NP = {VT.UINT8: "<u1", VT.INT8: "<i1", VT.UINT16: "<u2", VT.INT16: "<i2", VT.UINT32: "<u4", VT.INT32: "<i4",
       VT.FLOAT32: "<f4", VT.BOOL: "?", VT.UINT64: "<u8", VT.INT64: "<i8", VT.FLOAT64: "<f8"}
SMALL_ARRAY = 4096   # numeric metadata arrays up to this length are read even without keep_arrays


@dataclass
class RawTensor:
    name: str
    shape: tuple[int, ...]     # ggml order
    type: int
    offset: int                # relative to the data section


@dataclass
class Header:
    version: int
    kv: list[tuple[str, Any, VT, VT | None]]
    tensors: list[RawTensor]
    data_start: int
    file_size: int


class _Buf:
    def __init__(self, mv: memoryview, path: Path) -> None:
        self.mv = mv
        self.pos = 0
        self.path = path

    def take(self, n: int) -> memoryview:
        if n > len(self.mv) - self.pos:
            raise EOFError
        out = self.mv[self.pos:self.pos + n]
        self.pos += n
        return out

    def scalar(self, vt: VT) -> Any:
        fmt, n = _SCALAR[vt]
        return struct.unpack(fmt, self.take(n))[0]

    def u32(self) -> int:
        return struct.unpack("<I", self.take(4))[0]

    def u64(self) -> int:
        return struct.unpack("<Q", self.take(8))[0]

    def count(self, what: str, limit: int, n: int | None = None) -> int:
        """A count read from the file (or ``n``), refused past ``limit`` before anything is sized by it."""
        n = self.u64() if n is None else n
        if n > limit:
            raise ModelError(f"{self.path}: the header claims {n:,} {what}; a real model has at most {limit:,}",
                             limits.CRAFTED_FIX)
        return n

    def string(self) -> bytes:
        return bytes(self.take(self.u64()))

    def name(self, what: str) -> str:
        """A metadata key or tensor name (bounded: llama.cpp's own limit is 64 bytes)."""
        n = self.u64()
        if n > limits.MAX_NAME_BYTES:
            raise ModelError(f"{self.path}: a {what} of {n:,} bytes (at most {limits.MAX_NAME_BYTES:,} are allowed)",
                             limits.CRAFTED_FIX)
        return bytes(self.take(n)).decode("utf-8", "replace")

    def strings(self, n: int, keep: bool) -> list[bytes | None]:
        """``n`` strings of an array, walked without copying unless ``keep``; EOFError if they overrun the file."""
        mv, pos, end = self.mv, self.pos, len(self.mv)
        out: list[bytes | None] = []
        unpack = struct.Struct("<Q").unpack_from
        for _ in range(n):
            if end - pos < 8:
                raise EOFError
            (ln,) = unpack(mv, pos)
            pos += 8
            if ln > end - pos:
                raise EOFError
            if keep:
                out.append(bytes(mv[pos:pos + ln]))
            pos += ln
        self.pos = pos
        return out if keep else [None] * n

    def value(self, vt: VT, keep_arrays: bool) -> tuple[Any, VT | None]:
        if vt == VT.STRING:
            return self.string(), None
        if vt != VT.ARRAY:
            return self.scalar(vt), None
        sub = VT(self.u32())
        n = self.count("items in one metadata array", limits.MAX_ARRAY)
        if sub == VT.STRING:
            return self.strings(n, keep_arrays), sub
        if sub == VT.ARRAY:
            raise ModelError(f"{self.path}: nested metadata arrays are not supported",
                             "use a file without nested arrays")
        _, size = _SCALAR[sub]
        raw = self.take(n * size)
        # small numeric arrays (per-layer patterns, rope sections) are always kept; large ones
        # (token scores and types) only with keep_arrays
        keep = keep_arrays or n <= SMALL_ARRAY
        return (np.frombuffer(raw, dtype=_NP[sub]).tolist() if keep else [None] * n), sub

    def tensor(self) -> RawTensor:
        name = self.name("tensor name")
        nd = self.count(f"dimensions of tensor {name!r}", limits.MAX_DIMS, self.u32())
        shape = tuple(self.count(f"elements in one dimension of tensor {name!r}", limits.MAX_DIM)
                      for _ in range(nd))
        return RawTensor(name, shape, self.u32(), self.u64())


def _alignment(path: Path, kv: list[tuple[str, Any, VT, VT | None]]) -> int:
    align = next((v for k, v, _, _ in kv if k == "general.alignment"), 32)
    if (isinstance(align, bool) or not isinstance(align, int) or align <= 0 or align & (align - 1)
            or align > limits.MAX_ALIGNMENT):
        raise ModelError(f"{path}: general.alignment is {align!r}, not a power of two up to {limits.MAX_ALIGNMENT:,}",
                         "use a GGUF written by llama.cpp or gguf-py (the default alignment is 32)")
    return align


def _parse(b: _Buf, size: int, keep_arrays: bool) -> Header:
    b.take(4)
    version = b.u32()
    if version not in (2, 3):
        raise ModelError(f"{b.path}: unsupported GGUF version {version}", "use a GGUF v3 file")
    n_tensors = b.count("tensors", limits.MAX_TENSORS)
    n_kv = b.count("metadata keys", limits.MAX_KV)
    kv = []
    for _ in range(n_kv):
        key = b.name("metadata key")
        vt = VT(b.u32())
        val, sub = b.value(vt, keep_arrays)
        kv.append((key, val, vt, sub))
    tensors = [b.tensor() for _ in range(n_tensors)]
    align = _alignment(b.path, kv)
    return Header(version, kv, tensors, (b.pos + align - 1) // align * align, size)


def parse_header(path: Path, *, keep_arrays: bool = True) -> Header:
    """Parse a GGUF file's header. ModelError if it is not GGUF, is cut short, or claims more than a
    real model has (:mod:`.limits`)."""
    path = Path(path)
    try:
        f = open(path, "rb")
    except OSError as e:
        raise ModelError(f"cannot open {path}: {e.strerror}", "give the path of a readable .gguf file") from e
    with f:
        size = os.fstat(f.fileno()).st_size
        if size < 24 or f.read(4) != b"GGUF":
            raise ModelError(f"{path} is not a GGUF file", "give a .gguf model file")
        try:
            mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        except (OSError, ValueError) as e:
            raise ModelError(f"cannot map {path} into memory: {e}", "copy the file to a local disk") from e
        try:
            b = _Buf(memoryview(mm), path)
            try:
                return _parse(b, size, keep_arrays)
            except (EOFError, struct.error, ValueError) as e:
                raise ModelError(f"{path} is truncated or corrupt (header ends early or has bad values)",
                                 "re-download or re-generate the file") from e
            finally:
                b.mv.release()
        finally:
            mm.close()
