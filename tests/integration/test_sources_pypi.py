"""The real pypi source of the default pin: llama-cpp-python 0.3.36's sdist vendors llama.cpp
0c1e57098; it is checked against its CHANGELOG, imported into the mirror and checked out."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest

from llamaforge import proc
from llamaforge.config import Pin, load_pins
from llamaforge.paths import Paths
from llamaforge.sources import checkout
from llamaforge.sources.mirror import IMPORT_TAG_PREFIX, Mirror
from llamaforge.sources.providers import cached_sdist

REPO = Path(__file__).resolve().parents[2]
SDIST = "llama_cpp_python-0.3.36.tar.gz"
REAL_CACHE = Path(os.environ.get("LLAMAFORGE_REAL_CACHE", Path.home() / ".cache" / "llamaforge"))

pytestmark = pytest.mark.slow


@pytest.fixture
def paths(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Paths:
    """A fresh cache and workspace, seeded with the real sdist when one is already on disk
    (hard link or copy), so the 76 MB download happens at most once per machine."""
    monkeypatch.setenv("LLAMAFORGE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("LLAMAFORGE_WORKSPACE", str(tmp_path / "ws"))
    (tmp_path / "ws").mkdir()
    p = Paths(tmp_path / "ws")
    for src in (REAL_CACHE / "downloads" / SDIST, REAL_CACHE / "sdist" / SDIST):
        if src.is_file():
            try:
                os.link(src, p.downloads / SDIST)
            except OSError:
                shutil.copy2(src, p.downloads / SDIST)
            break
    return p


def test_default_pin_from_pypi_sdist_gives_tagged_llama_cpp_tree_and_is_reused(paths: Paths) -> None:
    default = load_pins(REPO / "pins.toml").get(None)
    pypi = tuple(s for s in default.sources if s.kind == "pypi")
    assert pypi, "the default pin should list a pypi source"
    pin = Pin(default.name, default.commit, pypi, default.build_number)

    tree = checkout(pin, paths)
    assert (tree.path / "CMakeLists.txt").is_file() and (tree.path / "ggml").is_dir()
    assert tree.commit.startswith(default.commit) and not tree.native_git
    assert tree.origin == str(pypi[0])
    assert cached_sdist(paths, "llama-cpp-python", "0.3.36") is not None
    m = Mirror(paths.mirror)
    assert m.resolve(IMPORT_TAG_PREFIX + tree.commit) == tree.mirror_commit
    head = proc.run(["git", "-C", str(tree.path), "rev-parse", "HEAD"]).output.strip()
    assert head == tree.mirror_commit

    t0 = time.monotonic()
    again = checkout(pin, paths)
    assert again == tree
    assert time.monotonic() - t0 < 30, "a second checkout reuses the import and the worktree"
