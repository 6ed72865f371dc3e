"""Archives for the snapshot sources: download with progress, sha256, safe extraction, and reading
which llama.cpp commit an archive holds (git-archive's pax comment, an sdist's CHANGELOG.md and
its ``.git/modules/vendor/llama.cpp/HEAD``)."""

from __future__ import annotations

import os
import re
import shutil
import tarfile
from pathlib import Path
from typing import TYPE_CHECKING

from rich.markup import escape
from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TransferSpeedColumn

from ..console import err_console
from ..errors import SourceError
from ..files import sha256_file
from ..lazy import lazy

if TYPE_CHECKING:
    import requests
else:   # loaded on first use (llamaforge.lazy): most commands never download
    requests = lazy("requests")

CONNECT_TIMEOUT = float(os.environ.get("LLAMAFORGE_NET_TIMEOUT", "5"))
READ_TIMEOUT = 60.0
#: an archive is data from a server we do not control: at most this many members, this many bytes unpacked,
#: and a member read as text (an sdist's CHANGELOG.md) at most MAX_MEMBER_READ bytes (a 7 MB sdist unpacked
#: its CHANGELOG to 3.1 GB). llama.cpp itself: ~3,000 files, ~100 MB.
MAX_MEMBERS = 100_000
MAX_UNPACKED = 4 * 2**30
MAX_MEMBER_READ = 8 * 2**20


def _members(tf: tarfile.TarFile, archive: Path) -> list[tarfile.TarInfo]:
    """The archive's members, refused past :data:`MAX_MEMBERS` before all are read."""
    out = []
    for m in tf:
        out.append(m)
        if len(out) > MAX_MEMBERS:
            raise SourceError(f"archive {archive.name} has more than {MAX_MEMBERS:,} members: not a source archive",
                              f"delete {archive} and check where it came from (llama.cpp has a few thousand files)")
    return out


def sha256_of(path: Path) -> str:
    return sha256_file(path)


