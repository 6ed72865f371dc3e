"""Synthetic tiny models load and generate in REAL llama.cpp (CPU, and Vulkan on lavapipe),
including with ``-ncmoe`` (``--n-cpu-moe``) moving expert weights to the CPU."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest
import requests

from llamaforge import proc
from llamaforge.llamacpp.quirks import quirk_args
from llamaforge.models import model_facts, synth, twin

pytestmark = pytest.mark.slow


def _generate(build, model: Path, *extra: str, n_predict: int = 8, timeout: float = 300.0) -> dict:
    """Start llama-server on a free port, wait for /health, run one completion, return its JSON.
    The build's recorded quirks are passed like bench passes them (e.g. ``--no-repack`` where the
    smoke run found that llama.cpp's CPU repack/AMX path crashes on this machine)."""
    port = proc.free_port()
    args = [build.binary("llama-server"), "-m", model, "-np", "1", "-c", "512", "--host", "127.0.0.1",
            "--port", str(port), *quirk_args(build.manifest, "llama-server"), *extra]
    p = proc.spawn(args, env=build.env, stdout=subprocess.PIPE, text=True)
    with proc.managed(p):
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + timeout
        while True:
            if p.poll() is not None:
                out = p.stdout.read() if p.stdout else ""
                pytest.fail(f"llama-server exited with {p.returncode}:\n{out[-3000:]}")
            try:
                if requests.get(f"{base}/health", timeout=2).status_code == 200:
                    break
            except requests.RequestException:
                pass
            if time.monotonic() > deadline:
                pytest.fail("llama-server did not become healthy")
            time.sleep(0.5)
        r = requests.post(f"{base}/completion", json={"prompt": "The capital of France is", "n_predict": n_predict,
                                                      "ignore_eos": True, "cache_prompt": False, "temperature": 0},
                          timeout=timeout)
        r.raise_for_status()
        return r.json()


@pytest.fixture(params=["cpu", "vulkan"])
def real_build(request):
    return request.getfixturevalue(f"{request.param}_build")


@pytest.mark.parametrize("preset", ["tiny-qwen35moe", "tiny-qwen3moe"])
def test_tiny_synthetic_model_generates_in_real_llama_server(real_build, preset, tmp_path_factory):
    out = tmp_path_factory.mktemp("models") / f"{preset}.gguf"
    synth(preset, out, vocab_dir=real_build.source_dir / "models", progress=False)
    facts = model_facts(out)
    assert facts.ncmoe_range == (0, facts.n_layers)
    for extra in ([], ["-ncmoe", "2"]):
        res = _generate(real_build, out, *extra)
        assert res["timings"]["predicted_n"] == 8, extra


def test_twin_of_a_synthetic_model_also_generates(cpu_build, tmp_path):
    src = tmp_path / "src.gguf"
    synth("tiny-qwen35moe", src, "iq4_nl", vocab_dir=cpu_build.source_dir / "models", progress=False)
    out = tmp_path / "twin.gguf"
    twin(src, out, seed=3, progress=False)
    assert _generate(cpu_build, out)["timings"]["predicted_n"] == 8
