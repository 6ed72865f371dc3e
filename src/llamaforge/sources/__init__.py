"""Where llama.cpp source trees come from.

``checkout(pin, paths)`` gives a :class:`SourceTree`: a git worktree (under ``Paths.vendor``) of
the pinned commit, taken from the one local bare mirror (``Paths.mirror``). First, warm cache or cold,
each pypi/tarball source the pin declares is checked to hold that commit (:mod:`.claims`; what a source
was verified to hold is remembered in the :mod:`.ledger`, so a warm check reads a record and touches no
network). What is already in the mirror is then used as it is; otherwise the pin's sources are tried in
order and a failing one falls through to the next with a one-line notice. Snapshot sources (tarball,
pypi sdist) are imported into the mirror as commits, so compare and bisect treat every source alike.

Modules: :mod:`.mirror` (bare mirror, imports, worktrees, locking), :mod:`.providers` (one
function per source kind; what a snapshot holds), :mod:`.archives` (downloads, extraction, CHANGELOG
parsing), :mod:`.ledger` (the records of what each source holds), :mod:`.claims` (a pin's sources checked
against its commit).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..config import Pin, SourceSpec
from ..console import notice
from ..errors import SourceError
from ..paths import Paths
from .claims import Claims, check_claims, settle, source_failure
from .mirror import Mirror, git, slug
from .providers import PROVIDERS, Provided, SourceMismatch, fetch_ref, import_verified, remote_url

__all__ = ["CommitFacts", "SourceTree", "SourceMismatch", "checkout", "checkout_commit", "commit_facts", "first_parent_commits",
           "fresh_ref", "head_tree", "moved_tree", "on_first_parent_line",
           "resolve_commit", "Mirror"]


@dataclass(frozen=True)
class SourceTree:
    """A worktree of one llama.cpp commit, ready to build."""

    path: Path               # the worktree
    commit: str              # upstream llama.cpp commit as known (full sha when known, else the pin's abbreviation)
    mirror_commit: str       # sha in the local mirror (== commit for git-native sources)
    origin: str              # str(SourceSpec) that provided it ("mirror" when it was already there)
    native_git: bool         # mirror_commit is the real upstream commit (`git rev-parse HEAD` gives it)
    build_number: int | None  # the pin's build_number, or `git rev-list --count` for native commits
    subject: str             # commit subject line (for bisect reports)
    dirty: str | None = None  # a WORKTREE snapshot: the sha256 of its diff against HEAD (sources.localrepo)

    @property
    def short(self) -> str:
        return self.commit[:9]


def _mirror(paths: Paths) -> Mirror:
    return Mirror(paths.mirror)


def _in_mirror(m: Mirror, ref: str) -> Provided | None:
    """A commit (native, or an import of it) already in the mirror; None when absent."""
    sha = m.resolve(ref)
    if sha is not None:
        upstream = m.upstream_of(sha)
        return Provided(sha, sha, True) if upstream is None else Provided(upstream, sha, False)
    return _import_of(m, ref)


def _import_of(m: Mirror, ref: str) -> Provided | None:
    if len(ref) < 7 or not all(c in "0123456789abcdef" for c in ref.lower()):
        return None
    found = m.find_import(ref)
    if found is None:
        return None
    upstream, sha = found
    return Provided(upstream if len(upstream) >= len(ref) else ref.lower(), sha, False)


def _origin_of(m: Mirror, prov: Provided, specs: tuple[SourceSpec, ...]) -> str:
    if not prov.native_git:
        for line in m.message(prov.mirror_commit).splitlines():
            if line.startswith("origin: "):
                return line[len("origin: "):].strip()
        return "import"
    native = [s for s in specs if s.kind in ("git", "path")]
    return str(native[0]) if native else "mirror"


def _tree(m: Mirror, paths: Paths, prov: Provided, origin: str, build_number: int | None) -> SourceTree:
    where = paths.vendor / prov.commit[:9]
    m.worktree(prov.mirror_commit, where)
    if build_number is None and prov.native_git:
        build_number = m.count(prov.mirror_commit)
    return SourceTree(path=where, commit=prov.commit, mirror_commit=prov.mirror_commit, origin=origin,
                      native_git=prov.native_git, build_number=build_number,
                      subject=m.subject(prov.mirror_commit))


def _provide(m: Mirror, spec: SourceSpec, commit: str, paths: Paths, label: str, claims: Claims) -> Provided:
    """``commit`` from ``spec``: a snapshot verified by :func:`check_claims` just now is imported as it was
    checked, one that could not be checked fails as it did there, anything else goes to its provider."""
    if spec in claims.unchecked:
        e = claims.unchecked[spec]
        raise SourceError(e.message, e.fix)
    try:
        if spec in claims.verified:
            return import_verified(m, spec, claims.verified[spec], commit, paths, label)
        return PROVIDERS[spec.kind](m, spec, commit, paths, label)
    except (OSError, git.GitError) as e:
        raise source_failure(spec, e) from e


def _from_sources(m: Mirror, pin: Pin, paths: Paths, claims: Claims) -> tuple[Provided, str]:
    """``pin.commit`` from ``pin.sources`` in order, a failing one falling through to the next with a notice
    (none for a source :func:`settle` speaks of); (what provided it, which source)."""
    reasons: list[tuple[SourceSpec, SourceError]] = []
    for i, spec in enumerate(pin.sources):
        try:
            return _provide(m, spec, pin.commit, paths, pin.name, claims), str(spec)
        except SourceMismatch:
            raise
        except SourceError as e:
            reasons.append((spec, e))
            if i + 1 < len(pin.sources) and spec not in claims.unchecked:
                notice(f"source {spec} failed ({e.message}); trying {pin.sources[i + 1]}")
    if len(reasons) == 1:
        spec, e = reasons[0]
        raise SourceError(f"pin {pin.name} (llama.cpp {pin.commit}): source {spec} failed: {e.message}", e.fix)
    listed = "; ".join(f"{s}: {e.message}" for s, e in reasons)
    raise SourceError(
        f"no source could provide llama.cpp {pin.commit} for pin {pin.name} ({listed})",
        "connect to the network, or add a source that has this commit to "
        f"pins.{pin.name}.sources (e.g. \"path:/your/llama.cpp\" or \"pypi:llama-cpp-python==VER\")")


def checkout(pin: Pin, paths: Paths) -> SourceTree:
    """A worktree of ``pin.commit``: from the mirror if it is there, else from ``pin.sources`` in order.

    Warm or cold, every pypi/tarball source the pin declares is checked to hold ``pin.commit`` first
    (:mod:`.claims`: its ledger record, else verified now), so a pin whose declared source holds another
    commit is refused whatever the mirror already has."""
    m = _mirror(paths)
    with m.locked():
        claims = check_claims(m, pin.commit, pin.sources, paths, pin.name)
        prov = _in_mirror(m, pin.commit)
        origin = _origin_of(m, prov, pin.sources) if prov else ""
        if prov is None:
            prov, origin = _from_sources(m, pin, paths, claims)
        settle(claims, prov)
        return _tree(m, paths, prov, origin, pin.build_number)


def _fetch(m: Mirror, ref: str, paths: Paths, spec: SourceSpec | None, claims: Claims) -> Provided:
    """``ref`` (not in the mirror) from ``spec``."""
    if spec is not None and spec.kind in ("git", "path"):
        sha = m.resolve_in_namespace(ref, slug(remote_url(spec, paths)))
        if sha is None:
            sha = fetch_ref(m, spec, ref, paths)
        return Provided(sha, sha, True)
    if spec is not None:
        return _provide(m, spec, ref, paths, ref[:9], claims)
    raise SourceError(f"commit {ref} is not in the mirror ({m.path})",
                      "check out a pin whose sources have it first, or name a git/path source for it")


def _resolve(m: Mirror, ref: str, paths: Paths, spec: SourceSpec | None) -> Provided:
    """``ref`` in the mirror, or fetched from ``spec``; a pypi/tarball ``spec`` is checked to hold it either way."""
    claims = check_claims(m, ref, (spec,) if spec is not None else (), paths, ref[:9])
    prov = _in_mirror(m, ref)
    if prov is None:
        prov = _fetch(m, ref, paths, spec, claims)
    settle(claims, prov)
    return prov


def resolve_commit(paths: Paths, ref: str, spec: SourceSpec | None = None) -> str:
    """Full sha in the mirror of ``ref`` (sha, abbreviation, branch/tag of ``spec``, or an upstream
    commit that was imported), fetching from ``spec`` when it is not there yet."""
    m = _mirror(paths)
    with m.locked():
        return _resolve(m, ref, paths, spec).mirror_commit


def checkout_commit(commit: str, paths: Paths, spec: SourceSpec | None = None) -> SourceTree:
    """A worktree of ``commit`` (already in the mirror, or fetched from a git/path ``spec``)."""
    m = _mirror(paths)
    with m.locked():
        prov = _resolve(m, commit, paths, spec)
        origin = _origin_of(m, prov, (spec,) if spec else ())
        return _tree(m, paths, prov, origin, None)


def first_parent_commits(paths: Paths, good: str, bad: str, spec: SourceSpec | None = None) -> list[str]:
    """Full shas on ``bad``'s first-parent chain after ``good`` up to ``bad``, oldest first."""
    m = _mirror(paths)
    with m.locked():
        b = _resolve(m, bad, paths, spec).mirror_commit
        g = _resolve(m, good, paths, spec).mirror_commit
        if not m.is_ancestor(g, b):
            raise SourceError(f"{good} is not an ancestor of {bad}",
                              "give the older (good) commit first, and commits on the same branch")
        return m.first_parent_range(g, b)


