"""Engine cross-check: llama-server against llama-bench on the same points (``--engine both``), and the gap
split by :mod:`.engine_gap`."""

from __future__ import annotations

from typing import Any

from ..judge import Starts, estimate
from ..judge.wording import ratio_text
from .data import ReportData
from .engine_gap import gap_tables
from .sections import Section, Table

CROSSCHECK_BAND = (0.9, 1.1)


def _bench_values(p: Any, metric: str, depth: int | None) -> Starts:
    """llama-bench samples of ``metric`` (pp/tg) at ``depth`` (``None``: the deepest), by start."""
    tests = {s.test for s in p.samples if not s.warmup and s.test.startswith(metric) and "+" not in s.test}

    def d(t: str) -> int:
        return int(t.split("@ d")[1]) if "@ d" in t else 0

    if not tests:
        return Starts(())
    want = max(d(t) for t in tests) if depth is None else depth
    chosen = [t for t in tests if d(t) == want]
    return Starts.of(p.launch_groups(f"{metric}_tps", chosen[0])) if chosen else Starts(())


def crosscheck_table(data: ReportData) -> Table | None:
    """Server / llama-bench ratios for pp (depth 0) and tg (at the deepest depth = the prompt) per point."""
    by = {(s.key[0], s.key[2]): {} for s in data.series}
    for s in data.series:
        by[(s.key[0], s.key[2])][s.key[1]] = s
    t = Table(["series", "ncmoe", "server pp", "llama-bench pp", "pp ratio", "server tg", "llama-bench tg @ depth",
               "tg ratio", "flag"], title="Engine cross-check: llama-server / llama-bench")
    lo, hi = CROSSCHECK_BAND
    for engines in by.values():
        srv, lb = engines.get("server"), engines.get("llama-bench")
        if srv is None or lb is None:
            continue
        lb_rows = {(r.ncmoe, r.ngl): r for r in lb.ok_rows}
        for r in srv.ok_rows:
            b = lb_rows.get((r.ncmoe, r.ngl))
            if b is None or b.point is None:
                continue
            bpp, btg = estimate(_bench_values(b.point, "pp", 0)), estimate(_bench_values(b.point, "tg", None))
            spp, stg = r.estimate("pp"), r.estimate("tg")
            rp = spp.centre / bpp.centre if spp and bpp else None
            rt = stg.centre / btg.centre if stg and btg else None
            out = [f"{m} {x:.2f}" for m, x in (("pp", rp), ("tg", rt)) if x is not None and not lo <= x <= hi]
            t.rows.append([srv.name, str(r.ncmoe), spp.fmt() if spp else "–", bpp.fmt() if bpp else "–",
                           _gap(rp), stg.fmt() if stg else "–", btg.fmt() if btg else "–", _gap(rt), ("⚠ outside 0.9–1.1: " + ", ".join(out)) if out else ""])
            t.data.append({"series": srv.name, "ncmoe": r.ncmoe, "pp_ratio": rp, "tg_ratio": rt, "flagged": bool(out)})
    return t if t.rows else None


def _gap(x: float | None) -> str:
    """server / llama-bench as a bare factor (``0.95``), through the one ratio formatter."""
    return ratio_text(x, interval="none", unit="", phrase=False) if x else "–"


def crosscheck_section(data: ReportData) -> Section | None:
    if len({s.key[1] for s in data.series}) < 2:
        return None
    sec = Section("crosscheck", "Engine cross-check", intro=(
        "Each point was also measured with llama-bench at the same offload (`--n-cpu-moe`), the prompt size as "
        "`-p` and a depth equal to the prompt (`-d`), so its tg runs with as much context as the server's. "
        "Ratios outside 0.9–1.1 are flagged. The summary, sweet spots and ratios above use the llama-server engine."))
    t = crosscheck_table(data)
    if t is None:
        sec.absent = "no point has an ok measurement from both engines"
    else:
        n = sum(1 for d in t.data if d["flagged"])
        sec.notes.append(f"{n} of {len(t.data)} point(s) have a server / llama-bench ratio outside 0.9–1.1.")
        sec.tables.append(t)
        sec.tables += gap_tables(data)   # the gap split into depth, sampler chain, HTTP and a residual
    return sec