def download(url: str, dest: Path) -> Path:
    """Download ``url`` to ``dest`` (via a part file of this process, renamed when complete) with a progress
    bar. Two processes fetching one file each write their own part; the last complete one is renamed over."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    part = dest.with_name(f"{dest.name}.{os.getpid()}.part")
    try:
        with requests.get(url, stream=True, timeout=(CONNECT_TIMEOUT, READ_TIMEOUT)) as r:
            r.raise_for_status()
            total = int(r.headers.get("content-length") or 0) or None
            with Progress(TextColumn("[bold]download[/] {task.description}"), BarColumn(), DownloadColumn(),
                          TransferSpeedColumn(), console=err_console, transient=True) as bar, \
                    open(part, "wb") as f:
                task = bar.add_task(escape(dest.name), total=total)
                for chunk in r.iter_content(1 << 16):
                    f.write(chunk)
                    bar.advance(task, len(chunk))
    except (requests.RequestException, OSError) as e:
        part.unlink(missing_ok=True)
        raise SourceError(f"cannot download {url}: {_short(e)}",
                          "check the URL and the network, or put the file in place and use its path") from e
    part.replace(dest)
    return dest


def git_archive_commit(archive: Path) -> str | None:
    """The commit ``git archive`` recorded in a tarball's pax global header, if any; SourceError when
    the file is no tar archive at all."""
    try:
        with tarfile.open(archive, "r:*") as tf:
            comment = str((tf.pax_headers or {}).get("comment", ""))
    except (tarfile.TarError, EOFError, OSError) as e:
        raise SourceError(f"bad archive {archive}: {_short(e)}",
                          f"delete {archive} so it is downloaded again, or point the source at a valid .tar.gz") from e
    return comment.strip() if re.fullmatch(r"[0-9a-f]{40}", comment.strip()) else None


def _common_root(names: list[str]) -> str | None:
    tops = {n.split("/", 1)[0] for n in names if n.strip("/")}
    if len(tops) == 1 and any("/" in n.strip("/") for n in names):
        return tops.pop()
    return None


def extract(archive: Path, dest: Path, *, subdir: str | None = None) -> Path:
    """Extract ``archive`` (any tar) into ``dest`` and return the source root in it.

    The single top-level folder (``llama.cpp-<sha>/``) is stripped. With ``subdir`` only that
    folder (relative to the top level, e.g. ``vendor/llama.cpp``) is extracted. ``.git`` entries
    are skipped, and members that would escape ``dest`` are refused (tarfile's ``data`` filter).
    """
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    try:
        with tarfile.open(archive, "r:*") as tf:
            members = _members(tf, archive)
            for m in members:
                m.name = m.name[2:] if m.name.startswith("./") else m.name
            root = _common_root([m.name for m in members])
            prefix = (root + "/" if root else "") + (subdir.strip("/") + "/" if subdir else "")
            chosen = []
            for m in members:
                name = m.name
                if not name.startswith(prefix) or name == prefix:
                    continue
                rel = name[len(prefix):]
                if not rel or ".git" in rel.split("/"):
                    continue
                m.name = rel
                if m.islnk() and m.linkname.startswith(prefix):
                    m.linkname = m.linkname[len(prefix):]
                chosen.append(m)
            if not chosen:
                what = f"a {subdir}/ folder" if subdir else "any files"
                raise SourceError(f"{archive.name} has no {what}",
                                  "check that the archive is a llama.cpp source archive")
            total = sum(m.size for m in chosen if m.isfile())
            if total > MAX_UNPACKED:
                raise SourceError(f"archive {archive.name} would unpack to {total / 2**30:.1f} GiB "
                                  f"(more than {MAX_UNPACKED // 2**30} GiB): not extracted",
                                  f"delete {archive} and check where it came from (llama.cpp unpacks to ~100 MB)")
            tf.extractall(dest, members=chosen, filter="data")
    except SourceError:
        shutil.rmtree(dest, ignore_errors=True)
        raise
    except (tarfile.TarError, EOFError, OSError, ValueError) as e:
        shutil.rmtree(dest, ignore_errors=True)
        raise SourceError(f"bad archive {archive}: {_short(e)}",
                          f"delete {archive} so it is downloaded again, or point the source at a valid .tar.gz") from e
    return dest


def read_member(archive: Path, relpath: str, *, limit: int = MAX_MEMBER_READ) -> str | None:
    """Text of one file (path relative to the archive's top-level folder), or None if absent; a member
    larger than ``limit`` bytes, or an archive of more than :data:`MAX_MEMBERS` members, is refused unread."""
    try:
        with tarfile.open(archive, "r:*") as tf:
            for i, m in enumerate(tf):
                if i >= MAX_MEMBERS:
                    raise SourceError(f"archive {archive.name} has more than {MAX_MEMBERS:,} members: not read",
                                      f"delete {archive} and check where it came from")
                name = m.name.split("/", 1)[1] if "/" in m.name else m.name
                if name == relpath and m.isfile():
                    if m.size > limit:
                        raise SourceError(f"{relpath} in {archive.name} is {m.size / 2**20:.0f} MiB (more than "
                                          f"{limit // 2**20} MiB): not read", f"delete {archive} and check where it came from")
                    f = tf.extractfile(m)
                    return f.read(limit + 1).decode("utf-8", errors="replace") if f else None
    except (tarfile.TarError, EOFError, OSError) as e:
        raise SourceError(f"bad archive {archive}: {_short(e)}",
                          f"delete {archive} so it is downloaded again") from e
    return None


_SECTION = re.compile(r"^##\s*\[(?P<ver>[^\]]+)\]", re.M)
_UPDATE = re.compile(r"llama\.cpp@([0-9a-f]{7,40})")


def changelog_commit(changelog: str, version: str) -> str | None:
    """The llama.cpp commit the ``## [VERSION]`` section says it updated to (its first, i.e.
    latest, ``update llama.cpp to ggml-org/llama.cpp@<sha>`` line), or None."""
    heads = list(_SECTION.finditer(changelog))
    for i, h in enumerate(heads):
        if h.group("ver").strip() == version:
            end = heads[i + 1].start() if i + 1 < len(heads) else len(changelog)
            m = _UPDATE.search(changelog, h.end(), end)
            return m.group(1) if m else None
    return None


def same_commit(a: str, b: str) -> bool:
    """True when two (possibly abbreviated, >= 7 hex) commit names agree."""
    a, b = a.lower(), b.lower()
    return len(min(a, b, key=len)) >= 7 and (a.startswith(b) or b.startswith(a))


def _short(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return (text[0] if text else type(e).__name__)[:200]
