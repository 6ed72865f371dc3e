"""``hf:`` references use a file already in the user's Hugging Face cache, in place and checked, and never
write into that cache (issue 40). No network: the caches are built in ``tmp_path`` in ``huggingface_hub``'s
layout (``models--OWNER--REPO/{blobs,snapshots/<commit>,refs/main}``), once by hand and once by
``huggingface_hub.hf_hub_download`` itself from a server on 127.0.0.1 (http_sites.py).

``huggingface_hub`` reads ``HF_HOME``/``HF_HUB_CACHE``/``HF_HUB_OFFLINE`` when it is first imported, so the
in-process tests set the variable *and* its reading (``huggingface_hub.constants``), as ``huggingface_hub``'s
own tests do; :func:`test_the_environment_variables_alone_decide_the_cache_and_offline_mode` proves in a fresh
interpreter that the variables alone are enough.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from huggingface_hub import constants

from http_sites import PAYLOAD, SHA, Site
from llamaforge.bench.plan import PointSpec, make_plan
from llamaforge.errors import ModelError
from llamaforge.models import hfcache, refs
from llamaforge.models.refs import download_record, hf_cache_path, resolve_model
from llamaforge.paths import Paths

COMMIT = "c0ffee" + "0" * 34
OLD_COMMIT = "01d" + "0" * 37
DATA = b"GGUF" + bytes(range(256)) * 64
DATA_SHA = hashlib.sha256(DATA).hexdigest()
REF = "hf:org/repo/sub/model.gguf"


@pytest.fixture
def paths(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Paths:
    monkeypatch.setenv("LLAMAFORGE_CACHE", str(tmp_path / "lf-cache"))
    return Paths(tmp_path)


def _point_hub_at(monkeypatch: pytest.MonkeyPatch, hub: Path, *, offline: bool = False) -> None:
    monkeypatch.setenv("HF_HUB_CACHE", str(hub))
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(hub))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", offline)
    if offline:
        monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    else:
        monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)


@pytest.fixture
def hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty Hugging Face hub cache folder, the one ``huggingface_hub`` uses."""
    d = tmp_path / "hf-home" / "hub"
    d.mkdir(parents=True)
    _point_hub_at(monkeypatch, d)
    return d


