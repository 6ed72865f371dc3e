"""How a bisection's probes fare on a machine whose speed wanders, by what a probe is judged against
(``llamaforge.bisect.search.LEAD_STARTS`` and ``llamaforge.judge.locate.references``).

    python benchmarks/bisect_drift.py [--searches 150] [--rules rule,lead,beside,all] [--machine jumps]

Simulated, no llama.cpp: 16 commits, one of them (drawn per search) makes every later commit ``--effect``
slower. Every start is the commit's level times a between-start factor (log-normal, ``--sd``) times the
machine's speed (log scale, SD ``--msd``), which either jumps (``--machine jumps``: a new level with
chance ``--jump`` at every start, as the CI VM's starts go) or wanders (``ar``: an AR(1) process correlated
over ~1/(1 − ``--rho``) starts); ``--msd 0``: a quiet machine. The rules:

* ``rule`` — what the bisection does: the endpoints' starts beside the probe and the ``LEAD_STARTS`` before
  it, or the beside ones alone once an endpoint moved (``references``); a verdict the beside starts
  contradict is held;
* ``lead`` — the starts beside and before it, always;
* ``beside`` — the beside starts alone, always;
* ``all`` — the rule of 2026-12-03: every endpoint start since the search began, no check beside.

Per setting it prints the probes misjudged, the searches that named the right commit, ended undecided
or named a wrong one, and the starts all searches took. Numbers are printed, nothing is asserted.
"""

from __future__ import annotations

import argparse
import importlib
import math

import numpy as np

from llamaforge.bisect import BisectRefused, policy_for, search
from llamaforge.judge import Starts

search_mod = importlib.import_module("llamaforge.bisect.search")


class Machine:
    """Commits ≥ ``first_bad`` are ``effect`` slower; the machine's speed wanders (see the module doc)."""

    def __init__(self, commits: list[str], first_bad: int, args: argparse.Namespace, *, seed: int) -> None:
        self.commits, self.first_bad, self.args = commits, first_bad, args
        self.rng = np.random.default_rng(seed)
        self.speed = 0.0
        self.starts = 0

    def build(self, sha: str) -> str:
        return sha

    def measure(self, sha: str, _built: str) -> list[float]:
        a = self.args
        self.starts += 1
        if a.machine == "ar":
            self.speed = a.rho * self.speed + self.rng.normal(0, a.msd * math.sqrt(1 - a.rho ** 2))
        elif self.rng.random() < a.jump:
            self.speed = self.rng.normal(0, a.msd)
        level = 100.0 * (1 - a.effect if self.commits.index(sha) >= self.first_bad else 1.0)
        level *= math.exp(self.rng.normal(0, a.sd) + self.speed)
        return list(level * np.exp(self.rng.normal(0, 0.005, 3)))


def _always(lead: tuple[Starts, Starts], beside: tuple[Starts, Starts]) -> tuple[Starts, Starts, bool]:
    g, b = (Starts.of(list(e.groups) + list(n.groups)) for e, n in zip(lead, beside, strict=True))
    return g, b, False


def run(rule: str, args: argparse.Namespace) -> dict[str, int]:
    place, references, saved = search_mod.place, search_mod.references, search_mod.LEAD_STARTS
    if rule in ("lead", "all"):
        search_mod.references = _always
    if rule == "beside":
        search_mod.LEAD_STARTS = 0
    if rule == "all":
        search_mod.place = lambda *a, beside=None, **k: place(*a, **k)
        search_mod.LEAD_STARTS = 10 ** 9
    out = {"misjudged probes": 0, "right": 0, "undecided": 0, "wrong": 0, "refused": 0, "starts": 0}
    draw = np.random.default_rng(5)
    try:
        for seed in range(args.searches):
            commits = [f"{i:040x}" for i in range(17)]
            fb = int(draw.integers(1, 17))
            m = Machine(commits, fb, args, seed=seed)
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
        search_mod.place, search_mod.references, search_mod.LEAD_STARTS = place, references, saved
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--searches", type=int, default=150)
    ap.add_argument("--rules", default="rule,lead,beside,all")
    ap.add_argument("--effect", type=float, default=0.17)
    ap.add_argument("--sd", type=float, default=0.10, help="between-start spread (log SD)")
    ap.add_argument("--machine", choices=("jumps", "ar"), default="jumps")
    ap.add_argument("--jump", type=float, default=0.1, help="jumps: the chance of a new speed at a start")
    ap.add_argument("--rho", type=float, default=0.97, help="ar: the speed's correlation from start to start")
    ap.add_argument("--msd", type=float, default=0.15, help="the machine's speed: log SD")
    ap.add_argument("--max-launches", type=int, default=80)
    args = ap.parse_args(argv)
    how = f"jumps with chance {args.jump}" if args.machine == "jumps" else f"AR(1), rho {args.rho}"
    print(f"{args.searches} searches of 16 commits, change {args.effect:.0%}, between-start spread {args.sd:.0%}, "
          f"machine speed SD {args.msd:.0%} ({how}), --max-launches {args.max_launches}")
    for rule in args.rules.split(","):
        out = run(rule.strip(), args)
        print(f"{rule:>6}: " + ", ".join(f"{k} {v}" for k, v in out.items()), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
