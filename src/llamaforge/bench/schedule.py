"""In which order a sweep starts its servers: K launches per point, interleaved, plus drift sentinels.

Pure functions of (number of items, K, seed, N): the same arguments always give the same order, so
``--resume`` re-derives the schedule from the stored plan and skips what is already measured.

* **Launches.** Every item (one point on one build) is measured in ``launches`` separate server
  starts. The schedule is a sequence of K blocks; each block holds every item once in a random
  order (``random.Random(seed)``), so launches of different builds and points interleave and slow
  drift (thermal, other load) spreads over all of them instead of hitting one point's launches.
  An item never runs twice in a row (the only exception: a plan with a single item).
* **Sentinels.** Every ``sentinel_every`` measured launches and once at the end, the reference
  point of every build (the build's first point in the plan) is measured again in one more launch,
  labelled ``sentinel`` (:func:`llamaforge.findings.labels.sentinel_label`). Its median is compared
  with the reference point's own CI afterwards (:mod:`llamaforge.findings.drift`).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

#: sentinels are switched on by default for sweeps with more items (points × builds) than this
SENTINEL_AUTO_ABOVE = 10
#: the default interval (measured launches between sentinels) when they are on by default
SENTINEL_DEFAULT_EVERY = 10
@dataclass(frozen=True)
class Slot:
    """One server start: ``item`` indexes the plan's (build, point) list; ``launch`` is 1..K for a
    regular launch and 1..S (the sentinel's own count) for a sentinel of build ``item``'s build."""

    item: int
    launch: int
    sentinel: bool = False


def default_sentinel_every(n_items: int, requested: int | None) -> int:
    """``requested`` if given (0 = off), else :data:`SENTINEL_DEFAULT_EVERY` for sweeps of more than
    :data:`SENTINEL_AUTO_ABOVE` items and 0 (off) for smaller ones."""
    if requested is not None:
        return int(requested)
    return SENTINEL_DEFAULT_EVERY if n_items > SENTINEL_AUTO_ABOVE else 0


def _avoid_repeat(block: list[int], prev: int | None, rng: random.Random) -> None:
    """Swap the block's first item with another one if it equals the previous block's last."""
    if prev is None or len(block) < 2 or block[0] != prev:
        return
    j = rng.randrange(1, len(block))
    block[0], block[j] = block[j], block[0]


def launch_order(n_items: int, launches: int, seed: int) -> list[Slot]:
    """K randomised blocks of all items (see the module doc); no item twice in a row."""
    rng = random.Random(seed)
    out: list[Slot] = []
    count = [0] * n_items
    prev: int | None = None
    for _ in range(launches):
        block = list(range(n_items))
        rng.shuffle(block)
        _avoid_repeat(block, prev, rng)
        for i in block:
            count[i] += 1
            out.append(Slot(i, count[i]))
        prev = block[-1] if block else prev
    return out


def with_sentinels(order: list[Slot], reference_items: list[int], every: int) -> list[Slot]:
    """Insert a sentinel launch of every reference item after each ``every`` slots and at the end."""
    if every <= 0 or not reference_items:
        return list(order)
    out: list[Slot] = []
    n_sent = 0

    def sentinels() -> None:
        nonlocal n_sent
        n_sent += 1
        out.extend(Slot(r, n_sent, sentinel=True) for r in reference_items)

    for k, slot in enumerate(order, start=1):
        out.append(slot)
        if k % every == 0 and k != len(order):
            sentinels()
    sentinels()
    return out


def sweep_schedule(n_items: int, launches: int, seed: int, reference_items: list[int], sentinel_every: int) -> list[Slot]:
    """The full schedule of a sweep: interleaved launches with sentinels."""
    return with_sentinels(launch_order(n_items, launches, seed), reference_items, sentinel_every)


def remaining(schedule: list[Slot], done: set[tuple[int, int, bool]]) -> list[Slot]:
    """The slots not yet measured (``done`` holds ``(item, launch, sentinel)``), with back-to-back
    repeats that the removal created moved apart where another item can go in between."""
    todo = [s for s in schedule if (s.item, s.launch, s.sentinel) not in done]
    for i in range(1, len(todo)):
        if (todo[i].item, todo[i].sentinel) == (todo[i - 1].item, todo[i - 1].sentinel):
            for j in range(i + 1, len(todo)):
                if (todo[j].item, todo[j].sentinel) != (todo[i - 1].item, todo[i - 1].sentinel):
                    todo.insert(i, todo.pop(j))
                    break
    return todo
