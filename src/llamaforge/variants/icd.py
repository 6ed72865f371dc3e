"""Driver choice as a knob, with limits: which Vulkan ICD manifests a variant may name, and which
environment variables no variant, fleet host or stored run may set at all (SECURITY.md, "Driver choice").

``VK_DRIVER_FILES`` / ``VK_ICD_FILENAMES`` name ICD manifests (JSON) whose ``ICD.library_path`` the Vulkan
loader ``dlopen``\\ s into llama.cpp: a manifest anywhere is a shared object of anyone's choosing loaded into
every process. So a manifest is accepted only

* from the Vulkan loader's system ICD folders (``LoaderDriverInterface.md``, "Driver Discovery on Linux":
  ``$XDG_CONFIG_DIRS/vulkan/icd.d`` (``/etc/xdg``), ``/etc/vulkan/icd.d``, ``/usr/local/etc/vulkan/icd.d``,
  ``$XDG_DATA_DIRS/vulkan/icd.d`` (``/usr/local/share``, ``/usr/share``)) — the home folders the loader also
  reads are left out: a variants file must not reach them;
* and only when the library it names is a bare name (found by the system's library search) or a file
  inside the system library folders or those ICD folders (symlinks resolved);
* anything else only when the user names that manifest on the command line: ``llamaforge --allow-icd PATH``
  (or ``LLAMAFORGE_ALLOW_ICD`` in their own shell; no variants file, fleet host or store can set either).

``AMD_VULKAN_ICD`` takes only ``RADV`` or ``AMDVLK``. Layer paths, preload-like variables and the ones
that choose a program (:data:`REFUSED`) are refused wherever a file could set them.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from ..errors import ConfigError

#: the variables that name ICD manifests (``VK_ADD_DRIVER_FILES`` is refused: see REFUSED)
ICD_VARS = ("VK_DRIVER_FILES", "VK_ICD_FILENAMES")
AMD_ICD_VALUES = ("RADV", "AMDVLK")
ALLOW_ENV = "LLAMAFORGE_ALLOW_ICD"
MAX_MANIFEST = 64 * 1024
_SYSTEM_LIBS = ("/usr/lib", "/usr/lib32", "/usr/lib64", "/lib", "/lib32", "/lib64", "/usr/local/lib",
                "/usr/local/lib64")

#: variables that load code (preload, audit, library paths, Vulkan layers, extra drivers) or choose a program
#: that runs: refused in a variant, a fleet host's env and a stored run, whatever else would accept them
_LOADS_CODE = ("LD_PRELOAD", "LD_LIBRARY_PATH", "LD_AUDIT", "LD_PROFILE", "LD_DEBUG_OUTPUT",
               "VK_LAYER_PATH", "VK_ADD_LAYER_PATH", "VK_IMPLICIT_LAYER_PATH", "VK_ADD_IMPLICIT_LAYER_PATH",
               "VK_INSTANCE_LAYERS", "VK_LOADER_LAYERS_ENABLE", "VK_LOADER_LAYERS_DISABLE", "VK_ADD_DRIVER_FILES",
               "VK_LOADER_DRIVERS_SELECT", "GLIBC_TUNABLES", "MALLOC_CONF", "PYTHONPATH", "PYTHONSTARTUP", "PYTHONHOME",
               "BASH_ENV", "ENV", "GCONV_PATH", "HOSTALIASES", "CUDA_INJECTION64_PATH", "OCL_ICD_FILENAMES",
               "OCL_ICD_VENDORS", "ROCM_PATH", "HIP_PATH", "HSA_TOOLS_LIB", "GIT_EXEC_PATH", "GIT_SSH_COMMAND")
_CHOOSES_PROGRAM = ("PATH", "LLAMAFORGE_GLSLC", "LLAMAFORGE_BUILD_ROOT", "LLAMAFORGE_VULKAN_INCLUDE",
                    "LLAMAFORGE_CONFIG", ALLOW_ENV, "CC", "CXX", "CUDACXX", "NVCC_PREPEND_FLAGS", "NVCC_APPEND_FLAGS",
                    "CMAKE_PREFIX_PATH", "SHELL", "EDITOR", "PAGER", "GIT_CONFIG_GLOBAL", "GIT_CONFIG_SYSTEM")
REFUSED = frozenset(_LOADS_CODE + _CHOOSES_PROGRAM)
_REFUSED_PREFIXES = ("LD_", "DYLD_", "GIT_CONFIG_", "VK_LOADER_")


def refused_why(name: str) -> str | None:
    """Why ``name`` may not be set from a file (None: not one of those)."""
    if name in _CHOOSES_PROGRAM:
        return "chooses a program or code that runs"
    if name in _LOADS_CODE or name.startswith(_REFUSED_PREFIXES) or name.endswith("_LAYER_PATH"):
        return "loads code into every process (a preload, library path, Vulkan layer or extra driver)"
    return None


def refuse(name: str, where: str, fix: str) -> None:
    """One line when ``name`` is a variable no file may set."""
    why = refused_why(name)
    if why:
        raise ConfigError(f"{where}: {name} is refused: it {why}", fix)


def icd_folders() -> tuple[Path, ...]:
    """The Vulkan loader's system ICD folders (module doc), in its search order, without duplicates."""
    config = os.environ.get("XDG_CONFIG_DIRS") or "/etc/xdg"
    data = os.environ.get("XDG_DATA_DIRS") or "/usr/local/share:/usr/share"
    dirs = [*(Path(d) / "vulkan" / "icd.d" for d in config.split(":") if d.startswith("/")),
            Path("/etc/vulkan/icd.d"), Path("/usr/local/etc/vulkan/icd.d"),
            *(Path(d) / "vulkan" / "icd.d" for d in data.split(":") if d.startswith("/")),
            Path("/usr/share/vulkan/icd.d"), Path("/usr/local/share/vulkan/icd.d")]
    return tuple(dict.fromkeys(dirs))


