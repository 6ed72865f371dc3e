"""Downloads and model references, against real HTTP servers on 127.0.0.1 (see http_sites.py).

The hub is simulated by pointing ``download.HUB_ORIGINS`` (the exact origins that get ``HF_TOKEN``)
at one local site; another local site (another port, so another host) plays the CDN.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from models_fake import fake_vocab

from http_sites import PAYLOAD, SHA, Site
from llamaforge.bench.plan import Plan, PointSpec, make_plan
from llamaforge.errors import ModelError
from llamaforge.models import download as dl
from llamaforge.models import refs
from llamaforge.models.download import download, hf_url, hub_sha256, is_hub, read_record, request_headers
from llamaforge.models.presets import TINY_VOCAB
from llamaforge.models.refs import resolve_model, split_hash
from llamaforge.paths import Paths

HUB_PATH = "/org/repo/resolve/main/model.gguf"


@pytest.fixture
def site() -> Iterator[Site]:
    s = Site()
    yield s
    s.close()


@pytest.fixture
def hub_cdn(monkeypatch) -> Iterator[tuple[Site, Site]]:
    """A hub (the only origin that gets the token) that redirects ``/resolve/`` to a CDN on another port,
    announcing the file's sha256 and size on the redirect only, as huggingface.co does."""
    hub, cdn = Site(), Site()
    hub.redirect_to = cdn
    hub.redirect_headers = {"X-Linked-ETag": f'"{SHA}"', "X-Linked-Size": str(len(PAYLOAD))}
    monkeypatch.setattr(dl, "HUB_ORIGINS", frozenset({("http", "127.0.0.1", hub.port)}))
    monkeypatch.setenv("HF_TOKEN", "hf_secret_token")
    yield hub, cdn
    hub.close()
    cdn.close()


def _auth(site: Site) -> list[str | None]:
    return [r["headers"].get("Authorization") for r in site.log]


# ---- the token ----------------------------------------------------------------------------------
def test_token_goes_only_to_https_on_the_exact_hub_host(monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "hf_x")
    yes = ["https://huggingface.co/o/r/resolve/main/m.gguf", "https://hf.co/o/r/resolve/main/m.gguf",
           "https://HuggingFace.co:443/o/r/m.gguf"]
    no = ["http://huggingface.co/o/r/m.gguf", "http://evil/huggingface.co/x.gguf",
          "https://evil.example/huggingface.co/x.gguf", "https://huggingface.co.evil.example/x.gguf",
          "https://evilhuggingface.co/x.gguf", "https://huggingface.co:8443/x.gguf",
          "https://cdn-lfs.huggingface.co/x.gguf", "https://evil.example/?u=https://huggingface.co/"]
    assert [is_hub(u) for u in yes] == [True] * len(yes)
    assert [is_hub(u) for u in no] == [False] * len(no)
    assert request_headers(yes[0])["Authorization"] == "Bearer hf_x"
    assert all("Authorization" not in request_headers(u) for u in no)


def test_token_is_not_sent_to_a_url_that_merely_contains_the_hub_name(tmp_path, site, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "hf_secret_token")
    download(site.url("/huggingface.co/org/model.gguf"), tmp_path / "m.gguf", sha256=SHA, progress=False)
    assert site.log and _auth(site) == [None] * len(site.log)


def test_token_reaches_the_hub_but_never_the_host_it_redirects_to(tmp_path, hub_cdn):
    hub, cdn = hub_cdn
    download(hub.url(HUB_PATH), tmp_path / "m.gguf", progress=False)
    assert {r["method"] for r in hub.log} == {"HEAD", "GET"}
    assert _auth(hub) == ["Bearer hf_secret_token"] * len(hub.log)
    assert cdn.gets() and _auth(cdn) == [None] * len(cdn.log)


@pytest.fixture
def hub_and_attacker(monkeypatch) -> Iterator[tuple[Site, Site]]:
    """The hub (the only origin that gets the token) and an attacker's server on another port."""
    hub, evil = Site(), Site()
    monkeypatch.setattr(dl, "HUB_ORIGINS", frozenset({("http", "127.0.0.1", hub.port)}))
    monkeypatch.setenv("HF_TOKEN", "hf_secret_token")
    yield hub, evil
    hub.close()
    evil.close()


