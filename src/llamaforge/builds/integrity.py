"""What proves a build is what its manifest says: the source tree it was built from, and its binaries.

* **Source evidence.** A build of "commit X" must be built from X's files. ``--version`` cannot show
  that: llamaforge itself passes ``-DLLAMA_BUILD_COMMIT``, so the binary reports whatever it was
  told. Instead the worktree must be clean (no modified tracked files), at the mirror commit the
  pin resolved to, and its git tree id must equal the tree of the pinned commit in the mirror:
  for a native git commit the commit id is a hash over that tree; for an imported snapshot
  (tarball, sdist) it is the tree imported from the archive whose sha256 was checked. The tree id
  and which evidence was used are recorded in the manifest and checked again on every cache hit.
* **Binaries** are re-hashed (sha256) against the manifest on a cache hit and by ``verify``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .. import proc
from ..errors import BuildError
from ..files import sha256_file

IMPORT_TAGS = "refs/tags/llamaforge/import/"


def _git(wt: Path, *args: str, strip: bool = True) -> str:
    r = proc.run(["git", "-C", str(wt), *args], timeout=300)
    if not r.ok:
        last = (r.output.strip().splitlines() or [f"exit code {r.returncode}"])[-1]
        raise BuildError(f"git {args[0]} in {wt} failed: {last}",
                         f"delete {wt} so llamaforge recreates it (or check that it is a git worktree)")
    return r.output.strip() if strip else r.output


def modified_files(wt: Path) -> list[str]:
    """Tracked files of the worktree whose content differs from HEAD (untracked files don't count)."""
    out = _git(wt, "status", "--porcelain=v1", "--untracked-files=no", "--ignore-submodules=none",
               strip=False)
    return [line[3:] for line in out.splitlines() if line.strip()]


def source_evidence(tree: Any) -> dict:
    """Check that ``tree`` (a SourceTree) holds exactly its commit's files; return the evidence for
    the manifest. Raises BuildError (with the fix) for a dirty worktree or a tree that differs."""
    wt = Path(tree.path)
    changed = modified_files(wt)
    if changed:
        shown = ", ".join(changed[:3]) + (f" and {len(changed) - 3} more" if len(changed) > 3 else "")
        raise BuildError(f"{wt} has modified tracked files ({shown}), so it is not llama.cpp {tree.commit[:12]}",
                         f"see `git -C {wt} status`; discard the changes with `git -C {wt} checkout -- .` "
                         f"or delete {wt} (llamaforge recreates it)")
    head = _git(wt, "rev-parse", "--verify", "HEAD").splitlines()[-1]
    if head != tree.mirror_commit:
        raise BuildError(f"{wt} is at {head[:12]}, not at {tree.mirror_commit[:12]} ({tree.commit[:12]})",
                         f"delete {wt} so llamaforge recreates it at the pinned commit")
    if tree.native_git:
        pinned_ref, method = tree.mirror_commit, "git-commit"
        if not (tree.commit.startswith(tree.mirror_commit) or tree.mirror_commit.startswith(tree.commit)):
            raise BuildError(f"{wt} holds git commit {tree.mirror_commit[:12]}, not {tree.commit[:12]}",
                             f"delete {wt} so llamaforge recreates it")
    else:
        tags = _git(wt, "for-each-ref", "--format=%(refname)", "--points-at", tree.mirror_commit, IMPORT_TAGS)
        names = [t[len(IMPORT_TAGS):] for t in tags.splitlines() if t.startswith(IMPORT_TAGS)]
        match = [n for n in names if tree.commit == tree.mirror_commit or _same(n, tree.commit)]
        if not match:
            raise BuildError(f"{wt} is at {tree.mirror_commit[:12]}, which is no import of llama.cpp {tree.commit[:12]}",
                             f"delete {wt} and the pin's import is checked out again")
        pinned_ref, method = IMPORT_TAGS + match[0], "import"
    wt_tree = _git(wt, "rev-parse", "--verify", "HEAD^{tree}").splitlines()[-1]
    pinned_tree = _git(wt, "rev-parse", "--verify", "--end-of-options", f"{pinned_ref}^{{tree}}").splitlines()[-1]
    if wt_tree != pinned_tree:
        raise BuildError(f"the source tree in {wt} ({wt_tree[:12]}) is not the tree of {tree.commit[:12]} ({pinned_tree[:12]})",
                         f"delete {wt} so llamaforge recreates it")
    if method == "git-commit":
        detail = (f"clean worktree at git commit {tree.mirror_commit}; a commit id is a hash over its tree, "
                  f"so tree {wt_tree} is that commit's")
    else:
        msg = _git(wt, "log", "-1", "--format=%B", tree.mirror_commit)
        facts = "; ".join(ln.strip() for ln in msg.splitlines() if ln.startswith(("origin:", "sha256:", "sdist:")))
        detail = (f"clean worktree of the import tagged {pinned_ref} (tree {wt_tree}; {facts}); "
                  "the archive's sha256 and the commit it names were checked when it was imported")
    return {"tree": wt_tree, "method": method, "pinned_ref": pinned_ref, "worktree_clean": True, "detail": detail}


def _same(a: str, b: str) -> bool:
    a, b = a.lower(), b.lower()
    return len(min(a, b, key=len)) >= 7 and (a.startswith(b) or b.startswith(a))


def binary_problems(build_dir: Path, manifest: dict) -> list[str]:
    """Binaries whose bytes no longer match the sha256 the manifest recorded when they were built."""
    problems = []
    for name, info in (manifest.get("binaries") or {}).items():
        p = Path(build_dir) / info["path"]
        try:
            digest = sha256_file(p)
        except OSError as e:
            problems.append(f"{name} cannot be read ({e.strerror})")
            continue
        if digest != info.get("sha256"):
            problems.append(f"{name} changed since it was built (sha256 {digest[:12]}…, manifest {str(info.get('sha256'))[:12]}…)")
    return problems


def source_problems(manifest: dict) -> list[str]:
    """For ``verify``: is the build's worktree still clean at the tree it was built from?"""
    src = manifest.get("source") or {}
    recorded, path = src.get("tree"), Path(src.get("path") or "")
    if not recorded:
        return ["the manifest records no source tree (built by an older llamaforge)"]
    if not src.get("path") or not (path / ".git").exists():
        return []   # the worktree is gone: nothing left to compare; the binaries are still checked
    try:
        changed = modified_files(path)
        now = _git(path, "rev-parse", "--verify", "HEAD^{tree}").splitlines()[-1]
    except BuildError as e:
        return [e.message]
    if changed:
        return [f"its source {path} now has modified tracked files ({', '.join(changed[:3])})"]
    if now != recorded:
        return [f"its source {path} is now tree {now[:12]}, it was built from {recorded[:12]}"]
    return []
