"""Providers: put one llama.cpp commit into the mirror from one :class:`SourceSpec`.

Each provider is ``provide(mirror, spec, commit, paths, pin_name) -> Provided`` and raises
:class:`SourceError` (one line, the reason) when its source cannot give the commit; the caller
then falls through to the next source. :class:`SourceMismatch` means the source *answered* but
contradicts the pin (wrong vendored commit, wrong sha256): that is refused at once, never skipped.

* ``git:URL``   fetch branches and tags into ``refs/remotes/<slug>/``; a full sha not on any branch
                is fetched by sha. http(s) remotes are probed first with a short timeout so an
                offline machine falls through in seconds.
* ``path:DIR``  the same from a local clone or mirror (no network).
* ``tarball:URL-or-FILE``  a source archive of the pinned commit, downloaded once into
                ``Paths.downloads/tarballs/``; the commit ``git archive`` wrote into its header, if any,
                must be the pinned one; extracted and imported.
* ``pypi:NAME==VER``  the llama-cpp-python sdist, fetched from pip's configured index (see
                :mod:`.pyindex`; never through pip, which would run its build hooks), cached in
                ``Paths.downloads``; sha256 checked before it is opened; its CHANGELOG must name
                the pinned commit; ``vendor/llama.cpp`` is imported.

For the two snapshot kinds, :func:`verify` (what the source holds, written to the :mod:`.ledger`) and
:func:`import_verified` are separate steps: a pin's declared snapshot sources are checked on every checkout,
also when its commit is already in the mirror (:mod:`.claims`), and only a missing commit is imported.
"""

from __future__ import annotations

import hashlib
import os
import re
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import unquote, urlparse

from .. import proc
from ..config import UPSTREAM_URL, SourceSpec
from ..console import err_console, notice
from ..errors import SourceError
from ..lazy import lazy
from ..paths import Paths
from . import archives, ledger, pyindex
from .mirror import Mirror, slug

if TYPE_CHECKING:
    import requests
else:   # loaded on first use (llamaforge.lazy): most commands never download
    requests = lazy("requests")

FETCH_TIMEOUT = 3600.0
_FULL_SHA = re.compile(r"^[0-9a-f]{40}$")
UNCHECKED = "unchecked"   # how an sdist's sha256 was checked when nothing could vouch for it


class SourceMismatch(SourceError):
    """The source contradicts the pin (other commit, other checksum): refused, not skipped."""


@dataclass(frozen=True)
class Provided:
    commit: str          # upstream llama.cpp commit as known (full sha when known)
    mirror_commit: str   # the commit in the mirror
    native_git: bool     # mirror_commit is the upstream commit itself


Provider = Callable[[Mirror, SourceSpec, str, Paths, str], Provided]


# -- git and path ---------------------------------------------------------------------------------

def remote_url(spec: SourceSpec, paths: Paths) -> str:
    """The URL (git) or absolute directory (path; relative to the workspace) of a git-native spec."""
    if spec.kind == "path":
        p = Path(spec.arg).expanduser()
        p = p if p.is_absolute() else paths.workspace / p
        return str(p.resolve())
    return spec.arg or UPSTREAM_URL


def probe(url: str) -> None:
    """Fail fast (SourceError) when an http(s) remote cannot be reached within the net timeout."""
    if not url.startswith(("http://", "https://")):
        return
    try:
        requests.head(url, timeout=(archives.CONNECT_TIMEOUT, archives.CONNECT_TIMEOUT * 2),
                      allow_redirects=True)
    except requests.RequestException as e:
        raise SourceError(f"cannot reach {url} ({type(e).__name__})",
                          "connect to the network, or list a path/tarball/pypi source after it") from e


