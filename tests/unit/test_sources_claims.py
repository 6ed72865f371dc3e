"""Issue 40, point 5: a pin whose declared pypi/tarball source does not hold its commit is refused on every
run, warm cache or cold. Real git repositories, real (small) sdist-like archives, a real bare mirror; the
package index points at a dead port, so nothing here can reach a network."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import pytest
from test_sources import Upstream, fake_sdist, git_archive, path_spec, plain_tarball, pypi_spec

from llamaforge.config import Pin, SourceSpec
from llamaforge.errors import SourceError
from llamaforge.paths import Paths
from llamaforge.sources import SourceMismatch, checkout, checkout_commit, ledger, providers, resolve_commit
from llamaforge.sources.mirror import Mirror

UNREACHABLE_INDEX = "http://127.0.0.1:9/simple/"


@pytest.fixture
def paths(source_paths: Paths, monkeypatch: pytest.MonkeyPatch) -> Paths:
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)      # this machine's pip config must not add indexes
    monkeypatch.setenv("PIP_INDEX_URL", UNREACHABLE_INDEX)
    monkeypatch.delenv("PIP_EXTRA_INDEX_URL", raising=False)
    return source_paths


@pytest.fixture
def notices(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    seen: list[str] = []
    for module in ("sources", "sources.providers", "sources.claims", "sources.ledger"):
        monkeypatch.setattr(f"llamaforge.{module}.notice", seen.append)
    return seen


@pytest.fixture
def upstream(tmp_path: Path) -> Upstream:
    return Upstream(tmp_path / "upstream")


def record_of(paths: Paths, spec: SourceSpec) -> Path:
    return ledger.record_path(Mirror(paths.mirror), str(spec))


def write_record(paths: Paths, spec: SourceSpec, commit: str | None, sha256: str) -> Path:
    """A record as another llamaforge (or anyone) may have left it."""
    path = record_of(paths, spec)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"version": 1, "source": str(spec), "commit": commit, "sha256": sha256,
                                "file": "fake_cpp_python-0.9.1.tar.gz", "checked": "checked against pins.toml"}))
    return path


def mirrored(paths: Paths, up: Upstream, commit: str) -> None:
    """Put ``commit`` into the mirror as a git commit (what a pin with a git source leaves behind)."""
    tree = checkout(Pin("native", commit, (path_spec(up),)), paths)
    assert tree.native_git and tree.mirror_commit == commit


def mismatch(pin: Pin, paths: Paths) -> SourceMismatch:
    with pytest.raises(SourceMismatch) as exc:
        checkout(pin, paths)
    return exc.value


# -- the bug: a warm mirror no longer answers for a pin's sources -----------------------------------

def test_a_false_pypi_pin_is_refused_cold_and_warm_with_the_same_line_and_fix(paths: Paths, upstream: Upstream) -> None:
    sdist = fake_sdist(paths, new=upstream.c2[:9])            # the sdist vendors c2 ...
    false = Pin("false", upstream.c4[:9], (path_spec(upstream), pypi_spec(sdist)))   # ... the pin says c4

    cold = mismatch(false, paths)                            # nothing in the mirror yet
    assert cold.message == f"pypi:fake-cpp-python==0.9.1 vendors llama.cpp {upstream.c2[:9]}, but pin false names {upstream.c4[:9]}"
    assert cold.fix and f'set commit = "{upstream.c2[:9]}"' in cold.fix
    assert Mirror(paths.mirror).resolve(upstream.c4) is None, "refused before the git source was fetched"

    mirrored(paths, upstream, upstream.c4)                   # now the commit IS in the mirror
    by_record = mismatch(false, paths)                       # the record the cold refusal wrote answers
    shutil.rmtree(ledger.folder(Mirror(paths.mirror)))
    reverified = mismatch(false, paths)                      # no record: the cached sdist is read again ...
    assert record_of(paths, false.sources[1]).is_file()      # ... and the record written again
    sdist.unlink()
    record_only = mismatch(false, paths)                     # the record alone answers: no file, no network
    for e in (by_record, reverified, record_only):
        assert (e.message, e.fix) == (cold.message, cold.fix)


def test_a_record_for_another_commit_refuses_a_pin_whose_commit_is_mirrored(paths: Paths, upstream: Upstream) -> None:
    mirrored(paths, upstream, upstream.c4)
    spec = SourceSpec("pypi", "fake-cpp-python==0.9.1")
    write_record(paths, spec, upstream.c1[:9], "a" * 64)      # no sdist anywhere, the index is a dead port
    e = mismatch(Pin("p", upstream.c4, (SourceSpec("git", "http://127.0.0.1:9/x"), spec)), paths)
    assert e.message == f"{spec} vendors llama.cpp {upstream.c1[:9]}, but pin p names {upstream.c4}"


def test_without_a_record_the_source_is_verified_like_a_cold_checkout_and_remembered(
        paths: Paths, upstream: Upstream, notices: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    mirrored(paths, upstream, upstream.c4)
    sdist = fake_sdist(paths, new=upstream.c4[:9])
    spec = pypi_spec(sdist)
    pin = Pin("p", upstream.c4[:9], (path_spec(upstream), spec))
    tree = checkout(pin, paths)
    assert tree.native_git and tree.mirror_commit == upstream.c4, "the git commit is used, not an import"
    assert Mirror(paths.mirror).imports() == {}
    record = json.loads(record_of(paths, spec).read_text())
    assert record == {"version": 1, "source": str(spec), "commit": upstream.c4[:9],
                      "sha256": hashlib.sha256(sdist.read_bytes()).hexdigest(), "file": sdist.name,
                      "checked": "checked against pins.toml"}
    assert notices == []

    def no_verifying(*a: object) -> None:
        raise AssertionError("a source with a record was verified again")
    monkeypatch.setattr("llamaforge.sources.claims.verify", no_verifying)
    assert checkout(pin, paths) == tree


def test_a_cold_pypi_checkout_verifies_once_and_writes_the_record(paths: Paths, notices: list[str],
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    sdist = fake_sdist(paths, new="0c1e57098")
    calls: list[str] = []
    real = providers.verify_pypi
    monkeypatch.setattr(providers, "verify_pypi", lambda spec, paths: calls.append(str(spec)) or real(spec, paths))
    tree = checkout(Pin("default", "0c1e57098", (pypi_spec(sdist),)), paths)
    assert tree.commit == "0c1e57098" and not tree.native_git
    assert calls == ["pypi:fake-cpp-python==0.9.1"], "checked once, then imported from the same check"
    assert json.loads(record_of(paths, pypi_spec(sdist)).read_text())["commit"] == "0c1e57098"
    assert notices == []


def test_a_source_with_bytes_nothing_vouches_for_is_not_remembered(paths: Paths, notices: list[str]) -> None:
    fake_sdist(paths, new="0c1e57098")
    spec = SourceSpec("pypi", "fake-cpp-python==0.9.1")       # no sha256 pinned, the index is unreachable
    checkout(Pin("default", "0c1e57098", (spec,)), paths)
    assert len(notices) == 1 and "unchecked" in notices[0]
    assert not record_of(paths, spec).exists(), "checked again (against the index) next time"


def test_checkout_commit_and_resolve_commit_check_a_snapshot_source_too(paths: Paths, upstream: Upstream) -> None:
    mirrored(paths, upstream, upstream.c4)
    sdist = fake_sdist(paths, new=upstream.c2[:9])
    with pytest.raises(SourceMismatch, match="vendors llama.cpp"):
        checkout_commit(upstream.c4, paths, pypi_spec(sdist))
    with pytest.raises(SourceMismatch, match="vendors llama.cpp"):
        resolve_commit(paths, upstream.c4, pypi_spec(sdist))
    assert resolve_commit(paths, upstream.c4) == upstream.c4, "without a source nothing is claimed"


# -- tarballs -------------------------------------------------------------------------------------

def test_an_archive_of_another_commit_is_refused_although_the_pins_commit_is_mirrored(
        paths: Paths, upstream: Upstream, tmp_path: Path) -> None:
    mirrored(paths, upstream, upstream.c4)
    tgz = git_archive(upstream, upstream.c1, tmp_path / "c1.tar.gz")
    e = mismatch(Pin("t", upstream.c4, (path_spec(upstream), SourceSpec("tarball", str(tgz)))), paths)
    assert e.message == f"c1.tar.gz is an archive of llama.cpp {upstream.c1[:12]}, not {upstream.c4} (pin t)"


def test_a_local_archive_changed_since_its_record_is_checked_again(paths: Paths, upstream: Upstream,
                                                                  tmp_path: Path) -> None:
    tgz = git_archive(upstream, upstream.c4, tmp_path / "src.tar.gz")
    pin = Pin("t", upstream.c4, (SourceSpec("tarball", str(tgz)),))
    checkout(pin, paths)
    assert json.loads(record_of(paths, pin.sources[0]).read_text())["commit"] == upstream.c4
    git_archive(upstream, upstream.c1, tgz)                  # the same path, another commit's archive
    assert upstream.c1[:12] in mismatch(pin, paths).message
    tgz.unlink()                                             # gone: the (rewritten) record still answers
    assert upstream.c1[:12] in mismatch(pin, paths).message


def test_a_plain_archive_names_no_commit_and_is_taken_for_the_pins_as_before(paths: Paths, tmp_path: Path) -> None:
    tgz = plain_tarball({"CMakeLists.txt": "x\n"}, tmp_path / "s.tar.gz")
    pin = Pin("t", "1234567abc", (SourceSpec("tarball", str(tgz)),))
    assert checkout(pin, paths).commit == "1234567abc"
    assert json.loads(record_of(paths, pin.sources[0]).read_text())["commit"] is None


# -- records are written by strangers -------------------------------------------------------------

DAMAGE = {
    "not json": lambda p, good: p.write_text("{not json"),
    "not utf-8": lambda p, good: p.write_bytes(b"\xff\xfe{}"),
    "another source": lambda p, good: p.write_text(json.dumps({**good, "source": "pypi:other==1"})),
    "bad commit": lambda p, good: p.write_text(json.dumps({**good, "commit": "--upload-pack=x"})),
    "bad sha256": lambda p, good: p.write_text(json.dumps({**good, "sha256": "x"})),
    "file is a path": lambda p, good: p.write_text(json.dumps({**good, "file": "../../etc/passwd"})),
    "extra field": lambda p, good: p.write_text(json.dumps({**good, "trusted": True})),
    "version true": lambda p, good: p.write_text(json.dumps({**good, "version": True})),
    "a list": lambda p, good: p.write_text("[1, 2]"),
    "deep nesting": lambda p, good: p.write_text("[" * 5000 + "]" * 5000),
    "too large": lambda p, good: p.write_text(json.dumps({**good, "checked": "x" * 20000})),
    "a folder": lambda p, good: p.mkdir(),
    "a symlink": lambda p, good: (p.with_name("elsewhere").write_text(json.dumps(good)),
                                  p.symlink_to(p.with_name("elsewhere"))),
}


@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_a_damaged_record_is_ignored_and_the_source_verified_again(paths: Paths, upstream: Upstream,
                                                                  notices: list[str], damage: str) -> None:
    mirrored(paths, upstream, upstream.c4)
    sdist = fake_sdist(paths, new=upstream.c2[:9])            # what the source really holds: c2
    spec = pypi_spec(sdist)
    # what the damaged record would claim, were it trusted: the pin's own commit
    good = {"version": 1, "source": str(spec), "commit": upstream.c4[:9], "sha256": spec.sha256,
            "file": sdist.name, "checked": "checked against pins.toml"}
    path = record_of(paths, spec)
    path.parent.mkdir(parents=True, exist_ok=True)
    DAMAGE[damage](path, good)
    e = mismatch(Pin("p", upstream.c4[:9], (path_spec(upstream), spec)), paths)
    assert upstream.c2[:9] in e.message
    assert "damaged check record" in notices[0] and all("\n" not in n for n in notices)
    if damage == "a folder":   # left alone (never removed), so the new record cannot be written: said too
        assert len(notices) == 2 and "is not remembered" in notices[1]
    else:                      # rewritten with what the source holds
        assert len(notices) == 1 and json.loads(path.read_text())["commit"] == upstream.c2[:9]


def test_a_record_for_other_bytes_than_the_pinned_ones_is_not_used(paths: Paths, upstream: Upstream) -> None:
    mirrored(paths, upstream, upstream.c4)
    sdist = fake_sdist(paths, new=upstream.c2[:9])
    spec = pypi_spec(sdist)
    write_record(paths, spec, upstream.c4[:9], "b" * 64)      # right commit, but for bytes the pin does not pin
    assert upstream.c2[:9] in mismatch(Pin("p", upstream.c4, (spec,)), paths).message


def test_a_record_that_cannot_be_written_costs_a_notice_not_the_checkout(paths: Paths, upstream: Upstream,
                                                                        notices: list[str]) -> None:
    mirrored(paths, upstream, upstream.c4)
    ledger.folder(Mirror(paths.mirror)).write_text("a file where the folder should be")
    sdist = fake_sdist(paths, new=upstream.c4[:9])
    tree = checkout(Pin("p", upstream.c4, (path_spec(upstream), pypi_spec(sdist))), paths)
    assert tree.mirror_commit == upstream.c4
    assert len(notices) == 1 and "is not remembered" in notices[0]


# -- offline: a source that cannot be checked -----------------------------------------------------

def test_an_unreachable_pypi_source_is_passed_over_with_one_notice_when_git_has_the_commit(
        paths: Paths, upstream: Upstream, notices: list[str]) -> None:
    mirrored(paths, upstream, upstream.c4)
    spec = SourceSpec("pypi", "fake-cpp-python==0.9.1")       # no sdist cached, no index reachable, no record
    tree = checkout(Pin("p", upstream.c4, (SourceSpec("git", "http://127.0.0.1:9/x"), spec)), paths)
    assert tree.mirror_commit == upstream.c4
    assert len(notices) == 1, notices
    assert notices[0].startswith(f"source {spec} could not be checked against llama.cpp {upstream.c4} (")
    assert notices[0].endswith("going on: the mirror holds it as a git commit")


def test_an_unreachable_pypi_source_is_refused_when_nothing_else_proves_the_commit(
        paths: Paths, tmp_path: Path, notices: list[str]) -> None:
    plain = plain_tarball({"CMakeLists.txt": "x\n"}, tmp_path / "s.tar.gz")
    checkout(Pin("t", "1234567abc", (SourceSpec("tarball", str(plain)),)), paths)   # an import, no proof
    spec = SourceSpec("pypi", "fake-cpp-python==0.9.1")
    with pytest.raises(SourceError) as exc:
        checkout(Pin("p", "1234567abc", (spec,)), paths)
    assert not isinstance(exc.value, SourceMismatch)
    assert exc.value.message.startswith(f"pin p: source {spec} could not be checked against llama.cpp 1234567abc (")
    assert exc.value.message.endswith("and no other source proves that commit")
    assert "remembered" in (exc.value.fix or "") and "pins.p.sources" in (exc.value.fix or "")
    assert notices == []


def test_an_archive_that_names_the_commit_proves_it_for_an_unreachable_pypi_source(
        paths: Paths, upstream: Upstream, tmp_path: Path, notices: list[str]) -> None:
    tgz = git_archive(upstream, upstream.c2, tmp_path / "c2.tar.gz")
    spec = SourceSpec("pypi", "fake-cpp-python==0.9.1")
    tree = checkout(Pin("p", upstream.c2[:9], (spec, SourceSpec("tarball", str(tgz)))), paths)
    assert tree.commit == upstream.c2 and not tree.native_git
    assert len(notices) == 1 and notices[0].endswith(f"going on: tarball:{tgz} holds it")


def test_an_unreachable_source_without_any_other_fails_as_before(paths: Paths, notices: list[str]) -> None:
    spec = SourceSpec("pypi", "fake-cpp-python==0.9.1")
    with pytest.raises(SourceError) as exc:
        checkout(Pin("p", "0c1e57098", (spec,)), paths)
    assert exc.value.message.startswith(f"pin p (llama.cpp 0c1e57098): source {spec} failed: no package index reachable")
    assert exc.value.fix and notices == []
