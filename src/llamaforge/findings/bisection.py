"""A stored bisection (``llamaforge bisect``) as rows and text: its probes in commit order with their starts and
verdicts, and the result lines it ends with — what ``bisect`` prints and what its report
(:mod:`llamaforge.report.kinds.bisect`) leads with.
"""

from __future__ import annotations

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
                   f"(95 % CI, {j['a']['k']}+{j['b']['k']} starts, ABBA)")
    return out


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
