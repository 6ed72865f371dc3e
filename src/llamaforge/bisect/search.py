"""The search of a noise-aware performance bisection, pure: no builds, no store.

:func:`search` over ``[good, c1, ..., bad]`` with two callables: ``build(sha)`` (a
:class:`~llamaforge.errors.BuildError` makes the commit *skipped*, like ``git bisect``'s exit 125, and
the nearest unskipped neighbour of the midpoint is probed instead) and ``measure(sha, built)``, which
runs **one server start** (one llama-bench process; its ``-r`` repeats are requests inside the start)
and returns its request values (``[]`` when the start failed). The server start is the unit of
replication: every conclusion comes from start centres, through :mod:`llamaforge.judge`.

1. **Endpoints, before anything else is built.** Both are built, then measured in starts, ABBA,
   until the judge's verdict on bad/good with the minimum effect ``threshold`` is settled, or both
   reach ``--max-launches`` (:func:`llamaforge.judge.pair`).
2. **Can it be located?** (:func:`llamaforge.judge.locate.feasibility`) Unless the endpoints differ and
   a probe can be decided within the budget (⌈log2 N⌉ probes, at most ``--max-launches`` starts per
   commit), the search refuses (:class:`BisectRefused`) with one line: the change, the between-start
   spread and how many starts per commit it would take.
3. **Probes.** Each probe is measured start by start, interleaved with fresh starts of the endpoints
   (P G B P P G B P …: the endpoints are measured under the conditions of the probe — drift on a
   shared machine — and sharpen as the search goes), and judged after every start against both
   endpoints' starts measured beside it and just before it (:data:`LEAD_STARTS`), or beside it alone once
   the endpoints have moved since (:func:`llamaforge.judge.locate.references`: a shared machine's speed
   wanders) (:func:`llamaforge.judge.locate.place`) until it is clearly good or clearly bad, and on the same
   side of the starts measured beside it (else it is held open). An undecided probe gets more starts, never a guess; still undecided at the maximum,
   the search ends **undecided** between the last good and the first bad commit, with the range.
4. **The culprit, checked** (:mod:`.confirm`). The commit found and its parent are re-measured ABBA with
   fresh starts until the judge shows their difference beyond the threshold and a rank test agrees (or
   rules it out, or the budget is spent); the change is printed with its CI (``tg −8.0 % [−10.2, −5.7]``).
   A commit whose check does not show a change in the endpoints' direction is never named: the
   search ends undecided instead, saying which ("range a..b, undecided after 10+10 starts").
   Two adjacent commits with the change's direction known (a history's step) are their confirmation alone.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from ..console import notice
from ..errors import BuildError, LlamaforgeError
from ..judge import Judgement, Policy, Starts, estimate, pair
from ..judge.locate import (
    BAD,
    GOOD,
    Feasibility,
    Placement,
    SpentPolicy,
    feasibility,
    n_probes,
    place,
    probe_alpha,
    references,
)
from ..judge.sequential import FAILED
from ..metrics import by_engine
from .confirm import CONFIRMED, REFUTED, Confirmation, confirm

FOUND, UNDECIDED, SKIPPED_RANGE = "found", "undecided", "skipped"
#: a probe is judged against the endpoints' starts measured beside it (interleaved with its own) and this many
#: of each endpoint's starts just before it, while those still describe the endpoint
#: (:func:`llamaforge.judge.locate.references`). A shared machine's speed wanders: judged against every start
#: since the search began, 15 % bisections on the 2-vCPU CI VM called probes bad and good across it (a probe's
#: starts ~15 % off the endpoint's of a minute before, as were the endpoint's own starts beside it; those probes
#: were also -O1 builds from a stale CMake cache, a bias of their own: :mod:`llamaforge.builds.cmake_tree`)
LEAD_STARTS = 6


class BisectError(LlamaforgeError):
    """A bisection that cannot start or cannot go on (endpoint does not build, measurement fails, ...)."""


class BisectRefused(BisectError):
    """The endpoints' change cannot be located within the budget; ``result`` holds what was measured."""

    def __init__(self, message: str, fix: str | None, result: SearchResult) -> None:
        super().__init__(message, fix)
        self.result = result


def check_metric(metric: str) -> str:
    """A metric llama-bench measures (``tg``, ``pp``: the registry's) → its sample field; anything else is a
    clear error naming those."""
    ok = {m.name: m for m in by_engine("llama-bench") if m.per == "request"}
    if metric not in ok:
        names = ", ".join(f"{m.name} ({m.label})" for m in ok.values())
        raise BisectError(f"unknown metric {metric!r}: a bisection measures with llama-bench, which times {names}",
                          f"use --metric {' or --metric '.join(ok)}")
    return ok[metric].field


