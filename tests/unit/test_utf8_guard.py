"""Tokens that are not whole UTF-8, and the server engine's retry when a server rejects its own output."""

from __future__ import annotations

from pathlib import Path

import pytest

from llamaforge.bench.engines import server as engine_server
from llamaforge.bench.prompts import Prompt
from llamaforge.llamacpp.server import PointFailure
from llamaforge.models.utf8 import incomplete_utf8_ids, token_bytes_bpe
from llamaforge.records import PointDetail

PARSE_500 = ('/completion answered HTTP 500: {"error":{"code":500,"message":"The model produced output that '
             'does not match the expected Content-only format","type":"server_error"}}')


def test_byte_level_bpe_tokens_that_split_a_character_are_found():
    # GPT-2 byte alphabet: "Ġ" is a space; "âĢ" is 0xE2 0x80 (2 of the 3 bytes of "…" / "–")
    tokens = ["hello", "Ġworld", "âĢ", "âĢ¦", "<|im_end|>", "é"]
    assert token_bytes_bpe("âĢ¦") == "…".encode()
    assert token_bytes_bpe("Ġ") == b" " and token_bytes_bpe("日本") is None   # not in the byte alphabet
    assert incomplete_utf8_ids(tokens, "gpt2") == [2, 5]       # "é" is byte 0xE9 alone: a lead byte


def test_control_tokens_are_never_banned():
    assert incomplete_utf8_ids(["âĢ", "âĢ"], "gpt2", types=[3, 1]) == [1]


def test_sentencepiece_byte_fallback_tokens_above_0x7f_are_found():
    tokens = ["<unk>", "<0x41>", "<0xE2>", "▁hi", "<0x80>", "<0xzz>"]
    assert incomplete_utf8_ids(tokens, "llama") == [2, 4]


class _Session:
    def __init__(self, failures: list[PointFailure]) -> None:
        self.failures = failures
        self.calls: list[list[int] | None] = []

    def complete(self, prompt, n_predict, *, timeout, banned=None, overrides=None):
        self.calls.append(banned)
        if self.failures and banned is None:
            raise self.failures.pop(0)
        return {"timings": {"predicted_n": n_predict}}


class _Build:
    key = "k-cpu"


def _plan():
    from types import SimpleNamespace

    return SimpleNamespace(n_predict=4, stream=False, timeouts=SimpleNamespace(request_s=5))


def test_a_server_that_rejects_its_own_output_is_retried_with_banned_tokens(monkeypatch):
    monkeypatch.setattr(engine_server, "incomplete_utf8_tokens", lambda p: [7, 9])
    state, detail = engine_server.SweepState(), PointDetail()
    s = _Session([PointFailure("bad-response", PARSE_500)])
    prompt = Prompt("a b c", [1, 2, 3], 1, False, 3)
    assert engine_server._complete(s, _Build(), Path("m.gguf"), prompt, _plan(), state, detail)["timings"]
    assert s.calls == [None, [7, 9]] and state.banned == {"k-cpu": [7, 9]}
    assert detail.output_guard["banned_tokens"] == 2 and "Content-only" in detail.output_guard["why"]
    detail2 = PointDetail()
    engine_server._complete(s, _Build(), Path("m.gguf"), prompt, _plan(), state, detail2)   # later requests: banned at once
    assert s.calls[-1] == [7, 9] and detail2.output_guard["banned_tokens"] == 2


def test_other_bad_responses_are_not_retried(monkeypatch):
    s = _Session([PointFailure("bad-response", "/completion answered HTTP 500: out of slots")])
    with pytest.raises(PointFailure, match="out of slots"):
        engine_server._complete(s, _Build(), Path("m.gguf"), Prompt("a", [1], 1, False, 1), _plan(),
                                engine_server.SweepState(), PointDetail())
    assert s.calls == [None]
