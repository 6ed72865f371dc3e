"""Real llama.cpp (CPU build, tiny synthetic qwen35moe: 8 layers, full attention at 3 and 7): ``bench --place
first:4,last:4,attn-aware:4`` measures each strategy as its own series, passes its ``-ot`` overrides, reads
back what llama.cpp overrode, and the report names the tensors each strategy moved (issue 43's acceptance);
a count beyond the model's layers and a regex that matches no tensor are refused in one line."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from llamaforge.store import Store

pytestmark = pytest.mark.slow

STRATEGIES = {"first:4": [0, 1, 2, 3], "last:4": [4, 5, 6, 7], "attn-first:4": [0, 1, 3, 7],
              "attn-last:4": [0, 1, 2, 4]}


def _lf(env: dict, *args: str, ok: bool = True) -> subprocess.CompletedProcess:
    r = subprocess.run([sys.executable, "-m", "llamaforge", *args], env=env, capture_output=True, text=True,
                       timeout=1200)
    assert (r.returncode == 0) == ok, (r.stdout + r.stderr)[-3000:]
    return r


def test_a_placement_sweep_names_the_tensors_each_strategy_moved(cpu_build, tiny_model, tmp_path):
    env = {**os.environ, "LLAMAFORGE_RESULTS": str(tmp_path), "COLUMNS": "250"}
    _lf(env, "bench", "--model", str(tiny_model), "--backends", "cpu", "--place", "first:4,last:4,attn-aware:4",
        "--repeats", "2", "--launches", "2", "--prompt-tokens", "64", "--n-predict", "8", "--threads", "2",
        "--name", "placed")
    with Store(tmp_path / "llamaforge.sqlite") as store:
        run = store.get_run("placed")
        pts = {p.detail.moved["strategy"]: p for p in store.points(run.id) if p.detail.moved}
        assert sorted(pts) == sorted(STRATEGIES)
        for strategy, layers in STRATEGIES.items():
            p = pts[strategy]
            m = p.detail.moved
            assert p.status == "ok" and p.ncmoe == 4, (p.failure_class, p.failure_detail)
            assert m["layers"] == layers and len(m["tensors"]) == 3 * len(layers) and m["bytes"] > 0
            # llama.cpp itself says it overrode exactly the planned tensors
            back = m["read_back"]
            assert back["source"] == "llama-fit-params -v", back
            assert sorted(n for n, _b in back["tensors"]) == sorted(m["tensors"])
            assert {b for _n, b in back["tensors"]} <= {"CPU", "CPU_REPACK"}
            cmd = " ".join(p.command)
            if strategy == "first:4":
                assert "--n-cpu-moe 4" in cmd or "-ncmoe 4" in cmd, cmd
            else:
                assert all(f"blk\\.{i}\\.ffn_" in cmd for i in layers), cmd
                assert "-ot" in p.command or "--override-tensor" in p.command, cmd
        assert len({p.detail.moved["bytes"] for p in pts.values()}) == 1    # alike layers: equal bytes moved
        run_id = run.id
    _lf(env, "report", "--run", run_id, "--out", str(tmp_path / "rep"))
    md = (tmp_path / "rep" / "report.md").read_text(encoding="utf-8")
    section = md.split("## Placement", 1)[1].split("\n## ", 1)[0]
    for strategy, layers in STRATEGIES.items():
        row = next(ln for ln in section.splitlines() if f"| {strategy} |" in ln and "llama-fit-params" in ln)
        assert "blk.{" + ",".join(map(str, layers)) + "}.ffn\\_{down,gate,up}\\_exps" in row, row
        assert "as planned" in row, row
    assert "Placements at equal bytes moved" in section and section.count("| first:4 |") >= 3


def test_a_count_beyond_the_layers_and_a_regex_that_matches_nothing_are_one_line(cpu_build, tiny_model, tmp_path):
    env = {**os.environ, "LLAMAFORGE_RESULTS": str(tmp_path)}
    for place, says in (("last:99", "has 8 layers, so at most 8 can move"),
                        ("ot:blk\\.99\\.ffn_.*", "matches no tensor")):
        r = _lf(env, "bench", "--model", str(tiny_model), "--backends", "cpu", "--place", place, ok=False)
        err = r.stderr.strip()
        assert says in err and "Traceback" not in err and len(err.splitlines()) == 1, err
