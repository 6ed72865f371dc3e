"""``model.fetch`` and ``model.twin`` into a place that cannot take the file: a full filesystem, a
read-only one, a directory that cannot exist (under a file). Each is one clear ModelError, never a
traceback, and no partial file is left behind. Full and read-only filesystems are real tmpfs mounts
(skipped where mounting is not allowed)."""

from __future__ import annotations

import contextlib
import hashlib
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from models_fake import fake_vocab

from http_sites import SHA, Site
from llamaforge.errors import LlamaforgeError, ModelError
from llamaforge.models import synth, twin
from llamaforge.models.presets import TINY_VOCAB
from llamaforge.models.refs import resolve_model
from llamaforge.paths import Paths
from mounts import tmpfs


def _fill(mnt: Path) -> None:
    """Fill the filesystem at ``mnt`` to the last byte (the directories the test needs made first)."""
    fd = os.open(mnt / "filler", os.O_WRONLY | os.O_CREAT)
    try:
        with contextlib.suppress(OSError):
            while os.write(fd, b"\0" * 4096):
                pass
    finally:
        os.close(fd)


def _files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() and p.name != "filler")


@pytest.fixture
def site() -> Iterator[Site]:
    s = Site()
    yield s
    s.close()


@pytest.fixture(scope="module")
def small_gguf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("vocab")
    fake_vocab(d / TINY_VOCAB)
    out = tmp_path_factory.mktemp("m") / "tiny35.gguf"
    synth("tiny-qwen35moe", out, "q4_k_m", vocab_dir=d, progress=False)
    return out


def _one_line(e: LlamaforgeError) -> None:
    assert e.fix and "\n" not in e.message and "Traceback" not in e.message


# ---- model.fetch ------------------------------------------------------------------------------
def test_fetch_on_a_full_filesystem_is_one_line_and_leaves_no_partial_file(tmp_path, site, monkeypatch):
    with tmpfs(tmp_path, "size=256k") as mnt:
        monkeypatch.setenv("LLAMAFORGE_CACHE", str(mnt / "cache"))
        url = site.url()
        (mnt / "cache" / "models" / "url" / hashlib.sha256(url.encode()).hexdigest()[:12]).mkdir(parents=True)
        _fill(mnt)
        with pytest.raises(ModelError, match="No space left|disk") as ei:
            resolve_model(f"{url}#sha256={SHA}", Paths(tmp_path), progress=False)
        _one_line(ei.value)
        assert _files(mnt) == []


def test_fetch_body_on_a_full_filesystem_keeps_no_half_written_record(tmp_path, site, monkeypatch):
    with tmpfs(tmp_path, "size=512k") as mnt:            # room for the record, not for the 3 MiB body
        monkeypatch.setenv("LLAMAFORGE_CACHE", str(mnt / "cache"))
        with pytest.raises(ModelError, match="No space left|disk") as ei:
            resolve_model(site.url(), Paths(tmp_path), progress=False)
        _one_line(ei.value)
        assert not [f for f in _files(mnt) if not f.endswith((".part", ".part.json"))]


@pytest.mark.parametrize("cache_exists", [True, False])
def test_fetch_into_a_read_only_cache_is_one_line(tmp_path, site, monkeypatch, cache_exists):
    with tmpfs(tmp_path, "size=64k") as mnt:
        if cache_exists:
            (mnt / "cache" / "models").mkdir(parents=True)
        if subprocess.run(["mount", "-o", "remount,ro", str(mnt)], capture_output=True, timeout=30).returncode:
            pytest.skip("cannot remount the tmpfs read-only")
        monkeypatch.setenv("LLAMAFORGE_CACHE", str(mnt / "cache"))
        with pytest.raises(LlamaforgeError, match="Read-only file system|is not writable") as ei:
            resolve_model(site.url(), Paths(tmp_path), progress=False)
        _one_line(ei.value)
        assert "LLAMAFORGE_CACHE" in ei.value.fix
        assert not site.log


def test_fetch_into_a_cache_that_cannot_exist_is_one_line(tmp_path, site, monkeypatch):
    (tmp_path / "a_file").write_text("x")
    monkeypatch.setenv("LLAMAFORGE_CACHE", str(tmp_path / "a_file" / "cache"))
    with pytest.raises(LlamaforgeError, match="cannot create") as ei:
        resolve_model(site.url(), Paths(tmp_path), progress=False)
    _one_line(ei.value)
    assert not site.log     # refused before anything was asked of the network


# ---- model.twin -------------------------------------------------------------------------------
def test_twin_into_a_read_only_directory_is_one_line(tmp_path, small_gguf):
    with tmpfs(tmp_path, "ro,size=64k") as mnt:
        for out in (mnt / "twin.gguf", mnt / "sub" / "twin.gguf"):
            with pytest.raises(ModelError) as ei:
                twin(small_gguf, out, progress=False)
            _one_line(ei.value)
        assert _files(mnt) == []


def test_twin_into_a_directory_that_cannot_exist_is_one_line(tmp_path, small_gguf):
    (tmp_path / "a_file").write_text("x")
    with pytest.raises(ModelError, match="cannot") as ei:
        twin(small_gguf, tmp_path / "a_file" / "sub" / "twin.gguf", progress=False)
    _one_line(ei.value)
