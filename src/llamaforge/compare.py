"""Commit (or backend) comparison: A vs B, measured interleaved, judged with Mann–Whitney U.

Sides: a pin name or a commit (with an optional ``--source`` for commits not in the mirror yet),
each with its backend, so ``A`` and ``B`` may be two commits on one backend or two backends of one
commit. Both are built through :func:`llamaforge.builds.build` (cached by key).

How it interleaves, and why: the samples of one side are taken in ``rounds`` (default 3)
separate processes — one llama-server start (or one llama-bench call) per side per point per
round, each with its own warm-up that is discarded — in ABBA order (A B, then B A, then A B, ...).
A process start is itself a source of variance (memory placement, thread pinning, page cache), so
samples from several starts are more honest than ``repeats`` requests to one server; alternating
the order cancels drift (thermal, other load) between the sides. Per round a side takes
``ceil(repeats / rounds)`` samples, so ``repeats`` (≥ 4, default 6) is the minimum per side.

The statistics respect that nesting: requests of one server start are not independent, so each
side is a list of launches (clusters). The test is Mann–Whitney U on the launch medians (``n`` =
launches per side; 4 vs 4 is the smallest design that can reach p < 0.05, hence the default of
4 rounds) and the ratio's CI comes from a cluster bootstrap (launches, then requests within them).

Stored as a run of kind ``compare``: points labelled ``A.<round>`` / ``B.<round>`` (one stored
point per server start; the side is the part before the dot), the plan JSON holds the base/head
descriptions, the run summary holds the per-point, per-metric comparison (medians, ratio B/A
with a bootstrap CI, p, the asv-like mark), and one ``probes`` row per side.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.table import Table

from .console import console, esc, notice
from .errors import LlamaforgeError
from .metrics import FIELDS
from .records import build_manifest
from .stats import MIN_REPEATS, ClusteredComparison, cluster_summary, compare_clustered
from .store import Point, Probe, Run, Store

DEFAULT_ROUNDS = 4
#: launches per side below which Mann–Whitney on launch medians cannot reach p < 0.05
MIN_ROUNDS_FOR_SIGNIFICANCE = 4


class CompareError(LlamaforgeError):
    """A comparison that cannot run (too few repeats, unknown side, nothing measured)."""


@dataclass(frozen=True)
class Side:
    """One side of a comparison: what to build (``ref`` = pin name or commit) on which backend."""

    name: str                 # "A" (base) or "B" (head)
    ref: str
    backend: str
    source: str | None = None

    def describe(self) -> str:
        return f"{self.ref} ({self.backend})"


@dataclass
class CompareRequest:
    base: Side
    head: Side
    model: str
    points: list = field(default_factory=list)        # bench.plan.PointSpec
    repeats: int = 6
    rounds: int = DEFAULT_ROUNDS
    min_effect: float = 0.05
    engine: str = "server"
    prompt_tokens: int | None = None
    n_predict: int | None = None
    threads: int | None = None
    extra_args: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.repeats < MIN_REPEATS:
            raise CompareError(f"--repeats {self.repeats} is too few per side",
                               f"use at least {MIN_REPEATS} (default 6): Mann–Whitney with 3 vs 3 samples never reaches p < 0.05")
        if self.rounds < 1:
            raise CompareError(f"--rounds must be at least 1 (got {self.rounds})", "e.g. --rounds 3")
        if not 0 <= self.min_effect < 1:
            raise CompareError(f"--min-effect {self.min_effect} is out of range", "give a fraction such as 0.05")

    @property
    def per_round(self) -> int:
        return math.ceil(self.repeats / min(self.rounds, self.repeats))

    @property
    def n_rounds(self) -> int:
        return min(self.rounds, self.repeats)


def build_side(paths: Any, side: Side, opts: Any = None, pins: Any = None) -> Any:
    """Build (or reuse) one side: a pin name, or a commit (from the mirror or ``side.source``)."""
    from .builds import BuildOptions, build
    from .config import Pin, SourceSpec, load_pins
    from .sources import checkout_commit

    opts = opts or BuildOptions()
    pins = pins or load_pins(paths.pins_file)
    if side.ref in pins.pins or side.source is None:
        return build(paths, pins.resolve(side.ref), side.backend, opts)
    spec = SourceSpec.parse(side.source, where="--source")
    tree = checkout_commit(side.ref, paths, spec)
    return build(paths, Pin(name=side.ref[:9], commit=tree.commit, sources=(spec,)), side.backend, opts, tree=tree)


def side_of(label: str) -> str:
    return label.split(".", 1)[0]


def _plan(req: CompareRequest, model_path: Path, builds: Sequence[Any]) -> Any:
    from .bench.plan import DEFAULT_N_PREDICT, DEFAULT_PROMPT_TOKENS, Plan, read_facts

    try:
        facts = read_facts(model_path)
    except Exception:  # noqa: BLE001 - facts only decorate the report
        facts = {}
    return Plan(model_ref=req.model, model_path=model_path, model_facts=facts, points=list(req.points),
                backends=sorted({b.backend for b in builds}), pins=[req.base.ref, req.head.ref], engine=req.engine,
                repeats=req.per_round, prompt_tokens=req.prompt_tokens or DEFAULT_PROMPT_TOKENS,
                n_predict=req.n_predict or DEFAULT_N_PREDICT, threads=req.threads, extra_args=list(req.extra_args),
                build_keys=[b.key for b in builds])


def schedule(n_rounds: int, n_points: int) -> list[tuple[int, int, str]]:
    """(round, point index, side) in measuring order: per round every point, sides ABBA-alternated."""
    out = []
    for r in range(n_rounds):
        for i in range(n_points):
            order = ("A", "B") if (r + i) % 2 == 0 else ("B", "A")
            out += [(r + 1, i, s) for s in order]
    return out


def run_compare(paths: Any, store: Store, req: CompareRequest, *, builds: tuple[Any, Any] | None = None,
                command: str | None = None, progress: bool = True) -> str:
    """Build both sides, measure them interleaved, store and summarise; returns the run id."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from .bench import measure_point
    from .bench.plan import resolve_model
    from .envinfo import collect_env

    a, b = builds or (build_side(paths, req.base), build_side(paths, req.head))
    model_path = resolve_model(req.model, paths)
    plan = _plan(req, model_path, (a, b))
    from .bench.adjust import runtime_for

    for side in (a, b):
        runtime_for(side, plan)      # recorded quirks / lavapipe defaults: announced, kept in the plan
    pj = plan.to_json()
    pj["compare"] = {"A": {"ref": req.base.ref, "backend": req.base.backend, "source": req.base.source,
                           "build": a.key, "commit": a.commit},
                     "B": {"ref": req.head.ref, "backend": req.head.backend, "source": req.head.source,
                           "build": b.key, "commit": b.commit},
                     "repeats": req.repeats, "rounds": req.n_rounds, "per_round": req.per_round,
                     "min_effect": req.min_effect, "interleave": "ABBA, one process per side per point per round"}
    run_id = store.new_run("compare", pj, command=command, env=collect_env(),
                           name=f"compare {req.base.describe()} vs {req.head.describe()}")
    for bb in (a, b):
        store.add_build(build_manifest(bb), run_id)
    by_side = {"A": a, "B": b}
    spent = {"A": 0.0, "B": 0.0}
    order = schedule(req.n_rounds, len(plan.points))
    if req.n_rounds < MIN_ROUNDS_FOR_SIGNIFICANCE:
        notice(f"{req.n_rounds} server start(s) per side: the test runs on launch medians, which cannot reach "
               f"p < 0.05 with fewer than {MIN_ROUNDS_FOR_SIGNIFICANCE} per side (give --rounds 4 and --repeats ≥ 4)")
    status = "interrupted"
    try:
        with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                      console=console, transient=True, disable=not progress) as prog:
            task = prog.add_task("compare", total=len(order))
            for rnd, i, s in order:
                spec = plan.points[i]
                prog.update(task, description=f"round {rnd}/{req.n_rounds} ncmoe={spec.ncmoe} side {s}")
                t0 = time.monotonic()
                p = measure_point(by_side[s], model_path, spec, plan, store, run_id, label=f"{s}.{rnd}")
                spent[s] += time.monotonic() - t0
                if p.status != "ok":
                    notice(f"side {s} round {rnd} ncmoe={spec.ncmoe} failed: {p.failure_class}: {p.failure_detail}")
                prog.advance(task)
        status = "done"
    finally:
        store.set_run_status(run_id, status)
        for s, bb in by_side.items():
            ref = req.base if s == "A" else req.head
            store.add_probe(Probe(run_id, 0 if s == "A" else 1, bb.commit, (bb.manifest.get("source") or {}).get("subject"),
                                  bb.key, s, None, spent[s], None, ref.describe()))
        store.set_run_summary(run_id, summarize_run(store, run_id, req.min_effect))
    return run_id


