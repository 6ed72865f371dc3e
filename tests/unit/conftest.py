"""Fixtures shared by unit tests of several modules (the slow tests' fixtures are in ``tests/conftest.py``)."""

from __future__ import annotations

from pathlib import Path

import pytest
from models_fake import fake_vocab

from llamaforge.models.presets import TINY_VOCAB
from llamaforge.paths import Paths
from llamaforge.sources import archives


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
