"""Real llama.cpp (issue 12): the build records which source tree it was built from and why that
tree is the pinned commit; a worktree with a modified tracked file is refused instead of being
reused as "commit X"; the recorded binaries still hash to their sha256."""

from __future__ import annotations

import pytest

from llamaforge import proc
from llamaforge.builds import Build, build
from llamaforge.builds.integrity import binary_problems
from llamaforge.errors import BuildError

pytestmark = pytest.mark.slow


def test_real_build_records_its_source_tree_and_evidence(cpu_build: Build) -> None:
    src = cpu_build.manifest["source"]
    head_tree = proc.run(["git", "-C", str(cpu_build.source_dir), "rev-parse", "HEAD^{tree}"]).output.strip()
    assert src["tree"] == head_tree
    ev = src["evidence"]
    assert ev["method"] in ("import", "git-commit") and ev["worktree_clean"] is True
    if ev["method"] == "import":    # the default pin comes from the llama-cpp-python sdist
        assert "sha256:" in ev["detail"] and ev["pinned_ref"].endswith(cpu_build.commit)
    assert binary_problems(cpu_build.dir, cpu_build.manifest) == []


def test_real_worktree_with_a_modified_tracked_file_is_refused(lf_paths, default_pin, cpu_build: Build) -> None:
    tracked = proc.run(["git", "-C", str(cpu_build.source_dir), "ls-files", "--", "README.md", "LICENSE"]).output.split()
    victim = cpu_build.source_dir / tracked[0]     # not a build input: restoring it costs no recompile
    original = victim.read_bytes()
    try:
        victim.write_bytes(original + b"\n# local change\n")
        with pytest.raises(BuildError, match="modified tracked files") as exc:
            build(lf_paths, default_pin, "cpu")
        assert victim.name in exc.value.message and "git -C" in (exc.value.fix or "")
    finally:
        victim.write_bytes(original)
    assert build(lf_paths, default_pin, "cpu").key == cpu_build.key   # clean again: a cache hit
