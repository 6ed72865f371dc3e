"""The fit engine: ``llama-fit-params`` for one point — the context llama.cpp would fit there and
the placement it chose, without loading weights.

``llama-fit-params -m MODEL -ncmoe N [-fitt MiB]`` prints the arguments its fitting chose, e.g.
``-c 195328 -ngl -1 -ot "blk\\.0\\.ffn_(up|down|gate|gate_up)_(ch|)exps=CPU,..."``, in about a second
per point. :func:`fit_params` runs it (the llama-bench engine and a fit-refused server use it too);
:class:`FitEngine` turns it into a point (engine ``fit``: ``n_ctx`` is the fitted context,
``extra.fit`` the parsed arguments); :mod:`llamaforge.bench.fitmap` stores a whole map.
"""

from __future__ import annotations

import re
import shlex
import time
from dataclasses import dataclass, field
from pathlib import Path

from ... import proc
from ...errors import BuildError
from ...llamacpp.options import build_options
from ...llamacpp.server import PointFailure, classify_failure
from ...records import PointDetail
from .. import adjust
from ..fit import fitt_for
from ..plan import BuildLike, PointSpec
from .base import MeasureContext, Measurement

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


def _fit_command(build: BuildLike, model_path: Path, spec: PointSpec, fitt: str | None, threads: int | None,
                 extra_args: list[str] | None) -> list[str] | FitResult:
    """llama-fit-params' argument list for one point, or the failed FitResult that says why there is none."""
    opts = build_options(build)
    if not opts.has_fit_params:
        return FitResult(ok=False, output="this build has no llama-fit-params (llama.cpp before Dec 2025)")
    args = [str(build.binary("llama-fit-params")), "-m", str(model_path)]
    try:
        args += opts.offload_args("llama-fit-params", spec.ncmoe, spec.ngl, fitt=fitt, threads=threads, ot=spec.ot)
    except BuildError as e:
        return FitResult(ok=False, output=e.message)
    return args + list(extra_args or []) + list(spec.extra_args)


def fit_params(build: BuildLike, model_path: Path, spec: PointSpec, *, fitt: str | None = None,
               threads: int | None = None, extra_args: list[str] | None = None, timeout: float = 300.0,
               log_path: Path | None = None) -> FitResult:
    """Run llama-fit-params for one point (a failed FitResult when the build has none)."""
    args = _fit_command(build, model_path, spec, fitt, threads, extra_args)
    return args if isinstance(args, FitResult) else _run_fit(args, build.env, timeout, log_path)


def _run_fit(args: list[str], env: dict[str, str], timeout: float = 300.0, log_path: Path | None = None) -> FitResult:
    res = proc.run(args, env=env, timeout=timeout, log_path=log_path)
    r = parse_fit_output(res.output) if res.ok else FitResult(ok=False, output=res.output)
    r.seconds = res.seconds
    r.command = args
    return r


#: successful fits made in this process, by command, environment and model file (:func:`fit_params_once`)
_FITS: dict[tuple, FitResult] = {}
_FITS_MAX = 512


def fit_params_once(build: BuildLike, model_path: Path, spec: PointSpec, *, fitt: str | None = None,
                    threads: int | None = None, extra_args: list[str] | None = None) -> tuple[FitResult, bool]:
    """:func:`fit_params`, run once per point in this process; returns ``(fit, reused)``.

    A point measured in many starts (a bisection's or a history's llama-bench starts: 3–80 per commit) asks
    the same question each time — the same binary, model file, options and environment — and the fit takes a
    third of a tiny model's llama-bench start. The answer is the context that fitted when this process first
    asked (on a GPU: with the device memory free then); the points that reuse it say so (``fit_reused``). A
    failed fit is never reused: it is asked again."""
    args = _fit_command(build, model_path, spec, fitt, threads, extra_args)
    if isinstance(args, FitResult):
        return args, False
    try:
        st = model_path.stat()
        model_id: tuple = (st.st_size, st.st_mtime_ns)
    except OSError:
        model_id = ()
    env = build.env
    key = (tuple(args), tuple(sorted(env.items())), model_id)
    hit = _FITS.get(key)
    if hit is not None:
        return hit, True
    fit = _run_fit(args, env)
    if fit.ok:
        if len(_FITS) >= _FITS_MAX:
            _FITS.pop(next(iter(_FITS)))
        _FITS[key] = fit
    return fit, False


#: the prefix llama.cpp's logger writes before a line (time since start, then the level letter)
_LOG_STAMP = re.compile(r"\b\d+\.\d{2}\.\d{3}\.\d{3} ?[DIWE]?\b ?")


def failure_class(tail: str) -> str:
    """The failure class of a llama-fit-params run that did not fit, from its output's tail: ``fit`` when it
    found no configuration. It logs through an async logger and exit(1)s right after "failed to fit", so its
    lines are sometimes lost, whole or all but a timestamp ("0.00.075.943 ", a CI run here): an exit that said
    nothing else counts as a failed fit too."""
    low = tail.lower()
    if "failed to fit" in low or "unable to fit" in low or not _LOG_STAMP.sub("", tail).strip():
        return "fit"
    return classify_failure(tail, returncode=1, phase="load")


def _tail(text: str, n: int = 40) -> str:
    return "\n".join(text.splitlines()[-n:])


class FitEngine:
    """``engine = "fit"``: one llama-fit-params call; a point with a context and a placement, no samples."""

    name = "fit"

    def measure(self, ctx: MeasureContext) -> Measurement:
        build, plan, spec, p = ctx.build, ctx.plan, ctx.spec, ctx.point
        ctx.on_phase("fitting (llama-fit-params)")
        ctx.log_path.parent.mkdir(parents=True, exist_ok=True)
        ctx.log_path.write_text("")
        r = fit_params(build, ctx.model_path, spec, fitt=fitt_for(build, plan), threads=plan.threads,
                       log_path=ctx.log_path, extra_args=adjust.extra_args(build, plan, "llama-fit-params"))
        p.n_ctx, p.n_ctx_train, p.command, p.t_load_s = r.n_ctx, plan.facts.n_ctx_train, r.command, r.seconds
        p.detail = PointDetail(fit=r.to_dict(), placement=r.placement() if r.ok else None).keep_nulls("placement")
        if not r.ok:
            tail = _tail(r.output)
            cls = failure_class(tail)
            raise PointFailure(cls, "llama-fit-params found no configuration that fits" if cls == "fit"
                               else "llama-fit-params failed", tail)
        p.finished = time.time()
        return p