def on_first_parent_line(paths: Paths, older: str, newer: str, spec: SourceSpec | None = None) -> list[str]:
    """Full shas from ``older`` to ``newer`` on ``newer``'s first-parent line, both included, oldest first;
    refuses (one line) when ``older`` is not on that line (an ancestor reached only through a merge)."""
    m = _mirror(paths)
    with m.locked():
        b = _resolve(m, newer, paths, spec).mirror_commit
        a = _resolve(m, older, paths, spec).mirror_commit
        after = m.first_parent_range(a, b) if a != b else []
        if a != b and (not m.is_ancestor(a, b) or not after or m.first_parent(after[0]) != a):
            raise SourceError(f"{older} and {newer} are not on one first-parent line ({older} is not a first-parent "
                              f"ancestor of {newer})", "give the older commit first, both on the same branch's "
                              "first-parent history (`git log --first-parent NEWER` lists them)")
        return [a, *after]


def fresh_ref(paths: Paths, ref: str, spec: SourceSpec) -> str:
    """A branch or tag of a git/path source as it is now: fetched again (a nightly must see new commits)."""
    m = _mirror(paths)
    fetch_ref(m, spec, ref, paths)
    with m.locked():
        sha = m.resolve_in_namespace(ref, slug(remote_url(spec, paths))) or m.resolve(ref)
    if sha is None:
        raise SourceError(f"{spec} has no branch or tag {ref}", "check the name, or give a commit")
    return sha


