"""What llama.cpp's binaries say about themselves: ``--version`` (version, build number, commit) and
``--list-devices`` (the devices a build sees, with memory: ``CUDA0: …``, ``Vulkan0: …``, and the one device
without an index that an accelerator library adds, ``BLAS: OpenBLAS``), and the per-device lines its backends log
(``ggml_vulkan: 0 = … | matrix cores: …``, ``Device 0: …, compute capability 9.0``).

Build verification (:mod:`llamaforge.builds.verify`) checks a build against these; the variant matrix
(:mod:`llamaforge.variants.observe`) reads what a server start really ran on from them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import proc

_DEV = re.compile(r"^\s+([A-Za-z]+)(\d*): (.*?)(?: \((\d+) MiB, (\d+) MiB free\))?\s*$")
_VK_LINE = re.compile(r"ggml_vulkan: (\d+) = (.*?) \| (.*)$")
_CUDA_LINE = re.compile(r"Device (\d+): (.*?), compute capability (\d+\.\d+)")
_VERSION = re.compile(r"version: (\S+) \(build (\d+), commit ([0-9a-fA-F]+|unknown)\)|version: (\d+) \(([0-9a-fA-F]+|unknown)\)")


@dataclass
class Device:
    backend: str      # "CUDA", "Vulkan", ...
    index: int
    name: str
    memory_total_mib: int | None = None
    memory_free_mib: int | None = None
    indexed: bool = True   # False: listed without an index, the only one of its backend (``BLAS: OpenBLAS``)

    @property
    def label(self) -> str:
        """How ``--list-devices`` names it: ``CUDA0``, ``Vulkan1``, ``BLAS``."""
        return device_label(self.backend, self.index, self.indexed)


def device_label(backend: str, index: int | None, indexed: bool = True) -> str:
    """``CUDA`` 0 → ``CUDA0``; an unindexed device (``BLAS``) by its backend alone (also for stored device dicts)."""
    return f"{backend}{index}" if indexed else backend


def parse_devices(text: str) -> list[Device]:
    """Devices from ``--list-devices`` output (``  CUDA0: NVIDIA H200 (143155 MiB, 142629 MiB free)``; a BLAS build's
    ``  BLAS: OpenBLAS (0 MiB, 0 MiB free)`` is index 0, not ``indexed``)."""
    out: list[Device] = []
    in_list = False
    for line in text.splitlines():
        if line.startswith("Available devices"):
            in_list = True
            continue
        if in_list:
            m = _DEV.match(line)
            if m:
                out.append(Device(m.group(1), int(m.group(2) or 0), m.group(3),
                                  int(m.group(4)) if m.group(4) else None, int(m.group(5)) if m.group(5) else None,
                                  indexed=bool(m.group(2))))
    return out


def parse_version(text: str) -> dict[str, Any]:
    m = _VERSION.search(text)
    if not m:
        return {}
    if m.group(1):
        return {"version": m.group(1), "build_number": int(m.group(2)), "commit": m.group(3)}
    return {"version": m.group(4), "build_number": int(m.group(4)), "commit": m.group(5)}


def parse_vulkan_lines(text: str) -> list[dict[str, Any]]:
    """``ggml_vulkan: 0 = NVIDIA H200 (NVIDIA) | uma: 0 | fp16: 1 | bf16: 1 | warp size: 32 | shared
    memory: 49152 | int dot: 1 | matrix cores: NV_coopmat2`` → dicts."""
    out = []
    for line in text.splitlines():
        m = _VK_LINE.search(line)
        if not m:
            continue
        d: dict[str, Any] = {"index": int(m.group(1)), "name": m.group(2).strip()}
        for part in m.group(3).split("|"):
            k, _, v = part.partition(":")
            k, v = k.strip().replace(" ", "_"), v.strip()
            if k:
                d[k] = int(v) if v.isdigit() else v
        out.append(d)
    return out


def parse_cuda_lines(text: str) -> list[dict[str, Any]]:
    return [{"index": int(m.group(1)), "name": m.group(2), "compute_capability": m.group(3)}
            for m in _CUDA_LINE.finditer(text)]


def list_devices(exe: Path, env: dict[str, str]) -> tuple[list[Device], str]:
    """The devices ``exe --list-devices`` shows, and its whole output (the Vulkan/CUDA lines are in it)."""
    r = proc.run([exe, "--list-devices"], env=env, timeout=120)
    return parse_devices(r.output), r.output
