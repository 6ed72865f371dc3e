"""-D flags a llama.cpp source tree needs beyond its backend's: read from the tree's own CMakeLists.txt."""

from __future__ import annotations

import re
from pathlib import Path

#: ``option(LLAMA_BUILD_UI "…" ON)``: a tree whose web UI is built by default
_UI_ON = re.compile(r'option\(\s*LLAMA_BUILD_UI\s+"[^"]*"\s+ON\s*\)')


def source_flags(src: Path) -> dict[str, str]:
    """-D flags a source tree needs beyond the common ones: ``LLAMA_BUILD_UI=OFF`` where its CMakeLists.txt
    defaults it ON. Such commits (lcpp-0.3.33's 78d2f5246) run ``npm install`` (~1,000 packages from the npm
    registry, install scripts included) and a vite build inside the build when npm is on the PATH: code from
    the network, and 133 s of a 2-core cold build; a benchmark needs no web UI. Only where the default is ON,
    so the keys of every other commit's builds stay what they were."""
    try:
        text = (Path(src) / "CMakeLists.txt").read_text(errors="replace")
    except OSError:
        return {}
    return {"LLAMA_BUILD_UI": "OFF"} if _UI_ON.search(text) else {}
