"""Proxy settings must not apply to the local llama-server: with HTTP_PROXY (and friends) pointing
at a dead port, a real local HTTP server (the fake llama-server) must still be reached directly."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from llamaforge import proc
from llamaforge.llamacpp.server import ServerSession

FAKE = Path(__file__).with_name("bench_fake_server.py")


@pytest.fixture
def dead_proxy(monkeypatch):
    url = f"http://127.0.0.1:{proc.free_port()}"   # nothing listens there
    for var in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.setenv(var, url)
    for var in ("NO_PROXY", "no_proxy"):
        monkeypatch.delenv(var, raising=False)
    return url


def test_local_server_is_reached_directly_despite_a_proxy(tmp_path, dead_proxy):
    exe = tmp_path / "llama-server"
    exe.write_text(f"#!{sys.executable}\n" + FAKE.read_text())
    exe.chmod(0o755)
    s = ServerSession.start(exe, ["-m", "model.gguf"], tmp_path / "server.log", env={"FAKE_MODE": "ok"},
                            load_timeout_s=20)
    try:
        assert s.props()          # both /health and /props went to 127.0.0.1, not to the proxy
        assert s.t_load_s is not None
    finally:
        s.stop(grace=2)


def test_local_session_ignores_the_environment(dead_proxy):
    from llamaforge.llamacpp.server import local_http_session

    assert local_http_session().trust_env is False
