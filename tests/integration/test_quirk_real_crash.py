"""A REAL crash in llama.cpp's repacked-weights path, and the no-repack quirk that avoids it.

This machine (AMD EPYC) has no AMX, so the gcc-12 × AMX crash itself cannot happen here. This test
makes real llama.cpp crash in the same code path with a planted fault instead of a wrapper: one
commit on top of the default pin's tree raises SIGSEGV at the start of every matrix multiplication
on repacked weights — ``ggml-cpu/repack.cpp`` (CPU_REPACK buffers) and ``ggml-cpu/amx/amx.cpp``
(AMX buffers, where a CPU has AMX). Weights are only repacked while llama.cpp's CPU weight
repacking is on (its default), so what avoids the crash is the binaries themselves honouring
``--no-repack`` / ``--repack 0``: nothing here looks at command lines to decide whether to crash.

It checks the whole path a user on an AMX machine goes through: the build's first smoke run dies
of the signal, the retry with the workaround runs, the quirk is recorded with its evidence, and
every later launch — llama-server, llama-bench, llama-fit-params, through a sweep — carries it,
while ``--no-quirks`` brings the crash back. The fault commit changes two source files, so with
ccache the build costs about as much as an incremental one.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from llamaforge import proc
from llamaforge.bench.engines.fit import fit_params
from llamaforge.bench.plan import Plan, PointSpec, Timeouts, make_plan, make_points
from llamaforge.bench.sweep import measure_point, run_sweep
from llamaforge.compare.session import Side, build_side
from llamaforge.models import model_facts
from llamaforge.store import Store

pytestmark = pytest.mark.slow

_ENV = {"GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1", "GIT_AUTHOR_NAME": "Fault Injector",
        "GIT_AUTHOR_EMAIL": "fault@llamaforge.invalid", "GIT_COMMITTER_NAME": "Fault Injector",
        "GIT_COMMITTER_EMAIL": "fault@llamaforge.invalid", "GIT_AUTHOR_DATE": "2024-02-01T00:00:00+0000",
        "GIT_COMMITTER_DATE": "2024-02-01T00:00:00+0000"}
_FAULT = "/* llamaforge test: planted fault in the repacked-weights matmul */ std::raise(SIGSEGV);"
#: (file, anchor, replacement): the anchor must exist, so a changed llama.cpp fails here, loudly
_EDITS = (
    ("ggml/src/ggml-cpu/repack.cpp", "#include <cstring>\n", "#include <cstring>\n#include <csignal>\n"),
    ("ggml/src/ggml-cpu/repack.cpp",
     "    bool compute_forward(struct ggml_compute_params * params, struct ggml_tensor * op) override {\n"
     "        switch (op->op) {\n",
     "    bool compute_forward(struct ggml_compute_params * params, struct ggml_tensor * op) override {\n"
     f"        if (op->op == GGML_OP_MUL_MAT || op->op == GGML_OP_MUL_MAT_ID) {{ {_FAULT} }}\n"
     "        switch (op->op) {\n"),
    ("ggml/src/ggml-cpu/amx/amx.cpp", "#include <unistd.h>\n", "#include <unistd.h>\n#include <csignal>\n"),
    ("ggml/src/ggml-cpu/amx/amx.cpp",
     "        if (op->op == GGML_OP_MUL_MAT) {\n            ggml_backend_amx_mul_mat(params, op);",
     f"        if (op->op == GGML_OP_MUL_MAT) {{\n            {_FAULT}\n            ggml_backend_amx_mul_mat(params, op);"),
)


def _git(repo: Path, *args: str) -> str:
    r = proc.run(["git", "-C", str(repo), *args], env=_ENV, timeout=900)
    assert r.ok, r.output
    return r.output.strip()


def _faulty_repo(src_dir: Path, dest: Path) -> str:
    """A git repo: the default pin's tree, then one commit planting the fault; returns that commit."""
    dest.mkdir(parents=True)
    _git(dest, "init", "-q", "-b", "main")
    _git(dest, "fetch", "-q", "--no-tags", str(src_dir), "HEAD")
    _git(dest, "reset", "-q", "--hard", "FETCH_HEAD")
    for rel, anchor, new in _EDITS:
        f = dest / rel
        text = f.read_text()
        assert text.count(anchor) == 1, f"{rel}: the anchor for the planted fault is gone ({anchor[:60]!r})"
        f.write_text(text.replace(anchor, new))
    _git(dest, "commit", "-q", "--no-verify", "-am", "test: SIGSEGV in every matmul on repacked weights")
    return _git(dest, "rev-parse", "HEAD").splitlines()[-1]


def test_a_real_crash_in_the_repack_path_is_retried_recorded_and_avoided_at_every_launch(lf_paths, cpu_build,
                                                                                          tiny_model, tmp_path):
    sha = _faulty_repo(cpu_build.source_dir, tmp_path / "repo")
    b = build_side(lf_paths, Side("A", sha, "cpu", f"path:{tmp_path / 'repo'}"))    # builds, verifies, smoke-runs
    m = b.manifest
    assert m["smoke"] == "ok" and m["verification"]["ok"], m["verification"]
    (q,) = m["quirks"]
    ev = q["evidence"]
    assert q["name"] == "no-repack" and ev["signal"] == "SIGSEGV", q
    assert set(ev["failed"]) == {"llama-server", "llama-bench"}, ev           # both died on their own
    first, second = m["verification"]["smoke"]["attempts"]
    assert first["server"]["signal"] == "SIGSEGV" and first["bench"]["signal"] == "SIGSEGV"
    assert second["server"]["tokens"] == 4 and second["bench"]["ok"] and second["quirks"] == ["no-repack"]

    facts = model_facts(tiny_model)
    plan = make_plan(model_ref="synth:tiny-qwen35moe", model_path=tiny_model, model_facts=facts,
                     points=make_points("0,2", n_layers=facts.n_layers), engine="both", repeats=1, prompt_tokens=32,
                     n_predict=4, threads=2, timeouts=Timeouts(300, 300))
    with Store(tmp_path / "results" / "llamaforge.sqlite") as store:
        run_id = run_sweep(plan, [b], store, name="faulty", progress=False)
        pts = store.points(run_id)
        assert len(pts) == 4 and all(p.status == "ok" for p in pts), [(p.engine, p.failure_detail) for p in pts]
        for p in pts:
            assert ("--no-repack" in p.command) if p.engine == "server" else (p.command[-2:] == ["--repack", "0"])
        lb = [p for p in pts if p.engine == "llama-bench"]
        assert all(p.detail.fit_status == "fitted" and p.n_ctx for p in lb)          # llama-fit-params ran
        assert store.get_run(run_id).plan.runtime[b.key]["quirks"] == ["no-repack"]
        # --no-quirks: the real crash is back, named as a crash with its signal
        off = Plan.from_json({**plan.to_json(), "quirks": False, "runtime": {}})
        p = measure_point(b, tiny_model, PointSpec(0), off, store, run_id, label="no-quirks", engine="server")
        assert p.status == "failed" and p.failure_class == "crash" and "SIGSEGV" in p.failure_detail, p.failure_detail
    # llama-fit-params fits with no_alloc (no weights loaded, nothing multiplied): it never reaches the
    # fault, even without the workaround — why a binary of it lacking --no-repack is not blocked
    fit = fit_params(b, tiny_model, PointSpec(0), threads=2)
    assert fit.ok and fit.n_ctx and "--no-repack" not in fit.command, fit.output[-2000:]
