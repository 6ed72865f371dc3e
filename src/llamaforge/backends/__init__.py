"""llama.cpp's backends, one :class:`Backend` object each (``base``: the protocol; ``cpu``, ``cuda``, ``vulkan``,
``blas``, ``rpc``; ``untested``: hip, sycl, metal), looked up by name in ``registry``. ``toolchain`` finds the
tools (import it where a build needs them: it loads scikit-build-core)."""

from .base import UNTESTED, Backend, DoctorCheck, EnvKnob, FlagOptions, HostFacts
from .registry import find, get, known, label, names, parse, rank

__all__ = ["UNTESTED", "Backend", "DoctorCheck", "EnvKnob", "FlagOptions", "HostFacts", "find", "get", "known",
           "label", "names", "parse", "rank"]
