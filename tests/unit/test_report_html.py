"""The HTML report renders in a real headless Chromium: tables and inline images in the DOM, a
non-blank screenshot (kept under test-artifacts/). Skipped where Chromium is not installed."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import numpy as np
import pytest
import report_fake
from PIL import Image

from llamaforge.proc import run
from llamaforge.report import write_report

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]

pytestmark = pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="chromium is not installed")


def render_in_chromium(page: Path, profile: Path, shot: Path) -> str:
    """Screenshot ``page`` into ``shot`` and return its DOM as Chromium built it."""
    url = page.resolve().as_uri()
    common = [CHROMIUM, *FLAGS, f"--user-data-dir={profile}", "--window-size=1400,3000"]
    res = run([*common, f"--screenshot={shot}", url], timeout=120)
    assert res.returncode == 0 and shot.is_file(), res.output[-2000:]
    res = run([*common, "--dump-dom", url], timeout=120)
    assert res.returncode == 0, res.output[-2000:]
    m = re.search(r"<html.*</html>", res.output, re.S)
    assert m, res.output[-2000:]
    return m.group(0)


def test_fake_report_renders_in_chromium_with_tables_and_images(tmp_path):
    store, run_id = report_fake.build(tmp_path)
    rp = write_report(store, run_id, tmp_path / "out")
    ARTIFACTS.mkdir(exist_ok=True)
    shot = ARTIFACTS / "report-fake.png"
    dom = render_in_chromium(rp.html, tmp_path / "profile", shot)
    assert dom.count("<table>") >= 8
    assert len(re.findall(r'<img [^>]*src="data:image/png;base64,[A-Za-z0-9+/=]{1000,}"', dom)) == len(rp.pngs) == 4
    assert "Anomalies" in dom and "Vulkan/CPU" in dom
    px = np.asarray(Image.open(shot).convert("L"), dtype=float)
    assert px.shape == (3000, 1400)
    assert px.var() > 100, "screenshot looks blank"
    assert px[:300].min() < 100  # the header text is drawn in dark ink at the top
