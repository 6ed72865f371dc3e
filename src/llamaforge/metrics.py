"""The metric registry: every measured metric declared once, and what each one means.

A :class:`Metric` names the :class:`~llamaforge.store.Sample` field its per-request values are kept in, its
unit and direction (higher or lower is better), and how the requests of one server start become the
judge's values for that start (its *estimator*; :mod:`llamaforge.judge.metric_starts` applies it — only the judge computes a percentile): ``median`` keeps every request value (the judge takes each
start's median, :class:`~llamaforge.judge.Starts`), a percentile (``p95``) gives one value per start, the
95th percentile of its requests, and only for a start with at least :attr:`Metric.min_requests` of them:
the 95th percentile of four requests is their maximum, and is never shown as a p95.

Everything that lists metrics reads :data:`REGISTRY` in its order: the terminal table, the report's tables
and plots, the export, the judge's selection (compare, reproduce, the variant matrix), history series and
``bisect --metric``. Adding a metric is one entry here plus its Sample field (``store.py``) and the code
that measures it (an engine): a metric with no values in a run shows nowhere, so older runs render as
before.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .store import Point


@dataclass(frozen=True)
class Metric:
    """One measured metric (see the module doc)."""

    name: str                      # the short name used in options, exports and history (pp, tg, ttft_p95)
    field: str                     # the Sample field holding each request's value
    label: str                     # how tables name it ("generation t/s")
    title: str                     # how a plot or a heading names it ("Token generation")
    noun: str                      # how a sentence names it ("generation": the history's series names)
    unit: str                      # "t/s", "ms"
    higher_is_better: bool
    estimator: str = "median"      # median (every request; the judge takes start medians) | p50 | p95 | p99
    min_requests: int = 1          # a start with fewer requests gives no value (a percentile needs enough)
    engines: tuple[str, ...] = ("server", "llama-bench")   # the engines that measure it
    primary: bool = False          # a throughput metric every report leads with (pp, tg)
    per: str = "request"           # request: a Sample field per request | start: a LaunchRecord field, one per start
    history: bool = True           # a series of the performance history (history.run / history.show / the site)

    @property
    def quantile(self) -> float | None:
        """The percentile a start is summarised by (0.95 for ``p95``), or None for ``median``."""
        if self.estimator == "median":
            return None
        return int(self.estimator[1:]) / 100.0

    @property
    def better(self) -> str:
        """"higher" or "lower": which way is better."""
        return "higher" if self.higher_is_better else "lower"

    def measures(self, engine: str) -> bool:
        return engine in self.engines


def launch_value(r: object, field: str) -> float | None:
    """A start metric's value of one launch record: its field, or for ``vram_self_mib`` the device total
    where llama.cpp's own share was not measured (as the history always read it)."""
    v = getattr(r, field, None)
    if v is None and field == "vram_self_mib":
        v = getattr(r, "vram_used_mib", None)
    return float(v) if isinstance(v, int | float) and v > 0 and math.isfinite(v) else None


