"""Model references are written by others: no ``hf:`` or URL reference may read or write a file
outside the model cache (issue 12)."""

from __future__ import annotations

from pathlib import Path

import pytest

from llamaforge.errors import ModelError
from llamaforge.models import refs
from llamaforge.paths import Paths


@pytest.fixture
def paths(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Paths:
    monkeypatch.setenv("LLAMAFORGE_CACHE", str(tmp_path / "cache"))
    return Paths(tmp_path)


@pytest.fixture
def downloads(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """No network: record where a download would have written."""
    seen: list[Path] = []

    def fake(url: str, dest: Path, **kw: object) -> Path:
        seen.append(Path(dest))
        return Path(dest)

    monkeypatch.setattr(refs, "download", fake)
    return seen


@pytest.mark.parametrize("ref", [
    "hf:o/r/../../../../outside.gguf", "hf:o/../../../outside.gguf", "hf:/abs/o/r.gguf",
    "hf:o/r/..\\..\\..\\..\\outside.gguf", "hf:o/r/./x.gguf", "hf:o//r/x.gguf", "hf:o/r/x\n.gguf",
])
def test_hf_reference_cannot_escape_the_model_cache(ref: str, paths: Paths, downloads: list[Path]) -> None:
    outside = paths.model_cache.parent / "outside.gguf"   # what ../../../../ would reach
    outside.parent.mkdir(parents=True, exist_ok=True)
    outside.write_bytes(b"GGUF not yours")
    with pytest.raises(ModelError, match="bad Hugging Face reference") as exc:
        refs.resolve_model(ref, paths, progress=False)
    assert exc.value.fix and downloads == []


def test_plain_hf_reference_lands_in_the_cache(paths: Paths, downloads: list[Path]) -> None:
    got = refs.resolve_model("hf:unsloth/Qwen3-GGUF/sub/x.gguf#sha256=" + "a" * 64, paths, progress=False)
    assert got == paths.model_cache / "hf" / "unsloth" / "Qwen3-GGUF" / "sub" / "x.gguf" == downloads[0]


@pytest.mark.parametrize("url", ["https://h.example/a/%2e%2e", "https://h.example/a/..%5C..%5Cx.gguf"])
def test_url_reference_file_name_stays_in_its_cache_folder(url: str, paths: Paths, downloads: list[Path]) -> None:
    got = refs.resolve_model(url, paths, progress=False)
    assert got.parent.parent == paths.model_cache / "url" and got.name not in ("..", ".")
