"""The BLAS backend: llama.cpp's CPU backend with OpenBLAS for the large matrix products (prompt processing).

Built and verified like the CPU backend (its compute runs on the host CPU); sweeping it against the plain
CPU build is issue 43's. The OpenBLAS version enters the build key: a different OpenBLAS is a different build.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING

from .base import Backend, FlagOptions, Problem
from .tools import first_file

if TYPE_CHECKING:
    from .toolchain import Toolchain


def _roots() -> tuple[str, ...]:
    home = os.environ.get("OpenBLAS_HOME") or os.environ.get("OPENBLAS_HOME")
    return (home,) if home else ()


def openblas_header() -> str | None:
    """``openblas_config.h`` (Debian: ``/usr/include/<triplet>/openblas-pthread/``; Fedora: ``/usr/include/openblas/``)."""
    return first_file((*(f"{r}/include/openblas_config.h" for r in _roots()),
                       "/usr/include/openblas_config.h", "/usr/include/openblas/openblas_config.h",
                       "/usr/include/*/openblas*/openblas_config.h", "/usr/local/include/openblas_config.h"))


def openblas_library() -> str | None:
    return first_file((*(f"{r}/lib/libopenblas*.so*" for r in _roots()),
                       "/usr/lib/*/libopenblas*.so*", "/usr/lib/*/openblas*/libopenblas*.so*",
                       "/usr/lib64/libopenblas*.so*", "/usr/local/lib/libopenblas*.so*"))


def openblas_version(header: str | None) -> str:
    """``#define OPENBLAS_VERSION " OpenBLAS 0.3.21 "`` → ``0.3.21`` ("unknown" without one)."""
    try:
        text = Path(header).read_text(errors="replace") if header else ""
    except OSError:
        text = ""
    m = re.search(r'OPENBLAS_VERSION\s+"\s*OpenBLAS\s+([\w.]+)', text)
    return m.group(1) if m else "unknown"


class Blas(Backend):
    name = "blas"
    label = "BLAS"
    device_kind = "cpu"
    flags = MappingProxyType({"GGML_BLAS": "ON", "GGML_BLAS_VENDOR": "OpenBLAS"})
    rank = 80
    note = "OpenBLAS for prompt processing on the CPU; its sweeps against the CPU build come with issue 43"

    def fingerprint(self, tc: Toolchain) -> dict[str, str]:
        return {"openblas": openblas_version(openblas_header())}

    def tool_problems(self, tc: Toolchain, opts: FlagOptions | None) -> list[Problem]:
        if openblas_header() is None or openblas_library() is None:
            return [("OpenBLAS (headers and library) not found",
                     "apt-get install libopenblas-dev  (or set OpenBLAS_HOME to its prefix)")]
        return []


BLAS = Blas()
