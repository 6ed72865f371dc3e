"""Hostile pins and sources (issue 12), against REAL git, a real local HTTP server and a real
package index on 127.0.0.1: an option-like git URL runs nothing, a plain-http tarball needs a
sha256, and an sdist's build hooks never run before its hash is checked."""

from __future__ import annotations

import functools
import hashlib
import http.server
import io
import os
import subprocess
import sys
import tarfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_sources import CHANGELOG, Upstream, git_archive

from llamaforge.config import Pin, SourceSpec, parse_pins
from llamaforge.errors import ConfigError, SourceError
from llamaforge.paths import Paths
from llamaforge.sources import SourceMismatch, checkout
from llamaforge.sources.mirror import Mirror

EVIL = "--upload-pack=touch pwned"


@pytest.fixture
def paths(source_paths: Paths) -> Paths:
    return source_paths


def pwned(root: Path) -> list[Path]:
    return [p for p in root.rglob("*pwned*")]


# -- git URLs -------------------------------------------------------------------------------------

@pytest.mark.parametrize("text", [
    f"git:{EVIL}", "git:-oProxyCommand=touch pwned", "git:ext::sh -c touch% pwned", "git:fd::3",
    "git:ssh://-oProxyCommand=touch%20pwned/x", "git:git@-oProxyCommand=x:y", "git:https://x/y\n--upload-pack=z",
    "git:/some/local/dir", "path:--upload-pack=x", "tarball:-x.tgz", "tarball:ftp://example.com/x.tgz",
    "tarball:http://example.com/x.tgz",
    # issue 22: the user or a bracketed host is what ssh sees first; "-" there is an option
    "git:ssh://-oProxyCommand=touch%20pwned@host/x", "git:ssh://[-oProxyCommand=touch%20pwned]:22/x",
    "git:ssh://u@[-oProxyCommand=x]/x", "git:ssh://%2DoProxyCommand=x@host/x", "git:ssh://%2doX@host/x",
    "git:ssh://-oX@host", "git:https://-oX:pw@host/r.git", "git:ssh://x@host\\@-oX/r",
])
def test_unsafe_sources_are_refused_with_one_line_and_a_fix(text: str) -> None:
    with pytest.raises(ConfigError) as exc:
        SourceSpec.parse(text)
    assert "\n" not in exc.value.message.replace(repr(text), "") and exc.value.fix


@pytest.mark.parametrize("text", [
    "git", "git:https://github.com/ggml-org/llama.cpp", "git:http://127.0.0.1:8080/x.git",
    "git:ssh://git@example.com/o/r.git", "git:git://example.com/r", "git:file:///srv/llama.cpp",
    "git:ssh://git@[::1]:22/o/r.git", "git:ssh://git-user@example.com/o/r.git", "git:ssh://example.com/-x/r.git",
    "git:git@github.com:ggml-org/llama.cpp.git", "path:/srv/llama.cpp", "path:vendor/x",
    "tarball:https://example.com/x.tgz", "tarball:/tmp/x.tgz", "tarball:file:///tmp/x.tgz",
    "tarball:http://example.com/x.tgz#sha256=" + "a" * 64, "pypi:llama-cpp-python==0.3.36",
])
def test_ordinary_sources_are_accepted(text: str) -> None:
    assert SourceSpec.parse(text).kind == text.partition(":")[0]


def test_a_spec_cannot_be_built_around_the_check() -> None:
    with pytest.raises(ConfigError):
        SourceSpec("git", EVIL)


