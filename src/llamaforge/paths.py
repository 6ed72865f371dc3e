"""Where things live.

* The **workspace** is the folder holding ``pins.toml`` (searched upwards from the current
  directory; ``LLAMAFORGE_WORKSPACE`` overrides). Per-workspace outputs live beside it:
  ``vendor/`` (source worktrees), ``build/`` (build directories), ``results/`` (the store and
  reports), ``models/`` (synthetic models). All are git-ignored.
* The **cache** (``LLAMAFORGE_CACHE``, default ``~/.cache/llamaforge``) holds heavy things shared
  by every workspace and kept across clean clones: the bare git mirror, downloaded sdists and
  tarballs, ccache, downloaded models, Vulkan headers.

``LLAMAFORGE_BUILD_ROOT`` moves build directories (CI points it into the cache so re-runs reuse
builds) and ``LLAMAFORGE_RESULTS`` moves the store.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

PINS_FILE = "pins.toml"


def cache_root() -> Path:
    p = Path(os.environ.get("LLAMAFORGE_CACHE") or Path.home() / ".cache" / "llamaforge")
    try:
        p.mkdir(parents=True, exist_ok=True)
    except OSError as e:     # read-only, full, or a file in the way: one line, not a traceback
        from .errors import ConfigError

        raise ConfigError(f"cannot create the cache folder {p}: {e.strerror or e}",
                          "set LLAMAFORGE_CACHE to a writable folder") from None
    return p


def find_workspace(start: Path | None = None) -> Path:
    env = os.environ.get("LLAMAFORGE_WORKSPACE")
    if env:
        return Path(env).resolve()
    here = (start or Path.cwd()).resolve()
    for d in (here, *here.parents):
        if (d / PINS_FILE).is_file():
            return d
    return here


def _under(base: str, name: str, env: str | None = None) -> property:
    """A read-only :class:`Paths` attribute: ``name`` under its attribute ``base`` (``workspace``, ``results`` or
    ``cache``), unless the environment variable ``env`` names another place."""
    def get(self: Paths) -> Path:
        moved = os.environ.get(env) if env else None
        return Path(moved) if moved else getattr(self, base) / name
    return property(get)


@dataclass(frozen=True)
class Paths:
    workspace: Path

    # the workspace's
    pins_file = _under("workspace", PINS_FILE)
    vendor = _under("workspace", "vendor")
    builds = _under("workspace", "build", env="LLAMAFORGE_BUILD_ROOT")
    results = _under("workspace", "results", env="LLAMAFORGE_RESULTS")
    models = _under("workspace", "models")
    store_db = _under("results", "llamaforge.sqlite")
    # the cache's (shared by every workspace)
    mirror = _under("cache", "mirror.git")
    ccache_dir = _under("cache", "ccache")
    model_cache = _under("cache", "models")

    @classmethod
    def default(cls) -> Paths:
        return cls(find_workspace())

    @property
    def cache(self) -> Path:
        return cache_root()

    @property
    def downloads(self) -> Path:
        p = self.cache / "downloads"
        p.mkdir(parents=True, exist_ok=True)
        return p
