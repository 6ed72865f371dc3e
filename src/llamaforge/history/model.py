"""The history's data: series of commit levels, the steps found in them and backend ratios.

One :class:`Series` is keyed by machine × backend × model × point × metric (:class:`SeriesKey`); two
machines are never one series. A :class:`Level` is one commit of a series with its measurements as
server starts (``starts``: per start, its request values, or one value per start for memory), so every
statistic is computed at the start level by the judge. Everything here is plain data with
``to_dict``/``from_dict``: it is what ``history.publish`` writes as the site's ``history.json``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from .. import metrics as registry
from ..judge import Estimate, Starts, estimate


@dataclass(frozen=True)
class Metric:
    name: str
    label: str
    unit: str
    higher_is_better: bool
    per: str = "request"          # request: values per request inside a start; start: one value per start


#: the history's metrics: the registry's (``llamaforge.metrics``) that history series are kept for, as shown
METRICS: dict[str, Metric] = {m.name: Metric(m.name, m.noun, m.unit, m.higher_is_better, m.per)
                              for m in registry.REGISTRY.values() if m.history}
#: metrics a step of can be bisected (the bisect measures with llama-bench: the request metrics it times)
BISECTABLE = tuple(m.name for m in registry.by_engine("llama-bench") if m.per == "request")


@dataclass(frozen=True, order=True)
class SeriesKey:
    machine: str
    backend: str
    model: str
    point: str                    # "ncmoe=0", "ngl=99"
    metric: str
    setup: str = ""               # how a start measures: "llama-bench pp128 tg32 r3" (different setups never mix)

    @property
    def slug(self) -> str:
        """A file-name-safe id (the site's page name)."""
        raw = f"{self.machine}-{self.backend}-{self.model}-{self.point}-{self.metric}-{self.setup}"
        return "".join(c if c.isalnum() or c in "-_." else "_" for c in raw).strip("._")[:150]

    def text(self) -> str:
        return f"{self.metric} · {self.backend} · {self.model} · {self.point} · {self.machine}"

    def pair_key(self) -> tuple[str, str, str, str, str]:
        """What two backends' series share to be compared: machine, model, point, metric and setup."""
        return (self.machine, self.model, self.point, self.metric, self.setup)


@dataclass
class Level:
    """One commit of a series: where it sits, what it is, and its starts."""

    sha: str
    order: int                     # position on the first-parent line (commit count) or the release order
    label: str = ""                # a pin name, else the short sha
    subject: str = ""
    date: float | None = None      # committer time (epoch s)
    url: str | None = None         # the commit's page, when the source is a known forge
    starts: list[list[float]] = field(default_factory=list)
    status: str = "ok"             # ok | failed (measurement) | build-failed
    note: str | None = None
    runs: list[str] = field(default_factory=list)
    remeasure: str | None = None   # measured in ≥ 2 runs: reproduces | differs | inconclusive (the judge)

    @property
    def short(self) -> str:
        return self.sha[:9]

    def starts_of(self) -> Starts:
        return Starts.of(self.starts)

    def estimate(self) -> Estimate | None:
        return estimate(self.starts_of()) if self.starts else None


@dataclass
class Step:
    """A change between two measured commits: the segment before vs the segment after, judged at the start
    level; ``culprit`` is the exact commit, named only once it was re-measured against its parent and the
    change shown there (``--bisect``: the bisect's culprit check, or for adjacent commits the confirmation
    alone, :mod:`llamaforge.bisect.confirm`) — never because the two measured commits are adjacent."""

    before: str                    # the last measured commit before the step
    after: str                     # the first measured commit after it
    ratio: float                   # after / before (segment centres)
    low: float
    high: float
    p: float                       # the judge's p of "differs by more than the minimum effect"
    p_adjusted: float              # × candidate positions, then Holm over the series' steps
    k_before: int                  # starts pooled on each side
    k_after: int
    segment_before: tuple[str, str] = ("", "")   # first and last commit of each segment
    segment_after: tuple[str, str] = ("", "")
    between: int = 0               # commits between before and after that were not measured
    adjusted: str = ""             # how p was adjusted (the judge's note)
    culprit: str | None = None
    culprit_subject: str | None = None
    culprit_url: str | None = None
    bisect_run: str | None = None
    bisect_status: str | None = None   # the bisect's (found, undecided, skipped, refused), or why none ran
    bisect_note: str | None = None
    #: the bisect's interleaved (ABBA) re-measurement of the two ends: the judge's verdict and ratio
    remeasured: dict | None = None
    #: the culprit's confirmation (:meth:`llamaforge.bisect.confirm.Confirmation.to_dict`): ``status`` confirmed |
    #: refuted | undecided, ``line`` (its one sentence), ``k`` (starts per side), ``judgement``
    confirmation: dict | None = None
    #: proposed by the segmentation (or a pair's "differs" that did not survive Holm) but not shown by these
    #: levels: not a step until a fresh re-measurement confirms it (``Series.candidates``)
    candidate: bool = False

    @property
    def change(self) -> float:
        return self.ratio - 1.0

    @property
    def status(self) -> str:
        """``located`` (culprit named: re-measured against its parent, the change shown there), ``refuted``
        (re-measured interleaved, the ends were the same or differed the other way: drift between back-to-back
        measurements, or noise), ``undecided`` (re-measured, and the judge could not decide within the budget: the
        range is said, no commit), ``not located`` (bisect ran but stopped, or was not possible), ``unconfirmed``
        (adjacent commits never re-measured against each other: the change lies in ``before..after``, not yet
        shown there), ``between releases`` (release pins: not one first-parent line here, not bisected),
        ``open`` (not bisected yet), ``candidate`` (proposed, not shown by the levels: in ``Series.candidates``)."""
        r = self.remeasured or {}
        if r.get("verdict") == "same" or (r.get("verdict") == "differs"
                                          and (r.get("ratio", 1.0) - 1.0) * self.change <= 0):
            return "refuted"
        if self.culprit:
            return "located"
        if (self.confirmation or {}).get("status") == "refuted":
            return "refuted"
        if (self.confirmation or {}).get("status") == "undecided" or r.get("verdict") == "inconclusive":
            return "undecided"
        if self.bisect_status:
            return "not located"
        if self.candidate:
            return "candidate"
        if self.between == 0:
            return "unconfirmed"
        return "between releases" if self.between < 0 else "open"

    def to_dict(self) -> dict:
        d = asdict(self)
        d["segment_before"], d["segment_after"] = list(self.segment_before), list(self.segment_after)
        return d

    @classmethod
    def from_dict(cls, d: dict) -> Step:
        d = dict(d)
        d["segment_before"] = tuple(d.get("segment_before") or ("", ""))
        d["segment_after"] = tuple(d.get("segment_after") or ("", ""))
        return cls(**d)


@dataclass
class Series:
    key: SeriesKey
    levels: list[Level] = field(default_factory=list)     # in commit order
    steps: list[Step] = field(default_factory=list)
    min_effect: float = 0.05
    #: change points not shown by the levels, for ``--bisect`` to re-measure (never printed as steps)
    candidates: list[Step] = field(default_factory=list)

    @property
    def metric(self) -> Metric:
        return METRICS.get(self.key.metric) or Metric(self.key.metric, self.key.metric, "", True)

    def level(self, sha: str) -> Level | None:
        return next((lv for lv in self.levels if lv.sha == sha), None)

    def measured(self) -> list[Level]:
        return [lv for lv in self.levels if lv.status == "ok" and lv.starts]

    def to_dict(self) -> dict:
        return {"key": asdict(self.key), "slug": self.key.slug, "metric": asdict(self.metric),
                "min_effect": self.min_effect, "levels": [asdict(lv) for lv in self.levels],
                "steps": [s.to_dict() for s in self.steps], "candidates": [s.to_dict() for s in self.candidates]}

    @classmethod
    def from_dict(cls, d: dict) -> Series:
        return cls(SeriesKey(**d["key"]), [Level(**lv) for lv in d.get("levels") or []],
                   [Step.from_dict(s) for s in d.get("steps") or []], float(d.get("min_effect", 0.05)),
                   [Step.from_dict(s) for s in d.get("candidates") or []])


@dataclass
class RatioRow:
    """The series' first backend (``a``) relative to its second (``b``) at one commit: a/b of their start-level
    centres (``history.ratio.ratio_series``)."""

    sha: str
    label: str
    ratio: float
    low: float
    high: float
    verdict: str
    k_a: int
    k_b: int
    interval: str = "95 % CI"      # the judge's interval label (an assumed spread below 3 starts is said)


@dataclass
class RatioSeries:
    a: SeriesKey
    b: SeriesKey
    rows: list[RatioRow] = field(default_factory=list)
    summary: str = ""              # "the vulkan/cuda ratio at ncmoe=0 went from 0.62× to 0.83× between X and Y"

    def to_dict(self) -> dict:
        return {"a": asdict(self.a), "b": asdict(self.b), "rows": [asdict(r) for r in self.rows],
                "summary": self.summary}

    @classmethod
    def from_dict(cls, d: dict) -> RatioSeries:
        return cls(SeriesKey(**d["a"]), SeriesKey(**d["b"]), [RatioRow(**r) for r in d.get("rows") or []],
                   d.get("summary", ""))


@dataclass
class History:
    """Everything a site shows: the series (with steps) and the backend ratios."""

    series: list[Series] = field(default_factory=list)
    ratios: list[RatioSeries] = field(default_factory=list)
    generated: float | None = None
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"format": "llamaforge-history/1", "generated": self.generated, "notes": self.notes,
                "series": [s.to_dict() for s in self.series], "ratios": [r.to_dict() for r in self.ratios]}

    @classmethod
    def from_dict(cls, d: dict) -> History:
        return cls([Series.from_dict(s) for s in d.get("series") or []],
                   [RatioSeries.from_dict(r) for r in d.get("ratios") or []], d.get("generated"),
                   list(d.get("notes") or []))
