"""Builds of llama.cpp: toolchain discovery (``toolchain``), per-backend CMake flags
(``backends``), cached keyed builds (``builder``) and the doctor report (``doctor``)."""

from .builder import Build, BuildOptions, build, find_build, list_builds

__all__ = ["Build", "BuildOptions", "build", "find_build", "list_builds"]
