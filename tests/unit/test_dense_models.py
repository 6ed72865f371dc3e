"""Dense and non-Qwen models: a model without experts (gemma3), tied embeddings, sliding-window
layers — their facts, `model.info`, the refused `--ncmoe` and the ngl axis of a layer sweep's report."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import run_fake
from gguf import GGUFValueType as VT

from llamaforge.bench.plan import make_points
from llamaforge.errors import BenchError
from llamaforge.models import facts_from_plan, model_facts, read_plan, synth, synth_plan
from llamaforge.models.plan import KV
from llamaforge.store import Point, Sample


@pytest.fixture(scope="module")
def gemma(tmp_path_factory: pytest.TempPathFactory, vocab_dir: Path) -> Path:
    out = tmp_path_factory.mktemp("m") / "tiny-gemma3.gguf"
    synth("tiny-gemma3", out, "q4_k_m", vocab_dir=vocab_dir, progress=False)
    return out


def test_tiny_gemma3_file_is_dense_with_tied_embeddings_and_sliding_window_layers(gemma):
    plan = read_plan(gemma)
    names = {t.name for t in plan.tensors}
    assert "output.weight" not in names and "token_embd.weight" in names
    assert not any("_exps" in n or "ffn_gate_inp" in n for n in names)
    assert {"blk.0.ffn_gate.weight", "blk.0.post_ffw_norm.weight", "blk.0.post_attention_norm.weight"} <= names
    md = plan.metadata()
    assert md["gemma3.attention.sliding_window"] == 128 and "gemma3.expert_count" not in md
    f = model_facts(gemma)
    assert not f.is_moe and f.n_experts == 0 and f.ncmoe_range == (0, 0)
    assert f.tied_embeddings
    # llama.cpp's gemma3 default pattern (no sliding_window_pattern key, like real Gemma 3 files): every 6th full
    assert f.full_attention_layers == [5] and f.swa_layers == [0, 1, 2, 3, 4, 6, 7] and f.sliding_window == 128


def test_tied_embeddings_are_read_whole_per_token(gemma):
    f = model_facts(gemma)
    embd = next(t for t in read_plan(gemma).tensors if t.name == "token_embd.weight")
    weights = sum(f.bytes_by_type.values())
    # every weight is read (dense): the whole embedding (as the output projection) + one row of it (the input)
    assert f.weight_bytes_per_token == weights + embd.nbytes // f.vocab_size
    assert f.params_active == f.params_total
    # the same model with an untied output: the embedding is read one row at a time, output.weight whole
    plan = _untied()
    untied = facts_from_plan(plan)
    emb = next(t for t in plan.tensors if t.name == "token_embd.weight")
    assert not untied.tied_embeddings and any(t.name == "output.weight" for t in plan.tensors)
    assert untied.weight_bytes_per_token == sum(untied.bytes_by_type.values()) - emb.nbytes + emb.nbytes // untied.vocab_size


def _untied():
    from llamaforge.models.plan import plan_synthetic
    from llamaforge.models.presets import TINY_GEMMA3, get_mix

    return plan_synthetic(dataclasses.replace(TINY_GEMMA3, tied_embeddings=False), get_mix("q4_k_m"))


def test_sliding_window_layers_hold_and_read_at_most_their_window(gemma):
    f = model_facts(gemma)
    per_layer = (64 + 64) * 1 * 2          # head dim 64 K + V, 1 KV head, f16
    assert f.kv_bytes_per_token_ctx == 1 * per_layer
    assert f.kv_bytes_per_token_swa == 7 * per_layer
    base = f.bytes_per_token(0)
    assert f.bytes_per_token(100) == base + 100 * 8 * per_layer             # within the window: all 8 layers
    assert f.bytes_per_token(4096) == base + 4096 * per_layer + 128 * 7 * per_layer
    assert f.kv_cache_bytes(4096) == 4096 * per_layer + (128 + 512) * 7 * per_layer
    assert f.kv_cache_bytes(64) == 64 * 8 * per_layer


@pytest.mark.parametrize("pattern, expect", [
    (None, [0, 1, 2, 3, 4, 6, 7]),                          # the arch default (6)
    (2, [0, 2, 4, 6]),                                       # ARCH.attention.sliding_window_pattern = N
    ([True, False] * 4, [0, 2, 4, 6]),                       # a per-layer bool array
])
def test_sliding_window_pattern_from_metadata(pattern, expect):
    plan = synth_plan("tiny-gemma3", "q4_k_m")
    plan.kv = [e for e in plan.kv if "sliding_window_pattern" not in e.key]
    if isinstance(pattern, int):
        plan.kv.append(KV("gemma3.attention.sliding_window_pattern", pattern, VT.UINT32))
    elif isinstance(pattern, list):
        plan.kv.append(KV("gemma3.attention.sliding_window_pattern", pattern, VT.ARRAY, VT.BOOL))
    f = facts_from_plan(plan)
    assert f.swa_layers == expect and f.full_attention_layers == [i for i in range(8) if i not in expect]


def test_bool_pattern_array_survives_reading_a_file_without_arrays(tmp_path, vocab_dir):
    from llamaforge.models.synth import with_tokenizer, write_plan

    plan = with_tokenizer(synth_plan("tiny-gemma3", "q8_0", vocab_dir=vocab_dir))
    plan.kv.append(KV("gemma3.attention.sliding_window_pattern", [True, False] * 4, VT.ARRAY, VT.BOOL))
    write_plan(plan, tmp_path / "p.gguf", progress=False, fsync=False)
    assert model_facts(tmp_path / "p.gguf").swa_layers == [0, 2, 4, 6]


def test_gemma3_270m_preset_has_the_real_models_size():
    f = facts_from_plan(synth_plan("gemma3-270m", "q4_k_m"))
    # google/gemma-3-270m: 268 M parameters, 170 M of them in the (tied) embedding
    assert 265e6 < f.params_total < 271e6
    assert f.tied_embeddings and f.n_layers == 18 and f.full_attention_layers == [5, 11, 17]


def test_moe_facts_unchanged_by_the_dense_additions():
    f = facts_from_plan(synth_plan("tiny-qwen35moe", "q4_k_m"))
    assert f.is_moe and f.ncmoe_range == (0, 8) and not f.tied_embeddings and f.swa_layers == []
    assert f.kv_bytes_per_token_swa == 0 and f.bytes_per_token(1000) - f.bytes_per_token(0) == 1000 * f.kv_bytes_per_token_ctx


def test_model_info_says_not_a_moe_model(gemma, capsys):
    from invoke import Context

    from llamaforge.commands.model import info

    info(Context(), model=str(gemma))
    out = " ".join(capsys.readouterr().out.split())
    assert "not a MoE model" in out and "--ngl 0:8" in out
    assert "sliding-window (128 tokens)" in out and "tied" in out


# ---- bench: the refused --ncmoe ------------------------------------------------------------------
def test_dense_model_refuses_ncmoe_other_than_0_with_the_fix():
    with pytest.raises(BenchError) as e:
        make_points("0:2", None, n_layers=8, n_experts=0, model="tiny-gemma3.gguf")
    assert "not a MoE model" in str(e.value) and "--ngl 0:8" in e.value.fix
    pts = make_points("0", "0:8:4", n_layers=8, n_experts=0)
    assert [(p.ncmoe, p.ngl) for p in pts] == [(0, 0), (0, 4), (0, 8)]
    assert len(make_points("0:2", None, n_layers=8, n_experts=8)) == 3


def test_bench_task_refuses_ncmoe_on_a_dense_model_in_one_line(gemma, tmp_path, monkeypatch, capsys):
    from invoke import Context

    from llamaforge.commands.bench import bench

    monkeypatch.setenv("LLAMAFORGE_WORKSPACE", str(tmp_path))
    monkeypatch.setenv("LLAMAFORGE_RESULTS", str(tmp_path / "results"))
    with pytest.raises(SystemExit) as e:
        bench(Context(), model=str(gemma), ncmoe="0:2")
    assert e.value.code != 0
    err = capsys.readouterr().err
    assert "not a MoE model" in err and "--ngl" in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


# ---- report: the ngl axis ------------------------------------------------------------------------
def _ngl_run(tmp: Path):
    store, run_id = run_fake.build(tmp, backends=("cpu",), points=False)
    store.db.execute("UPDATE runs SET plan_json=? WHERE id=?", (
        '{"model": {"ref": "synth:tiny-gemma3", "facts": {"n_layers": 8, "n_ctx_train": 4096, '
        '"n_experts": 0, "weight_bytes_per_token": 30000000, "kv_bytes_per_token_ctx": 256, '
        '"kv_bytes_per_token_swa": 1792, "sliding_window": 128}}, "prompt_tokens_target": 512, "n_predict": 64}',
        run_id))
    for ngl in (-1, 0, 4, 8):
        p = Point(run_id, "cpu-0c1e570-abcd", "server", ncmoe=0, ngl=ngl, n_ctx_train=4096, prompt_tokens=512,
                  n_predict=64, command=["llama-server", "-ngl", str(ngl)])
        p.n_ctx = 4096
        tg = 30.0 + ngl
        p.samples = [Sample(i, False, "", 512, 1.0, 300.0 + i, 64, 1.0, tg + i * 0.1) for i in range(1, 4)]
        store.record_point(p)
    return store, run_id


def test_report_of_a_layer_sweep_uses_ngl_as_its_axis(tmp_path):
    from llamaforge.report import data as rdata
    from llamaforge.report.plots import make_plots
    from llamaforge.report.provenance import commands_table
    from llamaforge.report.roofline import roofline_table
    from llamaforge.report.scenarios import summary_table

    store, run_id = _ngl_run(tmp_path)
    d = rdata.load(store, run_id)
    assert d.axis == "ngl"
    rows = d.series[0].rows
    assert [r.x_label for r in rows] == ["0", "4", "8", "all"] and rows[-1].x == 9   # all = n_layers + 1
    summ = summary_table(d)
    assert summ.columns[2] == "ngl"
    all_gpu = next(r for r in summ.rows if r[1].startswith("all layers on the device"))
    assert all_gpu[2] == "all"
    assert commands_table(d).columns[1] == "ngl"
    plots = make_plots(d, tmp_path / "plots")
    assert {p.title for p in plots} >= {"Token generation vs ngl", "Context vs ngl"}
    # the roofline counts the sliding-window layers' KV only up to their window
    roof, _ = roofline_table(d)
    ctx_used = 512 + 64 / 2
    assert roof.data[0]["bytes_per_token"] == pytest.approx(30000000 + 256 * ctx_used + 1792 * 128)
    store.close()


def test_report_of_an_ncmoe_sweep_keeps_the_ncmoe_axis(tmp_path):
    from llamaforge.report import data as rdata
    from llamaforge.report.scenarios import summary_table

    store, run_id = run_fake.build(tmp_path)
    d = rdata.load(store, run_id)
    assert d.axis == "ncmoe" and summary_table(d).columns[2] == "ncmoe"
    store.close()
