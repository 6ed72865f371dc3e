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


@dataclass(frozen=True)
class Paths:
    workspace: Path

    @classmethod
    def default(cls) -> Paths:
        return cls(find_workspace())

    @property
    def pins_file(self) -> Path:
        return self.workspace / PINS_FILE

    @property
    def vendor(self) -> Path:
        return self.workspace / "vendor"

    @property
    def builds(self) -> Path:
        env = os.environ.get("LLAMAFORGE_BUILD_ROOT")
        return Path(env) if env else self.workspace / "build"

    @property
    def results(self) -> Path:
        env = os.environ.get("LLAMAFORGE_RESULTS")
        return Path(env) if env else self.workspace / "results"

    @property
    def store_db(self) -> Path:
        return self.results / "llamaforge.sqlite"

    @property
    def models(self) -> Path:
        return self.workspace / "models"

    @property
    def cache(self) -> Path:
        return cache_root()

    @property
    def mirror(self) -> Path:
        return self.cache / "mirror.git"

    @property
    def downloads(self) -> Path:
        p = self.cache / "downloads"
        p.mkdir(parents=True, exist_ok=True)
        return p

    @property
    def ccache_dir(self) -> Path:
        return self.cache / "ccache"

    @property
    def model_cache(self) -> Path:
        return self.cache / "models"
