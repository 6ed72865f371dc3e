"""Fit maps: what context llama.cpp would fit at every offload point, without loading weights.

``llama-fit-params -m MODEL -ncmoe N [-fitt MiB]`` prints the arguments its fitting chose, e.g.
``-c 195328 -ngl -1 -ot "blk\\.0\\.ffn_(up|down|gate|gate_up)_(ch|)exps=CPU,..."``, in about a second
per point. :func:`fit_params` runs it for one point; :func:`run_fitmap` stores a whole map as a run
of kind ``fitmap`` (engine ``fit``; each point's ``n_ctx`` is the fitted context and
``extra.fit`` holds the parsed arguments: ``ngl``, ``tensor_split``, ``overrides``).
"""

from __future__ import annotations

import contextlib
import re
import shlex
import time
from dataclasses import dataclass, field
from pathlib import Path

from rich.table import Table

from .. import proc
from ..console import console, esc
from ..errors import BenchError, BuildError
from ..records import build_manifest
from ..store import Point, Store
from .fit import fitt_for, resolve_fit
from .plan import BuildLike, Plan, PointSpec
from .server import classify_failure

_FIT_LINE = re.compile(r"^-c\s+\d+\s+-ngl\s+-?\d+.*$", re.M)


@dataclass
class FitResult:
    ok: bool
    n_ctx: int | None = None
    ngl: int | None = None
    tensor_split: list[int] | None = None
    overrides: list[str] = field(default_factory=list)   # "pattern=BUFFER" entries of -ot
    args_line: str = ""
    seconds: float = 0.0
    output: str = ""
    command: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {"n_ctx": self.n_ctx, "ngl": self.ngl, "tensor_split": self.tensor_split,
                "overrides": self.overrides, "args": self.args_line, "seconds": round(self.seconds, 3)}

    def placement(self) -> str:
        """A short description of the overrides: which layers' experts go to which buffer."""
        by_buf: dict[str, list[int]] = {}
        other = 0
        for o in self.overrides:
            m = re.match(r"blk\\?\.(\d+)\\?\..*=(\S+)$", o)
            if m:
                by_buf.setdefault(m.group(2), []).append(int(m.group(1)))
            else:
                other += 1
        parts = []
        for buf, layers in sorted(by_buf.items()):
            layers = sorted(set(layers))
            span = f"{layers[0]}–{layers[-1]}" if layers == list(range(layers[0], layers[-1] + 1)) else \
                ",".join(map(str, layers))
            parts.append(f"experts of {len(layers)} layer(s) [{span}] → {buf}")
        if other:
            parts.append(f"{other} other override(s)")
        return "; ".join(parts) or "all on the default device(s)"


def parse_fit_output(output: str) -> FitResult:
    """Parse llama-fit-params' stdout line ``-c N -ngl G [-ts a,b] [-ot "..."]``."""
    lines = _FIT_LINE.findall(output)
    if not lines:
        return FitResult(ok=False, output=output)
    line = lines[-1].strip()
    try:
        toks = shlex.split(line)
    except ValueError:
        toks = line.split()
    r = FitResult(ok=True, args_line=line, output=output)
    i = 0
    while i < len(toks):
        t = toks[i]
        nxt = toks[i + 1] if i + 1 < len(toks) else ""
        if t == "-c":
            r.n_ctx = int(nxt)
        elif t == "-ngl":
            r.ngl = int(nxt)
        elif t == "-ts":
            r.tensor_split = [int(x) for x in nxt.split(",") if x]
        elif t == "-ot":
            r.overrides = [x for x in nxt.split(",") if x]
        i += 2 if t in ("-c", "-ngl", "-ts", "-ot") else 1
    return r


def fit_params(build: BuildLike, model_path: Path, spec: PointSpec, *, fitt: str | None = None,
               threads: int | None = None, extra_args: list[str] | None = None, timeout: float = 300.0,
               log_path: Path | None = None) -> FitResult:
    """Run llama-fit-params for one point (a failed FitResult when the build has none)."""
    from ..build.options import build_options

    opts = build_options(build)
    if not opts.has_fit_params:
        return FitResult(ok=False, output="this build has no llama-fit-params (llama.cpp before Dec 2025)")
    args = [str(build.binary("llama-fit-params")), "-m", str(model_path)]
    if spec.ncmoe:
        try:
            args += opts.ncmoe_args("llama-fit-params", spec.ncmoe)
        except BuildError as e:
            return FitResult(ok=False, output=e.message)
    if spec.ngl != -1:
        args += ["-ngl", str(spec.ngl)]
    if fitt is not None:
        args += ["--fit-target", fitt]
    if threads:
        args += ["-t", str(threads)]
    args += list(extra_args or []) + list(spec.extra_args)
    res = proc.run(args, env=build.env, timeout=timeout, log_path=log_path)
    r = parse_fit_output(res.output) if res.ok else FitResult(ok=False, output=res.output)
    r.seconds = res.seconds
    r.command = args
    return r


