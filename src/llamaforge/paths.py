"""Where things live.

Three per-user places, named by the platform's conventions (``platformdirs``; on Linux the XDG folders):

* **config** (``LLAMAFORGE_CONFIG``, ``--config-dir``; default ``~/.config/llamaforge``): an optional
  ``pins.toml`` of the user's own and an optional ``config.toml`` (``[paths]``: ``cache``, ``data``, ``builds``).
* **cache** (``LLAMAFORGE_CACHE``, ``--cache-dir``; default ``~/.cache/llamaforge``): heavy things shared by
  every folder and kept across clean clones: the bare git mirror, downloaded sdists and tarballs, ccache,
  downloaded models, Vulkan headers, and — outside a workspace — source worktrees and builds.
* **data** (``LLAMAFORGE_DATA``, ``--data-dir``; default ``~/.local/share/llamaforge``): the results store and
  its reports, outside a workspace.

A **workspace** is the nearest folder, upwards from the current one, that holds ``pins.toml`` or
``llamaforge.toml`` (``LLAMAFORGE_WORKSPACE`` names one outright). Nothing requires one. Inside one, its own
outputs live beside it (``vendor/``, ``build/``, ``results/``, ``models/``, all git-ignored), its
``pins.toml`` replaces the shipped pins, and its ``llamaforge.toml`` ``[paths]`` table overrides the user's.
Outside one, everything goes to the per-user places and the pins are the user's or the shipped ones.

``LLAMAFORGE_BUILD_ROOT`` moves build directories and ``LLAMAFORGE_RESULTS`` the results folder (CI points
both into the cache so re-runs reuse them). An environment variable beats a ``[paths]`` entry, which beats
the platform default.
"""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import platformdirs

from .errors import ConfigError
from .files import folder_problem

PINS_FILE = "pins.toml"
CONFIG_FILE = "llamaforge.toml"        # a workspace's settings (and a workspace marker without pins.toml)
USER_CONFIG_FILE = "config.toml"       # the same [paths] table, in the user's config folder
APP = "llamaforge"
#: ``[paths]`` keys → the environment variable that beats them
PATH_KEYS = {"cache": "LLAMAFORGE_CACHE", "data": "LLAMAFORGE_DATA", "builds": "LLAMAFORGE_BUILD_ROOT"}


def shipped_pins_file() -> Path:
    """The release pins shipped inside the package (checked llama-cpp-python releases)."""
    return Path(str(resources.files("llamaforge") / "data" / PINS_FILE))


def config_dir() -> Path:
    return Path(os.environ.get("LLAMAFORGE_CONFIG") or platformdirs.user_config_dir(APP, appauthor=False))


def _made(p: Path, env: str, what: str) -> Path:
    """``p`` created, or one line saying why it cannot be (:func:`~llamaforge.files.folder_problem`)."""
    fix = f"set {env} (or the matching --{what}-dir flag) to a writable folder"
    problem = folder_problem(p, need_free=False)   # what is cached stays readable on a full disk
    if problem is not None:
        raise ConfigError(f"cannot create the {what} folder {p}{problem[0]}", f"{problem[1]}: {fix}")
    try:
        p.mkdir(parents=True, exist_ok=True)
    except OSError as e:     # a race, or a filesystem that says no late: one line, not a traceback
        raise ConfigError(f"cannot create the {what} folder {p}: {e.strerror or e}", fix) from None
    return p


def find_workspace(start: Path | None = None) -> Path | None:
    """The workspace folder, or None when there is none (``LLAMAFORGE_WORKSPACE`` names one outright)."""
    env = os.environ.get("LLAMAFORGE_WORKSPACE")
    if env:
        return Path(env).expanduser().resolve()
    here = (start or Path.cwd()).resolve()
    for d in (here, *here.parents):
        if (d / PINS_FILE).is_file() or (d / CONFIG_FILE).is_file():
            return d
    return None


def read_paths_table(file: Path) -> dict[str, Path]:
    """The ``[paths]`` table of a settings file (relative paths are taken from the file's folder); {} when the
    file is absent. Written by others: an unknown key, a non-string value or bad TOML is one line."""
    if not file.is_file():
        return {}
    from .config import read_config_text

    try:
        data = tomllib.loads(read_config_text(file, file.name))
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{file} is not valid TOML: {e}", "fix the syntax (`llamaforge init` writes a commented one)") \
            from None
    unknown = set(data) - {"paths"}
    table = data.get("paths", {})
    if unknown or not isinstance(table, dict):
        raise ConfigError(f"{file}: only a [paths] table is understood, not {sorted(unknown) or table!r:.60}",
                          f"keep [paths] with {', '.join(PATH_KEYS)} (see `llamaforge init`)")
    out = {}
    for key, value in table.items():
        if key not in PATH_KEYS or not isinstance(value, str) or not value.strip():
            raise ConfigError(f"{file}: [paths] {key} = {value!r:.60} is not understood",
                              f"give folders as strings; known keys: {', '.join(PATH_KEYS)}")
        p = Path(value).expanduser()
        out[key] = p if p.is_absolute() else file.parent / p
    return out


def _settings_files(workspace: Path | None) -> list[Path]:
    """The settings files whose ``[paths]`` count, the first that names a place winning: the workspace's, the user's."""
    return ([workspace / CONFIG_FILE] if workspace else []) + [config_dir() / USER_CONFIG_FILE]


