"""PNG plots of a run against its sweep axis — ncmoe, or ngl for a layer sweep such as a dense
model's (matplotlib, Agg; one file each, every series overlaid).

* ``context.png``  fitted context (native context as a horizontal line)
* ``pp.png`` / ``tg.png``  prompt / generation t/s: the judge's centre per point with its interval (95 % CI
  from ≥ 3 server starts, the range of 2) and a strip of small dots, one per server start, so the
  start-to-start spread shows at a glance
* ``memory.png``  VRAM (left) and host memory (right): peak RSS, split into anonymous (thick
  translucent, ▽) and file-backed (mmapped model pages, ×) resident memory where recorded; where
  llama.cpp's memory breakdown exists its model / context / compute parts are drawn as thinner
  dashed / dotted / dash-dot lines
* ``probes.png``  (bisect runs) the metric per commit: :mod:`.kinds.bisect`

Every ncmoe plot marks the model's full-attention layers: a light vertical line at ncmoe = L + 1,
the first offload at which the experts of full-attention layer L (0-based) run on the CPU. Failed
points are × markers at the bottom of the axis, never values.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib import ticker  # noqa: E402
from matplotlib.axes import Axes  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402
from matplotlib.transforms import blended_transform_factory  # noqa: E402

from .. import metrics as registry  # noqa: E402
from ..backends import find as find_backend  # noqa: E402
from ..files import atomic_path  # noqa: E402
from .adaptive import interpolated  # noqa: E402
from .data import MemSplit, ReportData, Row, Series  # noqa: E402
from .latency import latency_metrics  # noqa: E402

EXTRA_COLORS = ["#8e44ad", "#d68910", "#17a589", "#7f8c8d", "#a04000", "#1f618d"]
MARKERS = ["o", "s", "^", "D", "v", "P"]
PART_STYLES = {"model": "--", "context": ":", "compute": "-."}
#: host memory split (RssAnon / RssFile): thick translucent lines with their own markers
HOST_SPLIT_STYLES = {"anonymous": ("v", 3.0, 0.45), "file-backed": ("x", 1.2, 0.9)}


@dataclass(frozen=True)
class Plot:
    name: str        # file stem, e.g. "tg"
    title: str
    path: Path
    caption: str


def backend_color(name: str) -> str | None:
    """A backend's own colour (:attr:`~llamaforge.backends.Backend.color`), None for those without one."""
    backend = find_backend(name)
    return backend.color if backend else None


def _styles(series: list[Series]) -> dict[str, tuple[str, str]]:
    out: dict[str, tuple[str, str]] = {}
    used: set[str] = set()
    extra = iter(EXTRA_COLORS * 4)
    for i, s in enumerate(series):
        c = backend_color(s.backend)
        if c is None or c in used:
            c = next(extra)
        used.add(c)
        out[s.name] = (c, MARKERS[i % len(MARKERS)])
    return out


def _mark_full_attn(ax: Axes, data: ReportData) -> bool:
    """Fix the x axis to every point's range (failed ones too) and, on an ncmoe axis, mark full-attention
    layers (on an ngl axis the tick of ngl = -1 reads 'all')."""
    xs = [r.x for r in data.all_rows]
    if not xs:
        return False
    lo, hi = min(xs), max(xs)
    ax.set_xlim(lo - 0.5, hi + 0.5)
    ax.xaxis.set_major_locator(ticker.MaxNLocator(integer=True))
    ax.set_xlabel(data.axis_label)
    if data.axis != "ncmoe":
        labels = {r.x: r.x_label for r in data.all_rows}
        ax.xaxis.set_major_formatter(ticker.FuncFormatter(lambda v, _: labels.get(int(v), f"{v:.0f}")))
        return False
    drawn = False
    for layer in data.full_attn_layers:
        x = layer + 1
        if lo <= x <= hi:
            ax.axvline(x, color="#999999", alpha=0.35, lw=1, zorder=0)
            ax.text(x, 1.0, "FA", transform=blended_transform_factory(ax.transData, ax.transAxes),
                    ha="center", va="bottom", fontsize=6, color="#777777")
            drawn = True
    return drawn


def _failed(ax: Axes, s: Series, color: str) -> bool:
    bad = s.failed_rows
    if bad:
        tr = blended_transform_factory(ax.transData, ax.transAxes)
        ax.scatter([r.x for r in bad], [0.03] * len(bad), marker="x", s=60, color=color, transform=tr,
                   clip_on=False, zorder=5, linewidths=2)
    return bool(bad)


def _save(fig: plt.Figure, path: Path) -> None:
    """Write the PNG through a temporary file (a full disk leaves no half-written plot) and close the figure."""
    try:
        with atomic_path(path) as tmp:
            fig.savefig(tmp, dpi=110)
    finally:
        plt.close(fig)


def _finish(ax: Axes, fig: plt.Figure, path: Path, extra: list[Line2D], title: str, ylabel: str) -> None:
    ax.set_ylabel(ylabel)
    ax.set_title(title, pad=14)
    ax.grid(True, alpha=0.3)
    handles, labels = ax.get_legend_handles_labels()
    ax.legend(handles + extra, labels + [h.get_label() for h in extra], fontsize=8, loc="best")
    fig.tight_layout()
    _save(fig, path)


