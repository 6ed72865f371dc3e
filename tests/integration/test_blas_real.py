"""Real llama.cpp with OpenBLAS (issue 43, deliverable 4): the ``blas`` backend of the default pin is built here
(Debian 12's ``libopenblas-dev``, scripts/setup.sh), verified as a BLAS build of the pinned commit, smoke-run, and
benchmarked beside the CPU build into a report that compares BLAS with CPU.

The signal that a binary has the BLAS backend is llama.cpp's own: ``llama-bench --list-devices`` lists
``  BLAS: OpenBLAS (0 MiB, 0 MiB free)`` (a plain CPU build lists ``(none)``), and llama-bench's results name it
(``"backends": "BLAS"``). The build is made once (like conftest's ``cpu_build``, under the same cross-process
fixture lock) and cached under the tests' build root: cold, ≈ 2 min on 2 cores with a warm ccache.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from llamaforge.backends.blas import openblas_header, openblas_version
from llamaforge.builds import Build
from llamaforge.builds.verify import verify_build
from llamaforge.store import Store

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def blas_build(lf_paths, default_pin) -> Build:
    """The real BLAS (OpenBLAS) build of the default pin (built once, then cached)."""
    from conftest import _build  # tests/conftest.py: the session builds' builder, under the fixture lock

    return _build(lf_paths, default_pin, "blas")


def _lf(env: dict, *args: str, timeout: int = 900) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "llamaforge", *args], env=env, capture_output=True, text=True,
                          timeout=timeout)


def _env(tmp_path: Path) -> dict[str, str]:
    return {**os.environ, "LLAMAFORGE_RESULTS": str(tmp_path), "COLUMNS": "250"}


def test_the_blas_build_has_the_blas_backend_at_the_pinned_commit(blas_build, default_pin):
    m = blas_build.manifest
    assert m["flags"]["GGML_BLAS"] == "ON" and m["flags"]["GGML_BLAS_VENDOR"] == "OpenBLAS"
    ver = m["verification"]
    assert ver["ok"], ver["problems"]
    assert ver["version"]["commit"] and default_pin.commit.startswith(ver["version"]["commit"])
    # llama.cpp's own word, read again here from the binary: the BLAS backend lists its library as a device
    listing = subprocess.run([str(blas_build.binary("llama-bench")), "--list-devices"], capture_output=True,
                             text=True, timeout=120)
    assert "  BLAS: OpenBLAS" in listing.stdout + listing.stderr, listing.stdout + listing.stderr
    assert [(d["backend"], d["name"], d["indexed"]) for d in ver["devices"]] == [("BLAS", "OpenBLAS", False)]
    assert blas_build.capabilities["blas_library"] == "OpenBLAS"
    # the OpenBLAS it was built with keys it (a different OpenBLAS is a different build)
    assert m["key_content"]["toolchain"]["openblas"] == openblas_version(openblas_header()) != "unknown"


def test_the_blas_build_is_smoke_run_on_its_blas_backend(blas_build):
    m = blas_build.manifest
    assert m["smoke"] == "ok"
    a = m["verification"]["smoke"]["attempts"][-1]
    assert a["server"]["ok"] and a["server"]["tokens"] == 4 and a["bench"]["ok"]
    # the CPU's runtime quirks apply to blas too: a recorded one is no-repack (AMX × gcc 12), none here
    assert all(q["name"] == "no-repack" for q in m["quirks"])
    result = json.loads(Path(a["bench"]["log"]).read_text().splitlines()[0])
    assert result["backends"] == "BLAS" and "OpenBLAS" in result["cpu_info"], result


def test_build_and_verify_commands_report_the_blas_backend(blas_build, tmp_path):
    env = _env(tmp_path)
    built = _lf(env, "build", "--backends", "blas")
    assert built.returncode == 0, (built.stdout + built.stderr)[-3000:]
    assert blas_build.key in built.stdout
    verified = _lf(env, "verify", "--backends", "blas")
    assert verified.returncode == 0, (verified.stdout + verified.stderr)[-3000:]
    assert "BLAS: OpenBLAS" in verified.stdout and "all builds verified" in verified.stdout, verified.stdout


def test_a_binary_without_the_blas_backend_is_refused_as_a_blas_build(cpu_build):
    claimed = dataclasses.replace(cpu_build, backend="blas")   # the real CPU binaries, called a blas build
    v = verify_build(claimed, smoke=False)
    assert not v.ok
    assert v.problems == ["built for BLAS but the binary has no BLAS backend (`--list-devices` lists no BLAS device)"]
    assert "libopenblas-dev" in v.fixes[0] and "GGML_BLAS=ON" in v.fixes[0]


def test_a_blas_and_cpu_bench_reports_blas_against_cpu(blas_build, cpu_build, tiny_model, tmp_path):
    """One short sweep of both builds (a 512-token prompt, where BLAS takes the prompt's matrix products; 2 starts
    × 2 requests each) and its report: the comparison between backends is BLAS over CPU."""
    env = _env(tmp_path)
    bench = _lf(env, "bench", "--model", str(tiny_model), "--backends", "cpu,blas", "--ncmoe", "0",
                "--repeats", "2", "--launches", "2", "--prompt-tokens", "512", "--n-predict", "8",
                "--threads", "2", "--name", "blas-vs-cpu")
    assert bench.returncode == 0, (bench.stdout + bench.stderr)[-3000:]
    with Store(tmp_path / "llamaforge.sqlite") as store:
        run = store.get_run("blas-vs-cpu")
        points = store.points(run.id)
    assert {p.build_key for p in points} == {blas_build.key, cpu_build.key}
    assert all(p.status == "ok" for p in points), [(p.build_key, p.failure_class, p.failure_detail) for p in points]
    rep = _lf(env, "report", "--run", run.id, "--out", str(tmp_path / "rep"))
    assert rep.returncode == 0, (rep.stdout + rep.stderr)[-3000:]
    md = (tmp_path / "rep" / "report.md").read_text(encoding="utf-8")
    ratios = md.split("### Ratios", 1)[1].split("\n#", 1)[0]
    rows = [ln for ln in ratios.splitlines() if ln.startswith("| ") and "| BLAS/CPU |" in ln]
    assert rows, ratios
    assert "| BLAS / CPU | prompt t/s |" in md and "## Points: BLAS" in md and "## Points: CPU" in md