def _confusing(evil: Site, hub: Site) -> str:
    """A URL that urlsplit reads as the hub (after the last '@') but requests sends to ``evil`` (it ends
    the host at the backslash)."""
    return f"http://127.0.0.1:{evil.port}\\@127.0.0.1:{hub.port}/org/repo/model.gguf"


def test_a_url_the_parsers_read_differently_is_refused_and_the_token_never_leaves(tmp_path, hub_and_attacker):
    hub, evil = hub_and_attacker
    with pytest.raises(ModelError, match="read differently") as ei:
        download(_confusing(evil, hub), tmp_path / "m.gguf", sha256=SHA, progress=False)
    assert ei.value.fix and "\n" not in str(ei.value)
    assert "Bearer hf_secret_token" not in _auth(evil) and "Bearer hf_secret_token" not in _auth(hub)
    assert not list(tmp_path.iterdir())
    assert not is_hub(_confusing(evil, hub))
    assert "Authorization" not in request_headers(_confusing(evil, hub))
    assert not is_hub("https://ATTACKER\\@huggingface.co/o/r/m.gguf")


def test_a_redirect_to_a_url_the_parsers_read_differently_never_carries_the_token(tmp_path, hub_and_attacker):
    hub, evil = hub_and_attacker
    plain = Site()
    try:
        plain.location = _confusing(evil, hub)
        with pytest.raises(ModelError, match="read differently"):
            download(plain.url(), tmp_path / "m.gguf", sha256=SHA, progress=False)
    finally:
        plain.close()
    assert {r["method"] for r in plain.log} == {"HEAD", "GET"}
    assert "Bearer hf_secret_token" not in _auth(evil)


def test_the_model_reference_with_a_confusing_url_is_one_clear_error(tmp_path, hub_and_attacker, monkeypatch):
    hub, evil = hub_and_attacker
    monkeypatch.setenv("LLAMAFORGE_CACHE", str(tmp_path / "cache"))
    with pytest.raises(ModelError, match="read differently"):
        resolve_model(_confusing(evil, hub), Paths(tmp_path), progress=False)
    assert "Bearer hf_secret_token" not in _auth(evil)


@pytest.mark.parametrize("url", ["http://[::1/x.gguf", "https://huggingface.co:443\\x/m.gguf", "http://a:99999/m.gguf",
                                 "https://huggingface.co\t/x.gguf", "http:///x.gguf"])
def test_an_unparsable_url_reference_is_one_clear_error(url, tmp_path, monkeypatch):
    monkeypatch.setenv("LLAMAFORGE_CACHE", str(tmp_path / "cache"))
    with pytest.raises(ModelError) as ei:
        resolve_model(url, Paths(tmp_path), progress=False)
    assert ei.value.fix
    assert not (tmp_path / "cache").exists()


@pytest.mark.parametrize("token", ["hf_secret_token\r\nX-Evil: 1", "hf_secret_token\nmore", "hf secret token"])
def test_an_hf_token_with_a_line_break_is_refused_and_never_shown(tmp_path, hub_cdn, monkeypatch, capsys, token):
    hub, cdn = hub_cdn
    monkeypatch.setenv("HF_TOKEN", token)
    with pytest.raises(ModelError, match="HF_TOKEN holds whitespace or a control character") as ei:
        download(hub.url(HUB_PATH), tmp_path / "m.gguf", progress=False)
    shown = str(ei.value) + capsys.readouterr().err
    assert "secret" not in shown and "Evil" not in shown and "more" not in shown
    assert not hub.log and not cdn.log


# ---- the hub's hash -----------------------------------------------------------------------------
def test_hub_sha256_is_read_from_the_redirect_not_the_cdn(tmp_path, hub_cdn, capsys):
    hub, cdn = hub_cdn
    dest = download(hub.url(HUB_PATH), tmp_path / "m.gguf", progress=False)
    assert dest.read_bytes() == PAYLOAD
    assert read_record(dest)["checked_against"] == "hub" and read_record(dest)["verified"] is True
    assert "UNVERIFIED" not in capsys.readouterr().err
    assert hub.log[0]["method"] == "HEAD" and not [r for r in cdn.log if r["method"] == "HEAD"]


def test_wrong_hub_sha256_on_the_redirect_fails_and_removes_the_file(tmp_path, hub_cdn):
    hub, _cdn = hub_cdn
    hub.redirect_headers["X-Linked-ETag"] = '"' + "0" * 64 + '"'
    with pytest.raises(ModelError, match="sha256 mismatch") as ei:
        download(hub.url(HUB_PATH), tmp_path / "m.gguf", progress=False)
    assert ei.value.fix
    assert list(tmp_path.iterdir()) == []


