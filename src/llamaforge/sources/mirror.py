"""The one local bare git mirror (``Paths.mirror``) every source feeds, and worktrees out of it.

Everything llamaforge builds is a commit in this mirror, so worktrees, compare and bisect treat
all sources alike:

* git / path sources fetch into it, each remote under its own namespace
  ``refs/remotes/<slug>/heads/*`` and ``refs/remotes/<slug>/tags/*`` (a commit fetched by sha is
  kept alive by ``refs/remotes/<slug>/commits/<sha>``);
* snapshot sources (tarball, pypi sdist) are *imported*: the whole tree becomes a root commit with
  a fixed author and date (re-importing gives the same sha), tagged
  ``refs/tags/llamaforge/import/<upstream-commit>``; the commit message names the upstream commit
  and the origin.

All writes happen under :meth:`Mirror.locked` (``fcntl.flock`` on ``mirror.git.lock`` next to the
mirror), so two llamaforge processes never corrupt it. Git commands that may run long or touch the
network go through :func:`llamaforge.proc.run` (own process group, killed on timeout); quick object
lookups use GitPython.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import re
import shutil
import tempfile
import threading
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from .. import proc
from ..console import notice
from ..errors import SourceError
from ..lazy import lazy
from ..redact import redact_text

if TYPE_CHECKING:
    import git
else:   # loaded on first use (llamaforge.lazy): GitPython costs ~0.1 s, most commands never touch a source
    git = lazy("git")

IMPORT_TAG_PREFIX = "refs/tags/llamaforge/import/"
IMPORT_AUTHOR = "llamaforge import"
IMPORT_EMAIL = "import@llamaforge.invalid"
IMPORT_DATE = "2000-01-01T00:00:00+0000"

# A git that ignores the user's global/system config: imports must not run LFS or eol filters.
_ISOLATED_ENV = {"GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}
# Transports a fetch may use: never ``ext::``/``fd::`` (they run commands), whatever a URL says.
ALLOWED_PROTOCOLS = "https:http:ssh:git:file"
_FULL_SHA = re.compile(r"^[0-9a-f]{40}$")


def slug(url: str) -> str:
    """A ref-safe name for a remote: its last two path parts plus a short hash of the whole URL."""
    tail = "-".join(p for p in re.split(r"[/:\\]+", url.rstrip("/")) if p)[-40:]
    tail = re.sub(r"[^A-Za-z0-9_-]+", "-", tail).strip("-") or "remote"
    return f"{tail}-{hashlib.sha1(url.encode()).hexdigest()[:8]}"


class Mirror:
    """The bare repository at ``path``; created on first use."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.lock_path = self.path.with_name(self.path.name + ".lock")
        self._depth = 0
        self._tlock = threading.RLock()
        self._lock_fd: int | None = None

    # -- locking --------------------------------------------------------------------------------
    @contextlib.contextmanager
    def locked(self) -> Iterator[Mirror]:
        """Hold the mirror's file lock (re-entrant within this process)."""
        with self._tlock:
            if self._depth == 0:
                self.lock_path.parent.mkdir(parents=True, exist_ok=True)
                fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT, 0o644)
                fcntl.flock(fd, fcntl.LOCK_EX)
                self._lock_fd = fd
            self._depth += 1
            try:
                self.ensure()
                yield self
            finally:
                self._depth -= 1
                if self._depth == 0 and self._lock_fd is not None:
                    fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
                    os.close(self._lock_fd)
                    self._lock_fd = None

    def ensure(self) -> None:
        """Create the bare repository if it does not exist yet."""
        if not (self.path / "HEAD").is_file():
            self.path.mkdir(parents=True, exist_ok=True)
            git.Repo.init(self.path, bare=True).close()
            # keep objects the mirror's worktrees and imports need; never auto-gc during a fetch
            self.git(["config", "gc.auto", "0"])
            self.git(["config", "core.logAllRefUpdates", "false"])

    # -- running git ----------------------------------------------------------------------------
    def git(self, args: Sequence[str | os.PathLike], *, env: Mapping[str, str] | None = None,
            timeout: float | None = 600, check: bool = True, cwd: Path | None = None) -> proc.Result:
        """``git --git-dir=<mirror> ARGS``; raises SourceError with git's last line when ``check``."""
        full_env = {"GIT_TERMINAL_PROMPT": "0", **(env or {})}
        res = proc.run(["git", f"--git-dir={self.path}", *args], env=full_env, timeout=timeout, cwd=cwd)
        if check and not res.ok:
            raise SourceError(f"git {' '.join(str(a) for a in args[:2])} failed: {_last_line(res)}",
                              f"see the mirror at {self.path}; delete it to start afresh")
        return res

    def repo(self) -> git.Repo:
        self.ensure()
        return git.Repo(self.path)

    # -- lookups --------------------------------------------------------------------------------
    def resolve(self, ref: str) -> str | None:
        """Full sha of a commit named by ``ref`` (sha, abbreviation, ref name), or None."""
        if not (self.path / "HEAD").is_file():
            return None
        if not ref or ref.startswith("-") or any(c.isspace() or ord(c) < 32 for c in ref):
            return None
        res = self.git(["rev-parse", "--verify", "--quiet", "--end-of-options", f"{ref}^{{commit}}"],
                       check=False, timeout=60)
        out = res.output.strip().splitlines()
        return out[-1] if res.ok and out and _FULL_SHA.match(out[-1]) else None

    def resolve_in_namespace(self, ref: str, remote_slug: str) -> str | None:
        """A branch or tag name as fetched from one remote (``refs/remotes/<slug>/{heads,tags}/ref``)."""
        for kind in ("heads", "tags"):
            sha = self.resolve(f"refs/remotes/{remote_slug}/{kind}/{ref}")
            if sha:
                return sha
        return None

    def imports(self) -> dict[str, str]:
        """Imported snapshots: upstream commit (full or abbreviated, as known) -> mirror commit."""
        if not (self.path / "HEAD").is_file():
            return {}
        res = self.git(["for-each-ref", "--format=%(refname) %(objectname)", IMPORT_TAG_PREFIX],
                       timeout=60)
        found: dict[str, str] = {}
        for line in res.output.splitlines():
            name, _, sha = line.strip().partition(" ")
            if name.startswith(IMPORT_TAG_PREFIX) and sha:
                found[name[len(IMPORT_TAG_PREFIX):]] = sha
        return found

    def find_import(self, commit: str) -> tuple[str, str] | None:
        """The import of upstream ``commit`` (prefix match either way): (upstream name, mirror sha)."""
        commit = commit.lower()
        for upstream, sha in sorted(self.imports().items(), key=lambda kv: -len(kv[0])):
            if upstream.startswith(commit) or commit.startswith(upstream):
                return upstream, sha
        return None

    def upstream_of(self, mirror_commit: str) -> str | None:
        """The upstream commit an imported mirror commit stands for (None for native commits)."""
        for upstream, sha in self.imports().items():
            if sha == mirror_commit:
                return upstream
        return None

    def message(self, sha: str) -> str:
        with contextlib.closing(self.repo()) as r:
            return str(r.commit(sha).message)

    def subject(self, sha: str) -> str:
        with contextlib.closing(self.repo()) as r:
            return str(r.commit(sha).summary)

    def count(self, sha: str) -> int:
        """``git rev-list --count`` (what llama.cpp's CMake uses as the build number)."""
        return int(self.git(["rev-list", "--count", "--end-of-options", _sha(sha)],
                            timeout=120).output.strip().splitlines()[-1])

    def committed(self, sha: str) -> float:
        """The committer time (epoch seconds)."""
        with contextlib.closing(self.repo()) as r:
            return float(r.commit(sha).committed_date)

    def first_parent(self, sha: str) -> str | None:
        """The first parent of ``sha`` (``None`` for a root commit)."""
        with contextlib.closing(self.repo()) as r:
            parents = r.commit(sha).parents
            return str(parents[0].hexsha) if parents else None

    def is_ancestor(self, a: str, b: str) -> bool:
        return self.git(["merge-base", "--is-ancestor", "--end-of-options", _sha(a), _sha(b)],
                        check=False, timeout=120).returncode == 0

    def first_parent_range(self, good: str, bad: str) -> list[str]:
        """Commits on bad's first-parent chain after good, oldest first."""
        res = self.git(["rev-list", "--first-parent", "--reverse", "--end-of-options",
                        f"{_sha(good)}..{_sha(bad)}"], timeout=300)
        return [line.strip() for line in res.output.splitlines() if _FULL_SHA.match(line.strip())]

    # -- writing --------------------------------------------------------------------------------
    def fetch(self, url: str, refspecs: Sequence[str], *, timeout: float = 3600,
              env: Mapping[str, str] | None = None) -> proc.Result:
        """``git fetch`` from ``url`` (no network check here; callers probe first).

        ``--`` ends the options, so a URL like ``--upload-pack=CMD`` is a (bad) repository name,
        never an option; only the transports in ALLOWED_PROTOCOLS may be used."""
        if any(r.startswith("-") for r in refspecs):
            raise SourceError(f"refusing a refspec that looks like an option: {refspecs}", "report this as a bug")
        with self.locked():
            return self.git(["-c", "http.lowSpeedLimit=1000", "-c", "http.lowSpeedTime=60",
                             "fetch", "--no-tags", "--prune", "--quiet", "--", url, *refspecs],
                            env={"GIT_ALLOW_PROTOCOL": ALLOWED_PROTOCOLS, **(env or {})},
                            timeout=timeout, check=False)

    def keep(self, ref: str, sha: str) -> None:
        with self.locked():
            self.git(["update-ref", ref, sha])

    def import_tree(self, tree_dir: Path, upstream: str, origin: str, note: str = "") -> str:
        """Import the files under ``tree_dir`` as a root commit tagged for ``upstream``.

        A no-op returning the existing commit when the tag already exists. The commit is
        deterministic: same files + same upstream/origin/note give the same sha.
        """
        with self.locked():
            tag = IMPORT_TAG_PREFIX + upstream
            existing = self.resolve(tag)
            if existing:
                return existing
            with tempfile.TemporaryDirectory(prefix="lf-index-", dir=self.path) as tmp:
                env = {**_ISOLATED_ENV, "GIT_INDEX_FILE": str(Path(tmp) / "index")}
                wt = [f"--work-tree={tree_dir}", "-c", "core.autocrlf=false", "-c", "core.safecrlf=false"]
                self.git([*wt, "add", "--all", "--force", "."], env=env, timeout=1800, cwd=tree_dir)
                tree = self.git(["write-tree"], env=env, timeout=600).output.strip().splitlines()[-1]
                # the commit lives in the mirror for good: no URL secret (a presigned tarball URL) in it
                message = f"llamaforge import of llama.cpp {upstream}\n\norigin: {redact_text(origin)}\n"
                if note:
                    message += (redact_text(note) or "").rstrip("\n") + "\n"
                cenv = {**env, "GIT_AUTHOR_NAME": IMPORT_AUTHOR, "GIT_AUTHOR_EMAIL": IMPORT_EMAIL,
                        "GIT_AUTHOR_DATE": IMPORT_DATE, "GIT_COMMITTER_NAME": IMPORT_AUTHOR,
                        "GIT_COMMITTER_EMAIL": IMPORT_EMAIL, "GIT_COMMITTER_DATE": IMPORT_DATE}
                sha = self.git(["commit-tree", tree, "-m", message], env=cenv,
                               timeout=120).output.strip().splitlines()[-1]
            self.git(["update-ref", tag, sha])
            return sha

    # -- worktrees ------------------------------------------------------------------------------
    def worktree(self, commit: str, where: Path) -> Path:
        """A detached worktree of ``commit`` at ``where``: reused when valid, else (re)created."""
        with self.locked():
            if where.exists():
                if self._worktree_ok(where, commit):
                    return where
                shutil.rmtree(where, ignore_errors=True)
            self.git(["worktree", "prune"], timeout=120)
            where.parent.mkdir(parents=True, exist_ok=True)
            res = self.git(["worktree", "add", "--detach", "--force", "--", str(where), _sha(commit)],
                           timeout=1800, check=False)
            if not res.ok:
                shutil.rmtree(where, ignore_errors=True)
                raise SourceError(f"cannot create a worktree of {commit[:12]} at {where}: {_last_line(res)}",
                                  f"remove {where} and try again; check free disk space")
            return where

    def move_worktree(self, commit: str, where: Path) -> Path:
        """Move the mirror worktree at ``where`` to ``commit`` in place (``checkout --detach --force``
        and ``clean``: git rewrites only the files that differ, so an incremental build recompiles
        only those); a missing or broken worktree is (re)created by :meth:`worktree`."""
        with self.locked():
            if (where / ".git").is_file():
                r = proc.run(["git", "-C", str(where), "checkout", "--quiet", "--detach", "--force", _sha(commit),
                              "--"], timeout=600)
                if r.ok:
                    proc.run(["git", "-C", str(where), "clean", "-fdq"], timeout=300)
                    return where
                notice(f"re-creating the worktree at {where} ({_last_line(r)})")
            return self.worktree(commit, where)

    def _worktree_ok(self, where: Path, commit: str) -> bool:
        dotgit = where / ".git"
        if not dotgit.is_file():
            return False
        text = dotgit.read_text(encoding="utf-8", errors="replace").strip()
        if not text.startswith("gitdir:"):
            return False
        admin = Path(text.split(":", 1)[1].strip())
        try:
            if not admin.is_dir() or admin.resolve().parent != (self.path / "worktrees").resolve():
                return False
        except OSError:
            return False
        head = proc.run(["git", "-C", str(where), "rev-parse", "HEAD"], timeout=60)
        if not head.ok or head.output.strip().splitlines()[-1:] != [commit]:
            return False
        deleted = proc.run(["git", "-C", str(where), "ls-files", "--deleted"], timeout=300)
        return deleted.ok and not deleted.output.strip()


def _sha(sha: str) -> str:
    """``sha`` when it is a full commit id (what every git call below takes), else SourceError."""
    if not _FULL_SHA.match(sha):
        raise SourceError(f"not a full commit id: {sha!r}", "report this as a bug")
    return sha


def _last_line(res: proc.Result) -> str:
    lines = [ln.strip() for ln in res.output.splitlines() if ln.strip()]
    if res.timed_out:
        return f"timed out after {res.seconds:.0f}s"
    return lines[-1] if lines else f"exit code {res.returncode}"
