"""``history.publish OUT``: the history as a static site that opens from a file or any web server.

* ``index.html`` — every series grouped by model and point (latest value with its interval, a sparkline),
  the latest steps across all series, links to the series pages and the ratio page;
* ``series/<slug>.html`` — one interactive plot per series (per-start dots, the line through the level
  centres, the interval band, the steps marked) and, under it, the commits and the steps as tables
  (plot hover cannot be clicked; the tables hold the links);
* ``ratios.html`` — each backend pair's ratio per commit with its interval;
* ``history.json`` — :meth:`History.to_dict` (``History.from_dict`` reads it back);
* ``assets/plotly.min.js`` (plotly.js from the ``plotly`` wheel: no CDN, no network) and ``assets/site.js``;
* ``.llamaforge-history-site`` — the marker that makes a folder ours to replace.

Pure: it reads the model objects and asks the judge; nothing is measured. Every text from data (subjects,
labels, model and machine names) is untrusted: Jinja autoescapes it, the plots get it HTML-escaped (plotly
renders a subset of HTML in its text), the page data is JSON with ``<``, ``>`` and ``&`` written as
``\\u003c``…, so no ``</script>`` can close its block, and only ``http(s)://`` URLs become links.
"""

from __future__ import annotations

import html
import json
import math
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

from markupsafe import Markup
from plotly.offline import get_plotlyjs

from .. import __version__
from ..errors import ConfigError
from ..files import write_text_atomic
from ..judge import Estimate, Starts, estimate
from ..judge.estimate import signed_pct
from ..judge.verdict import MIN_OWN_STARTS
from ..judge.wording import ratio_parts
from ..visible import html_templates, visible
from .markdown import render as render_markdown
from .model import METRICS, History, Level, Metric, RatioSeries, Series, Step

TEMPLATES = Path(__file__).parent / "templates"
MARKER = ".llamaforge-history-site"
TITLE = "llama.cpp performance history"
#: how many of the latest steps (over all series) the index lists
LATEST_STEPS = 20
#: the width (in commits) over which a commit's start dots are spread
JITTER = 0.24
#: hover text is cut here (the table under the plot holds the whole subject)
HOVER_CHARS = 90
MINUS = "\u2212"


@dataclass(frozen=True)
class SiteResult:
    out: Path
    pages: list[Path]              # the HTML pages written: index, one per series, ratios
    n_series: int


# -- text, numbers and links -------------------------------------------------------------------------

def _env() -> Any:
    return html_templates(TEMPLATES)


def safe_url(url: object) -> str | None:
    """``url`` when it is an ``http(s)://`` address with a host and nothing odd in it, else ``None``
    (a ``javascript:`` or ``data:`` URL from hostile data never becomes a link)."""
    if not isinstance(url, str) or not url or re.search(r"[\x00-\x20\x7f-\x9f\"'<>\\`]", url):
        return None
    try:
        parts = urlsplit(url)
    except ValueError:
        return None
    return url if parts.scheme.lower() in ("http", "https") and parts.netloc else None


def _plot_text(value: object, limit: int | None = None) -> str:
    """Text for a plotly label or hover: one line, cut at ``limit``, HTML-escaped (plotly renders tags)."""
    text = visible("" if value is None else value, one_line=True)
    if limit and len(text) > limit:
        text = text[:limit - 1] + "…"
    return html.escape(text, quote=True)


def page_json(data: Any) -> Markup:
    """``data`` as JSON for a ``<script type="application/json">`` block: non-finite numbers as ``null``,
    and ``<``, ``>``, ``&`` as ``\\u003c``…, so no ``</script>`` or ``<!--`` can appear in the block."""
    text = json.dumps(_finite(data), ensure_ascii=True, allow_nan=False, separators=(",", ":"))
    text = text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
    assert "</" not in text
    return Markup(text)