def test_mirror_fetch_never_reads_a_url_as_an_option(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Defence in depth with real git: even a URL that got past validation is a repository after ``--``."""
    monkeypatch.chdir(tmp_path)
    res = Mirror(tmp_path / "mirror.git").fetch(EVIL, ["+refs/heads/*:refs/remotes/x/heads/*"], timeout=60)
    assert not res.ok
    assert pwned(tmp_path) == []


def _cli(args: list[str], ws: Path, tmp_path: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "LLAMAFORGE_WORKSPACE": str(ws), "LLAMAFORGE_CACHE": str(tmp_path / "cache"),
           "LLAMAFORGE_RESULTS": str(tmp_path / "results"), "LLAMAFORGE_BUILD_ROOT": str(tmp_path / "builds")}
    env.pop("LLAMAFORGE_DEBUG", None)
    return subprocess.run([sys.executable, "-m", "llamaforge", *args], cwd=tmp_path, env=env, text=True,
                          capture_output=True, timeout=300)


@pytest.mark.parametrize("args", [
    ["build", "--backends", "cpu"], ["source-tarball"],
    ["compare", "--base", "abcdef123", "--head", "123abcdef", "--source", f"git:{EVIL}"],
    ["bisect", "--good", "abcdef123", "--bad", "123abcdef", "--source", f"git:{EVIL}"],
], ids=["build", "source-tarball", "compare", "bisect"])
def test_option_like_git_url_fails_with_one_line_and_creates_no_file(args: list[str], tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "pins.toml").write_text(
        'default = "evil"\n[pins.evil]\ncommit = "abcdef123"\n'
        + ('sources = ["git:--upload-pack=touch pwned"]\n' if "--source" not in args else 'sources = ["path:/nowhere"]\n'))
    r = _cli(args, ws, tmp_path)
    assert r.returncode != 0
    assert "Traceback" not in r.stderr + r.stdout
    errors = [ln for ln in r.stderr.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1 and 'starts with "-"' in errors[0] and "fix:" in errors[0], r.stderr
    assert pwned(tmp_path) == []


# -- tarballs over http ---------------------------------------------------------------------------

@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[Path, str, list[str]]]:
    """A real HTTP server on 127.0.0.1 serving a folder: (folder, base URL, requested paths)."""
    root = tmp_path / "www"
    root.mkdir()
    seen: list[str] = []

    class Handler(http.server.SimpleHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            seen.append(self.path)
            super().do_GET()

        def log_message(self, *a: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Handler, directory=str(root)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield root, f"http://127.0.0.1:{server.server_address[1]}", seen
    finally:
        server.shutdown()
        server.server_close()


def test_plain_http_tarball_without_sha256_is_refused_before_any_download(
        paths: Paths, served: tuple[Path, str, list[str]], tmp_path: Path) -> None:
    root, base, seen = served
    up = Upstream(tmp_path / "up")
    git_archive(up, up.c4, root / "c4.tar.gz")
    text = f'[pins.t]\ncommit = "{up.c4[:9]}"\nsources = ["tarball:{base}/c4.tar.gz"]\n'
    with pytest.raises(ConfigError, match="plain-http") as exc:
        parse_pins(text)
    assert "#sha256=" in (exc.value.fix or "")
    assert seen == []


def test_plain_http_tarball_with_sha256_is_checked_before_it_is_kept_or_opened(
        paths: Paths, served: tuple[Path, str, list[str]], tmp_path: Path) -> None:
    root, base, seen = served
    up = Upstream(tmp_path / "up")
    good = hashlib.sha256(git_archive(up, up.c4, root / "c4.tar.gz").read_bytes()).hexdigest()
    wrong = SourceSpec.parse(f"tarball:{base}/c4.tar.gz#sha256={'0' * 64}")
    with pytest.raises(SourceMismatch, match="sha256"):
        checkout(Pin("t", up.c4[:9], (wrong,)), paths)
    assert not list((paths.downloads / "tarballs").glob("*c4.tar.gz*")), "a wrong download is not cached"
    assert Mirror(paths.mirror).imports() == {}
    right = SourceSpec.parse(f"tarball:{base}/c4.tar.gz#sha256={good}")
    assert right.sha256 == good and right.arg == f"{base}/c4.tar.gz"
    tree = checkout(Pin("t", up.c4[:9], (right,)), paths)
    assert tree.commit == up.c4 and len(seen) == 2


def test_sha256_in_the_fragment_and_in_the_table_must_agree() -> None:
    text = ('[pins.t]\ncommit = "abcdef1"\nsources = ["tarball:http://h/x.tgz#sha256=' + "a" * 64 + '"]\n'
            '[pins.t.sha256]\n"tarball:http://h/x.tgz#sha256=' + "a" * 64 + '" = "' + "b" * 64 + '"\n')
    with pytest.raises(ConfigError, match="two different sha256"):
        parse_pins(text)


# -- pypi sdists: no build hook runs --------------------------------------------------------------

def hostile_sdist(dest: Path, marker: Path, commit: str) -> Path:
    """An sdist whose build hooks (setup.py, run by pip's metadata step) would write ``marker``."""
    top = "fake_cpp_python-0.9.1"
    hook = f"open({str(marker)!r}, 'w').write('build hook ran')\n"
    files = {"setup.py": hook + "from setuptools import setup\nsetup(name='fake-cpp-python', version='0.9.1')\n",
             "pyproject.toml": '[build-system]\nrequires = ["setuptools"]\nbuild-backend = "setuptools.build_meta"\n',
             "PKG-INFO": "Metadata-Version: 2.1\nName: fake-cpp-python\nVersion: 0.9.1\n",
             "CHANGELOG.md": CHANGELOG.format(new=commit, old="1111111aa"),
             "vendor/llama.cpp/CMakeLists.txt": "project(llama)\n"}
    with tarfile.open(dest, "w:gz") as tf:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(f"{top}/{name}")
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    return dest


@pytest.mark.parametrize("listing", ["html", "json"])
def test_pypi_sdist_is_hash_checked_and_imported_without_running_its_build_hooks(
        paths: Paths, served: tuple[Path, str, list[str]], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch, listing: str) -> None:
    root, base, _ = served
    marker = tmp_path / "hook-ran"
    sdist = hostile_sdist(tmp_path / "fake_cpp_python-0.9.1.tar.gz", marker, "0c1e57098")
    (root / "files").mkdir()
    (root / "files" / sdist.name).write_bytes(sdist.read_bytes())
    digest = hashlib.sha256(sdist.read_bytes()).hexdigest()
    page = root / "simple" / "fake-cpp-python"
    page.mkdir(parents=True)
    if listing == "html":
        page.joinpath("index.html").write_text(
            f'<html><body><a href="../../files/{sdist.name}#sha256={digest}">{sdist.name}</a></body></html>')
    else:   # PEP 691 JSON, served as such
        (page / "index.json").write_text(
            f'{{"files": [{{"filename": "{sdist.name}", "url": "../../files/{sdist.name}", '
            f'"hashes": {{"sha256": "{digest}"}}}}]}}')
        page.joinpath("index.html").symlink_to(page / "index.json")
        monkeypatch.setattr(http.server.SimpleHTTPRequestHandler, "guess_type",
                            lambda self, path: "application/vnd.pypi.simple.v1+json")
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)   # this machine's pip config must not add indexes
    # an index URL with credentials (as in pip.conf): they must not end up in messages or records
    monkeypatch.setenv("PIP_INDEX_URL", f"{base}/simple/".replace("http://", "http://user:s3cret@"))
    monkeypatch.delenv("PIP_EXTRA_INDEX_URL", raising=False)

    tree = checkout(Pin(
        "default", "0c1e57098", (SourceSpec("pypi", "fake-cpp-python==0.9.1"),)), paths)
    assert not marker.exists(), "the sdist's build hook ran"
    assert (tree.path / "CMakeLists.txt").is_file() and tree.commit == "0c1e57098"
    record = (paths.downloads / (sdist.name + ".sha256")).read_text()
    assert digest in record and f"checked against {base}/simple/fake-cpp-python/" in record
    assert "s3cret" not in record


def test_pypi_sdist_with_a_wrong_index_hash_is_refused_and_not_kept(
        paths: Paths, served: tuple[Path, str, list[str]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root, base, _ = served
    marker = tmp_path / "hook-ran"
    sdist = hostile_sdist(root / "fake_cpp_python-0.9.1.tar.gz", marker, "0c1e57098")
    (root / "simple" / "fake-cpp-python").mkdir(parents=True)
    (root / "simple" / "fake-cpp-python" / "index.html").write_text(
        f'<a href="/{sdist.name}#sha256={"e" * 64}">{sdist.name}</a>')
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("PIP_INDEX_URL", f"{base}/simple")
    monkeypatch.delenv("PIP_EXTRA_INDEX_URL", raising=False)
    with pytest.raises(SourceMismatch, match="e{64}"):
        checkout(Pin(
            "default", "0c1e57098", (SourceSpec("pypi", "fake-cpp-python==0.9.1"),)), paths)
    assert not marker.exists()
    assert [p.name for p in paths.downloads.iterdir() if "fake" in p.name] == []


def test_pypi_sdist_no_index_lists_is_a_source_error(paths: Paths, served: tuple[Path, str, list[str]],
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    _, base, _ = served
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("PIP_INDEX_URL", f"{base}/simple")
    monkeypatch.delenv("PIP_EXTRA_INDEX_URL", raising=False)
    with pytest.raises(SourceError) as exc:
        checkout(Pin(
            "default", "0c1e57098", (SourceSpec("pypi", "fake-cpp-python==0.9.1"),)), paths)
    assert exc.value.fix
