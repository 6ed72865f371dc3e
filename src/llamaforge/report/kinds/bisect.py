"""What a bisect run's report leads with: the verdict (the first bad commit with its change and CI
against its parent, or why it is undecided or was refused), the endpoints and what locating their
change takes, every probe with its starts, and two plots: the metric over the commits (``probes.png``, one
dot per start) and every start in the order measured (``starts.png``: how the machine's speed moved while
the probes were judged). ``llamaforge bisect`` and ``llamaforge report`` write the same report."""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from ...files import atomic_path  # noqa: E402
from ...findings.bisection import probe_rows, result_lines, start_trace  # noqa: E402
from ...judge.estimate import signed_pct  # noqa: E402
from ...judge.locate import change  # noqa: E402
from ...mdtext import md_code, md_text  # noqa: E402
from ...metrics import FIELDS  # noqa: E402
from ...records import BisectSection, BisectSummary  # noqa: E402
from ...store import Run, Store  # noqa: E402
from ..data import ReportData  # noqa: E402
from ..plots import Plot  # noqa: E402
from ..sections import Section  # noqa: E402

PLOT = "probes.png"
TIMELINE = "starts.png"
_COLORS = {"good": "tab:green", "endpoint-good": "tab:green", "bad": "tab:red", "endpoint-bad": "tab:red"}


def _centres(r: dict) -> list[float]:
    """One value per start: the median of its requests (the judge's start centre)."""
    est = r.get("estimate") or {}
    return list(est.get("starts") or [])


def plot(store: Store, run: Run, out: Path) -> Path:
    """PNG of the metric over the commits of the range: one dot per start, the commit's centre as a
    bar, skipped commits marked at the bottom, the first bad commit marked by a vertical line."""
    b = run.plan.bisect or BisectSection()
    commits = b.commits
    rows = [r for r in probe_rows(store, run) if r["index"] is not None]
    fig, ax = plt.subplots(figsize=(max(6.0, 0.45 * len(commits) + 2), 4.0), dpi=110)
    for r in rows:
        starts = _centres(r) or ([r["median"]] if r["median"] is not None else [])
        if not starts:
            continue
        color = _COLORS.get(r["verdict"], "tab:gray")
        n = len(starts)
        xs = [r["index"] + (0.25 * (i / max(1, n - 1) - 0.5) if n > 1 else 0.0) for i in range(n)]
        ax.scatter(xs, starts, s=10, color=color, alpha=0.6, linewidths=0)
        if r["median"] is not None:
            ax.plot([r["index"] - 0.3, r["index"] + 0.3], [r["median"]] * 2, color=color, linewidth=2)
    for r in rows:
        if r["verdict"] == "skip":
            ax.plot([r["index"]], [0], marker="x", color="tab:orange", markersize=10, linestyle="none")
            ax.annotate("skip", (r["index"], 0), textcoords="offset points", xytext=(4, 6), fontsize=7)
    fb = run.summary_as(BisectSummary).first_bad
    if fb in commits:
        ax.axvline(commits.index(fb) - 0.5, color="tab:red", linestyle="--", linewidth=1)
        ax.annotate(f"first bad {fb[:9]}", (commits.index(fb) - 0.45, ax.get_ylim()[1] * 0.95), fontsize=8, color="tab:red")
    ax.set_xticks(range(len(commits)))
    ax.set_xticklabels([c[:7] for c in commits], rotation=60, fontsize=7)
    ax.set_xlim(-0.5, max(len(commits), 1) - 0.5)
    ax.set_ylim(bottom=0)
    metric = b.metric or "tg"
    ax.set_ylabel(f"{metric} t/s (dots: starts; bar: centre)")
    ax.set_title(f"bisect {metric} on {b.backend or '?'}: {len(commits) - 1} commits", fontsize=10)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    try:
        with atomic_path(out) as tmp:   # a full disk leaves no half-written plot
            fig.savefig(tmp)
    finally:
        plt.close(fig)
    return out


