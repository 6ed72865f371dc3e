"""Verdicts in words: the one place where the class of a judge's verdict becomes a sentence.

Every claim a report, the history page, the matrix ranking or a command prints about two sides is worded by
the class of the verdict behind it (:mod:`llamaforge.judge.verdict`), never by a raw ratio:

* **differs** — a direction: "CUDA generates faster than Vulkan", "slower", "worse";
* **same** — "same within ±5 %" (the interval lies inside the margin; never "no change" without the margin);
* **inconclusive** — "not proven either way" (the interval spans a margin: neither a difference nor its absence
  is shown). An inconclusive verdict never reads as "no regression", "no step", "holds" or "tie".

``tests/unit/test_verdict_prose.py`` scans the renderers for strong phrases written anywhere but here.
"""

from __future__ import annotations

from collections.abc import Sequence

DIFFERS, SAME, INCONCLUSIVE = "differs", "same", "inconclusive"
#: what an inconclusive verdict says, everywhere
NOT_PROVEN = "not proven either way"


def margin(min_effect: float) -> str:
    """``±5 %`` (``±2.5 %``)."""
    return f"±{min_effect * 100:g} %"


def same_within(min_effect: float) -> str:
    """``same within ±5 %``: the words of a verdict "same"."""
    return f"same within {margin(min_effect)}"


def class_words(verdict: str | None, min_effect: float, *, differs: str = "differs") -> str:
    """A verdict's class in words: ``differs`` (or the caller's direction phrase), ``same within ±5 %``, ``not proven
    either way`` (an unknown or missing verdict too: nothing was shown)."""
    if verdict == DIFFERS:
        return differs
    if verdict == SAME:
        return same_within(min_effect)
    return NOT_PROVEN


def counts(verdicts: Sequence[str | None], min_effect: float, *, differs: str = "differs", of: str = "points") -> str:
    """How a family's verdicts fell, by class, largest claim first: ``differs at 13 of 15 points, same within ±5 %
    at 1, not proven either way at 1`` (``differs``: the direction phrase of the differing ones)."""
    n = len(verdicts)
    d = sum(v == DIFFERS for v in verdicts)
    s = sum(v == SAME for v in verdicts)
    o = n - d - s
    parts = [(d, differs), (s, same_within(min_effect)), (o, NOT_PROVEN)]
    shown = [(k, w) for k, w in parts if k]
    if not shown:
        return f"no {of}"
    (k0, w0), rest = shown[0], shown[1:]
    return ", ".join([f"{w0} at {k0} of {n} {of}", *(f"{w} at {k}" for k, w in rest)])


def every(verdicts: Sequence[str | None], verdict: str) -> bool:
    """Whether every verdict of a non-empty family is ``verdict`` (what "at every point" may claim)."""
    return bool(verdicts) and all(v == verdict for v in verdicts)


def between_neighbours(verdict: str | None, min_effect: float) -> str:
    """What a history says of two neighbouring commits with no confirmed step between them, by the verdict on the
    two: same — ``same within ±5 %: no step``; differs — the change-point search did not confirm a lasting step;
    inconclusive — ``not proven either way: no step found, and one beyond ±5 % is not ruled out``."""
    if verdict == SAME:
        return f"{same_within(min_effect)}: no step"
    if verdict == DIFFERS:
        return "differs between these two, but the change-point search did not confirm a lasting step here"
    return f"{NOT_PROVEN}: no step found, and one beyond {margin(min_effect)} is not ruled out"


def in_sessions(k: int, n: int, *, judged: bool) -> str:
    """Whether a claim was so in every session, by its basis: ``judged at every point in every session`` (every
    verdict of every session says it), ``observed in every session`` (a description of the measured starts, no
    verdict behind it), or in how many it was."""
    if judged:
        return ("judged at every point in every session" if k == n
                else f"judged at every point in {k} of {n} sessions, not in every session")
    return "observed in every session" if k == n else f"observed in {k} of {n} sessions, not in every session"
