"""How a bisection's probes fare on a machine whose speed wanders, by how much of the endpoints' past a probe
is judged against (``llamaforge.bisect.search.LEAD_STARTS``).

    python benchmarks/bisect_drift.py [--searches 300] [--leads 4,6,8,all] [--effect 0.17]

Simulated, no llama.cpp: 16 commits, one of them (drawn per search) makes every later commit ``--effect``
slower. Every start is the commit's level times a between-start factor (log-normal, ``--sd``) times the
machine's speed, which wanders as an AR(1) process on the log scale (stationary SD ``--msd``, correlated
over ~1/(1 − ``--rho``) starts; rho 0 and msd 0: a quiet machine). ``all`` is the rule before this
setting existed: a probe judged against every endpoint start since the search began, without the check
on the starts beside it.

Per setting it prints the probes misjudged, the searches that named the right commit, ended undecided
or named a wrong one, and the starts all searches took. Numbers are printed, nothing is asserted.
"""

from __future__ import annotations

import argparse
import importlib
import math

import numpy as np

from llamaforge.bisect import BisectRefused, policy_for, search

search_mod = importlib.import_module("llamaforge.bisect.search")


class Machine:
    """Commits ≥ ``first_bad`` are ``effect`` slower; the machine's speed wanders (see the module doc)."""

    def __init__(self, commits: list[str], first_bad: int, *, effect: float, sd: float, rho: float, msd: float,
                 seed: int) -> None:
        self.commits, self.first_bad, self.effect, self.sd, self.rho, self.msd = commits, first_bad, effect, sd, rho, msd
        self.rng = np.random.default_rng(seed)
        self.speed = 0.0
        self.starts = 0

    def build(self, sha: str) -> str:
        return sha

    def measure(self, sha: str, _built: str) -> list[float]:
        self.starts += 1
        self.speed = self.rho * self.speed + self.rng.normal(0, self.msd * math.sqrt(1 - self.rho ** 2))
        level = 100.0 * (1 - self.effect if self.commits.index(sha) >= self.first_bad else 1.0)
        level *= math.exp(self.rng.normal(0, self.sd) + self.speed)
        return list(level * np.exp(self.rng.normal(0, 0.005, 3)))


def run(lead: str, args: argparse.Namespace) -> dict[str, int]:
    place = search_mod.place
    saved = search_mod.LEAD_STARTS
    if lead == "all":
        search_mod.place = lambda *a, beside=None, **k: place(*a, **k)
        search_mod.LEAD_STARTS = 10 ** 9
    else:
        search_mod.LEAD_STARTS = int(lead)
    out = {"misjudged probes": 0, "right": 0, "undecided": 0, "wrong": 0, "refused": 0, "starts": 0}
    draw = np.random.default_rng(5)
    try:
        for seed in range(args.searches):
            commits = [f"{i:040x}" for i in range(17)]
            fb = int(draw.integers(1, 17))
            m = Machine(commits, fb, effect=args.effect, sd=args.sd, rho=args.rho, msd=args.msd, seed=seed)
            try:
                res = search(commits, m.build, m.measure, threshold=0.05, policy=policy_for(args.max_launches))
            except BisectRefused:
                out["refused"] += 1
                continue
            finally:
                out["starts"] += m.starts
            out["misjudged probes"] += sum(p.verdict in ("good", "bad") and (p.verdict == "bad") != (p.index >= fb)
                                           for p in res.probes)
            key = "undecided" if res.first_bad is None else "right" if res.first_bad == commits[fb] else "wrong"
            out[key] += 1
    finally:
        search_mod.place, search_mod.LEAD_STARTS = place, saved
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--searches", type=int, default=300)
    ap.add_argument("--leads", default="4,6,8,all")
    ap.add_argument("--effect", type=float, default=0.17)
    ap.add_argument("--sd", type=float, default=0.08, help="between-start spread (log SD)")
    ap.add_argument("--rho", type=float, default=0.97, help="the machine's speed: correlation from start to start")
    ap.add_argument("--msd", type=float, default=0.06, help="the machine's speed: stationary log SD")
    ap.add_argument("--max-launches", type=int, default=80)
    args = ap.parse_args(argv)
    print(f"{args.searches} searches of 16 commits, change {args.effect:.0%}, between-start spread {args.sd:.0%}, "
          f"machine speed SD {args.msd:.0%} (rho {args.rho}), --max-launches {args.max_launches}")
    for lead in args.leads.split(","):
        out = run(lead.strip(), args)
        print(f"lead {lead:>4}: " + ", ".join(f"{k} {v}" for k, v in out.items()), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
