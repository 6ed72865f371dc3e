"""Builds of llama.cpp: toolchain discovery (``toolchain``), per-backend CMake flags
(``backends``), cached keyed builds (``builder``) and the doctor report (``doctor``)."""

from .builder import BuildOptions, build, find_build, list_builds
from .manifest import Build

__all__ = ["Build", "BuildOptions", "build", "find_build", "list_builds"]
