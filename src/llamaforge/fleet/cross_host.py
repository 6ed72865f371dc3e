"""``compare --base-host H1 --head-host H2``: one build (a pin or commit on one backend) measured on two
machines of the fleet, judged with compare's nested statistics.

What it can and cannot say: compare's A B B A interleaving cancels drift between the sides because
both run on one machine, one after the other. Across two machines there is nothing to interleave:
each host measures its own side, both at the same time (a fleet bench of the two hosts, one job per
host), with ``rounds`` server starts per point (``bench --launches``, interleaved within the host)
and ``per_round`` requests per start. The two pulled-back runs are then compared as compare does:
Mann–Whitney U on the launch medians (n = server starts per side), cluster-bootstrap CI of the ratio.
The difference includes everything that differs between the machines (hardware, drivers, a native
build's CPU flags, background load) — which is the question asked — and is stated as such in the
output and the report.

Stored as a run of kind ``compare``: its plan's ``compare`` section names each side's host, machine,
imported run, build and commit and the fleet run that measured them; its summary holds the
comparisons. The points stay in the two imported runs (nothing stored twice).
"""

from __future__ import annotations

from typing import Any

from ..compare.judged import compare_sides
from ..compare.session import CompareRequest
from ..errors import FleetError
from ..paths import Paths
from ..records import CompareSection, CompareSide, CompareSummary, FleetSummary
from ..store import Store
from .config import Fleet
from .jobs import Progress
from .run import bench_all

CROSS_MACHINE = ("not interleaved across machines: each host measured its own side, both at the same time, "
                 "rounds = server starts interleaved within the host; the difference includes everything that "
                 "differs between the machines, and drift between them is not cancelled")


def _check(req: CompareRequest, base_host: str, head_host: str) -> None:
    if base_host == head_host:
        raise FleetError(f"--base-host and --head-host are both {base_host!r}",
                         "give two hosts of fleet.toml (on one machine, leave both out: compare interleaves there)")
    if (req.base.ref, req.base.backend) != (req.head.ref, req.head.backend):
        raise FleetError(f"with --base-host/--head-host both sides are one build; got {req.base.describe()} vs "
                         f"{req.head.describe()}", "give --base (and --backend) only: the same build on both hosts")
    if req.base.source:
        raise FleetError("--source is not used with --base-host/--head-host",
                         "give a pin name (copied to the hosts with pins.toml) or a commit their mirror has")


def run_host_compare(store: Store, paths: Paths, fleet: Fleet, req: CompareRequest, ncmoe: str, *, base_host: str,
                     head_host: str, command: str | None = None, progress: Progress | None = None) -> str:
    """Measure ``req.base`` on both hosts (a fleet bench), then store and return a compare run of the two."""
    _check(req, base_host, head_host)
    hosts = fleet.select([base_host, head_host])
    options: dict[str, Any] = {"model": req.model, "pins": req.base.ref, "ncmoe": ncmoe, "repeats": req.per_round,
                               "launches": req.rounds or "auto",
                               "max_launches": None if req.rounds else req.max_launches, "engine": req.engine, "prompt_tokens": req.prompt_tokens,
                               "n_predict": req.n_predict, "threads": req.threads}
    fleet_run = bench_all(store, paths, fleet, hosts, backends=req.base.backend, options=options, command=command,
                          name=f"compare {req.base.describe()} on {base_host} vs {head_host}", progress=progress)
    state = store.get_run(fleet_run).summary_as(FleetSummary).hosts
    for h in hosts:
        s = state.get(h.name) or {}
        if s.get("status") != "ok":
            raise FleetError(f"host {h.name}: {s.get('error') or s.get('status')}",
                             (s.get("fix") or "fix it on the host") + "; then run the compare again")
    sides = {}
    for side, h in zip(("A", "B"), hosts, strict=True):
        run = store.get_run(state[h.name]["run"])
        pts = store.points(run.id)
        keys = sorted({p.build_key for p in pts})
        build = store.get_build(keys[0]) if keys else None
        sides[side] = (run, pts, {"ref": req.base.ref, "backend": req.base.backend, "source": None,
                                  "build": keys[0] if keys else None, "commit": (build or {}).get("commit"),
                                  "host": h.name, "machine": h.machine, "run": run.id})
    compare = CompareSection(a=CompareSide(**sides["A"][2]), b=CompareSide(**sides["B"][2]), repeats=req.repeats,
                             rounds=req.rounds or "auto", per_round=req.per_round, min_effect=req.min_effect,
                             interleave=CROSS_MACHINE, fleet_run=fleet_run)
    plan = sides["A"][0].plan.replace(fleet=None, compare=compare)
    run_id = store.new_run("compare", plan, command=command, env={},
                           name=f"compare {req.base.describe()} on {hosts[0].machine} vs {hosts[1].machine}")
    pts_a, pts_b = sides["A"][1], sides["B"][1]
    store.set_run_summary(run_id, CompareSummary(
        comparisons=compare_sides(pts_a, pts_b, req.min_effect), min_effect=req.min_effect,
        points=len(pts_a) + len(pts_b), failed=sum(1 for p in [*pts_a, *pts_b] if p.status != "ok"),
        cross_machine=True))
    store.set_run_status(run_id, "done")
    return run_id
