"""Fixtures shared by unit tests of several modules (the slow tests' fixtures are in ``tests/conftest.py``)."""

from __future__ import annotations

from pathlib import Path

import pytest
from models_fake import fake_vocab

from llamaforge.models.presets import TINY_VOCAB
from llamaforge.paths import Paths
from llamaforge.sources import archives

_RESULTS = Path(__file__).resolve().parents[2] / "results"


def _committed_stores() -> dict[Path, tuple[int, int]]:
    return {f: (f.stat().st_size, f.stat().st_mtime_ns) for f in _RESULTS.rglob("*.sqlite*")}


@pytest.fixture(scope="session", autouse=True)
def committed_stores_stay_as_committed():
    """No test opens a committed store under results/ in place: opening migrates an older schema (and leaves a
    backup beside it), so a test reads a copy."""
    before = _committed_stores()
    yield
    after = _committed_stores()
    changed = sorted(str(f.relative_to(_RESULTS)) for f in set(before) | set(after) if before.get(f) != after.get(f))
    assert not changed, f"tests changed committed stores (open a copy instead): {changed}"


@pytest.fixture(scope="session")
def vocab_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder of fake llama.cpp vocab files (``ggml-vocab-qwen35.gguf``, ``ggml-vocab-qwen2.gguf`` and the tiny
    presets' ``ggml-vocab-llama-spm.gguf``)."""
    d = tmp_path_factory.mktemp("vocab")
    for name in ("ggml-vocab-qwen35.gguf", "ggml-vocab-qwen2.gguf", TINY_VOCAB):
        fake_vocab(d / name)
    return d


@pytest.fixture
def source_paths(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Paths:
    """A fresh cache and workspace under ``tmp_path``, with a 2 s connect timeout for source archives."""
    monkeypatch.setenv("LLAMAFORGE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("LLAMAFORGE_WORKSPACE", str(tmp_path / "ws"))
    monkeypatch.setattr(archives, "CONNECT_TIMEOUT", 2.0)
    (tmp_path / "ws").mkdir()
    return Paths(tmp_path / "ws")
