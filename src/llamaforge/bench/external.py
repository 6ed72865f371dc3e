"""Bring-your-own binaries: a folder of llama.cpp binaries used as a build (``--bin-dir``).

For llama.cpp built outside llamaforge (a distribution package, a hand build). The commit and
build number come from ``llama-server --version``; the key is ``ext-<backend>-<commit>-<hash of
the folder>`` so two folders never share a key.
"""

from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from .. import proc
from ..builds.manifest import Build
from ..errors import BenchError


@dataclass
class ExternalBuild(Build):
    """A :class:`~llamaforge.builds.Build` whose binaries sit directly in ``dir`` (no manifest of ours)."""

    extra_env: dict[str, str] = field(default_factory=dict)

    def binary(self, name: str) -> Path:
        p = self.dir / name
        if not p.exists():
            raise BenchError(f"{name} not found in {self.dir}", "point --bin-dir at llama.cpp's build/bin folder")
        return p

    @property
    def env(self) -> dict[str, str]:
        return dict(self.extra_env)


def external_build(bin_dir: Path, backend: str, env: dict[str, str] | None = None) -> ExternalBuild:
    """An :class:`ExternalBuild` for ``bin_dir`` (must hold at least llama-server or llama-bench)."""
    d = Path(bin_dir).expanduser().resolve()
    if not any((d / n).exists() for n in ("llama-server", "llama-bench")):
        raise BenchError(f"no llama-server or llama-bench in {d}", "point --bin-dir at llama.cpp's build/bin folder")
    exe = d / "llama-server" if (d / "llama-server").exists() else d / "llama-bench"
    r = proc.run([exe, "--version"], env=env, timeout=60)
    m = re.search(r"build (\d+), commit ([0-9a-f]+)", r.output) or re.search(r"version: (\d+) \(([0-9a-f]+)\)", r.output)
    number, commit = (int(m.group(1)), m.group(2)) if m else (0, "unknown")
    h = hashlib.sha1(os.fsencode(str(d))).hexdigest()[:6]
    key = f"ext-{backend}-{commit[:9]}-{h}"
    manifest = {"key": key, "backend": backend, "commit": commit, "pin": "external", "build_number": number,
                "dir": str(d), "external": True, "version_output": r.output.strip()[-400:]}
    return ExternalBuild(key, backend, commit, "external", d, manifest, dict(env or {}))
