"""The environment variables a variant may set, and what each is seen to change.

Only the names below are accepted (one line naming the list otherwise): each is read by llama.cpp at
commit 0c1e57098 (``getenv`` in ``ggml/src/ggml-vulkan/ggml-vulkan.cpp``, ``ggml/src/ggml-cuda/``) or by
the GPU runtime / Vulkan loader underneath it. A misspelt name is silently ignored by llama.cpp, so a
variant carrying one would measure the default twice and call it a comparison; refusing unknown names
prevents that.

``GGML_CUDA_FORCE_MMQ`` and ``GGML_CUDA_FORCE_CUBLAS`` are **not** environment variables at this commit:
they are CMake options (``#ifdef GGML_CUDA_FORCE_MMQ`` in ``ggml-cuda.cu``). They are refused as
environment variables with the fix (a build define: ``-DGGML_CUDA_FORCE_MMQ=ON``).

``device_field``: the field of the Vulkan device line (``ggml_vulkan: 0 = NVIDIA H200 (NVIDIA) | uma: 0 |
fp16: 1 | … | int dot: 1 | matrix cores: NV_coopmat2``) the variable changes. llama-bench prints that line
(llama-server does not), so a variant's ``llama-bench --list-devices`` with and without its environment
shows whether the knob took effect (``coopmat2 still listed`` = it did not). ``None``: nothing the binary
prints shows it; its effect is reported as unverified.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import ConfigError


@dataclass(frozen=True)
class EnvKnob:
    name: str
    backends: tuple[str, ...]        # where it acts ("*": any backend)
    what: str
    device_field: str | None = None  # the Vulkan device-line field it changes ("devices": the device list)
    expect: str | None = None        # the value that field must not keep, e.g. "NV_coopmat2"


_VK = ("vulkan",)
_CUDA = ("cuda",)
_HIP = ("hip",)

ENV_KNOBS: tuple[EnvKnob, ...] = (
    # Vulkan (ggml-vulkan.cpp): device features and selection
    EnvKnob("GGML_VK_VISIBLE_DEVICES", _VK, "which Vulkan devices llama.cpp uses (e.g. 0, or 0,1)", "devices"),
    EnvKnob("GGML_VK_DISABLE_COOPMAT", _VK, "do not use KHR_cooperative_matrix (matrix cores)", "matrix_cores",
            "KHR_coopmat"),
    EnvKnob("GGML_VK_DISABLE_COOPMAT2", _VK, "do not use NV_cooperative_matrix2", "matrix_cores", "NV_coopmat2"),
    EnvKnob("GGML_VK_DISABLE_COOPMAT2_DECODE_VECTOR", _VK, "coopmat2 without the decode-vector path", "matrix_cores",
            "NV_coopmat2v"),
    EnvKnob("GGML_VK_DISABLE_INTEGER_DOT_PRODUCT", _VK, "do not use integer dot products (int dot: 0)", "int_dot", "1"),
    EnvKnob("GGML_VK_DISABLE_F16", _VK, "no fp16 arithmetic (fp16: 0)", "fp16", "1,dot2"),
    EnvKnob("GGML_VK_DISABLE_DOT2", _VK, "no fp16 dot2 (fp16: dot2 → 1)", "fp16", "dot2"),
    EnvKnob("GGML_VK_DISABLE_BFLOAT16", _VK, "no bf16 (bf16: 0)", "bf16", "1"),
    EnvKnob("GGML_VK_DISABLE_OCP_FP4", _VK, "no OCP fp4 (fp4: 0)", "fp4", "1"),
    EnvKnob("GGML_VK_DISABLE_MMVQ", _VK, "no quantized matrix-vector kernels"),
    EnvKnob("GGML_VK_FORCE_MMVQ", _VK, "always the quantized matrix-vector kernels"),
    EnvKnob("GGML_VK_DISABLE_FUSION", _VK, "no operator fusion"),
    EnvKnob("GGML_VK_DISABLE_GRAPH_OPTIMIZE", _VK, "no graph reordering"),
    EnvKnob("GGML_VK_DISABLE_MULTI_ADD", _VK, "no fused multi-add"),
    EnvKnob("GGML_VK_DISABLE_ASYNC", _VK, "no asynchronous transfers"),
    EnvKnob("GGML_VK_ASYNC_USE_TRANSFER_QUEUE", _VK, "asynchronous transfers on the transfer queue"),
    EnvKnob("GGML_VK_FA_SPARSE_DISABLE", _VK, "no sparse flash-attention path"),
    EnvKnob("GGML_VK_PREFER_HOST_MEMORY", _VK, "allocate buffers in host memory"),
    EnvKnob("GGML_VK_DISABLE_HOST_VISIBLE_VIDMEM", _VK, "no host-visible device memory"),
    EnvKnob("GGML_VK_ALLOW_SYSMEM_FALLBACK", _VK, "fall back to system memory when VRAM is full"),
    # CUDA (ggml-cuda): runtime switches
    EnvKnob("GGML_CUDA_DISABLE_GRAPHS", _CUDA, "no CUDA graphs"),
    EnvKnob("GGML_CUDA_DISABLE_FUSION", _CUDA, "no operator fusion (value 1)"),
    EnvKnob("GGML_CUDA_GRAPH_OPT", _CUDA, "CUDA graph optimisation (value 1)"),
    EnvKnob("GGML_CUDA_PDL", _CUDA, "programmatic dependent launch"),
    EnvKnob("GGML_CUDA_ENABLE_UNIFIED_MEMORY", _CUDA, "unified memory (may spill to host RAM)"),
    EnvKnob("GGML_CUDA_NO_PINNED", _CUDA, "no pinned host buffers"),
    EnvKnob("GGML_CUDA_P2P", _CUDA, "peer-to-peer copies between GPUs"),
    # device selection and drivers underneath llama.cpp
    EnvKnob("CUDA_VISIBLE_DEVICES", _CUDA, "which CUDA devices the CUDA runtime shows", "devices"),
    EnvKnob("HIP_VISIBLE_DEVICES", _HIP, "which ROCm devices HIP shows", "devices"),
    EnvKnob("ROCR_VISIBLE_DEVICES", _HIP, "which ROCm devices the ROCr runtime shows", "devices"),
    EnvKnob("ROCBLAS_USE_HIPBLASLT", _HIP, "hipBLASLt on (1) or off (0) under rocBLAS"),
    EnvKnob("VK_DRIVER_FILES", _VK, "the Vulkan ICD (driver) JSON files the loader uses", "devices"),
    EnvKnob("VK_ICD_FILENAMES", _VK, "older name of VK_DRIVER_FILES", "devices"),
    EnvKnob("AMD_VULKAN_ICD", _VK, "RADV or AMDVLK when both are installed", "devices"),
    EnvKnob("RADV_PERFTEST", _VK, "RADV (Mesa) experimental features, e.g. coop_matrix"),
)

BY_NAME = {k.name: k for k in ENV_KNOBS}
#: CMake options people set as environment variables (llama.cpp reads them at compile time only)
BUILD_OPTIONS = {"GGML_CUDA_FORCE_MMQ", "GGML_CUDA_FORCE_CUBLAS", "GGML_CUDA_FA_ALL_QUANTS", "GGML_CUDA_NO_VMM",
                 "GGML_NATIVE", "GGML_VULKAN", "GGML_CUDA"}


def env_knob(name: str, where: str) -> EnvKnob:
    """The allow-list entry of ``name`` (one line with the fix otherwise)."""
    k = BY_NAME.get(name)
    if k is not None:
        return k
    if name in BUILD_OPTIONS:
        raise ConfigError(f"{where}: {name} is a CMake option of llama.cpp, not an environment variable",
                          f"make it a build define: -D{name}=ON in --variant, or defines = {{ {name} = \"ON\" }}")
    close = [k.name for k in ENV_KNOBS if k.name.startswith(name.rsplit("_", 1)[0])][:3]
    raise ConfigError(f"{where}: environment variable {name} is not on llamaforge's list of known knobs",
                      (f"did you mean {', '.join(close)}? " if close else "")
                      + "the list (README, 'Variant matrix') holds the llama.cpp / driver variables that change speed")
