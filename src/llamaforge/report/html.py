"""One self-contained HTML file: Jinja2 template, inline CSS, plots as base64 PNG data URIs.

No external resources (fonts, scripts, stylesheets): the file opens from disk with no server and
can be mailed or attached to an issue as is.
"""

from __future__ import annotations

import base64
import time
from pathlib import Path
from typing import Any

from .. import __version__
from ..files import write_text_atomic
from ..visible import html_templates
from .data import ReportData, failed_count
from .sections import Section

TEMPLATES = Path(__file__).parent / "templates"


def _env() -> Any:
    return html_templates(TEMPLATES)


def render(data: ReportData, sections: list[Section]) -> str:
    images = {p.name: base64.b64encode(Path(p.path).read_bytes()).decode("ascii")
              for s in sections for p in s.plots}
    rows = data.all_rows
    return _env().get_template("report.html.j2").render(
        run=data.run, model_ref=data.model_ref, sections=sections, images=images, version=__version__,
        created=time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(data.run.created)),
        n_points=len(rows), n_failed=failed_count(rows), n_series=len(data.series))


def write(data: ReportData, sections: list[Section], path: Path) -> Path:
    write_text_atomic(path, render(data, sections))
    return path