def _common_legend(data: ReportData, fa: bool, failed: bool) -> list[Line2D]:
    extra = []
    if fa:
        extra.append(Line2D([], [], color="#999999", alpha=0.5, label="FA: full-attn layer L at ncmoe L+1"))
    if failed:
        extra.append(Line2D([], [], color="#555555", marker="x", ls="", label="failed point"))
    return extra


def _speed_plot(data: ReportData, metric: str, path: Path, title: str, ylabel: str) -> None:
    fig, ax = plt.subplots(figsize=(9, 5))
    styles = _styles(data.series)
    failed = False
    interp = interpolated(data)   # adaptive sweeps: measured points unconnected, interpolation dotted
    for s in data.series:
        color, marker = styles[s.name]
        rows = [r for r in s.ok_rows if r.estimate(metric) is not None]
        guess = interp.get(f"{s.key[0]}#{s.key[2]}" if s.key[2] else s.key[0])   # a variant's series: KEY#NAME
        if rows:
            est = [r.estimate(metric) for r in rows]
            med = [e.centre for e in est]  # type: ignore[union-attr]
            lo = [max(0.0, e.centre - e.low) for e in est]  # type: ignore[union-attr]
            hi = [max(0.0, e.high - e.centre) for e in est]  # type: ignore[union-attr]
            ax.errorbar([r.x for r in rows], med, yerr=[lo, hi], color=color, marker=marker, ms=4,
                        capsize=3, lw=1.5, ls="none" if guess else "-", label=s.name)
            _strip(ax, rows, metric, color, styles_index(styles, s.name))
            if metric == "tg" and guess:
                curve = sorted({**guess, **{r.x: m for r, m in zip(rows, med, strict=True)}}.items())
                ax.plot([x for x, _ in curve], [v for _, v in curve], ls=":", lw=1, color=color, alpha=0.7)
                ax.plot(sorted(guess), [guess[x] for x in sorted(guess)], ls="none", marker=marker, mfc="none",
                        ms=4, color=color, alpha=0.7, label=f"{s.name} (interpolated, not measured)")
        failed |= _failed(ax, s, color)
    ax.set_ylim(bottom=0)
    fa = _mark_full_attn(ax, data)
    _finish(ax, fig, path, _common_legend(data, fa, failed), title, ylabel)


def styles_index(styles: dict[str, tuple[str, str]], name: str) -> int:
    return list(styles).index(name)


def _strip(ax: Axes, rows: list[Row], metric: str, color: str, i: int) -> None:
    """One small dot per server start at each point, nudged sideways per series so series do not hide each other."""
    dx = 0.12 * (i - 0.5)
    xs, ys = [], []
    for r in rows:
        for c in r.starts(metric).centres:
            xs.append(r.x + dx)
            ys.append(c)
    ax.plot(xs, ys, ls="none", marker=".", ms=3.5, color=color, alpha=0.55)


def _context_plot(data: ReportData, path: Path) -> None:
    fig, ax = plt.subplots(figsize=(9, 5))
    styles = _styles(data.series)
    failed = False
    for s in data.series:
        color, marker = styles[s.name]
        rows = [r for r in s.ok_rows if r.n_ctx is not None]
        if rows:
            ax.plot([r.x for r in rows], [r.n_ctx for r in rows], color=color, marker=marker, ms=4, lw=1.5,
                    label=s.name)
        failed |= _failed(ax, s, color)
    if data.native_ctx:
        ax.axhline(data.native_ctx, color="black", ls="--", lw=1, label=f"native context ({data.native_ctx:,})")
    ax.set_ylim(bottom=0)
    ax.yaxis.set_major_formatter(ticker.FuncFormatter(lambda v, _: f"{v:,.0f}"))
    fa = _mark_full_attn(ax, data)
    _finish(ax, fig, path, _common_legend(data, fa, failed), "Context that fits vs offload", "context (tokens)")


