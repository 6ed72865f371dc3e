"""Bad variants through the real CLI: one clear line each (exit 2, no traceback), and nothing measured.

The workspace holds a managed CPU build of the default pin whose manifest records the options its
llama-server and llama-bench list (what ``--help`` probing stores); no binary runs, because every check
fails before anything would."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from llamaforge.builds.manifest import MANIFEST_VERSION

REPO = Path(__file__).resolve().parents[2]
SERVER_OPTS = ["-m", "--model", "-fa", "--flash-attn", "-ctk", "--cache-type-k", "-nkvo", "--no-kv-offload", "-np",
               "--port", "--host", "--log-jsonl", "-lv", "--verbosity"]


@pytest.fixture
def ws(tmp_path):
    shutil.copy(REPO / "pins.toml", tmp_path / "pins.toml")
    (tmp_path / "results").mkdir()
    d = tmp_path / "build" / "0c1e57098-cpu-0000000000"
    d.mkdir(parents=True)
    (d / "manifest.json").write_text(json.dumps({
        "manifest_version": MANIFEST_VERSION, "status": "ok", "key": d.name, "backend": "cpu", "pin": "default",
        "commit": "0c1e57098" + "0" * 31, "flags": {"GGML_NATIVE": "OFF"}, "binaries": {}, "smoke": "ok",
        "built_at": 1.0, "options": {"llama-server": SERVER_OPTS, "llama-bench": ["-m", "-fa"],
                                     "llama-fit-params": ["-m", "-fa"]}}))
    return tmp_path


def cli(ws: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "LLAMAFORGE_WORKSPACE": str(ws), "LLAMAFORGE_RESULTS": str(ws / "results"), "COLUMNS": "400"}
    for k in ("LLAMAFORGE_DEBUG", "LLAMAFORGE_BUILD_ROOT"):
        env.pop(k, None)
    return subprocess.run([sys.executable, "-m", "llamaforge", *args], cwd=ws, env=env, capture_output=True, text=True,
                          timeout=120)


def _nothing_measured(ws: Path) -> bool:
    store = ws / "results" / "llamaforge.sqlite"
    if not store.exists():
        return True
    import sqlite3

    with sqlite3.connect(store) as db:
        return db.execute("SELECT COUNT(*) FROM runs").fetchone()[0] == 0


@pytest.mark.parametrize("args, message", [
    (["--variant", "a=cpu:-fa on", "--variant", "a=cpu:-fa off"], "two variants are named 'a'"),
    (["--variant", "a=cpu:-fa on", "--variant", "b=vulkan"], "variant b: vulkan is not built for pin default"),
    (["--variant", "a=cpu:GGML_VK_DISABLE_F16=1"], "GGML_VK_DISABLE_F16 acts on vulkan builds, not cpu"),
    (["--variant", "a=vulkan:GGML_VK_DISABLE_FP16=1"], "GGML_VK_DISABLE_FP16 is not on llamaforge's list"),
    (["--variant", "a=cpu:-fa on --no-mmap"], "variant a: this llama-server has no --no-mmap"),
    (["--variant", "a=cpu:-fa on", "--engine", "both", "--variant", "b=cpu:-ctk q8_0"],
     "variant b: this llama-bench has no -ctk"),
    (["--variant", "a=cpu:-fa on", "--backends", "cpu"], "--backends and --variant both say what to measure"),
    (["--variant", "a"], "no variant named 'a'"),
])
def test_a_bad_variant_is_one_line_and_nothing_is_measured(ws, args, message):
    r = cli(ws, "bench", "--model", str(ws / "no-such-model.gguf"), "--ncmoe", "0", *args)
    assert r.returncode == 2, r.stdout + r.stderr
    assert "Traceback" not in r.stderr
    err = " ".join(r.stderr.split())
    assert message in err, err
    assert "fix:" in err.lower() or "(fix" in err.lower() or "→" in err or len(r.stderr.strip().splitlines()) <= 3
    assert _nothing_measured(ws)


def test_a_duplicate_name_in_variants_toml_is_one_line(ws):
    (ws / "variants.toml").write_text('[variants.a]\nbackend = "cpu"\n[variants.a]\nbackend = "cpu"\n')
    r = cli(ws, "bench", "--model", "x.gguf", "--variant", "a")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "variants.toml is not valid TOML" in " ".join(r.stderr.split()) and _nothing_measured(ws)


def test_good_variants_pass_every_check_before_the_model_is_needed(ws):
    """The checks pass for variants this build supports; the run then stops at the missing model, measuring nothing."""
    r = cli(ws, "bench", "--model", str(ws / "no-such-model.gguf"), "--variant", "a=cpu:-fa on",
            "--variant", "b=cpu:-fa off -nkvo")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    err = " ".join(r.stderr.split())
    assert "variant a" not in err and "variant b" not in err and "no-such-model.gguf" in err and _nothing_measured(ws)
