"""Why llama-server generates slower than llama-bench at the same point: the gap, split into factors.

The engine cross-check (``--engine both``) measures each point with both engines; the server's tg is
typically a few percent below llama-bench's. What each start of a cross-check point recorded
(:mod:`llamaforge.bench.engine_gap`) splits that gap into factors whose product is the gap:

    gap = server tg / llama-bench tg (the cross-check's ratio)
        = depth × sampler chain × HTTP × residual

* **depth** = llama-bench tg at the server's actual prompt / at the requested prompt (paired inside each
  llama-bench process; interpolated linearly in time per token between depth 0 and the requested prompt
  for a process that ran before the server's prompt was known);
* **sampler chain** = the server's tg with its default chain / with the shortest chain (top-1 only), paired
  inside each server start;
* **HTTP** = 1: the server times generation itself (``timings``), from the first sampled token to the last,
  so nothing of HTTP is inside the number. The table shows what lies outside it (each request's wall time
  on the client minus the server's prompt and generation time) and what a *streaming* client would see
  (tokens time-stamped on arrival / the non-streamed tg), neither of which is part of the gap;
* **residual** = the server's tg with the shortest chain / llama-bench's tg at the matched depth: what no
  named factor explains (the server's per-token loop, copying the logits into a candidate array and the
  top-1 pass over it, detokenising, its larger context). A same / differs / inconclusive verdict says
  whether it lies within ±``min_effect``. Next to it, *one more vocabulary pass* (the top-1 chain with one
  more scan of the vocabulary / without) shows what a single pass over the vocabulary costs per token.

Every interval comes from the judge (:mod:`llamaforge.judge`): paired factors by
:func:`~llamaforge.judge.paired.paired`, the gap and the residual (server starts against llama-bench processes) by
:func:`~llamaforge.judge.judge`. A factor's *share* of the gap is its logarithm over the gap's logarithm
(the shares add up to 100 %); they are left out when the gap's interval includes 1 (nothing established to
split) or the gap is under 0.5 %.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable
from dataclasses import dataclass

from rich.table import Table as RichTable

from ..console import console, esc
from ..judge import Estimate, Judgement, judge
from ..judge.paired import paired
from ..judge.wording import ratio_text
from ..store import Point, Store
from .data import ReportData, Series, load
from .sections import Table

#: below this relative gap the shares are not computed (a tiny gap's split is noise)
MIN_GAP_FOR_SHARES = 0.005


@dataclass(frozen=True)
class ServerStarts:
    """Per server start of a cross-check point, the request values of each variant (t/s, or ms for overhead)."""

    default: list[list[float]]
    greedy: list[list[float]]
    extra_pass: list[list[float]]
    stream: list[list[float]]
    stream_client: list[list[float]]
    overhead_ms: list[float]          # median per start of wall − (prompt + generation) time, default requests
    prompt_n: int | None


@dataclass(frozen=True)
class BenchStarts:
    """Per llama-bench process of a cross-check point: tg at the requested depth and at the server's prompt."""

    xc: list[list[float]]
    matched: list[list[float]]
    n_measured: int                   # processes whose matched depth was measured (the rest: interpolated)
    xc_depth: int | None
    matched_depth: int | None


@dataclass(frozen=True)
class Decomposition:
    series: str
    ncmoe: int
    gap: Judgement
    depth: Estimate | None
    sampler: Estimate
    residual: Judgement
    vocab_pass: Estimate | None       # one more pass over the vocabulary / the top-1 chain (not in the product)
    stream_server: Estimate | None
    stream_client: Estimate | None
    overhead_ms: float | None
    server: ServerStarts
    bench: BenchStarts

    def shares(self) -> dict[str, float] | None:
        """Each factor's share of the gap (log factor / log gap), or ``None`` when there is no gap to split: its
        interval includes 1 (a share of a gap that may be nothing is noise), or it is under 0.5 %."""
        lg = math.log(self.gap.ratio)
        if abs(self.gap.ratio - 1) < MIN_GAP_FOR_SHARES or self.gap.low <= 1 <= self.gap.high:
            return None
        parts = {"depth": self.depth.centre if self.depth else 1.0, "sampler": self.sampler.centre, "http": 1.0,
                 "residual": self.residual.ratio}
        return {k: math.log(v) / lg for k, v in parts.items()}

    def to_dict(self) -> dict:
        return {"series": self.series, "ncmoe": self.ncmoe, "gap": self.gap.to_dict(),
                "depth": self.depth.to_dict() if self.depth else None, "sampler": self.sampler.to_dict(),
                "http": 1.0, "residual": self.residual.to_dict(),
                "vocab_pass": self.vocab_pass.to_dict() if self.vocab_pass else None,
                "stream_server": self.stream_server.to_dict() if self.stream_server else None,
                "stream_client": self.stream_client.to_dict() if self.stream_client else None,
                "overhead_ms": self.overhead_ms, "shares": self.shares(),
                "prompt_n": self.server.prompt_n, "xc_depth": self.bench.xc_depth,
                "matched_depth": self.bench.matched_depth, "depth_measured_in": self.bench.n_measured,
                "server_starts": len(self.server.default), "bench_starts": len(self.bench.xc)}


