"""A report from a real stored sweep (CPU + Vulkan on lavapipe), rendered in headless Chromium.

Uses the session fixture ``real_sweep_run`` (tests/conftest.py) → (store path, run id). The
screenshot and the report are kept under test-artifacts/report-real/ for a human to look at.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from chromium_render import CHROMIUM, render_in_chromium
from llamaforge.report import build_report, write_report
from llamaforge.store import Store

pytestmark = pytest.mark.slow

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "report-real"


@pytest.fixture
def real_report(real_sweep_run, tmp_path):
    store_path, run_id = real_sweep_run
    if ARTIFACTS.exists():
        shutil.rmtree(ARTIFACTS)
    with Store(Path(store_path)) as store:
        rp = write_report(store, run_id, ARTIFACTS)
        data, sections = build_report(store, run_id, tmp_path / "again")
        points = store.points(run_id)
    return rp, data, sections, points


def test_real_report_tables_match_the_stored_points(real_report):
    rp, data, sections, points = real_report
    backends = {s.backend.lower() for s in data.series}
    assert {"cpu", "vulkan"} <= backends
    rows = [d for s in sections if s.title.startswith("Points:") for t in s.tables for d in t.data]
    assert len(rows) == len(points)
    by_key = {(r.series, r.ncmoe): r for r in data.all_rows}
    for d in rows:
        r = by_key[(d["series"], d["ncmoe"])]
        assert r.point is not None
        assert d["n_ctx"] == r.point.n_ctx
        measured = r.point.measured("tg_tps")
        if d["tg"] is not None:
            groups = [g for g in r.point.launch_groups("tg_tps") if g]
            assert d["tg"]["n_requests"] == len(measured) and d["tg"]["k"] == len(groups)
            # the centre is the geometric mean of the start medians (the judge's estimate)
            centre = float(np.exp(np.mean(np.log([np.median(g) for g in groups]))))
            assert d["tg"]["centre"] == pytest.approx(centre)
    md = rp.md.read_text()
    for p in points:
        if p.command:
            assert " ".join(p.command[:1]) in md
    if len(data.series) > 1 and any(r.ok for r in data.all_rows):
        assert "| scenario | ratio |" in md or "Comparison between backends absent" in md


def test_real_report_renders_in_chromium(real_report, tmp_path):
    if not Path(CHROMIUM).exists():
        pytest.skip("chromium is not installed")
    rp, data, sections, _ = real_report
    shot = ARTIFACTS / "screenshot.png"
    dom = render_in_chromium(rp.html, tmp_path / "profile", shot)
    n_tables = sum(len(s.tables) for s in sections)
    assert dom.count("<table>") == n_tables
    imgs = re.findall(r'<img [^>]*src="data:image/png;base64,[A-Za-z0-9+/=]{1000,}"', dom)
    assert len(imgs) == len(rp.pngs) >= 4
    px = np.asarray(Image.open(shot).convert("L"), dtype=float)
    assert px.var() > 100, "screenshot looks blank"
    for png in rp.pngs:
        img = np.asarray(Image.open(png).convert("L"), dtype=float)
        assert img.var() > 10, f"{png.name} looks blank"


def test_real_report_of_a_hostile_run_name_and_presigned_model_url_stays_inert(real_sweep_run, tmp_path):
    """The real run, copied, renamed ``<script>…`` and given a presigned model URL (as a store written
    before redaction would hold it): report.md and report.html show both as text, without the secret."""
    import json

    from markdown_it import MarkdownIt

    store_path, run_id = real_sweep_run
    copy = tmp_path / "copy.sqlite"
    with Store(Path(store_path)) as src:
        src.db.execute("VACUUM INTO ?", (str(copy),))
    with Store(copy) as store:
        plan = store.get_run(run_id).plan.to_json()
        plan["model"]["ref"] = "https://cdn.example/m.gguf?X-Amz-Signature=sig_secret"
        store.db.execute("UPDATE runs SET name=?, plan_json=? WHERE id=?",
                         ("<script>alert(1)</script>", json.dumps(plan), run_id))
        rp = write_report(store, run_id, tmp_path / "out")
    md, html = rp.md.read_text(), rp.html.read_text()
    rendered = MarkdownIt("commonmark", {"html": True}).enable("table").render(md)
    assert "alert(1)" in md and "<script" not in rendered and "<script>alert" not in html
    assert "sig_secret" not in md + html and "cdn.example/m.gguf?REDACTED" in md
