"""``pins.toml``: named pins -> llama.cpp commits and where to get them.

A pin is the unit the user names (``default``, ``b6000``, ...). Its ``sources`` are tried in
order by :mod:`llamaforge.sources`.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from .errors import ConfigError

UPSTREAM_URL = "https://github.com/ggml-org/llama.cpp"
SOURCE_KINDS = ("git", "path", "tarball", "pypi")
_HEX = re.compile(r"^[0-9a-f]{7,40}$")


@dataclass(frozen=True)
class SourceSpec:
    """One place a commit can come from: ``kind`` in SOURCE_KINDS and its argument."""

    kind: str
    arg: str = ""
    sha256: str | None = None

    @classmethod
    def parse(cls, text: str, *, where: str = "pins.toml") -> SourceSpec:
        kind, _, arg = text.partition(":")
        kind = kind.strip()
        if kind not in SOURCE_KINDS:
            raise ConfigError(f"{where}: unknown source kind {kind!r} in {text!r}",
                              f"use one of {', '.join(SOURCE_KINDS)} (e.g. \"git\", \"pypi:llama-cpp-python==0.3.36\")")
        arg = arg.strip()
        if kind == "git" and not arg:
            arg = UPSTREAM_URL
        if kind in ("path", "tarball") and not arg:
            raise ConfigError(f"{where}: source {text!r} needs an argument", f"write \"{kind}:/path/or/url\"")
        if kind == "pypi" and not re.fullmatch(r"[A-Za-z0-9_.-]+==[A-Za-z0-9_.+-]+", arg):
            raise ConfigError(f"{where}: pypi source {text!r} must name an exact version",
                              "write \"pypi:llama-cpp-python==0.3.36\"")
        return cls(kind, arg)

    def __str__(self) -> str:
        return f"{self.kind}:{self.arg}" if self.arg else self.kind


@dataclass(frozen=True)
class Pin:
    name: str
    commit: str
    sources: tuple[SourceSpec, ...]
    build_number: int | None = None
    description: str = ""

    @property
    def short(self) -> str:
        return self.commit[:9]


@dataclass
class Pins:
    pins: dict[str, Pin] = field(default_factory=dict)
    default: str = "default"
    path: Path | None = None

    def get(self, name: str | None) -> Pin:
        name = name or self.default
        if name in self.pins:
            return self.pins[name]
        raise ConfigError(f"unknown pin {name!r}" + (f" in {self.path}" if self.path else ""),
                          f"use one of: {', '.join(sorted(self.pins)) or '(none defined)'}, or add [pins.{name}] to pins.toml")

    def resolve(self, ref: str | None) -> Pin:
        """A pin name, or a bare commit hash (then the default pin's sources are used)."""
        if ref is None or ref in self.pins:
            return self.get(ref)
        if _HEX.match(ref.lower()):
            base = self.get(None)
            return Pin(name=ref[:9], commit=ref.lower(), sources=base.sources, build_number=None)
        return self.get(ref)


def parse_pins(text: str, path: Path | None = None) -> Pins:
    where = str(path or "pins.toml")
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{where} is not valid TOML: {e}", "fix the syntax (see the comments at the top of pins.toml)") from e
    raw = data.get("pins")
    if not isinstance(raw, dict) or not raw:
        raise ConfigError(f"{where} defines no pins", "add a table like [pins.default] with commit = \"...\" and sources = [...]")
    pins: dict[str, Pin] = {}
    for name, body in raw.items():
        if not isinstance(body, dict):
            raise ConfigError(f"{where}: pins.{name} must be a table", f"write [pins.{name}] with commit and sources")
        commit = str(body.get("commit", "")).strip().lower()
        if not _HEX.match(commit):
            raise ConfigError(f"{where}: pins.{name}.commit {body.get('commit')!r} is not a commit hash",
                              "use a full or abbreviated (>= 7 hex digits) llama.cpp commit")
        srcs = body.get("sources", ["git"])
        if isinstance(srcs, str) or not isinstance(srcs, list) or not srcs:
            raise ConfigError(f"{where}: pins.{name}.sources must be a non-empty list", "e.g. sources = [\"git\"]")
        sha = body.get("sha256", {}) or {}
        specs = []
        for s in srcs:
            spec = SourceSpec.parse(str(s), where=f"{where}: pins.{name}")
            if isinstance(sha, dict) and str(s) in sha:
                spec = SourceSpec(spec.kind, spec.arg, str(sha[str(s)]).lower())
            specs.append(spec)
        bn = body.get("build_number")
        if bn is not None and not isinstance(bn, int):
            raise ConfigError(f"{where}: pins.{name}.build_number must be an integer", "e.g. build_number = 6000")
        pins[name] = Pin(name=name, commit=commit, sources=tuple(specs), build_number=bn,
                         description=str(body.get("description", "")))
    default = str(data.get("default", "default" if "default" in pins else next(iter(pins))))
    if default not in pins:
        raise ConfigError(f"{where}: default pin {default!r} is not defined", f"set default to one of {', '.join(pins)}")
    return Pins(pins=pins, default=default, path=path)


def load_pins(path: Path) -> Pins:
    if not path.is_file():
        raise ConfigError(f"no pins file at {path}", "run llamaforge in a folder with pins.toml or set LLAMAFORGE_WORKSPACE")
    return parse_pins(path.read_text(encoding="utf-8"), path)
