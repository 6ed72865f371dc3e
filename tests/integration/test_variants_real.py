"""Real llama.cpp (CPU build + Vulkan on lavapipe, tiny MoE): a variant matrix of five variants through the CLI
(issue 25's acceptance here) — a runtime-only knob (``-fa on`` vs ``off``), an environment knob
(``GGML_VK_DISABLE_F16``), and a deliberately ineffective one (``-nkvo``: a GPU-only option on a CPU build,
which llama-server accepts and ignores). The report has the head-to-head table and the per-knob effects, and
the ineffective knob is flagged from llama.cpp's own log as not taking effect, not reported as a difference."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from llamaforge.report import data as rdata
from llamaforge.report.matrix import matrix_section
from llamaforge.store import Store

pytestmark = pytest.mark.slow

VARIANTS = ["cpu-fa-on=cpu:-fa on", "cpu-fa-off=cpu:-fa off", "cpu-nkvo=cpu:-fa on -nkvo", "vk=vulkan",
            "vk-nof16=vulkan:GGML_VK_DISABLE_F16=1"]


def _run(tmp_path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "LLAMAFORGE_RESULTS": str(tmp_path), "COLUMNS": "400"}
    return subprocess.run([sys.executable, "-m", "llamaforge", *args], env=env, capture_output=True, text=True,
                          timeout=3600)


def _table(sec, title):
    return next(t for t in sec.tables if t.title == title)


def test_a_cpu_variant_matrix_flags_the_knob_that_did_not_take_effect(cpu_build, tiny_model, tmp_path):
    """The default tier's variant matrix: three CPU variants of one build (seconds, where lavapipe's five take
    minutes) — the runtime knob read back from llama.cpp's log, the ineffective one flagged, the matrix tables."""
    cpu = VARIANTS[:3]
    r = _run(tmp_path, "bench", "--model", str(tiny_model), *[a for v in cpu for a in ("--variant", v)],
             "--ncmoe", "4", "--repeats", "1", "--prompt-tokens", "32", "--n-predict", "4", "--threads", "2",
             "--launches", "2", "--name", "cpu-matrix")
    out = " ".join((r.stdout + r.stderr).split())
    assert r.returncode == 0, out[-4000:]
    assert "KV offload did not take effect" in out, out[-3000:]
    with Store(tmp_path / "llamaforge.sqlite") as store:
        run = store.get_run("cpu-matrix")
        pts = {p.label: p for p in store.points(run.id)}
        assert set(pts) == {v.split("=")[0] for v in cpu} and len({p.build_key for p in pts.values()}) == 1
        assert all(p.status == "ok" and len(p.launches) == 2 for p in pts.values())
        on, off = pts["cpu-fa-on"].detail.observed, pts["cpu-fa-off"].detail.observed
        assert (on["flash_attn"], off["flash_attn"]) == ("enabled", "disabled")      # read from llama.cpp's log
        assert pts["cpu-nkvo"].detail.observed["kv_buffers"] == ["CPU"]
        sec = matrix_section(rdata.load(store, run.id))
    assert sec is not None
    h2h = {(d["a"], d["b"]): d for d in _table(sec, "Head-to-head").data}
    assert len(h2h) == 3 and h2h[("cpu-fa-on", "cpu-nkvo")]["not_taken"]["knob"] == "--kv-offload"
    knobs = {d["knob"]: d for d in _table(sec, "Per-knob effects").data}
    assert knobs["--flash-attn"]["status"]["status"] == "took"
    assert knobs["--kv-offload"]["status"]["status"] == "not taken" and knobs["--kv-offload"]["tg"] == []


#: full tier: five variants on two builds, lavapipe's among them (minutes); the default tier runs the CPU matrix
@pytest.mark.full(covered_by=["tests/integration/test_variants_real.py::"
                              "test_a_cpu_variant_matrix_flags_the_knob_that_did_not_take_effect"])
