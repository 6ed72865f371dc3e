"""What the quieter-start settings of a CPU bisection buy on this machine: the between-start spread of
llama-bench with and without each (``llamaforge.bisect.quiet``).

    python benchmarks/bisect_noise.py [--starts 8] [--repeats 3] [--n-predict 32] [--settings threads,+prio,all]

Builds (or reuses) the default pin's CPU build in the workspace, then runs ``--starts`` llama-bench
processes (one start each, ``--repeats`` requests inside) of every setting below, **round-robin**
(one start of each setting per round, the order rotated every round), so that load from other
processes falls on all settings alike:

* ``default`` — llama.cpp's own thread count, no scheduling options;
* ``threads`` — ``-t`` = the physical cores;
* ``+cpu-strict`` / ``+prio`` / ``+poll`` — the physical cores plus that one option;
* ``all`` — what ``llamaforge bisect`` uses on the CPU (physical cores and every option the binary has).

Per setting it prints tg (or pp) t/s: the centre of the start centres, the between-start spread (SD of
log start centres, ≈ CV, from :mod:`llamaforge.judge`), the SD inside a start, the range of the starts,
and how many starts per commit a bisection of 16 commits would need to locate a 10 % change with that
spread (:func:`llamaforge.judge.locate.starts_needed`). Numbers are printed, nothing is asserted: the
machine's load decides them (say so when quoting them).
"""

from __future__ import annotations

import argparse
import math
import sys
import tempfile
import time
from pathlib import Path

from llamaforge.bench.plan import PointSpec
from llamaforge.bench.sweep import measure_launch
from llamaforge.bisect.quiet import QUIET_OPTIONS, Quiet, QuietRequest, physical_cores, settings
from llamaforge.bisect.session import BisectRequest, bisect_plan
from llamaforge.builds import BuildOptions, build
from llamaforge.config import load_pins
from llamaforge.judge import estimate
from llamaforge.judge.locate import n_probes, starts_needed
from llamaforge.llamacpp.options import build_options
from llamaforge.models import resolve_model
from llamaforge.paths import Paths
from llamaforge.store import Store


def configs(bench_opts: list[str]) -> dict[str, Quiet]:
    cores = physical_cores()
    out = {"default": Quiet(None, "llama.cpp default", enabled=False),
           "threads": settings(QuietRequest("cpu", options=()), bench_opts, cores=cores)}
    for opt, val in QUIET_OPTIONS:
        name = "+" + opt.lstrip("-")
        out[name] = settings(QuietRequest("cpu", options=((opt, val),)), bench_opts, cores=cores)
    out["all"] = settings(QuietRequest("cpu"), bench_opts, cores=cores)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--starts", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--n-predict", type=int, default=32)
    ap.add_argument("--metric", choices=("tg", "pp"), default="tg")
    ap.add_argument("--model", default="synth:tiny-qwen35moe")
    ap.add_argument("--settings", default="", help="comma-separated subset, e.g. threads,+prio,all (default: every one)")
    a = ap.parse_args(argv)
    paths = Paths.default()
    pin = load_pins(paths.pins_file).get(None)
    b = build(paths, pin, "cpu", BuildOptions())
    model = Path(resolve_model(a.model, paths, vocab_dir=b.source_dir / "models"))
    cfgs = configs(sorted(build_options(b).bench))
    if a.settings:
        wanted = [x.strip() for x in a.settings.split(",") if x.strip()]
        unknown = [x for x in wanted if x not in cfgs]
        if unknown:
            ap.error(f"unknown setting(s) {', '.join(unknown)}; choose from {', '.join(cfgs)}")
        cfgs = {k: v for k, v in cfgs.items() if k in wanted}
    req = BisectRequest(good="x", bad="x", metric=a.metric, repeats=a.repeats, n_predict=a.n_predict)
    field = f"{a.metric}_tps"
    starts: dict[str, list[list[float]]] = {k: [] for k in cfgs}
    points: dict[str, object] = {}
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp, Store(Path(tmp) / "noise.sqlite") as store:
        run_id = store.new_run("bisect-run", {"benchmark": "bisect_noise"})
        names = list(cfgs)
        for rnd in range(a.starts):
            order = names[rnd % len(names):] + names[:rnd % len(names)]
            for name in order:
                plan = bisect_plan(req, model, cfgs[name])
                p = measure_launch(b, model, PointSpec(0), plan, store, run_id, label=name, launch=rnd + 1,
                                   seq=rnd * len(names) + order.index(name), acc=points.get(name))
                points[name] = p
                vals = [v for s in p.samples if s.launch == rnd + 1 and (v := getattr(s, field)) is not None]
                if vals:
                    starts[name].append(vals)
            print(f"round {rnd + 1}/{a.starts} done ({time.monotonic() - t0:.0f} s)", file=sys.stderr)
    report(cfgs, starts, a)
    return 0


def report(cfgs: dict[str, Quiet], starts: dict[str, list[list[float]]], a: argparse.Namespace) -> None:
    probes = n_probes(16)
    print(f"{a.metric} t/s per llama-bench start ({a.starts} starts × {a.repeats} requests, round-robin; "
          f"physical cores {physical_cores()}):")
    print(f"{'setting':<12} {'centre':>8} {'between':>8} {'within':>7} {'range of starts':>17}  "
          f"{'starts for 10 %':>15}  options")
    for name, q in cfgs.items():
        est = estimate(starts[name])
        if est is None:
            print(f"{name:<12} no start succeeded")
            continue
        sd = est.spread.sd if est.spread else math.nan
        need = starts_needed(math.log(1 / 0.9), sd, probes=probes) if est.spread else None
        opts = (f"-t {q.threads} " if q.threads else "") + " ".join(q.args)
        print(f"{name:<12} {est.centre:8.1f} {sd:8.1%} {est.within or 0:7.1%} "
              f"{min(est.starts):8.1f}–{max(est.starts):<8.1f}  {need if need else '–':>15}  {opts or '(none)'}")


if __name__ == "__main__":
    sys.exit(main())
