"""What a sweep shows while it runs and after: the progress bar with one row per finished point,
the per-point table of a run and its notes."""

from __future__ import annotations

import shlex
from collections.abc import Sequence

from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table

from ..console import console, esc, notice
from ..findings.conditions import describe as describe_telemetry
from ..findings.conditions import flags as telemetry_flags
from ..llamacpp.rpc import series_of
from ..pathsafe import component
from ..store import Point, Store
from .plan import BuildLike, PointSpec
from .schedule import Slot
from .summary import fmt_latency, fmt_metric, latency_metrics, run_summary, shape


class SweepDisplay:
    """Rich progress (point i/N, phase, ETA) plus one printed row per finished point."""

    def __init__(self, total: int, enabled: bool) -> None:
        self.enabled = enabled
        self.progress = Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(),
                                 MofNCompleteColumn(), TimeElapsedColumn(), TextColumn("ETA"),
                                 TimeRemainingColumn(), console=console, transient=True, disable=not enabled)
        self.task = self.progress.add_task("", total=total)
        self.head = ""

    def __enter__(self) -> SweepDisplay:
        self.progress.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.__exit__(*exc)

    def point(self, i: int, n: int, build: BuildLike, spec: PointSpec, slot: Slot | None = None,
              launches: int = 1) -> None:
        split = series_of(spec.split_mode, spec.tensor_split)
        self.head = esc(f"{i}/{n} {build.backend} " + (spec.place or f"ncmoe={spec.ncmoe}")
                        + (f" ngl={spec.ngl}" if spec.ngl != -1 else "") + (f" {split}" if split else ""))
        if slot is not None and slot.sentinel:
            self.head += f" [magenta]sentinel {slot.launch}[/]"
        elif slot is not None and launches > 1:
            self.head += f" launch {slot.launch}/{launches}"

    def skip(self) -> None:
        self.progress.advance(self.task)

    def phase(self, phase: str) -> None:
        self.progress.update(self.task, description=f"{self.head} [cyan]{esc(phase)}[/]")

    def done(self, p: Point, slot: Slot | None = None, launches: int = 1) -> None:
        self.progress.advance(self.task)
        tag = ""
        if slot is not None and slot.sentinel:
            tag = f" sentinel {slot.launch}"
        elif slot is not None and launches > 1:
            tag = f" L{slot.launch}/{launches}"
        if p.ngl != -1:
            tag = f" ngl={p.ngl:<3}" + tag
        if p.detail.moved:      # --place: the strategy, not only how many layers it moves
            tag = f" {p.detail.moved.get('strategy', '')}" + tag
        if p.status == "ok":
            line = "[green]✓[/] " + esc(f"{p.build_key[:24]} ncmoe={p.ncmoe:<3}{tag} ctx={p.n_ctx or '–':<8} "
                                        f"pp {fmt_metric(p, 'pp_tps')}  tg {fmt_metric(p, 'tg_tps')}"
                                        + "".join(f"  {m.label} {fmt_latency(p, m, with_n=False)}"
                                                  for m in latency_metrics([p]))
                                        + (f"  RSS {p.rss_peak_mib:,.0f} MiB" if p.rss_peak_mib else "")
                                        + (f"  VRAM {p.vram_self_mib or p.vram_used_mib:,.0f} MiB"
                                           if (p.vram_self_mib or p.vram_used_mib) else ""))
            line += f" [dim]({esc(p.engine)})[/]" if p.engine != "server" else ""
            tel = p.detail.telemetry
            if telemetry_flags(tel):
                line += f"  [yellow]⚑ {esc(describe_telemetry(tel))}[/]"
        else:
            line = (f"[red]✗[/] {esc(f'{p.build_key[:24]} ncmoe={p.ncmoe:<3}{tag}')} [red]{esc(p.failure_class)}[/]: "
                    + esc(p.failure_detail))
        if self.enabled:
            self.progress.console.print(line, soft_wrap=True)


def points_table(points: Sequence[Point], title: str | None = None) -> Table:
    """Finished points: context, memory, speeds as ``median [95 % CI]`` (cluster bootstrap over launches;
    n = launches × requests per launch)."""
    tab = Table(title=title, show_lines=False,
                caption="t/s: median [95 % CI, cluster bootstrap over launches]; n = launches×requests; ⚠ CV > 10 %")
    lat = latency_metrics(points)     # TTFT, latency percentiles: only where this run measured them
    for col in ("build", "ncmoe", "ngl", "status", "ctx", "RSS MiB", "VRAM MiB", "prompt", "n", "pp t/s", "tg t/s",
                *[m.label for m in lat]):
        tab.add_column(col, justify="right" if col not in ("build", "status") else "left",
                       no_wrap=col not in ("pp t/s", "tg t/s", "build"))
    for p in points:
        vram = p.vram_self_mib if p.vram_self_mib is not None else p.vram_used_mib
        fit_status = p.detail.fit_status
        status = p.status if p.status == "ok" else f"[red]{esc(p.failure_class)}[/]"
        if p.status == "ok" and fit_status in ("refused", "refused-unfitted", "unsupported"):
            status = f"[yellow]ok, fit {esc(fit_status)}[/]"
        n = shape(p) if any(not s.warmup for s in p.samples) else ""
        tab.add_row(esc(p.build_key) + (f" [magenta]{esc(p.label)}[/]" if p.label else ""), str(p.ncmoe),
                    "all" if p.ngl == -1 else str(p.ngl), status,
                    f"{p.n_ctx:,}" if p.n_ctx else "–", f"{p.rss_peak_mib:,.0f}" if p.rss_peak_mib else "–",
                    f"{vram:,.0f}" if vram is not None else "–", str(p.prompt_tokens or "–"), n or "–",
                    fmt_metric(p, "pp_tps", with_n=False), fmt_metric(p, "tg_tps", with_n=False),
                    *[fmt_latency(p, m, with_n=False) for m in lat])
    return tab


def print_run(store: Store, run_id: str) -> None:
    """The per-point table of a run, with a note on unstable points."""
    run = store.get_run(run_id)
    pts = store.points(run_id)
    console.print(points_table(pts, title=esc(f"run {run.id} ({run.kind}, {run.status})")))
    launches = int(run.plan.launches or 1)
    if run.kind == "sweep" and launches == 1:
        notice("each point ran in ONE server start (--launches 1): between-process spread was not measured, "
               "so the CIs cover only request-to-request spread (use --launches 2 or more)")
    s = run_summary(store, run_id)
    if s.unstable_points:
        notice(f"{s.unstable_points} point(s) have a coefficient of variation above 10 % (⚠): "
               "raise --repeats or check for background load")
    machines = (s.machines or {}).get("launches") or {}
    if len(machines) > 1:
        per = ", ".join(f"{m}" + (f" ({v['host']})" if v.get("host") else "") + f": {v['launches']}"
                        for m, v in machines.items())
        mixed = (s.machines or {}).get("mixed_points") or []
        notice(f"this run's launches come from {len(machines)} machines ({per})"
               + (f"; {len(mixed)} point(s) mix machines (marked in the report)" if mixed else ""))
    if s.failed:
        notice(f"{s.failed} point(s) failed: " + ", ".join(f"{k}×{v}" for k, v in s.failures.items())
               + f" (log tails: `llamaforge runs {shlex.quote(run.id)} --failed`; logs under results/logs/{component(run.id)}/)")
