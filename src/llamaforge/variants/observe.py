"""What a server start shows it really ran with: read from llama.cpp's own log, not from what was asked.

A knob is only a difference if the binary acted on it. llama-server logs its resolved settings at load
(llama.cpp 0c1e57098, ``src/llama-context.cpp``, ``src/llama-kv-cache.cpp``, ``src/llama-model.cpp``)::

    llama_context: n_ctx                 = 4096
    llama_context: n_batch               = 2048
    llama_context: n_ubatch              = 512
    llama_context: flash_attn            = auto            (enabled / disabled when set)
    resolve_fused_ops: Flash Attention enabled          (auto resolved; or "… not supported, set to disabled")
    llama_kv_cache:        CPU KV buffer size =    24.00 MiB
    llama_kv_cache: size =   24.00 MiB (  4096 cells,   4 layers,  1/1 seqs), K (q8_0):  12.00 MiB, V (f16): …
    load_tensors: offloaded 5/5 layers to GPU
    load_tensors:   CPU_Mapped model buffer size =   120.00 MiB
    system_info: n_threads = 2 (n_threads_batch = 2) / 2 | CPU : …

The fit that runs before the real context (``--fit``) logs the same lines for its probes, so the last
occurrence of each wins. :func:`observe_log` turns a log into :class:`Facts` (a flat dict, stored with
each point as ``detail.observed``); :func:`device_facts` reads ``llama-bench --list-devices`` output
(the Vulkan device line with ``fp16``, ``int dot``, ``matrix cores``; the device list).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from ..llamacpp.devices import parse_devices, parse_vulkan_lines

Facts = dict[str, Any]

_SETTING = re.compile(r"^llama_context:\s+(n_ctx|n_batch|n_ubatch|flash_attn)\s+=\s+(\S+)")
_FA_RESOLVED = re.compile(r"Flash Attention (enabled|not supported, set to disabled)")
_KV_SIZE = re.compile(r"llama_kv_cache: size =\s*([\d.]+) MiB \(\s*(\d+) cells.*?K \((\w+)\):\s*([\d.]+) MiB,"
                      r"\s*V \((\w+)\):\s*([\d.]+) MiB")
_KV_BUF = re.compile(r"llama_kv_cache:\s+(\S+) KV buffer size\s*=\s*([\d.]+) MiB")
_MODEL_BUF = re.compile(r"load_tensors:\s+(\S+) model buffer size\s*=\s*([\d.]+) MiB")
_OFFLOADED = re.compile(r"offloaded (\d+)/(\d+) layers to GPU")
_THREADS = re.compile(r"system_info: n_threads = (\d+)(?: \(n_threads_batch = (\d+)\))?")
_HOST_BUFFERS = re.compile(r"^(CPU|CPU_Mapped|CPU_REPACK|AMX|.*_Host)$")


def _text(line: str) -> str:
    """A ``--log-jsonl`` line's message (other records and plain lines as they are)."""
    if line.startswith('{"type":"log"'):
        try:
            return str(json.loads(line).get("msg", "")).rstrip("\n")
        except ValueError:
            pass
    return line.rstrip("\n")


def _lines(path: Path) -> list[str]:
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            return [_text(line) for line in fh]
    except OSError:
        return []


def observe_text(lines: list[str]) -> Facts:
    """The facts of one load (the last context's lines win: see the module doc)."""
    f: Facts = {}
    kv_bufs: dict[str, float] = {}
    model_bufs: dict[str, float] = {}
    for raw in lines:
        line = raw.strip()
        if (m := _SETTING.search(line)) is not None:
            key, val = m.group(1), m.group(2)
            if key == "flash_attn":
                f["flash_attn_asked"] = val
                f.pop("flash_attn", None)
                if val in ("enabled", "disabled"):
                    f["flash_attn"] = val
            else:
                f[key] = int(val) if val.isdigit() else val
            if key == "n_ctx":      # a new context: its buffers replace the previous one's
                kv_bufs = {}
        elif (m := _FA_RESOLVED.search(line)) is not None:
            f["flash_attn"] = "enabled" if m.group(1) == "enabled" else "disabled"
        elif (m := _KV_SIZE.search(line)) is not None:
            cells = int(m.group(2))
            f.update(kv_mib=float(m.group(1)), kv_cells=cells, type_k=m.group(3), type_v=m.group(5))
            if cells:
                f["kv_kib_per_token"] = round(float(m.group(1)) * 1024 / cells, 4)
        elif (m := _KV_BUF.search(line)) is not None:
            kv_bufs[m.group(1)] = float(m.group(2))
        elif (m := _MODEL_BUF.search(line)) is not None:
            model_bufs[m.group(1)] = float(m.group(2))
        elif (m := _OFFLOADED.search(line)) is not None:
            f["offloaded_layers"] = f"{m.group(1)}/{m.group(2)}"
        elif (m := _THREADS.search(line)) is not None:
            f["threads"] = int(m.group(1))
            if m.group(2):
                f["threads_batch"] = int(m.group(2))
    if kv_bufs:
        f["kv_buffers"] = sorted(kv_bufs)
        f["kv_on_device"] = any(not _HOST_BUFFERS.match(b) for b in kv_bufs)
    if model_bufs:
        f["model_buffers"] = sorted(model_bufs)
        f["model_on_device"] = any(not _HOST_BUFFERS.match(b) for b in model_bufs)
        f["mmap"] = "CPU_Mapped" in model_bufs
    return f


def observe_log(path: Path) -> Facts:
    return observe_text(_lines(path))


def device_facts(listing: str) -> Facts:
    """``llama-bench --list-devices`` output → ``{"devices": [...], "vulkan": [{fp16, int_dot, matrix_cores, …}]}``."""
    devs = [f"{d.label}: {d.name}" for d in parse_devices(listing)]
    vk = [{k: v for k, v in d.items() if k != "index"} for d in parse_vulkan_lines(listing)]
    return {"devices": devs, "vulkan": vk}
