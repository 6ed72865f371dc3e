"""``--launches auto``: add server starts only where a verdict is still open, and stop honestly.

A point starts with :attr:`Policy.min_starts` starts (3: the fewest with an interval of its own). It
gets one more start, interleaved with the other open points, while

* its interval is wider than ``--precision`` (half-width relative to the centre, default 5 %), or
* a comparison the run's conclusions need (e.g. CUDA vs Vulkan at that point) is inconclusive,

and it stops at ``--max-launches``. A point that stops there with its question still open is
**unresolved**: it is reported with its between-start spread (and both modes when bimodal), never as
if it were precise. Every point records the K it stopped at and why (:class:`Stop`).

:func:`pair` runs the rule for two sides measured alternately (compare, bisect, the simulations of
the tests): ABBA order, both sides one start per round, until the verdict is settled or both reach
the maximum.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from .estimate import Estimate, estimate
from .spread import Spread
from .starts import Starts
from .verdict import ALPHA, INCONCLUSIVE, MIN_EFFECT, Judgement, judge

DEFAULT_MIN_STARTS = 3
DEFAULT_MAX_STARTS = 10
DEFAULT_PRECISION = 0.05
#: the share of α each look of a sequential comparison spends: looking after every start and stopping at
#: the first settled verdict would otherwise call identical sides "differs" more often than α
#: (simulated: 5.7 % at α = 0.05 with up to 10 starts; 2.6 % with α/2 per look; tests/unit/test_judge.py)
LOOK_ALPHA_SHARE = 0.5

RESOLVED, OPEN, UNRESOLVED, FAILED = "resolved", "open", "unresolved", "failed"


@dataclass(frozen=True)
class Policy:
    min_starts: int = DEFAULT_MIN_STARTS
    max_starts: int = DEFAULT_MAX_STARTS
    precision: float = DEFAULT_PRECISION

    @property
    def look_alpha(self) -> float:
        """The α of each look (:data:`LOOK_ALPHA_SHARE`; all of α when the policy allows one look only)."""
        return ALPHA * (LOOK_ALPHA_SHARE if self.max_starts > self.min_starts else 1.0)

    def to_dict(self) -> dict:
        return {"launches": "auto", "min_starts": self.min_starts, "max_launches": self.max_starts,
                "precision": self.precision}


@dataclass(frozen=True)
class Stop:
    """Where a point stands: ``more`` (another start wanted), its status and the reason in words."""

    k: int
    more: bool
    status: str          # open | resolved | unresolved | failed
    reason: str

    def to_dict(self) -> dict:
        return {"k": self.k, "status": self.status, "reason": self.reason}


def _spread_text(est: Estimate) -> str:
    if est.bimodal:
        return "bimodal: " + " / ".join(f"{m.centre:,.1f} ({m.k} starts)" for m in est.modes)
    sd = est.spread.sd if est.spread else None
    return f"between-start spread {sd:.0%}" if sd is not None else "between-start spread unknown"


def point_stop(est: Estimate | None, policy: Policy, *, open_comparisons: Sequence[str] = ()) -> Stop:
    """Whether one point needs another start under ``policy`` (``open_comparisons``: the names of the
    inconclusive comparisons it takes part in)."""
    if est is None:
        return Stop(0, False, FAILED, "no measurement")
    why: list[str] = []
    if est.k < policy.min_starts:
        why.append(f"{est.k} of at least {policy.min_starts} starts")
    elif est.half_rel > policy.precision:
        why.append(f"±{est.half_rel:.1%} is wider than the precision ±{policy.precision:.0%}")
    if open_comparisons:
        why.append("inconclusive: " + ", ".join(open_comparisons))
    if not why:
        return Stop(est.k, False, RESOLVED, f"±{est.half_rel:.1%} at {est.k} starts (precision ±{policy.precision:.0%})"
                    + ("" if not est.bimodal else f"; {_spread_text(est)}"))
    if est.k >= policy.max_starts:
        return Stop(est.k, False, UNRESOLVED, f"unresolved at the maximum of {policy.max_starts} starts: "
                    + "; ".join(why) + f"; {_spread_text(est)}")
    return Stop(est.k, True, OPEN, "; ".join(why))


Draw = Callable[[], Sequence[float]]


@dataclass
class PairRun:
    """What :func:`pair` measured and concluded."""

    a: list[list[float]] = field(default_factory=list)
    b: list[list[float]] = field(default_factory=list)
    judgement: Judgement | None = None
    status: str = OPEN
    order: list[str] = field(default_factory=list)   # "A"/"B" in measuring order
    reason: str = ""                                   # why it stopped, in words (unresolved: what it would need)

    @property
    def k(self) -> tuple[int, int]:
        return len(self.a), len(self.b)


Settled = Callable[["PairRun", Judgement], bool]


def pair(draw_a: Draw, draw_b: Draw, policy: Policy, *, min_effect: float = MIN_EFFECT,
         prior_a: Spread | None = None, prior_b: Spread | None = None, need_precision: bool = False,
         start: PairRun | None = None, settled: Settled | None = None) -> PairRun:
    """Measure A and B alternately (ABBA: round r measures A first when r is even) until the verdict is
    settled (``need_precision``: and both sides are within the precision) or both reach the maximum.
    ``draw_x()`` runs one start and returns its request values (``[]`` for a failed start, which ends
    the run). ``start``: continue an earlier run (its starts count). ``settled(run, judgement)``: a stricter
    rule of when the run is done (bisect's culprit check also asks a rank test), instead of "not inconclusive".

    An open verdict that, from half the maximum starts on, would need more than :data:`.needs.FUTILITY` × the
    maximum to settle (:meth:`.needs.Needs.futile`, read hopefully) stops there, unresolved, with what it would
    need in :attr:`PairRun.reason`: the starts left cannot settle it (stopping for futility makes no verdict more
    likely, so α is kept; not before half the budget, where the measured ratio is too rough a guide)."""
    run = start or PairRun()
    rnd = min(run.k)
    while True:
        ja = judge(run.a, run.b, min_effect=min_effect, prior_a=prior_a, prior_b=prior_b,
                   alpha=policy.look_alpha) if run.a and run.b else None
        run.judgement = ja
        if min(run.k) >= policy.min_starts and ja is not None:
            done = settled(run, ja) if settled is not None else not _open(ja, policy, need_precision)
            if done:
                run.status, run.reason = RESOLVED, f"settled at K={min(run.k)}"
                return run
            if _futile(ja, min(run.k), policy):
                run.status = UNRESOLVED
                run.reason = (f"inconclusive at K={min(run.k)}: {ja.needs.text()}, beyond what --max-launches "
                              f"{policy.max_starts} allows")
                return run
        if min(run.k) >= policy.max_starts:
            run.status = UNRESOLVED
            tail = f": {ja.needs.text()}" if ja is not None and ja.verdict == INCONCLUSIVE and ja.needs else ""
            run.reason = f"not settled at the maximum of {policy.max_starts} starts{tail}"
            return run
        for side in ("AB" if rnd % 2 == 0 else "BA"):
            vals = list((draw_a if side == "A" else draw_b)())
            run.order.append(side)
            if not vals:
                run.status = FAILED
                return run
            (run.a if side == "A" else run.b).append(vals)
        rnd += 1


def _futile(j: Judgement, k: int, policy: Policy) -> bool:
    """An inconclusive verdict at ``k`` starts a side (at least half of, and below, the maximum) that even a
    hopeful reading would not settle within :data:`.needs.FUTILITY` × the maximum (:meth:`.needs.Needs.futile`)."""
    return (2 * k >= policy.max_starts and k < policy.max_starts and j.verdict == INCONCLUSIVE
            and j.needs is not None and j.needs.futile(policy.max_starts))


def _open(j: Judgement, policy: Policy, need_precision: bool) -> bool:
    if j.verdict == INCONCLUSIVE:
        return True
    return need_precision and max(j.a.half_rel, j.b.half_rel) > policy.precision


def estimate_of(groups: Sequence[Sequence[float]]) -> Estimate | None:
    return estimate(Starts.of(groups))
