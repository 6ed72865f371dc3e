"""Every backend llamaforge knows, by name: the one place a new backend is added (beside its own module,
its test and the docs)."""

from __future__ import annotations

from collections.abc import Sequence

from ..errors import ConfigError
from .base import Backend
from .blas import BLAS
from .cpu import CPU
from .cuda import CUDA
from .rpc import RPC
from .untested import HIP, METAL, SYCL
from .vulkan import VULKAN

#: built and tested first (cpu, cuda, vulkan, blas, rpc), then the declared, untested ones
_BACKENDS: dict[str, Backend] = {b.name: b for b in (CPU, CUDA, VULKAN, BLAS, RPC, HIP, SYCL, METAL)}


def names() -> list[str]:
    """Every backend's name, in the registry's order."""
    return list(_BACKENDS)


def known() -> list[Backend]:
    """Every backend, in the registry's order."""
    return list(_BACKENDS.values())


def find(name: str | None) -> Backend | None:
    """The backend called ``name`` (any case, spaces ignored), or None: for readers of stored data."""
    return _BACKENDS.get((name or "").strip().lower())


def get(name: str) -> Backend:
    """The backend called ``name``; a :class:`~llamaforge.errors.ConfigError` (one line, with the names) otherwise."""
    b = find(name)
    if b is None:
        raise ConfigError(f"unknown backend {name!r}", f"use one of: {', '.join(_BACKENDS)}")
    return b


def parse(text: str | Sequence[str]) -> list[Backend]:
    """``"cpu,cuda"`` (or a list of names) → the backends, each once, in the order given."""
    items = [str(t) for t in text] if not isinstance(text, str) else str(text).split(",")
    names_given = [t for t in items if t.strip()]
    if not names_given:
        raise ConfigError("no backend given", f"pass --backends with some of: {', '.join(_BACKENDS)}")
    out: list[Backend] = []
    for n in names_given:
        b = get(n)
        if b not in out:
            out.append(b)
    return out


def rank(name: str | None) -> int:
    """Where a backend goes in an order (GPU backends first, the CPU last; an unknown name after all)."""
    b = find(name)
    return b.rank if b else 1000


def label(name: str | None) -> str:
    """``cuda`` → ``CUDA``, ``hip`` → ``ROCm`` (llama.cpp's own names); an unknown backend as given, or ``?``."""
    b = find(name)
    return b.label if b else (name or "?")
