"""A model downloaded through a simulated hub and CDN (two real HTTP servers on 127.0.0.1), cut off
half-way and resumed, is verified against the hub's hash and then runs in REAL llama-server."""

from __future__ import annotations

import hashlib

import pytest
from test_models_real import _generate

from http_sites import Site
from llamaforge.models import download as dl
from llamaforge.models.refs import resolve_model
from llamaforge.paths import Paths

pytestmark = pytest.mark.slow


def test_resumed_hub_download_is_verified_and_generates_in_llama_server(cpu_build, tiny_model, tmp_path,
                                                                         monkeypatch, capsys):
    data = tiny_model.read_bytes()
    hub, cdn = Site(), Site()
    try:
        cdn.payload, cdn.cut_after = data, len(data) // 2
        hub.redirect_to = cdn
        hub.redirect_headers = {"X-Linked-ETag": f'"{hashlib.sha256(data).hexdigest()}"', "X-Linked-Size": str(len(data))}
        monkeypatch.setattr(dl, "HUB_ORIGINS", frozenset({("http", "127.0.0.1", hub.port)}))
        monkeypatch.setenv("HF_TOKEN", "hf_secret_token")
        monkeypatch.setenv("LLAMAFORGE_CACHE", str(tmp_path / "cache"))
        url = hub.url("/org/repo/resolve/main/model.gguf")
        with pytest.raises(dl.ModelError, match="interrupted|incomplete"):
            resolve_model(url, Paths(tmp_path), progress=False)
        parts = list((tmp_path / "cache").rglob("model.gguf.part"))
        have = parts[0].stat().st_size   # what reached the disk (whole chunks) before the cut
        assert len(parts) == 1 and 0 < have <= len(data) // 2
        path = resolve_model(url, Paths(tmp_path), progress=False)
        assert cdn.gets()[-1]["headers"]["Range"] == f"bytes={have}-"
        assert all("Authorization" not in r["headers"] for r in cdn.log)
        assert dl.read_record(path)["checked_against"] == "hub"
        assert "UNVERIFIED" not in capsys.readouterr().err
    finally:
        hub.close()
        cdn.close()
    assert _generate(cpu_build, path)["timings"]["predicted_n"] == 8
