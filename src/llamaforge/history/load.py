"""The store's history runs as series (see :mod:`.model`): one per machine × backend × model × point ×
metric × setup, the runs of one series merged commit by commit (a commit measured again adds starts).

A run whose starts come from more than one machine, or two machines behind one name, is refused: a
series never mixes machines (``fleet.history`` keeps one series per machine by naming each host).
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass

from .. import metrics as registry
from ..errors import ConfigError, StoreError
from ..judge import judge
from ..judge.metric_starts import groups
from ..machine import stable_id
from ..records import HistorySection, HistorySummary
from ..store import Point, Run, Store
from .model import METRICS, History, Level, Series, SeriesKey
from .ratio import ratios
from .steps import pair_candidates, pair_steps, steps_and_candidates

UPSTREAM = "https://github.com/ggml-org/llama.cpp/commit/"
#: the throughput metrics (pp, tg): what a build failure marks and what a re-measurement note counts
PRIMARY = tuple(m.name for m in registry.primary())


@dataclass(frozen=True)
class Filter:
    machine: str | None = None
    backend: str | None = None
    model: str | None = None
    metric: str | None = None

    def keeps(self, key: SeriesKey) -> bool:
        return all(want is None or want == have for want, have in ((self.machine, key.machine),
                   (self.backend, key.backend), (self.model, key.model), (self.metric, key.metric)))


def machine_of(run: Run) -> str:
    return str(run.env.machine or run.env.host or "unknown")


def _machine_ids(store: Store, run: Run, points: list[Point]) -> set[str]:
    """The machines (lasting ids: a reboot is the same machine) whose starts a run holds; more than one is refused."""
    ids: set[str] = set()
    for p in points:
        for r in p.launches:
            sid = stable_id(r.machine)
            if sid:
                ids.add(sid)
    if len(ids) > 1:
        raise StoreError(f"history run {run.id} holds starts from {len(ids)} machines ({', '.join(sorted(ids))}); "
                         "a series never mixes machines",
                         "measure each machine into its own run (fleet.history does), or delete the run")
    return ids


def metric_starts(p: Point, metric: str, engine: str) -> list[list[float]]:
    """A point's values of ``metric`` per start (one value per start for memory; ``[]`` where it has none or
    its engine does not measure it, e.g. llama-bench and time to first token)."""
    m = registry.get(metric)
    return groups(m, p) if m.measures(engine) else []


def _url(sha: str, source: str | None) -> str | None:
    """The upstream commit page of a commit from upstream (no ``--source``, or ``git``; release pins' commits
    are upstream's, abbreviated: GitHub resolves those too)."""
    ok = 7 <= len(sha) <= 40 and all(c in "0123456789abcdef" for c in sha.lower())
    return UPSTREAM + sha if source in (None, "", "git") and ok else None


class _Builder:
    """Series accumulated run by run."""

    def __init__(self, flt: Filter) -> None:
        self.flt = flt
        self.levels: dict[SeriesKey, dict[str, Level]] = {}
        self.min_effect: dict[SeriesKey, float] = {}
        self.ids: dict[str, set[str]] = {}           # machine name → machine ids seen
        self.culprits: list[dict] = []
        self.by_run: dict[tuple[SeriesKey, str], dict[str, list[list[float]]]] = {}
        self.pairs: list[dict] = []

    def level(self, key: SeriesKey, sha: str, meta: dict, source: str | None) -> Level:
        lv = self.levels.setdefault(key, {}).get(sha)
        if lv is None:
            lv = Level(sha, int(meta.get("order") or 0), meta.get("label") or sha[:9], meta.get("subject") or "",
                       meta.get("date"), _url(sha, source))
            self.levels[key][sha] = lv
        return lv

    def add_run(self, store: Store, run: Run) -> None:
        sec = run.plan.history or HistorySection()
        points = store.points(run.id)
        machine = machine_of(run)
        seen = self.ids.setdefault(machine, set())
        seen |= _machine_ids(store, run, points)
        if len(seen) > 1:
            raise StoreError(f"the history of {machine!r} holds starts from {len(seen)} machines behind one name",
                             "give each machine its own LLAMAFORGE_MACHINE name (fleet hosts are named by the fleet file)")
        backends = {b["key"]: b.get("backend") for b in store.builds_for_run(run.id)}
        meta = {c["sha"]: c for c in sec.commits}
        for p in points:
            backend = backends.get(p.build_key) or "?"
            where = f"ngl={p.ngl}" if p.ngl != -1 and not p.ncmoe else f"ncmoe={p.ncmoe}"
            for metric in METRICS:
                key = SeriesKey(machine, backend, run.plan.model_ref, where, metric, sec.setup or "")
                groups = metric_starts(p, metric, p.engine)
                if not self.flt.keeps(key) or (not groups and p.status == "ok"):
                    continue
                lv = self.level(key, p.label, meta.get(p.label, {}), sec.source)
                self.min_effect[key] = sec.min_effect or 0.05
                lv.starts += groups
                lv.runs.append(run.id)
                self.by_run.setdefault((key, p.label), {}).setdefault(run.id, []).extend(groups)
                if p.status != "ok" and not lv.starts:
                    lv.status, lv.note = "failed", f"{p.failure_class}: {p.failure_detail or ''}"[:300]
        self._failed_builds(run, sec, machine, meta)
        summ = run.summary_as(HistorySummary) if run.summary else HistorySummary()
        self.culprits += [{**c, "machine": machine} for c in summ.culprits]
        self.pairs += [{**c, "machine": machine, "setup": sec.setup or "", "model": run.plan.model_ref, "run": run.id}
                       for c in summ.pairs]

    def _failed_builds(self, run: Run, sec: HistorySection, machine: str, meta: dict) -> None:
        summ = run.summary_as(HistorySummary) if run.summary else HistorySummary()
        points = [f"ncmoe={p.ncmoe}" for p in run.plan.points] or ["ncmoe=0"]
        for sha, per_backend in summ.failed.items():
            for backend, why in per_backend.items():
                if not str(why).startswith("build"):
                    continue
                for where in points:
                    for metric in (m.name for m in registry.primary()):
                        key = SeriesKey(machine, backend, run.plan.model_ref, where, metric, sec.setup or "")
                        if self.flt.keeps(key):
                            lv = self.level(key, sha, meta.get(sha, {}), sec.source)
                            if not lv.starts:
                                lv.status, lv.note = "build-failed", str(why)[:300]

    def series(self) -> list[Series]:
        out = []
        for key in sorted(self.levels):
            levels = sorted(self.levels[key].values(), key=lambda lv: (lv.order, lv.date or 0))
            s = Series(key, levels, min_effect=self.min_effect.get(key, 0.05))
            for lv in levels:
                remeasured(lv, self.by_run.get((key, lv.sha), {}), s.min_effect)
            mine = [c for c in self.pairs if (c["machine"], c["backend"], c["model"], c["point"], c["metric"],
                                              c["setup"]) == (key.machine, key.backend, key.model, key.point,
                                                              key.metric, key.setup)]
            if mine:
                s.steps = pair_steps(s, mine)
                s.candidates = pair_candidates(s, mine, s.steps)
            else:
                s.steps, s.candidates = steps_and_candidates(s)
            attach_culprits(s, self.culprits)
            out.append(s)
        return out


def remeasured(lv: Level, by_run: dict[str, list[list[float]]], min_effect: float) -> None:
    """A commit measured in two or more runs: the first run's starts against the later runs' (the judge), in
    the level's note — the re-measurement a number must survive; ``lv.remeasure`` holds the verdict."""
    runs = [r for r, g in by_run.items() if g]
    if lv.status != "ok" or len(runs) < 2:
        return
    later = [g for r in runs[1:] for g in by_run[r]]
    j = judge(by_run[runs[0]], later, min_effect=min_effect)
    if j is None:
        return
    lv.remeasure = {"same": "reproduces", "differs": "differs"}.get(j.verdict, "inconclusive")
    text = f"re-measured in {len(runs)} runs: {lv.remeasure} ({j.fmt()})"
    lv.note = f"{lv.note}; {text}" if lv.note else text


def remeasure_note(series: list[Series]) -> str:
    """One sentence for the whole history: how many commit levels survived a re-measurement."""
    levels = [lv for s in series if s.key.metric in PRIMARY for lv in s.measured()]
    again = [lv for lv in levels if lv.remeasure]
    if not levels:
        return ""
    if not again:
        return (f"Not re-measured: each of the {len(levels)} pp/tg commit levels was measured in one run only "
                "(run the same history.run again to re-measure them; the site then says which reproduce).")
    counts = {v: sum(lv.remeasure == v for lv in again) for v in ("reproduces", "differs", "inconclusive")}
    return (f"Re-measured: {len(again)} of {len(levels)} pp/tg commit levels were measured again in a later run: "
            f"{counts['reproduces']} reproduce, {counts['differs']} differ, {counts['inconclusive']} inconclusive "
            f"(the judge, ±{series[0].min_effect:.0%}); the other {len(levels) - len(again)} were measured in one run "
            "only and have not survived a re-measurement.")


def attach_culprits(series: Series, culprits: Iterable[dict]) -> None:
    """Join the located steps (``HistorySummary.culprits``) onto the series' steps and candidates: same machine,
    backend, point and metric, the culprit inside the step's gap (after ``before``, at or before ``after``). A
    step between adjacent commits is not located by being adjacent: its commit is named only by a confirmation
    (``history.run --bisect`` re-measures it against its parent, :mod:`llamaforge.bisect.confirm`); until
    then its status is ``unconfirmed``. A candidate (``Series.candidates``) whose confirmation showed the
    change becomes a step."""
    for st in [*series.steps, *series.candidates]:
        for c in culprits:
            if (c.get("machine"), c.get("backend"), c.get("point"), c.get("metric")) != (
                    series.key.machine, series.key.backend, series.key.point, series.key.metric):
                continue
            if c.get("before") == st.before and c.get("after") == st.after:
                st.culprit = c.get("culprit") or st.culprit
                st.culprit_subject = c.get("subject") or st.culprit_subject
                st.culprit_url = _url(st.culprit, c.get("source")) if st.culprit else None
                st.bisect_run, st.bisect_status, st.bisect_note = c.get("run"), c.get("status"), c.get("note")
                st.remeasured = c.get("endpoints")
                st.confirmation = c.get("confirmation")
    shown = [st for st in series.candidates if st.culprit]
    if shown:
        order = {lv.sha: lv.order for lv in series.levels}
        series.steps = sorted([*series.steps, *shown], key=lambda st: order.get(st.after, 0))
        series.candidates = [st for st in series.candidates if not st.culprit]


def load_history(store: Store, flt: Filter | None = None) -> History:
    """Every history run of the store as series with their steps, and the backend ratios."""
    b = _Builder(flt or Filter())
    for run in store.list_runs("history"):
        b.add_run(store, run)
    series = b.series()
    note = remeasure_note(series)
    return History(series, ratios(series), time.time(), [note] if note else [])


def selected_history(store: Store, flt: Filter) -> History:
    """:func:`load_history` under ``flt``; when the filter matches no series while the store has some, one
    line that names what is there (a typo in ``--model`` must not publish an empty site)."""
    h = load_history(store, flt)
    if h.series or flt == Filter():
        return h
    everything = load_history(store)
    if not everything.series:
        raise ConfigError(f"no stored series matches {_asked(flt)}: no history is stored yet",
                          "measure one first: `llamaforge history.run --range A..B` (or --releases)")
    have = {name: sorted({getattr(s.key, name) for s in everything.series}) for name in ("machine", "backend", "model",
                                                                                         "metric")}
    raise ConfigError(f"no stored series matches {_asked(flt)}",
                      "; ".join(f"{k}: {', '.join(v)}" for k, v in have.items()))


def _asked(flt: Filter) -> str:
    return ", ".join(f"--{k} {v}" for k, v in vars(flt).items() if v is not None)
