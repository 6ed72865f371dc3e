"""llama-bench's output: the result objects of ``-o jsonl`` (or ``-o json``), llama-bench's own test
names (``pp512``, ``tg128``, ``pp512 @ d4096``) and the per-repeat rates of one result, whatever
version of llama-bench wrote it (older ones lack ``samples_ts`` or write only averages).

The engine that runs llama-bench for a point and turns these into stored samples is
:mod:`llamaforge.bench.engines.llamabench`; the smoke run reads its one result from here too.
"""

from __future__ import annotations

import json


def int_field(obj: dict, key: str) -> int:
    """An integer field that older llama-bench versions may lack (or write as null)."""
    try:
        return int(obj.get(key) or 0)
    except (TypeError, ValueError):
        return 0


def test_name(obj: dict) -> str:
    """llama-bench's own naming: ``pp512``, ``tg128``, ``pp512 @ d4096``."""
    n_prompt, n_gen, depth = int_field(obj, "n_prompt"), int_field(obj, "n_gen"), int_field(obj, "n_depth")
    if n_prompt and n_gen:
        name = f"pp{n_prompt}+tg{n_gen}"
    elif n_prompt:
        name = f"pp{n_prompt}"
    else:
        name = f"tg{n_gen}"
    return name + (f" @ d{depth}" if depth else "")


_RESULT_KEYS = ("samples_ts", "samples_ns", "avg_ts", "avg_ns")


def parse_results(text: str) -> list[dict]:
    """The result objects in llama-bench ``-o jsonl`` (or ``-o json``) output: every object with
    at least one timing field (``samples_ts``, or what older versions wrote: ``samples_ns``,
    ``avg_ts``, ``avg_ns``)."""
    text = text.strip()
    if text.startswith("["):
        try:
            return [o for o in json.loads(text) if isinstance(o, dict) and any(k in o for k in _RESULT_KEYS)]
        except ValueError:
            pass
    out = []
    for line in text.splitlines():
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            obj = json.loads(line)
        except ValueError:
            continue
        if isinstance(obj, dict) and any(k in obj for k in _RESULT_KEYS):
            out.append(obj)
    return out


def rates(obj: dict) -> tuple[list[float], list[float | None], str]:
    """Per-repeat tokens/s and ns of one result, and where they came from.

    ``samples_ts`` when present; else computed from ``samples_ns`` the way llama-bench does
    (``1e9 * (n_prompt + n_gen) / ns``); else the single average (``avg_ts`` or from ``avg_ns``),
    marked as such in the sample — older llama-bench versions do not print every repeat."""
    n_tokens = int_field(obj, "n_prompt") + int_field(obj, "n_gen")
    ns = [float(x) for x in (obj.get("samples_ns") or []) if x]
    ts = [float(x) for x in (obj.get("samples_ts") or [])]
    if ts:
        return ts, [*ns, *([None] * (len(ts) - len(ns)))][:len(ts)], "samples_ts"
    if ns and n_tokens:
        return [1e9 * n_tokens / x for x in ns], list(ns), "samples_ns"
    if obj.get("avg_ts"):
        avg_ns = float(obj["avg_ns"]) if obj.get("avg_ns") else None
        return [float(obj["avg_ts"])], [avg_ns], "avg_ts"
    if obj.get("avg_ns") and n_tokens:
        return [1e9 * n_tokens / float(obj["avg_ns"])], [float(obj["avg_ns"])], "avg_ns"
    return [], [], "none"
