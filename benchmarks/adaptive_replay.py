"""Replay the adaptive sweep (``llamaforge.bench.adaptive``) on a stored exhaustive sweep.

    python benchmarks/adaptive_replay.py STORE RUN [--share 0.333]

"Measuring" a point reads its stored samples (tg of every launch, warm-ups excluded; its 95 %
cluster-bootstrap CI); a confirmation cannot add launches that were never made, so it returns the
same summary. The context curve comes from the stored points' fitted ``n_ctx`` (what the fit map
gives before any measuring). The store is copied to a temporary folder first and only the copy is
opened (opening may migrate a store's schema): committed results are never touched.

Prints, for the adaptive sweep without a point budget (stops when stable) and with a budget of
``--share`` of the stored points: points used / available, and whether each conclusion matches the
exhaustive one (threshold and sweet spot per series; winner per region; anomalies found / missed /
not in the exhaustive run). A sweet spot "ties" when the two points' stored CIs overlap.
"""

from __future__ import annotations

import argparse
import math
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

from llamaforge.bench.adaptive import (  # noqa: E402
    AdaptiveOptions,
    AdaptiveResult,
    Conclusions,
    PointSummary,
    adaptive_sweep,
    conclude,
)
from llamaforge.stats import cluster_summary  # noqa: E402
from llamaforge.store import Store  # noqa: E402


def load(store: Store, run_id: str) -> tuple[dict, dict, int | None, list[int], list[int]]:
    """(summaries by series and x, context by series and x, native context, domain, full-attention layers)."""
    run = store.get_run(run_id)
    backend = {b["key"]: b.get("backend", b["key"]) for b in store.builds_for_run(run.id)}
    summ: dict[str, dict[int, PointSummary]] = {}
    ctx: dict[str, dict[int, int | None]] = {}
    for p in store.points(run.id):
        if p.status != "ok" or p.label or p.engine != "server":
            continue
        cs = cluster_summary(p.launch_groups("tg_tps"))
        if cs is None:
            continue
        s = backend.get(p.build_key, p.build_key)
        summ.setdefault(s, {})[p.ncmoe] = PointSummary(cs.median, cs.ci_low, cs.ci_high, cs.n_launches)
        ctx.setdefault(s, {})[p.ncmoe] = p.n_ctx
    domain = sorted(set.intersection(*(set(v) for v in summ.values()))) if summ else []
    facts = (run.plan.get("model") or {}).get("facts") or {}
    return summ, ctx, facts.get("n_ctx_train"), domain, list(facts.get("full_attention_layers") or [])


def verdicts(ad: Conclusions, ex: Conclusions, summ: dict, domain: list[int]) -> dict[str, str]:
    out = {}
    out["threshold"] = "yes" if ad.threshold == ex.threshold else f"no ({ad.threshold} vs {ex.threshold})"
    sweet = []
    for s, x_ex in ex.sweet_spot.items():
        x_ad = ad.sweet_spot.get(s)
        if x_ad == x_ex:
            sweet.append(f"{s} {x_ad}: yes")
        elif x_ad is not None and x_ex is not None and summ[s][x_ad].overlaps(summ[s][x_ex]):
            sweet.append(f"{s} {x_ad} vs {x_ex}: tie")
        else:
            sweet.append(f"{s} {x_ad} vs {x_ex}: NO")
    out["sweet spot"] = "; ".join(sweet)
    if len(summ) > 1:
        pairs = [(x, _label(ad, x), _label(ex, x)) for x in domain]
        wrong = [x for x, la, le in pairs if le not in (None, "tie") and la != le]
        out["winner per region"] = ("yes: " if not wrong else f"NO at ncmoe {wrong}: ") + _regions(ad)
    found = {s: sorted(set(ad.anomalies.get(s, [])) & set(v)) for s, v in ex.anomalies.items()}
    missed = {s: sorted(set(v) - set(ad.anomalies.get(s, []))) for s, v in ex.anomalies.items()}
    extra = {s: sorted(set(v) - set(ex.anomalies.get(s, []))) for s, v in ad.anomalies.items()}
    out["anomalies"] = "; ".join(f"{s}: found {found[s]} missed {missed[s]} not-exhaustive {extra.get(s, [])}"
                                 for s in ex.anomalies)
    return out


def _label(c: Conclusions, x: int) -> str | None:
    return next((w for lo, hi, w in c.regions if lo <= x <= hi), None)


def _regions(c: Conclusions) -> str:
    return ", ".join(f"{lo}–{hi} {w}" for lo, hi, w in c.regions)


def replay(summ: dict, ctx: dict, native: int | None, domain: list[int], fa: list[int],
           budget: int | None) -> AdaptiveResult:
    def measure(s: str, x: int) -> PointSummary | None:
        return summ[s].get(x)

    return adaptive_sweep(sorted(summ), domain, measure, ctx=ctx, native=native, full_attention_layers=fa,
                          options=AdaptiveOptions(max_points=budget))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("store", type=Path)
    ap.add_argument("run")
    ap.add_argument("--share", type=float, default=1 / 3, help="point budget as a share of the stored points")
    a = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / "replay.sqlite"
        shutil.copyfile(a.store, copy)
        with Store(copy) as store:
            run_id = store.get_run(a.run).id
            summ, ctx, native, domain, fa = load(store, run_id)
    if not summ:
        print(f"run {a.run}: no ok server points to replay")
        return 1
    avail = sum(len([x for x in v if x in domain]) for v in summ.values())
    ex = conclude({s: {x: v[x] for x in domain} for s, v in summ.items()}, ctx, native, domain)
    print(f"run {run_id}: {', '.join(sorted(summ))}; ncmoe {domain[0]}..{domain[-1]} ({len(domain)} per series); "
          f"native context {native}")
    print(f"exhaustive: threshold {ex.threshold}; sweet spot {ex.sweet_spot}; regions {_regions(ex) or '–'}; "
          f"anomalies {ex.anomalies}")
    for label, budget in (("stop when stable", None), (f"budget {a.share:.0%}", math.floor(avail * a.share))):
        r = replay(summ, ctx, native, domain, fa, budget)
        used = r.n_measured
        print(f"\n[{label}] points used {used}/{avail} ({used / avail:.0%}), stopped: {r.stopped}")
        for s in sorted(r.measured):
            print(f"  {s}: measured {sorted(r.measured[s])}")
        for k, v in verdicts(r.conclusions, ex, summ, domain).items():
            print(f"  {k}: {v}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
