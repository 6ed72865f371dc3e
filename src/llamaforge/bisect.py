"""Performance bisection: the first commit on a first-parent range that made a metric slower.

Two layers, so the search can be tested without building anything:

* :func:`search` — pure binary search over ``[good, c1, ..., bad]`` given two callables,
  ``build(sha)`` (raise :class:`~llamaforge.errors.BuildError` for a commit that does not build:
  it is *skipped*, like ``git bisect``'s exit 125, and the nearest unskipped neighbour of the
  midpoint is probed instead) and ``measure(sha, built) -> samples``. The endpoints are measured
  first; when they do not differ significantly (Mann–Whitney U plus the minimum effect
  ``threshold``) it refuses, with the numbers. Each probe is called good or bad by which
  endpoint it matches (:func:`classify`: best sample, log scale). A clean step (no skips)
  measures at most ⌈log2 N⌉ + 2 commits (N = commits after good).
* :func:`run_bisect` — the real thing: commits from the mirror (``sources.first_parent_commits``),
  incremental builds, llama-bench measurements into the store (run kind ``bisect``, one ``probes``
  row per build attempt, one point per measured commit labelled with its short sha).

Incremental builds: ONE git worktree and ONE CMake build tree per backend live under
``<build root>/bisect-<backend>/`` (``tree/`` and ``build/``) and are reused by every session of
that backend (a lock serialises sessions). Each probe moves the worktree with
``git checkout --detach --force <sha>`` — git rewrites only the files that differ, so ninja
recompiles only those (plus the build-info object and the links) — and builds with
``build(..., tree=..., build_dir=<that dir>)``, which publishes the binaries under the commit's key
directory: a later probe of the same commit is a cache hit. The first build of a fresh session dir
is cold (CMake configure and every object from scratch, fed by ccache when it has the files).

:func:`bisect_run_verdict` is the core of ``bisect-run``, a ``git bisect run`` helper that builds the
current checkout of a source dir in place and exits 0 (good) / 1 (bad) / 125 (does not build).
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from . import proc
from .console import console, esc, notice
from .errors import BuildError, LlamaforgeError
from .files import file_lock
from .metrics import FIELDS
from .records import build_manifest
from .stats import MIN_REPEATS, compare, summarize
from .store import Probe, Run, Store


class BisectError(LlamaforgeError):
    """A bisection that cannot start or cannot go on (endpoints equal, endpoint does not build, ...)."""


def check_metric(metric: str) -> str:
    """``tg`` / ``pp`` → the sample field; anything else is a clear error."""
    if metric not in FIELDS:
        raise BisectError(f"unknown metric {metric!r} (llamaforge measures tg and pp)",
                          "use --metric tg (generation t/s) or --metric pp (prompt processing t/s)")
    return FIELDS[metric]


def max_measured(n_after_good: int) -> int:
    """The most commits a clean bisection measures: ⌈log2 N⌉ + 2 (the endpoints)."""
    return (math.ceil(math.log2(n_after_good)) if n_after_good > 1 else 0) + 2


# ------------------------------------------------------------------------------------ the search


def classify(values: Sequence[float], good: Sequence[float], bad: Sequence[float]) -> str:
    """``good`` / ``bad``: which endpoint a probe's samples match.

    Compares the *best* sample (highest t/s) of each, on a log scale. Why not the median: other
    processes on the machine only ever slow a run down (on the shared 2-core box a good commit's
    median fell from 92 to 34 t/s under load and was called bad), so the fastest repetition is the
    most reproducible estimate of what the code can do (the ``timeit`` argument), while a real
    slowdown caps even the best repetition. The log scale makes 2× slower and 2× faster equally far.
    The endpoints themselves are still compared on all samples (Mann–Whitney + minimum effect).
    """
    v, g, b = max(values), max(good), max(bad)
    if min(v, g, b) <= 0:
        return "good" if abs(v - g) <= abs(v - b) else "bad"
    return "good" if abs(math.log(v / g)) <= abs(math.log(v / b)) else "bad"


@dataclass
class ProbeResult:
    """One build attempt (and, unless skipped, one measurement) of one commit."""

    seq: int
    index: int                  # position in [good, ..., bad]
    sha: str
    verdict: str                # endpoint-good | endpoint-bad | good | bad | skip
    values: list[float] = field(default_factory=list)
    build_s: float | None = None
    measure_s: float | None = None
    note: str = ""
    built: Any = None           # whatever build() returned (a Build) — not serialised

    @property
    def median(self) -> float | None:
        s = summarize(self.values)
        return s.median if s else None

    def to_dict(self) -> dict:
        d = asdict(self)
        d.pop("built", None)
        d["median"] = self.median
        return d


@dataclass
class SearchResult:
    commits: list[str]                       # [good, ..., bad]
    probes: list[ProbeResult]
    first_bad: str | None                    # None only when skips leave several candidates
    candidates: list[str]                    # [first_bad] or the commits skips could not separate
    endpoint_comparison: dict

    @property
    def builds(self) -> int:
        return len(self.probes)

    @property
    def measured(self) -> int:
        return sum(1 for p in self.probes if p.verdict != "skip")

    @property
    def skipped(self) -> list[str]:
        return [p.sha for p in self.probes if p.verdict == "skip"]


BuildFn = Callable[[str], Any]
MeasureFn = Callable[[str, Any], Sequence[float]]
ProbeHook = Callable[[ProbeResult], None]


def _pick(lo: int, hi: int, skipped: set[int]) -> int | None:
    """The untested index nearest the midpoint of (lo, hi), lower one first on ties."""
    mid = (lo + hi) // 2
    cands = [i for i in range(lo + 1, hi) if i not in skipped]
    return min(cands, key=lambda i: (abs(i - mid), i)) if cands else None


def search(commits: Sequence[str], build: BuildFn, measure: MeasureFn, *, threshold: float = 0.05,
           metric: str = "tg", on_probe: ProbeHook | None = None) -> SearchResult:
    """Binary search for the first commit of ``commits[1:]`` whose metric matches ``commits[-1]``'s.

    ``commits`` is ``[good, ..., bad]`` (oldest first). Raises :class:`BisectError` when an
    endpoint does not build or is not measured, or when the endpoints do not differ."""
    if len(commits) < 2:
        raise BisectError("the range has no commits after the good one", "give a bad commit that descends from the good one")
    on_probe = on_probe or (lambda _p: None)
    probes: list[ProbeResult] = []

    def attempt(i: int, endpoint: str | None) -> ProbeResult:
        """Build and measure commit ``i``; the probe is recorded (and reported) before returning."""
        sha = commits[i]
        p = ProbeResult(seq=len(probes), index=i, sha=sha, verdict=endpoint and f"endpoint-{endpoint}" or "skip")
        probes.append(p)
        t0 = time.monotonic()
        try:
            p.built = build(sha)
        except BuildError as e:
            p.build_s = time.monotonic() - t0
            p.verdict = "skip"
            p.note = f"does not build: {e.first_error or e.message}"
            on_probe(p)
            if endpoint:
                raise BisectError(f"the {endpoint} endpoint {sha[:12]} does not build ({p.note})",
                                  f"pick a {endpoint} commit that builds (see {e.log_path or 'the build log'})") from e
            notice(f"skipping {sha[:12]} ({p.note}), as git bisect does with exit code 125")
            return p
        p.build_s = time.monotonic() - t0
        t1 = time.monotonic()
        p.values = [float(v) for v in measure(sha, p.built)]
        p.measure_s = time.monotonic() - t1
        if not p.values:
            p.verdict = "skip"
            p.note = f"measurement gave no {metric} samples"
            on_probe(p)
            if endpoint:
                raise BisectError(f"the {endpoint} endpoint {sha[:12]} gave no {metric} samples",
                                  "check the model and the build (try `llamaforge verify`)")
            return p
        if not endpoint:
            p.verdict = classify(p.values, good.values, bad.values)
        on_probe(p)
        return p

    good = attempt(0, "good")
    bad = attempt(len(commits) - 1, "bad")
    cmp = compare(good.values, bad.values, min_effect=threshold)
    assert cmp is not None
    if not cmp.significant:
        sg, sb = summarize(good.values), summarize(bad.values)
        raise BisectError(
            f"the endpoints do not differ significantly in {metric}: good {commits[0][:9]} {sg.fmt() if sg else '–'} "
            f"vs bad {commits[-1][:9]} {sb.fmt() if sb else '–'} t/s (ratio {cmp.ratio:.3f}, p = {cmp.p_value:.3g}, "
            f"minimum effect {threshold:.0%})",
            "check the endpoints, lower --threshold, or raise --repeats to see a smaller change")

    lo, hi = 0, len(commits) - 1
    skipped: set[int] = set()
    while hi - lo > 1:
        i = _pick(lo, hi, skipped)
        if i is None:
            break
        p = attempt(i, None)
        if p.verdict == "skip":
            skipped.add(i)
        elif p.verdict == "good":
            lo = i
        else:
            hi = i
    if hi - lo > 1:   # only skipped commits left between: git bisect's "could be any of"
        cands = list(commits[lo + 1: hi + 1])
        return SearchResult(list(commits), probes, None, cands, cmp.to_dict())
    return SearchResult(list(commits), probes, commits[hi], [commits[hi]], cmp.to_dict())


# ----------------------------------------------------------------------------- the real session


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


class IncrementalBuilder:
    """One worktree + one build tree per backend, moved from commit to commit (see the module doc)."""

    def __init__(self, paths: Any, backend: str, opts: Any = None, *, root: Path | None = None) -> None:
        from .build import BuildOptions

        self.paths = paths
        self.backend = backend
        self.opts = opts or BuildOptions()
        self.root = root or Path(paths.builds) / f"bisect-{backend}"
        self.tree_dir = self.root / "tree"
        self.build_dir = self.root / "build"
        self.cold_at_start = not (self.build_dir / "out" / "CMakeCache.txt").exists()

    def _move_worktree(self, m: Any, sha: str) -> None:
        if (self.tree_dir / ".git").is_file():
            r = proc.run(["git", "-C", str(self.tree_dir), "checkout", "--quiet", "--detach", "--force", sha, "--"], timeout=600)
            if r.ok:
                proc.run(["git", "-C", str(self.tree_dir), "clean", "-fdq"], timeout=300)
                return
            notice(f"re-creating the bisect worktree ({(r.output.strip().splitlines() or ['?'])[-1]})")
        m.worktree(sha, self.tree_dir)

    def tree(self, sha: str) -> Any:
        from .sources import SourceTree
        from .sources.mirror import Mirror

        m = Mirror(self.paths.mirror)
        with m.locked():
            self._move_worktree(m, sha)
            upstream = m.upstream_of(sha)
            return SourceTree(path=self.tree_dir, commit=sha, mirror_commit=sha, origin="bisect",
                              native_git=upstream is None, build_number=m.count(sha), subject=m.subject(sha))

    def __call__(self, sha: str) -> Any:
        """Build ``sha`` (or reuse its published build); raises BuildError when it does not build."""
        from .build import build
        from .config import Pin

        t = self.tree(sha)
        pin = Pin(name=sha[:9], commit=sha, sources=())
        return build(self.paths, pin, self.backend, self.opts, tree=t, build_dir=self.build_dir)


def build_facts(b: Any, started: float) -> tuple[bool, bool | None, float | None]:
    """(cached, incremental, compile seconds) of a Build returned by ``build()`` at ``started``."""
    m = b.manifest or {}
    cached = float(m.get("built_at") or 0) < started
    t = m.get("timings") or {}
    secs = (t.get("configure_s") or 0) + (t.get("build_s") or 0) if t else None
    return cached, (None if cached else bool(t.get("incremental"))), secs


def bisect_plan(req: BisectRequest, model_path: Path) -> Any:
    from .bench.plan import Plan, PointSpec, read_facts

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
    from .bench import measure_point
    from .bench.plan import resolve_model
    from .config import SourceSpec
    from .envinfo import collect_env
    from .sources import first_parent_commits, resolve_commit
    from .sources.mirror import Mirror

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


# ---------------------------------------------------------------------------------- probes


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


# ------------------------------------------------------------------------------ git bisect run


def bisect_run_verdict(values: Sequence[float], *, good_value: float | None = None, bad_value: float | None = None,
                       reference: float | None = None, threshold: float = 0.05) -> str:
    """``good`` / ``bad`` for a measured commit: nearer to ``good_value`` or ``bad_value``, or (with a
    ``reference``) bad when the median is more than ``threshold`` below it."""
    s = summarize(values)
    if s is None:
        raise BisectError("no samples were measured", "check the model and the build")
    if good_value is not None and bad_value is not None:
        return "good" if abs(s.median - good_value) <= abs(s.median - bad_value) else "bad"
    if reference is not None:
        return "bad" if s.median < reference * (1 - threshold) else "good"
    raise BisectError("bisect-run needs --good-value and --bad-value, or --reference (with --threshold)",
                      "e.g. --good-value 900 --bad-value 45, or --reference 900 --threshold 5%")


def head_tree(src: Path) -> Any:
    """A SourceTree for the current checkout (HEAD) of a git working dir, built in place."""
    from .sources import SourceTree

    r = proc.run(["git", "-C", str(src), "rev-parse", "HEAD"], timeout=60)
    if not r.ok:
        raise BisectError(f"{src} is not a git checkout", "run bisect-run inside the llama.cpp clone that git bisect drives, or give --source DIR")
    sha = r.output.strip().splitlines()[-1]
    n = proc.run(["git", "-C", str(src), "rev-list", "--count", "HEAD"], timeout=120)
    subj = proc.run(["git", "-C", str(src), "log", "-1", "--format=%s", "HEAD"], timeout=60)
    return SourceTree(path=src.resolve(), commit=sha, mirror_commit=sha, origin=f"path:{src}", native_git=True,
                      build_number=int(n.output.strip().splitlines()[-1]) if n.ok else None,
                      subject=subj.output.strip() if subj.ok else "")


@dataclass
class RunOnce:
    """What ``bisect-run`` found for the checked-out commit: the exit code for ``git bisect run``
    (0 good, 1 bad, 125 skip), the line to print, and the error that made it a skip (if any)."""

    code: int
    line: str
    error: LlamaforgeError | None = None


def bisect_run_once(paths: Any, source: Path, req: BisectRequest, *, good_value: float | None = None,
                    bad_value: float | None = None, reference: float | None = None, threshold: float = 0.05,
                    command: str | None = None) -> RunOnce:
    """Build HEAD of ``source`` in place, measure it once (stored as a ``bisect-run`` run) and judge it
    (:func:`bisect_run_verdict`). A commit that does not build, or whose measurement fails, is a skip
    (125); bad options or setup problems raise (``git bisect`` must stop, not mark the commit bad)."""
    from .bench import measure_point
    from .bench.plan import resolve_model
    from .build import BuildOptions, build
    from .config import Pin

    field_name = check_metric(req.metric)
    tree = head_tree(source)
    req = dataclasses.replace(req, good=tree.commit, bad=tree.commit)
    bisect_run_verdict([1.0], good_value=good_value, bad_value=bad_value, reference=reference,
                       threshold=threshold)  # validates the options before building
    model_path = resolve_model(req.model, paths)
    try:
        b = build(paths, Pin(name=tree.commit[:9], commit=tree.commit, sources=()), req.backend, BuildOptions(),
                  tree=tree, build_dir=paths.builds / f"bisect-run-{req.backend}")
    except BuildError as e:
        return RunOnce(125, f"{tree.commit[:12]} does not build: exit 125 (skip)", e)
    plan = bisect_plan(req, model_path)
    with Store(paths.store_db) as store:
        run_id = store.new_run("bisect-run", plan.to_json(), command=command, name=f"bisect-run {tree.commit[:9]}")
        pt = measure_point(b, model_path, plan.points[0], plan, store, run_id, label=tree.commit[:9])
        store.set_run_status(run_id, "done" if pt.status == "ok" else "failed")
    values = pt.measured(field_name)
    if not values:
        return RunOnce(125, f"{tree.commit[:12]}: measurement failed ({pt.failure_class}: {pt.failure_detail}): "
                            "exit 125 (skip)")
    verdict = bisect_run_verdict(values, good_value=good_value, bad_value=bad_value, reference=reference,
                                 threshold=threshold)
    return RunOnce(0 if verdict == "good" else 1,
                   f"{tree.commit[:12]} {req.metric} median {summarize(values).median:.1f} t/s → {verdict}")
