"""A variant bound to its build: what the sweep measures as one series.

:class:`VariantBuild` is a build (``key``, ``backend``, ``binary()`` … of the real build, so variants that
differ only at run time share one build and one build key) whose environment is the build's plus the
variant's, and whose extra arguments (:meth:`args_for`) go to every llama.cpp binary it runs: llama-server
and llama-bench as written (they were checked against that binary's ``--help``), llama-fit-params the
options it lists (``-fa``/``-ctk`` change the memory a context needs, so the fit must see them).

The sweep stores its points under the real build key with the variant's name as the point's ``label``
(:func:`series_label`), so one run holds one series per variant and old stores read as before.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

from .model import Variant, parse_args

T = TypeVar("T")

#: llama-server's log verbosity for variant runs: 4 ("trace") prints llama.cpp's INFO lines (llama_context, KV cache)
OBSERVE_VERBOSITY = 4


class _FromBuild(Generic[T]):
    """A read-only attribute of a :class:`VariantBuild` that is its build's attribute of the same name,
    converted (``key = _FromBuild(str)``: ``str(self.build.key)``)."""

    def __init__(self, convert: Callable[[Any], T]) -> None:
        self.convert = convert
        self.name = ""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, obj: Any, owner: type | None = None) -> T:
        if obj is None:   # looked up on the class
            return self  # type: ignore[return-value]
        return self.convert(getattr(obj.build, self.name))


def _same(value: Any) -> Any:
    return value


@dataclass(frozen=True)
class VariantBuild:
    build: Any
    variant: Variant
    devices: dict | None = None         # llama-bench --list-devices with the variant's environment (observe)
    base_devices: dict | None = None    # … with the build's own environment

    # the real build's own attributes, as the sweep reads them from a build
    key = _FromBuild(str)
    backend = _FromBuild(str)
    commit = _FromBuild(str)
    pin = _FromBuild(str)
    dir = _FromBuild(Path)
    manifest = _FromBuild(_same)   # the build's own dict, not a copy
    source_dir = _FromBuild(Path)

    def binary(self, name: str) -> Path:
        return Path(self.build.binary(name))

    @property
    def env(self) -> dict[str, str]:
        return {**dict(self.build.env), **self.variant.env_dict}

    @property
    def name(self) -> str:
        return self.variant.name

    def args_for(self, binary: str) -> list[str]:
        """The variant's arguments for ``binary`` (llama-fit-params: only the options it lists). llama-server
        also gets ``-lv 4``: at its default verbosity it does not log the resolved settings (flash attention,
        KV types and buffers) that show whether a knob took effect (:mod:`.observe`); measured here, that adds
        ~17 log lines per request and no measurable cost."""
        from ..llamacpp.options import build_options

        if binary == "llama-bench":
            return list(self.variant.args)
        if binary == "llama-server":
            opts = build_options(self.build).server
            loud = [] if {"-lv", "--verbosity", "--log-verbosity"} & {o for o, _v in parse_args(list(self.variant.args))} \
                else next(([o, str(OBSERVE_VERBOSITY)] for o in ("-lv", "--verbosity") if o in opts), [])
            return list(self.variant.args) + loud
        have = build_options(self.build).fit_params or frozenset()
        out: list[str] = []
        for opt, val in parse_args(list(self.variant.args)):
            if opt in have:
                out += [opt] + ([val] if val is not None else [])
        return out

    def to_record(self) -> dict:
        """What the run's plan keeps of it (``Plan.variants``)."""
        return {**self.variant.to_dict(), "build": self.key, "devices": self.devices, "base_devices": self.base_devices}


def variant_args(build: Any, binary: str) -> list[str]:
    """The extra arguments ``build`` adds for ``binary`` when it is a variant (``[]`` for a plain build)."""
    return build.args_for(binary) if isinstance(build, VariantBuild) else []


def series_key(build: Any) -> str:
    """A series' id where series are keyed by build (the adaptive sweep): the build key, ``KEY#NAME`` for a variant."""
    return f"{build.key}#{build.variant.name}" if isinstance(build, VariantBuild) else str(build.key)


def series_label(build: Any, default: str = "") -> str:
    """The point label of a build's series: the variant's name, else ``default``."""
    return build.variant.name if isinstance(build, VariantBuild) else default