def max_measured(n_after_good: int) -> int:
    """The most commits a clean bisection measures: ⌈log2 N⌉ + 2 (the endpoints)."""
    return n_probes(n_after_good) + 2


@dataclass
class ProbeResult:
    """One build attempt of one commit and, unless skipped, its starts (request values per start)."""

    seq: int
    index: int                  # position in [good, ..., bad]
    sha: str
    verdict: str                # endpoint-good | endpoint-bad | good | bad | undecided | skip
    starts: list[list[float]] = field(default_factory=list)
    build_s: float | None = None
    measure_s: float = 0.0
    note: str = ""
    placement: Placement | None = None
    built: Any = None           # whatever build() returned (a Build) — not serialised

    @property
    def k(self) -> int:
        return len(self.starts)

    @property
    def values(self) -> list[float]:
        return [v for s in self.starts for v in s]

    @property
    def median(self) -> float | None:
        """The commit's level: the centre of its start centres (None before any start)."""
        est = estimate(Starts.of(self.starts))
        return est.centre if est else None

    def to_dict(self) -> dict:
        est = estimate(Starts.of(self.starts))
        return {"seq": self.seq, "index": self.index, "sha": self.sha, "verdict": self.verdict, "k": self.k,
                "starts": [list(s) for s in self.starts], "values": self.values, "median": self.median,
                "estimate": est.to_dict() if est else None, "build_s": self.build_s, "measure_s": self.measure_s,
                "note": self.note, "placement": self.placement.to_dict() if self.placement else None}


@dataclass
class SearchResult:
    commits: list[str]                       # [good, ..., bad]
    probes: list[ProbeResult]
    status: str = UNDECIDED                  # found | undecided | skipped
    first_bad: str | None = None             # only when found and checked
    candidates: list[str] = field(default_factory=list)
    endpoints: dict = field(default_factory=dict)       # the endpoints' judgement (bad / good)
    feasibility: Feasibility | None = None
    culprit: dict | None = None              # the check of the commit found against its parent
    reason: str = ""                         # why undecided / the refusal line

    @property
    def builds(self) -> int:
        return len(self.probes)

    @property
    def measured(self) -> int:
        return sum(1 for p in self.probes if p.verdict != "skip")

    @property
    def skipped(self) -> list[str]:
        return [p.sha for p in self.probes if p.verdict == "skip"]

    @property
    def starts(self) -> int:
        return sum(p.k for p in self.probes)


BuildFn = Callable[[str], Any]
MeasureFn = Callable[[str, Any], Sequence[float]]
ProbeHook = Callable[[ProbeResult], None]


def _pick(lo: int, hi: int, skipped: set[int]) -> int | None:
    """The untested index nearest the midpoint of (lo, hi), lower one first on ties."""
    mid = (lo + hi) // 2
    cands = [i for i in range(lo + 1, hi) if i not in skipped]
    return min(cands, key=lambda i: (abs(i - mid), i)) if cands else None


