"""Every report committed under ``results/`` is re-rendered from its committed store and must come out as
committed: a change of the record, the metric registry or a renderer that alters what a published report
says shows here as a diff (the README of each folder says how its report was made). Only metrics an old run
never measured may be added, and an old run has no values of them, so nothing may change at all.

The stores are copied first: a committed store is never opened for writing."""

from __future__ import annotations

import difflib
import lzma
import re
import shutil
from pathlib import Path

import pytest

from llamaforge.store import Store

RESULTS = Path(__file__).resolve().parents[2] / "results"

#: report folder → (store folder, run, the other sessions of a ``--with`` report)
SWEEPS: dict[str, tuple[str, str, tuple[str, ...]]] = {
    "h100/place-24gib": ("h100/place-24gib", "20261208-011433-3979", ()),
    "h200/vram-24gib-k2-1201b": ("h200", "20261201-103910-aee9", ()),
    "h200/vram-24gib-k2-1201": ("h200", "20261201-060908-5e4f", ()),
    "h200/vram-24gib-k2n": ("h200", "20261130-205305-575f", ()),
    "h200/vram-24gib-k2": ("h200", "20261130-150129-c3d7", ()),
    "h200/vram-24gib": ("h200", "20261129-170226-8ab9", ()),
    "h200/whole-card": ("h200", "20261129-171404-a170", ()),
    "h200/variants": ("h200", "20261202-072811-9cbb", ()),
    "h200/sessions": ("h200", "20261201-103910-aee9",
                      ("20261130-150129-c3d7", "20261130-205305-575f", "20261201-060908-5e4f")),
    "h200/amx-gcc12.2/demo": ("h200", "20261201-031421-0b9b", ()),
    "h200/amx-gcc12.2/plain-bench": ("h200", "20261201-031443-269f", ()),
    "cpu-real": ("cpu-real", "20261201-041509-cbe4", ()),
}
#: history folders (their store is in the folder: plain or xz-compressed)
HISTORIES = ("h200/history", "h200/history-budget", "history-cpu")

#: sections of metrics these runs predate (the latency metrics of the registry, issue 42): they may be added
NEW_SECTIONS = ("Latency",)
_GENERATED = re.compile(r"^Generated \d{4}-\d\d-\d\d \d\d:\d\d UTC")


def _copy_store(folder: Path, into: Path) -> Path:
    into.mkdir(parents=True, exist_ok=True)
    db = into / "llamaforge.sqlite"
    if (folder / "llamaforge.sqlite").is_file():
        shutil.copyfile(folder / "llamaforge.sqlite", db)
    else:
        with lzma.open(folder / "llamaforge.sqlite.xz") as src, open(db, "wb") as out:
            shutil.copyfileobj(src, out)
    return db


def _lines(path: Path, *, without: tuple[str, ...] = ()) -> list[str]:
    """The report's lines but its generation time, and without the sections titled ``without``."""
    out, skip = [], False
    for ln in path.read_text(encoding="utf-8").splitlines():
        if ln.startswith("## "):
            skip = ln[3:].strip() in without
        if not skip and not _GENERATED.match(ln):
            out.append(ln)
    return out


def _same(committed: Path, rendered: Path) -> None:
    # a report committed before a section existed has none: the new section is left out of both sides
    new = tuple(t for t in NEW_SECTIONS if f"## {t}" not in committed.read_text(encoding="utf-8"))
    want = _lines(committed)
    got = _lines(rendered, without=new)
    if want != got:
        diff = "\n".join(list(difflib.unified_diff(want, got, str(committed), "re-rendered", lineterm="", n=1))[:60])
        pytest.fail(f"{committed} no longer re-renders as committed:\n{diff}")


@pytest.mark.parametrize("folder", sorted(SWEEPS))
def test_a_committed_sweep_report_re_renders_unchanged(folder, tmp_path, monkeypatch):
    from llamaforge.report import write_report

    store_dir, run, others = SWEEPS[folder]
    db = _copy_store(RESULTS / store_dir, tmp_path / "store")
    monkeypatch.setenv("LLAMAFORGE_RESULTS", str(db.parent))
    with Store(db) as store:
        rp = write_report(store, run, tmp_path / "out", sessions=others)
    _same(RESULTS / folder / "report.md", rp.md)


@pytest.mark.parametrize("folder", HISTORIES)
def test_a_committed_history_report_re_renders_unchanged(folder, tmp_path, monkeypatch):
    from llamaforge.history.load import Filter, selected_history
    from llamaforge.history.site import publish

    db = _copy_store(RESULTS / folder, tmp_path / "store")
    monkeypatch.setenv("LLAMAFORGE_RESULTS", str(db.parent))
    title = (RESULTS / folder / "report.md").read_text(encoding="utf-8").splitlines()[0].removeprefix("# ")
    with Store(db) as store:
        publish(selected_history(store, Filter()), tmp_path / "site", title=title)
    _same(RESULTS / folder / "report.md", tmp_path / "site" / "report.md")
