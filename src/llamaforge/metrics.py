"""The two measured metrics, in one place: their names, sample fields, labels, and which test a
llama-bench point's speed is read from.

``pp`` is prompt processing, ``tg`` token generation, both in tokens per second; every module that
maps a metric to a :class:`~llamaforge.store.Sample` field or a label reads it from here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .store import Point

#: metric → the Sample field holding its tokens/s (in this order wherever metrics are listed)
FIELDS: dict[str, str] = {"pp": "pp_tps", "tg": "tg_tps"}
#: metric → how reports name it
LABELS: dict[str, str] = {"pp": "prompt t/s", "tg": "generation t/s"}


def _test_size(test: str) -> int:
    digits = "".join(ch for ch in test if ch.isdigit())
    return int(digits) if digits else 0


def pick_test(p: Point, metric: str) -> str | None:
    """For llama-bench points (samples tagged pp512, tg128, ...): the test a speed is read from.

    Mixing pp512 with pp4096 would blur two different workloads, so one test per metric is used:
    the largest (longer prompts give honest prompt speeds). ``None``: samples carry no test names.
    """
    attr = FIELDS[metric]
    tests = {s.test for s in p.samples if s.test and not s.warmup and getattr(s, attr) is not None}
    if not tests:
        return None
    prefixed = [t for t in tests if t.startswith(metric)] or sorted(tests)
    return max(prefixed, key=lambda t: (_test_size(t), t))