def _configured(key: str, workspace: Path | None) -> Path | None:
    """Where ``key`` was moved to: its environment variable, else the workspace's, else the user's ``[paths]``."""
    env = os.environ.get(PATH_KEYS[key])
    if env:
        return Path(env).expanduser()
    for file in _settings_files(workspace):
        found = read_paths_table(file).get(key)
        if found is not None:
            return found
    return None


def _settings_state(workspace: Path | None) -> tuple:
    """What the cache folder depends on, cheaply: the variables and the settings files' identities (a stat each)."""
    stats = []
    for file in _settings_files(workspace):
        try:
            st = file.stat()
            stats.append((str(file), st.st_mtime_ns, st.st_size, st.st_ino))
        except OSError:
            stats.append((str(file), None))
    return workspace, os.environ.get("LLAMAFORGE_CACHE"), platformdirs.user_cache_dir(APP, appauthor=False), tuple(stats)


_CACHE_ROOTS: dict[tuple, Path] = {}


def cache_root(workspace: Path | None = None) -> Path:
    """The cache folder (created); ``workspace`` whose settings count (default: the current one, if any).
    Settled once per settings state: a hot path (every place under the cache asks) reads no file twice."""
    ws = workspace if workspace is not None else find_workspace()
    key = _settings_state(ws)
    found = _CACHE_ROOTS.get(key)
    if found is None or not found.is_dir():
        p = _configured("cache", ws) or Path(key[2])
        found = _CACHE_ROOTS[key] = _made(p, "LLAMAFORGE_CACHE", "cache")
    return found


def data_root(workspace: Path | None = None) -> Path:
    return _configured("data", workspace) or Path(platformdirs.user_data_dir(APP, appauthor=False))


@dataclass(frozen=True)
class Paths:
    """The places of one run. ``anchored``: ``workspace`` is a real workspace (its outputs live in it);
    otherwise it is just the current folder and every output goes to the per-user places."""

    workspace: Path
    anchored: bool = True

    @classmethod
    def default(cls) -> Paths:
        ws = find_workspace()
        return cls(ws, True) if ws is not None else cls(Path.cwd(), False)

    @property
    def _ws(self) -> Path | None:
        return self.workspace if self.anchored else None

    @property
    def pins_file(self) -> Path:
        """The pins in force: the workspace's ``pins.toml``, else the user's, else the shipped release pins."""
        for f in ([self.workspace / PINS_FILE] if self.anchored else []) + [config_dir() / PINS_FILE]:
            if f.is_file():
                return f
        return shipped_pins_file()

    @property
    def workspace_pins(self) -> Path | None:
        """The workspace's own ``pins.toml`` when there is one (what a fleet host is sent)."""
        f = self.workspace / PINS_FILE
        return f if self.anchored and f.is_file() else None

    def _here_or(self, name: str, per_user: Path) -> Path:
        return self.workspace / name if self.anchored else per_user

    @property
    def vendor(self) -> Path:
        return self._here_or("vendor", self.cache / "worktrees")

    @property
    def builds(self) -> Path:
        return _configured("builds", self._ws) or self._here_or("build", self.cache / "builds")

    @property
    def results(self) -> Path:
        moved = os.environ.get("LLAMAFORGE_RESULTS")
        if moved:
            return Path(moved).expanduser()
        data = _configured("data", self._ws)
        if data is not None:
            return data / "results"
        return self._here_or("results", data_root() / "results")

    @property
    def models(self) -> Path:
        return self._here_or("models", self.cache / "synthetic-models")

    @property
    def store_db(self) -> Path:
        return self.results / "llamaforge.sqlite"

    @property
    def cache(self) -> Path:
        return cache_root(self._ws)

    @property
    def mirror(self) -> Path:
        return self.cache / "mirror.git"

    @property
    def ccache_dir(self) -> Path:
        return self.cache / "ccache"

    @property
    def model_cache(self) -> Path:
        return self.cache / "models"

    @property
    def downloads(self) -> Path:
        p = self.cache / "downloads"
        p.mkdir(parents=True, exist_ok=True)
        return p

    def places(self) -> list[tuple[str, str, str]]:
        """(what, where, how to move it) of every place, for ``doctor``."""
        ws = str(self.workspace) if self.anchored else "none (the per-user places below)"
        rows = [("workspace", ws, "a folder with pins.toml or llamaforge.toml; LLAMAFORGE_WORKSPACE"),
                ("config", config_dir(), "LLAMAFORGE_CONFIG, --config-dir"),
                ("pins", self.pins_file, "pins.toml in the workspace or config folder (`llamaforge init`)"),
                ("cache", self.cache, "LLAMAFORGE_CACHE, --cache-dir, [paths] cache"),
                ("builds", self.builds, "LLAMAFORGE_BUILD_ROOT, [paths] builds"),
                ("results store", self.store_db, "LLAMAFORGE_DATA, --data-dir, [paths] data; LLAMAFORGE_RESULTS"),
                ("models", self.model_cache, "LLAMAFORGE_CACHE (Hugging Face files: also its own cache, HF_HOME)")]
        return [(what, str(where), how) for what, where, how in rows]