#: every metric, in the order they are listed everywhere
REGISTRY: dict[str, Metric] = {m.name: m for m in (
    Metric("pp", "pp_tps", "prompt t/s", "Prompt processing", "prompt processing", "t/s", True, primary=True),
    Metric("tg", "tg_tps", "generation t/s", "Token generation", "generation", "t/s", True, primary=True),
    # the server's own timing of the prompt until the first token is sampled (timings.prompt_ms): time to first
    # token without the HTTP round trip; llama-bench times no request
    Metric("ttft", "prompt_ms", "TTFT p50 ms", "Time to first token (p50)", "time to first token", "ms", False,
           engines=("server",)),
    # the same per-request times, summarised per start by their 95th percentile: the slow first tokens a user
    # waits for; only from a start of ≥ 20 requests (the p95 of fewer is their maximum); not a history series
    Metric("ttft_p95", "prompt_ms", "TTFT p95 ms", "Time to first token (p95)", "time to first token p95", "ms",
           False, estimator="p95", min_requests=20, engines=("server",), history=False),
    # what a streamed request's client saw (schema v3): the whole request's wall time, sent → answered ...
    Metric("e2e", "e2e_ms", "request p50 ms", "Request latency (p50)", "request latency", "ms", False,
           engines=("server",), history=False),
    Metric("e2e_p95", "e2e_ms", "request p95 ms", "Request latency (p95)", "request latency p95", "ms", False,
           estimator="p95", min_requests=20, engines=("server",), history=False),
    # ... and the time between two generated tokens as they arrived: each request's median gap, and each
    # request's 95th-percentile gap (of a request with ≥ 20 gaps: a stutter inside one answer)
    Metric("itl", "itl_ms", "ITL p50 ms", "Inter-token latency (p50)", "inter-token latency", "ms", False,
           engines=("server",), history=False),
    Metric("itl_p95", "itl_p95_ms", "ITL p95 ms", "Inter-token latency (p95 within a request)",
           "inter-token latency p95", "ms", False, engines=("server",), history=False),
    Metric("vram", "vram_self_mib", "peak VRAM MiB", "Peak VRAM", "peak VRAM", "MiB", False, per="start"),
    Metric("host", "rss_peak_mib", "peak host memory MiB", "Peak host memory", "peak host memory", "MiB", False,
           per="start"),
)}

#: request metric → the Sample field holding its per-request values
FIELDS: dict[str, str] = {m.name: m.field for m in REGISTRY.values() if m.per == "request"}
#: metric → how tables name it
LABELS: dict[str, str] = {m.name: m.label for m in REGISTRY.values()}


def get(name: str) -> Metric:
    """The metric called ``name`` (KeyError names the known ones)."""
    try:
        return REGISTRY[name]
    except KeyError:
        raise KeyError(f"unknown metric {name!r} (known: {', '.join(REGISTRY)})") from None


def family(metric: str) -> str:
    """The comparisons a metric's verdicts are corrected together with (Holm's method): the throughput
    metrics (pp, tg) form one family, every other request metric (latency) another, so measuring latency
    never widens the pp and tg intervals a compare or a report has always shown."""
    return "throughput" if REGISTRY[metric].primary else "latency"


def request_metrics() -> list[Metric]:
    """The metrics measured per request (what a compare judges), in registry order."""
    return [m for m in REGISTRY.values() if m.per == "request"]


def primary() -> list[Metric]:
    """The throughput metrics every report leads with (pp, tg)."""
    return [m for m in REGISTRY.values() if m.primary]


def measured_in(points: Sequence[Point]) -> list[Metric]:
    """The metrics any of ``points`` holds a value of (a run without latency samples shows no latency)."""
    return [m for m in REGISTRY.values() if m.per == "request"
            and (m.primary or any(m.measures(p.engine) and getattr(s, m.field, None) is not None
                                  for p in points for s in p.samples if not s.warmup))]


def by_engine(engine: str) -> list[Metric]:
    """The metrics an engine measures (``bisect --metric`` takes those of llama-bench)."""
    return [m for m in REGISTRY.values() if engine in m.engines]


def _test_size(test: str) -> int:
    digits = "".join(ch for ch in test if ch.isdigit())
    return int(digits) if digits else 0


def pick_test(p: Point, metric: str) -> str | None:
    """For llama-bench points (samples tagged pp512, tg128, ...): the test a speed is read from.

    Mixing pp512 with pp4096 would blur two different workloads, so one test per metric is used:
    the largest (longer prompts give honest prompt speeds). ``None``: samples carry no test names.
    """
    attr = REGISTRY[metric].field if metric in REGISTRY else metric
    tests = {s.test for s in p.samples if s.test and not s.warmup and getattr(s, attr, None) is not None}
    if not tests:
        return None
    prefixed = [t for t in tests if t.startswith(metric)] or sorted(tests)
    return max(prefixed, key=lambda t: (_test_size(t), t))
