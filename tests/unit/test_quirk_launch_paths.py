"""Recorded quirks reach every path that launches a llama.cpp binary — against fake binaries.

The fakes (``bench_fake_server.py``, ``bench_fake_llamabench.py`` and a llama-fit-params written
here) with ``FAKE_MODE=amx-crash`` die of SIGSEGV unless given the no-repack workaround, like
gcc-12 builds on Intel AMX CPUs: a launch path that forgets the build's recorded quirks fails
these tests. ``FAKE_BENCH_OLD=1`` is a llama-bench from before ``--repack`` existed (llama.cpp
78d2f5246, the oldest release pin), which cannot take the workaround at all.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from fakes import FakeBuild, fake_binaries
from llamaforge.bench import adjust
from llamaforge.bench.fitmap import run_fitmap
from llamaforge.bench.plan import Plan, PointSpec, Timeouts, make_plan, make_points
from llamaforge.bench.sweep import measure_point, run_sweep
from llamaforge.builds.smoke import Attempt, Part, _not_tried, run_smoke
from llamaforge.llamacpp.options import probe_build
from llamaforge.llamacpp.quirks import QUIRKS
from llamaforge.paths import Paths

#: a fake llama-fit-params; it crashes without --no-repack also in the server's fit-refused mode, so the
#: re-run's fit shows whether it got the quirk
_FIT = '''import os, signal, sys
if "--help" in sys.argv:
    print("-m, --model FNAME\\n-ncmoe, --n-cpu-moe N\\n-fitt, --fit-target MiB\\n-t, --threads N\\n"
          + ("" if os.environ.get("FAKE_FIT_OLD") else "--repack, -nr, --no-repack"))
    sys.exit(0)
if os.environ.get("FAKE_MODE") in ("amx-crash", "fit-refused") and "--no-repack" not in sys.argv:
    os.kill(os.getpid(), signal.SIGSEGV)
print("-c 4096 -ngl -1")
'''

NO_REPACK = {"name": "no-repack", "summary": "s", "evidence": {"signal": "SIGSEGV", "cause": "AMX"},
             "args": {"llama-server": ["--no-repack"], "llama-bench": ["--repack", "0"],
                      "llama-fit-params": ["--no-repack"]}}


def _make(tmp_path: Path, key: str = "fake-cpu", **env: str) -> FakeBuild:
    d = fake_binaries(tmp_path / key, model=True, **{"llama-fit-params": _FIT})
    b = FakeBuild(key, d, "amx-crash", extra_env=dict(env))
    b.manifest = {"options": probe_build(b)}
    return b


@pytest.fixture
def crashing(tmp_path):
    """A build whose binaries crash unless given no-repack, with that quirk recorded (as verify records it)."""
    b = _make(tmp_path)
    b.manifest["quirks"] = [dict(NO_REPACK)]
    return b


def _plan(b: FakeBuild, **kw) -> Plan:
    base = dict(model_ref="m", model_path=b.dir / "m.gguf", model_facts={"n_layers": 4}, points=[PointSpec(0)],
                repeats=2, prompt_tokens=16, n_predict=4, timeouts=Timeouts(30, 30), warmup=False)
    return make_plan(**{**base, **kw})


def test_server_llama_bench_and_both_engines_launch_with_the_quirk_and_crash_without(crashing, store):
    run = store.new_run("sweep", {})
    for engine in ("server", "llama-bench", "both"):
        p = measure_point(crashing, crashing.dir / "m.gguf", PointSpec(0), _plan(crashing, engine=engine), store, run,
                          label=engine)
        assert p.status == "ok", (engine, p.failure_detail, p.log_tail)
        assert ("--no-repack" in p.command) if p.engine == "server" else (p.command[-2:] == ["--repack", "0"])
    off = measure_point(crashing, crashing.dir / "m.gguf", PointSpec(0), _plan(crashing, quirks=False), store, run,
                        label="off")
    assert off.status == "failed" and "SIGSEGV" in off.failure_detail     # the fakes do crash without it


def test_llama_fit_params_gets_the_quirk_in_the_bench_engine_the_fit_map_and_a_fit_refused_rerun(crashing, store):
    # the llama-bench engine fits first (llama-fit-params), then measures
    p = measure_point(crashing, crashing.dir / "m.gguf", PointSpec(0), _plan(crashing, engine="llama-bench"), store,
                      store.new_run("sweep", {}))
    assert p.status == "ok" and p.detail.fit["n_ctx"] == 4096 and p.n_ctx == 4096
    # the fit map (engine fit) — also what `bench --ncmoe auto` starts with
    run_id = run_fitmap(_plan(crashing, points=make_points("0,1", n_layers=4)), [crashing], store, progress=False)
    pts = store.points(run_id)
    assert len(pts) == 2 and all(pt.status == "ok" and "--no-repack" in pt.command for pt in pts), \
        [(pt.failure_detail, pt.command) for pt in pts]
    # a server that refused to fit is re-run with llama-fit-params' context: both launches carry the quirk
    crashing.mode = "fit-refused"
    rerun = measure_point(crashing, crashing.dir / "m.gguf", PointSpec(1), _plan(crashing), store,
                          store.new_run("sweep", {}))
    # fit_status "refused" (not "refused-unfitted"): the fit with the quirk ran and gave the context
    assert rerun.status == "ok" and rerun.detail.fit_status == "refused" and "--no-repack" in rerun.command
    assert rerun.detail.fit["n_ctx"] == 4096


def test_sweep_compare_bisect_and_reproduce_launch_with_the_quirk(crashing, store, tmp_path, monkeypatch):
    from llamaforge.bisect.session import BisectRequest, bisect_plan
    from llamaforge.compare import session as cmp
    from llamaforge.reproduce import remeasure as rep

    model = crashing.dir / "m.gguf"
    parent = run_sweep(_plan(crashing, points=make_points("0,1", n_layers=4)), [crashing], store, progress=False)
    assert all(p.status == "ok" and "--no-repack" in p.command for p in store.points(parent))
    # compare: both sides, interleaved, through measure_point
    other = _make(tmp_path, "fake-cpu-2")
    other.manifest["quirks"] = [dict(NO_REPACK)]
    monkeypatch.setattr("llamaforge.bench.plan.resolve_model", lambda ref, paths: model)
    req = cmp.CompareRequest(cmp.Side("A", "a", "cpu"), cmp.Side("B", "b", "cpu"), "m", [PointSpec(0)],
                             repeats=4, rounds=2, prompt_tokens=16, n_predict=4)
    cid = cmp.run_compare(Paths(tmp_path / "ws"), store, req, builds=(crashing, other), progress=False)
    cpts = store.points(cid)
    assert len(cpts) == 4 and all(p.status == "ok" and "--no-repack" in p.command for p in cpts)
    # bisect (and bisect-run): its plan measures with llama-bench, quirks on
    bplan = bisect_plan(BisectRequest(good="a", bad="b", model="m", repeats=4), model)
    bp = measure_point(crashing, model, bplan.points[0], bplan, store, store.new_run("bisect", {}), label="abc")
    assert bp.status == "ok" and bp.command[-2:] == ["--repack", "0"], bp.failure_detail
    # reproduce: the parent's builds, re-measured with the parent's runtime record
    monkeypatch.setattr(rep, "run_builds", lambda store, paths, run, bin_dir=None: [crashing])
    rep.reproduce(store, Paths(tmp_path / "ws"), parent, progress=False)
    (child,) = [r for r in store.list_runs() if r.parent_run == parent]
    assert all(p.status == "ok" and "--no-repack" in p.command for p in store.points(child.id))


# --------------------------------------------------- a binary that cannot take the workaround

def test_an_old_llama_bench_without_repack_records_the_quirk_for_the_server_only(tmp_path):
    b = _make(tmp_path, FAKE_BENCH_OLD="1")
    res = run_smoke(b, b.dir / "m.gguf", b.env)
    assert res.ok, res.to_dict()
    first, second = res.attempts
    assert first.server.signal == "SIGSEGV" and first.bench.signal == "SIGSEGV"
    assert second.server.ok and "--no-repack" in second.server.command
    assert second.bench.skipped and "no --repack" in second.bench.detail     # its crash would only repeat
    (q,) = res.quirks
    assert q.args == {"llama-server": ["--no-repack"], "llama-fit-params": ["--no-repack"]}
    assert q.unsupported == {"llama-bench": ["--repack", "0"]}
    assert any("--engine server" in n for n in res.notes)


def test_bench_refuses_llama_bench_points_of_such_a_build_with_the_fix_and_launches_nothing(tmp_path, store):
    b = _make(tmp_path, FAKE_BENCH_OLD="1")
    b.manifest["quirks"] = [run_smoke(b, b.dir / "m.gguf", b.env).quirks[0].to_dict()]
    run = store.new_run("sweep", {})
    plan = _plan(b, engine="both")
    srv = measure_point(b, b.dir / "m.gguf", PointSpec(0), plan, store, run, engine="server")
    assert srv.status == "ok" and "--no-repack" in srv.command
    lb = measure_point(b, b.dir / "m.gguf", PointSpec(0), plan, store, run, engine="llama-bench")
    assert lb.status == "failed" and lb.failure_class == "error" and not lb.command
    assert "cannot take the no-repack workaround" in lb.failure_detail and "--engine server" in lb.failure_detail
    assert plan.runtime[b.key]["blocked"] == {"llama-bench": ["no-repack"]}
    assert "llama-bench" not in plan.runtime[b.key]["args"]


def test_a_quirk_is_only_passed_to_binaries_whose_help_lists_its_options(tmp_path):
    """A manifest recorded before `unsupported` existed (or options probed later): the options decide."""
    b = _make(tmp_path, FAKE_BENCH_OLD="1", FAKE_FIT_OLD="1")
    b.manifest["options"] = probe_build(b)
    b.manifest["quirks"] = [dict(NO_REPACK)]
    rt = adjust.compute(b, _plan(b))
    assert rt.args == {"llama-server": ["--no-repack"]}
    # llama-fit-params loads no weights (no_alloc): left without the option, not blocked
    assert rt.blocked == {"llama-bench": ["no-repack"]}


def test_a_quirk_is_not_tried_when_the_server_cannot_take_it_or_only_an_old_llama_bench_crashed(tmp_path):
    b = _make(tmp_path)
    q = QUIRKS[0]
    crashed = Attempt([], Part("llama-server", False, returncode=-11), Part("llama-bench", False, returncode=-11))
    bench_only = Attempt([], Part("llama-server", True), Part("llama-bench", False, returncode=-11))
    assert _not_tried(b, crashed, q, {}) is None
    assert _not_tried(b, crashed, q, {"llama-bench": ["--repack"]}) is None
    assert "llama-server lacks --no-repack" in _not_tried(b, crashed, q, {"llama-server": ["--no-repack"]})
    assert "did not crash" in _not_tried(b, bench_only, q, {"llama-bench": ["--repack"]})
