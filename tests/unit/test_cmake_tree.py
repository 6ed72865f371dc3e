"""builds.cmake_tree: a reused CMake tree keeps no define of an earlier build (no cmake here: the cache is a file)."""

from __future__ import annotations

from pathlib import Path

from llamaforge.builds import cmake_tree

ARGV = ["cmake", "-S", "src", "-B", "out", "-G", "Ninja", "-DCMAKE_BUILD_TYPE=Release", "-DGGML_NATIVE=ON"]
CACHE = """# This is the CMakeCache file.
CMAKE_BUILD_TYPE:STRING=Release
CMAKE_CXX_FLAGS:STRING=
CMAKE_CXX_FLAGS_RELEASE:STRING=-O1 -DNDEBUG
CMAKE_C_FLAGS:STRING=
CMAKE_C_FLAGS_RELEASE:STRING=-O3 -DNDEBUG
CMAKE_C_FLAGS_DEBUG:STRING=-g
GGML_NATIVE:BOOL=ON
"""


def _tree(tmp_path: Path, stamp_argv: list[str] | None) -> Path:
    out = tmp_path / "out"
    (out / "CMakeFiles").mkdir(parents=True)
    (out / "CMakeCache.txt").write_text(CACHE)
    (out / "build.ninja").write_text("# objects and rules stay\n")
    if stamp_argv is not None:
        cmake_tree.record(out, stamp_argv)
    return out


def test_the_same_defines_keep_the_cache(tmp_path):
    out = _tree(tmp_path, ARGV)
    assert cmake_tree.reset_if_changed(out, list(reversed(ARGV))) is None     # order does not matter
    assert (out / "CMakeCache.txt").exists() and (out / "CMakeFiles").exists()


def test_a_define_of_an_earlier_build_removes_the_cache_and_says_which(tmp_path):
    out = _tree(tmp_path, [*ARGV, "-DCMAKE_CXX_FLAGS_RELEASE=-O1 -DNDEBUG"])
    why = cmake_tree.reset_if_changed(out, ARGV)
    assert why is not None and "-DCMAKE_CXX_FLAGS_RELEASE=-O1 -DNDEBUG" in why, why
    assert not (out / "CMakeCache.txt").exists() and not (out / "CMakeFiles").exists()
    assert not (out / cmake_tree.STAMP).exists()
    assert (out / "build.ninja").exists(), "compiled objects and ninja's state stay"
    cmake_tree.record(out, ARGV)                     # the configure that follows records its own
    (out / "CMakeCache.txt").write_text(CACHE)
    assert cmake_tree.reset_if_changed(out, ARGV) is None


def test_a_tree_of_unknown_history_is_configured_afresh(tmp_path):
    out = _tree(tmp_path, None)
    why = cmake_tree.reset_if_changed(out, ARGV)
    assert why is not None and "not recorded" in why
    (out / "CMakeCache.txt").write_text(CACHE)
    (out / cmake_tree.STAMP).write_text("{not json")
    assert "not recorded" in (cmake_tree.reset_if_changed(out, ARGV) or "")


def test_no_cache_nothing_to_reset(tmp_path):
    assert cmake_tree.reset_if_changed(tmp_path / "out", ARGV) is None


def test_effective_flags_are_the_build_types(tmp_path):
    got = cmake_tree.effective_flags(CACHE)
    assert got == {"CMAKE_BUILD_TYPE": "Release", "CMAKE_C_FLAGS": "", "CMAKE_CXX_FLAGS": "",
                   "CMAKE_C_FLAGS_RELEASE": "-O3 -DNDEBUG", "CMAKE_CXX_FLAGS_RELEASE": "-O1 -DNDEBUG"}
    assert cmake_tree.effective_flags("") == {}


def test_a_tree_that_builds_its_web_ui_by_default_gets_it_off(tmp_path):
    from llamaforge.builds.source_flags import source_flags

    (tmp_path / "CMakeLists.txt").write_text('option(LLAMA_BUILD_UI        "llama: build the embedded Web UI"   ON)\n')
    assert source_flags(tmp_path) == {"LLAMA_BUILD_UI": "OFF"}
    (tmp_path / "CMakeLists.txt").write_text('option(LLAMA_BUILD_UI        "llama: build the embedded Web UI"   OFF)\n')
    assert source_flags(tmp_path) == {}, "a tree whose default is off keeps its build key"
    assert source_flags(tmp_path / "missing") == {}
