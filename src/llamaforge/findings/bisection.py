"""A stored bisection (``llamaforge bisect``) as rows and text: its probes in commit order with their starts and
verdicts, and the result lines it ends with — what ``bisect`` prints and what its report
(:mod:`llamaforge.report.kinds.bisect`) leads with.
"""

from __future__ import annotations

import statistics

from ..judge.locate import change
from ..records import BisectSummary
from ..store import Run, Store


def result_lines(s: BisectSummary, subjects: dict) -> list[str]:
    """What ``bisect`` prints at the end (and the report leads with), from the run's summary."""
    out: list[str] = []
    c = s.culprit or {}
    if s.first_bad:
        out.append(f"first bad commit: {s.first_bad}  {s.subject or ''}")
    elif s.status == "skipped":
        out.append(f"{s.reason}; the first bad commit is one of:")
        out += [f"  {x}  {subjects.get(x, '')}" for x in s.candidates]
    elif s.reason:
        out.append(("refused: " if s.status == "refused" else "") + str(s.reason))
        if s.status == "undecided" and s.candidates:
            out.append("candidates: " + ", ".join(x[:12] for x in s.candidates))
    j = c.get("judgement") or {}
    if c.get("confirmed") and j:
        out.append(f"commit {str(c.get('bad'))[:12]}: {s.metric or 'tg'} "
                   f"{change(j['ratio'], j['low'], j['high'])} against {str(c.get('good'))[:12]} "
                   f"(95 % CI, {_shape(j['a'])} + {_shape(j['b'])} starts, ABBA: the verdict's own re-measurement)")
    return out


def _shape(e: dict) -> str:
    """``5×3`` (starts × requests) where stored, else the starts' count."""
    return str(e.get("shape") or e.get("k"))


def probe_rows(store: Store, run: Run) -> list[dict]:
    """Probes of a bisect run in commit order with their starts and verdicts (from the stored summary)."""
    b = run.plan.bisect
    order = {sha: i for i, sha in enumerate(b.commits if b else [])}
    meds = {p["sha"]: p for p in run.summary_as(BisectSummary).probes}
    rows = []
    for pr in store.probes(run.id):
        d = meds.get(pr.commit_sha, {})
        rows.append({"index": order.get(pr.commit_sha), "sha": pr.commit_sha, "subject": pr.subject or "",
                     "verdict": pr.verdict, "median": d.get("median"), "values": d.get("values", []),
                     "starts": d.get("starts") or [], "estimate": d.get("estimate"), "placement": d.get("placement"),
                     "build_s": pr.build_s, "measure_s": d.get("measure_s", pr.measure_s), "incremental": pr.incremental,
                     "note": pr.note or "", "seq": pr.seq})
    return rows


def start_trace(store: Store, run: Run, field: str) -> list[tuple[float | None, str, str, float]]:
    """Every start of a bisect run in the order it was measured (its position in the run's schedule): (seconds
    since the first start, None where a start's time was not stored; the commit's sha; its probe verdict; the
    median of the start's ``field`` values). The view that shows how the machine's speed moved while the probes
    were judged (the report's ``starts.png``, ``benchmarks/bisect_trace.py``)."""
    verdicts = {p.commit_sha: p.verdict for p in store.probes(run.id)}
    by_label = {sha[:9]: sha for sha in verdicts}
    rows = []
    for point in store.points(run.id):
        sha = by_label.get(point.label[:9], point.label)
        recs = {rec.launch: rec for rec in point.launches}
        groups: dict[int, list[float]] = {}
        for smp in point.samples:
            v = getattr(smp, field)
            if not smp.warmup and v is not None:
                groups.setdefault(smp.launch, []).append(float(v))
        for launch, values in groups.items():
            rec = recs.get(launch)
            order = (rec.seq if rec and rec.seq is not None else 1 << 30, rec.started if rec and rec.started else 0.0)
            rows.append((order, rec.started if rec else None, sha, verdicts.get(sha, ""), statistics.median(values)))
    rows.sort(key=lambda r: r[0])
    t0 = next((t for _o, t, *_ in rows if t is not None), None)
    return [(None if t is None or t0 is None else t - t0, sha, verdict, v) for _o, t, sha, verdict, v in rows]
