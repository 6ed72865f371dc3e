"""The verdict on a re-run (``llamaforge reproduce``, ``--against``): does each point of a stored sweep reproduce?

A re-run (or a second run of the same plan) is judged point by point by the judge (:mod:`llamaforge.judge`)
on server starts, the re-run over the first run, per metric:

* **same** within ±``min_effect`` (the ratio's CI lies inside the band) → the metric *agrees*;
* **differs** (the CI lies outside) → it does not;
* **inconclusive** (the CI spans both) → the starts cannot tell: a noisy point no longer passes more
  easily than a quiet one; it is reported as inconclusive, with the starts it would take.

A point **reproduces** when every metric is the same, **differs** when one differs, and is
**inconclusive** otherwise; every metric of every point is one comparison of a family controlled
with Holm's method. The one-line verdict reads ``3/16 points reproduce (same within ±5 %), 1 differs,
12 inconclusive; Vulkan ncmoe 0 differs by +50 % (tg)``.

A pure function of the stored runs, so it lives with what stored runs say (``findings/``): the re-measuring is
:mod:`llamaforge.reproduce.remeasure`'s, the terminal's table :mod:`llamaforge.reproduce.show`'s, and the report
reads the same verdicts (:func:`verdict_for`) without loading the ``reproduce`` package.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from ..errors import BenchError
from ..findings.conditions import describe_point
from ..findings.labels import display_name, is_sentinel
from ..judge import DIFFERS, SAME, Judgement, Spread, Starts, judge, pooled
from ..judge.adjusted import controlled
from ..judge.adjusted import note as adjustment
from ..machine import launch_machines, mixed_note
from ..metrics import pick_test
from ..store import Point, Run, Store

MIN_EFFECT = 0.05
SWEEP_KINDS = ("sweep",)


@dataclass
class MetricCheck:
    metric: str
    judgement: Judgement | None           # the re-run over the first run (start level, family-controlled)

    @property
    def change(self) -> float | None:
        return None if self.judgement is None else self.judgement.ratio - 1

    def agrees(self) -> bool | None:
        """True: same within the margin; False: differs; None: inconclusive or not measured."""
        if self.judgement is None:
            return None
        return {SAME: True, DIFFERS: False}.get(self.judgement.verdict)

    def to_dict(self) -> dict:
        j = self.judgement
        return {"a": j.a.to_dict() if j else None, "b": j.b.to_dict() if j else None, "change": self.change,
                "agrees": self.agrees(), "verdict": j.verdict if j else None, "judgement": j.to_dict() if j else None}


@dataclass
class PointCheck:
    name: str                          # "Vulkan ncmoe 0" (+ engine when not the server)
    key: tuple
    status: str                        # reproduces | differs | inconclusive | failed
    metrics: list[MetricCheck] = field(default_factory=list)
    note: str = ""
    conditions: tuple[str, str] = ("", "")   # what telemetry saw while each side was measured


    @property
    def worst(self) -> MetricCheck | None:
        """The metric that decides the point's status: the largest change among those that differ, else among
        the inconclusive ones."""
        for want in (False, None):
            hits = [m for m in self.metrics if m.agrees() is want and m.change is not None]
            if hits:
                return max(hits, key=lambda m: abs(m.change or 0.0))
        return None

    def to_dict(self) -> dict:
        return {"name": self.name, "status": self.status, "note": self.note, "conditions": list(self.conditions),
                "metrics": {m.metric: m.to_dict() for m in self.metrics}}


@dataclass
class Verdict:
    parent: str
    child: str
    points: list[PointCheck]
    not_remeasured: list[str] = field(default_factory=list)   # the parent's points the child did not measure
    min_effect: float = MIN_EFFECT
    family: str = ""                   # how the error rate over the points' verdicts was controlled

    @property
    def n_ok(self) -> int:
        return sum(1 for p in self.points if p.status == "reproduces")

    def count(self, status: str) -> int:
        return sum(1 for p in self.points if p.status == status)

    def line(self) -> str:
        if not self.points:
            return f"run {self.child} measured none of run {self.parent}'s points"
        s = f"{self.n_ok}/{len(self.points)} points reproduce (same within ±{self.min_effect:.0%})"
        s += "".join(f", {n} {word}" for word, st in (("differ", "differs"), ("inconclusive", "inconclusive"),
                                                      ("failed", "failed")) if (n := self.count(st)))
        bad = sorted((p for p in self.points if p.status != "reproduces"),
                     key=lambda p: ("differs", "failed", "inconclusive").index(p.status)
                     if p.status in ("differs", "failed", "inconclusive") else 3)
        parts = []
        for p in bad[:4]:
            w = p.worst
            if w is not None and w.change is not None and w.judgement is not None:
                how = "differs by" if p.status == "differs" else "inconclusive at"
                parts.append(f"{p.name} {how} {w.change:+.0%} ({w.metric} {w.judgement.interval_text()}"
                             + (f"; {p.note})" if p.note else ")"))
            else:
                parts.append(f"{p.name} {p.status}" + (f" ({p.note})" if p.note else ""))
        if len(bad) > 4:
            parts.append(f"{len(bad) - 4} more")
        return s + ("; " + "; ".join(parts) if parts else "")

    def to_dict(self) -> dict:
        return {"parent": self.parent, "child": self.child, "line": self.line(), "reproduced": self.n_ok,
                "differs": self.count("differs"), "inconclusive": self.count("inconclusive"),
                "min_effect": self.min_effect, "family": self.family,
                "not_remeasured": list(self.not_remeasured),
                "points": [p.to_dict() for p in self.points]}


def _starts(p: Point, metric: str) -> Starts:
    """The point's ``metric`` values by server start (requests of one server are not independent)."""
    return Starts.of(p.launch_groups(f"{metric}_tps", pick_test(p, metric)))


