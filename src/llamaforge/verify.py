"""Verify a build: right commit, sees its backend's device, capabilities recorded.

* ``--version`` must report the pinned commit (non-git sources get ``-DLLAMA_BUILD_COMMIT``).
* ``--list-devices`` must show a device of the built backend (``CUDA0: ...`` / ``Vulkan0: ...``);
  otherwise fail loudly — "built for CUDA but the binary sees only Vulkan0" is the trap the seed's
  user fell into (a distribution package that was the Vulkan build).
* A Vulkan build that sees no device is retried with ``GGML_VK_VISIBLE_DEVICES=0``: llama.cpp hides
  CPU-type Vulkan devices (Mesa lavapipe) unless asked; if one appears, that environment is
  recorded as the build's runtime environment (and said).
* Capabilities: devices (name, memory), the Vulkan device line (``matrix cores``, ``int dot``,
  ``fp16``, ``bf16``), CUDA compute capability; a smoke generation of a few tokens when a model is
  given.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from . import proc
from .build.backends import BACKENDS
from .console import notice
from .errors import VerifyError

_DEV = re.compile(r"^\s+([A-Za-z]+)(\d+): (.*?)(?: \((\d+) MiB, (\d+) MiB free\))?\s*$")
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


def parse_devices(text: str) -> list[Device]:
    """Devices from ``--list-devices`` output (``  CUDA0: NVIDIA H200 (143155 MiB, 142629 MiB free)``)."""
    out: list[Device] = []
    in_list = False
    for line in text.splitlines():
        if line.startswith("Available devices"):
            in_list = True
            continue
        if in_list:
            m = _DEV.match(line)
            if m:
                out.append(Device(m.group(1), int(m.group(2)), m.group(3),
                                  int(m.group(4)) if m.group(4) else None, int(m.group(5)) if m.group(5) else None))
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


@dataclass
class Verification:
    ok: bool
    problems: list[str] = field(default_factory=list)
    fixes: list[str] = field(default_factory=list)
    version: dict = field(default_factory=dict)
    devices: list[dict] = field(default_factory=list)
    runtime_env: dict[str, str] = field(default_factory=dict)
    capabilities: dict = field(default_factory=dict)
    smoke: dict | None = None

    def to_dict(self) -> dict:
        return asdict(self)


def _list_devices(exe: Path, env: dict[str, str]) -> tuple[list[Device], str]:
    r = proc.run([exe, "--list-devices"], env=env, timeout=120)
    return parse_devices(r.output), r.output


def diagnose(backend: str, expected_commit: str, version: dict, devices: list[Device]) -> tuple[list[str], list[str]]:
    """Problems (and fixes) for what a binary reported. Pure, for unit tests."""
    problems: list[str] = []
    fixes: list[str] = []
    got = version.get("commit")
    if not got:
        problems.append("the binary's --version reports no commit")
        fixes.append("rebuild; llamaforge passes -DLLAMA_BUILD_COMMIT for non-git sources")
    elif got == "unknown" or not (expected_commit.startswith(got) or got.startswith(expected_commit[:len(got)])):
        problems.append(f"the binary reports commit {got}, but the pin is {expected_commit[:9]}")
        fixes.append("rebuild with `llamaforge build --rebuild` (a stale or foreign binary)")
    prefix = BACKENDS[backend].device_prefix
    if prefix:
        mine = [d for d in devices if d.backend == prefix]
        others = [d for d in devices if d.backend != prefix]
        if not mine and others:
            seen = ", ".join(f"{d.backend}{d.index} ({d.name})" for d in others)
            problems.append(f"built for {prefix} but the binary sees only {seen}")
            fixes.append(f"this is not a {backend} build: check the CMake flags (GGML_{backend.upper()}=ON) and that you run the binary you built")
        elif not mine:
            problems.append(f"the {prefix} build sees no device")
            fixes.append({"cuda": "check the NVIDIA driver (nvidia-smi) and CUDA_VISIBLE_DEVICES",
                          "vulkan": "install a Vulkan driver (apt-get install mesa-vulkan-drivers for lavapipe; the NVIDIA/AMD driver for GPUs) and check `vulkaninfo --summary`"}.get(
                              backend, "check the driver for this backend"))
    return problems, fixes


def verify_build(build: Any, model: Path | None = None) -> Verification:
    """Run the checks on a :class:`~llamaforge.build.Build`; never raises for a failed check (see ``ok``)."""
    server = build.binary("llama-server")
    env = dict(build.env)
    r = proc.run([server, "--version"], env=env, timeout=60)
    version = parse_version(r.output)
    # llama-bench also prints the backends' init lines (`ggml_vulkan: 0 = ... | matrix cores: ...`,
    # `Device 0: ..., compute capability 9.0`), which llama-server keeps quiet about
    lister = build.binary("llama-bench")
    devices, listing = _list_devices(lister, env)
    prefix = BACKENDS[build.backend].device_prefix
    if build.backend == "vulkan" and not any(d.backend == prefix for d in devices) and "GGML_VK_VISIBLE_DEVICES" not in env:
        env2 = dict(env, GGML_VK_VISIBLE_DEVICES="0")
        devs2, listing2 = _list_devices(lister, env2)
        if any(d.backend == prefix for d in devs2):
            notice(f"only a CPU Vulkan device is present ({devs2[0].name}); using it with GGML_VK_VISIBLE_DEVICES=0")
            env, devices, listing = env2, devs2, listing2
    problems, fixes = diagnose(build.backend, build.commit, version, devices)
    caps: dict[str, Any] = {"devices": [asdict(d) for d in devices]}
    vk = parse_vulkan_lines(listing)
    if vk:
        caps["vulkan_devices"] = vk
        caps["vulkan"] = {"matrix_cores": vk[0].get("matrix_cores"), "int_dot": vk[0].get("int_dot"),
                          "fp16": vk[0].get("fp16"), "bf16": vk[0].get("bf16")}
    cu = parse_cuda_lines(listing)
    if cu:
        caps["cuda_devices"] = cu
    runtime_env = {k: val for k, val in env.items() if k.startswith(("GGML_", "CUDA_", "VK_"))}
    v = Verification(not problems, problems, fixes, version, [asdict(d) for d in devices], runtime_env, caps)
    if model is not None and v.ok:
        v.smoke = smoke(build, model, env)
        if not v.smoke.get("ok"):
            v.ok = False
            v.problems.append(f"smoke generation failed: {v.smoke.get('error')}")
            v.fixes.append(f"run the build's llama-bench by hand on {model} to see why")
    return v


def smoke(build: Any, model: Path, env: dict[str, str], n_gen: int = 4) -> dict:
    """Generate a few tokens with llama-bench; returns {ok, tg_tps, error}."""
    r = proc.run([build.binary("llama-bench"), "-m", model, "-p", "0", "-n", str(n_gen), "-r", "1", "-o", "json"],
                 env=env, timeout=600)
    if not r.ok:
        return {"ok": False, "error": (r.output.strip().splitlines() or ["no output"])[-1][:200]}
    try:
        start = r.output.index("[")
        data = json.loads(r.output[start:r.output.rindex("]") + 1])
        row = data[0]
        return {"ok": row.get("n_gen") == n_gen, "tg_tps": row.get("avg_ts"), "n_gen": row.get("n_gen")}
    except (ValueError, IndexError, KeyError) as e:
        return {"ok": False, "error": f"unreadable llama-bench output ({e})"}


def raise_for(ver: dict, build: Any) -> None:
    probs, fixes = ver.get("problems") or ["verification failed"], ver.get("fixes") or [None]
    raise VerifyError(f"{build.backend} build {build.key}: {probs[0]}", fixes[0])
