"""The runs a stored run is made of: a fleet run's per-host runs (imported from each host after the run), which
its report merges into one.
"""

from __future__ import annotations

from ..records import FleetSummary
from ..store import Store


def fleet_children(store: Store, fleet_run: str) -> list[tuple[str, str]]:
    """(machine, imported run id) of every host of a fleet run that has a run, in the plan's host order."""
    run = store.get_run(fleet_run)
    state = run.summary_as(FleetSummary).hosts
    out = []
    for host in ((run.plan.fleet.hosts if run.plan.fleet else None) or {}):
        s = state.get(host) or {}
        if s.get("run"):
            out.append((str(s.get("machine") or host), str(s["run"])))
    return out
