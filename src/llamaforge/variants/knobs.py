"""The environment variables a variant may set, and what each is seen to change.

Only the names below are accepted (one line naming the list otherwise): each is read by llama.cpp at
commit 0c1e57098 (``getenv`` in ``ggml/src/ggml-vulkan/ggml-vulkan.cpp``, ``ggml/src/ggml-cuda/``) or by
the GPU runtime / Vulkan loader underneath it. A misspelt name is silently ignored by llama.cpp, so a
variant carrying one would measure the default twice and call it a comparison; refusing unknown names
prevents that. Each backend declares its own (``llamaforge/backends/<backend>.py``); this module is their union.

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

from ..backends import EnvKnob, known
from ..errors import ConfigError

#: every backend's knobs (:attr:`~llamaforge.backends.Backend.env_knobs`), in the backends' order
ENV_KNOBS: tuple[EnvKnob, ...] = tuple(k for b in known() for k in b.env_knobs)

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