def fetch_ref(mirror: Mirror, spec: SourceSpec, ref: str, paths: Paths) -> str:
    """Fetch from a git/path spec until ``ref`` (sha, abbreviation, branch or tag) is in the mirror."""
    url = remote_url(spec, paths)
    if spec.kind == "path" and not Path(url).is_dir():
        raise SourceError(f"{url} does not exist", f"fix the path in \"{spec}\" or remove that source")
    name = slug(url)
    probe(url)
    # ssh remotes: fail fast too, and never wait for a password prompt
    env = {} if "GIT_SSH_COMMAND" in os.environ else {
        "GIT_SSH_COMMAND": f"ssh -o BatchMode=yes -o ConnectTimeout={int(archives.CONNECT_TIMEOUT) or 5}"}
    with mirror.locked():
        with err_console.status(f"fetching {url} into the mirror"):
            res = mirror.fetch(url, [f"+refs/heads/*:refs/remotes/{name}/heads/*",
                                     f"+refs/tags/*:refs/remotes/{name}/tags/*"], timeout=FETCH_TIMEOUT, env=env)
        if not res.ok:
            raise SourceError(f"git fetch from {url} failed: {_last(res)}",
                              "check the URL / network, or list another source after it")
        sha = mirror.resolve(ref) or mirror.resolve_in_namespace(ref, name)
        if sha is None and _FULL_SHA.match(ref.lower()):
            keep = f"refs/remotes/{name}/commits/{ref.lower()}"
            res = mirror.fetch(url, [f"+{ref.lower()}:{keep}"], timeout=FETCH_TIMEOUT, env=env)
            sha = mirror.resolve(ref) if res.ok else None
    if sha is None:
        fix = ("use the full 40-digit sha (an abbreviation can only be found on a branch or tag)"
               if not _FULL_SHA.match(ref.lower()) else "check the commit, or list a source that has it")
        raise SourceError(f"{spec} has no commit {ref}", fix)
    return sha


def provide_git(mirror: Mirror, spec: SourceSpec, commit: str, paths: Paths, pin_name: str) -> Provided:
    sha = mirror.resolve(commit)
    if sha is None or mirror.upstream_of(sha) is not None:
        sha = fetch_ref(mirror, spec, commit, paths)
    return Provided(sha, sha, True)


# -- snapshots: verify what a source holds (written to the ledger), then import it ----------------

@dataclass(frozen=True)
class Verified:
    """A pypi/tarball source verified just now: what it holds and the file it was read from."""

    fact: ledger.SourceFact
    file: Path
    head: str | None = None   # full sha of an sdist's vendored submodule HEAD, when it has one


def _existing_import(mirror: Mirror, commit: str) -> Provided | None:
    found = mirror.find_import(commit)
    if found is None:
        return None
    upstream, sha = found
    return Provided(upstream if len(upstream) >= len(commit) else commit, sha, False)


def _import(mirror: Mirror, archive: Path, upstream: str, origin: str, note: str,
            subdir: str | None, paths: Paths) -> str:
    with tempfile.TemporaryDirectory(prefix="lf-extract-", dir=paths.downloads) as tmp:
        with err_console.status(f"extracting {archive.name}"):
            root = archives.extract(archive, Path(tmp) / "src", subdir=subdir)
        with err_console.status(f"importing llama.cpp {upstream[:12]} into the mirror"):
            return mirror.import_tree(root, upstream, origin, note)


def _check_pinned_sha256(spec: SourceSpec, file: Path, digest: str) -> None:
    if spec.sha256 and spec.sha256.lower() != digest:
        raise SourceMismatch(f"{file.name} has sha256 {digest}, but pins.toml expects {spec.sha256}",
                             f"delete {file} to download it again; if the new file is right, update sha256 in pins.toml")


def local_tarball(spec: SourceSpec, paths: Paths) -> Path | None:
    """The file a ``tarball:`` source names (relative to the workspace); None for an http(s) URL."""
    arg = spec.arg
    if arg.startswith(("http://", "https://")):
        return None
    file = Path(unquote(urlparse(arg).path) if arg.startswith("file://") else arg).expanduser()
    return file if file.is_absolute() else paths.workspace / file


def _fetched_tarball(spec: SourceSpec, paths: Paths) -> Path:
    """The download of an http(s) ``tarball:`` source in ``Paths.downloads/tarballs/`` (fetched once)."""
    arg = spec.arg
    base = unquote(Path(urlparse(arg).path).name).replace("\\", "_")
    base = base if base not in ("", ".", "..") else "source.tar.gz"
    file = paths.downloads / "tarballs" / f"{hashlib.sha1(arg.encode()).hexdigest()[:12]}-{base}"
    if not file.is_file():
        if arg.startswith("http://") and not spec.sha256:   # SourceSpec refuses this; never download it
            raise SourceMismatch(f"{spec}: plain-http download without a sha256",
                                 "use https://, or append #sha256=<64 hex digits> to the URL")
        archives.download(arg, file)
        try:
            _check_pinned_sha256(spec, file, archives.sha256_of(file))
        except SourceMismatch:
            file.unlink(missing_ok=True)   # a wrong download never stays in the cache
            raise
    return file


