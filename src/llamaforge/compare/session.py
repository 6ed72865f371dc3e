"""Commit (or backend) comparison: A vs B, measured interleaved, judged on server starts.

Sides: a pin name or a commit (with an optional ``--source`` for commits not in the mirror yet),
each with its backend, so ``A`` and ``B`` may be two commits on one backend or two backends of one
commit. Both are built through :func:`llamaforge.builds.build` (cached by key).

How it measures: in rounds; each round starts one llama-server (or one llama-bench process) per side
per open point, with its own discarded warm-up and ``repeats`` requests, in ABBA order (A B, then
B A, ...), which cancels slow drift between the sides. A server start is the unit of replication
(memory placement, thread pinning and clocks differ between starts, requests of one start share
them), so every statistic is computed from start medians by the judge (:mod:`llamaforge.judge`):
per point and metric the ratio B/A of the start-level centres with its 95 % CI and a three-way
verdict — **same** within ±``--min-effect``, **differs** (better or worse), **inconclusive** — with
Holm's method over all the points and metrics of the run.

``--launches auto`` (the default) starts with 3 rounds and adds a round, for the points whose verdict
is still inconclusive only, until every verdict is settled or ``--max-launches`` is reached (then
the point is *unresolved* and says so); each look spends part of α (:mod:`llamaforge.judge.sequential`).
From half the budget on, a point whose open verdicts the starts left could not settle even on a hopeful
reading stops there, unresolved, with what each would need (:mod:`llamaforge.judge.needs`).
``--launches K`` measures exactly K rounds.

Stored as a run of kind ``compare``: points labelled ``A.<round>`` / ``B.<round>`` (one stored
point per server start; the side is the part before the dot), the plan JSON holds the base/head
descriptions, the run summary holds the per-point, per-metric judgements (:mod:`.judged`) and where each
point stopped, and one ``probes`` row per side.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..console import console, notice
from ..errors import LlamaforgeError
from ..judge import INCONCLUSIVE, Policy
from ..judge.needs import Needs
from ..judge.sequential import DEFAULT_MAX_STARTS
from ..records import (
    DEFAULT_N_PREDICT,
    DEFAULT_PROMPT_TOKENS,
    DEFAULT_REPEATS,
    CompareSection,
    CompareSide,
    RunPlan,
    build_manifest,
)
from ..store import Probe, Store
from .judged import comparisons, summarize_run


class CompareError(LlamaforgeError):
    """A comparison that cannot run (too few repeats, unknown side, nothing measured)."""


@dataclass(frozen=True)
class Side:
    """One side of a comparison: what to build (``ref`` = pin name or commit) on which backend."""

    name: str                 # "A" (base) or "B" (head)
    ref: str
    backend: str
    source: str | None = None
    checkout: Path | None = None   # a llama.cpp checkout whose revision ``ref`` is (sources.localrepo)

    def describe(self) -> str:
        return f"{self.ref} ({self.backend})"


@dataclass
class CompareRequest:
    base: Side
    head: Side
    model: str
    points: list = field(default_factory=list)        # bench.plan.PointSpec
    repeats: int = DEFAULT_REPEATS                     # requests per server start
    rounds: int | None = None                          # server starts per side and point; None = auto
    min_effect: float = 0.05
    max_launches: int = DEFAULT_MAX_STARTS
    engine: str = "server"
    prompt_tokens: int = DEFAULT_PROMPT_TOKENS         # the options table's defaults (llamaforge.options.table)
    n_predict: int = DEFAULT_N_PREDICT
    threads: int | None = None
    extra_args: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.repeats < 1:
            raise CompareError(f"--repeats must be at least 1 (got {self.repeats})",
                               "e.g. --repeats 3 (requests per server start)")
        if self.rounds is not None and self.rounds < 1:
            raise CompareError(f"--launches must be at least 1 (got {self.rounds})", "e.g. --launches auto or --launches 5")
        if self.rounds is None and self.max_launches < Policy().min_starts:
            raise CompareError(f"--max-launches {self.max_launches} leaves --launches auto no room",
                               f"give --max-launches {Policy().min_starts} or more (auto starts with "
                               f"{Policy().min_starts} starts per side)")
        if not 0 <= self.min_effect < 1:
            raise CompareError(f"--min-effect {self.min_effect} is out of range", "give a fraction such as 0.05")

    @property
    def policy(self) -> Policy:
        """The sequential rule: auto = from 3 starts up to --max-launches; a fixed K = exactly K."""
        if self.rounds is None:
            return Policy(max_starts=self.max_launches)
        return Policy(min_starts=self.rounds, max_starts=self.rounds)

    @property
    def per_round(self) -> int:
        """Requests per server start."""
        return self.repeats

    @property
    def n_rounds(self) -> int:
        """The most rounds the run can take."""
        return self.policy.max_starts


def build_side(paths: Any, side: Side, opts: Any = None, pins: Any = None) -> Any:
    """Build (or reuse) one side: a pin name, or a commit (from the mirror or ``side.source``)."""
    from ..builds import BuildOptions, build
    from ..config import Pin, SourceSpec, load_pins
    from ..sources import checkout_commit

    opts = opts or BuildOptions()
    if side.checkout is not None:
        return _build_revision(paths, side, opts)
    pins = pins or load_pins(paths.pins_file)
    if side.ref in pins.pins or side.source is None:
        return build(paths, pins.resolve(side.ref), side.backend, opts)
    spec = SourceSpec.parse(side.source, where="--source")
    tree = checkout_commit(side.ref, paths, spec)
    return build(paths, Pin(name=side.ref[:9], commit=tree.commit, sources=(spec,)), side.backend, opts, tree=tree)


def _build_revision(paths: Any, side: Side, opts: Any) -> Any:
    """A side that is a revision (or ``WORKTREE``) of the user's llama.cpp checkout, built from a mirror worktree."""
    from ..builds.revisions import build_revisions
    from ..sources.localrepo import require_checkout

    return build_revisions(paths, require_checkout(side.checkout), [side.ref], [side.backend], opts)[0]