def _groups(points: Sequence[Point], ncmoe: int, ngl: int, field_name: str) -> list[list[float]]:
    """One side's measured values per server start (one stored point per round, each possibly with launches)."""
    out: list[list[float]] = []
    for p in sorted(points, key=lambda q: q.label):
        if p.status == "ok" and p.ncmoe == ncmoe and p.ngl == ngl:
            out += [g for g in p.launch_groups(field_name) if g]
    return out


def _side_dict(groups: list[list[float]]) -> dict | None:
    cs = cluster_summary(groups)
    if cs is None:
        return None
    return {**cs.to_dict(), "n": cs.n_requests, "shape": cs.shape}


def comparisons(store: Store, run_id: str, min_effect: float = 0.05) -> list[dict]:
    """Per point and metric: side summaries and the comparison (B relative to A)."""
    pts = store.points(run_id)
    return compare_sides([p for p in pts if side_of(p.label) == "A"], [p for p in pts if side_of(p.label) == "B"],
                         min_effect)


def compare_sides(pts_a: Sequence[Point], pts_b: Sequence[Point], min_effect: float = 0.05) -> list[dict]:
    """Per point (ncmoe, ngl) and metric: the two sides' summaries and B relative to A; each side's launches
    (server starts) are its clusters."""
    keys = sorted({(p.ncmoe, p.ngl) for p in [*pts_a, *pts_b]})
    rows = []
    for ncmoe, ngl in keys:
        for metric, fname in FIELDS.items():
            ga, gb = _groups(pts_a, ncmoe, ngl, fname), _groups(pts_b, ncmoe, ngl, fname)
            c: ClusteredComparison | None = compare_clustered(ga, gb, min_effect=min_effect)
            rows.append({"ncmoe": ncmoe, "ngl": ngl, "metric": metric, "A": _side_dict(ga), "B": _side_dict(gb),
                         "comparison": c.to_dict() if c else None})
    return rows