# ---- what the starts recorded ---------------------------------------------------------------------------

def _start_records(p: Point) -> list[dict]:
    """The ``engine_gap`` record of each start of ``p`` (from its launch records; the point's own for a point
    measured in one start before launches were recorded)."""
    launches = p.launches
    recs = [r.engine_gap for r in launches] if launches else [p.detail.engine_gap]
    return [r for r in recs if isinstance(r, dict)]


def _vals(reqs: Iterable[dict], variant: str, field: str = "tg_tps") -> list[float]:
    out = []
    for r in reqs:
        v = r.get(field)
        if r.get("variant") == variant and isinstance(v, int | float) and v > 0:
            out.append(float(v))
    return out


def _overhead(reqs: list[dict]) -> float | None:
    """Median ms of a default request's wall time outside the server's prompt + generation timings."""
    xs = [r["wall_ms"] - r["prompt_ms"] - r["predicted_ms"] for r in reqs
          if r.get("variant") == "default" and all(isinstance(r.get(k), int | float)
                                                   for k in ("wall_ms", "prompt_ms", "predicted_ms"))]
    return statistics.median(xs) if xs else None


def _took_effect(r: dict, variants: dict) -> bool:
    """Whether the server ran the chain a request asked for: a server that ignores ``samplers`` (one older than
    the field) reports its default chain, and such a request measures nothing of the variant."""
    want = (variants.get(r.get("variant")) or {}).get("samplers")
    got = r.get("samplers")
    return want is None or not isinstance(got, list) or list(got) == list(want)


def server_starts(p: Point) -> ServerStarts | None:
    """The variants of every start of a server point that has both the default and the greedy requests
    (requests whose chain did not take effect left out)."""
    d, g, x, s, c, o = [], [], [], [], [], []
    prompt_n = None
    for rec in _start_records(p):
        variants = rec.get("variants") or {}
        reqs = [r for r in rec.get("requests") or [] if isinstance(r, dict) and _took_effect(r, variants)]
        dv, gv = _vals(reqs, "default"), _vals(reqs, "greedy")
        if not dv or not gv:
            continue
        d.append(dv)
        g.append(gv)
        x.append(_vals(reqs, "extra-pass"))
        s.append(_vals(reqs, "stream"))
        c.append(_vals(reqs, "stream", "client_tg_tps"))
        if (oh := _overhead(reqs)) is not None:
            o.append(oh)
        prompt_n = prompt_n or rec.get("prompt_n")
    return ServerStarts(d, g, x, s, c, o, prompt_n) if d else None


def _per_launch(p: Point, test: str) -> dict[int, list[float]]:
    out: dict[int, list[float]] = {}
    for s in p.samples:
        if not s.warmup and s.test == test and s.tg_tps:
            out.setdefault(s.launch, []).append(float(s.tg_tps))
    return out


def interpolated(rate0: float, rate_d: float, depth: int, target: int) -> float:
    """tg at ``target`` from tg at depth 0 and at ``depth``, linear in time per token (attention grows with the
    KV length); exact at both ends."""
    t0, td = 1 / rate0, 1 / rate_d
    return 1 / (t0 + (td - t0) * target / depth)