def _plan(req: CompareRequest, model_path: Path, builds: Sequence[Any]) -> Any:
    from ..bench.plan import make_plan, read_facts

    try:
        facts = read_facts(model_path)
    except Exception:  # noqa: BLE001 - facts only decorate the report
        facts = {}
    return make_plan(model_ref=req.model, model_path=model_path, model_facts=facts, points=list(req.points),
                     backends=sorted({b.backend for b in builds}), pins=[req.base.ref, req.head.ref], engine=req.engine,
                     repeats=req.per_round, prompt_tokens=req.prompt_tokens,
                     n_predict=req.n_predict, threads=req.threads, extra_args=list(req.extra_args),
                     build_keys=[b.key for b in builds])


def round_order(rnd: int, open_points: Sequence[int]) -> list[tuple[int, int, str]]:
    """(round, point index, side) of one round in measuring order: every open point, sides ABBA-alternated."""
    out = []
    for i in open_points:
        order = ("A", "B") if (rnd - 1 + i) % 2 == 0 else ("B", "A")
        out += [(rnd, i, s) for s in order]
    return out


def schedule(n_rounds: int, n_points: int) -> list[tuple[int, int, str]]:
    """(round, point index, side) of ``n_rounds`` full rounds in measuring order."""
    return [x for r in range(1, n_rounds + 1) for x in round_order(r, range(n_points))]


def _side(s: Side, bb: Any) -> CompareSide:
    variant = bb.to_record() if getattr(bb, "variant", None) is not None else None   # --base-variant / --head-variant
    return CompareSide(ref=s.ref, backend=s.backend, source=s.source, build=bb.key, commit=bb.commit,
                       variant=variant).keep_nulls("source")


def _compare_plan(req: CompareRequest, plan: Any, a: Any, b: Any) -> RunPlan:
    """The run's plan: the sweep plan both sides are measured with, and the compare section."""
    return plan.replace(compare=CompareSection(
        a=_side(req.base, a), b=_side(req.head, b), repeats=req.repeats,
        rounds=req.rounds if req.rounds is not None else "auto", max_launches=req.policy.max_starts,
        per_round=req.per_round, min_effect=req.min_effect,
        interleave="ABBA, one process per side per open point per round"))


def run_compare(paths: Any, store: Store, req: CompareRequest, *, builds: tuple[Any, Any] | None = None,
                command: str | None = None, progress: bool = True) -> str:
    """Build both sides, measure them interleaved (rounds while a verdict is open), store and summarise;
    returns the run id."""
    from ..bench.adjust import runtime_for
    from ..bench.plan import resolve_model
    from ..envinfo import collect_env

    a, b = builds or (build_side(paths, req.base), build_side(paths, req.head))
    model_path = resolve_model(req.model, paths)
    plan = _plan(req, model_path, (a, b))
    for side in (a, b):
        runtime_for(side, plan)      # recorded quirks / lavapipe defaults: announced, kept in the plan
    run_id = store.new_run("compare", _compare_plan(req, plan, a, b), command=command, env=collect_env(),
                           name=f"compare {req.base.describe()} vs {req.head.describe()}")
    for bb in (a, b):
        store.add_build(build_manifest(bb), run_id)
    by_side = {"A": a, "B": b}
    spent = {"A": 0.0, "B": 0.0}
    status = "interrupted"
    stops: dict[int, dict] = {}
    try:
        stops = _measure_rounds(req, plan, model_path, by_side, store, run_id, spent, progress)
        status = "done"
    finally:
        store.set_run_status(run_id, status)
        for s, bb in by_side.items():
            ref = req.base if s == "A" else req.head
            store.add_probe(Probe(run_id, 0 if s == "A" else 1, bb.commit, (bb.manifest.get("source") or {}).get("subject"),
                                  bb.key, s, None, spent[s], None, ref.describe()))
        store.set_run_summary(run_id, summarize_run(store, run_id, req.min_effect, policy=req.policy, stops=stops))
    return run_id


