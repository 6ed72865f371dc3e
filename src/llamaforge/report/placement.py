"""The Placement section (``bench --place``): which layers' experts each strategy moved to the CPU, beside
the model's layer map, and each strategy judged against ``first:N`` at equal bytes moved.

Everything comes from the stored points: ``PointDetail.moved`` holds the tensors a strategy's ``-ot``
patterns select in the model (their bytes from the GGUF file) and what llama.cpp said it overrode
(``llama-fit-params -v``, read back per point). A run without placed points has no section.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from ..judge import judge
from ..judge.adjusted import controlled
from .data import ReportData, Row, Series
from .format import fmt_judged
from .sections import Section, Table


def _placed(s: Series) -> list[Row]:
    return [r for r in s.ok_rows if r.point is not None and r.point.detail.moved]


def _strategy(r: Row) -> str:
    return str((r.point.detail.moved or {}).get("strategy") or "") if r.point is not None else ""


def _mib(nbytes: int | float | None) -> str:
    return "–" if nbytes is None else f"{nbytes / 2**20:,.1f} MiB" if nbytes < 2**30 else f"{nbytes / 2**30:,.2f} GiB"


def _read_back(moved: dict) -> str:
    back = moved.get("read_back") or {}
    if not back.get("source"):
        return str(back.get("why") or "not read back")
    got = back.get("tensors") or []
    bufs = sorted({b for _n, b in got})
    same = "as planned" if sorted(n for n, _b in got) == sorted(moved.get("tensors") or []) else "NOT as planned"
    return f"{len(got)} tensors → {', '.join(bufs)} ({same}; {back['source']})"


def moved_table(data: ReportData) -> Table:
    t = Table(["series", "strategy", "layers moved", "tensors moved", "bytes", "llama.cpp overrode"],
              title="What each strategy moved to the CPU")
    for s in data.series:
        for r in _placed(s):
            m = r.point.detail.moved
            t.rows.append([s.name, m.get("strategy", ""), ", ".join(map(str, m.get("layers") or [])) or "none",
                           compact(m.get("tensors") or []), _mib(m.get("bytes")), _read_back(m)])
            t.data.append({"series": s.name, **m})
    return t


def layer_table(data: ReportData) -> Table | None:
    """The model's layers (full-attention ones marked F) and, per strategy, whose experts it moved (●)."""
    strategies: dict[str, list[int]] = {}
    for s in data.series:
        for r in _placed(s):
            strategies.setdefault(_strategy(r), list(r.point.detail.moved.get("layers") or []))
    n = max((x for ls in strategies.values() for x in ls), default=-1) + 1
    n = max(n, *(x + 1 for x in data.full_attn_layers)) if data.full_attn_layers else n
    if not strategies or n <= 0:
        return None
    full = set(data.full_attn_layers)
    t = Table(["layer", *map(str, range(n))], title="Layer map: full-attention layers (F) and the experts moved (●)")
    t.rows.append(["full attention", *("F" if i in full else "·" for i in range(n))])
    for name, layers in strategies.items():
        t.rows.append([name, *("●" if i in set(layers) else "·" for i in range(n))])
    return t


def _pairs(data: ReportData) -> list[tuple[Series, Row, Series, Row]]:
    """Every placed point beside the ``first:N`` point of the same build, engine and N."""
    firsts = {(s.key[0], s.key[1], r.ncmoe, r.ngl): (s, r) for s in data.series for r in _placed(s)
              if _strategy(r).startswith("first:")}
    out = []
    for s in data.series:
        for r in _placed(s):
            base = firsts.get((s.key[0], s.key[1], r.ncmoe, r.ngl))
            if base is not None and not _strategy(r).startswith("first:"):
                out.append((base[0], base[1], s, r))
    return out


