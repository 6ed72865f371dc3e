"""Re-measuring from the store (``bench --resume``, ``reproduce``): a stored run is data, never a program.

A store travels (fleet imports, ``results/`` committed to a repository), so nothing in it may choose
what runs or what is written:

* **builds** are looked up by their key in *this machine's* build root (:func:`local_builds`), their
  binaries re-hashed against the local manifest, and smoke-checked like any build bench measures. A
  stored build's ``dir`` (an ``external`` one's above all) is never run: a key the build root lacks is
  refused with the command that rebuilds it; external binaries are measured again only from a folder
  the user names (``--bin-dir``).
* **arguments**: the plan's extra arguments, each point's and the recorded per-build runtime
  arguments must pass the same allow-list as ``--extra`` (:mod:`.argcheck`), else the run is refused
  (:func:`stored_plan`).
"""

from __future__ import annotations

import shlex
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..builds import list_builds
from ..builds.hostcpu import runs_here
from ..builds.integrity import binary_problems
from ..builds.verify import ensure_runnable
from ..errors import BenchError
from ..store import Run
from .argcheck import check_extra
from .plan import Plan, check_plan


def stored_plan(run: Run) -> Plan:
    """The sweep ``run`` measured, to measure again (a copy, without the sections its run added: see
    :meth:`~llamaforge.records.RunPlan.sweep_only`), its values and arguments checked (one line naming any
    that is refused)."""
    try:
        plan = check_plan(run.plan.sweep_only())
    except (TypeError, ValueError, KeyError, AttributeError) as e:
        raise BenchError(f"run {run.id} has a malformed stored plan ({type(e).__name__}: {e})",
                         "measure anew with `llamaforge bench`") from None
    fix = ("a store is data: llamaforge passes on only the options --extra accepts; measure anew with "
           "`llamaforge bench` and the options you want")
    check_extra(plan.extra_args, where=f"run {run.id}'s stored plan", fix=fix)
    for p in plan.points:
        check_extra(p.extra_args, where=f"point ncmoe {p.ncmoe} of run {run.id}'s stored plan", fix=fix)
    for key, rt in plan.runtime.items():
        args = rt.get("args") if isinstance(rt, dict) else None
        for binary, values in (args or {}).items() if isinstance(args, dict) else ():
            check_extra(values if isinstance(values, list) else [values],
                        where=f"the stored {binary} arguments of build {key} in run {run.id}", fix=fix)
    return plan


def _rebuild_hint(key: str, m: dict, run_ref: str) -> str:
    """How to get build ``key`` back on this machine, from what the store says about it (quoted: store text)."""
    if m.get("external"):
        return (f"{key} was external binaries (the run used {m.get('dir')!r}, which is not run from a store): "
                f"`llamaforge reproduce {shlex.quote(run_ref)} --bin-dir DIR` with a folder you trust")
    backend, pin = str(m.get("backend") or "?"), str(m.get("commit") or m.get("pin") or "?")
    return f"`llamaforge build --backends {shlex.quote(backend)} --pins {shlex.quote(pin)}`"


def local_builds(paths: Any, keys: list[str], *, run_id: str, stored: Callable[[str], dict | None],
                 allow_broken: bool = False, given: list | None = None) -> list:
    """The builds ``keys`` from this machine's build root (``given``: builds the user named, e.g.
    ``--bin-dir``, matched by key first), re-verified; else one line naming what to rebuild."""
    have = {b.key: b for b in list_builds(paths)}
    have.update({b.key: b for b in given or []})
    missing = [k for k in keys if k not in have]
    if missing:
        hints = "; ".join(_rebuild_hint(k, stored(k) or {}, run_id) for k in missing)
        raise BenchError(f"build(s) {', '.join(missing)} of run {run_id} are gone from this machine's build root",
                         f"rebuild: {hints}")
    out = []
    for k in keys:
        b = have[k]
        if not (b.manifest or {}).get("external"):
            ok, why = runs_here(b.manifest)
            if not ok:
                raise BenchError(f"build {k} of run {run_id} is {why}", "measure it on the machine that made it")
            bad = binary_problems(Path(b.dir), b.manifest)
            if bad:
                raise BenchError(f"build {k} of run {run_id}: {bad[0]}",
                                 f"rebuild it: {_rebuild_hint(k, b.manifest, run_id)}")
        out.append(ensure_runnable(b, paths, allow_broken=allow_broken))
    return out
