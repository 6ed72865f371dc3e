"""A finished build and its manifest file: what every other module (bench, verify, bisect) reads.

Kept apart from :mod:`.builder` (which makes builds) so that :mod:`llamaforge.builds.verify`, which the
builder calls, can read and rewrite manifests without importing the builder back.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import BuildError

MANIFEST = "manifest.json"
MANIFEST_VERSION = 1


@dataclass
class Build:
    """A finished build: what other modules use to run llama.cpp binaries."""

    key: str
    backend: str
    commit: str
    pin: str
    dir: Path
    manifest: dict = field(default_factory=dict)

    def binary(self, name: str) -> Path:
        p = self.dir / "out" / "bin" / name
        if not p.exists():
            raise BuildError(f"{name} is not part of build {self.key}",
                             f"rebuild with `llamaforge build --backends {self.backend} --rebuild`")
        return p

    @property
    def env(self) -> dict[str, str]:
        """Extra environment to run this build's binaries (e.g. GGML_VK_VISIBLE_DEVICES for lavapipe)."""
        return dict((self.manifest.get("verification") or {}).get("runtime_env") or {})

    @property
    def source_dir(self) -> Path:
        """The llama.cpp tree this build was made from (its worktree)."""
        return Path((self.manifest.get("source") or {}).get("path") or self.dir / "src")

    @property
    def capabilities(self) -> dict:
        return dict(self.manifest.get("capabilities") or {})

    @classmethod
    def from_manifest(cls, d: Path, m: dict) -> Build:
        return cls(m["key"], m["backend"], m["commit"], m.get("pin", ""), d, m)


def read_manifest(d: Path) -> dict | None:
    """A valid manifest (parses, complete, binaries present with their recorded size) or None."""
    try:
        m = json.loads((d / MANIFEST).read_text())
    except (OSError, ValueError):
        return None
    if m.get("manifest_version") != MANIFEST_VERSION or m.get("status") != "ok":
        return None
    for b in (m.get("binaries") or {}).values():
        p = d / b["path"]
        try:
            if p.stat().st_size != b["size"]:
                return None
        except OSError:
            return None
    return m
