"""A bisection session for real: commits from the mirror (``sources.first_parent_commits``),
incremental builds (:class:`llamaforge.builds.incremental.IncrementalBuilder`), llama-bench starts
into the store (run kind ``bisect``; one point per measured commit labelled with its short sha, one
launch per start; one ``probes`` row per build attempt), and what ``bisect`` prints.

The search itself (endpoints in sequential ABBA starts, the up-front refusal, probes judged against
both endpoints, the culprit's check) is :mod:`.search`; the settings that make starts quieter on the
CPU are :mod:`.quiet` and are recorded in the plan (``bisect.quiet``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..bench.plan import Plan, PointSpec, make_plan, read_facts, resolve_model
from ..bench.sweep import measure_launch
from ..builds.incremental import IncrementalBuilder, build_facts
from ..config import SourceSpec
from ..console import console, esc, notice
from ..envinfo import collect_env
from ..files import file_lock
from ..findings.bisection import result_lines
from ..judge.sequential import DEFAULT_MIN_STARTS
from ..llamacpp.options import build_options
from ..records import BisectSection, BisectSummary, ModelFacts, RunPlan, build_manifest
from ..sources import first_parent_commits, resolve_commit
from ..sources.mirror import Mirror
from ..store import Point, Probe, Store
from .quiet import Quiet, QuietRequest, settings
from .search import (
    BisectError,
    BisectRefused,
    ProbeResult,
    SearchResult,
    check_metric,
    max_measured,
    policy_for,
    search,
)


@dataclass
class BisectRequest:
    good: str
    bad: str
    metric: str = "tg"
    backend: str = "cpu"
    threshold: float = 0.05
    model: str = "synth:tiny-qwen35moe"
    repeats: int = 3                     # llama-bench -r: requests inside one start
    max_launches: int | None = None      # starts per commit at most (default: the judge's, 10)
    source: str | None = None            # "path:DIR" / "git:URL" for commits not in the mirror yet
    n_predict: int = 32
    prompt_tokens: int | None = None     # default: 16 for tg, 128 for pp
    threads: int | None = None           # default on CPU: the physical cores (see .quiet)
    quiet: bool = True                   # --cpu-strict/--prio/--poll where llama-bench has them
    ncmoe: int = 0                       # the MoE offload of the point measured (a history step's point)
    direction: int | None = None         # the change expected (+1 faster, −1 slower): a history step's; with
                                         # two adjacent commits the bisect is the commit's confirmation alone

    def __post_init__(self) -> None:
        check_metric(self.metric)
        if self.repeats < 1:
            raise BisectError(f"--repeats must be at least 1 (got {self.repeats})",
                              "e.g. --repeats 3 (requests inside one llama-bench start)")
        if self.max_launches is not None and self.max_launches < DEFAULT_MIN_STARTS:
            raise BisectError(f"--max-launches {self.max_launches} is below the {DEFAULT_MIN_STARTS} starts a commit "
                              "needs before the judge compares it", f"use --max-launches {DEFAULT_MIN_STARTS} or more "
                              "(default 10)")

    @property
    def policy(self) -> Any:
        return policy_for(self.max_launches)

    def quiet_request(self) -> QuietRequest:
        return QuietRequest(backend=self.backend, threads=self.threads, enabled=self.quiet)


def _session_lock(path: Path):  # noqa: ANN202
    return file_lock(path, f"another bisection uses {path.parent.name}; waiting for it")


def bisect_plan(req: BisectRequest, model_path: Path, quiet: Quiet | None = None) -> Plan:
    """The llama-bench plan of one start (``quiet``: the thread count and scheduling options to use)."""
    try:
        facts = read_facts(model_path)
    except Exception:  # noqa: BLE001 - facts are decoration here
        facts = ModelFacts()
    pt = req.prompt_tokens or (16 if req.metric == "tg" else 128)
    return make_plan(model_ref=req.model, model_path=model_path, model_facts=facts, points=[PointSpec(req.ncmoe)],
                     backends=[req.backend], pins=[], engine="llama-bench", repeats=req.repeats, prompt_tokens=pt,
                     n_predict=req.n_predict if req.metric == "tg" else 1,
                     threads=quiet.threads if quiet else req.threads, extra_args=list(quiet.args) if quiet else [])


class _Measurer:
    """Builds and single starts of a bisect run, stored as they happen (see the module doc)."""

    def __init__(self, store: Store, run_id: str, req: BisectRequest, model_path: Path, plan: RunPlan,
                 builder: Callable[[str], Any]) -> None:
        self.store, self.run_id, self.req, self.model_path = store, run_id, req, model_path
        self.plan, self.builder = plan, builder
        self.field = check_metric(req.metric)
        self.quiet: Quiet | None = None
        self.plans: dict[str, Plan] = {}          # build key → its plan (its own quiet options)
        self.points: dict[str, Point] = {}        # sha → the point with its starts so far
        self.notes: dict[str, str] = {}
        self.started: dict[str, float] = {}
        self.seq = 0

    def build(self, sha: str) -> Any:
        self.started[sha] = time.time()
        b = self.builder(sha)
        self.store.add_build(build_manifest(b), self.run_id)
        opts = sorted(build_options(b).bench)
        q = settings(self.req.quiet_request(), opts)
        if self.quiet is None:                    # the good endpoint's settings are the run's
            self.quiet = q
            bisect = (self.plan.bisect or BisectSection()).replace(quiet=q.to_dict())
            self.plan = bisect_plan(self.req, self.model_path, q).replace(bisect=bisect)
            self.store.update_run_plan(self.run_id, self.plan)
            console.print(esc(f"  quieter starts: {q.describe()}"))
        elif q.args != self.quiet.args:
            self.notes[sha] = f"measured with {' '.join(q.args) or 'no scheduling options'} ({q.describe()})"
        self.plans[b.key] = bisect_plan(self.req, self.model_path, q)
        return b

    def measure(self, sha: str, b: Any) -> list[float]:
        """One start of ``sha``'s build: its request values (``[]`` when it failed)."""
        acc = self.points.get(sha)
        launch = 1 + len(acc.launches) if acc else 1
        self.seq += 1
        p = measure_launch(b, self.model_path, PointSpec(self.req.ncmoe), self.plans[b.key], self.store, self.run_id,
                           label=sha[:9], launch=launch, seq=self.seq, acc=acc)
        self.points[sha] = p
        mine = [s for s in p.samples if s.launch == launch and not s.warmup]
        if p.launches and p.launches[-1].status != "ok":
            notice(f"{sha[:9]}: start {launch} failed ({p.failure_class}: {p.failure_detail})")
            return []
        return [float(v) for s in mine if (v := getattr(s, self.field)) is not None]

    def hook(self, p: ProbeResult, subjects: dict[str, str]) -> None:
        cached = incr = None
        key = None
        if p.built is not None:
            cached, incr, _ = build_facts(p.built, self.started.get(p.sha, 0))
            key = p.built.key
        note = "; ".join(x for x in (p.note, self.notes.get(p.sha), "cached build" if cached else "") if x)
        self.store.add_probe(Probe(self.run_id, p.seq, p.sha, subjects.get(p.sha), key, p.verdict, p.build_s,
                                   p.measure_s, incr, note or None))
        med = f"{p.median:.1f} t/s" if p.median is not None else "–"
        how = "cached" if cached else ("incremental" if incr else ("cold" if incr is False else ""))
        where = f" ({p.placement.fmt()})" if p.placement and p.verdict not in ("skip",) else ""
        console.print(f"  [{_color(p.verdict)}]{esc(f'{p.verdict:>13}')}[/] "
                      + esc(f"{p.sha[:9]} {med:>12} {p.k:>3} starts  build {p.build_s or 0:5.1f} s {how:<11}"
                            f" measure {p.measure_s or 0:5.1f} s  {subjects.get(p.sha, '')[:50]}{where}"))


