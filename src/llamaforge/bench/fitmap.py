"""Fit maps: what context llama.cpp would fit at every offload point, without loading weights.

``llama-fit-params -m MODEL -ncmoe N [-fitt MiB]`` prints the arguments its fitting chose, e.g.
``-c 195328 -ngl -1 -ot "blk\\.0\\.ffn_(up|down|gate|gate_up)_(ch|)exps=CPU,..."``, in about a second
per point. :func:`~.engines.fit.fit_params` runs it for one point; :func:`run_fitmap` stores a whole map as a run
of kind ``fitmap`` (engine ``fit``; each point's ``n_ctx`` is the fitted context and
``extra.fit`` holds the parsed arguments: ``ngl``, ``tensor_split``, ``overrides``).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from rich.table import Table

from ..console import console, esc
from ..envinfo import collect_env
from ..errors import BenchError
from ..llamacpp.options import build_options
from ..llamacpp.server import PointFailure
from ..pathsafe import component, run_log_dir
from ..records import build_manifest
from ..store import Point, Store
from .adjust import runtime_for
from .engines import MeasureContext, engine
from .fit import resolve_fit
from .plan import BuildLike, Plan, PointSpec


def fit_point(build: BuildLike, plan: Plan, spec: PointSpec, run_id: str, log_dir: Path, label: str = "") -> Point:
    """One fit-map point (not yet stored), measured by the fit engine."""
    log = log_dir / (component(f"{build.key}-fit-ncmoe{spec.ncmoe}-ngl{spec.ngl}{'-' + label if label else ''}") + ".log")
    p = Point(run_id=run_id, build_key=build.key, engine="fit", ncmoe=spec.ncmoe, ngl=spec.ngl, label=label,
              started=time.time())
    try:
        engine("fit").measure(MeasureContext(point=p, build=build, model_path=plan.model_path, spec=spec, plan=plan,
                                             log_path=log))
    except PointFailure as e:
        p.status, p.failure_class, p.failure_detail, p.log_tail = "failed", e.cls, e.detail, e.log_tail
        p.finished = time.time()
    return p


def spec_text(spec: PointSpec) -> str:
    return f"ncmoe={spec.ncmoe}" + (f" ngl={spec.ngl}" if spec.ngl >= 0 else "")


def open_fitmap(plan: Plan, builds: list[BuildLike], store: Store, *, command: str | None = None) -> str:
    """A new ``fitmap`` run for these builds (checked: each has llama-fit-params); its id."""
    if not builds:
        raise BenchError("no builds for the fit map", "give --backends")
    lacking = [b.key for b in builds if not build_options(b).has_fit_params]
    if lacking:
        raise BenchError(f"build(s) {', '.join(lacking)} have no llama-fit-params (llama.cpp before Dec 2025 cannot fit)",
                         "use `llamaforge bench --ctx N` on such builds, or a newer pin")
    plan.build_keys = [b.key for b in builds]
    plan.fit = resolve_fit(plan.fit, [b.backend for b in builds])
    for b in builds:
        runtime_for(b, plan)
    run_id = store.new_run("fitmap", plan.replace(engine="fit"), command=command, env=collect_env())
    for b in builds:
        store.add_build(build_manifest(b), run_id)
    return run_id


@contextlib.contextmanager
def fitting(store: Store, run_id: str, progress: bool = True) -> Iterator[Callable[[str], None]]:
    """Marks the fit-map run done (interrupted on an error); yields a function that shows progress."""
    status = "interrupted"
    try:
        with console.status("fitting…", spinner="dots") if progress else contextlib.nullcontext() as st:
            yield (lambda text: st.update(text)) if progress and st is not None else (lambda text: None)
        status = "done"
    finally:
        store.set_run_status(run_id, status)


def run_fitmap(plan: Plan, builds: list[BuildLike], store: Store, *, command: str | None = None,
               progress: bool = True) -> str:
    """Fit every point on every build; store a ``fitmap`` run; return its id."""
    run_id = open_fitmap(plan, builds, store, command=command)
    log_dir = run_log_dir(store.path, run_id)
    with fitting(store, run_id, progress) as show:
        for i, spec in enumerate(plan.points, 1):
            for b in builds:
                show(f"fitting {i}/{len(plan.points)}: {b.backend} {spec_text(spec)}")
                store.record_point(fit_point(b, plan, spec, run_id, log_dir))
    return run_id


def fitmap_table(store: Store, run_id: str) -> Table:
    run = store.get_run(run_id)
    native = run.plan.facts.n_ctx_train
    tab = Table(title=esc(f"fit map {run.id}" + (f" (native context {native:,})" if native else "")))
    for col, j in (("build", "left"), ("ncmoe", "right"), ("ngl", "right"), ("context", "right"),
                   ("of native", "right"), ("placement", "left")):
        tab.add_column(col, justify=j)
    for p in store.points(run_id, with_samples=False):
        fit = p.detail.fit or {}
        if p.status != "ok":
            tab.add_row(esc(p.build_key[:28]), str(p.ncmoe), "–", f"[red]{esc(p.failure_class)}[/]", "–",
                        esc(p.failure_detail or ""))
            continue
        frac = f"{p.n_ctx / native:.0%}" if native and p.n_ctx else "–"
        tab.add_row(esc(p.build_key[:28]), str(p.ncmoe), esc(fit.get("ngl", "–")), f"{p.n_ctx:,}" if p.n_ctx else "–",
                    frac, esc(p.detail.placement or ""))
    return tab
