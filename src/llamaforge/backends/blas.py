"""The BLAS backend: llama.cpp's CPU backend with OpenBLAS for the large matrix products (prompt processing).

Built, verified, smoke-run and swept against the plain CPU build here (Debian 12, OpenBLAS 0.3.21 from
``libopenblas-dev``: ``tests/integration/test_blas_real.py``). Its compute runs on the host CPU, so the CPU's
runtime quirks (``no-repack`` on AMX × gcc 12) apply to it too. The OpenBLAS version enters the build key: a
different OpenBLAS is a different build.

Verification: a binary with the BLAS backend lists its library as a device without an index,
``  BLAS: OpenBLAS (0 MiB, 0 MiB free)`` under ``llama-bench --list-devices`` (a plain CPU build lists
``(none)``); a "blas" build whose binary lists no ``BLAS`` device is refused (:mod:`llamaforge.builds.verify`).
llama-bench also names it in its results (``"backends": "BLAS"``, ``"cpu_info": "OpenBLAS, …"``).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING

from .base import Backend, DoctorCheck, FlagOptions, HostFacts, Problem
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
    device_prefix = "BLAS"               # `--list-devices`: "  BLAS: OpenBLAS (0 MiB, 0 MiB free)"
    device_kind = "cpu"
    flags = MappingProxyType({"GGML_BLAS": "ON", "GGML_BLAS_VENDOR": "OpenBLAS"})
    rank = 80
    note = "OpenBLAS for prompt processing on the CPU; built, verified and swept against the CPU build here"
    no_device_fix = ("CMake must find OpenBLAS (build.log: `-- Including BLAS backend`): apt-get install "
                     "libopenblas-dev, then `llamaforge build --backends blas --rebuild`")

    def fingerprint(self, tc: Toolchain) -> dict[str, str]:
        return {"openblas": openblas_version(openblas_header())}

    def tool_problems(self, tc: Toolchain, opts: FlagOptions | None) -> list[Problem]:
        if openblas_header() is None or openblas_library() is None:
            return [("OpenBLAS (headers and library) not found",
                     "apt-get install libopenblas-dev  (or set OpenBLAS_HOME to its prefix)")]
        return []

    def doctor_checks(self, tc: Toolchain, host: HostFacts) -> DoctorCheck:
        """Runs on the host CPU (its warnings too); its "device" is the OpenBLAS found here."""
        check = super().doctor_checks(tc, host)
        if openblas_library() is not None:
            check.devices = [f"OpenBLAS {openblas_version(openblas_header())} (host CPU)"]
        return check

    def verify_capabilities(self, device_names: list[str], retried: bool) -> dict:
        """The BLAS library the binary lists as its device (``OpenBLAS``)."""
        return {"blas_library": device_names[0]} if device_names else {}

    def describe_capabilities(self, caps: Mapping) -> list[str]:
        lib = caps.get("blas_library")
        return [f"BLAS: {lib}"] if lib else []


BLAS = Blas()
