"""The build cache trusts nothing it can check (issue 12): a real CMake build of a tiny stand-in
for llama.cpp (its binaries print the LLAMA_BUILD_COMMIT they were given, as llama.cpp's do), in a
real git mirror and worktree. A dirty worktree is refused, the source tree id is recorded and
checked on every hit, binaries are re-hashed on a hit, by ``find_build`` and by ``verify``."""

from __future__ import annotations

import json
from pathlib import Path

import git
import pytest

from llamaforge import proc
from llamaforge.builds import BuildOptions, build, find_build
from llamaforge.builds.integrity import source_evidence
from llamaforge.builds.verify import verify_build
from llamaforge.config import Pin, Pins, SourceSpec
from llamaforge.errors import BuildError
from llamaforge.paths import Paths
from llamaforge.sources import archives, checkout

TOOL_C = r"""
#include <stdio.h>
#include <string.h>
int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "--version") == 0) { printf("version: %d (%s)\n", NUMBER, COMMIT); return 0; }
    if (argc > 1 && strcmp(argv[1], "--list-devices") == 0) { printf("Available devices:\n"); return 0; }
    if (argc > 1 && strcmp(argv[1], "--help") == 0) { printf("-m,    --model FNAME    model path\n"); return 0; }
    return 0;
}
"""
CMAKE = """cmake_minimum_required(VERSION 3.14)
project(fakellama C)
set(LLAMA_BUILD_COMMIT "unknown" CACHE STRING "")
set(LLAMA_BUILD_NUMBER "0" CACHE STRING "")
set(CMAKE_RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bin)
foreach(t llama-server llama-bench)
  add_executable(${t} tool.c)
  target_compile_definitions(${t} PRIVATE COMMIT="${LLAMA_BUILD_COMMIT}" NUMBER=${LLAMA_BUILD_NUMBER})
endforeach()
"""


@pytest.fixture
def paths(source_paths: Paths, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Paths:
    monkeypatch.setenv("LLAMAFORGE_BUILD_ROOT", str(tmp_path / "builds"))
    return source_paths


@pytest.fixture
def pin(tmp_path: Path) -> Pin:
    root = tmp_path / "fake-llama"
    repo = git.Repo.init(root)
    with repo.config_writer() as cw:
        cw.set_value("user", "name", "t")
        cw.set_value("user", "email", "t@example.invalid")
    (root / "CMakeLists.txt").write_text(CMAKE)
    (root / "tool.c").write_text(TOOL_C)
    repo.index.add(["CMakeLists.txt", "tool.c"])
    sha = repo.index.commit("fake llama.cpp").hexsha
    return Pin("fake", sha, (SourceSpec("path", str(root)),))


def _opts() -> BuildOptions:
    return BuildOptions(jobs=2)


def _tree_of(path: Path, rev: str = "HEAD") -> str:
    return proc.run(["git", "-C", str(path), "rev-parse", f"{rev}^{{tree}}"]).output.strip()


def test_build_records_the_source_tree_and_refuses_a_dirty_worktree(paths: Paths, pin: Pin) -> None:
    b = build(paths, pin, "cpu", _opts())
    src = b.manifest["source"]
    assert src["tree"] == _tree_of(Path(pin.sources[0].arg), pin.commit)
    assert src["evidence"]["method"] == "git-commit" and src["evidence"]["worktree_clean"] is True
    assert "injected" in b.manifest["commit_check"]
    # the circular check the manifest no longer relies on: the binary says what it was told
    out = proc.run([b.binary("llama-server"), "--version"]).output
    assert f"({pin.commit[:9]})" in out

    (b.source_dir / "tool.c").write_text(TOOL_C.replace("Available", "Hidden"))
    with pytest.raises(BuildError, match="modified tracked files") as exc:
        build(paths, pin, "cpu", _opts())
    assert "tool.c" in exc.value.message and f"git -C {b.source_dir} status" in (exc.value.fix or "")
    assert not verify_build(b).ok, "verify notices the dirty source too"

    proc.run(["git", "-C", str(b.source_dir), "checkout", "--", "."])
    again = build(paths, pin, "cpu", _opts())
    assert again.manifest["built_at"] == b.manifest["built_at"], "a clean worktree at the same tree is a hit"


def test_tampered_binary_is_caught_on_a_hit_by_find_build_and_verify(paths: Paths, pin: Pin,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    notices: list[str] = []
    monkeypatch.setattr("llamaforge.builds.builder.notice", notices.append)
    b = build(paths, pin, "cpu", _opts())
    exe = b.binary("llama-server")
    data = bytearray(exe.read_bytes())
    data[-1] ^= 0xFF                       # same size: the old size check alone passes it
    exe.write_bytes(bytes(data))

    with pytest.raises(BuildError, match="llama-server changed since it was built") as exc:
        find_build(paths, pin.commit, "cpu", pins=Pins({"fake": pin}, "fake"))
    assert exc.value.fix
    v = verify_build(b)
    assert not v.ok and any("llama-server changed" in p for p in v.problems)

    rebuilt = build(paths, pin, "cpu", _opts())
    assert len(notices) == 1 and "llama-server changed" in notices[0] and "rebuilding" in notices[0]
    assert rebuilt.manifest["built_at"] > b.manifest["built_at"]
    assert archives.sha256_of(rebuilt.binary("llama-server")) == rebuilt.manifest["binaries"]["llama-server"]["sha256"]
    assert find_build(paths, pin.commit, "cpu", pins=Pins({"fake": pin}, "fake")).key == b.key


def test_manifest_of_another_source_tree_is_not_reused(paths: Paths, pin: Pin) -> None:
    b = build(paths, pin, "cpu", _opts())
    m = json.loads((b.dir / "manifest.json").read_text())
    m["source"]["tree"] = "0" * 40
    (b.dir / "manifest.json").write_text(json.dumps(m))
    assert build(paths, pin, "cpu", _opts()).manifest["built_at"] > b.manifest["built_at"]


def test_imported_snapshot_evidence_names_the_checked_archive(paths: Paths, pin: Pin, tmp_path: Path) -> None:
    root = Path(pin.sources[0].arg)
    tgz = tmp_path / "fake.tar.gz"
    assert proc.run(["git", "-C", str(root), "archive", "--format=tar.gz", "--prefix=x/", "-o", str(tgz), pin.commit]).ok
    tree = checkout(Pin("t", pin.commit, (SourceSpec("tarball", str(tgz)),)), paths)
    ev = source_evidence(tree)
    assert ev["method"] == "import" and ev["tree"] == _tree_of(root, pin.commit)
    assert f"sha256: {archives.sha256_of(tgz)}" in ev["detail"]
    moved = proc.run(["git", "-C", str(tree.path), "-c", "user.name=t", "-c", "user.email=t@x.invalid",
                      "commit", "--allow-empty", "-q", "-m", "same tree, other commit"])
    assert moved.ok, moved.output
    with pytest.raises(BuildError, match="is at"):
        source_evidence(tree)