def _run_plan(req: BisectRequest, model_path: Path, commits: list[str], subjects: dict, good: str, bad: str,
              builder: Any) -> RunPlan:
    pol = req.policy
    return bisect_plan(req, model_path).replace(bisect=BisectSection(
        good=req.good, bad=req.bad, good_sha=good, bad_sha=bad, metric=req.metric, backend=req.backend,
        threshold=req.threshold, repeats=req.repeats, source=req.source, commits=commits, subjects=subjects,
        max_measured=max_measured(len(commits) - 1), min_starts=pol.min_starts, max_launches=pol.max_starts,
        unit="one llama-bench process per start; --repeats requests inside it",
        build_dir=str(getattr(builder, "build_dir", "")), cold_start=getattr(builder, "cold_at_start", None),
    ).keep_nulls("source", "cold_start"))


def run_bisect(paths: Any, store: Store, req: BisectRequest, *, builder: Callable[[str], Any] | None = None,
               command: str | None = None) -> tuple[str, SearchResult]:
    """Bisect for real; returns (run id, result). Everything is stored as it happens; a refusal
    (:class:`BisectRefused`) is stored in the run's summary before it is raised."""
    spec = SourceSpec.parse(req.source, where="--source") if req.source else None
    good = resolve_commit(paths, req.good, spec)
    bad = resolve_commit(paths, req.bad, spec)
    if good == bad:
        raise BisectError(f"--good and --bad are the same commit ({good[:12]})", "give two different commits")
    commits = [good, *first_parent_commits(paths, good, bad, spec)]
    model_path = resolve_model(req.model, paths)
    mirror = Mirror(paths.mirror)
    subjects = {sha: mirror.subject(sha) for sha in commits}
    builder = builder or IncrementalBuilder(paths, req.backend)
    run_plan = _run_plan(req, model_path, commits, subjects, good, bad, builder)
    run_id = store.new_run("bisect", run_plan, command=command, env=collect_env(),
                           name=f"bisect {req.metric} {good[:9]}..{bad[:9]} ({req.backend})")
    pol = req.policy
    console.print("[bold]bisect[/] " + esc(
        f"{req.metric} on {req.backend}: {len(commits) - 1} commits after {good[:9]} (at most "
        f"{max_measured(len(commits) - 1)} measured for a clean step), {pol.min_starts}–{pol.max_starts} starts per "
        f"commit, {req.repeats} requests each — run {run_id}"))
    m = _Measurer(store, run_id, req, model_path, run_plan, builder)
    status, res = "failed", None
    try:
        with _session_lock(Path(paths.builds) / f"bisect-{req.backend}.session.lock"):
            res = search(commits, m.build, m.measure, threshold=req.threshold, metric=req.metric, policy=pol,
                         on_probe=lambda p: m.hook(p, subjects), direction=req.direction)
        status = "done"
    except BisectRefused as e:
        status, res = "refused", e.result
        e.fix = f"{e.fix}; the endpoints' starts are stored as run {run_id} (`llamaforge report {run_id}`)"
        raise
    finally:
        store.set_run_status(run_id, status)
        if res is not None:
            store.set_run_summary(run_id, summary(res, req, subjects, m.quiet))
    return run_id, res


