"""The user's llama.cpp checkout as a source (sources.localrepo): real git repositories with llama.cpp's layout,
no build. What it must never do is change the checkout: its files, index, refs and HEAD are compared before and
after."""

from __future__ import annotations

import hashlib
import os
import subprocess
from pathlib import Path

import pytest

from llamaforge.errors import SourceError
from llamaforge.paths import Paths
from llamaforge.sources import localrepo
from llamaforge.sources.localrepo import (
    WORKTREE,
    checkout_from,
    find_checkout,
    require_checkout,
    resolve,
    rev_sha,
)

_ENV = {**os.environ, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1", "GIT_AUTHOR_NAME": "T",
        "GIT_AUTHOR_EMAIL": "t@x.invalid", "GIT_COMMITTER_NAME": "T", "GIT_COMMITTER_EMAIL": "t@x.invalid"}


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], env=_ENV, check=True, capture_output=True,
                          text=True).stdout.strip()


@pytest.fixture
def clone(tmp_path: Path) -> Path:
    """A two-commit repository with llama.cpp's layout, branch ``master`` and a feature branch checked out."""
    r = tmp_path / "llama.cpp"
    (r / "include").mkdir(parents=True)
    (r / "ggml").mkdir()
    (r / "CMakeLists.txt").write_text("project(llama)\n")
    (r / "include" / "llama.h").write_text("// v1\n")
    (r / ".gitignore").write_text("build/\n")
    git(tmp_path, "init", "-q", "-b", "master", str(r))
    git(r, "add", "-A")
    git(r, "commit", "-qm", "one")
    git(r, "tag", "v1")
    git(r, "checkout", "-qb", "feature")
    (r / "include" / "llama.h").write_text("// v2\n")
    git(r, "commit", "-qam", "two")
    return r


@pytest.fixture
def paths(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Paths:
    monkeypatch.setenv("LLAMAFORGE_CACHE", str(tmp_path / "cache"))
    return Paths(tmp_path / "ws")


def state(r: Path) -> tuple:
    """Everything of the checkout a tool could change: HEAD, refs, the index file, every file's bytes."""
    files = {str(p.relative_to(r)): p.read_bytes() for p in sorted(r.rglob("*")) if p.is_file() and ".git" not in p.parts}
    index = (r / ".git" / "index").read_bytes()
    return (git(r, "rev-parse", "HEAD"), git(r, "symbolic-ref", "HEAD"), git(r, "show-ref"), index, files,
            (r / ".git" / "index").stat().st_mtime_ns)


def test_finds_a_llama_cpp_checkout_from_a_subfolder_and_nothing_else(clone: Path, tmp_path: Path) -> None:
    co = find_checkout(clone / "include")
    assert co is not None and co.root == clone.resolve()
    other = tmp_path / "other"
    git(tmp_path, "init", "-q", str(other))
    assert find_checkout(other) is None                     # a git repo without llama.cpp's layout
    assert find_checkout(tmp_path / "nowhere") is None
    with pytest.raises(SourceError, match="is not a llama.cpp git checkout"):
        require_checkout(other)


def test_checkout_from_picks_the_source_a_command_means(clone: Path, tmp_path: Path) -> None:
    assert checkout_from(None, cwd=clone).root == clone.resolve()
    assert checkout_from(str(clone)).root == clone.resolve()              # --source DIR
    assert checkout_from(f"path:{clone}").root == clone.resolve()         # path: naming a work tree
    assert checkout_from("git:https://example.invalid/x.git") is None      # a remote: mirror commits as before
    assert checkout_from(None, cwd=tmp_path) is None


def test_revisions_are_what_git_says_in_the_checkout(clone: Path) -> None:
    co = require_checkout(clone)
    assert rev_sha(co, "HEAD") == git(clone, "rev-parse", "feature")
    assert rev_sha(co, "master") == rev_sha(co, "v1") == rev_sha(co, "HEAD~1")
    with pytest.raises(SourceError) as e:
        rev_sha(co, "no-such-branch")
    assert "no-such-branch is not a revision of the checkout" in e.value.message and "git log" in e.value.fix
    with pytest.raises(SourceError, match="not a revision name"):
        rev_sha(co, "--output=/tmp/x")


def test_a_rebase_in_progress_is_refused_in_one_line(clone: Path) -> None:
    (clone / ".git" / "rebase-merge").mkdir()
    with pytest.raises(SourceError) as e:
        rev_sha(require_checkout(clone), "HEAD")
    assert "has a rebase in progress" in e.value.message and "git rebase --abort" in e.value.fix


def test_revisions_reach_the_mirror_and_the_checkout_is_untouched(clone: Path, paths: Paths) -> None:
    before = state(clone)
    co = require_checkout(clone)
    sha, dirty = resolve(co, "master", paths)
    assert dirty is None and sha == git(clone, "rev-parse", "master")
    assert git(paths.mirror, "cat-file", "-t", sha) == "commit"           # fetched into the private mirror
    assert state(clone) == before


def test_worktree_is_a_dirty_snapshot_over_head_and_leaves_the_checkout_as_it_was(clone: Path, paths: Paths) -> None:
    (clone / "include" / "llama.h").write_text("// v3, not committed\n")
    (clone / "new.c").write_text("int x;\n")
    (clone / "build").mkdir()
    (clone / "build" / "junk.o").write_text("ignored\n")
    before = state(clone)
    co = require_checkout(clone)
    snap, dirty = resolve(co, WORKTREE, paths)
    head = git(clone, "rev-parse", "HEAD")
    assert snap != head and git(paths.mirror, "rev-parse", f"{snap}^") == head
    assert git(paths.mirror, "show", f"{snap}:include/llama.h") == "// v3, not committed"
    assert git(paths.mirror, "show", f"{snap}:new.c") == "int x;"
    assert "build/junk.o" not in git(paths.mirror, "ls-tree", "-r", "--name-only", snap)   # .gitignore holds
    diff = git(paths.mirror, "diff", "--binary", "--full-index", "--no-ext-diff", "--no-textconv", head, snap)
    assert dirty == hashlib.sha256((diff + "\n").encode()).hexdigest()
    assert resolve(co, WORKTREE, paths) == (snap, dirty)                   # same changes, same commit (same build)
    assert state(clone) == before
    (clone / "new.c").write_text("int y;\n")
    assert resolve(co, WORKTREE, paths)[0] != snap


def test_a_clean_worktree_is_head(clone: Path, paths: Paths, capsys: pytest.CaptureFixture[str]) -> None:
    co = require_checkout(clone)
    assert resolve(co, WORKTREE, paths) == (git(clone, "rev-parse", "HEAD"), None)
    assert "no uncommitted changes" in capsys.readouterr().err


def test_source_tree_records_the_dirty_snapshot(clone: Path, paths: Paths) -> None:
    (clone / "include" / "llama.h").write_text("// dirty\n")
    tree = localrepo.source_tree(require_checkout(clone), WORKTREE, paths)
    assert tree.dirty and f"diff sha256 {tree.dirty}" in tree.origin
    assert (tree.path / "include" / "llama.h").read_text() == "// dirty\n"
    assert tree.path.resolve() != clone.resolve()
