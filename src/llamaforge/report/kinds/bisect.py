"""What a bisect run's report leads with: the first bad commit, the endpoints, every probe, and the
one plot of the metric over the commits (``probes.png``; ``llamaforge bisect`` and ``llamaforge report``
write the same report)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from ...bisect import probe_rows  # noqa: E402
from ...files import atomic_path  # noqa: E402
from ...mdtext import md_code, md_text  # noqa: E402
from ...records import BisectSection  # noqa: E402
from ...store import Run, Store  # noqa: E402
from ..plots import Plot  # noqa: E402

PLOT = "probes.png"


def plot(store: Store, run: Run, out: Path) -> Path:
    """PNG of the metric over the commits of the range: medians with min–max bars, skipped commits
    marked at the bottom, the first bad commit marked by a vertical line."""
    b = run.plan_record.bisect or BisectSection()
    commits = b.commits
    rows = [r for r in probe_rows(store, run) if r["index"] is not None]
    fig, ax = plt.subplots(figsize=(max(6.0, 0.45 * len(commits) + 2), 4.0), dpi=110)
    colors = {"good": "tab:green", "endpoint-good": "tab:green", "bad": "tab:red", "endpoint-bad": "tab:red"}
    ymin = None
    for r in rows:
        if r["median"] is None:
            continue
        vals = r["values"] or [r["median"]]
        ax.errorbar([r["index"]], [r["median"]], yerr=[[r["median"] - min(vals)], [max(vals) - r["median"]]],
                    fmt="o", color=colors.get(r["verdict"], "tab:gray"), capsize=3)
        ymin = min(vals) if ymin is None else min(ymin, min(vals))
    for r in rows:
        if r["verdict"] == "skip":
            ax.plot([r["index"]], [0], marker="x", color="tab:orange", markersize=10, linestyle="none")
            ax.annotate("skip (no build)", (r["index"], 0), textcoords="offset points", xytext=(4, 6), fontsize=7)
    fb = (run.summary or {}).get("first_bad")
    if fb in commits:
        ax.axvline(commits.index(fb) - 0.5, color="tab:red", linestyle="--", linewidth=1)
        ax.annotate(f"first bad {fb[:9]}", (commits.index(fb) - 0.45, ax.get_ylim()[1] * 0.95), fontsize=8, color="tab:red")
    ax.set_xticks(range(len(commits)))
    ax.set_xticklabels([c[:7] for c in commits], rotation=60, fontsize=7)
    ax.set_xlim(-0.5, max(len(commits), 1) - 0.5)
    ax.set_ylim(bottom=0)
    metric = b.metric or "tg"
    ax.set_ylabel(f"{metric} t/s (median, min–max)")
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


def lead(store: Store, run: Run, plot_name: str | None = PLOT) -> str:
    """Markdown for a bisect run: verdict, endpoints, every probe with build/measure times."""
    plan = run.plan_record
    b = plan.bisect or BisectSection()
    s = run.summary or {}
    metric = b.metric or "tg"
    out = [f"# Bisection {md_text(run.id)}", "",
           f"{md_text(metric)} on **{md_text(b.backend)}**, good {md_code(str(b.good_sha or '')[:12])} → bad "
           f"{md_code(str(b.bad_sha or '')[:12])} ({len(b.commits) - 1} commits), threshold "
           f"{float(b.threshold if b.threshold is not None else 0.05):.0%}, {md_text(b.repeats)} repeats, model "
           f"{md_code(plan.model.ref or '')}.", ""]
    if s.get("first_bad"):
        out += [f"**First bad commit: {md_code(s['first_bad'])}** — {md_text(s.get('subject') or '')}", ""]
    elif s.get("candidates"):
        out += ["**Only skipped commits are left; the first bad commit is one of:** "
                + ", ".join(md_code(c[:12]) for c in s["candidates"]), ""]
    else:
        out += [f"Status: {md_text(run.status)} (no result).", ""]
    ep = s.get("endpoints") or {}
    if ep:
        out += [f"Endpoints: good {ep.get('median_a', 0):.1f} t/s (n={ep.get('n_a')}), bad {ep.get('median_b', 0):.1f} t/s "
                f"(n={ep.get('n_b')}), ratio {ep.get('ratio', 0):.3f} [{ep.get('ratio_ci_low', 0):.3f}, "
                f"{ep.get('ratio_ci_high', 0):.3f}], Mann–Whitney p = {ep.get('p_value', 1):.3g}.", ""]
    out += [f"{s.get('builds', '?')} builds, {s.get('measured', '?')} commits measured "
            f"(bound for a clean step: {b.max_measured if b.max_measured is not None else '?'}).", ""]
    if plot_name:
        out += [f"![{md_text(metric)} over commits]({plot_name})", ""]
    out += ["| # | commit | verdict | median t/s | n | build s | incremental | measure s | subject / note |",
            "|---:|---|---|---:|---:|---:|---|---:|---|"]
    for r in sorted(probe_rows(store, run), key=lambda r: r["seq"]):
        inc = {True: "yes", False: "cold", None: "–"}[r["incremental"]]
        med = f"{r['median']:.1f}" if r["median"] is not None else "–"
        text = r["subject"] + (f" ({r['note']})" if r["note"] else "")
        out.append(f"| {r['seq']} | {md_code(r['sha'][:9], in_table=True)} | {md_text(r['verdict'])} | {med} | "
                   f"{len(r['values'])} | {r['build_s'] or 0:.1f} | {inc} | {r['measure_s'] or 0:.1f} | {md_text(text)} |")
    return "\n".join(out) + "\n"


def plots(store: Store, run: Run, out_dir: Path) -> list[Plot]:
    """The one bisect plot (``probes.png``): the metric over the commits; none before a probe is stored."""
    if not store.probes(run.id):
        return []
    p = plot(store, run, out_dir / PLOT)
    return [Plot("probes", "Speed per probed commit", p, "Median per commit (min–max bars); ×: commit that did not "
                 "build; dashed line: the first bad commit.")]