class _Search:
    """The state of one search (see the module doc); :func:`search` drives it."""

    def __init__(self, commits: Sequence[str], build: BuildFn, measure: MeasureFn, *, threshold: float, metric: str,
                 policy: Policy, on_probe: ProbeHook | None) -> None:
        self.commits = list(commits)
        self.build, self.measure = build, measure
        self.threshold, self.metric, self.policy = threshold, metric, policy
        self.on_probe = on_probe or (lambda _p: None)
        self.res = SearchResult(self.commits, [])
        self.probes_planned = n_probes(len(commits) - 1)
        self.alpha = probe_alpha(self.probes_planned, policy.max_starts, policy.min_starts)
        self.verdict: Judgement | None = None
        self.confirmation: Confirmation | None = None

    # --------------------------------------------------------------------------- building, one start
    def attempt(self, i: int, endpoint: str | None) -> ProbeResult:
        """Build commit ``i`` (a skip when it does not build; an error for an endpoint)."""
        sha = self.commits[i]
        p = ProbeResult(seq=len(self.res.probes), index=i, sha=sha, verdict=f"endpoint-{endpoint}" if endpoint else "pending")
        self.res.probes.append(p)
        t0 = time.monotonic()
        try:
            p.built = self.build(sha)
        except BuildError as e:
            p.build_s = time.monotonic() - t0
            p.verdict, p.note = "skip", f"does not build: {e.first_error or e.message}"
            self.on_probe(p)
            if endpoint:
                raise BisectError(f"the {endpoint} endpoint {sha[:12]} does not build ({p.note})",
                                  f"pick a {endpoint} commit that builds (see {e.log_path or 'the build log'})") from e
            notice(f"skipping {sha[:12]} ({p.note}), as git bisect does with exit code 125")
            return p
        p.build_s = time.monotonic() - t0
        return p

    def draw(self, p: ProbeResult) -> list[float]:
        """One start of ``p``'s commit: its request values (``[]`` when the start failed)."""
        t0 = time.monotonic()
        vals = [float(v) for v in self.measure(p.sha, p.built)]
        p.measure_s += time.monotonic() - t0
        return vals

    def start(self, p: ProbeResult) -> bool:
        vals = self.draw(p)
        if vals:
            p.starts.append(vals)
        return bool(vals)

    # --------------------------------------------------------------------------- the phases
    def endpoints(self) -> tuple[ProbeResult, ProbeResult]:
        good = self.attempt(0, "good")
        bad = self.attempt(len(self.commits) - 1, "bad")
        run = pair(lambda: self.draw(good), lambda: self.draw(bad), self.policy, min_effect=self.threshold)
        good.starts, bad.starts = run.a, run.b
        if run.status == FAILED:
            which = good if len(run.order) and run.order[-1] == "A" else bad
            name = "good" if which is good else "bad"
            raise BisectError(f"a start of the {name} endpoint {which.sha[:12]} gave no {self.metric} samples",
                              "check the model and the build (try `llamaforge verify`)")
        assert run.judgement is not None
        self.verdict = run.judgement
        self.res.endpoints = {**run.judgement.to_dict(), "status": run.status, "order": "".join(run.order)}
        for p in (good, bad):
            self.on_probe(p)
        return good, bad

    def check_feasible(self, good: ProbeResult, bad: ProbeResult) -> None:
        j = self.verdict
        assert j is not None
        f = feasibility(Starts.of(good.starts), Starts.of(bad.starts), j, probes=self.probes_planned,
                        max_starts=self.policy.max_starts, min_starts=self.policy.min_starts)
        self.res.feasibility = f
        if not f.feasible:
            self.res.status, self.res.reason = "refused", f.line(self.metric)
            fix = (f"raise --max-launches to {f.needed}, or make the machine quieter" if f.needed
                   else "check the endpoints, or lower --threshold to look for a smaller change")
            raise BisectRefused(f"cannot bisect: {f.line(self.metric)}", fix, self.res)

    def probe(self, p: ProbeResult, good: ProbeResult, bad: ProbeResult) -> str:
        """Starts of ``p`` interleaved with the endpoints' until it is good or bad (or the maximum)."""
        rnd, g0, b0 = 0, len(good.starts), len(bad.starts)
        lead = (Starts.of(good.starts[max(0, g0 - LEAD_STARTS):g0]), Starts.of(bad.starts[max(0, b0 - LEAD_STARTS):b0]))
        while True:
            beside = (Starts.of(good.starts[g0:]), Starts.of(bad.starts[b0:]))
            ref_good, ref_bad, moved = references(lead, beside)
            pl = place(Starts.of(p.starts), ref_good, ref_bad, alpha=self.alpha, min_starts=self.policy.min_starts,
                       beside=beside)
            pl = replace(pl, moved=moved) if moved else pl
            p.placement = pl
            if pl.decided:
                return pl.verdict
            if p.k >= self.policy.max_starts:
                return "undecided"
            for who in ((p, good) if rnd % 2 == 0 else (bad, p)):
                if not self.start(who):
                    if who is p:
                        return "failed"
                    raise BisectError(f"a start of the endpoint {who.sha[:12]} gave no {self.metric} samples",
                                      "check the model and the build (try `llamaforge verify`)")
            rnd += 1

    def culprit(self, lo: ProbeResult, hi: ProbeResult, direction: int) -> bool:
        """Re-measure ``lo`` and ``hi`` ABBA with fresh starts (:func:`.confirm.confirm`) until the change at ``hi``
        is shown (the judge's verdict "differs" beyond the threshold in the endpoints' direction, and the rank
        test agrees at the look's α), ruled out ("same", or the other direction), or the budget is spent;
        True when shown. The confirmation is stored as ``culprit``."""
        c = confirm(lo.sha, hi.sha, lambda: self.draw(lo), lambda: self.draw(hi), direction=direction,
                    threshold=self.threshold, policy=self.policy, metric=self.metric)
        if c.status == FAILED:
            who = lo if c.order.endswith("A") else hi
            raise BisectError(f"a start of {who.sha[:12]} gave no {self.metric} samples in the culprit's check",
                              "check the model and the build (try `llamaforge verify`)")
        lo.starts.extend(c.a)
        hi.starts.extend(c.b)
        self.confirmation = c
        self.res.culprit = c.to_dict()
        return c.confirmed

