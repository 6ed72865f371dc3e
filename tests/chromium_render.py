"""Render an HTML file in headless Chromium (Debian's `chromium`): a screenshot and the DOM it built.
Shared by the report tests (unit: a fake store; integration: a real sweep) and the history site's test
(:func:`load_in_chromium`: the DOM plus every console message the page produced)."""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass
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


#: a console message in Chromium's stderr log (``--enable-logging=stderr``). Chromium 156 writes every
#: level alike (``[pid:tid:time:INFO:CONSOLE:1] "msg", source: url (line)``: console.log, .warn, .error
#: and an uncaught exception, "Uncaught Error: …", all look the same), so every one is collected.
_CONSOLE = re.compile(r"^\[[^\]]*:CONSOLE[^\]]*\]\s*(.*)$", re.M)


@dataclass(frozen=True)
class Loaded:
    dom: str
    console: list[str]        # every console message and uncaught error, in order
    log: str                  # Chromium's whole stderr (for a failing assertion's message)


def load_in_chromium(page: Path, profile: Path, *, timeout: float = 120, budget_ms: int = 1000) -> Loaded:
    """Load ``page`` in headless Chromium, let it run ``budget_ms`` of virtual time, and return the DOM it
    built with the console messages (``--enable-logging=stderr --v=0``). A page that logs nothing and
    throws nothing has ``console == []``."""
    args = [CHROMIUM, *FLAGS, f"--user-data-dir={profile}", "--window-size=1400,2000", "--enable-logging=stderr",
            "--v=0", f"--virtual-time-budget={budget_ms}", "--dump-dom", page.resolve().as_uri()]
    res = subprocess.run(args, capture_output=True, text=True, errors="replace", timeout=timeout, check=False)
    assert res.returncode == 0, res.stderr[-2000:]
    m = re.search(r"<html.*</html>", res.stdout, re.S)
    assert m, (res.stdout + res.stderr)[-2000:]
    return Loaded(m.group(0), _CONSOLE.findall(res.stderr), res.stderr)


def trace_points(dom: str, uid: str) -> int:
    """Markers plotly drew for the scatter trace ``uid`` (its ``<g class="trace scatter trace<uid>">``)."""
    m = re.search(rf'<g class="trace scatter trace{re.escape(uid)}"(.*?)(?=<g class="trace |$)', dom, re.S)
    assert m, f"no trace {uid} in the DOM"
    return len(re.findall(r'<path class="point\b', m.group(1)))
