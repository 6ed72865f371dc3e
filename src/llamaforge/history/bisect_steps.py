"""``history.run --bisect``: each step of a series located to its commit by the noise-aware bisect
(:func:`llamaforge.bisect.run_bisect`: both ends re-measured interleaved, the refusal up front when the
change cannot be located within the starts allowed, probes judged against both ends, the culprit checked
against its parent). Only pp and tg steps (the bisect measures t/s with llama-bench), only between two
commits of one first-parent line (not between release pins), and each step once: a step located by an
earlier run is not bisected again. A step between **adjacent** commits is not named for being adjacent: its
commit is re-measured against its parent, ABBA, until the judge decides or the budget is spent
(:mod:`llamaforge.bisect.confirm`, through the same bisect run with the step's direction), and named only
when the change shows there; otherwise the step says "range a..b, undecided after K starts" or refuted.
The results are stored in the run's summary (``culprits``, each with its ``confirmation``) and joined onto
the steps when the history is loaded (:func:`.load.attach_culprits`)."""

from __future__ import annotations

from typing import Any

from ..bisect import BisectRequest, run_bisect
from ..bisect.search import BisectRefused
from ..console import console, esc
from ..errors import LlamaforgeError
from ..records import HistorySummary
from ..store import Store
from .load import Filter, load_history
from .model import BISECTABLE, Series, Step


def _located(store: Store) -> set[tuple]:
    out = set()
    for run in store.list_runs("history"):
        if run.summary:
            out |= {(c.get("backend"), c.get("point"), c.get("metric"), c.get("before"), c.get("after"))
                    for c in run.summary_as(HistorySummary).culprits}
    return out


def _ends(res: Any) -> dict | None:
    """The bisect's interleaved re-measurement of the step's two ends: verdict and ratio (bad / good)."""
    e = getattr(res, "endpoints", None) or {}
    return {k: e.get(k) for k in ("verdict", "ratio", "low", "high")} if e.get("verdict") else None


def _confirmation(res: Any) -> dict | None:
    """The culprit's confirmation as the step stores it: status, its sentence, starts per side, the judgement."""
    c = getattr(res, "culprit", None) or {}
    if not c.get("status"):
        return None
    return {k: c.get(k) for k in ("good", "bad", "status", "line", "k", "budget", "judgement", "order")}


def _bisect_one(paths: Any, store: Store, series: Series, st: Step, req: Any) -> dict:
    k = series.key
    row = {"backend": k.backend, "point": k.point, "metric": k.metric, "before": st.before, "after": st.after,
           "source": str(req.selection.source) if req.selection.source else None, "culprit": None, "subject": None,
           "run": None, "status": None, "note": None}
    if st.between < 0:
        row.update(status="not bisected", note="between release pins (not one first-parent line): bisect their "
                   "commits with `llamaforge bisect --good ... --bad ...` and a source that has the history")
        return row
    ncmoe = int(k.point.split("=")[1]) if k.point.startswith("ncmoe=") else 0
    breq = BisectRequest(good=st.before, bad=st.after, metric=k.metric, backend=k.backend, threshold=series.min_effect,
                         model=k.model, repeats=req.repeats, max_launches=req.bisect_budget, source=row["source"],
                         threads=req.threads, quiet=req.quiet, ncmoe=ncmoe,
                         direction=(1 if st.ratio > 1 else -1) if st.between == 0 else None)
    console.print(esc(f"{'confirm' if st.between == 0 else 'bisect'} {k.metric} step {st.change:+.0%} between {st.before[:9]} and {st.after[:9]} "
                      f"({st.between} commits between; {k.backend}, {k.point})"))
    try:
        run_id, res = run_bisect(paths, store, breq, command="history.run --bisect")
        row.update(run=run_id, status=res.status, culprit=res.first_bad, note=res.reason, endpoints=_ends(res),
                   confirmation=_confirmation(res))
    except BisectRefused as e:
        row.update(status="refused", note=str(e), run=store.list_runs("bisect")[-1].id, endpoints=_ends(e.result))
    except LlamaforgeError as e:
        row.update(status="failed", note=str(e))
    if row["culprit"]:
        lv = series.level(row["culprit"])
        row["subject"] = lv.subject if lv else (store.get_run(row["run"]).plan.bisect.subjects or {}).get(row["culprit"])
    return row


def locate_steps(paths: Any, store: Store, run_id: str, req: Any, machine: str) -> list[dict]:
    """Bisect every step of this machine's series (this request's setup and backends) not located yet."""
    hist = load_history(store, Filter(machine=machine, model=req.model))
    done = _located(store)
    summ = store.get_run(run_id).summary_as(HistorySummary)
    rows = []
    for series in hist.series:
        k = series.key
        if k.setup != req.setup or k.metric not in BISECTABLE or k.backend not in req.backends:
            continue
        # the steps, and the adjacent candidates the levels could not show (their confirmation is the test)
        for st in [*series.steps, *(c for c in series.candidates if c.between == 0)]:
            if st.culprit or (k.backend, k.point, k.metric, st.before, st.after) in done:
                continue
            rows.append(_bisect_one(paths, store, series, st, req))
            summ.culprits = [*summ.culprits, rows[-1]]
            store.set_run_summary(run_id, summ)
    return rows