def search(commits: Sequence[str], build: BuildFn, measure: MeasureFn, *, threshold: float = 0.05,
           metric: str = "tg", policy: Policy | None = None, on_probe: ProbeHook | None = None,
           direction: int | None = None) -> SearchResult:
    """Bisect ``commits`` = ``[good, ..., bad]`` (oldest first) for the first commit whose metric is the
    bad endpoint's (see the module doc). Raises :class:`BisectError` when an endpoint does not build or
    its starts fail, :class:`BisectRefused` when the change cannot be located within the budget.

    ``direction`` (+1 faster, −1 slower) with two adjacent commits: the change is known (a history's step
    between adjacent commits), so the search is its confirmation alone (:func:`.confirm.confirm`): the
    commit against its parent, ABBA, until the judge decides or the budget is spent."""
    if len(commits) < 2:
        raise BisectError("the range has no commits after the good one", "give a bad commit that descends from the good one")
    s = _Search(commits, build, measure, threshold=threshold, metric=metric, policy=policy or policy_for(None),
                on_probe=on_probe)
    if direction and len(commits) == 2:
        return _confirm_adjacent(s, direction)
    good, bad = s.endpoints()
    s.check_feasible(good, bad)
    direction = 1 if (s.res.feasibility and s.res.feasibility.ratio > 1) else -1
    lo, hi = good, bad
    skipped: set[int] = set()
    while hi.index - lo.index > 1:
        i = _pick(lo.index, hi.index, skipped)
        if i is None:
            break
        p = s.attempt(i, None)
        if p.verdict == "skip":
            skipped.add(i)
            continue
        p.verdict = s.probe(p, good, bad)
        if p.verdict == "failed":
            p.verdict, p.note = "skip", f"a start gave no {metric} samples"
            skipped.add(i)
        s.on_probe(p)
        if p.verdict == GOOD:
            lo = p
        elif p.verdict == BAD:
            hi = p
        elif p.verdict == "undecided":
            why = f"{p.sha[:12]} is undecided after {p.k} starts ({p.placement.fmt() if p.placement else '–'})"
            return _finish(s, lo, hi, direction, undecided=why)
    return _finish(s, lo, hi, direction)


def _confirm_adjacent(s: _Search, direction: int) -> SearchResult:
    """Two adjacent commits and the change expected: the confirmation is the whole search (the endpoints'
    record is its last look, so a history step reads it as its re-measurement)."""
    good = s.attempt(0, "good")
    bad = s.attempt(1, "bad")
    s.culprit(good, bad, direction)
    c = s.confirmation
    assert c is not None
    good.verdict, bad.verdict = "endpoint-good", "endpoint-bad"
    for p in (good, bad):
        s.on_probe(p)
    res = s.res
    if c.decision is not None:
        res.endpoints = {**c.decision.to_dict(), "status": c.status, "order": c.order}
    res.candidates = [bad.sha]
    if c.status == CONFIRMED:
        res.status, res.first_bad = FOUND, bad.sha
    else:
        res.status, res.reason = UNDECIDED, c.line()
    return res


def _finish(s: _Search, lo: ProbeResult, hi: ProbeResult, direction: int, *, undecided: str | None = None) -> SearchResult:
    """Check the change between ``lo`` and ``hi`` (unless they are the endpoints and nothing is named) and
    conclude: found, skipped (a range of unbuildable commits), or undecided — named only when confirmed."""
    res = s.res
    res.candidates = res.commits[lo.index + 1: hi.index + 1]
    between = f"between {lo.sha[:12]} (good) and {hi.sha[:12]} (bad)"
    if undecided and lo.index == 0 and hi.index == len(res.commits) - 1:
        res.status, res.reason = UNDECIDED, f"undecided {between}: {undecided}"
        return res
    if not s.culprit(lo, hi, direction):
        c = s.confirmation
        line = c.line() if c else ""
        res.status, res.candidates = UNDECIDED, res.commits[1:]
        how = ("re-measured the change does not show there" if c is not None and c.status == REFUTED
               else "its re-measurement is undecided")
        res.reason = (f"undecided: the probes point {between}, but {how} ({line}): "
                      + ("a probe was misjudged or the change is spread over several commits"
                         if c is not None and c.status == REFUTED else
                         f"the change lies in {res.commits[0][:12]}..{res.commits[-1][:12]}"))
        return res
    if undecided:
        res.status = UNDECIDED
        res.reason = f"undecided {between}: {undecided}; the change lies in that range ({res.culprit['line']})"
    elif hi.index - lo.index > 1:   # only skipped commits left between: git bisect's "could be any of"
        res.status, res.reason = SKIPPED_RANGE, f"the change lies in {lo.sha[:12]}..{hi.sha[:12]} (commits between did not build)"
    else:
        res.status, res.first_bad = FOUND, hi.sha
    return res


def policy_for(max_launches: int | None) -> Policy:
    """The bisection's starts policy: the judge's defaults with ``--max-launches``, each look spending α
    as the probes' do (:class:`~llamaforge.judge.locate.SpentPolicy`)."""
    base = Policy()
    return SpentPolicy(min_starts=base.min_starts, max_starts=max_launches or base.max_starts, precision=base.precision)
