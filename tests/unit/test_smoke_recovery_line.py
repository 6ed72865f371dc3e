"""A smoke run the no-repack quirk rescues says so in one calm line (issue 40).

Every gcc-12 CPU build on the project's AMX machines crashed in its first smoke run: the terminal showed the
SIGSEGV, then a quiet "runs with the no-repack workaround", and a newcomer could not tell that the build was
fine. Now it is one line — what was detected, what was done, where it is documented — and the crash itself
only with ``LLAMAFORGE_DEBUG=1``. The fakes (``FAKE_MODE=amx-crash``) die of SIGSEGV unless given the quirk.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from fakes import FakeBuild, fake_binaries
from llamaforge.builds import smoke
from llamaforge.builds.smoke import recovery_line, run_smoke
from llamaforge.llamacpp.quirks import get_quirk

DOCS = Path(__file__).resolve().parents[2] / "docs"
AMX = {"arch": "x86_64", "model": "Xeon", "isa": ["amx_bf16", "amx_tile", "avx2"], "id": "x"}
NO_AMX = {"arch": "x86_64", "model": "EPYC", "isa": ["avx2"], "id": "y"}


def _build(tmp_path: Path, cc_name: str = "gcc-12", version: str = "12.2.0") -> FakeBuild:
    cc = tmp_path / "bin" / cc_name
    cc.parent.mkdir(parents=True, exist_ok=True)
    cc.write_text("")
    manifest = {"toolchain": {"cc": {"name": "cc", "path": str(cc), "version": version}}}
    return FakeBuild("cpu-0c1e570-abcd", fake_binaries(tmp_path / "b", model=True), "amx-crash", manifest=manifest)


@pytest.fixture
def amx_host(monkeypatch):
    monkeypatch.setattr(smoke, "native_cpu", lambda: AMX)


def test_a_rescued_smoke_run_is_one_calm_line_without_the_crash(tmp_path, amx_host, capsys, monkeypatch):
    monkeypatch.delenv("LLAMAFORGE_DEBUG", raising=False)
    monkeypatch.delenv("LLAMAFORGE_VERBOSE", raising=False)
    b = _build(tmp_path)
    res = run_smoke(b, b.dir / "m.gguf", b.env)
    assert res.ok and [q.name for q in res.quirks] == ["no-repack"]
    out, err = capsys.readouterr()
    assert out.strip().splitlines() == [
        "cpu-0c1e570-abcd: smoke run crashed in the CPU repack path (known AMX + gcc-12 issue); re-ran with the "
        "no-repack quirk: ok — see docs/builds.md#runtime-quirks"]
    assert err == ""
    assert "SIGSEGV" not in out + err and "status -11" not in out + err
    assert res.quirks[0].evidence["signal"] == "SIGSEGV"      # the evidence is still recorded


@pytest.mark.parametrize("switch", ["LLAMAFORGE_DEBUG", "LLAMAFORGE_VERBOSE"])
def test_with_verbose_or_debug_the_crash_is_shown_too(tmp_path, amx_host, capsys, monkeypatch, switch):
    monkeypatch.setenv(switch, "1")
    b = _build(tmp_path)
    assert run_smoke(b, b.dir / "m.gguf", b.env).ok
    out, err = capsys.readouterr()
    assert "re-ran with the no-repack quirk: ok" in out
    assert "SIGSEGV" in err and "retrying with the no-repack workaround" in err


def test_the_known_issue_is_named_only_where_the_host_and_the_compiler_show_it(tmp_path, monkeypatch):
    q = get_quirk("no-repack")
    assert q is not None
    monkeypatch.setattr(smoke, "native_cpu", lambda: AMX)
    assert "(known AMX + gcc-12 issue)" in recovery_line(_build(tmp_path / "a"), q)
    assert "(known" not in recovery_line(_build(tmp_path / "b", "gcc-13", "13.3.0"), q)
    assert "(known" not in recovery_line(_build(tmp_path / "c", "clang-14", "14.0.6"), q)
    monkeypatch.setattr(smoke, "native_cpu", lambda: NO_AMX)
    assert recovery_line(_build(tmp_path / "d"), q) == (
        "cpu-0c1e570-abcd: smoke run crashed in the CPU repack path; re-ran with the no-repack quirk: ok — "
        "see docs/builds.md#runtime-quirks")


def test_the_line_points_at_a_heading_that_exists():
    q = get_quirk("no-repack")
    assert q is not None
    page, _, anchor = q.docs.partition("#")
    headings = [re.sub(r"[^a-z0-9 -]", "", h.lower()).strip().replace(" ", "-")
                for h in re.findall(r"^#+ (.+)$", (DOCS.parent / page).read_text(), re.M)]
    assert anchor in headings, headings