def verify_tarball(spec: SourceSpec, paths: Paths) -> Verified:
    """The archive of a ``tarball:`` source (downloaded once), its sha256 checked before it is read, and
    the commit ``git archive`` wrote into its header (None for an archive that names none)."""
    local = local_tarball(spec, paths)
    file = local or _fetched_tarball(spec, paths)
    if not file.is_file():
        raise SourceError(f"tarball {file} does not exist", f"fix the path in \"{spec}\"")
    digest = archives.sha256_of(file)
    _check_pinned_sha256(spec, file, digest)   # before anything reads the archive
    if not spec.sha256 and spec.arg.startswith("https://"):
        notice(f"sha256 of {file.name} is unchecked (no #sha256= in the source): {digest}")
    checked = "checked against pins.toml" if spec.sha256 else "local file" if local else "https, no sha256 pinned"
    commit = archives.git_archive_commit(file)
    return Verified(ledger.SourceFact(str(spec), commit, digest, file.name, checked), file)


def _sdist_names(name: str, version: str) -> list[str]:
    norm = re.sub(r"[-_.]+", "_", name).lower()
    return [f"{norm}-{version}.tar.gz", f"{name}-{version}.tar.gz", f"{name.lower()}-{version}.tar.gz"]


def cached_sdist(paths: Paths, name: str, version: str) -> Path | None:
    for n in _sdist_names(name, version):
        if (paths.downloads / n).is_file():
            return paths.downloads / n
    return None


def download_sdist(paths: Paths, name: str, version: str, pinned: str | None) -> tuple[Path, str, str]:
    """Fetch the sdist of ``name==version`` from pip's configured indexes into ``Paths.downloads``.

    No pip: ``pip download`` would run the sdist's build hooks (metadata preparation) before its
    sha256 could be checked. The bytes are hashed BEFORE the file is put in place or opened; the
    hash must match ``pinned`` (pins.toml) or the index's. Returns (file, sha256, how checked)."""
    timeout = (archives.CONNECT_TIMEOUT, 30.0)
    names = _sdist_names(name, version)
    with err_console.status(f"looking up {name}=={version} (sdist) on the package index"):
        found = pyindex.find(name, names, timeout)
    if found is None:
        raise SourceError(f"no package index lists {names[0]}",
                          "check the version and the pip index settings (pip config list), or put the sdist in "
                          + str(paths.downloads))
    expected = pinned or found.sha256
    if not expected:
        raise SourceMismatch(f"{found.index} gives no sha256 for {found.filename}",
                             "add its sha256 for this source to pins.toml ([pins.NAME.sha256])")
    part = paths.downloads / f"{found.filename}.{os.getpid()}.unverified"   # this process's: see archives.download
    try:
        pyindex.fetch(found, part, archives.download)
    except OSError as e:
        part.unlink(missing_ok=True)
        raise SourceError(f"cannot fetch {found.public_url}: {e}", "check the index settings and the network") from e
    ok, digest = pyindex.sha256_ok(part, expected)
    if not ok:
        part.unlink(missing_ok=True)
        raise SourceMismatch(f"{found.filename} from {found.public_url} has sha256 {digest}, "
                             f"{'pins.toml' if pinned else found.index} says {expected}",
                             "the index or the network served other bytes; check the index, or fix sha256 in pins.toml")
    dest = paths.downloads / found.filename
    part.replace(dest)
    return dest, digest, "checked against pins.toml" if pinned else f"checked against {found.index}"


def pypi_sha256(name: str, version: str, filename: str) -> tuple[str, str] | None:
    """The sha256 pip's index lists for ``filename`` of ``name==version`` and which index said
    so; None when no index can be asked or none lists it with a hash."""
    try:
        found = pyindex.find(name, [filename], (archives.CONNECT_TIMEOUT, 30.0))
    except SourceError:
        return None
    return (found.sha256, found.index) if found and found.sha256 else None


def _check_cached_sdist(spec: SourceSpec, file: Path, name: str, version: str) -> tuple[str, str]:
    """(sha256, how checked) of an sdist already in the cache (or put there by the user): checked as a
    download is; "unchecked" (said in a notice) when no pinned sha256 and no index can vouch for it."""
    digest = archives.sha256_of(file)
    if spec.sha256:
        _check_pinned_sha256(spec, file, digest)
        return digest, "checked against pins.toml"
    found = pypi_sha256(name, version, file.name)
    if found is None:
        notice(f"sha256 of {file.name} is unchecked (no package index reachable, or it lists no hash): {digest}")
        return digest, UNCHECKED
    if found[0] != digest:
        raise SourceMismatch(f"{file.name} has sha256 {digest}, {found[1]} says {found[0]}",
                             f"delete {file} and run again to download it afresh")
    return digest, f"checked against {found[1]}"


def record_check(file: Path, digest: str, checked: str) -> None:
    """Write ``<file>.sha256`` (``sha256sum`` format plus how it was checked) beside the download."""
    file.with_name(file.name + ".sha256").write_text(f"{digest}  {file.name}\n# {checked}\n", encoding="utf-8")