def allowed_by_user() -> set[str]:
    """The manifests the user named with ``--allow-icd`` (comma-separated; real paths)."""
    raw = os.environ.get(ALLOW_ENV) or ""
    return {os.path.realpath(p.strip()) for p in raw.split(",") if p.strip()}


def _inside(path: str, folders: tuple[str, ...]) -> bool:
    return any(path == f or path.startswith(f.rstrip("/") + "/") for f in folders)


def _problem(manifest: str) -> str | None:
    """Why ``manifest`` is not a system ICD manifest naming a system library (None: it is one)."""
    real = os.path.realpath(manifest)
    folders = tuple(os.path.realpath(d) for d in icd_folders())
    if not os.path.isabs(manifest):
        return "is not an absolute path"
    if not _inside(real, folders):
        return "is not in the system's Vulkan ICD folders (" + ", ".join(str(d) for d in icd_folders()[:4]) + ", …)"
    try:
        with open(real, "rb") as f:
            data = f.read(MAX_MANIFEST + 1)
    except OSError as e:
        return f"cannot be read ({e.strerror or e})"
    if len(data) > MAX_MANIFEST:
        return f"is larger than {MAX_MANIFEST // 1024} KiB (not an ICD manifest)"
    try:
        doc = json.loads(data)
        lib = doc["ICD"]["library_path"]
        if not isinstance(lib, str) or not lib:
            raise TypeError
    except (ValueError, TypeError, KeyError, RecursionError):
        return "is not an ICD manifest (no ICD.library_path)"
    if "/" not in lib:
        return None                      # a bare name: the system's library search finds it
    target = os.path.realpath(lib if os.path.isabs(lib) else os.path.join(os.path.dirname(real), lib))
    if not _inside(target, tuple(os.path.realpath(d) for d in _SYSTEM_LIBS) + folders):
        return f"names a library outside the system library folders ({lib})"
    return None


def check_icd(name: str, value: str, where: str) -> None:
    """``VK_DRIVER_FILES`` / ``VK_ICD_FILENAMES`` / ``AMD_VULKAN_ICD`` within their limits (module doc)."""
    if name == "AMD_VULKAN_ICD":
        if value.strip().upper() not in AMD_ICD_VALUES:
            raise ConfigError(f"{where}: AMD_VULKAN_ICD={value!r} is not RADV or AMDVLK",
                              "give AMD_VULKAN_ICD=RADV or AMD_VULKAN_ICD=AMDVLK")
        return
    if name not in ICD_VARS:
        return
    allowed = allowed_by_user()
    for manifest in (m for m in value.split(":") if m):
        if os.path.realpath(manifest) in allowed:
            continue
        why = _problem(manifest)
        if why:
            raise ConfigError(f"{where}: {name}: the ICD manifest {manifest!r} {why}; a manifest names a shared "
                              "library the Vulkan loader loads into llama.cpp",
                              f"use a driver installed in the system's ICD folders, or name this manifest on the "
                              f"command line: `llamaforge --allow-icd {manifest} …`")