@dataclass(frozen=True)
class CommitFacts:
    sha: str
    subject: str
    date: float | None
    count: int | None            # the first-parent position llama.cpp's build number uses


def commit_facts(paths: Paths, sha: str) -> CommitFacts:
    """Subject, committer time and commit count of a mirror commit."""
    m = _mirror(paths)
    with m.locked():
        return CommitFacts(sha, m.subject(sha), m.committed(sha), m.count(sha))


def moved_tree(paths: Paths, commit: str, where: Path, origin: str = "bisect") -> SourceTree:
    """The mirror worktree at ``where`` moved to ``commit`` in place (:meth:`Mirror.move_worktree`):
    what an incremental builder (one worktree, one build tree, many commits) builds from."""
    m = _mirror(paths)
    with m.locked():
        m.move_worktree(commit, where)
        upstream = m.upstream_of(commit)
        return SourceTree(path=where, commit=commit, mirror_commit=commit, origin=origin,
                          native_git=upstream is None, build_number=m.count(commit), subject=m.subject(commit))


def head_tree(src: Path) -> SourceTree:
    """A SourceTree for the current checkout (HEAD) of a git working dir outside the mirror (the one
    ``git bisect`` drives), built in place."""
    try:
        repo = git.Repo(src, search_parent_directories=True)
        head = repo.head.commit
    except (git.InvalidGitRepositoryError, git.NoSuchPathError, ValueError) as e:
        raise SourceError(f"{src} is not a git checkout ({type(e).__name__})",
                          "run bisect-run inside the llama.cpp clone that git bisect drives, or give --source DIR") from None
    return SourceTree(path=Path(src).resolve(), commit=head.hexsha, mirror_commit=head.hexsha, origin=f"path:{src}",
                      native_git=True, build_number=head.count(), subject=head.summary)
