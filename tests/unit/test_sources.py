"""The sources layer on small local git repos: path/git fetch into the one mirror, worktrees,
first-parent ranges, fall-through between sources, tarball and (fake) pypi-sdist imports."""

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
from pathlib import Path

import git
import pytest

from llamaforge import proc
from llamaforge.config import Pin, SourceSpec
from llamaforge.errors import SourceError
from llamaforge.paths import Paths
from llamaforge.sources import (
    SourceMismatch,
    archives,
    checkout,
    checkout_commit,
    first_parent_commits,
    providers,
    resolve_commit,
)
from llamaforge.sources.mirror import IMPORT_TAG_PREFIX, Mirror


@pytest.fixture
def paths(source_paths: Paths) -> Paths:
    return source_paths


@pytest.fixture
def notices(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    seen: list[str] = []
    monkeypatch.setattr("llamaforge.sources.notice", seen.append)
    monkeypatch.setattr("llamaforge.sources.providers.notice", seen.append)
    return seen


class Upstream:
    """A tiny llama.cpp stand-in: main c1 -> c2 -> merge(side) -> c4, with a side-branch commit."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.repo = git.Repo.init(root, initial_branch="master")
        with self.repo.config_writer() as cw:
            cw.set_value("user", "name", "t")
            cw.set_value("user", "email", "t@example.invalid")
        self.c1 = self.commit("first", {"CMakeLists.txt": "project(x)\n", "ggml/a.c": "int a;\n"})
        self.c2 = self.commit("second", {"ggml/a.c": "int a = 2;\n"})
        self.repo.git.checkout("-b", "side")
        self.side = self.commit("side work", {"side.txt": "s\n"})
        self.repo.git.checkout("master")
        self.repo.git.merge("--no-ff", "-m", "merge side", "side")
        self.merge = self.repo.head.commit.hexsha
        self.c4 = self.commit("fourth: speed up decode", {"ggml/a.c": "int a = 4;\n"})

    def commit(self, msg: str, files: dict[str, str]) -> str:
        for name, text in files.items():
            p = self.root / name
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_text(text)
            self.repo.index.add([name])
        return self.repo.index.commit(msg).hexsha


@pytest.fixture
def upstream(tmp_path: Path) -> Upstream:
    return Upstream(tmp_path / "upstream")


def path_spec(up: Upstream) -> SourceSpec:
    return SourceSpec("path", str(up.root))


def head_of(tree: Path) -> str:
    return proc.run(["git", "-C", str(tree), "rev-parse", "HEAD"]).output.strip()


# -- git / path -----------------------------------------------------------------------------------

def test_path_source_fetches_into_mirror_and_gives_worktree_at_commit(paths: Paths, upstream: Upstream) -> None:
    tree = checkout(Pin("p", upstream.c2[:9], (path_spec(upstream),)), paths)
    assert tree.path == paths.vendor / upstream.c2[:9]
    assert (tree.path / "ggml/a.c").read_text() == "int a = 2;\n"
    assert tree.commit == tree.mirror_commit == upstream.c2
    assert tree.native_git and tree.build_number == 2 and tree.subject == "second"
    assert tree.origin == f"path:{upstream.root}"
    assert head_of(tree.path) == upstream.c2
    # one mirror, each remote in its own namespace
    refs = proc.run(["git", f"--git-dir={paths.mirror}", "for-each-ref", "--format=%(refname)"]).output
    assert any(r.startswith("refs/remotes/") and r.endswith("/heads/master") for r in refs.split())


def test_pin_build_number_wins_over_rev_list_count(paths: Paths, upstream: Upstream) -> None:
    tree = checkout(Pin("p", upstream.c4, (path_spec(upstream),), build_number=6000), paths)
    assert tree.build_number == 6000


def test_commit_already_in_mirror_needs_no_reachable_source(paths: Paths, upstream: Upstream,
                                                            notices: list[str]) -> None:
    checkout(Pin("p", upstream.c4, (path_spec(upstream),)), paths)
    tree = checkout(Pin("q", upstream.c1[:8], (SourceSpec("git", "http://127.0.0.1:9/x"),)), paths)
    assert tree.mirror_commit == upstream.c1 and notices == []


def test_worktree_reused_when_valid_and_recreated_when_corrupt(paths: Paths, upstream: Upstream) -> None:
    pin = Pin("p", upstream.c4, (path_spec(upstream),))
    tree = checkout(pin, paths)
    (tree.path / "marker.untracked").write_text("x")
    assert checkout(pin, paths).path == tree.path
    assert (tree.path / "marker.untracked").exists(), "a valid worktree is reused as is"
    (tree.path / "CMakeLists.txt").unlink()
    again = checkout(pin, paths)
    assert (again.path / "CMakeLists.txt").is_file() and not (again.path / "marker.untracked").exists()
    assert head_of(again.path) == upstream.c4


def test_worktree_at_wrong_commit_is_replaced(paths: Paths, upstream: Upstream) -> None:
    tree = checkout(Pin("p", upstream.c4, (path_spec(upstream),)), paths)
    proc.run(["git", "-C", str(tree.path), "checkout", "--detach", upstream.c1])
    assert head_of(tree.path) == upstream.c1
    assert head_of(checkout(Pin("p", upstream.c4, (path_spec(upstream),)), paths).path) == upstream.c4


def test_first_parent_commits_lists_range_oldest_first(paths: Paths, upstream: Upstream) -> None:
    got = first_parent_commits(paths, upstream.c1[:10], upstream.c4, path_spec(upstream))
    assert got == [upstream.c2, upstream.merge, upstream.c4]
    assert upstream.side not in got


def test_first_parent_commits_refuses_good_that_is_not_an_ancestor(paths: Paths, upstream: Upstream) -> None:
    with pytest.raises(SourceError, match="not an ancestor") as exc:
        first_parent_commits(paths, upstream.c4, upstream.c1, path_spec(upstream))
    assert exc.value.fix


def test_unknown_commit_is_a_source_error_naming_it(paths: Paths, upstream: Upstream) -> None:
    with pytest.raises(SourceError, match="deadbeef12") as exc:
        checkout(Pin("p", "deadbeef12", (path_spec(upstream),)), paths)
    assert exc.value.fix
    with pytest.raises(SourceError, match="not in the mirror"):
        resolve_commit(paths, "0123456789abcdef")


def test_resolve_and_checkout_commit_accept_branch_names_of_a_spec(paths: Paths, upstream: Upstream) -> None:
    assert resolve_commit(paths, "side", path_spec(upstream)) == upstream.side
    tree = checkout_commit(upstream.merge, paths)
    assert tree.commit == upstream.merge and tree.subject == "merge side" and tree.build_number == 4


@pytest.mark.parametrize("dead", ["http://127.0.0.1:9/x", "https://github.com/ggml-org/llama.cpp"])
def test_failing_git_source_falls_through_to_path_with_one_notice(paths: Paths, upstream: Upstream,
                                                                  notices: list[str], dead: str) -> None:
    pin = Pin("p", upstream.c2, (SourceSpec("git", dead), path_spec(upstream)))
    tree = checkout(pin, paths)
    assert tree.origin == f"path:{upstream.root}" and tree.mirror_commit == upstream.c2
    assert len(notices) == 1 and dead in notices[0] and "\n" not in notices[0]


def test_all_sources_failing_lists_each_reason(paths: Paths, tmp_path: Path, notices: list[str]) -> None:
    pin = Pin("p", "abcdef1234", (SourceSpec("git", "http://127.0.0.1:9/x"),
                                  SourceSpec("path", str(tmp_path / "nowhere"))))
    with pytest.raises(SourceError) as exc:
        checkout(pin, paths)
    assert "http://127.0.0.1:9/x" in exc.value.message and "nowhere" in exc.value.message
    assert exc.value.fix


# -- tarball --------------------------------------------------------------------------------------

def git_archive(up: Upstream, commit: str, dest: Path) -> Path:
    res = proc.run(["git", "-C", str(up.root), "archive", "--format=tar.gz",
                    f"--prefix=llama.cpp-{commit[:7]}/", "-o", str(dest), commit])
    assert res.ok, res.output
    return dest


def plain_tarball(files: dict[str, str], dest: Path, top: str = "src") -> Path:
    with tarfile.open(dest, "w:gz") as tf:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(f"{top}/{name}" if top else name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    return dest


def test_tarball_is_imported_as_tagged_commit_with_full_sha_from_git_archive(
        paths: Paths, upstream: Upstream, tmp_path: Path) -> None:
    tgz = git_archive(upstream, upstream.c2, tmp_path / "c2.tar.gz")
    tree = checkout(Pin("t", upstream.c2[:9], (SourceSpec("tarball", str(tgz)),)), paths)
    assert tree.commit == upstream.c2 and not tree.native_git and tree.mirror_commit != upstream.c2
    assert (tree.path / "ggml/a.c").read_text() == "int a = 2;\n"
    assert head_of(tree.path) == tree.mirror_commit
    m = Mirror(paths.mirror)
    assert m.resolve(IMPORT_TAG_PREFIX + upstream.c2) == tree.mirror_commit
    msg = m.message(tree.mirror_commit)
    assert upstream.c2 in msg and f"tarball:{tgz}" in msg
    assert tree.build_number is None and tree.origin == f"tarball:{tgz}"
    # later lookups by the pin's abbreviation find the import, with no source at all
    assert resolve_commit(paths, upstream.c2[:9]) == tree.mirror_commit


def test_tarball_url_is_downloaded_once_into_the_downloads_cache(paths: Paths, upstream: Upstream,
                                                                tmp_path: Path) -> None:
    served = tmp_path / "www"
    served.mkdir()
    git_archive(upstream, upstream.c4, served / "c4.tar.gz")
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(served))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/c4.tar.gz"
        digest = hashlib.sha256((served / "c4.tar.gz").read_bytes()).hexdigest()
        spec = SourceSpec.parse(f"tarball:{url}#sha256={digest}")   # plain http needs a sha256
        tree = checkout(Pin("t", upstream.c4[:9], (spec,)), paths)
    finally:
        server.shutdown()
        server.server_close()
    assert tree.commit == upstream.c4 and (tree.path / "side.txt").is_file()
    cached = list((paths.downloads / "tarballs").glob("*-c4.tar.gz"))
    assert len(cached) == 1 and cached[0].read_bytes() == (served / "c4.tar.gz").read_bytes()


def test_reimport_is_a_noop_and_import_is_deterministic(paths: Paths, tmp_path: Path) -> None:
    tgz = plain_tarball({"CMakeLists.txt": "x\n", "ggml/b.c": "int b;\n"}, tmp_path / "s.tar.gz")
    pin = Pin("t", "1234567abc", (SourceSpec("tarball", str(tgz)),))
    first = checkout(pin, paths)
    assert first.commit == "1234567abc"
    tgz.unlink()  # a no-op re-import must not even need the archive
    assert checkout(pin, paths).mirror_commit == first.mirror_commit
    root = tmp_path / "tree"
    root.mkdir()
    (root / "CMakeLists.txt").write_text("x\n")
    (root / "ggml").mkdir()
    (root / "ggml/b.c").write_text("int b;\n")
    other = Mirror(tmp_path / "other.git")
    a = other.import_tree(root, "1234567abc", f"tarball:{tgz}", f"sha256: {hashlib.sha256().hexdigest()}")
    b = Mirror(tmp_path / "third.git").import_tree(root, "1234567abc", f"tarball:{tgz}",
                                                     f"sha256: {hashlib.sha256().hexdigest()}")
    assert a == b
    assert other.import_tree(root / "ggml", "1234567abc", "other", "") == a, "existing tag wins"


def test_tarball_of_another_commit_is_refused(paths: Paths, upstream: Upstream, tmp_path: Path) -> None:
    tgz = git_archive(upstream, upstream.c1, tmp_path / "c1.tar.gz")
    with pytest.raises(SourceMismatch, match=upstream.c1[:12]):
        checkout(Pin("t", upstream.c2, (SourceSpec("tarball", str(tgz)),)), paths)


def test_bad_tarball_is_a_source_error(paths: Paths, tmp_path: Path) -> None:
    bad = tmp_path / "bad.tar.gz"
    bad.write_bytes(b"this is not a tarball")
    with pytest.raises(SourceError, match="bad archive") as exc:
        checkout(Pin("t", "1234567abc", (SourceSpec("tarball", str(bad)),)), paths)
    assert exc.value.fix


def test_tarball_sha256_mismatch_is_refused(paths: Paths, tmp_path: Path) -> None:
    tgz = plain_tarball({"a": "a\n"}, tmp_path / "s.tar.gz")
    with pytest.raises(SourceMismatch, match="sha256"):
        checkout(Pin("t", "1234567abc", (SourceSpec("tarball", str(tgz), "0" * 64),)), paths)


# -- pypi (a fake sdist in the downloads cache, so no network) ------------------------------------

CHANGELOG = """# Changelog

## [Unreleased]

## [0.9.1]

- feat: update llama.cpp to ggml-org/llama.cpp@{new}
- fix: something
- feat: update llama.cpp to ggml-org/llama.cpp@{old}

## [0.9.0]

- feat: update llama.cpp to ggml-org/llama.cpp@{old}
"""


def fake_sdist(paths: Paths, new: str, old: str = "1111111aa", head: str | None = None) -> Path:
    files = {"CHANGELOG.md": CHANGELOG.format(new=new, old=old),
             "vendor/llama.cpp/CMakeLists.txt": "project(llama)\n",
             "vendor/llama.cpp/ggml/src/x.c": "int x;\n",
             "vendor/llama.cpp/.git": "gitdir: ../../.git/modules/vendor/llama.cpp\n",
             "llama_cpp/__init__.py": ""}
    if head:
        files[".git/modules/vendor/llama.cpp/HEAD"] = head + "\n"
    return plain_tarball(files, paths.downloads / "fake_cpp_python-0.9.1.tar.gz", top="fake_cpp_python-0.9.1")


def pypi_spec(sdist: Path) -> SourceSpec:
    return SourceSpec("pypi", "fake-cpp-python==0.9.1", hashlib.sha256(sdist.read_bytes()).hexdigest())


def test_pypi_sdist_whose_changelog_names_another_commit_is_refused(paths: Paths) -> None:
    sdist = fake_sdist(paths, new="2222222bb")
    with pytest.raises(SourceMismatch) as exc:
        checkout(Pin("default", "0c1e57098", (pypi_spec(sdist),)), paths)
    assert "2222222bb" in exc.value.message and "0c1e57098" in exc.value.message
    assert "pins.toml" in (exc.value.fix or "")


def test_pypi_sdist_vendored_tree_is_imported_with_full_sha(paths: Paths, notices: list[str]) -> None:
    full = "0c1e57098" + "b" * 31
    sdist = fake_sdist(paths, new="0c1e57098", head=full)
    tree = checkout(Pin("default", "0c1e57098", (pypi_spec(sdist),), build_number=42), paths)
    assert tree.commit == full and tree.build_number == 42 and not tree.native_git
    assert sorted(p.name for p in tree.path.iterdir()) == [".git", "CMakeLists.txt", "ggml"]
    assert f"sha256: {hashlib.sha256(sdist.read_bytes()).hexdigest()}" in Mirror(paths.mirror).message(tree.mirror_commit)
    assert "checked against pins.toml" in sdist.with_name(sdist.name + ".sha256").read_text()
    assert notices == []


def test_pypi_sha256_unchecked_when_pypi_unreachable_says_so(paths: Paths, notices: list[str],
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("PIP_INDEX_URL", "http://127.0.0.1:9/simple/")
    monkeypatch.delenv("PIP_EXTRA_INDEX_URL", raising=False)
    fake_sdist(paths, new="0c1e57098")
    tree = checkout(Pin("default", "0c1e57098", (SourceSpec("pypi", "fake-cpp-python==0.9.1"),)), paths)
    assert tree.commit == "0c1e57098"
    assert len(notices) == 1 and "unchecked" in notices[0]
    assert "unchecked" in (paths.downloads / "fake_cpp_python-0.9.1.tar.gz.sha256").read_text()


def test_pypi_sdist_differing_from_pypi_digest_is_refused(paths: Paths, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(providers, "pypi_sha256", lambda name, version, filename: ("f" * 64, "PyPI JSON API"))
    fake_sdist(paths, new="0c1e57098")
    with pytest.raises(SourceMismatch, match="PyPI JSON API says f+"):
        checkout(Pin("default", "0c1e57098", (SourceSpec("pypi", "fake-cpp-python==0.9.1"),)), paths)


def test_changelog_commit_takes_the_latest_update_of_the_version() -> None:
    text = CHANGELOG.format(new="4df29be4f", old="adb55e514")
    assert archives.changelog_commit(text, "0.9.1") == "4df29be4f"
    assert archives.changelog_commit(text, "0.9.0") == "adb55e514"
    assert archives.changelog_commit(text, "0.8.0") is None


def test_two_processes_checking_out_at_once_share_one_mirror(paths: Paths, upstream: Upstream,
                                                             tmp_path: Path) -> None:
    script = (
        "import sys\n"
        "from pathlib import Path\n"
        "from llamaforge.config import Pin, SourceSpec\n"
        "from llamaforge.paths import Paths\n"
        "from llamaforge.sources import checkout\n"
        f"t = checkout(Pin('p', {upstream.c4!r}, (SourceSpec('path', {str(upstream.root)!r}),)),"
        f" Paths(Path({str(paths.workspace)!r})))\n"
        "print('TREE', t.path, t.mirror_commit)\n")
    env = {"LLAMAFORGE_CACHE": str(tmp_path / "cache")}
    kids = [proc.spawn([sys.executable, "-c", script], env=env, stdout=subprocess.PIPE, text=True)
            for _ in range(2)]
    outs = []
    for k in kids:
        with proc.managed(k):
            out, _ = k.communicate(timeout=120)
            outs.append((k.returncode, out))
    assert all(rc == 0 for rc, _ in outs), outs
    lines = {line for _, out in outs for line in out.splitlines() if line.startswith("TREE")}
    assert lines == {f"TREE {paths.vendor / upstream.c4[:9]} {upstream.c4}"}
    fsck = proc.run(["git", f"--git-dir={paths.mirror}", "fsck", "--no-dangling"])
    assert fsck.ok, fsck.output


def test_mirror_lock_is_reentrant_and_leaves_a_lock_file(paths: Paths) -> None:
    m = Mirror(paths.mirror)
    with m.locked(), m.locked():
        assert m.lock_path.is_file() and (paths.mirror / "HEAD").is_file()
