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
                ``Paths.downloads/tarballs/``, extracted and imported.
* ``pypi:NAME==VER``  the llama-cpp-python sdist (``pip download`` so the user's index settings
                apply), cached in ``Paths.downloads``; sha256 checked; its CHANGELOG must name the
                pinned commit; ``vendor/llama.cpp`` is imported.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlparse

import requests

from .. import proc
from ..config import UPSTREAM_URL, SourceSpec
from ..console import err_console, notice
from ..errors import SourceError
from ..paths import Paths
from . import archives
from .mirror import Mirror, slug

PYPI_JSON_URL = "https://pypi.org/pypi/{name}/{version}/json"
PYPI_SIMPLE_URL = "https://pypi.org/simple/{name}/"
FETCH_TIMEOUT = 3600.0
PIP_TIMEOUT = 1800.0
_FULL_SHA = re.compile(r"^[0-9a-f]{40}$")


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


# -- snapshots ------------------------------------------------------------------------------------

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


def provide_tarball(mirror: Mirror, spec: SourceSpec, commit: str, paths: Paths, pin_name: str) -> Provided:
    done = _existing_import(mirror, commit)
    if done:
        return done
    arg = spec.arg
    if arg.startswith(("http://", "https://")):
        base = unquote(Path(urlparse(arg).path).name) or "source.tar.gz"
        file = paths.downloads / "tarballs" / f"{hashlib.sha1(arg.encode()).hexdigest()[:12]}-{base}"
        if not file.is_file():
            archives.download(arg, file)
    else:
        file = Path(unquote(urlparse(arg).path) if arg.startswith("file://") else arg).expanduser()
        file = file if file.is_absolute() else paths.workspace / file
        if not file.is_file():
            raise SourceError(f"tarball {file} does not exist", f"fix the path in \"{spec}\"")
    digest = archives.sha256_of(file)
    _check_pinned_sha256(spec, file, digest)
    upstream = commit
    recorded = archives.git_archive_commit(file)
    if recorded:
        if not archives.same_commit(recorded, commit):
            raise SourceMismatch(f"{file.name} is an archive of llama.cpp {recorded[:12]}, not {commit} (pin {pin_name})",
                                 f"use an archive of {commit}, or set commit = \"{recorded[:9]}\" for pin {pin_name}")
        upstream = recorded
    sha = _import(mirror, file, upstream, str(spec), f"sha256: {digest}", None, paths)
    return Provided(upstream, sha, False)


def _sdist_names(name: str, version: str) -> list[str]:
    norm = re.sub(r"[-_.]+", "_", name).lower()
    return [f"{norm}-{version}.tar.gz", f"{name}-{version}.tar.gz", f"{name.lower()}-{version}.tar.gz"]


def cached_sdist(paths: Paths, name: str, version: str) -> Path | None:
    for n in _sdist_names(name, version):
        if (paths.downloads / n).is_file():
            return paths.downloads / n
    return None


def pip_download(paths: Paths, name: str, version: str) -> Path:
    """``pip download`` the sdist (the user's index settings apply) into ``Paths.downloads``."""
    with tempfile.TemporaryDirectory(prefix="lf-pip-", dir=paths.downloads) as tmp:
        args = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
                "--no-build-isolation", "--disable-pip-version-check", "-d", tmp, f"{name}=={version}"]
        with err_console.status(f"pip download {name}=={version} (sdist)"):
            res = proc.run(args, timeout=PIP_TIMEOUT)
        files = sorted(Path(tmp).glob("*.tar.gz"))
        if not res.ok or not files:
            raise SourceError(f"pip download {name}=={version} failed: {_last(res)}",
                              "check the network / pip index settings, or put the sdist in " + str(paths.downloads))
        dest = paths.downloads / files[0].name
        shutil.move(str(files[0]), dest)
    return dest


def pypi_sha256(name: str, version: str, filename: str) -> tuple[str, str] | None:
    """PyPI's sha256 for ``filename`` of ``name==version`` and where it came from (the JSON API,
    else the PEP 691 simple index, which pip itself uses); None when neither can be asked."""
    timeout = (archives.CONNECT_TIMEOUT, 30)
    try:
        r = requests.get(PYPI_JSON_URL.format(name=name, version=version), timeout=timeout)
        if r.ok:
            for u in r.json().get("urls", []):
                if u.get("filename") == filename and u.get("digests", {}).get("sha256"):
                    return str(u["digests"]["sha256"]).lower(), "PyPI JSON API"
    except (requests.RequestException, ValueError):
        pass
    try:
        norm = re.sub(r"[-_.]+", "-", name).lower()
        r = requests.get(PYPI_SIMPLE_URL.format(name=norm), timeout=timeout,
                         headers={"Accept": "application/vnd.pypi.simple.v1+json"})
        if r.ok:
            for f in r.json().get("files", []):
                if f.get("filename") == filename and f.get("hashes", {}).get("sha256"):
                    return str(f["hashes"]["sha256"]).lower(), "PyPI simple index"
    except (requests.RequestException, ValueError):
        pass
    return None


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


def provide_pypi(mirror: Mirror, spec: SourceSpec, commit: str, paths: Paths, pin_name: str) -> Provided:
    done = _existing_import(mirror, commit)
    if done:
        return done
    name, _, version = spec.arg.partition("==")
    file = cached_sdist(paths, name, version) or pip_download(paths, name, version)
    digest = archives.sha256_of(file)
    if spec.sha256:
        _check_pinned_sha256(spec, file, digest)
        checked = "checked against pins.toml"
    else:
        found = pypi_sha256(name, version, file.name)
        if found is None:
            notice(f"sha256 of {file.name} is unchecked (PyPI not reachable or file not listed): {digest}")
            checked = "unchecked"
        elif found[0] != digest:
            raise SourceMismatch(f"{file.name} has sha256 {digest}, {found[1]} says {found[0]}",
                                 f"delete {file} and run again to download it afresh")
        else:
            checked = f"checked against {found[1]}"
    named, head = sdist_vendored_commit(file, version)
    vendored = named or head
    if vendored is None:
        raise SourceMismatch(f"{spec}: its CHANGELOG.md names no llama.cpp commit for [{version}]",
                             "use a git or tarball source for this pin")
    if not archives.same_commit(vendored, commit):
        raise SourceMismatch(
            f"{spec} vendors llama.cpp {vendored}, but pin {pin_name} names {commit}",
            f"set commit = \"{vendored}\" for pin {pin_name} in pins.toml, or use the "
            f"{name} version whose CHANGELOG says 'update llama.cpp to ggml-org/llama.cpp@{commit[:9]}'")
    upstream = head if head and archives.same_commit(head, commit) else commit
    record_check(file, digest, checked)
    # the commit message holds only facts about the file, so every machine imports the same sha
    note = f"sha256: {digest}\nsdist: {file.name}"
    sha = _import(mirror, file, upstream, str(spec), note, "vendor/llama.cpp", paths)
    return Provided(upstream, sha, False)


PROVIDERS: dict[str, Provider] = {
    "git": provide_git,
    "path": provide_git,
    "tarball": provide_tarball,
    "pypi": provide_pypi,
}


def _last(res: proc.Result) -> str:
    if res.timed_out:
        return f"timed out after {res.seconds:.0f}s"
    lines = [ln.strip() for ln in res.output.splitlines() if ln.strip()]
    return lines[-1] if lines else f"exit code {res.returncode}"
