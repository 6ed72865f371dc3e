"""The real pypi source of the default pin: llama-cpp-python 0.3.36's sdist vendors llama.cpp
0c1e57098; it is checked against its CHANGELOG, imported into the mirror and checked out. A false pin
(0.3.35, which vendors 4df29be4f, for 0c1e57098) is refused with the commit mirrored and without."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest

from llamaforge import proc
from llamaforge.config import Pin, SourceSpec, load_pins
from llamaforge.paths import Paths
from llamaforge.sources import SourceMismatch, checkout, ledger
from llamaforge.sources.mirror import IMPORT_TAG_PREFIX, Mirror
from llamaforge.sources.providers import cached_sdist

REPO = Path(__file__).resolve().parents[2]
SDIST = "llama_cpp_python-0.3.36.tar.gz"
SDIST_0335 = "llama_cpp_python-0.3.35.tar.gz"   # vendors 4df29be4f, not 0c1e57098
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
    for name in (SDIST, SDIST_0335):
        for src in (REAL_CACHE / "downloads" / name, REAL_CACHE / "sdist" / name):
            if src.is_file():
                try:
                    os.link(src, p.downloads / name)
                except OSError:
                    shutil.copy2(src, p.downloads / name)
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
    assert ledger.read(m, pypi[0]).commit == default.commit, "what the sdist holds is remembered"
    assert m.resolve(IMPORT_TAG_PREFIX + tree.commit) == tree.mirror_commit
    head = proc.run(["git", "-C", str(tree.path), "rev-parse", "HEAD"]).output.strip()
    assert head == tree.mirror_commit

    t0 = time.monotonic()
    again = checkout(pin, paths)
    assert again == tree
    assert time.monotonic() - t0 < 30, "a second checkout reuses the import and the worktree"


def _refused(pin: Pin, paths: Paths) -> SourceMismatch:
    with pytest.raises(SourceMismatch) as exc:
        checkout(pin, paths)
    return exc.value


def test_a_false_release_pin_is_refused_with_its_commit_mirrored_and_without(paths: Paths) -> None:
    pins = load_pins(REPO / "pins.toml")
    v35 = next(s for s in pins.get("lcpp-0.3.35").sources if s.kind == "pypi")   # vendors 4df29be4f
    v36 = next(s for s in pins.get("lcpp-0.3.36").sources if s.kind == "pypi")   # vendors 0c1e57098
    false = Pin("false", "0c1e57098", (v35,))
    line = "pypi:llama-cpp-python==0.3.35 vendors llama.cpp 4df29be4f, but pin false names 0c1e57098"

    cold = _refused(false, paths)                         # a fresh cache: the sdist is downloaded and read
    assert cold.message == line and 'set commit = "4df29be4f"' in (cold.fix or "")

    tree = checkout(Pin("right", "0c1e57098", (v36,)), paths)   # now 0c1e57098 is in the mirror
    assert tree.commit.startswith("0c1e57098")
    warm = _refused(false, paths)                         # answered by the record of 0.3.35
    with_git_first = _refused(Pin("false", "0c1e57098", (SourceSpec.parse("git"), v35)), paths)
    shutil.rmtree(ledger.folder(Mirror(paths.mirror)))
    unrecorded = _refused(false, paths)                   # no record: the cached sdist is read again
    for e in (warm, with_git_first, unrecorded):
        assert (e.message, e.fix) == (cold.message, cold.fix)