def bench_starts(p: Point, prompt_n: int | None) -> BenchStarts | None:
    """tg at the cross-check depth and at the server's prompt (``prompt_n``), per llama-bench process."""
    n = p.n_predict
    recs = {r.launch: r.engine_gap or {} for r in p.launches} or {1: p.detail.engine_gap or {}}
    xc_depth = next((r.get("xc_depth") for r in recs.values() if r.get("xc_depth")), None)
    if not n or not xc_depth:
        return None
    matched_depth = prompt_n or xc_depth
    xc = _per_launch(p, f"tg{n} @ d{xc_depth}")
    at = _per_launch(p, f"tg{n} @ d{matched_depth}")
    zero = _per_launch(p, f"tg{n}")
    xs, ms, measured = [], [], 0
    for launch in sorted(xc):
        if at.get(launch):
            ms.append(at[launch])
            measured += 1
        elif zero.get(launch):
            r0, rd = statistics.median(zero[launch]), statistics.median(xc[launch])
            ms.append([interpolated(r0, rd, xc_depth, matched_depth)])
        else:
            continue
        xs.append(xc[launch])
    return BenchStarts(xs, ms, measured, xc_depth, matched_depth) if xs else None


# ---- the decomposition --------------------------------------------------------------------------------

def decompose(series: str, ncmoe: int, srv: Point, lb: Point, *, min_effect: float = 0.05) -> Decomposition | None:
    """The gap of one cross-check point split into factors (``None`` when its starts recorded no variants)."""
    ss = server_starts(srv)
    bs = bench_starts(lb, ss.prompt_n) if ss else None
    if ss is None or bs is None:
        return None
    gap = judge(bs.xc, ss.default, min_effect=min_effect)
    residual = judge(bs.matched, ss.greedy, min_effect=min_effect)
    sampler = paired(ss.greedy, ss.default)
    if gap is None or residual is None or sampler is None:
        return None
    return Decomposition(series, ncmoe, gap, paired(bs.xc, bs.matched), sampler, residual,
                         _paired_where(ss.greedy, ss.extra_pass), _paired_where(ss.default, ss.stream),
                         _paired_where(ss.default, ss.stream_client),
                         statistics.median(ss.overhead_ms) if ss.overhead_ms else None, ss, bs)


def _paired_where(a: list[list[float]], b: list[list[float]]) -> Estimate | None:
    """:func:`~llamaforge.judge.paired` over the starts where ``b`` was measured (``None`` when none was)."""
    both = [(x, y) for x, y in zip(a, b, strict=True) if y]
    return paired([x for x, _ in both], [y for _, y in both]) if both else None


def decompositions(data: ReportData, *, min_effect: float = 0.05) -> list[Decomposition]:
    """Every cross-check point of the run (server and llama-bench at the same offload on one build) that can be split."""
    by: dict[tuple[str, str], dict[str, Series]] = {}
    for s in data.series:
        by.setdefault((s.key[0], s.key[2]), {})[s.key[1]] = s
    out = []
    for engines in by.values():
        srv, lb = engines.get("server"), engines.get("llama-bench")
        if srv is None or lb is None:
            continue
        lb_points = {(r.ncmoe, r.ngl): r.point for r in lb.ok_rows}
        for r in srv.ok_rows:
            b = lb_points.get((r.ncmoe, r.ngl))
            if r.point is None or b is None:
                continue
            d = decompose(srv.name, r.ncmoe, r.point, b, min_effect=min_effect)
            if d is not None:
                out.append(d)
    return out


# ---- rendering ----------------------------------------------------------------------------------------

def fmt_estimate(e: Estimate | None, digits: int = 3) -> str:
    """``0.952 [0.941, 0.963]`` (K ≥ 3), ``0.952 (0.948–0.957)`` (range of 2 starts), ``0.952 (1 start)``."""
    if e is None:
        return "–"
    interval = e.interval_text(digits)   # these are ratios: no thousands separator shows
    return f"{e.centre:.{digits}f} " + (interval if e.kind == "ci" else f"({interval})")


def fmt_judgement(j: Judgement, digits: int = 3) -> str:
    """``0.931 [0.912, 0.950]``; with fewer than 3 starts a side, the range of the start ratios instead."""
    kind, lo, hi = j.interval()
    return ratio_text(j.ratio, lo, hi, interval=kind, decimals=digits, unit="", phrase=False)