def sdist_vendored_commit(file: Path, version: str) -> tuple[str | None, str | None]:
    """(commit named by the CHANGELOG for ``version``, full sha of the vendored submodule HEAD)."""
    changelog = archives.read_member(file, "CHANGELOG.md")
    head = archives.read_member(file, ".git/modules/vendor/llama.cpp/HEAD")
    named = archives.changelog_commit(changelog, version) if changelog else None
    full = head.strip().lower() if head and _FULL_SHA.match(head.strip().lower()) else None
    return named, full


def verify_pypi(spec: SourceSpec, paths: Paths) -> Verified:
    """The sdist of a ``pypi:`` source (downloaded once, sha256 checked before it is opened) and the llama.cpp
    commit it vendors: its CHANGELOG's for the version, else its vendored submodule's HEAD."""
    name, _, version = spec.arg.partition("==")
    file = cached_sdist(paths, name, version)
    if file is None:
        file, digest, checked = download_sdist(paths, name, version, spec.sha256)
    else:
        digest, checked = _check_cached_sdist(spec, file, name, version)
    named, head = sdist_vendored_commit(file, version)
    vendored = named or head
    if vendored is None:
        raise SourceMismatch(f"{spec}: its CHANGELOG.md names no llama.cpp commit for [{version}]",
                             "use a git or tarball source for this pin")
    record_check(file, digest, checked)
    return Verified(ledger.SourceFact(str(spec), vendored.lower(), digest, file.name, checked), file, head)


def verify(mirror: Mirror, spec: SourceSpec, paths: Paths) -> Verified:
    """Verify a pypi/tarball source now (downloading it when it is not cached) and write what it holds to
    the ledger, unless its bytes could not be checked (then it is verified again next time)."""
    v = (verify_pypi if spec.kind == "pypi" else verify_tarball)(spec, paths)
    if v.fact.checked != UNCHECKED:
        ledger.write(mirror, v.fact)
    return v


def expect_commit(spec: SourceSpec, fact: ledger.SourceFact, commit: str, pin_name: str) -> None:
    """Refuse (SourceMismatch: one line and the fix) a source that holds another commit than ``commit``."""
    held = fact.commit
    if held is None or archives.same_commit(held, commit):
        return
    if spec.kind == "pypi":
        name = spec.arg.partition("==")[0]
        raise SourceMismatch(
            f"{spec} vendors llama.cpp {held}, but pin {pin_name} names {commit}",
            f"set commit = \"{held}\" for pin {pin_name} in pins.toml, or use the "
            f"{name} version whose CHANGELOG says 'update llama.cpp to ggml-org/llama.cpp@{commit[:9]}'")
    raise SourceMismatch(f"{fact.file} is an archive of llama.cpp {held[:12]}, not {commit} (pin {pin_name})",
                         f"use an archive of {commit}, or set commit = \"{held[:9]}\" for pin {pin_name}")


def import_verified(mirror: Mirror, spec: SourceSpec, v: Verified, commit: str, paths: Paths,
                    pin_name: str) -> Provided:
    """Import a verified snapshot into the mirror as ``commit`` (refused when it holds another)."""
    expect_commit(spec, v.fact, commit, pin_name)
    if spec.kind == "pypi":
        upstream = v.head if v.head and archives.same_commit(v.head, commit) else commit
        # the commit message holds only facts about the file, so every machine imports the same sha
        note, subdir = f"sha256: {v.fact.sha256}\nsdist: {v.file.name}", "vendor/llama.cpp"
    else:
        upstream, note, subdir = v.fact.commit or commit, f"sha256: {v.fact.sha256}", None
    sha = _import(mirror, v.file, upstream, str(spec), note, subdir, paths)
    return Provided(upstream, sha, False)


def provide_snapshot(mirror: Mirror, spec: SourceSpec, commit: str, paths: Paths, pin_name: str) -> Provided:
    done = _existing_import(mirror, commit)
    if done:
        return done
    return import_verified(mirror, spec, verify(mirror, spec, paths), commit, paths, pin_name)


PROVIDERS: dict[str, Provider] = {
    "git": provide_git,
    "path": provide_git,
    "tarball": provide_snapshot,
    "pypi": provide_snapshot,
}


def _last(res: proc.Result) -> str:
    if res.timed_out:
        return f"timed out after {res.seconds:.0f}s"
    lines = [ln.strip() for ln in res.output.splitlines() if ln.strip()]
    return lines[-1] if lines else f"exit code {res.returncode}"