def timeline(store: Store, run: Run, out: Path) -> Path:
    """PNG of every start in the order measured: the endpoints' starts as dots (green good, red bad), the probes'
    as rings in their verdict's colour. Where the machine's speed jumps, all three move together."""
    b = run.plan.bisect or BisectSection()
    metric = b.metric or "tg"
    rows = [(n, verdict, v) for n, (_t, _sha, verdict, v) in enumerate(start_trace(store, run, FIELDS.get(metric, "tg_tps")), 1)]
    fig, ax = plt.subplots(figsize=(8.0, 3.6), dpi=110)
    for verdict, label in (("endpoint-good", "good endpoint"), ("endpoint-bad", "bad endpoint")):
        pts = [(n, v) for n, vd, v in rows if vd == verdict]
        if pts:
            ax.scatter(*zip(*pts, strict=True), s=12, color=_COLORS[verdict], alpha=0.8, linewidths=0, label=label)
    probes = [(n, v, _COLORS.get(vd, "tab:gray")) for n, vd, v in rows if not vd.startswith("endpoint")]
    if probes:
        ax.scatter([n for n, _v, _c in probes], [v for _n, v, _c in probes], s=22, facecolors="none",
                   edgecolors=[c for _n, _v, c in probes], linewidths=1.0, label="probe (its verdict's colour)")
    ax.set_xlabel("start, in the order measured")
    ax.set_ylabel(f"{metric} t/s (one mark a start)")
    ax.set_ylim(bottom=0)
    ax.set_title(f"bisect {metric}: {len(rows)} starts in the order measured", fontsize=10)
    ax.grid(alpha=0.3)
    if rows:
        ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    try:
        with atomic_path(out) as tmp:
            fig.savefig(tmp)
    finally:
        plt.close(fig)
    return out


def _known(v: object) -> object:
    return "?" if v is None else v


def _endpoints(s: BisectSummary, rows: list[dict] | None = None) -> list[str]:
    """The endpoints as first measured (ABBA: what their verdict and "Can it be located?" used, with its K×R) and,
    where the probe table counts more of their starts, those figures with theirs, and which one a verdict used."""
    ep = s.endpoints or {}
    if not ep.get("a"):
        return []
    a, b = ep["a"], ep["b"]
    out = [f"Endpoints, first measured ABBA: good {a['centre']:.1f} t/s ({md_text(a.get('shape'))}), bad "
           f"{b['centre']:.1f} t/s ({md_text(b.get('shape'))}): {md_text(change(ep['ratio'], ep['low'], ep['high']))} "
           f"(**{md_text(ep.get('verdict'))}** against ±{float(ep.get('min_effect') or 0):.0%}; this verdict and the "
           f"question below used these {md_text(a.get('shape'))} and {md_text(b.get('shape'))} starts)."]
    if s.feasibility_line:
        out.append(f"Can it be located? {md_text(s.feasibility_line)}.")
    tot = {r["verdict"]: r for r in rows or [] if r["verdict"] in ("endpoint-good", "endpoint-bad")}
    figs = [f"{side} {r['median']:.1f} t/s ({md_text((r.get('estimate') or {}).get('shape', len(r['values'])))})"
            for side, key in (("good", "endpoint-good"), ("bad", "endpoint-bad"))
            if (r := tot.get(key)) is not None and r["median"] is not None]
    first = {"endpoint-good": a.get("shape"), "endpoint-bad": b.get("shape")}
    if figs and any((tot[k].get("estimate") or {}).get("shape") != first[k] for k in tot):
        out.append(f"The probe table's endpoint rows count every start measured for them — also the fresh starts "
                   f"interleaved with each probe: {', '.join(figs)}. Each probe was judged against the endpoints' "
                   "starts measured beside it (the probe's vs good / vs bad), never against these totals.")
    return out


