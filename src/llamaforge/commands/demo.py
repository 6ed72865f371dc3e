"""``inv demo``: the whole pipeline on any machine, in one command.

default pin (first source that works) → build cpu + vulkan (+ cuda with a CUDA GPU) → verify →
synthesize the tiny MoE model → offload sweep → report in ``results/demo/``. With no GPU, Vulkan
runs on Mesa lavapipe. Everything is cached: a second run only re-measures and re-reports.
"""

from __future__ import annotations

import time
from pathlib import Path

from ..backends import get as get_backend
from ..backends import known
from ..backends import parse as parse_backends
from ..bench.cli_options import bench_options, convert, help_for, parse_launches
from ..builds import BuildOptions
from ..builds import build as do_build
from ..builds.doctor import check
from ..console import console, esc, notice
from ..errors import BenchError, LlamaforgeError, ModelError
from ._common import csv_list, lf_task, paths, pins, writable_dir


def available_backends() -> list[str]:
    """The backends whose ``demo`` is "always" (cpu), and those whose ``demo`` is "if-available" where they can
    be built and run here: vulkan when a Vulkan device exists, cuda with nvcc and a GPU."""
    out = [b.name for b in known() if b.demo == "always"]
    for st in check():
        if get_backend(st.backend).demo != "if-available":
            continue
        if st.can_build and st.can_run:
            out.append(st.backend)
        elif st.reasons:
            problem, fix = st.reasons[0]
            notice(f"demo without {st.backend}: {problem} (fix: {fix})")
    return out


@lf_task(help=help_for("demo", out="report folder (default results/demo)"))
def demo(c, backends=None, model="synth:tiny-qwen35moe", ncmoe=None, repeats=2, prompt_tokens=192, n_predict=16,
         out=None, launches="auto", max_launches=4):
    """Build, verify, synthesize, sweep and report — the default pin on this machine's backends."""
    from ..bench.display import print_run
    from ..bench.start import build_plan
    from ..bench.sweep import run_sweep
    from ..models import model_facts, resolve_model
    from ..report import write_report
    from ..store import Store

    lo = parse_launches(launches, max_launches if str(launches).strip().lower() == "auto" else None)
    t0 = time.monotonic()
    p = paths()
    _check_early(p, model=model, ncmoe=ncmoe, repeats=repeats, prompt_tokens=prompt_tokens, n_predict=n_predict,
                 out=out)
    pin = pins().get(None)
    explicit = backends is not None
    names = [b.name for b in parse_backends(csv_list(backends, what="backend"))] if explicit else available_backends()
    console.rule("[bold]llamaforge demo[/]: " + esc(f"pin {pin.name} ({pin.commit}), backends {', '.join(names)}"))
    builds = []
    for name in names:
        try:
            builds.append(do_build(p, pin, name, BuildOptions()))
        except LlamaforgeError as e:
            if explicit or get_backend(name).demo == "always":
                raise
            notice(f"skipping {name}: {e}")
    t_build = time.monotonic() - t0
    model_path = resolve_model(model, p, vocab_dir=builds[0].source_dir / "models")
    facts = model_facts(model_path)
    console.print(esc(f"model: {model_path.name} — {facts.arch}, {facts.n_layers} layers, "
                      f"{facts.n_experts} experts ({facts.n_experts_used} used), {facts.file_bytes / 2**20:.0f} MiB"))
    points = ncmoe or f"0,{facts.n_layers // 2},{facts.n_layers}"
    options = bench_options(model=model, ncmoe=points, repeats=repeats, prompt_tokens=prompt_tokens,
                            n_predict=n_predict, launches=lo)
    plan = build_plan(p, options, backends=[b.backend for b in builds], pins=[pin.name])
    if not plan.points:
        raise BenchError("no points to measure", "give --ncmoe")
    t1 = time.monotonic()
    with Store(p.store_db) as store:
        run_id = run_sweep(plan, builds, store, name="demo", command="llamaforge demo")
        t_sweep = time.monotonic() - t1
        print_run(store, run_id)
        out_dir = p.results / "demo" if out is None else Path(out)
        rp = write_report(store, run_id, out_dir)
    total = time.monotonic() - t0
    for line in rp.summary:
        console.print(esc(line), soft_wrap=True)
    console.print("[green]demo done[/] " + esc(f"in {total:.0f} s (builds {t_build:.0f} s, sweep {t_sweep:.0f} s); run {run_id}"))
    console.print(esc(f"report: {rp.html}\n        {rp.md}"))


def _check_early(p, *, model: str, ncmoe: str | None, repeats: object, prompt_tokens: object, n_predict: object,
                 out: str | None) -> None:  # noqa: ANN001
    """Every option that can be checked without a build, checked before the builds (minutes) start."""
    from ..bench.plan import make_points

    convert({"repeats": repeats, "prompt_tokens": prompt_tokens, "n_predict": n_predict})
    if ncmoe is not None:
        make_points(ncmoe)
    if out is not None:
        writable_dir(out, "--out")
    _check_model_ref(str(model).strip(), p)


def _check_model_ref(ref: str, p) -> None:  # noqa: ANN001
    """The model reference's syntax (a local file: its header), without generating or downloading it."""
    from urllib.parse import urlsplit

    from ..models import model_facts, resolve_model
    from ..models.presets import get_mix, get_preset
    from ..models.refs import hf_cache_path, split_hash
    from ..redact import redact_url

    if ref.startswith("synth:"):       # synthetic models need a build's vocab: generated after the builds
        parts = ref[len("synth:"):].split(":")
        get_preset(parts[0])
        if len(parts) > 1:
            get_mix(parts[1])
    elif ref.startswith("hf:"):
        hf_cache_path(split_hash(ref[len("hf:"):])[0], p)
    elif ref.startswith(("https://", "http://")):
        try:
            _ = urlsplit(ref).port
        except ValueError as e:
            raise ModelError(f"bad model URL {redact_url(ref)!r}: {e}", "give a URL like https://host/path/model.gguf") from None
    elif not ref.startswith("pypi:"):
        model_facts(resolve_model(ref, p))      # a local file: its header read now


TASKS = [demo]
