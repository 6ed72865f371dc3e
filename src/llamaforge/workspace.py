"""``llamaforge init``: make the current folder a workspace with its own ``pins.toml`` and ``llamaforge.toml``.

Nothing needs a workspace (the shipped release pins and the per-user places serve any folder, see
:mod:`llamaforge.paths`); a user who wants pins of their own, or outputs beside their project, writes one.
An existing file is never overwritten unless asked (``--force``).
"""

from __future__ import annotations

from pathlib import Path

from .errors import ConfigError
from .paths import CONFIG_FILE, PINS_FILE, shipped_pins_file

SETTINGS_TEXT = """\
# llamaforge settings for this folder (a workspace). Everything here is optional.
# With this file (or a pins.toml) here, llamaforge keeps this folder's outputs beside it:
#   vendor/   source worktrees      build/    builds
#   results/  the results store and reports      models/   synthetic models
# and reads pins.toml here instead of the shipped release pins (`llamaforge pins` shows which).
#
# [paths] moves the heavy places (relative paths are taken from this file's folder). An environment
# variable beats an entry here: LLAMAFORGE_CACHE, LLAMAFORGE_DATA, LLAMAFORGE_BUILD_ROOT.
#
# [paths]
# cache = "/big/disk/llamaforge-cache"   # git mirror, sdists, ccache, downloaded models
# data = "store"                         # the results store goes to <data>/results/
# builds = "/big/disk/llamaforge-builds" # build directories
"""


def init_workspace(folder: Path, *, force: bool = False) -> list[Path]:
    """Write ``pins.toml`` (the shipped release pins, with their comments) and ``llamaforge.toml`` into
    ``folder``; returns the files written. Refused in one line when either exists and ``force`` is off."""
    files = {folder / PINS_FILE: shipped_pins_file().read_text(encoding="utf-8"),
             folder / CONFIG_FILE: SETTINGS_TEXT}
    there = [f for f in files if f.exists() or f.is_symlink()]
    if there and not force:
        verb = "already exists" if len(there) == 1 else "already exist"
        raise ConfigError(f"{', '.join(str(f) for f in there)} {verb}: nothing was written",
                          "edit it, or run `llamaforge init --force` to replace it with the shipped one")
    if not folder.is_dir():
        raise ConfigError(f"{folder} is not a folder", "run `llamaforge init` in an existing folder")
    for f in files:
        if f.is_symlink() or (f.exists() and not f.is_file()):
            raise ConfigError(f"{f} is not a regular file: nothing was replaced", "move it away first")
    for f, text in files.items():
        tmp = f.with_name(f".{f.name}.tmp")
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(f)
    return list(files)