@pytest.fixture
def downloads(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """No network: every download llamaforge would start (and any HTTP request at all) is recorded."""
    seen: list[Path] = []

    def fake(url: str, dest: Path, **kw: object) -> Path:
        seen.append(Path(dest))
        Path(dest).parent.mkdir(parents=True, exist_ok=True)
        Path(dest).write_bytes(DATA)
        return Path(dest)

    def no_request(*a: object, **kw: object) -> None:
        raise AssertionError("an HTTP request was made")

    monkeypatch.setattr(refs, "download", fake)
    monkeypatch.setattr("requests.sessions.Session.send", no_request)
    return seen


def cache_file(hub: Path, repo: str, name: str, data: bytes, commit: str = COMMIT, *, blob: str | None = None,
               main: bool = True) -> Path:
    """``data`` as ``huggingface_hub`` caches it: ``blobs/<sha256>`` (or ``blob``), the snapshot's symlink,
    ``refs/main`` naming ``commit``. Returns the snapshot path."""
    root = hub / f"models--{repo.replace('/', '--')}"
    b = root / "blobs" / (blob or hashlib.sha256(data).hexdigest())
    b.parent.mkdir(parents=True, exist_ok=True)
    b.write_bytes(data)
    snap = root / "snapshots" / commit / name
    snap.parent.mkdir(parents=True, exist_ok=True)
    snap.symlink_to(os.path.relpath(b, snap.parent))
    if main:
        (root / "refs").mkdir(exist_ok=True)
        (root / "refs" / "main").write_text(commit)
    return snap


def tree(root: Path) -> dict[str, tuple[int, int]]:
    """Every path under ``root`` → (size, mtime_ns), symlinks not followed: what "nothing written" compares."""
    return {str(p.relative_to(root)): (p.lstat().st_size, p.lstat().st_mtime_ns) for p in sorted(root.rglob("*"))}


# ---- found: used in place -------------------------------------------------------------------------
def test_a_file_in_the_hugging_face_cache_is_used_in_place_with_no_request(paths, hub, downloads):
    snap = cache_file(hub, "org/repo", "sub/model.gguf", DATA)
    before = tree(hub)
    got = resolve_model(REF, paths, progress=False)
    assert got == snap and got.read_bytes() == DATA
    assert downloads == [] and not hf_cache_path("org/repo/sub/model.gguf", paths).exists()   # no copy
    assert tree(hub) == before                                                                  # nothing written there
    rec = download_record(got)
    assert rec is not None and rec["origin"] == "huggingface-cache" and rec["path"] == str(snap)
    assert (rec["sha256"], rec["verified"], rec["checked_against"], rec["revision"]) == (DATA_SHA, True, "hub", COMMIT)
    assert rec["url"] == "https://huggingface.co/org/repo/resolve/main/sub/model.gguf"


def test_a_pinned_hash_is_checked_against_the_cached_file(paths, hub, downloads):
    snap = cache_file(hub, "org/repo", "sub/model.gguf", DATA)
    assert resolve_model(f"{REF}#sha256={DATA_SHA.upper()}", paths, progress=False) == snap
    assert download_record(snap)["checked_against"] == "pinned" and downloads == []


def test_a_pinned_hash_the_cached_file_does_not_have_is_one_error_and_the_file_is_not_used(paths, hub, downloads):
    snap = cache_file(hub, "org/repo", "sub/model.gguf", DATA)
    before = tree(hub)
    with pytest.raises(ModelError, match="not the pinned") as ei:
        resolve_model(f"{REF}#sha256={'e' * 64}", paths, progress=False)
    msg = str(ei.value)
    assert "\n" not in msg and str(snap) in msg and DATA_SHA in msg and "was not used" in msg
    assert "hf download org/repo sub/model.gguf" in ei.value.fix
    assert downloads == [] and tree(hub) == before and snap.read_bytes() == DATA


def test_a_damaged_blob_is_one_error_not_used(paths, hub, downloads):
    cache_file(hub, "org/repo", "sub/model.gguf", DATA, blob="f" * 64)   # named for other bytes
    with pytest.raises(ModelError, match="damaged") as ei:
        resolve_model(REF, paths, progress=False)
    assert "\n" not in str(ei.value) and downloads == []


def test_a_file_with_no_hash_in_its_blob_name_is_used_unverified_and_said(paths, hub, downloads, capsys):
    snap = cache_file(hub, "org/repo", "sub/model.gguf", DATA, blob="a" * 40)   # a git (non-LFS) blob
    assert resolve_model(REF, paths, progress=False) == snap
    err = capsys.readouterr().err
    assert "UNVERIFIED" in err and f"{REF}#sha256={DATA_SHA}" in err
    assert download_record(snap)["verified"] is False


def test_the_sha256_is_computed_once_then_read_from_the_record(paths, hub, downloads, monkeypatch):
    snap = cache_file(hub, "org/repo", "sub/model.gguf", DATA)
    hashed: list[Path] = []
    real = hfcache._sha256
    monkeypatch.setattr(hfcache, "_sha256", lambda p, progress: hashed.append(p) or real(p, progress))
    for ref in (REF, REF, f"{REF}#sha256={DATA_SHA}", REF):
        assert resolve_model(ref, paths, progress=False) == snap
    assert len(hashed) == 1
    os.utime(snap, ns=(1, 1))                 # the blob changed since: its record no longer counts
    resolve_model(REF, paths, progress=False)
    assert len(hashed) == 2


def test_the_record_goes_to_llamaforges_cache_and_a_plan_keeps_it(paths, hub, downloads):
    snap = cache_file(hub, "org/repo", "sub/model.gguf", DATA)
    resolve_model(REF, paths, progress=False)
    assert hfcache.record_file(snap, paths).is_file()
    assert hfcache.record_file(snap, paths).is_relative_to(paths.model_cache)
    plan = make_plan(model_ref=REF, model_path=snap, model_facts={}, points=[PointSpec(0)])
    assert plan.to_json()["model"]["download"]["origin"] == "huggingface-cache"


def test_main_is_the_revision_read_from_refs_main(paths, hub, downloads):
    cache_file(hub, "org/repo", "sub/model.gguf", b"GGUF old", OLD_COMMIT, main=False)
    snap = cache_file(hub, "org/repo", "sub/model.gguf", DATA, COMMIT)
    assert resolve_model(REF, paths, progress=False) == snap
    (hub / "models--org--repo" / "refs" / "main").write_text(OLD_COMMIT)
    assert resolve_model(REF, paths, progress=False).parent.parent.name == OLD_COMMIT


def test_llamaforges_own_copy_comes_first(paths, hub, downloads):
    cache_file(hub, "org/repo", "sub/model.gguf", DATA)
    own = hf_cache_path("org/repo/sub/model.gguf", paths)
    own.parent.mkdir(parents=True)
    own.write_bytes(DATA)
    assert resolve_model(f"{REF}#sha256={DATA_SHA}", paths, progress=False) == own


# ---- not found: the old path ----------------------------------------------------------------------
def test_with_no_hugging_face_cache_the_file_is_downloaded_into_llamaforges_cache(paths, tmp_path, monkeypatch,
                                                                                   downloads):
    _point_hub_at(monkeypatch, tmp_path / "no-such-hub")
    got = resolve_model(f"{REF}#sha256={DATA_SHA}", paths, progress=False)
    assert got == downloads[0] == paths.model_cache / "hf" / "org" / "repo" / "sub" / "model.gguf"
    assert not (tmp_path / "no-such-hub").exists()


@pytest.mark.parametrize("other", ["org/repo|sub/other.gguf", "org/other|sub/model.gguf", "no-main"])
def test_a_file_the_hugging_face_cache_lacks_is_downloaded_as_before(paths, hub, downloads, other):
    if other == "no-main":                # the snapshot is there but refs/main names no snapshot of it
        cache_file(hub, "org/repo", "sub/model.gguf", DATA, main=False)
    else:
        repo, name = other.split("|")
        cache_file(hub, repo, name, DATA)
    got = resolve_model(f"{REF}#sha256={DATA_SHA}", paths, progress=False)
    assert downloads == [got] and got.is_relative_to(paths.model_cache)


def test_a_refs_main_that_climbs_out_of_the_snapshots_is_not_followed(paths, hub, downloads, tmp_path):
    cache_file(hub, "org/repo", "sub/model.gguf", DATA)
    outside = tmp_path / "outside" / "sub"
    outside.mkdir(parents=True)
    (outside / "model.gguf").write_bytes(b"GGUF not yours")
    (hub / "models--org--repo" / "refs" / "main").write_text("../../../outside")
    got = resolve_model(f"{REF}#sha256={DATA_SHA}", paths, progress=False)
    assert downloads == [got] and got.is_relative_to(paths.model_cache)


def test_hostile_references_are_refused_before_the_cache_is_read(paths, hub, downloads, monkeypatch):
    monkeypatch.setattr(hfcache, "find", lambda *a, **kw: pytest.fail("the Hugging Face cache was read"))
    for bad in ("hf:org/repo/../../x.gguf", "hf:org//x.gguf", "hf:/abs/r/x.gguf"):
        with pytest.raises(ModelError, match="bad Hugging Face reference"):
            resolve_model(bad, paths, progress=False)


# ---- offline --------------------------------------------------------------------------------------
def test_offline_a_cached_file_is_found_and_a_missing_one_is_one_error(paths, hub, downloads, monkeypatch):
    _point_hub_at(monkeypatch, hub, offline=True)
    snap = cache_file(hub, "org/repo", "sub/model.gguf", DATA)
    assert resolve_model(REF, paths, progress=False) == snap
    with pytest.raises(ModelError, match="HF_HUB_OFFLINE is set") as ei:
        resolve_model("hf:org/repo/sub/missing.gguf", paths, progress=False)
    assert "hf download org/repo sub/missing.gguf" in ei.value.fix and downloads == []


def test_the_environment_variables_alone_decide_the_cache_and_offline_mode(tmp_path):
    """A fresh interpreter, only ``HF_HOME`` and ``HF_HUB_OFFLINE=1`` set: ``huggingface_hub``'s own rule
    (``HF_HOME/hub``) finds the file, and no request is possible (requests' sender raises)."""
    snap = cache_file(tmp_path / "home" / "hub", "org/repo", "sub/model.gguf", DATA)
    code = ("import sys, requests.sessions as s\n"
            "s.Session.send = lambda *a, **k: sys.exit('an HTTP request was made')\n"
            "from llamaforge.models.refs import resolve_model\nfrom llamaforge.paths import Paths\n"
            f"print(resolve_model({REF!r}, Paths.default(), progress=False))\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGINGFACE_"))}
    env |= {"HF_HOME": str(tmp_path / "home"), "HF_HUB_OFFLINE": "1", "LLAMAFORGE_CACHE": str(tmp_path / "lf"),
            "PYTHONPATH": str(Path(__file__).resolve().parents[2] / "src")}
    r = subprocess.run([sys.executable, "-c", code], env=env, cwd=tmp_path, capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == str(snap)


# ---- the layout huggingface_hub really writes ----------------------------------------------------
@pytest.fixture
def site() -> Iterator[Site]:
    s = Site()
    yield s
    s.close()


def test_a_file_hf_hub_download_cached_is_found_with_no_further_request(paths, hub, site, monkeypatch):
    """``huggingface_hub`` fills the cache from a local hub; llamaforge then finds it and asks nothing."""
    from huggingface_hub import hf_hub_download

    site.etag = f'"{SHA}"'
    site.file_headers = {"X-Repo-Commit": COMMIT}
    got = Path(hf_hub_download("org/repo", "model.gguf", cache_dir=hub, endpoint=site.url("")))
    n = len(site.log)
    assert n >= 1
    monkeypatch.setattr(refs, "download", lambda *a, **kw: pytest.fail("downloaded again"))
    assert resolve_model(f"hf:org/repo/model.gguf#sha256={SHA}", paths, progress=False) == got
    assert resolve_model("hf:org/repo/model.gguf", paths, progress=False).read_bytes() == PAYLOAD
    assert len(site.log) == n and download_record(got)["checked_against"] == "hub"
