"""The user's own llama.cpp checkout as a source: its revisions by name, never its files touched.

A llama.cpp developer runs llamaforge inside their clone (or names it with ``--source DIR``). Then
``HEAD``, ``master``, a tag or a sha mean what ``git rev-parse`` says *in that clone*; the commit is fetched
into llamaforge's private bare mirror (``git fetch`` reads the clone, writes only the mirror) and built from a
mirror worktree, so the user's working tree, index and refs are never changed.

``WORKTREE`` is the working tree as it is now, uncommitted changes and untracked (not ignored) files
included: a commit made **in the mirror** (a private index, the clone's files read through
``--work-tree``) whose parent is ``HEAD``, with fixed author and dates, so the same changes give the same sha
(and the same cached build). It is recorded as dirty: the message and the build's manifest carry the sha256
of the diff against ``HEAD``.

Git is run with ``GIT_OPTIONAL_LOCKS=0`` and no fsmonitor, so not even the clone's index stat cache is
refreshed; a clone with a rebase, merge, cherry-pick or revert in progress is refused (its ``HEAD`` and
branches are in flux).
"""

from __future__ import annotations

import hashlib
import re
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path

from .. import proc
from ..config import SOURCE_KINDS, SourceSpec
from ..console import notice
from ..errors import SourceError
from ..paths import Paths
from . import SourceTree, checkout_commit, resolve_commit
from .mirror import Mirror

#: the revision name for the working tree's current state
WORKTREE = "WORKTREE"
_FULL_SHA = re.compile(r"^[0-9a-f]{40}$")
_READ_ONLY = {"GIT_OPTIONAL_LOCKS": "0", "GIT_TERMINAL_PROMPT": "0"}
_NO_HOOKS = ["-c", "core.fsmonitor=false", "-c", "core.untrackedCache=false"]
#: files in the git dir that mean an operation is half done
_BUSY = (("rebase-merge", "a rebase"), ("rebase-apply", "a rebase or git am"), ("MERGE_HEAD", "a merge"),
         ("CHERRY_PICK_HEAD", "a cherry-pick"), ("REVERT_HEAD", "a revert"))
_SNAP_ID = {"GIT_AUTHOR_NAME": "llamaforge", "GIT_AUTHOR_EMAIL": "worktree@llamaforge.invalid",
            "GIT_COMMITTER_NAME": "llamaforge", "GIT_COMMITTER_EMAIL": "worktree@llamaforge.invalid"}


@dataclass(frozen=True)
class Checkout:
    """A llama.cpp git checkout of the user's (``root`` is its top folder)."""

    root: Path
    git_dir: Path

    @property
    def spec(self) -> SourceSpec:
        return SourceSpec("path", str(self.root))

    def git(self, args: list[str], timeout: float = 120) -> proc.Result:
        return proc.run(["git", *_NO_HOOKS, "-C", str(self.root), *args], env=_READ_ONLY, timeout=timeout)

    def busy(self) -> str | None:
        """The half-done operation in the clone (``"a rebase"``), or None."""
        return next((what for name, what in _BUSY if (self.git_dir / name).exists()), None)


def _is_llama_cpp(root: Path) -> bool:
    return (root / "include" / "llama.h").is_file() and (root / "CMakeLists.txt").is_file() and \
        (root / "ggml").is_dir()


def find_checkout(where: Path) -> Checkout | None:
    """The llama.cpp checkout containing ``where`` (a git work tree with llama.cpp's layout), or None."""
    if not where.is_dir():
        return None
    res = proc.run(["git", *_NO_HOOKS, "-C", str(where), "rev-parse", "--show-toplevel", "--absolute-git-dir"],
                   env=_READ_ONLY, timeout=60)
    lines = res.output.strip().splitlines() if res.ok else []
    if len(lines) != 2 or not _is_llama_cpp(Path(lines[0])):
        return None
    return Checkout(Path(lines[0]).resolve(), Path(lines[1]))


def require_checkout(where: Path) -> Checkout:
    """``--source DIR``: the checkout there, or one line saying why it is not one."""
    co = find_checkout(where)
    if co is None:
        raise SourceError(f"{where} is not a llama.cpp git checkout (no git work tree with include/llama.h, "
                          "ggml/ and CMakeLists.txt)", "give the folder of your llama.cpp clone, or run inside it")
    return co


def _check_not_busy(co: Checkout) -> None:
    busy = co.busy()
    if busy:
        raise SourceError(f"the checkout {co.root} has {busy} in progress: its HEAD and branches are in flux",
                          "finish or abort it first (e.g. `git rebase --continue` or `git rebase --abort`)")


