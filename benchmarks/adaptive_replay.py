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

from scipy.stats import t as student_t  # noqa: E402

from llamaforge.bench.adaptive import (  # noqa: E402
    AdaptiveOptions,
    AdaptiveResult,
    Conclusions,
    PointSummary,
    adaptive_sweep,
    conclude,
    established,
    launch_noise,
)
from llamaforge.stats import cluster_summary  # noqa: E402
from llamaforge.store import Store  # noqa: E402

SECONDS: dict[tuple[str, int], float] = {}     # wall time of each stored point, filled by load()
FIT_SECONDS: list = [None, ""]                # the fit map's wall time and its source, filled by load()
FULL_POINTS = [0]                             # points of a sweep of every ncmoe, all series, set by main()


def point_seconds(p) -> float:  # noqa: ANN001
    """Wall time of a stored point: the sum over its launches (server start to stop)."""
    recs = [r for r in p.launches if r.get("started") and r.get("finished")]
    if recs:
        return sum(r["finished"] - r["started"] for r in recs)
    return (p.finished - p.started) if p.started and p.finished else 0.0


def fitmap_seconds(store: Store, build_keys: set[str]) -> tuple[float | None, str]:
    """Wall time of the newest fit map of each of these builds in the store, and where it comes from; where
    none is stored for them, the newest fit map of as many builds in the store stands in (an estimate)."""
    newest: dict[str, float] = {}
    other: dict[str, float] = {}
    for run in store.list_runs("fitmap"):
        for key in set(run.plan.get("builds") or []):
            secs = sum(point_seconds(p) for p in store.points(run.id, build_key=key, with_samples=False))
            (newest if key in build_keys else other)[key] = secs
    if newest:
        return sum(newest.values()), "the stored fit map"
    if other:
        per = sum(other.values()) / len(other)
        return per * len(build_keys), "a fit map estimated from other builds' stored fit maps"
    return None, ""


def load(store: Store, run_id: str) -> tuple[dict, dict, int | None, list[int], list[int]]:
    """(summaries by series and x, context by series and x, native context, domain, full-attention layers);
    the seconds of every point in ``SECONDS`` and the fit map's in ``FIT_SECONDS``."""
    run = store.get_run(run_id)
    SECONDS.clear()
    keys = {b["key"] for b in store.builds_for_run(run.id)}
    FIT_SECONDS[:] = fitmap_seconds(store, keys)
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
        summ.setdefault(s, {})[p.ncmoe] = PointSummary(cs.median, cs.ci_low, cs.ci_high, cs.n_launches, cs.launch_medians)
        SECONDS[(s, p.ncmoe)] = point_seconds(p)
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
        elif x_ad is not None and x_ex is not None and _tie(summ[s], x_ad, x_ex):
            sweet.append(f"{s} {x_ad} vs {x_ex}: tie")
        else:
            sweet.append(f"{s} {x_ad} vs {x_ex}: NO")
    out["sweet spot"] = "; ".join(sweet)
    if len(summ) > 1:
        pairs = [(x, _label(ad, x), _label(ex, x)) for x in domain]
        wrong = [x for x, la, le in pairs if le not in (None, "tie") and la != le]
        out["winner per region"] = ("yes: " if not wrong else f"NO at ncmoe {wrong}: ") + _regions(ad)
    out["suspects"] = "; ".join(f"{s}: exhaustive {ex.suspects.get(s, [])}, adaptive {ad.suspects.get(s, [])}"
                                for s in sorted(summ))
    found = {s: sorted(set(ad.anomalies.get(s, [])) & set(v)) for s, v in ex.anomalies.items()}
    missed = {s: sorted(set(v) - set(ad.anomalies.get(s, []))) for s, v in ex.anomalies.items()}
    extra = {s: sorted(set(v) - set(ex.anomalies.get(s, []))) for s, v in ad.anomalies.items()}
    out["anomalies"] = "; ".join(f"{s}: found {found[s]} missed {missed[s]} not-exhaustive {extra.get(s, [])}"
                                 for s in ex.anomalies)
    return out


def noise_lines(summ: dict, ex: Conclusions, domain: list[int]) -> list[str]:
    """Why each suspect of the exhaustive run is or is not an anomaly: its jump over its lower neighbour
    against the between-launch noise of its series, measured from the run's own multi-launch points."""
    out = []
    for s in sorted(summ):
        pts = {x: summ[s][x] for x in domain}
        noise = launch_noise(pts)
        for x in sorted(set(ex.suspects.get(s, [])) | set(ex.anomalies.get(s, []))):
            lo = max(k for k in pts if k < x)
            jump = pts[x].median / pts[lo].median - 1
            launches = f"{len(pts[lo].launches)}+{len(pts[x].launches)} launches"
            if noise is None:
                out.append(f"{s} {x}: +{jump:.0%} over {lo} ({launches}); between-launch noise unknown (no point of "
                           f"{s} has two launches in this run): not established, a real sweep confirms it")
                continue
            need = math.exp(float(student_t.ppf(0.95, noise.df)) * noise.sd * math.sqrt(
                1 / max(len(pts[lo].launches), 1) + 1 / max(len(pts[x].launches), 1))) - 1
            verdict = "ANOMALY" if x in ex.anomalies.get(s, []) else "indistinguishable from launch noise"
            out.append(f"{s} {x}: +{jump:.0%} over {lo} ({launches}); launch SD of log tg {noise.sd:.2f} "
                       f"(df {noise.df}) needs > +{need:.0%}: {verdict}")
    return out


