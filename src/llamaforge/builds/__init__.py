"""Builds of llama.cpp: cached keyed builds (``builder``), verification (``verify``, ``smoke``) and the doctor
report (``doctor``). What differs per backend (CMake flags, tools, checks) is :mod:`llamaforge.backends`."""

from .builder import BuildOptions, build, find_build, list_builds
from .manifest import Build

__all__ = ["Build", "BuildOptions", "build", "find_build", "list_builds"]