def _measure_rounds(req: CompareRequest, plan: Any, model_path: Path, by_side: dict, store: Store, run_id: str,
                    spent: dict[str, float], progress: bool) -> dict[int, dict]:
    """Rounds of ABBA starts over the open points; after the first ``min_starts`` rounds, a point stays open
    while one of its verdicts is inconclusive. Returns, per point index, where it stopped and why."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from ..bench import sweep

    pol = req.policy
    open_points = list(range(len(plan.points)))
    stops: dict[int, dict] = {}
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=console, transient=True, disable=not progress) as prog:
        task = prog.add_task("compare", total=2 * len(open_points) * pol.min_starts)
        rnd = 0
        while open_points and rnd < pol.max_starts:
            rnd += 1
            for _r, i, s in round_order(rnd, open_points):
                spec = plan.points[i]
                prog.update(task, description=f"round {rnd} ncmoe={spec.ncmoe} side {s}")
                t0 = time.monotonic()
                p = sweep.measure_point(by_side[s], model_path, spec, plan, store, run_id, label=f"{s}.{rnd}")
                spent[s] += time.monotonic() - t0
                if p.status != "ok":
                    notice(f"side {s} round {rnd} ncmoe={spec.ncmoe} failed: {p.failure_class}: {p.failure_detail}")
                prog.advance(task)
            if rnd >= pol.min_starts:
                rows = comparisons(store, run_id, req.min_effect, alpha=pol.look_alpha)
                still = _open_points(rows, plan.points)
                for i, why in _futile_points(rows, plan.points, still, pol, rnd).items():
                    still.discard(i)
                    stops[i] = {"k": rnd, "status": "unresolved", "reason": why}
                for i in open_points:
                    if i not in still and i not in stops:
                        stops[i] = {"k": rnd, "status": "resolved", "reason": "every verdict settled"}
                open_points = [i for i in open_points if i in still]
                if open_points and rnd < pol.max_starts:
                    prog.update(task, total=(prog.tasks[0].total or 0) + 2 * len(open_points))
    for i in open_points:
        stops[i] = {"k": rnd, "status": "unresolved" if pol.max_starts > pol.min_starts else "fixed",
                    "reason": (f"still inconclusive at the maximum of {pol.max_starts} starts per side"
                               if pol.max_starts > pol.min_starts else f"--launches {pol.max_starts}")}
    return stops


def _futile_points(rows: list[dict], points: Sequence[Any], still: set[int], pol: Policy, rnd: int) -> dict[int, str]:
    """Open points (from half the budget on) whose every inconclusive verdict the starts left could not settle
    (:meth:`llamaforge.judge.needs.Needs.futile`): ``--launches auto`` stops them now, unresolved, with what each
    would need."""
    if not (2 * rnd >= pol.max_starts and rnd < pol.max_starts):
        return {}
    out = {}
    for i in still:
        spec = points[i]
        open_ = [r for r in rows if (r["ncmoe"], r["ngl"]) == (spec.ncmoe, spec.ngl)
                 and (r.get("comparison") or {}).get("verdict") == INCONCLUSIVE]
        needs = [(r["metric"], Needs.from_dict(r["comparison"]["needs"])) for r in open_
                 if (r.get("comparison") or {}).get("needs")]
        if open_ and len(needs) == len(open_) and all(n.futile(pol.max_starts) for _m, n in needs):
            out[i] = (f"inconclusive at K={rnd}: " + "; ".join(f"{m} {n.text()}" for m, n in needs)
                      + f", beyond what --max-launches {pol.max_starts} allows")
    return out


def _open_points(rows: list[dict], points: Sequence[Any]) -> set[int]:
    """Indexes of ``points`` with a metric whose verdict is inconclusive (or not judged yet)."""
    out = set()
    for i, spec in enumerate(points):
        for r in rows:
            if (r["ncmoe"], r["ngl"]) == (spec.ncmoe, spec.ngl):
                c = r.get("comparison")
                if c is None or c.get("verdict") == INCONCLUSIVE:
                    out.add(i)
    return out