def rev_sha(co: Checkout, rev: str) -> str:
    """The full sha of ``rev`` (branch, tag, sha, ``HEAD~2`` ...) in the checkout; one line when it is not there."""
    if not rev or rev.startswith("-") or any(c.isspace() or ord(c) < 32 for c in rev):
        raise SourceError(f"{rev!r} is not a revision name", "give a branch, tag, sha or HEAD")
    _check_not_busy(co)
    res = co.git(["rev-parse", "--verify", "--quiet", "--end-of-options", f"{rev}^{{commit}}"])
    out = res.output.strip().splitlines()
    if not res.ok or not out or not _FULL_SHA.match(out[-1]):
        raise SourceError(f"{rev} is not a revision of the checkout {co.root}",
                          "check the name (`git log --oneline`, `git branch -a`), or `git fetch` it first")
    return out[-1]


def _diff_sha256(m: Mirror, head: str, snap: str) -> str:
    diff = m.git(["diff", "--binary", "--full-index", "--no-ext-diff", "--no-textconv", head, snap],
                 timeout=600).output
    return hashlib.sha256(diff.encode("utf-8", "surrogateescape")).hexdigest()


def _snapshot_commit(m: Mirror, co: Checkout, head: str) -> tuple[str, str | None]:
    """(commit, diff sha256) of the working tree over ``head``, made in the mirror ``m``; (head, None) when clean."""
    with tempfile.TemporaryDirectory(prefix="lf-wt-index-", dir=m.path) as tmp:
        env = {"GIT_INDEX_FILE": str(Path(tmp) / "index"), "GIT_CONFIG_NOSYSTEM": "1"}
        wt = [f"--work-tree={co.root}", "-c", "core.autocrlf=false", "-c", "core.safecrlf=false", *_NO_HOOKS]
        m.git([*wt, "read-tree", head], env=env, timeout=600)
        m.git([*wt, "add", "--all", "."], env=env, timeout=1800, cwd=co.root)
        tree = m.git(["write-tree"], env=env).output.strip().splitlines()[-1]
    head_tree = m.git(["rev-parse", f"{head}^{{tree}}"]).output.strip().splitlines()[-1]
    if tree == head_tree:
        return head, None
    date = m.git(["show", "-s", "--format=%cI", head]).output.strip().splitlines()[-1]
    cenv = {**_SNAP_ID, "GIT_AUTHOR_DATE": date, "GIT_COMMITTER_DATE": date}
    msg = f"llamaforge snapshot of the working tree of {co.root}\n\nover: {head}\n"
    snap = m.git(["commit-tree", tree, "-p", head, "-m", msg], env=cenv).output.strip().splitlines()[-1]
    return snap, _diff_sha256(m, head, snap)


def resolve(co: Checkout, rev: str, paths: Paths) -> tuple[str, str | None]:
    """(mirror sha, diff sha256 or None) of a checkout revision or ``WORKTREE``, fetched into the mirror."""
    head = rev_sha(co, "HEAD" if rev == WORKTREE else rev)
    sha = resolve_commit(paths, head, co.spec)
    if rev != WORKTREE:
        return sha, None
    m = Mirror(paths.mirror)
    with m.locked():
        snap, dirty = _snapshot_commit(m, co, sha)
    if dirty is None:
        notice(f"WORKTREE of {co.root} has no uncommitted changes: it is HEAD ({sha[:9]})")
    return snap, dirty


def source_tree(co: Checkout, rev: str, paths: Paths) -> SourceTree:
    """A mirror worktree of a checkout revision or ``WORKTREE`` (then ``dirty`` is the diff's sha256)."""
    sha, dirty = resolve(co, rev, paths)
    tree = checkout_commit(sha, paths, co.spec)
    if dirty is None:
        return replace(tree, origin=f"{co.spec} {rev}")
    return replace(tree, origin=f"{co.spec} WORKTREE, dirty (diff sha256 {dirty})", dirty=dirty)


def checkout_from(source: str | None, cwd: Path | None = None) -> Checkout | None:
    """The checkout whose revisions a command takes: ``--source DIR`` (a plain folder, or ``path:DIR`` naming a
    llama.cpp checkout), else the one the current folder is in; None when revisions are pins or mirror commits
    (``--source git:URL``, a ``path:`` mirror that is not a work tree, or no checkout here)."""
    if source is None:
        return find_checkout(cwd or Path.cwd())
    kind, sep, arg = source.partition(":")
    if sep and kind in SOURCE_KINDS:
        return find_checkout(Path(arg).expanduser()) if kind == "path" else None
    return require_checkout(Path(source).expanduser())


def revision_shas(co: Checkout, revs: list[str], paths: Paths) -> list[str]:
    """Mirror shas of checkout revisions (``WORKTREE`` included), fetched into the mirror; refused in one line
    for a name the checkout does not have."""
    return [resolve(co, r, paths)[0] for r in revs]
