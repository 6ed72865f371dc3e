"""How the report writes numbers and values in its cells: counts, MiB, speeds with their interval, the
judge's ratios, a first line of free text, any stored value, and a key/value table of a dict."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from ..judge import DIFFERS, Judgement
from ..judge.sequential import UNRESOLVED
from ..judge.wording import differs_unresolved
from .data import ReportData, Row
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


def fmt_ratio(j: Judgement | None, num: str = "B", den: str = "A") -> str:
    """``1.66× [1.35, 2.01] differs`` (≥ 3 starts a side), ``1.66× (starts 1.15–2.00) inconclusive`` or, far
    from 1, ``CPU 115× faster [80, 161] differs`` (``num``/``den``: the names of the judgement's B and A)."""
    return "–" if j is None else j.fmt(num, den)


def unresolved_k(rows: Sequence[Row]) -> int | None:
    """The K at which the first of ``rows`` that ``--launches auto`` left unresolved stopped (``None``: none)."""
    for r in rows:
        st = (r.point.detail.sequential if r.point is not None else None) or {}
        if st.get("status") == UNRESOLVED and isinstance(st.get("k"), int):
            return st["k"]
    return None


def precision_of(data: ReportData) -> float:
    """The run's ``--precision`` (``--launches auto``), 5 % where the plan does not say."""
    return float((data.plan.sequential or {}).get("precision", 0.05))


def fmt_judged(j: Judgement | None, num: str, den: str, rows: Sequence[Row], precision: float) -> str:
    """:func:`fmt_ratio`; a verdict "differs" between points that stopped unresolved says both in one sentence:
    ``CPU 115× faster [80, 161]: differs (CPU faster at least 80×); not resolved to ±5 % at K=4``."""
    k = unresolved_k(rows)
    if j is None or j.verdict != DIFFERS or k is None:
        return fmt_ratio(j, num, den)
    return f"{j.ratio_text(num, den)}: " + differs_unresolved(j.ratio, j.low, j.high, k=k, precision=precision,
                                                               num=num, den=den)


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
