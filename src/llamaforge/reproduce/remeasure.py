"""``llamaforge reproduce RUN``: re-measure a stored sweep's points and say whether they agree.

The new run uses the stored plan (model, options, engine, the same ``-fitt`` margins; its arguments
checked like ``--extra``) and the very builds of the first run, by build key from this machine's build
root (a stored folder is never run; an external build only from ``--bin-dir``), is stored as a sweep with
``parent_run`` = the first run (and ``plan["reproduces"]``), and is judged point by point by
:mod:`llamaforge.findings.reproduction` (the verdict: a pure function of the two stored runs, which the
report reads too).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..errors import BenchError
from ..findings.reproduction import MIN_EFFECT, Verdict, sweep_run, verdict_for
from ..records import SweepSummary
from ..store import Run, Store


def select_points(plan_points: list, points: str | None, n_layers: int | None) -> list:
    """The plan's points whose ncmoe is in ``points`` (same syntax as ``--ncmoe``); all when ``None``."""
    if not points:
        return list(plan_points)
    from ..bench.plan import make_points

    wanted = {s.ncmoe for s in make_points(points, None, n_layers=n_layers)}
    chosen = [s for s in plan_points if s.ncmoe in wanted]
    if not chosen:
        have = ",".join(str(s.ncmoe) for s in plan_points)
        raise BenchError(f"--points {points} selects none of the run's points", f"the run measured ncmoe {have}")
    return chosen


def run_builds(store: Store, paths: Any, run: Run, bin_dir: str | None = None) -> list:
    """The builds of ``run`` from this machine's build root, by key and re-verified (a store is data: a
    stored folder is never run); an external build only from ``bin_dir``, a folder the user names. Else
    one line naming what to rebuild."""
    from ..bench.stored import local_builds

    keys = [str(k) for k in (run.plan.build_keys or [b.get("key") for b in store.builds_for_run(run.id)])]
    return local_builds(paths, keys, run_id=run.id, stored=store.get_build,
                        given=_given_build(store, run, keys, bin_dir) if bin_dir else None)


def _given_build(store: Store, run: Run, keys: list[str], bin_dir: str) -> list:
    """``--bin-dir``: the run's one external build, from the folder the user named (it must be that build)."""
    from ..backends import get as get_backend
    from ..bench.external import external_build

    ext = [k for k in keys if (store.get_build(k) or {}).get("external")]
    if len(ext) != 1:
        raise BenchError(f"--bin-dir replaces a run's one external build; run {run.id} has {len(ext)}",
                         "leave out --bin-dir (managed builds come from this machine's build root)")
    b = external_build(Path(bin_dir), get_backend(str((store.get_build(ext[0]) or {}).get("backend"))).name)
    if b.key != ext[0]:
        raise BenchError(f"--bin-dir {bin_dir} holds build {b.key}, but run {run.id} measured {ext[0]}",
                         "give the folder (same path, same binaries) the run measured")
    return [b]


def reproduce(store: Store, paths: Any, run_id: str, *, points: str | None = None, allow_busy: bool = False,
              command: str | None = None, progress: bool = True, min_effect: float = MIN_EFFECT,
              launches: tuple[int, dict | None] | None = None, bin_dir: str | None = None) -> Verdict:
    """Re-measure ``run_id``'s points (all, or ``points``) as a new linked run; the verdict is stored in
    the new run's summary (``reproduce``). ``launches``: (first K, the sequential settings or ``None`` for a
    fixed K) instead of the first run's own; ``bin_dir``: the folder of the run's external build."""
    from ..bench.stored import stored_plan
    from ..bench.sweep import run_sweep

    parent = sweep_run(store, run_id)
    plan = stored_plan(parent)   # the store is data: its arguments checked, its builds looked up here
    if not plan.model_path.is_file():
        raise BenchError(f"the run's model {plan.model_path} is gone", "restore the file (same path) to reproduce the run")
    plan.points = select_points(plan.points, points, plan.n_layers)
    builds = run_builds(store, paths, parent, bin_dir)
    plan.build_keys = [b.key for b in builds]
    if plan.variants:                  # the same variants on the same builds (their labels match the first run's)
        from ..variants.check import from_records

        builds = from_records(plan.variants, builds)
    plan.seed = None   # a fresh launch order (drawn and recorded): the same order would repeat its order effects
    if launches is not None:
        plan.launches, plan.sequential = launches[0], (dict(launches[1], min_effect=min_effect) if launches[1] else None)
    child_id = run_sweep(plan, builds, store, command=command, name=f"reproduce {parent.id}",
                         progress=progress, allow_busy=allow_busy, run_extra={"reproduces": parent.id})
    child = store.get_run(child_id)
    v = verdict_for(store, parent, child, min_effect)
    store.set_run_summary(child_id, child.summary_as(SweepSummary).replace(reproduce=v.to_dict()))
    return v