def _share(shares: dict[str, float] | None, key: str) -> str:
    return "" if shares is None else f" · {shares[key] + 0.0:.0%}"


def gap_table(decs: list[Decomposition], min_effect: float = 0.05) -> Table | None:
    """One row per cross-check point: the gap, each factor (with its share of the gap) and the residual."""
    if not decs:
        return None
    t = Table(["series", "ncmoe", "starts (server / llama-bench)", "gap: server / llama-bench tg", "depth",
               "sampler chain", "HTTP", "residual", f"residual within ±{min_effect:.0%}",
               "one more vocabulary pass", "streaming client"],
              title="Engine gap: server tg / llama-bench tg = depth × sampler chain × HTTP × residual")
    for d in decs:
        sh = d.shares()
        t.rows.append([d.series, str(d.ncmoe), f"{len(d.server.default)} / {len(d.bench.xc)}", fmt_judgement(d.gap),
                       fmt_estimate(d.depth) + _share(sh, "depth"), fmt_estimate(d.sampler) + _share(sh, "sampler"),
                       "1 (outside the timing)", fmt_judgement(d.residual) + _share(sh, "residual"),
                       d.residual.verdict + ("*" if d.residual.small else ""), fmt_estimate(d.vocab_pass),
                       fmt_estimate(d.stream_client)])
        t.data.append(d.to_dict())
    t.note = note(decs)
    return t


def note(decs: list[Decomposition]) -> str:
    """How to read the table, with the numbers that do not fit in it (HTTP time outside the timing, depths)."""
    d0 = decs[0]
    oh = [d.overhead_ms for d in decs if d.overhead_ms is not None]
    parts = [
        "Factors multiply to the gap; '· n %' is a factor's share of the gap (log factor / log gap). Intervals: "
        "[95 % CI] with ≥ 3 starts, (range) with 2, per the judge; * = fewer than 3 starts on a side, the verdict "
        "assumes a between-start spread.",
        f"depth: llama-bench tg at the server's actual prompt "
        f"({d0.bench.matched_depth} tokens) / at the requested one ({d0.bench.xc_depth}), in the same process "
        f"(measured in {sum(d.bench.n_measured for d in decs)} of {sum(len(d.bench.xc) for d in decs)} processes; "
        "the others interpolated between depth 0 and the requested prompt).",
        "sampler chain: the server's default chain / top-1 only, alternated in the same start (the same greedy "
        "pick at temperature 0). Both still copy every logit into a candidate array and scan it; one more vocabulary "
        "pass = the top-1 chain with one more scan / without it: the cost of one pass over the vocabulary, the order "
        "of what the top-1 chain still spends per token (not a factor of the gap).",
        "HTTP: the server's tg is timed inside the server; per request, "
        + (f"{statistics.median(oh):,.1f} ms of wall time lay outside its prompt + generation timings (median)"
           if oh else "the wall time outside its timings was not recorded")
        + "; streaming client = tg from token arrival times on this side / the server's non-streamed tg "
          "(not part of the gap: the benchmark does not stream).",
        "residual: the server with the top-1 chain / llama-bench at the matched depth (the server's per-token loop, "
        "its copy and scan of the vocabulary, detokenising).",
    ]
    return " ".join(parts)


def gap_tables(data: ReportData, *, min_effect: float = 0.05) -> list[Table]:
    """The cross-check section's decomposition table (``[]`` when no point recorded the variants)."""
    t = gap_table(decompositions(data, min_effect=min_effect), min_effect)
    return [t] if t is not None else []


# ---- the terminal -------------------------------------------------------------------------------------

def print_gap(store: Store, run_id: str, *, min_effect: float = 0.05) -> list[Decomposition]:
    """The decomposition table of a cross-check run in the terminal (nothing when no point recorded variants);
    returns what it printed."""
    decs = decompositions(load(store, run_id), min_effect=min_effect)
    t = gap_table(decs, min_effect)
    if t is None:
        return decs
    rt = RichTable(title=esc(t.title), show_lines=False)
    for c in t.columns:
        rt.add_column(esc(c), justify="left" if c == "series" else "right")
    for row in t.rows:
        rt.add_row(*(esc(x) for x in row))
    console.print(rt)
    console.print(esc(t.note), style="dim", soft_wrap=True)
    return decs
