"""The ``git`` source over a real network protocol: ``git daemon`` on 127.0.0.1 serving a real
llama.cpp history (the bisect fixture of fixture_repo.py: the default pin's tree + 16 commits).

1. the first checkout clones the served history into an empty mirror over ``git://``;
2. after the server's branch moves on by one commit, the next checkout fetches exactly that
   commit's objects (nothing the mirror already has);
3. with the server down, the source fails fast and falls through to the next one with a notice.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from llamaforge import proc
from llamaforge.config import Pin, SourceSpec, load_pins
from llamaforge.paths import Paths
from llamaforge.sources import checkout

sys.path.insert(0, str(Path(__file__).parent))
from fixture_repo import make_fixture  # noqa: E402

pytestmark = pytest.mark.slow


def _git(*args: str | Path) -> str:
    r = proc.run(["git", *map(str, args)], env={"GIT_CONFIG_GLOBAL": "/dev/null", "GIT_CONFIG_NOSYSTEM": "1"},
                 timeout=600)
    assert r.ok, r.output[-2000:]
    return r.output.strip()


def _objects(git_dir: Path) -> set[str]:
    return set(_git("--git-dir", git_dir, "cat-file", "--batch-all-objects", "--batch-check=%(objectname)").split())


def _wait_port(port: int, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise AssertionError(f"git daemon did not listen on 127.0.0.1:{port}")


@pytest.fixture
def served(lf_paths, default_pin, tmp_path):
    """A bare repo of the fixture history with ``main`` at commit 14 of 16, served by ``git daemon``."""
    fx = make_fixture(checkout(default_pin, lf_paths).path)
    root = tmp_path / "srv"
    root.mkdir()
    repo = root / "llama.cpp.git"
    _git("clone", "-q", "--bare", fx.path, repo)
    _git("--git-dir", repo, "update-ref", "refs/heads/main", fx.commits[-3])
    port = proc.free_port()
    daemon = proc.spawn(["git", "daemon", "--export-all", "--reuseaddr", "--listen=127.0.0.1", f"--port={port}",
                         f"--base-path={root}", "--", str(root)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait_port(port)
        yield fx, repo, daemon, f"git://127.0.0.1:{port}/llama.cpp.git"
    finally:
        if daemon.poll() is None:
            proc.kill_group(daemon, grace=5)


def test_git_source_clones_then_fetches_only_the_missing_commit_then_falls_through(served, tmp_path, monkeypatch):
    fx, repo, daemon, url = served
    monkeypatch.setenv("LLAMAFORGE_CACHE", str(tmp_path / "cache"))
    (tmp_path / "ws").mkdir()
    shutil.copy(Path(__file__).resolve().parents[2] / "pins.toml", tmp_path / "ws" / "pins.toml")
    paths = Paths(tmp_path / "ws")
    seen: list[str] = []
    monkeypatch.setattr("llamaforge.sources.notice", seen.append)
    git_src = SourceSpec.parse(f"git:{url}")

    # 1. first clone into an empty mirror
    assert not paths.mirror.exists()
    a = fx.commits[-3]
    tree = checkout(Pin("served-a", a, (git_src,)), paths)
    assert tree.commit == a and tree.native_git and tree.origin == str(git_src)
    assert _git("-C", tree.path, "rev-parse", "HEAD") == a
    assert (tree.path / "CMakeLists.txt").is_file() and (tree.path / "ggml").is_dir()
    assert tree.build_number == len(fx.commits) - 2          # `git rev-list --count`: the history came along
    assert seen == []

    # 2. the server moves on by one commit: the next checkout fetches only that commit's objects
    b = fx.commits[-2]
    _git("--git-dir", repo, "update-ref", "refs/heads/main", b)
    before = _objects(paths.mirror)
    tree_b = checkout(Pin("served-b", b, (git_src,)), paths)
    assert tree_b.commit == b and _git("-C", tree_b.path, "rev-parse", "HEAD") == b
    new = _objects(paths.mirror) - before
    want = set(_git("-C", fx.path, "rev-list", "--objects", "--no-object-names", f"{a}..{b}").split())
    assert want and new == want, f"fetched {len(new)} objects, the missing commit has {len(want)}"

    # 3. server down: the git source fails fast and the next source (a local path) provides the commit
    proc.kill_group(daemon, grace=5)
    c = fx.commits[-1]
    t0 = time.monotonic()
    tree_c = checkout(Pin("served-c", c, (git_src, SourceSpec.parse(f"path:{fx.path}"))), paths)
    assert tree_c.commit == c and tree_c.origin == f"path:{fx.path}"
    assert len(seen) == 1 and seen[0].startswith(f"source {git_src} failed") and f"trying path:{fx.path}" in seen[0]
    assert time.monotonic() - t0 < 120
    # the default pin is untouched by all this (its own sources still apply)
    assert load_pins(paths.pins_file).get(None).commit == "0c1e57098"
