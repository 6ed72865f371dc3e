"""Render an HTML file in headless Chromium (Debian's `chromium`): a screenshot and the DOM it built.
Shared by the report tests (unit: a fake store; integration: a real sweep)."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

from llamaforge.proc import run

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
# flags that keep Chromium off this machine's closed network and its sandbox (we run as root)
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def have_chromium() -> bool:
    return Path(CHROMIUM).exists()


def render_in_chromium(page: Path, profile: Path, shot: Path, timeout: float = 180) -> str:
    """Screenshot ``page`` into ``shot`` and return its DOM as Chromium built it."""
    url = page.resolve().as_uri()
    common = [CHROMIUM, *FLAGS, f"--user-data-dir={profile}", "--window-size=1400,3000"]
    res = run([*common, f"--screenshot={shot}", url], timeout=timeout)
    assert res.returncode == 0 and shot.is_file(), res.output[-2000:]
    res = run([*common, "--dump-dom", url], timeout=timeout)
    assert res.returncode == 0, res.output[-2000:]
    m = re.search(r"<html.*</html>", res.output, re.S)
    assert m, res.output[-2000:]
    return m.group(0)