def _priors(points: list[Point]) -> dict[tuple[str, str], Spread | None]:
    """Per (build, metric): the between-start spread measured for that build in that run (``judge.pooled``)."""
    out: dict[tuple[str, str], Spread | None] = {}
    for key in {p.build_key for p in points}:
        for m in ("pp", "tg"):
            out[(key, m)] = pooled([_starts(p, m) for p in points if p.build_key == key and p.status == "ok"],
                                   what=f"build {key[:24]} in this run")
    return out


def _name(p: Point, backend: str) -> str:
    who = p.label or display_name(backend)     # a variant's points carry its name
    name = f"{who} ncmoe {p.ncmoe}" + (f" ngl {p.ngl}" if p.ngl != -1 else "")
    return name + (f" ({p.engine})" if p.engine != "server" else "")


def machine_notes(a: Point, c: Point) -> list[str]:
    """``first run: launches from 2 machines`` / ``re-run: …`` for a side whose launches mix machines."""
    return [f"{side}: {m}" for side, p in (("first run", a), ("re-run", c))
            if (m := mixed_note(launch_machines(p.launches)))]


def _join(*notes: str) -> str:
    return "; ".join(n for n in notes if n)


def check_points(parent: list[Point], child: list[Point], backend_of: dict[str, str], *, parent_id: str = "",
                 child_id: str = "", min_effect: float = MIN_EFFECT) -> Verdict:
    """Compare the child run's points with the same points of the parent (points only one side has are
    left out: a subset reproduce measures only some). Drift sentinels are not points: they re-measure a
    reference point to watch the machine, and judging them again would count that point twice."""
    by_key = {p.key: p for p in parent if not is_sentinel(p.label)}
    points = [p for p in child if not is_sentinel(p.label)]
    prior_a, prior_b = _priors(list(by_key.values())), _priors(points)
    pending: list[tuple[Point, Point, str]] = []
    out: list[PointCheck] = []
    for c in sorted(points, key=lambda p: (p.ncmoe, p.ngl, backend_of.get(p.build_key, ""), p.engine)):
        a = by_key.get(c.key)
        if a is None:
            continue
        name = _name(c, backend_of.get(c.build_key, "?"))
        if a.status != "ok" or c.status != "ok":
            same = a.status == c.status and a.failure_class == c.failure_class
            out.append(PointCheck(name, c.key, "reproduces" if same else "failed",
                                  note=_join(f"{a.failure_class or 'ok'} then {c.failure_class or 'ok'}",
                                             *machine_notes(a, c))))
            continue
        pending.append((a, c, name))
    raw = [judge(_starts(a, m), _starts(c, m), min_effect=min_effect, prior_a=prior_a.get((a.build_key, m)),
                 prior_b=prior_b.get((c.build_key, m))) for a, c, _n in pending for m in ("pp", "tg")]
    judged = iter(controlled(raw))   # each interval the one its verdict used (Holm's level)
    for a, c, name in pending:
        checks = [MetricCheck(m, next(judged)) for m in ("pp", "tg")]
        checks = [m for m in checks if m.judgement is not None]
        verdicts = [m.agrees() for m in checks]
        status = ("differs" if False in verdicts else "reproduces" if verdicts and all(verdicts) else "inconclusive")
        note = f"context {a.n_ctx} then {c.n_ctx}" if a.n_ctx and c.n_ctx and a.n_ctx != c.n_ctx else ""
        out.append(PointCheck(name, c.key, status, checks, _join(note, *machine_notes(a, c)),
                              (describe_point(a), describe_point(c))))
    measured = {c.key for c in points}
    left = [_name(a, backend_of.get(a.build_key, "?"))
            for a in sorted(by_key.values(), key=lambda p: (backend_of.get(p.build_key, ""), p.ncmoe, p.ngl, p.engine))
            if a.key not in measured]
    n = sum(1 for j in raw if j is not None)
    family = adjustment("holm", n) if n > 1 else "one comparison"
    return Verdict(parent_id, child_id, out, left, min_effect, family)