def _tail(text: str, n: int = 40) -> str:
    return "\n".join(text.splitlines()[-n:])


def fit_point(build: BuildLike, plan: Plan, spec: PointSpec, run_id: str, log_dir: Path, label: str = "") -> Point:
    """One fit-map point (not yet stored)."""

    log_dir.mkdir(parents=True, exist_ok=True)
    log = log_dir / f"{build.key}-fit-ncmoe{spec.ncmoe}-ngl{spec.ngl}.log"
    log.write_text("")
    started = time.time()
    from .adjust import extra_args

    r = fit_params(build, plan.model_path, spec, fitt=fitt_for(build, plan), threads=plan.threads, log_path=log,
                   extra_args=extra_args(build, plan, "llama-fit-params"))
    p = Point(run_id=run_id, build_key=build.key, engine="fit", ncmoe=spec.ncmoe, ngl=spec.ngl, label=label,
              n_ctx=r.n_ctx, n_ctx_train=plan.model_facts.get("n_ctx_train"), command=r.command,
              extra={"fit": r.to_dict(), "placement": r.placement() if r.ok else None}, started=started,
              finished=time.time(), t_load_s=r.seconds)
    if not r.ok:
        p.status = "failed"
        tail = _tail(r.output)
        low = tail.lower()
        # llama-fit-params logs through an async logger and exit(1)s right after "failed to fit":
        # that last line is sometimes lost, so an exit without any output counts as a failed fit too
        if "failed to fit" in low or "unable to fit" in low or not tail.strip():
            p.failure_class = "fit"
        else:
            p.failure_class = classify_failure(tail, returncode=1, phase="load")
        p.failure_detail = "llama-fit-params found no configuration that fits" if p.failure_class == "fit" \
            else "llama-fit-params failed"
        p.log_tail = tail
    return p


def run_fitmap(plan: Plan, builds: list[BuildLike], store: Store, *, command: str | None = None,
               progress: bool = True) -> str:
    """Fit every point on every build; store a ``fitmap`` run; return its id."""
    from ..envinfo import collect_env

    if not builds:
        raise BenchError("no builds for the fit map", "give --backends")
    from ..build.options import build_options

    lacking = [b.key for b in builds if not build_options(b).has_fit_params]
    if lacking:
        raise BenchError(f"build(s) {', '.join(lacking)} have no llama-fit-params (llama.cpp before Dec 2025 cannot fit)",
                         "use `llamaforge bench --ctx N` on such builds, or a newer pin")
    plan.build_keys = [b.key for b in builds]
    plan.fit = resolve_fit(plan.fit, [b.backend for b in builds])
    from .adjust import runtime_for

    for b in builds:
        runtime_for(b, plan)
    js = plan.to_json()
    js["engine"] = "fit"
    run_id = store.new_run("fitmap", js, command=command, env=collect_env())
    for b in builds:
        store.add_build(build_manifest(b), run_id)
    log_dir = store.path.parent / "logs" / run_id
    status = "interrupted"
    try:
        with console.status("fitting…", spinner="dots") if progress else contextlib.nullcontext() as st:
            for i, spec in enumerate(plan.points, 1):
                for b in builds:
                    if progress and st is not None:
                        st.update(f"fitting {i}/{len(plan.points)}: {b.backend} ncmoe={spec.ncmoe}")
                    store.record_point(fit_point(b, plan, spec, run_id, log_dir))
        status = "done"
    finally:
        store.set_run_status(run_id, status)
    return run_id


def fitmap_table(store: Store, run_id: str) -> Table:
    run = store.get_run(run_id)
    native = ((run.plan.get("model") or {}).get("facts") or {}).get("n_ctx_train")
    tab = Table(title=esc(f"fit map {run.id}" + (f" (native context {native:,})" if native else "")))
    for col, j in (("build", "left"), ("ncmoe", "right"), ("ngl", "right"), ("context", "right"),
                   ("of native", "right"), ("placement", "left")):
        tab.add_column(col, justify=j)
    for p in store.points(run_id, with_samples=False):
        fit = (p.extra or {}).get("fit") or {}
        if p.status != "ok":
            tab.add_row(esc(p.build_key[:28]), str(p.ncmoe), "–", f"[red]{esc(p.failure_class)}[/]", "–",
                        esc(p.failure_detail or ""))
            continue
        frac = f"{p.n_ctx / native:.0%}" if native and p.n_ctx else "–"
        tab.add_row(esc(p.build_key[:28]), str(p.ncmoe), esc(fit.get("ngl", "–")), f"{p.n_ctx:,}" if p.n_ctx else "–",
                    frac, esc((p.extra or {}).get("placement") or ""))
    return tab