def summary(res: SearchResult, req: BisectRequest, subjects: dict[str, str], quiet: Quiet | None) -> BisectSummary:
    return BisectSummary(status=res.status, first_bad=res.first_bad, subject=subjects.get(res.first_bad or "", None),
                         candidates=res.candidates, reason=res.reason, builds=res.builds, measured=res.measured,
                         skipped=res.skipped, starts=res.starts, endpoints=res.endpoints,
                         feasibility=res.feasibility.to_dict() if res.feasibility else None,
                         feasibility_line=res.feasibility.line(req.metric) if res.feasibility else None,
                         culprit=res.culprit, metric=req.metric, quiet=quiet.to_dict() if quiet else None,
                         probes=[p.to_dict() for p in res.probes])


def _color(verdict: str) -> str:
    return {"good": "green", "endpoint-good": "green", "bad": "red", "endpoint-bad": "red"}.get(verdict, "yellow")


def print_result(store: Store, run_id: str) -> None:
    run = store.get_run(run_id, "bisect")
    s = run.summary_as(BisectSummary)
    subjects = run.plan.bisect.subjects if run.plan.bisect else {}
    for i, line in enumerate(result_lines(s, subjects)):
        style = "bold red" if i == 0 and s.first_bad else ("bold yellow" if i == 0 else "")
        console.print(f"[{style}]{esc(line)}[/]" if style else esc(line))
    console.print(esc(f"{s.builds} builds, {s.measured} commits measured, {s.starts} starts"
                      + (f", skipped (did not build): {', '.join(x[:9] for x in s.skipped)}" if s.skipped else "")))