def lead(store: Store, run: Run, plot_name: str | None = PLOT) -> str:
    """Markdown for a bisect run: verdict, endpoints, every probe with its starts and build/measure times."""
    plan = run.plan
    b = plan.bisect or BisectSection()
    s = run.summary_as(BisectSummary)
    metric = b.metric or "tg"
    quiet = (b.quiet or {}).get("text") or "–"
    out = [f"# Bisection {md_text(run.id)}", "",
           f"{md_text(metric)} on **{md_text(b.backend)}**, good {md_code(str(b.good_sha or '')[:12])} → bad "
           f"{md_code(str(b.bad_sha or '')[:12])} ({len(b.commits) - 1} commits), threshold "
           f"{float(b.threshold if b.threshold is not None else 0.05):.0%}, {md_text(b.min_starts or '?')}–"
           f"{md_text(b.max_launches or '?')} starts per commit (one llama-bench process each, "
           f"{md_text(b.repeats)} requests inside), model {md_code(plan.model.ref or '')}. "
           f"Quieter starts: {md_text(quiet)}.", ""]
    lines = result_lines(s, b.subjects)
    if lines:
        out += [f"**{md_text(lines[0])}**", ""] + [f"{md_text(x)}  " for x in lines[1:]] + [""]
    else:
        out += [f"Status: {md_text(run.status)} (no result).", ""]
    out += [*(f"{x}  " for x in _endpoints(s, probe_rows(store, run))), ""]
    out += [f"{_known(s.builds)} builds, {_known(s.measured)} commits measured, {_known(s.starts)} starts "
            f"(bound for a clean step: {b.max_measured if b.max_measured is not None else '?'} commits).", ""]
    if plot_name:
        out += [f"![{md_text(metric)} over commits]({plot_name})", ""]
    return "\n".join(out + _probe_table(store, run)) + "\n"


def _probe_table(store: Store, run: Run) -> list[str]:
    out = ["| # | commit | verdict | t/s (K×R) | vs good | vs bad | build s | incremental | measure s | subject / note |",
           "|---:|---|---|---|---:|---:|---:|---|---:|---|"]
    for r in sorted(probe_rows(store, run), key=lambda r: r["seq"]):
        inc = {True: "yes", False: "cold", None: "–"}[r["incremental"]]
        est = r.get("estimate") or {}
        lvl = f"{r['median']:.1f} ({est.get('shape', len(r['values']))})" if r["median"] is not None else "–"
        pl = r.get("placement") or {}
        vg, vb = _pct_cell(pl.get("vs_good")), _pct_cell(pl.get("vs_bad"))
        text = r["subject"] + (f" ({r['note']})" if r["note"] else "")
        out.append(f"| {r['seq']} | {md_code(r['sha'][:9], in_table=True)} | {md_text(r['verdict'])} | {lvl} | {vg} | "
                   f"{vb} | {r['build_s'] or 0:.1f} | {inc} | {r['measure_s'] or 0:.1f} | {md_text(text)} |")
    return out


def _pct_cell(ratio: float | None) -> str:
    if ratio is None or not math.isfinite(ratio):
        return "–"
    return f"{signed_pct(ratio, 1)} %"


def plots(store: Store, run: Run, out_dir: Path) -> list[Plot]:
    """The bisect plots (``probes.png``: the metric over the commits; ``starts.png``: every start in the order
    measured); none before a probe is stored."""
    if not store.probes(run.id):
        return []
    p = plot(store, run, out_dir / PLOT)
    t = timeline(store, run, out_dir / TIMELINE)
    return [Plot("probes", "Speed per probed commit", p, "One dot per server start (llama-bench process), the bar "
                 "at the commit's centre; ×: commit that did not build; dashed line: the first bad commit."),
            Plot("starts", "Every start in the order measured", t, "Dots: the endpoints' starts (green good, red "
                 "bad); rings: the probes' starts, in the colour of their verdict. Where the machine's speed moved, "
                 "the endpoints' starts moved with the probes': a probe is judged against those measured beside it.")]


def sections(data: ReportData) -> list[Section]:  # noqa: ARG001 - every kind has this interface
    """No sections of its own: the lead and the common sections say it all."""
    return []