def test_hub_size_on_the_redirect_catches_a_cdn_body_cut_without_length(tmp_path, hub_cdn):
    hub, cdn = hub_cdn
    del hub.redirect_headers["X-Linked-ETag"]
    cdn.send_length, cdn.cut_after = False, 1 << 20
    with pytest.raises(ModelError, match="incomplete"):
        download(hub.url(HUB_PATH), tmp_path / "m.gguf", progress=False)
    assert (tmp_path / "m.gguf.part").stat().st_size == 1 << 20
    dest = download(hub.url(HUB_PATH), tmp_path / "m.gguf", progress=False)   # resumes
    assert cdn.gets()[-1]["headers"]["Range"] == f"bytes={1 << 20}-"
    assert dest.read_bytes() == PAYLOAD


# ---- resuming -----------------------------------------------------------------------------------
def _cut_once(site: Site, dest: Path) -> None:
    site.cut_after = 1 << 20
    with pytest.raises(ModelError, match="interrupted|incomplete"):
        download(site.url(), dest, progress=False)
    assert dest.with_name(dest.name + ".part").stat().st_size == 1 << 20


def test_interrupted_download_resumes_with_range_and_if_range(tmp_path, site):
    _cut_once(site, tmp_path / "m.gguf")
    dest = download(site.url(), tmp_path / "m.gguf", sha256=SHA, progress=False)
    last = site.gets()[-1]["headers"]
    assert last["Range"] == f"bytes={1 << 20}-" and last["If-Range"] == '"v1"'
    assert dest.read_bytes() == PAYLOAD
    assert not (tmp_path / "m.gguf.part").exists() and not (tmp_path / "m.gguf.part.json").exists()


@pytest.mark.parametrize("cut", [(1 << 20) + 12345, 777, (2 << 20) + 1])
def test_a_connection_dropped_mid_chunk_keeps_every_byte_received(tmp_path, site, cut):
    site.cut_after = cut
    with pytest.raises(ModelError, match="interrupted|incomplete"):
        download(site.url(), tmp_path / "m.gguf", progress=False)
    assert (tmp_path / "m.gguf.part").read_bytes() == PAYLOAD[:cut]
    dest = download(site.url(), tmp_path / "m.gguf", sha256=SHA, progress=False)
    assert site.gets()[-1]["headers"]["Range"] == f"bytes={cut}-"
    assert dest.read_bytes() == PAYLOAD


def test_206_from_the_wrong_offset_is_not_spliced_in(tmp_path, site):
    _cut_once(site, tmp_path / "m.gguf")
    site.range_mode = "wrong_offset"
    dest = download(site.url(), tmp_path / "m.gguf", progress=False)
    assert dest.read_bytes() == PAYLOAD
    assert "Range" in site.gets()[-2]["headers"] and "Range" not in site.gets()[-1]["headers"]


def test_200_to_a_range_request_restarts_from_zero(tmp_path, site):
    _cut_once(site, tmp_path / "m.gguf")
    site.range_mode = "ignore"
    dest = download(site.url(), tmp_path / "m.gguf", progress=False)
    assert "Range" in site.gets()[-1]["headers"]
    assert dest.read_bytes() == PAYLOAD


def test_a_file_changed_since_the_part_is_fetched_whole_not_spliced(tmp_path, site):
    _cut_once(site, tmp_path / "m.gguf")
    site.payload, site.etag = PAYLOAD[::-1], '"v2"'      # the server now has another version
    dest = download(site.url(), tmp_path / "m.gguf", progress=False)
    assert dest.read_bytes() == PAYLOAD[::-1]


def test_a_part_without_a_validator_is_not_resumed(tmp_path, site):
    (tmp_path / "m.gguf.part").write_bytes(b"garbage" * 100)
    dest = download(site.url(), tmp_path / "m.gguf", progress=False)
    assert "Range" not in site.gets()[-1]["headers"]
    assert dest.read_bytes() == PAYLOAD


def test_body_cut_without_length_and_without_hash_is_refused(tmp_path, site):
    site.send_length, site.cut_after = False, 1 << 20
    with pytest.raises(ModelError, match="did not say how long") as ei:
        download(site.url(), tmp_path / "m.gguf", progress=False)
    assert "#sha256=" in ei.value.fix
    assert not (tmp_path / "m.gguf").exists()