def comparison_table(data: ReportData, min_effect: float) -> tuple[Table | None, list[str]]:
    """Each strategy over ``first:N`` at the same N (the same bytes moved where the layers are alike), pp and
    tg judged on server starts, Holm over the table; and one sentence per comparison."""
    pairs = _pairs(data)
    if not pairs:
        return None, []
    raw = [judge(ra.starts(m), rb.starts(m), min_effect=min_effect, prior_a=sa.prior(m), prior_b=sb.prior(m))
           for sa, ra, sb, rb in pairs for m in ("pp", "tg")]
    it = iter(controlled(raw))
    n = sum(1 for j in raw if j is not None)
    t = Table(["moved", "strategy", "vs", "pp", "tg", "starts (K×R)"], title="Placements at equal bytes moved",
              note=f"B/A with B the strategy and A first:N of the same build; Holm's method over the table's {n} "
                   "comparisons (each interval is the one its verdict used).")
    lines = []
    for _sa, ra, sb, rb in pairs:
        js = {m: next(it) for m in ("pp", "tg")}
        mb, ma = rb.point.detail.moved, ra.point.detail.moved
        moved = _mib(mb.get("bytes")) + ("" if mb.get("bytes") == ma.get("bytes") else f" (first: {_mib(ma.get('bytes'))})")
        b, a = _strategy(rb), _strategy(ra)
        cells = [fmt_judged(js[m], b, a, (rb, ra), 0.05) for m in ("pp", "tg")]
        t.rows.append([moved, b, a, *cells, f"{rb.starts('tg').shape} / {ra.starts('tg').shape}"])
        t.data.append({"strategy": b, "vs": a, "bytes": mb.get("bytes"),
                       **{m: (j.to_dict() if j else None) for m, j in js.items()}})
        lines.append(f"At {moved} moved to the CPU ({sb.name}), {b} over {a} in tg: {cells[1]}.")
    return t, lines


def placement_section(data: ReportData, min_effect: float) -> Section | None:
    if not any(_placed(s) for s in data.series):
        return None
    comp, lines = comparison_table(data, min_effect)
    tables = [t for t in (layer_table(data), moved_table(data), comp) if t is not None]
    intro = ("Which layers' experts each strategy moved to the CPU (`--place`): `first:N` is `-ncmoe N`; the others "
             "pass one `-ot` override per layer. The tensors are those the overrides select in the model, with their "
             "bytes in the GGUF file; the last column is what llama.cpp itself logged it overrode "
             "(`llama-fit-params -v`, the point's own offload arguments).")
    return Section("placement", "Placement", intro=intro, tables=tables, notes=lines)


def compact(names: Sequence[str]) -> str:
    """Tensor names grouped by layer: ``blk.{4,5,6,7}.ffn_{down,gate,up}_exps`` (the report's one line)."""
    by_kind: dict[str, list[int]] = {}
    other: list[str] = []
    for n in names:
        m = re.match(r"^blk\.(\d+)\.(.+?)(?:\.weight)?$", n)
        if m:
            by_kind.setdefault(m.group(2), []).append(int(m.group(1)))
        else:
            other.append(n)
    groups: dict[tuple[int, ...], list[str]] = {}
    for kind, layers in by_kind.items():
        groups.setdefault(tuple(sorted(set(layers))), []).append(kind)
    parts = []
    for layers, kinds in sorted(groups.items()):
        ls = ",".join(map(str, layers))
        ks = kinds[0] if len(kinds) == 1 else _brace(sorted(kinds))
        parts.append(f"blk.{{{ls}}}.{ks}" if len(layers) > 1 else f"blk.{ls}.{ks}")
    return "; ".join(parts + other) or "none"


def _brace(kinds: list[str]) -> str:
    """``ffn_down_exps``, ``ffn_up_exps`` → ``ffn_{down,up}_exps`` when they share a prefix and a suffix."""
    head = kinds[0].split("_")[0] + "_"
    tail = "_" + kinds[0].rsplit("_", 1)[-1]
    if all(k.startswith(head) and k.endswith(tail) and len(k) > len(head) + len(tail) for k in kinds):
        return head + "{" + ",".join(k[len(head):-len(tail)] for k in kinds) + "}" + tail
    return "{" + ",".join(kinds) + "}"
