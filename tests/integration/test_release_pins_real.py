"""Real llama.cpp history through compare: the oldest and the newest llama-cpp-python release pins
of pins.toml, each from its PyPI sdist (CHANGELOG-checked), built for the CPU, verified, their
``--help`` options recorded, then ``llamaforge compare --base <oldest> --head <newest>`` as a user
runs it, on the tiny synthetic MoE model and on a real trained model from PyPI (SmolLM2-135M).

Time on the 2-core CI machine: see README (Testing). The newest pin is the default pin's commit,
so its build is the session's cached ``cpu_build``; the oldest is one more CPU build, a cold one on a
fresh machine (ccache shares nothing: the two commits' ggml.h and llama.h differ), made by the
``pin_build`` fixture: the tests that need it are the full tier's (``@pytest.mark.full``: only
``scripts/test.sh --full`` runs them; docs/testing.md, Tiers)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_models_pypi_real import SMOLLM2

from judged import assert_coherent
from llamaforge.builds import BuildOptions, build
from llamaforge.config import load_pins
from llamaforge.llamacpp.options import build_options
from llamaforge.models import model_facts
from llamaforge.models.refs import resolve_model
from llamaforge.store import Store

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow


def _release_pins(pins_file: Path) -> list:
    pins = load_pins(pins_file)
    rel = [p for p in pins.pins.values() if p.name.startswith("lcpp-")]

    def version(p) -> tuple[int, ...]:   # noqa: ANN001
        return tuple(int(x) for x in p.name.removeprefix("lcpp-").split("."))

    return sorted(rel, key=version)


def test_pins_toml_ships_at_least_three_release_pins_each_from_its_pypi_sdist():
    rel = _release_pins(REPO / "pins.toml")
    assert len(rel) >= 3
    for p in rel:
        pypi = [s for s in p.sources if s.kind == "pypi"]
        assert pypi and pypi[0].arg == f"llama-cpp-python=={p.name.removeprefix('lcpp-')}", p
        assert pypi[0].sha256 and len(pypi[0].sha256) == 64
    assert len({p.commit for p in rel}) == len(rel)


@pytest.mark.full
def test_oldest_and_newest_release_build_verify_and_go_through_compare(lf_paths, cpu_build, pin_build, tiny_bpe_model,
                                                                       tmp_path):
    rel = _release_pins(lf_paths.pins_file)
    oldest, newest = rel[0], rel[-1]
    t0 = time.monotonic()
    builds = {oldest.name: pin_build(oldest.name), newest.name: build(lf_paths, newest, "cpu", BuildOptions())}
    t_build = time.monotonic() - t0
    for p in (oldest, newest):
        b = builds[p.name]
        ver = b.manifest["verification"]
        assert ver["ok"] and ver["version"]["commit"].startswith(p.commit[:7]), ver
        assert b.manifest["source"]["origin"].startswith(("pypi:", "mirror", "git")), b.manifest["source"]
        opts = build_options(b)
        assert isinstance(b.manifest.get("options"), dict), "the options of every binary are in the manifest"
        # what this model needs from the older release: its architecture, and -ncmoe (or its -ot form)
        assert opts.server_ncmoe or "--override-tensor" in opts.server
        # no web UI is built: the oldest release defaults LLAMA_BUILD_UI to ON, which runs npm inside the build
        assert b.manifest["flags"].get("LLAMA_BUILD_UI", "OFF") == "OFF"
        assert "UI: running npm" not in Path(b.manifest["log"]).read_text(errors="replace")
    assert builds[oldest.name].manifest["flags"]["LLAMA_BUILD_UI"] == "OFF", "its CMakeLists.txt defaults it ON"
    assert builds[newest.name].key == cpu_build.key, "the newest release pin is the default pin's build"
    # the tiny model with Qwen's byte-level tokenizer: it writes partial UTF-8, which the oldest release refuses
    tiny_model = tiny_bpe_model
    arch = model_facts(tiny_model).arch
    src = builds[oldest.name].source_dir / "src" / "llama-arch.cpp"
    assert f'"{arch}"' in src.read_text(), f"{oldest.name} does not know the tiny model's arch {arch}"

    env = {**os.environ, "LLAMAFORGE_WORKSPACE": str(lf_paths.workspace),
           "LLAMAFORGE_RESULTS": str(tmp_path / "results")}
    cmd = [sys.executable, "-m", "llamaforge", "compare", "--base", oldest.name, "--head", newest.name,
           "--backend", "cpu", "--model", str(tiny_model), "--ncmoe", "0,2", "--repeats", "2", "--launches", "4",
           "--prompt-tokens", "64", "--n-predict", "16", "--threads", "2"]
    t1 = time.monotonic()
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=1800, env=env)
    t_compare = time.monotonic() - t1
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    print(f"release pins: build {t_build:.0f} s, compare {t_compare:.0f} s")

    with Store(tmp_path / "results" / "llamaforge.sqlite") as store:
        (run,) = store.list_runs("compare")
        pts = store.points(run.id)
        keys = {pt.build_key for pt in pts}
        assert keys == {builds[oldest.name].key, builds[newest.name].key}
        assert pts and all(pt.status == "ok" for pt in pts), [(pt.build_key, pt.ncmoe, pt.status, pt.failure_class, pt.failure_detail, pt.log_tail[-800:]) for pt in pts if pt.status != "ok"]
        assert {pt.ncmoe for pt in pts} == {0, 2}
        # the oldest release's server rejects the tiny model's non-UTF-8 output (HTTP 500 from its output
        # parser); its points were measured with those tokens banned, and say so. The newest needs nothing.
        guarded = {pt.build_key for pt in pts if pt.detail.output_guard}
        assert guarded == {builds[oldest.name].key}, guarded
        for pt in pts:
            # ncmoe 2 went through the binary's own option (or its -ot form), never an unknown flag
            if pt.ncmoe == 2:
                assert "--n-cpu-moe" in pt.command or "--override-tensor" in pt.command
            assert pt.detail.fit_status in ("fitted", "unsupported")
        cmp = {(c["ncmoe"], c["metric"]): c for c in run.summary.comparisons}
        assert set(cmp) == {(n, m) for n in (0, 2) for m in ("pp", "tg")}, run.summary
        for c in cmp.values():
            assert c["A"]["n_requests"] == 8 and c["B"]["n_requests"] == 8, c          # every measured request, no warm-up
            assert c["A"]["k"] == 4 and c["B"]["k"] == 4, c              # four server starts a side
            assert_coherent(c["comparison"])     # inconclusive is a valid verdict from 4 starts on a shared machine
    assert oldest.name in r.stdout and newest.name in r.stdout


@pytest.mark.full
def test_oldest_and_newest_release_compare_a_real_model_from_pypi(pypi_online, lf_paths, cpu_build, pin_build,
                                                                   tmp_path):
    """The same two releases on a real trained model (SmolLM2-135M-Instruct, dense llama, from its
    PyPI wheel): both generate, and compare's statistics come out for both metrics."""
    rel = _release_pins(lf_paths.pins_file)
    oldest, newest = rel[0], rel[-1]
    keys = {pin_build(oldest.name).key, build(lf_paths, newest, "cpu", BuildOptions()).key}   # cached by the test above
    model = resolve_model(SMOLLM2, lf_paths, progress=False)
    env = {**os.environ, "LLAMAFORGE_WORKSPACE": str(lf_paths.workspace),
           "LLAMAFORGE_RESULTS": str(tmp_path / "results")}
    cmd = [sys.executable, "-m", "llamaforge", "compare", "--base", oldest.name, "--head", newest.name,
           "--backend", "cpu", "--model", str(model), "--repeats", "2", "--launches", "4",
           "--prompt-tokens", "64", "--n-predict", "16", "--threads", "2"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=1800, env=env)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    with Store(tmp_path / "results" / "llamaforge.sqlite") as store:
        (run,) = store.list_runs("compare")
        pts = store.points(run.id)
        assert {pt.build_key for pt in pts} == keys
        assert all(pt.status == "ok" for pt in pts), [(pt.build_key, pt.status, pt.failure_detail) for pt in pts]
        cmp = {(c["ncmoe"], c["metric"]): c for c in run.summary.comparisons}
        assert set(cmp) == {(0, "pp"), (0, "tg")}, run.summary
        for c in cmp.values():
            assert c["A"]["n_requests"] == 8 and c["B"]["n_requests"] == 8 and c["A"]["centre"] > 0 and c["B"]["centre"] > 0, c
            assert_coherent(c["comparison"])     # inconclusive is a valid verdict from 4 starts on a shared machine