def test_body_without_length_is_accepted_when_its_pinned_hash_matches(tmp_path, site):
    site.send_length = False
    assert download(site.url(), tmp_path / "m.gguf", sha256=SHA, progress=False).read_bytes() == PAYLOAD
    site.cut_after = 1 << 20
    with pytest.raises(ModelError, match="sha256 mismatch"):
        download(site.url(), tmp_path / "m2.gguf", sha256=SHA, progress=False)


# ---- hashes and what is said about them -------------------------------------------------------
def test_hash_mismatch_removes_the_file_with_a_clear_error(tmp_path, site):
    site.file_headers["X-Linked-ETag"] = '"' + "0" * 64 + '"'
    with pytest.raises(ModelError, match="sha256 mismatch") as ei:
        download(site.url(), tmp_path / "m.gguf", progress=False)
    assert ei.value.fix
    assert list(tmp_path.iterdir()) == []


def test_given_hash_wins_over_the_announced_one(tmp_path, site):
    site.file_headers["X-Linked-ETag"] = '"' + "0" * 64 + '"'
    with pytest.raises(ModelError, match="sha256 mismatch"):
        download(site.url(), tmp_path / "m.gguf", sha256="f" * 64, progress=False)
    assert read_record(download(site.url(), tmp_path / "m.gguf", sha256=SHA, progress=False))["checked_against"] == "pinned"


def test_unverified_download_is_said_loudly_and_recorded(tmp_path, site, monkeypatch, capsys):
    monkeypatch.setenv("LLAMAFORGE_CACHE", str(tmp_path / "cache"))
    paths = Paths(tmp_path)
    p = resolve_model(site.url(), paths, progress=False)
    err = capsys.readouterr().err
    assert "UNVERIFIED" in err and "model.gguf" in err and f"{site.url()}#sha256={SHA}" in err
    assert read_record(p) | {"time": 0, "mtime_ns": 0} == {
        "url": site.url(), "sha256": SHA, "verified": False, "checked_against": None, "bytes": len(PAYLOAD),
        "time": 0, "mtime_ns": 0}
    resolve_model(site.url(), paths, progress=False)                      # cached: said again
    assert "UNVERIFIED" in capsys.readouterr().err
    plan = make_plan(model_ref=site.url(), model_path=p, model_facts={}, points=[PointSpec(0)])
    assert plan.to_json()["model"]["download"]["verified"] is False
    assert Plan.from_json(plan.to_json()).model.download == plan.model.download
    n = len(site.gets())
    assert resolve_model(f"{site.url()}#sha256={SHA}", paths, progress=False) == p   # pinning checks the cache
    assert len(site.gets()) == n and read_record(p)["checked_against"] == "pinned"
    resolve_model(site.url(), paths, progress=False)
    assert "UNVERIFIED" not in capsys.readouterr().err


def test_pinning_a_hash_that_the_cached_file_does_not_have_downloads_again(tmp_path, site, monkeypatch):
    monkeypatch.setenv("LLAMAFORGE_CACHE", str(tmp_path / "cache"))
    p = resolve_model(site.url(), Paths(tmp_path), progress=False)
    p.write_bytes(b"tampered")            # changed after the download: its record no longer counts
    assert read_record(p) is None
    assert resolve_model(f"{site.url()}#sha256={SHA}", Paths(tmp_path), progress=False).read_bytes() == PAYLOAD
    with pytest.raises(ModelError, match="sha256 mismatch"):
        resolve_model(f"{site.url()}#sha256={'e' * 64}", Paths(tmp_path), progress=False)


# ---- secrets in messages ----------------------------------------------------------------------
def test_error_messages_never_show_url_credentials_or_queries(tmp_path, site):
    secret = f"{site.url('/org/nope.gguf')}?X-Amz-Signature=sig_secret".replace("//", "//user:pw_secret@", 1)
    with pytest.raises(ModelError, match="HTTP 404") as ei:
        download(secret, tmp_path / "x", progress=False)
    assert "sig_secret" not in str(ei.value) and "pw_secret" not in str(ei.value)
    closed = Site()
    closed.close()   # a port nobody listens on: requests quotes the path and query in its message
    with pytest.raises(ModelError, match="cannot download") as ei:
        download(closed.url("/m.gguf?token=tok_secret"), tmp_path / "y", progress=False)
    assert "tok_secret" not in str(ei.value) and "REDACTED" in str(ei.value)


