"""A dense, non-Qwen model through real llama.cpp (CPU build): a synthetic gemma3 (sliding-window
layers, tied embeddings) loads and generates in llama-server, an `--ngl` sweep goes end to end
through the CLI (plan, server argv, store, report by run name), llama.cpp's own KV cache size
matches the facts' sliding-window estimate, and `--ncmoe 0:2` is refused in one line."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from llamaforge.models import model_facts, resolve_model
from llamaforge.store import Store

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def tiny_gemma3(lf_paths, cpu_build) -> Path:
    return Path(resolve_model("synth:tiny-gemma3", lf_paths, vocab_dir=cpu_build.source_dir / "models"))


def _cli(args: list[str], results: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "LLAMAFORGE_RESULTS": str(results)}
    return subprocess.run([sys.executable, "-m", "llamaforge", *args], env=env, capture_output=True, text=True,
                          timeout=900)


def test_dense_model_ngl_sweep_end_to_end_and_ncmoe_refused(cpu_build, tiny_gemma3, tmp_path):
    results = tmp_path / "results"
    facts = model_facts(tiny_gemma3)
    assert not facts.is_moe and facts.tied_embeddings and facts.swa_layers

    refused = _cli(["bench", "--model", str(tiny_gemma3), "--backends", "cpu", "--ncmoe", "0:2"], results)
    assert refused.returncode != 0
    lines = refused.stderr.strip().splitlines()
    assert len(lines) == 1 and "not a MoE model" in lines[0] and "--ngl" in lines[0], refused.stderr
    assert not (results / "llamaforge.sqlite").exists() or not Store(results / "llamaforge.sqlite").list_runs()

    r = _cli(["bench", "--model", str(tiny_gemma3), "--backends", "cpu", "--ngl", "0,4,-1", "--repeats", "2", "--launches", "1",
              "--prompt-tokens", "160", "--n-predict", "8", "--threads", "2", "--name", "dense-ngl"], results)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    with Store(results / "llamaforge.sqlite") as store:
        run = store.get_run("dense-ngl")                     # found by its name
        pts = store.points(run.id)
        assert sorted(p.ngl for p in pts) == [-1, 0, 4] and {p.ncmoe for p in pts} == {0}
        for p in pts:
            assert p.status == "ok", (p.failure_class, p.failure_detail, p.log_tail)
            assert "--n-cpu-moe" not in p.command
            assert (p.ngl == -1) != ("-ngl" in p.command)
            if p.ngl != -1:
                assert p.command[p.command.index("-ngl") + 1] == str(p.ngl)
            assert len(p.measured("tg_tps")) == 2 and all(v > 0 for v in p.measured("tg_tps"))
            assert p.n_ctx_train == facts.n_ctx_train
            # llama.cpp's own KV cache size (MiB, whole numbers) matches the facts' estimate, in which the
            # sliding-window layers hold window + ubatch tokens, not the whole context
            host = p.mem_breakdown["host"]
            assert abs(host["context"] - facts.kv_cache_bytes(p.n_ctx) / 2**20) <= 1, (host, p.n_ctx)
            all_full = (facts.kv_bytes_per_token_ctx + facts.kv_bytes_per_token_swa) * p.n_ctx / 2**20
            assert host["context"] < all_full / 2, (host, all_full)

    rep = _cli(["report", "dense-ngl", "--out", str(tmp_path / "report")], results)
    assert rep.returncode == 0, rep.stderr
    md = (tmp_path / "report" / "report.md").read_text()
    assert "Token generation vs ngl" in md and "| ngl |" in md


def test_model_info_of_the_real_file(tiny_gemma3, tmp_path):
    r = _cli(["model.info", str(tiny_gemma3)], tmp_path)
    assert r.returncode == 0, r.stderr
    out = " ".join(r.stdout.split())
    assert "not a MoE model" in out and "sliding-window (128 tokens)" in out and "tied" in out


@pytest.mark.measures   # the layer splits it measures are chosen from measured speeds
def test_ngl_auto_on_a_dense_model_bisects_few_fits_and_measures_only_chosen_layer_splits(cpu_build, tiny_gemma3,
                                                                                         tmp_path):
    from llamaforge.bench.threshold import max_fits

    results = tmp_path / "results"
    facts = model_facts(tiny_gemma3)
    n = facts.n_layers
    r = _cli(["bench", "--model", str(tiny_gemma3), "--backends", "cpu", "--ngl", "auto", "--max-points", "3",
              "--repeats", "1", "--launches", "1", "--prompt-tokens", "128", "--n-predict", "8", "--threads", "2",
              "--name", "dense-auto"], results)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "adaptive sweep over ngl" in r.stdout
    with Store(results / "llamaforge.sqlite") as store:
        run = store.get_run("dense-auto")
        ad = run.plan.adaptive.to_json()
        assert ad["axis"] == "ngl" and ad["n_measured"] <= 3
        fits = store.points(ad["fitmap_run"])
        # the threshold's bisection over ngl n+1 .. 0: a few fits, each with an explicit -ngl
        assert 1 <= len(fits) <= max_fits(n + 2) < n + 2
        assert all(p.status == "ok" and p.ncmoe == 0 and 0 <= p.ngl <= n + 1 for p in fits)
        assert all("-ngl" in p.command and p.command[p.command.index("-ngl") + 1] == str(p.ngl) for p in fits)
        pts = [p for p in store.points(run.id) if not p.label]
        chosen = sorted(c["ngl"] for c in ad["chosen"])
        assert sorted(p.ngl for p in pts) == chosen and {0, n + 1} <= set(chosen)     # the two ends
        for p in pts:
            assert p.status == "ok", (p.failure_class, p.failure_detail, p.log_tail)
            assert "--n-cpu-moe" not in p.command and p.command[p.command.index("-ngl") + 1] == str(p.ngl)
            assert p.measured("tg_tps") and all(v > 0 for v in p.measured("tg_tps"))
        native = facts.n_ctx_train
        known = {int(k): v for k, v in ad["ctx"][cpu_build.key].items()} | {p.ngl: p.n_ctx for p in pts}
        assert ad["conclusions"]["threshold"][cpu_build.key] == max(g for g, c in known.items() if c and c >= native)
        assert ad["conclusions"]["sweet_spot"][cpu_build.key] in chosen
        interp = {int(g) for g in ad["interpolated"][cpu_build.key]}
        assert interp | set(chosen) == set(range(n + 2)) and not interp & set(chosen)
    rep = _cli(["report", "dense-auto", "--out", str(tmp_path / "report")], results)
    assert rep.returncode == 0, rep.stderr
    md = (tmp_path / "report" / "report.md").read_text()
    assert "## Adaptive sweep" in md and "native context up to ngl" in md and "Token generation vs ngl" in md