def _memory_plot(data: ReportData, path: Path) -> None:
    fig, (ax_v, ax_r) = plt.subplots(1, 2, figsize=(13, 5))
    styles = _styles(data.series)
    parts_seen = False
    split_seen = False
    failed = False

    def draw(ax: Axes, s: Series, total: Callable[[Row], float | None],
             split: Callable[[Row], MemSplit | None]) -> bool:
        color, marker = styles[s.name]
        rows = [r for r in s.ok_rows if total(r) is not None]
        if not rows:
            return False
        ax.plot([r.x for r in rows], [total(r) for r in rows], color=color, marker=marker, ms=4, lw=1.8,
                label=s.name)
        with_split = [r for r in s.ok_rows if split(r) is not None]
        for part, ls in PART_STYLES.items():
            if with_split:
                ax.plot([r.x for r in with_split], [getattr(split(r), part) for r in with_split],
                        color=color, ls=ls, lw=1, alpha=0.8)
        return bool(with_split)

    for s in data.series:
        parts_seen |= draw(ax_v, s, lambda r: r.vram_mib if r.vram_mib is not None else (
            r.gpu_mem.total if r.gpu_mem else None), lambda r: r.gpu_mem)
        parts_seen |= draw(ax_r, s, lambda r: r.rss_mib, lambda r: r.host_mem)
        split_seen |= _host_split(ax_r, s, styles[s.name][0])
        failed |= _failed(ax_v, s, styles[s.name][0]) | _failed(ax_r, s, styles[s.name][0])
    extra = _common_legend(data, False, failed)
    if parts_seen:
        extra += [Line2D([], [], color="#555555", ls=ls, lw=1, label=part) for part, ls in PART_STYLES.items()]
    host_extra = [Line2D([], [], color="#555555", marker=m, lw=lw, alpha=a, label=f"host {name}")
                  for name, (m, lw, a) in HOST_SPLIT_STYLES.items()] if split_seen else []
    host_title = "Host memory: peak RSS = anonymous + file-backed" if split_seen else "Host memory (peak RSS)"
    for ax, title, ylabel in ((ax_v, "GPU memory (VRAM)", "MiB"), (ax_r, host_title, "MiB")):
        ax.set_ylim(bottom=0)
        fa = _mark_full_attn(ax, data)
        if not ax.lines:
            ax.text(0.5, 0.5, "not recorded", transform=ax.transAxes, ha="center", color="#777777")
        ax.set_ylabel(ylabel)
        ax.set_title(title, pad=14)
        ax.grid(True, alpha=0.3)
        h, labels = ax.get_legend_handles_labels()
        more = extra + (host_extra if ax is ax_r else []) + (
            [Line2D([], [], color="#999999", alpha=0.5, label="FA: full-attn layer")] if fa else [])
        if h or more:
            ax.legend(h + more, labels + [x.get_label() for x in more], fontsize=8, loc="best")
    fig.tight_layout()
    _save(fig, path)


def _host_split(ax: Axes, s: Series, color: str) -> bool:
    """Anonymous and file-backed peaks of one series on the host-memory axis."""
    seen = False
    for name, attr in (("anonymous", "rss_anon_mib"), ("file-backed", "rss_file_mib")):
        rows = [r for r in s.ok_rows if getattr(r, attr) is not None]
        if rows:
            m, lw, a = HOST_SPLIT_STYLES[name]
            ax.plot([r.x for r in rows], [getattr(r, attr) for r in rows], color=color, marker=m, ms=5, lw=lw,
                    alpha=a)
            seen = True
    return seen


def make_plots(data: ReportData, out_dir: Path) -> list[Plot]:
    """Write the PNGs into ``out_dir``; nothing when no point succeeded."""
    if not any(r.ok for r in data.all_rows):
        return []
    out_dir.mkdir(parents=True, exist_ok=True)
    fa = (" Light vertical lines (FA): ncmoe = L+1 for each full-attention layer L."
          if data.full_attn_layers and data.axis == "ncmoe" else "")
    plots = []
    axis = data.axis
    p = out_dir / "context.png"
    _context_plot(data, p)
    plots.append(Plot("context", f"Context vs {axis}", p,
                      "Largest context llama.cpp fitted into free memory at each offload; dashed: native context." + fa))
    for metric, title, ylabel in ((m.name, f"{m.title} vs {axis}", m.label) for m in registry.primary()):
        p = out_dir / f"{metric}.png"
        _speed_plot(data, metric, p, title, ylabel)
        guessed = (" Hollow markers on a dotted line: interpolated by the adaptive sweep, not measured."
                   if metric == "tg" and interpolated(data) else "")
        plots.append(Plot(metric, title, p, "Centre of each point's server starts (geometric mean of the start "
                          "medians); error bars: 95 % CI from ≥ 3 starts, the range of 2 starts; small dots: one per "
                          "server start; ×: failed point." + guessed + fa))
    for m in latency_metrics(data):    # shown in the Latency section (report.latency), not among these
        p = out_dir / f"{m.name}.png"
        _speed_plot(data, m.name, p, f"{m.title} vs {axis}", m.label)
        plots.append(Plot(f"latency-{m.name}", f"{m.title} vs {axis}", p, "Lower is better. Centre of each "
                          "point's server starts; error bars: 95 % CI from ≥ 3 starts, the range of 2 starts; small "
                          "dots: one per server start (its median request, or its percentile)." + fa))
    p = out_dir / "memory.png"
    _memory_plot(data, p)
    plots.append(Plot("memory", f"Memory vs {axis}", p,
                      "Solid: measured VRAM / peak RSS; host ▽ (thick): anonymous resident memory, × : file-backed "
                      "(the mmapped model file; the kernel can drop these pages) — RAM needed ≈ anonymous + CPU-side "
                      "weights (see Host memory); thin lines: llama.cpp's model / context / compute split "
                      "where recorded (GPU devices summed; host = Host + CPU buffers)." + fa))
    return plots
