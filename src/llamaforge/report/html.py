"""One self-contained HTML file: Jinja2 template, inline CSS, plots as base64 PNG data URIs.

No external resources (fonts, scripts, stylesheets): the file opens from disk with no server and
can be mailed or attached to an issue as is.
"""

from __future__ import annotations

import base64
import time
from pathlib import Path

from jinja2 import Environment, FileSystemLoader, select_autoescape
from markupsafe import Markup

from .. import __version__
from ..files import write_text_atomic
from ..visible import visible
from .data import ReportData
from .sections import Section

TEMPLATES = Path(__file__).parent / "templates"


def _shown(value: object) -> object:
    """Every ``{{ value }}``: control characters made visible (autoescape keeps ``ESC`` as it is)."""
    if isinstance(value, Markup):
        return Markup(visible(str(value)))
    return visible(value) if isinstance(value, str) else value


def _env() -> Environment:
    return Environment(loader=FileSystemLoader(str(TEMPLATES)), autoescape=select_autoescape(["html", "j2"]),
                       trim_blocks=True, lstrip_blocks=True, finalize=_shown)


def render(data: ReportData, sections: list[Section]) -> str:
    images = {p.name: base64.b64encode(Path(p.path).read_bytes()).decode("ascii")
              for s in sections for p in s.plots}
    rows = data.all_rows
    return _env().get_template("report.html.j2").render(
        run=data.run, model_ref=data.model_ref, sections=sections, images=images, version=__version__,
        created=time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(data.run.created)),
        n_points=len(rows), n_failed=sum(not r.ok for r in rows), n_series=len(data.series))


def write(data: ReportData, sections: list[Section], path: Path) -> Path:
    write_text_atomic(path, render(data, sections))
    return path