def summarize_run(store: Store, run_id: str, min_effect: float = 0.05) -> dict:
    pts = store.points(run_id)
    return {"comparisons": comparisons(store, run_id, min_effect), "min_effect": min_effect,
            "points": len(pts), "failed": sum(1 for p in pts if p.status != "ok")}


_VERDICT = {"better": "[green]better[/]", "worse": "[red]worse[/]", "same": "no significant change"}


def fmt_side(d: dict | None) -> str:
    if not d:
        return "–"
    n = d.get("shape") or f"n={d['n']}"
    return f"{d['median']:.1f} [{d['ci_low']:.1f}, {d['ci_high']:.1f}] ({n})" + (" ⚠" if d.get("unstable") else "")


def fmt_cmp(c: dict | None) -> tuple[str, str, str]:
    if not c:
        return "–", "–", "same"
    return (f"{c['ratio']:.3f} [{c['ratio_ci_low']:.3f}, {c['ratio_ci_high']:.3f}]", f"{c['p_value']:.3g}", c["verdict"])


def side_text(d: dict) -> str:
    """``ref (backend)``, plus ``on MACHINE`` for a side measured on a fleet host."""
    return f"{d.get('ref')} ({d.get('backend')})" + (f" on {d['machine']}" if d.get("machine") else "")


def compare_table(run: Run) -> Table:
    """The rich table of a stored compare run (medians with 95 % CI and n, ratio B/A, p, mark)."""
    c = run.plan.get("compare", {})
    a, b = c.get("A", {}), c.get("B", {})
    t = Table(title=esc(f"compare {run.id}: A = {side_text(a)} vs B = {side_text(b)}"))
    for col in ("ncmoe", "metric", "A t/s median [CI] (launches×req)", "B t/s median [CI] (launches×req)", "B/A [CI]",
                "p (launches)", "verdict"):
        t.add_column(col, justify="left" if col in ("metric", "verdict") else "right")
    for r in (run.summary or {}).get("comparisons", []):
        ratio, p, verdict = fmt_cmp(r["comparison"])
        t.add_row(str(r["ncmoe"]) + ("" if r["ngl"] == -1 else f" ngl={r['ngl']}"), esc(r["metric"]), fmt_side(r["A"]),
                  fmt_side(r["B"]), ratio, p, _VERDICT[verdict])
    return t


def worse_rows(run: Run) -> list[str]:
    """``"tg at ncmoe 0 (B/A 0.41)"`` for every metric and point of a compare run whose verdict is worse."""
    out = []
    for r in (run.summary or {}).get("comparisons", []):
        c = r.get("comparison") or {}
        if c.get("verdict") == "worse":
            where = f"ncmoe {r['ncmoe']}" + ("" if r.get("ngl", -1) == -1 else f" ngl {r['ngl']}")
            out.append(f"{r['metric']} at {where} (B/A {c['ratio']:.3f}, p {c['p_value']:.3g})")
    return out


def print_compare(store: Store, run_id: str) -> None:
    run = store.get_run(run_id, "compare")
    console.print(compare_table(run))
    s = run.summary or {}
    console.print(f"minimum effect {s.get('min_effect', 0.05):.0%}, α = 0.05 (Mann–Whitney U, two-sided, on launch "
                  "medians: n = server starts per side, not requests); CI: 95 % cluster bootstrap (launches, then "
                  "requests) of the median / of the ratio of medians")
    if s.get("failed"):
        notice(f"{s['failed']} of {s.get('points')} measured points failed (see `llamaforge runs {run.id} --failed`)")