# ---- references ---------------------------------------------------------------------------------
def test_url_reference_downloads_into_the_model_cache_once(tmp_path, site, monkeypatch):
    monkeypatch.setenv("LLAMAFORGE_CACHE", str(tmp_path / "cache"))
    paths = Paths(tmp_path)
    p1 = resolve_model(f"{site.url()}#sha256={SHA}", paths, progress=False)
    p2 = resolve_model(site.url(), paths, progress=False)
    assert p1 == p2 and p1.read_bytes() == PAYLOAD
    assert str(p1).startswith(str(tmp_path / "cache" / "models"))
    assert len(site.gets()) == 1


def test_references_cannot_leave_the_model_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("LLAMAFORGE_CACHE", str(tmp_path / "cache"))
    for bad in ("hf:org/repo/../../../x.gguf", "hf:org/../x.gguf", "hf:org/repo/./x.gguf", "hf:a//b/c"):
        with pytest.raises(ModelError, match="bad Hugging Face reference"):
            resolve_model(bad, Paths(tmp_path), progress=False)
    monkeypatch.setattr(refs, "download", lambda url, dest, **kw: dest)   # only where it would land
    got = resolve_model("https://example.invalid/a/..", Paths(tmp_path), progress=False)
    assert got.name == "model.gguf" and got.parent.parent == tmp_path / "cache" / "models" / "url"


def test_hf_reference_maps_to_the_resolve_url():
    assert hf_url("unsloth/Qwen3.6-35B-A3B-GGUF/sub/x.gguf") == \
        "https://huggingface.co/unsloth/Qwen3.6-35B-A3B-GGUF/resolve/main/sub/x.gguf"
    with pytest.raises(ModelError):
        hf_url("only/two")
    assert split_hash("hf:a/b/c#sha256=" + SHA) == ("hf:a/b/c", SHA)
    assert hub_sha256({"ETag": f'W/"{SHA.upper()}"'}) == SHA
    assert hub_sha256({"ETag": '"abc-123"'}) is None


def test_http_error_is_a_model_error(tmp_path, site):
    with pytest.raises(ModelError, match="HTTP 404"):
        download(site.url("/org/repo/nope.gguf"), tmp_path / "x", progress=False)


def test_unknown_model_reference_is_a_model_error(tmp_path):
    with pytest.raises(ModelError, match="no model"):
        resolve_model("ollama:qwen", Paths(tmp_path))
    with pytest.raises(ModelError, match="unknown model preset"):
        resolve_model("synth:nope", Paths(tmp_path))


def test_synth_reference_is_generated_once_into_the_cache(tmp_path, monkeypatch):
    vd = tmp_path / "vocab"
    vd.mkdir()
    fake_vocab(vd / TINY_VOCAB)
    monkeypatch.setenv("LLAMAFORGE_CACHE", str(tmp_path / "cache"))
    paths = Paths(tmp_path)
    p1 = resolve_model("synth:tiny-qwen3moe:q8_0", paths, vocab_dir=vd, progress=False)
    mtime = p1.stat().st_mtime_ns
    p2 = resolve_model("synth:tiny-qwen3moe:q8_0", paths, vocab_dir=vd, progress=False)
    assert p1 == p2 and p2.stat().st_mtime_ns == mtime
    assert p1.parent == Path(tmp_path / "cache" / "models" / "synth")
    assert resolve_model("synth:tiny-qwen3moe:q4_k_m", paths, vocab_dir=vd, progress=False) != p1


def test_download_record_never_keeps_the_query(tmp_path, site):
    dest = download(site.url() + "?X-Amz-Signature=sig_secret", tmp_path / "m.gguf", sha256=SHA, progress=False)
    text = json.dumps(read_record(dest))
    assert "sig_secret" not in text and hashlib.sha256(dest.read_bytes()).hexdigest() == SHA


def test_unverified_warning_for_a_presigned_url_does_not_repeat_its_secret(tmp_path, site, capsys):
    download(site.url() + "?X-Amz-Signature=sig_secret", tmp_path / "m.gguf", progress=False)
    err = capsys.readouterr().err
    assert "UNVERIFIED" in err and f"append #sha256={SHA}" in err and "sig_secret" not in err
