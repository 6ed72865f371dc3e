"""Before a commit is named, it is re-measured against its parent: the culprit's confirmation.

Used by bisect (:mod:`.search`: the commit its probes point at) and by the history (a step between two
adjacent measured commits, :mod:`llamaforge.history.bisect_steps`): whatever found the candidate — probes, or a
change-point search over levels measured back to back — chose it by looking at the data, so its own numbers
cannot confirm it (of the adjacent-commit culprits a history named from its levels alone, about 30 % were
wrong in simulation). The confirmation measures **fresh starts** of the two commits interleaved, in ABBA order
(:func:`llamaforge.judge.pair`, the sequential runner compare and bisect share), adding starts until

* **confirmed** — the judge's verdict on commit/parent is "differs" beyond the threshold in the expected
  direction, and the one-sided rank test agrees (:func:`llamaforge.judge.locate.shift_p`) at the look's α;
* **refuted** — the verdict is "same" within the threshold, or "differs" the other way; or
* **undecided** — the budget (``--max-launches`` starts per commit) is spent, or the verdict would need far
  more starts than that (:attr:`llamaforge.judge.Judgement.needs`): then nothing is named, the range is
  said with the starts spent ("range a..b, undecided after 10+10 starts").

Only a confirmed commit is named. The record (:meth:`Confirmation.to_dict`) is stored in the run — bisect's
``culprit``, a history step's ``confirmation`` — so a report can show it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from ..judge import DIFFERS, INCONCLUSIVE, SAME, Judgement, Policy, Starts, judge, pair
from ..judge.locate import RANK_TEST, change, shift_p
from ..judge.sequential import FAILED, PairRun

CONFIRMED, REFUTED, UNDECIDED = "confirmed", "refuted", "undecided"

Draw = Callable[[], Sequence[float]]


@dataclass
class Confirmation:
    """The re-measurement of ``commit`` against ``parent`` (fresh starts, ABBA) and what it concluded."""

    parent: str
    commit: str
    metric: str
    direction: int                           # the change expected: +1 faster, −1 slower
    threshold: float
    status: str = UNDECIDED                  # confirmed | refuted | undecided | failed
    a: list[list[float]] = field(default_factory=list)   # the parent's starts (request values per start)
    b: list[list[float]] = field(default_factory=list)   # the commit's
    order: str = ""                          # "ABBA…": A = parent, B = commit, in measuring order
    judgement: Judgement | None = None       # on every start of the confirmation, at α (the interval printed)
    decision: Judgement | None = None        # the last look's, at the look's α (what decided)
    rank_p: float = 1.0
    alpha: float = 0.05                      # the look's α
    budget: int = 0                          # the most starts per commit
    reason: str = ""                         # why it stopped (the sequential runner's words)

    @property
    def confirmed(self) -> bool:
        return self.status == CONFIRMED

    @property
    def k(self) -> tuple[int, int]:
        return len(self.a), len(self.b)

    @property
    def range(self) -> str:
        return f"{self.parent[:12]}..{self.commit[:12]}"

    def line(self) -> str:
        """One sentence, by the status: ``abc: tg −15.0 % [−18.1, −11.8] against def (5+5 starts, ABBA; …)``,
        ``range def..abc, undecided after 10+10 starts (…)``, ``def..abc re-measured: no change that way (…)``."""
        ka, kb = self.k
        j = self.judgement
        what = f"{self.metric} {change(j.ratio, j.low, j.high)}" if j is not None else f"{self.metric}: no starts"
        starts = f"{ka}+{kb} starts, ABBA"
        if self.status == CONFIRMED:
            return f"{self.commit[:12]}: {what} against {self.parent[:12]} ({starts}; {RANK_TEST} p = {self.rank_p:.2g})"
        verdict = self.decision.verdict if self.decision is not None else INCONCLUSIVE
        if self.status == REFUTED:
            how = f"same within ±{self.threshold:.0%}" if verdict == SAME else "a change the other way"
            return f"{self.range} re-measured: {how}, not the change expected ({what}; {starts})"
        needs = self.decision.needs_note().strip(" ()") if self.decision is not None else ""
        return (f"range {self.range}, undecided after {ka}+{kb} starts ({what}, {verdict}"
                + (f"; {needs}" if needs else "") + ")")

    def to_dict(self) -> dict:
        ka, kb = self.k
        return {"good": self.parent, "bad": self.commit, "status": self.status, "confirmed": self.confirmed,
                "line": self.line(), "rank_p": self.rank_p, "alpha": self.alpha, "k": [ka, kb], "budget": self.budget,
                "direction": self.direction, "threshold": self.threshold, "reason": self.reason,
                "judgement": self.judgement.to_dict() if self.judgement else None,
                "decision": self.decision.to_dict() if self.decision else None, "order": self.order}


def _shown(j: Judgement, p: float, direction: int, alpha: float) -> bool:
    return j.verdict == DIFFERS and j.direction == direction and p < alpha


def _refuted(j: Judgement, direction: int) -> bool:
    return j.verdict == SAME or (j.verdict == DIFFERS and j.direction != direction)


def confirm(parent: str, commit: str, draw_parent: Draw, draw_commit: Draw, *, direction: int, threshold: float,
            policy: Policy, metric: str = "tg") -> Confirmation:
    """Re-measure ``commit`` against ``parent`` (see the module doc). ``draw_x()`` runs one fresh start and
    returns its request values (``[]``: the start failed, and the confirmation ends ``failed``)."""
    alpha = policy.look_alpha
    out = Confirmation(parent, commit, metric, direction, threshold, alpha=alpha, budget=policy.max_starts)

    def settled(run: PairRun, j: Judgement) -> bool:
        p = shift_p(Starts.of(run.a), Starts.of(run.b), direction)
        return _shown(j, p, direction, alpha) or _refuted(j, direction)

    run = pair(draw_parent, draw_commit, policy, min_effect=threshold, settled=settled)
    out.a, out.b, out.order, out.reason = run.a, run.b, "".join(run.order), run.reason
    if run.status == FAILED:
        out.status = FAILED
        return out
    out.decision = run.judgement
    out.judgement = judge(run.a, run.b, min_effect=threshold) if run.a and run.b else None
    if out.decision is not None:
        out.rank_p = shift_p(Starts.of(run.a), Starts.of(run.b), direction)
        if _shown(out.decision, out.rank_p, direction, alpha):
            out.status = CONFIRMED
        elif _refuted(out.decision, direction):
            out.status = REFUTED
    return out
