"""``bench --place``: the points of placement strategies, and what each placed point moved.

A strategy (:mod:`llamaforge.llamacpp.placement`) is checked against the model's tensors before anything
runs, then measured as its own series with the number of layers it moves along the x axis (``first:N`` is
the plain ``-ncmoe N`` series). What a point moved is recorded twice, in ``PointDetail.moved``:

* **planned** — the model's tensors its ``-ot`` patterns select (searched like llama.cpp does) and their bytes
  in the GGUF file, so placements are compared at equal bytes moved;
* **read back** — what llama.cpp itself says it overrode: ``llama-fit-params -v`` with the point's own
  offload arguments logs one line per overridden tensor and loads no weights (a fraction of a second). A
  build without llama-fit-params records that nothing was read back; a read-back of 0 tensors fails the
  point ("moved 0 tensors" is an error, never a silent no-op).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from .. import proc
from ..errors import BuildError
from ..llamacpp import placement
from ..llamacpp.options import build_options, ncmoe_overrides
from ..llamacpp.server import PointFailure
from ..models.gguf_info import read_plan
from ..records import ModelFacts, PointSpec
from .plan import BuildLike, parse_int_list

#: the moved detail of each placed point made in this process, by build, model file and point (once per point,
#: not per start: the GGUF header is read and llama-fit-params run once)
_MOVED: dict[tuple, dict] = {}


def tensor_sizes(model_path: Path) -> dict[str, int]:
    """Every tensor of a GGUF file and its bytes (the header only)."""
    return {t.name: t.nbytes for t in read_plan(model_path, with_arrays=False).tensors}


def place_points(place: str, ngl: str | None, facts: ModelFacts, tensors: dict[str, int],
                 model: str = "the model") -> list[PointSpec]:
    """The points of ``--place`` × ``--ngl``: each strategy checked against the model (one line on a count
    beyond its layers or a regex that matches nothing)."""
    n_layers = int(facts.n_layers or placement.max_layer(tensors) + 1)
    full = facts.full_attention_layer_list()
    ngls = [-1] if ngl is None or not str(ngl).strip() else parse_int_list(str(ngl), what="--ngl",
                                                                          limit=max(999, n_layers + 1))
    out = []
    for g in ngls:
        for p in placement.parse(place):
            n = placement.check(p, n_layers, list(tensors), model)
            if p.strategy == "first":      # today's -ncmoe N, recorded as the strategy it is
                out.append(PointSpec(n, g, place=p.text))
            else:
                out.append(PointSpec(n, g, place=p.text, ot=p.overrides(n_layers, full)))
    return out


def planned(spec: PointSpec, tensors: dict[str, int]) -> tuple[list[str], int]:
    """The tensors a placed point's ``-ot`` patterns select (the first matching pattern wins, as in llama.cpp)
    and their bytes."""
    pats = [re.compile(e.rpartition("=")[0]) for e in spec.ot or ncmoe_overrides(spec.ncmoe)]
    names = [t for t in tensors if any(p.search(t) for p in pats)]
    return names, sum(tensors[t] for t in names)


def read_back(build: BuildLike, model_path: Path, spec: PointSpec, threads: int | None) -> dict:
    """What llama.cpp overrode for this point (``llama-fit-params -v``)."""
    opts = build_options(build)
    if not opts.has_fit_params:
        return {"source": None, "why": "this build has no llama-fit-params (llama.cpp before Dec 2025): not read back"}
    try:
        args = [str(build.binary("llama-fit-params")), "-m", str(model_path), "-v",
                *opts.offload_args("llama-fit-params", spec.ncmoe, spec.ngl, threads=threads, ot=spec.ot)]
    except BuildError as e:
        return {"source": None, "why": e.message}
    res = proc.run(args, env=build.env, timeout=300)
    moved = placement.moved_tensors(res.output)
    out: dict[str, Any] = {"source": "llama-fit-params -v", "tensors": [[m.name, m.buffer] for m in moved],
                           "mib": round(sum(m.mib for m in moved), 1)}
    if not res.ok and not moved:
        out = {"source": None, "why": f"llama-fit-params -v failed (exit {res.returncode}): not read back"}
    return out


def moved_detail(build: BuildLike, model_path: Path, spec: PointSpec, threads: int | None) -> dict:
    """``PointDetail.moved`` of a placed point, made once per point in this process; raises PointFailure when
    llama.cpp moved nothing."""
    key = (build.key, str(model_path), spec, threads)
    if key not in _MOVED:
        names, nbytes = planned(spec, tensor_sizes(model_path))
        back = read_back(build, model_path, spec, threads) if names else {"source": None, "why": "nothing to move"}
        _MOVED[key] = {"strategy": spec.place, "layers": sorted(placement.layers_of(names)), "tensors": names,
                       "bytes": nbytes, "read_back": back}
    detail = _MOVED[key]
    back = detail["read_back"]
    if back.get("source") and not back.get("tensors"):
        raise PointFailure("error", f"--place {spec.place}: llama.cpp moved 0 tensors (its load log lists no "
                           "override); the strategy's -ot patterns match nothing it loads")
    return {**detail}
