"""``bench --launches auto``: an inconclusive comparison that no budget-sized number of starts would settle
(:meth:`llamaforge.judge.needs.Needs.futile`) holds no point open; the point stops unresolved, saying what the
verdict would need (issue 41, point 4)."""

from __future__ import annotations

import random
from types import SimpleNamespace

from llamaforge.bench.auto_launches import open_comparisons, stops
from llamaforge.judge import Policy
from llamaforge.judge.sequential import UNRESOLVED
from llamaforge.store import Point, Sample


def _point(build: str, rng: random.Random, k: int, centre: float, cv: float) -> Point:
    p = Point("run", build, "server", ncmoe=0, n_ctx=4096)
    p.samples = [Sample(i, False, pp_tps=500.0, tg_tps=centre * rng.gauss(1, cv) * (1 + 0.001 * j), launch=i // 2)
                 for i in range(2 * k) for j in [i % 2]]
    return p


def _items(n: int = 2) -> list[tuple]:
    spec = SimpleNamespace(ncmoe=0, ngl=-1)
    return [(SimpleNamespace(key=f"b{i}", backend=f"be{i}"), spec, "server") for i in range(n)]


def test_a_comparison_beyond_the_budget_holds_no_point_open_and_is_said() -> None:
    rng = random.Random(41)
    have = {0: _point("b0", rng, 3, 100.0, 0.08), 1: _point("b1", rng, 3, 101.0, 0.08)}   # 1 % apart, 8 % spread
    wide = Policy(min_starts=3, max_starts=1000, precision=0.5)
    tight = Policy(min_starts=3, max_starts=4, precision=0.5)
    opened, beyond = open_comparisons(_items(), have, wide, 0.05)
    assert opened.get(0) and not beyond                        # a large budget could settle it: still open
    opened, beyond = open_comparisons(_items(), have, tight, 0.05)
    assert not opened and beyond[0] and "needs" in beyond[0][0]   # 4 starts a side never would
    st = stops(_items(), list(have.values()), tight, 0.05)
    assert st[0].status == UNRESOLVED and not st[0].more and "would not settle it" in st[0].reason