def test_a_real_variant_matrix_flags_the_knob_that_did_not_take_effect(cpu_build, vulkan_build, tiny_model, tmp_path):
    r = _run(tmp_path, "bench", "--model", str(tiny_model), *[a for v in VARIANTS for a in ("--variant", v)],
             "--ncmoe", "4", "--repeats", "1", "--prompt-tokens", "32", "--n-predict", "4", "--threads", "2",
             "--launches", "2", "--name", "matrix")
    # 2 starts of one short request each, at one placement: this checks flags and tables, not effects (lavapipe
    # prefills ~20 tokens/s and decodes ~4: 2 requests of 106+16 tokens a start made this test 183 s here, and a
    # second placement cost ~35 s; pooling over placements is tested in tests/unit/test_judge_pooled.py and
    # test_report_matrix.py). 32 tokens at --n-cpu-moe 4 ran in every start tried (50+ requests); lavapipe dies
    # on 63 or 64 there, and on 32 at --n-cpu-moe 2 (STATUS.md)
    out = " ".join((r.stdout + r.stderr).split())
    assert r.returncode == 0, out[-4000:]
    assert "cpu-fa-on vs cpu-nkvo: KV offload did not take effect" in out or \
        "cpu-nkvo: KV offload did not take effect" in out, out[-3000:]
    with Store(tmp_path / "llamaforge.sqlite") as store:
        run = store.get_run("matrix")
        pts = {(p.label, p.ncmoe): p for p in store.points(run.id)}
        assert {lab for lab, _n in pts} == {v.split("=")[0] for v in VARIANTS}
        assert len({p.build_key for p in pts.values()}) == 2                  # five variants, two builds
        assert all(p.status == "ok" and len(p.launches) == 2 for p in pts.values())
        # 32 tokens asked, shorter than the model's chat frame: exactly 32 of the plain story, recorded as cut
        assert {s.prompt_n for p in pts.values() for s in p.samples} == {32}
        assert all(p.detail.prompt["cut"] and p.detail.prompt["n_tokens"] == 32 for p in pts.values())
        on, off = pts[("cpu-fa-on", 4)].detail.observed, pts[("cpu-fa-off", 4)].detail.observed
        assert (on["flash_attn"], off["flash_attn"]) == ("enabled", "disabled")      # read from llama.cpp's log
        assert pts[("cpu-nkvo", 4)].detail.observed["kv_buffers"] == ["CPU"]
        rec = {v["name"]: v for v in run.plan.variants}
        nof16 = rec["vk-nof16"]
        assert nof16["devices"]["vulkan"][0]["fp16"] == 0                     # the device line with the variable
        sec = matrix_section(rdata.load(store, run.id))
    assert sec is not None
    h2h = {(d["a"], d["b"]): d for d in _table(sec, "Head-to-head").data}
    assert len(h2h) == 10 and all(d["points"] == 1 for d in h2h.values())
    assert h2h[("cpu-fa-on", "cpu-nkvo")]["not_taken"]["knob"] == "--kv-offload"
    knobs = {d["knob"]: d for d in _table(sec, "Per-knob effects").data}
    fa = knobs["--flash-attn"]
    assert (fa["base"], fa["other"], fa["status"]["status"]) == ("cpu-fa-off", "cpu-fa-on", "took")
    assert [pt for seg in fa["tg"] for pt in seg["points"]] == ["ncmoe 4"]
    assert all(seg["verdict"] in ("same", "differs", "inconclusive") and seg["low"] <= seg["ratio"] <= seg["high"]
               for seg in fa["tg"] + fa["pp"])
    assert knobs["--kv-offload"]["status"]["status"] == "not taken" and knobs["--kv-offload"]["tg"] == []
    f16 = knobs["env:GGML_VK_DISABLE_F16"]["status"]
    base_fp16 = nof16["base_devices"]["vulkan"][0]["fp16"]
    assert f16["status"] == ("took" if str(base_fp16) != "0" else "not taken"), f16
    rep = _run(tmp_path, "report", "matrix", "--out", str(tmp_path / "report"))
    assert rep.returncode == 0, rep.stderr[-2000:]
    md = (tmp_path / "report" / "report.md").read_text()
    for needle in ("## Variant matrix", "Head-to-head", "Placements", "Per-knob effects", "flash attention: on vs off",
                   "KV offload did not take effect"):
        assert needle in md, needle
