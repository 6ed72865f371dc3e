"""The backend protocol: what one llama.cpp backend (cpu, cuda, vulkan, …) knows about itself.

A :class:`Backend` owns everything that differs between backends — its CMake flags, the tools it needs
(its part of the toolchain probe and of the build key's fingerprint), how its devices are listed, what
verification expects of a build, the doctor's checks, the environment variables that tune it and the
runtime quirks that may apply to it. The rest of llamaforge asks the object (``backend.cmake_flags(tc,
opts)``, ``backend.doctor_checks(tc, host)``, ``backend.device_kind`` …) and never compares a backend's name:
``tests/unit/test_architecture.py`` fails on an ``if backend == "cuda"`` outside this package.

This module imports only foundations and the llama.cpp floor (:mod:`llamaforge.llamacpp`), so reports may
read the declarations (labels, order, colours) without loading anything that builds or measures.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Literal

from ..errors import ToolchainError
from ..llamacpp.quirks import QUIRKS, Quirk

if TYPE_CHECKING:
    from .toolchain import Toolchain

#: flags every build gets
COMMON_FLAGS: Mapping[str, str] = MappingProxyType({
    "LLAMA_BUILD_TESTS": "OFF",
    "LLAMA_BUILD_EXAMPLES": "OFF",
    "LLAMA_BUILD_SERVER": "ON",
    "LLAMA_BUILD_TOOLS": "ON",
    "LLAMA_USE_PREBUILT_UI": "OFF",   # would download the web UI at configure time
    "LLAMA_CURL": "OFF",              # older commits: no libcurl dependency
    "LLAMA_OPENSSL": "OFF",
    "BUILD_SHARED_LIBS": "OFF",       # self-contained binaries, hashed in the manifest
})

#: llama.cpp without its AMX code: the GGML_AMX_* options cover non-native builds; with GGML_NATIVE
#: (-march=native) the compiler enables AMX on an AMX CPU by itself, which -mno-amx-* undoes
NO_AMX_FLAGS: Mapping[str, str] = MappingProxyType({
    "GGML_AMX_TILE": "OFF", "GGML_AMX_INT8": "OFF", "GGML_AMX_BF16": "OFF",
    "CMAKE_C_FLAGS": "-mno-amx-tile -mno-amx-int8 -mno-amx-bf16",
    "CMAKE_CXX_FLAGS": "-mno-amx-tile -mno-amx-int8 -mno-amx-bf16",
})

#: what a problem list holds: (problem, fix)
Problem = tuple[str, str]
#: where a backend's compute runs: the host CPU (no device memory), a GPU, or other machines (rpc-server)
DeviceKind = Literal["cpu", "gpu", "remote"]
#: the label doctor gives a backend llamaforge declares but never built or ran
UNTESTED = "untested on real hardware"


@dataclass
class FlagOptions:
    """User choices that become CMake flags (and so part of the build key)."""

    build_type: str = "Release"
    native: bool = True
    cuda_archs: str | None = None        # e.g. "90" or "86;89"; None = native if a GPU is visible
    cuda_fa_all_quants: bool = False
    defines: dict[str, str] = field(default_factory=dict)   # extra -DKEY=VALUE
    no_amx: bool = False                 # compile without AMX (gcc < 13 × AMX CPUs: see llamacpp/quirks.py)


@dataclass(frozen=True)
class EnvKnob:
    """An environment variable a variant may set (:mod:`llamaforge.variants.knobs` lists every backend's)."""

    name: str
    backends: tuple[str, ...]        # where it acts ("*": any backend)
    what: str
    device_field: str | None = None  # the Vulkan device-line field it changes ("devices": the device list)
    expect: str | None = None        # the value that field must not keep, e.g. "NV_coopmat2"


@dataclass(frozen=True)
class HostFacts:
    """What doctor learnt about the host that backends running on its CPU report (e.g. AMX × gcc 12)."""

    cpu_warnings: tuple[Problem, ...] = ()


@dataclass
class DoctorCheck:
    """A backend's run-time part of ``llamaforge doctor``: can it run here, on which devices, and why not."""

    can_run: bool | None                 # None: not known (untested backends)
    devices: list[str] = field(default_factory=list)
    reasons: list[Problem] = field(default_factory=list)


def base_problems(tc: Toolchain) -> list[Problem]:
    """What every build needs: CMake and a C/C++ compiler."""
    out: list[Problem] = []
    if tc.cmake is None:
        out.append(("cmake >= 3.18 not found", "apt-get install cmake  (or: pip install cmake)"))
    if tc.cc is None or tc.cxx is None:
        out.append(("no C/C++ compiler", "apt-get install build-essential"))
    return out


class Backend:
    """One llama.cpp backend. Subclasses set the declarations and override the hooks they need."""

    name: str = ""
    label: str = ""                      # how reports and exports name it (llama.cpp's own name: "ROCm" for hip)
    device_prefix: str | None = None     # what `--list-devices` prints for its devices ("CUDA", "Vulkan")
    device_kind: DeviceKind = "gpu"
    tested: bool = True                  # False: declared (flags from llama.cpp's docs), never built or run here
    note: str = ""                       # what a user of an untested or partial backend must know
    flags: Mapping[str, str] = MappingProxyType({})   # its CMake switches (GGML_CUDA=ON …)
    extra_targets: tuple[str, ...] = ()  # targets it builds beyond llama-server / llama-bench, where present
    launcher_languages: tuple[str, ...] = ()   # compiler languages beyond C/C++ that ccache wraps ("CUDA")
    env_knobs: tuple[EnvKnob, ...] = ()
    demo: Literal["always", "if-available", ""] = ""   # whether ``demo`` builds it by default
    rank: int = 100                      # order: lower first (the numerator of a ratio, first in a report)
    color: str | None = None             # its colour in plots
    no_device_fix: str = "check the driver for this backend"

    def __repr__(self) -> str:
        return f"<backend {self.name}>"

    # ------------------------------------------------------------------ the build
    @property
    def switches(self) -> str:
        """Its ``GGML_*`` CMake switches as text (``GGML_CUDA=ON``), for messages."""
        return ", ".join(f"{k}={v}" for k, v in self.flags.items() if k.startswith("GGML_"))

    def probe(self, tc: Toolchain, explicit: Mapping[str, str | None]) -> None:
        """Find the tools this backend needs into ``tc`` (``explicit``: paths the user gave, by tool)."""

    def fingerprint(self, tc: Toolchain) -> dict[str, str]:
        """Versions of its own tools, for the build key (beside cmake, the generator and the compilers)."""
        return {}

    def tool_problems(self, tc: Toolchain, opts: FlagOptions | None) -> list[Problem]:
        """Why its own tools cannot build it here: (problem, fix) each."""
        return []

    def build_problems(self, tc: Toolchain, opts: FlagOptions | None = None) -> list[Problem]:
        """Why it cannot be built here: a list of (problem, fix); empty when it can."""
        return base_problems(tc) + self.tool_problems(tc, opts)

    def toolchain_flags(self, tc: Toolchain, opts: FlagOptions) -> dict[str, str]:
        """-D flags that point CMake at its tools (compiler paths, include dirs, architectures)."""
        return {}

    def cmake_flags(self, tc: Toolchain, opts: FlagOptions) -> dict[str, str]:
        """The -D flags of a build (without commit/build number, which come from the source); a
        :class:`~llamaforge.errors.ToolchainError` with the fix when it cannot be built here."""
        probs = self.build_problems(tc, opts)
        if probs:
            what, fix = probs[0]
            raise ToolchainError(f"cannot build {self.name}: {what}", fix)
        flags = dict(COMMON_FLAGS)
        flags["CMAKE_BUILD_TYPE"] = opts.build_type
        flags["GGML_NATIVE"] = "ON" if opts.native else "OFF"
        flags.update(self.flags)
        if opts.no_amx:
            flags.update(NO_AMX_FLAGS)
        flags.update(self.toolchain_flags(tc, opts))
        flags.update(opts.defines)
        return flags

    def build_capabilities(self, log_text: str, cmake_cache: str) -> dict:
        """What the build itself tells about the backend (from its log and CMake cache)."""
        return {}

    # ------------------------------------------------------------------ verification
    def hidden_device_env(self, env: Mapping[str, str]) -> dict[str, str] | None:
        """Environment that shows a device llama.cpp hides by default, to retry a build that sees none
        (None: nothing to retry)."""
        return None

    def verify_capabilities(self, device_names: list[str], retried: bool) -> dict:
        """Capabilities verification records for a build of this backend (``retried``: it needed
        :meth:`hidden_device_env`)."""
        return {}

    def binary_checks(self, binaries: Mapping[str, object]) -> tuple[dict, list[Problem]]:
        """Capabilities and (problem, fix) pairs from the binaries a build made (its manifest's ``binaries``):
        a backend whose own program must be there (the rpc backend's rpc-server) says so here."""
        return {}, []

    def cpu_device(self, manifest: Mapping) -> bool:
        """Whether a build's device is really the CPU (a Vulkan build on lavapipe), from its manifest."""
        return False

    def describe_capabilities(self, caps: Mapping) -> list[str]:
        """Lines ``llamaforge builds`` prints for a build's capabilities."""
        return []

    # ------------------------------------------------------------------ the host
    def host_devices(self) -> list[str]:
        """The devices of this backend the host shows outside llama.cpp (NVML, vulkaninfo)."""
        return []

    def doctor_checks(self, tc: Toolchain, host: HostFacts) -> DoctorCheck:
        """Can it run here: the run-time half of ``llamaforge doctor`` (the build half is :meth:`build_problems`)."""
        if not self.tested:
            return DoctorCheck(None, reasons=[(f"{UNTESTED}: declared by llamaforge, never built or run by it",
                                               self.note or "see llama.cpp's build docs")])
        if self.device_kind == "cpu":
            return DoctorCheck(True, reasons=list(host.cpu_warnings))
        devices = self.host_devices()
        return DoctorCheck(bool(devices), devices)

    # ------------------------------------------------------------------ runtime
    @property
    def quirks(self) -> tuple[Quirk, ...]:
        """The runtime quirks (:mod:`llamaforge.llamacpp.quirks`) that may be tried on its builds."""
        return tuple(q for q in QUIRKS if q.backends is None or self.name in q.backends)

    @property
    def offloads(self) -> bool:
        """Whether layers go to a device other than the host CPU (a VRAM budget, ``--n-cpu-moe`` mean something)."""
        return self.device_kind != "cpu"
