"""The HTML report renders in a real headless Chromium: tables and inline images in the DOM, a
non-blank screenshot (kept under test-artifacts/). Skipped where Chromium is not installed."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
import run_fake
from PIL import Image

from chromium_render import CHROMIUM, render_in_chromium
from llamaforge.report import write_report

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"

pytestmark = pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="chromium is not installed")


def test_fake_report_renders_in_chromium_with_tables_and_images(tmp_path):
    store, run_id = run_fake.build(tmp_path)
    rp = write_report(store, run_id, tmp_path / "out")
    ARTIFACTS.mkdir(exist_ok=True)
    shot = ARTIFACTS / "report-fake.png"
    dom = render_in_chromium(rp.html, tmp_path / "profile", shot)
    assert dom.count("<table>") >= 8
    assert len(re.findall(r'<img [^>]*src="data:image/png;base64,[A-Za-z0-9+/=]{1000,}"', dom)) == len(rp.pngs) == 6
    assert "Anomalies" in dom and "Vulkan/CPU" in dom
    px = np.asarray(Image.open(shot).convert("L"), dtype=float)
    assert px.shape == (3000, 1400)
    assert px.var() > 100, "screenshot looks blank"
    assert px[:300].min() < 100  # the header text is drawn in dark ink at the top
