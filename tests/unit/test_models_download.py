"""Downloads and model references, against a local HTTP server on 127.0.0.1 (no hub here)."""

from __future__ import annotations

import hashlib
import http.server
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from models_fake import fake_vocab

from llamaforge.errors import ModelError
from llamaforge.models.download import download, hf_url, hub_sha256
from llamaforge.models.refs import resolve_model, split_hash
from llamaforge.paths import Paths

PAYLOAD = bytes(range(256)) * 4096 * 3   # 3 MiB
SHA = hashlib.sha256(PAYLOAD).hexdigest()


class _State:
    def __init__(self) -> None:
        self.cut_after: int | None = None   # close the connection after this many body bytes (once)
        self.honour_range = True
        self.etag: str | None = SHA
        self.ranges: list[str | None] = []
        self.payload = PAYLOAD


def _handler(state: _State) -> type[http.server.BaseHTTPRequestHandler]:
    class H(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *a: object) -> None:
            pass

        def do_GET(self) -> None:  # noqa: N802
            if not self.path.endswith("/model.gguf"):
                self.send_error(404)
                return
            rng = self.headers.get("Range")
            state.ranges.append(rng)
            data, start = state.payload, 0
            if rng and state.honour_range:
                start = int(rng.split("=")[1].split("-")[0])
                if start >= len(data):
                    self.send_response(416)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                self.send_response(206)
                self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
            else:
                self.send_response(200)
            body = data[start:]
            self.send_header("Content-Length", str(len(body)))
            if state.etag:
                self.send_header("X-Linked-ETag", f'"{state.etag}"')
            self.end_headers()
            if state.cut_after is not None:
                self.wfile.write(body[: state.cut_after])
                self.wfile.flush()
                state.cut_after = None
                self.close_connection = True
                return
            self.wfile.write(body)

    return H


@pytest.fixture
def server() -> Iterator[tuple[str, _State]]:
    state = _State()
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _handler(state))
    th = threading.Thread(target=httpd.serve_forever, daemon=True)
    th.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/org/repo/model.gguf", state
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_download_verifies_the_hub_sha256_and_renames_atomically(tmp_path, server):
    url, state = server
    dest = download(url, tmp_path / "m.gguf", progress=False)
    assert dest.read_bytes() == PAYLOAD
    assert not (tmp_path / "m.gguf.part").exists()


def test_interrupted_download_resumes_with_a_range_request(tmp_path, server):
    url, state = server
    state.cut_after = 1 << 20
    with pytest.raises(ModelError, match="interrupted|incomplete"):
        download(url, tmp_path / "m.gguf", progress=False)
    part = tmp_path / "m.gguf.part"
    assert part.stat().st_size == 1 << 20
    dest = download(url, tmp_path / "m.gguf", progress=False)
    assert state.ranges[-1] == f"bytes={1 << 20}-"
    assert hashlib.sha256(dest.read_bytes()).hexdigest() == SHA


def test_server_ignoring_range_restarts_from_scratch(tmp_path, server):
    url, state = server
    state.honour_range = False
    (tmp_path / "m.gguf.part").write_bytes(b"garbage" * 100)
    dest = download(url, tmp_path / "m.gguf", progress=False)
    assert dest.read_bytes() == PAYLOAD


def test_hash_mismatch_removes_the_file_with_a_clear_error(tmp_path, server):
    url, state = server
    state.etag = "0" * 64
    with pytest.raises(ModelError, match="sha256 mismatch") as ei:
        download(url, tmp_path / "m.gguf", progress=False)
    assert ei.value.fix
    assert list(tmp_path.iterdir()) == []


def test_given_hash_wins_over_the_hub_header(tmp_path, server):
    url, state = server
    state.etag = None
    with pytest.raises(ModelError, match="sha256 mismatch"):
        download(url, tmp_path / "m.gguf", sha256="f" * 64, progress=False)
    assert download(url, tmp_path / "m.gguf", sha256=SHA, progress=False).is_file()


def test_http_error_is_a_model_error(tmp_path, server):
    url, _ = server
    with pytest.raises(ModelError, match="HTTP 404"):
        download(url.replace("model.gguf", "nope.gguf"), tmp_path / "x", progress=False)


def test_url_reference_downloads_into_the_model_cache_once(tmp_path, server, monkeypatch):
    url, state = server
    monkeypatch.setenv("LLAMAFORGE_CACHE", str(tmp_path / "cache"))
    paths = Paths(tmp_path)
    p1 = resolve_model(f"{url}#sha256={SHA}", paths, progress=False)
    p2 = resolve_model(url, paths, progress=False)
    assert p1 == p2 and p1.read_bytes() == PAYLOAD
    assert str(p1).startswith(str(tmp_path / "cache" / "models"))
    assert len(state.ranges) == 1


def test_hf_reference_maps_to_the_resolve_url():
    assert hf_url("unsloth/Qwen3.6-35B-A3B-GGUF/sub/x.gguf") == \
        "https://huggingface.co/unsloth/Qwen3.6-35B-A3B-GGUF/resolve/main/sub/x.gguf"
    with pytest.raises(ModelError):
        hf_url("only/two")
    assert split_hash("hf:a/b/c#sha256=" + SHA) == ("hf:a/b/c", SHA)
    assert hub_sha256({"ETag": f'W/"{SHA.upper()}"'}) == SHA
    assert hub_sha256({"ETag": '"abc-123"'}) is None


def test_unknown_model_reference_is_a_model_error(tmp_path):
    with pytest.raises(ModelError, match="no model"):
        resolve_model("ollama:qwen", Paths(tmp_path))
    with pytest.raises(ModelError, match="unknown model preset"):
        resolve_model("synth:nope", Paths(tmp_path))


def test_synth_reference_is_generated_once_into_the_cache(tmp_path, monkeypatch):
    vd = tmp_path / "vocab"
    vd.mkdir()
    fake_vocab(vd / "ggml-vocab-qwen2.gguf")
    monkeypatch.setenv("LLAMAFORGE_CACHE", str(tmp_path / "cache"))
    paths = Paths(tmp_path)
    p1 = resolve_model("synth:tiny-qwen3moe:q8_0", paths, vocab_dir=vd, progress=False)
    mtime = p1.stat().st_mtime_ns
    p2 = resolve_model("synth:tiny-qwen3moe:q8_0", paths, vocab_dir=vd, progress=False)
    assert p1 == p2 and p2.stat().st_mtime_ns == mtime
    assert p1.parent == Path(tmp_path / "cache" / "models" / "synth")
    assert resolve_model("synth:tiny-qwen3moe:q4_k_m", paths, vocab_dir=vd, progress=False) != p1