def _finite(x: Any) -> Any:
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if isinstance(x, dict):
        return {str(k): _finite(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [_finite(v) for v in x]
    return x


def _num(x: float | None) -> str:
    if x is None or not math.isfinite(x):
        return "–"
    return f"{x:,.0f}" if abs(x) >= 10_000 else f"{x:,.1f}" if abs(x) >= 10 else f"{x:,.3g}"


def _pct(ratio: float) -> str:
    return signed_pct(ratio).replace("-", MINUS) if math.isfinite(ratio) else "–"


def _date(epoch: float | None, fmt: str = "%Y-%m-%d %H:%M UTC") -> str:
    return time.strftime(fmt, time.gmtime(epoch)) if epoch is not None and math.isfinite(epoch) else ""


def metric_of(name: str) -> Metric:
    """The metric a series measures (one this version does not know is shown by its name, higher better)."""
    return METRICS.get(name) or Metric(name, name, "", True)


def _estimate(level: Level) -> Estimate | None:
    """A measured commit's estimate (``None`` for a failed one or one without a usable start)."""
    return estimate(level.starts_of()) if level.status == "ok" and level.starts_of().k else None


def _interval(est: Estimate) -> dict[str, str]:
    """The interval as words: a CI only where K allows one (``range`` at K = 2, ``single start`` at K = 1)."""
    if est.kind == "ci":
        return {"text": est.interval_text(), "label": "95 % CI", "hover": f"95 % CI {est.interval_text()}"}
    if est.kind == "range":
        return {"text": est.interval_text(), "label": f"range of {est.k} starts",
                "hover": f"range of {est.k} starts {est.interval_text()} (not a CI)"}
    return {"text": "", "label": "single start", "hover": "single start: spread unknown (no interval)"}


# -- what the pages show ----------------------------------------------------------------------------

def page_names(series: list[Series]) -> list[str]:
    """Each series' page name: its key's slug in ASCII, made unique (also on a case-blind filesystem)."""
    out: list[str] = []
    seen: set[str] = set()
    for s in series:
        base = re.sub(r"[^A-Za-z0-9._-]", "_", s.key.slug).strip("._")[:150] or "series"
        name, n = base, 2
        while name.lower() in seen:
            name, n = f"{base}-{n}", n + 1
        seen.add(name.lower())
        out.append(name)
    return out


def _level_view(i: int, lv: Level) -> dict[str, Any]:
    est = _estimate(lv)
    view = {"i": i, "order": lv.order, "epoch": lv.date, "sha": lv.sha, "short": lv.short,
            "label": lv.label or lv.short, "url": safe_url(lv.url), "date": _date(lv.date),
            "subject": lv.subject or "", "status": lv.status, "note": lv.note or "", "est": est, "centre": "", "interval": "",
            "interval_label": "", "hover_interval": "", "shape": "", "starts": []}
    if est is not None:
        iv = _interval(est)
        view.update(centre=_num(est.centre), interval=iv["text"], interval_label=iv["label"],
                    hover_interval=iv["hover"], shape=est.shape, starts=list(Starts.of(lv.starts).centres))
    elif lv.status == "ok":
        view.update(status="no data")
    return view


def _step_view(st: Step, s: Series, where: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """A step as the tables and the plot show it: signed percent with its interval, the two measured
    commits, the culprit (a link only to an http(s) address), the bisect's status."""
    small = min(st.k_before, st.k_after) < MIN_OWN_STARTS
    worse = st.ratio != 1 and (st.ratio < 1) == metric_of(s.key.metric).higher_is_better
    before, after = where.get(st.before), where.get(st.after)
    return {
        "size": f"{_pct(st.ratio)} %", "interval": f"[{_pct(st.low)}, {_pct(st.high)}]",
        "interval_label": "interval under an assumed spread (< 3 starts a side)" if small else "95 % CI",
        "text": f"{_pct(st.ratio)} % [{_pct(st.low)}, {_pct(st.high)}]" + (" refuted" if st.status == "refuted" else ""),
        "direction": "regression" if worse else "improvement" if st.ratio != 1 else "–", "worse": worse,
        "before": before or {"label": st.before[:9], "sha": st.before, "url": None},
        "after": after or {"label": st.after[:9], "sha": st.after, "url": None},
        "x": (before["i"] + after["i"]) / 2 if before and after else None,
        "between": st.between, "p": f"{st.p:.2g}", "p_adjusted": f"{st.p_adjusted:.2g}", "adjusted": st.adjusted,
        "k_before": st.k_before, "k_after": st.k_after,
        "culprit": st.culprit, "culprit_short": (st.culprit or "")[:9], "culprit_url": safe_url(st.culprit_url),
        "culprit_subject": st.culprit_subject or "",
        "bisect_status": st.status + (f" (bisect: {st.bisect_status})" if st.bisect_status else "")
        + (f"; re-measured interleaved: {_pct(st.remeasured.get('ratio') or 1.0)} % {st.remeasured.get('verdict')}"
           if st.remeasured else "")
        + (f"; {(st.confirmation or {}).get('status')}: {st.confirmation['line']}"
           if (st.confirmation or {}).get("line") else ""),
        "bisect_note": st.bisect_note or "", "bisect_run": st.bisect_run or "",
    }


def _series_view(s: Series, name: str) -> dict[str, Any]:
    levels = [_level_view(i, lv) for i, lv in enumerate(s.levels)]
    where = {lv["sha"]: lv for lv in levels}
    steps = [_step_view(st, s, where) for st in s.steps]
    measured = [lv for lv in levels if lv["est"] is not None]
    latest = measured[-1] if measured else None
    m = metric_of(s.key.metric)
    return {"key": s.key, "name": name, "href": f"series/{quote(name)}.html", "title": s.key.text(),
            "metric": m, "direction": "higher is better" if m.higher_is_better else "lower is better",
            "levels": levels, "measured": measured, "steps": steps, "latest": latest,
            "n_starts": sum(len(lv["starts"]) for lv in measured), "min_effect": s.min_effect,
            "n_failed": sum(lv["status"] != "ok" for lv in levels)}


# -- plots (plotly figure specs: the page's JSON, drawn by assets/site.js) --------------------------

_CONFIG = {"displaylogo": False, "responsive": True, "modeBarButtonsToRemove": ["lasso2d", "select2d"]}
_STATIC = {"staticPlot": True, "displayModeBar": False}
_BLUE, _BAND, _RED, _GREEN, _GREY = "#2c6fbb", "rgba(44,111,187,0.16)", "#c0392b", "#1e8449", "#8a93a3"


def _hover_level(lv: dict[str, Any], unit: str) -> str:
    lines = [f"<b>{_plot_text(lv['label'])}</b> {_plot_text(lv['short'])}", _plot_text(lv["date"]),
             _plot_text(lv["subject"], HOVER_CHARS)]
    if lv["est"] is not None:
        lines += [f"{lv['centre']} {_plot_text(unit)} · {_plot_text(lv['hover_interval'])}",
                  f"{lv['shape']} (starts × requests)"]
    else:
        lines.append(_plot_text(f"{lv['status']}: {lv['note']}" if lv["note"] else lv["status"], HOVER_CHARS))
    if lv["url"]:
        lines.append("click: the commit's page")
    return "<br>".join(lines)


def _start_offsets(k: int) -> list[float]:
    """A commit's start dots spread evenly over :data:`JITTER` (deterministic: the page does not move)."""
    return [0.0] if k == 1 else [JITTER * (j / (k - 1) - 0.5) for j in range(k)]


def _series_traces(v: dict[str, Any]) -> list[dict[str, Any]]:
    ok, unit = v["measured"], v["metric"].unit
    xs = [lv["i"] for lv in ok]
    hover = [_hover_level(lv, unit) for lv in ok]
    dots_x, dots_y, dots_hover, dots_url = [], [], [], []
    for lv, h in zip(ok, hover, strict=True):
        k = len(lv["starts"])
        for j, (dx, y) in enumerate(zip(_start_offsets(k), lv["starts"], strict=True)):
            dots_x.append(lv["i"] + dx)
            dots_y.append(y)
            dots_hover.append(f"start {j + 1} of {k}: {_num(y)} {_plot_text(unit)}<br>{h}")
            dots_url.append(lv["url"] or "")
    band = dict(x=xs, type="scatter", mode="lines", line={"width": 0}, hoverinfo="skip", showlegend=False)
    traces = [
        {**band, "uid": "band-low", "y": [lv["est"].low for lv in ok]},
        {**band, "uid": "band-high", "y": [lv["est"].high for lv in ok], "fill": "tonexty", "fillcolor": _BAND,
         "name": "interval (95 % CI at K ≥ 3, range at K = 2)", "showlegend": True},
        {"uid": "median", "type": "scatter", "mode": "lines+markers", "name": "level (centre of the starts)",
         "x": xs, "y": [lv["est"].centre for lv in ok], "line": {"color": _BLUE, "width": 2},
         "marker": {"size": 7, "color": _BLUE}, "hovertext": hover, "hoverinfo": "text",
         "customdata": [lv["url"] or "" for lv in ok]},
        {"uid": "starts", "type": "scatter", "mode": "markers", "name": "one server start",
         "x": dots_x, "y": dots_y, "marker": {"size": 6, "color": "rgba(29,35,48,0.55)"},
         "hovertext": dots_hover, "hoverinfo": "text", "customdata": dots_url},
    ]
    failed = [lv for lv in v["levels"] if lv["est"] is None]
    if failed and ok:
        floor = min(min(lv["starts"]) for lv in ok)
        traces.append({"uid": "failed", "type": "scatter", "mode": "markers", "name": "failed / not measured",
                       "x": [lv["i"] for lv in failed], "y": [floor] * len(failed),
                       "marker": {"symbol": "x", "size": 9, "color": _RED},
                       "hovertext": [_hover_level(lv, unit) for lv in failed], "hoverinfo": "text",
                       "customdata": [lv["url"] or "" for lv in failed]})
    return traces


def _step_marks(steps: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """A dotted vertical line between a step's two measured commits, with its size as the annotation."""
    shapes, notes = [], []
    for n, st in enumerate(s for s in steps if s["x"] is not None):
        colour = _RED if st["worse"] else _GREEN
        shapes.append({"type": "line", "xref": "x", "yref": "paper", "x0": st["x"], "x1": st["x"], "y0": 0,
                       "y1": 1, "line": {"color": colour, "width": 2, "dash": "dot"}})
        notes.append({"x": st["x"], "xref": "x", "yref": "paper", "y": 1.0 - 0.07 * (n % 3), "yanchor": "bottom",
                      "showarrow": False, "text": _plot_text(st["text"]), "font": {"color": colour, "size": 12},
                      "bgcolor": "rgba(255,255,255,0.85)"})
    return shapes, notes


def _axis_labels(levels: list[dict[str, Any]]) -> dict[str, Any]:
    return {"tickmode": "array", "tickvals": [lv["i"] for lv in levels],
            "ticktext": [_plot_text(lv["label"], 24) for lv in levels], "range": [-0.5, len(levels) - 0.5],
            "tickangle": -40 if len(levels) > 8 else 0, "zeroline": False}


def series_figure(v: dict[str, Any]) -> dict[str, Any]:
    m = v["metric"]
    shapes, notes = _step_marks(v["steps"])
    layout = {"height": 460, "margin": {"l": 70, "r": 20, "t": 50, "b": 90}, "hovermode": "closest",
              "xaxis": {**_axis_labels(v["levels"]), "title": {"text": "commit (first-parent order)"}},
              "yaxis": {"title": {"text": _plot_text(f"{m.label} ({m.unit}) · {v['direction']}")}},
              "legend": {"orientation": "h", "y": -0.28}, "shapes": shapes, "annotations": notes}
    return {"id": "plot", "data": _series_traces(v), "layout": layout, "config": _CONFIG, "clickable": True}


def sparkline(v: dict[str, Any], n: int) -> dict[str, Any]:
    """A small static line of the levels; its height spans at least ± the minimum effect around the median
    level, so noise well under it does not look like a cliff."""
    ok = v["measured"]
    ys = sorted(lv["est"].centre for lv in ok) or [1.0]
    mid, pad = ys[len(ys) // 2], max(v["min_effect"], 0.01)
    hidden = {"visible": False, "fixedrange": True}
    yaxis = {**hidden, "range": [min(ys[0], mid * (1 - pad)), max(ys[-1], mid * (1 + pad))]}
    trace = {"type": "scatter", "mode": "lines", "x": [lv["i"] for lv in ok],
             "y": [lv["est"].centre for lv in ok], "line": {"color": _BLUE, "width": 1.5}, "hoverinfo": "skip"}
    layout = {"width": 170, "height": 42, "margin": {"l": 2, "r": 2, "t": 2, "b": 2}, "showlegend": False,
              "xaxis": {**hidden, "range": [-0.5, len(v["levels"]) - 0.5]}, "yaxis": yaxis,
              "paper_bgcolor": "rgba(0,0,0,0)", "plot_bgcolor": "rgba(0,0,0,0)"}
    return {"id": f"spark-{n}", "data": [trace], "layout": layout, "config": _STATIC, "clickable": False}


def _ratio_view(r: RatioSeries, n: int, series: list[Series]) -> dict[str, Any]:
    commits = {lv.sha: lv for s in series if s.key in (r.a, r.b) for lv in s.levels}
    rows = []
    for i, row in enumerate(r.rows):
        lv = commits.get(row.sha)
        text, interval = ratio_parts(row.ratio, row.low, row.high, num=r.a.backend, den=r.b.backend)
        rows.append({"i": i, "sha": row.sha, "short": row.sha[:9], "label": row.label or row.sha[:9],
                     "url": safe_url(lv.url) if lv else None, "date": _date(lv.date) if lv else "",
                     "subject": lv.subject if lv else "", "ratio": row.ratio, "low": row.low, "high": row.high,
                     "text": text, "interval": interval,
                     "interval_label": row.interval, "verdict": row.verdict, "k_a": row.k_a, "k_b": row.k_b})
    m = metric_of(r.a.metric)
    title = f"{r.a.backend} / {r.b.backend} · {r.a.model} · {r.a.point} · {m.label} · {r.a.machine}"
    return {"n": n, "id": f"ratio-{n}", "a": r.a, "b": r.b, "title": title, "summary": r.summary, "rows": rows,
            "metric": m, "setup": r.a.setup}


def ratio_figure(v: dict[str, Any]) -> dict[str, Any]:
    rows = v["rows"]
    hover = [f"<b>{_plot_text(row['label'])}</b> {_plot_text(row['short'])}<br>{_plot_text(row['date'])}<br>"
             f"{_plot_text(row['subject'], HOVER_CHARS)}<br>{_plot_text(row['text'])} "
             f"{_plot_text(row['interval_label'])} {_plot_text(row['interval'])} · {_plot_text(row['verdict'])}<br>"
             f"starts: {row['k_a']} ({_plot_text(v['a'].backend)}), {row['k_b']} ({_plot_text(v['b'].backend)})"
             for row in rows]
    trace = {"uid": "ratio", "type": "scatter", "mode": "lines+markers", "name": "ratio",
             "x": [row["i"] for row in rows], "y": [row["ratio"] for row in rows],
             "error_y": {"type": "data", "symmetric": False, "array": [row["high"] - row["ratio"] for row in rows],
                         "arrayminus": [row["ratio"] - row["low"] for row in rows], "color": _BLUE},
             "marker": {"size": 8, "color": _BLUE}, "line": {"color": _BLUE}, "hovertext": hover,
             "hoverinfo": "text", "customdata": [row["url"] or "" for row in rows]}
    ys = [y for row in rows for y in (row["low"], row["high"]) if math.isfinite(y)] + [1.0]
    layout = {"height": 380, "margin": {"l": 70, "r": 20, "t": 40, "b": 90}, "hovermode": "closest",
              "showlegend": False, "xaxis": {**_axis_labels(rows), "title": {"text": "commit"}},
              "yaxis": {"title": {"text": _plot_text(f"{v['a'].backend} / {v['b'].backend}", 40)},
                        "range": [min(ys) * 0.95, max(ys) * 1.05]},
              "shapes": [{"type": "line", "xref": "paper", "x0": 0, "x1": 1, "yref": "y", "y0": 1, "y1": 1,
                          "line": {"color": _GREY, "dash": "dash", "width": 1}}]}
    return {"id": v["id"], "data": [trace], "layout": layout, "config": _CONFIG, "clickable": True}


# -- pages ------------------------------------------------------------------------------------------

def _groups(views: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The index's series grouped by model and point, each group's rows by metric, backend, machine."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for v in views:
        groups.setdefault((v["key"].model, v["key"].point), []).append(v)
    order = list(METRICS)
    return [{"model": model, "point": point,
             "rows": sorted(rows, key=lambda v: (order.index(v["key"].metric) if v["key"].metric in order
                                                 else len(order), v["key"].metric, v["key"].backend,
                                                 v["key"].machine, v["key"].setup))}
            for (model, point), rows in sorted(groups.items())]


def _latest_steps(views: list[dict[str, Any]]) -> list[dict[str, Any]]:
    def when(item: tuple[dict[str, Any], dict[str, Any]]) -> tuple[float, int]:
        after = item[1]["after"]
        return (after.get("epoch") or -math.inf, after.get("order", -1))
    items = sorted(((v, st) for v in views for st in v["steps"]), key=when, reverse=True)
    return [{"series": v, "step": st} for v, st in items[:LATEST_STEPS]]


def _common(history: History, title: str, root: str) -> dict[str, Any]:
    generated = history.generated if history.generated is not None else time.time()
    return {"site_title": title, "root": root, "generated": _date(generated), "version": __version__}


def render_pages(history: History, title: str = TITLE) -> dict[str, str]:
    """Every page's HTML by its path inside the site (``index.html``, ``series/<name>.html``, ``ratios.html``)."""
    env = _env()
    views = [_series_view(s, name) for s, name in zip(history.series, page_names(history.series), strict=True)]
    ratios = [_ratio_view(r, n, history.series) for n, r in enumerate(history.ratios)]
    spark = [sparkline(v, n) for n, v in enumerate(views)]
    for n, v in enumerate(views):
        v["spark_id"] = spark[n]["id"]
    pages = {"index.html": env.get_template("index.html.j2").render(
        **_common(history, title, ""), notes=history.notes, groups=_groups(views), n_series=len(views),
        latest_steps=_latest_steps(views), n_ratios=len(ratios), data=page_json({"plots": spark}))}
    for v in views:
        pages[f"series/{v['name']}.html"] = env.get_template("series.html.j2").render(
            **_common(history, title, "../"), s=v, data=page_json({"plots": [series_figure(v)]}))
    pages["ratios.html"] = env.get_template("ratios.html.j2").render(
        **_common(history, title, ""), ratios=ratios,
        data=page_json({"plots": [ratio_figure(r) for r in ratios if r["rows"]]}))
    return pages


def _site_or_empty(out: Path) -> bool:
    """True when ``out`` is a site an earlier publish wrote, False when it is missing or empty; refused
    in one line when it is a file or a folder with other things in it (nothing is written then)."""
    shown = visible(out, one_line=True)
    if out.exists() and not out.is_dir():
        raise ConfigError(f"history.publish: {shown} is a file, not a folder",
                          "give a new or empty folder (it is created if missing)")
    if not out.exists() or not any(out.iterdir()):
        return False
    if (out / MARKER).is_file():
        return True
    raise ConfigError(f"history.publish: {shown} is not empty and is not a history site (it has no {MARKER})",
                      "give a new or empty folder, or the folder of an earlier history.publish")


def _write_assets(out: Path) -> None:
    js = get_plotlyjs()
    plotly = out / "assets" / "plotly.min.js"
    if not plotly.is_file() or plotly.read_text(encoding="utf-8", errors="replace") != js:
        write_text_atomic(plotly, js)
    write_text_atomic(out / "assets" / "site.js", (TEMPLATES / "site.js").read_text(encoding="utf-8"))


def publish(history: History, out: Path, *, title: str = TITLE) -> SiteResult:
    """Write the site into ``out`` (new, empty, or a site written before: its pages are replaced and the
    pages of series no longer in ``history`` removed). Raises :class:`ConfigError` for any other folder."""
    out = Path(out).expanduser()
    _site_or_empty(out)
    pages = render_pages(history, title)         # everything rendered before the first byte is written
    for sub in ("assets", "series"):
        (out / sub).mkdir(parents=True, exist_ok=True)
    write_text_atomic(out / MARKER, "llamaforge history site: history.publish replaces what is in this folder\n")
    _write_assets(out)
    written = []
    for rel, text in pages.items():
        write_text_atomic(out / rel, text)
        written.append(out / rel)
    write_text_atomic(out / "history.json", json.dumps(history.to_dict(), indent=1, sort_keys=True) + "\n")
    write_text_atomic(out / "report.md", render_markdown(history, title) + "\n")
    keep = {p.name for p in written if p.parent.name == "series"}
    for stale in (out / "series").glob("*.html"):
        if stale.name not in keep and (stale.is_file() or stale.is_symlink()):
            stale.unlink()
    return SiteResult(out, written, len(history.series))