def _tie(pts: dict, a: int, b: int) -> bool:
    """Whether two points are indistinguishable: stored CIs overlap, or neither beats the other beyond the
    between-launch noise of the series (see ``established``)."""
    noise = launch_noise(pts)
    if pts[a].overlaps(pts[b]):
        return True
    return noise is not None and not established(pts[a], pts[b], noise) and not established(pts[b], pts[a], noise)


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
    ap.add_argument("--markdown", action="store_true", help="also print one Markdown table row per mode")
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
    FULL_POINTS[0] = (domain[-1] - domain[0] + 1) * len(summ)
    ex = conclude({s: {x: v[x] for x in domain} for s, v in summ.items()}, ctx, native, domain)
    print(f"run {run_id}: {', '.join(sorted(summ))}; ncmoe {domain[0]}..{domain[-1]} ({len(domain)} per series); "
          f"native context {native}")
    print(f"exhaustive: threshold {ex.threshold}; sweet spot {ex.sweet_spot}; regions {_regions(ex) or '–'}; "
          f"anomalies {ex.anomalies}; suspects {ex.suspects}")
    for line in noise_lines(summ, ex, domain):
        print("  suspect " + line)
    rows: list[str] = []
    for label, budget in (("stop when stable", None), (f"budget {a.share:.0%}", math.floor(avail * a.share))):
        r = replay(summ, ctx, native, domain, fa, budget)
        used = r.n_measured
        print(f"\n[{label}] points used {used}/{avail} ({used / avail:.0%}; {used / FULL_POINTS[0]:.0%} of every "
              f"ncmoe), stopped: {r.stopped}; {_time(r)}")
        for s in sorted(r.measured):
            print(f"  {s}: measured {sorted(r.measured[s])}")
        v = verdicts(r.conclusions, ex, summ, domain)
        for k, text in v.items():
            print(f"  {k}: {text}")
        rows.append(_row(a.run, label, used, avail, r, ex, v))
    if a.markdown:
        print("\n" + "\n".join(rows))
    return 0


def _time(r: AdaptiveResult) -> str:
    """Measuring time of the chosen points against all stored points (+ the fit map, where stored)."""
    total = sum(v for (s, x), v in SECONDS.items() if s in r.measured)
    used = sum(SECONDS.get((s, x), 0.0) for s, pts in r.measured.items() for x in pts)
    fit = FIT_SECONDS[0]
    if not total:
        return "no point times stored"
    text = f"measuring {used:.0f} s of {total:.0f} s ({used / total:.0%})"
    if fit is not None:
        text += f"; with {FIT_SECONDS[1]} ({fit:.0f} s) {(used + fit) / total:.0%}"
    n_full = FULL_POINTS[0]
    if n_full:
        per = total / max(len([k for k in SECONDS if k[0] in r.measured]), 1)
        full = per * n_full
        text += (f"; vs a full sweep of every ncmoe ({n_full} points at the mean stored point time, "
                 f"≈ {full:.0f} s): {(used + (fit or 0)) / full:.0%}")
    return text + " (confirmations replay stored launches: no extra time)"


def _row(run: str, label: str, used: int, avail: int, r: AdaptiveResult, ex: Conclusions, v: dict) -> str:
    """``| run | mode | used/avail | threshold | sweet spot | winner | anomalies found/exhaustive (+extra);
    suspects exhaustive / adaptive | time |``"""
    sweet = "yes" if "NO" not in v["sweet spot"] else "NO"
    sweet += " (tie)" if "tie" in v["sweet spot"] else ""
    win = v.get("winner per region", "–").split(":")[0]
    n_ex = sum(len(x) for x in ex.anomalies.values())
    found = sum(len(set(r.conclusions.anomalies.get(s, [])) & set(x)) for s, x in ex.anomalies.items())
    extra = sum(len(set(x) - set(ex.anomalies.get(s, []))) for s, x in r.conclusions.anomalies.items())
    sus = (sum(len(x) for x in ex.suspects.values()), sum(len(x) for x in r.conclusions.suspects.values()))
    return (f"| {run} | {label} | {used}/{avail} ({used / avail:.0%}) | {v['threshold'].split()[0]} | {sweet} | "
            f"{win} | {found}/{n_ex}" + (f" (+{extra} not in the exhaustive run)" if extra else "")
            + f"; suspects {sus[0]} / {sus[1]} | {_time(r).split(' (confirm')[0]} |")


if __name__ == "__main__":
    raise SystemExit(main())