def verdict_for(store: Store, parent: Run, child: Run, min_effect: float = MIN_EFFECT) -> Verdict:
    backend_of = {b.get("key"): str(b.get("backend")) for b in store.builds_for_run(parent.id) + store.builds_for_run(child.id)}
    return check_points(store.points(parent.id), store.points(child.id), backend_of, parent_id=parent.id,
                        child_id=child.id, min_effect=min_effect)


def verdict_between(store: Store, first_ref: str, second_ref: str, min_effect: float = MIN_EFFECT) -> Verdict:
    """Judge sweep ``second_ref`` against sweep ``first_ref`` without measuring: e.g. the same plan run in
    two sessions or on two machines. Their builds are matched by key, or by backend when the keys differ
    (a rebuild on another machine gets another key), which needs one build per backend in each run."""
    first, second = sweep_run(store, first_ref), sweep_run(store, second_ref)
    if first.id == second.id:
        raise BenchError(f"--against names run {first.id} itself", "give another run of the same plan")
    diff = first.plan.differences(second.plan)
    if diff:
        raise BenchError(f"run {second.id} is not a measurement of run {first.id}'s plan: {', '.join(diff)} differ",
                         "judge runs made with the same `llamaforge bench` options (same model, engine, prompt, "
                         "--n-predict, --vram-budget/--fitt, --extra)")
    b1, b2 = store.builds_for_run(first.id), store.builds_for_run(second.id)
    if {b.get("key") for b in b1} == {b.get("key") for b in b2}:
        return verdict_for(store, first, second, min_effect)
    by_backend: dict[str, str] = {}
    for run, builds in ((first, b1), (second, b2)):
        backends = [str(b.get("backend")) for b in builds]
        if len(set(backends)) != len(backends):
            raise BenchError(f"run {run.id} has several builds of one backend and the two runs' builds differ",
                             "compare two runs of the same builds, or runs with one build per backend")
        by_backend.update({str(b.get("key")): str(b.get("backend")) for b in builds})

    def by_backend_points(run: Run) -> list[Point]:
        return [replace(p, build_key=by_backend[p.build_key]) for p in store.points(run.id)]

    return check_points(by_backend_points(first), by_backend_points(second), {v: v for v in by_backend.values()},
                        parent_id=first.id, child_id=second.id, min_effect=min_effect)


def sweep_run(store: Store, run_id: str) -> Run:
    run = store.get_run(run_id)
    if run.kind not in SWEEP_KINDS:
        raise BenchError(f"run {run.id} is a {run.kind} run, not a sweep",
                         "reproduce a run made by `llamaforge bench` (list them with `llamaforge runs --kind sweep`)")
    return run
