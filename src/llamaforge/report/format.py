"""How the report writes numbers and values in its cells: counts, MiB, speeds with their interval, the
judge's ratios, a first line of free text, any stored value, and a key/value table of a dict."""

from __future__ import annotations

import json
from typing import Any

from ..judge import Judgement
from .data import Row
from .sections import Table


def fmt_int(x: float | int | None) -> str:
    return "–" if x is None else f"{int(round(x)):,}"


def fmt_mib(x: float | None) -> str:
    return "–" if x is None else f"{x:,.0f}"


def fmt_speed(r: Row | None, metric: str) -> str:
    if r is None:
        return "–"
    e = r.estimate(metric)
    return "–" if e is None else e.fmt(1)


def fmt_ratio(j: Judgement | None) -> str:
    """``1.66× [1.35, 2.01] differs`` (≥ 3 starts a side) or ``1.66× (starts 1.15–2.00) inconclusive``."""
    return "–" if j is None else j.fmt()


def first_line(text: str | None, width: int = 120) -> str:
    if not text:
        return ""
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line if len(line) <= width else line[: width - 1] + "…"


def fmt_value(v: Any) -> str:
    if isinstance(v, dict | list):
        return json.dumps(v, sort_keys=True, default=str)
    if isinstance(v, float):
        return f"{v:,.4g}" if abs(v) < 1e6 else f"{v:,.0f}"
    if isinstance(v, int) and not isinstance(v, bool):
        return f"{v:,}"
    return str(v)


def kv_table(d: dict, title: str) -> Table:
    t = Table(["key", "value"], title=title)
    for k in sorted(d):
        t.rows.append([str(k), fmt_value(d[k])])
        t.data.append({"key": k, "value": d[k]})
    return t
