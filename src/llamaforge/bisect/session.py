"""A bisection session for real: commits from the mirror (``sources.first_parent_commits``),
incremental builds (:class:`llamaforge.builds.incremental.IncrementalBuilder`), llama-bench
measurements into the store (run kind ``bisect``, one ``probes`` row per build attempt, one point
per measured commit labelled with its short sha), and what ``bisect`` prints.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..bench.plan import Plan, PointSpec, read_facts, resolve_model
from ..bench.sweep import measure_point
from ..builds.incremental import IncrementalBuilder, build_facts
from ..config import SourceSpec
from ..console import console, esc, notice
from ..envinfo import collect_env
from ..files import file_lock
from ..records import build_manifest
from ..sources import first_parent_commits, resolve_commit
from ..sources.mirror import Mirror
from ..stats import MIN_REPEATS
from ..store import Probe, Run, Store
from .search import BisectError, ProbeResult, SearchResult, check_metric, max_measured, search


@dataclass
class BisectRequest:
    good: str
    bad: str
    metric: str = "tg"
    backend: str = "cpu"
    threshold: float = 0.05
    model: str = "synth:tiny-qwen35moe"
    repeats: int = 5
    source: str | None = None            # "path:DIR" / "git:URL" for commits not in the mirror yet
    n_predict: int = 32
    prompt_tokens: int | None = None     # default: 16 for tg, 128 for pp
    threads: int | None = None

    def __post_init__(self) -> None:
        check_metric(self.metric)
        if self.repeats < MIN_REPEATS:
            raise BisectError(f"--repeats {self.repeats} is too few to tell two commits apart",
                              f"use at least {MIN_REPEATS} (Mann–Whitney with 3 vs 3 samples can never reach p < 0.05)")


def _session_lock(path: Path):  # noqa: ANN202
    return file_lock(path, f"another bisection uses {path.parent.name}; waiting for it")


def bisect_plan(req: BisectRequest, model_path: Path) -> Any:
    try:
        facts = read_facts(model_path)
    except Exception:  # noqa: BLE001 - facts are decoration here
        facts = {}
    pt = req.prompt_tokens or (16 if req.metric == "tg" else 128)
    return Plan(model_ref=req.model, model_path=model_path, model_facts=facts, points=[PointSpec(0)],
                backends=[req.backend], pins=[], engine="llama-bench", repeats=req.repeats, prompt_tokens=pt,
                n_predict=req.n_predict if req.metric == "tg" else 1, threads=req.threads)


def run_bisect(paths: Any, store: Store, req: BisectRequest, *, builder: Callable[[str], Any] | None = None,
               command: str | None = None) -> tuple[str, SearchResult]:
    """Bisect for real; returns (run id, result). Everything is stored as it happens."""
    field_name = check_metric(req.metric)
    spec = SourceSpec.parse(req.source, where="--source") if req.source else None
    good = resolve_commit(paths, req.good, spec)
    bad = resolve_commit(paths, req.bad, spec)
    if good == bad:
        raise BisectError(f"--good and --bad are the same commit ({good[:12]})", "give two different commits")
    commits = [good, *first_parent_commits(paths, good, bad, spec)]
    model_path = resolve_model(req.model, paths)
    plan = bisect_plan(req, model_path)
    mirror = Mirror(paths.mirror)
    subjects = {sha: mirror.subject(sha) for sha in commits}
    builder = builder or IncrementalBuilder(paths, req.backend)
    cold = getattr(builder, "cold_at_start", None)
    plan_json = {**plan.to_json(), "bisect": {
        "good": req.good, "bad": req.bad, "good_sha": good, "bad_sha": bad, "metric": req.metric,
        "backend": req.backend, "threshold": req.threshold, "repeats": req.repeats, "source": req.source,
        "commits": commits, "subjects": subjects, "max_measured": max_measured(len(commits) - 1),
        "build_dir": str(getattr(builder, "build_dir", "")), "cold_start": cold}}
    run_id = store.new_run("bisect", plan_json, command=command, env=collect_env(),
                           name=f"bisect {req.metric} {good[:9]}..{bad[:9]} ({req.backend})")
    console.print("[bold]bisect[/] " + esc(f"{req.metric} on {req.backend}: {len(commits) - 1} commits after {good[:9]} "
                                           f"(at most {max_measured(len(commits) - 1)} measured for a clean step) — run {run_id}"))
    started: dict[str, float] = {}

    def do_build(sha: str) -> Any:
        started[sha] = time.time()
        b = builder(sha)
        store.add_build(build_manifest(b), run_id)
        return b

    def do_measure(sha: str, b: Any) -> list[float]:
        p = measure_point(b, model_path, plan.points[0], plan, store, run_id, label=sha[:9])
        if p.status != "ok":
            notice(f"{sha[:9]}: measurement failed ({p.failure_class}: {p.failure_detail})")
            return []
        return p.measured(field_name)

    def hook(p: ProbeResult) -> None:
        cached = incr = None
        secs = p.build_s
        key = None
        if p.built is not None:
            cached, incr, _ = build_facts(p.built, started.get(p.sha, 0))
            key = p.built.key
        note = p.note or ("cached build" if cached else "")
        store.add_probe(Probe(run_id, p.seq, p.sha, subjects.get(p.sha), key, p.verdict, secs, p.measure_s,
                              incr, note or None))
        med = f"{p.median:.1f} t/s" if p.median is not None else "–"
        how = "cached" if cached else ("incremental" if incr else ("cold" if incr is False else ""))
        console.print(f"  [{_color(p.verdict)}]{esc(f'{p.verdict:>13}')}[/] "
                      + esc(f"{p.sha[:9]} {med:>12}  build {secs or 0:5.1f} s {how:<11}"
                            f" measure {p.measure_s or 0:5.1f} s  {subjects.get(p.sha, '')[:60]}"))

    status = "failed"
    try:
        with _session_lock(Path(paths.builds) / f"bisect-{req.backend}.session.lock"):
            res = search(commits, do_build, do_measure, threshold=req.threshold, metric=req.metric, on_probe=hook)
        status = "done"
    finally:
        store.set_run_status(run_id, status)
    summary = {"first_bad": res.first_bad, "subject": subjects.get(res.first_bad or "", None),
               "candidates": res.candidates, "builds": res.builds, "measured": res.measured, "skipped": res.skipped,
               "endpoints": res.endpoint_comparison, "metric": req.metric,
               "probes": [p.to_dict() for p in res.probes]}
    store.set_run_summary(run_id, summary)
    return run_id, res


def _color(verdict: str) -> str:
    return {"good": "green", "endpoint-good": "green", "bad": "red", "endpoint-bad": "red"}.get(verdict, "yellow")


def print_result(store: Store, run_id: str) -> None:
    run = store.get_run(run_id, "bisect")
    s = run.summary or {}
    if s.get("first_bad"):
        console.print(f"[bold red]first bad commit:[/] {esc(s['first_bad'])}  {esc(s.get('subject') or '')}")
    elif s.get("candidates"):
        console.print("[bold yellow]only skipped commits are left; the first bad commit is one of:[/]")
        for c in s["candidates"]:
            console.print(esc(f"  {c}  {run.plan.get('bisect', {}).get('subjects', {}).get(c, '')}"))
    console.print(esc(f"{s.get('builds')} builds, {s.get('measured')} commits measured"
                      + (f", skipped (did not build): {', '.join(x[:9] for x in s['skipped'])}" if s.get("skipped") else "")))


def probe_rows(store: Store, run: Run) -> list[dict]:
    """Probes of a bisect run in commit order with their medians (from the stored summary)."""
    b = run.plan.get("bisect", {})
    order = {sha: i for i, sha in enumerate(b.get("commits", []))}
    meds = {p["sha"]: p for p in (run.summary or {}).get("probes", [])}
    rows = []
    for pr in store.probes(run.id):
        d = meds.get(pr.commit_sha, {})
        rows.append({"index": order.get(pr.commit_sha), "sha": pr.commit_sha, "subject": pr.subject or "",
                     "verdict": pr.verdict, "median": d.get("median"), "values": d.get("values", []),
                     "build_s": pr.build_s, "measure_s": pr.measure_s, "incremental": pr.incremental,
                     "note": pr.note or "", "seq": pr.seq})
    return rows
