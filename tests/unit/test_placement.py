"""``bench --place`` (issue 43, deliverable 1): strategies → layers → ``-ot`` entries, the checks against the
model's tensors (one line each), llama.cpp's read-back lines, and the points a sweep measures."""

from __future__ import annotations

import re

import pytest

from llamaforge.bench.placed import place_points, planned
from llamaforge.errors import ConfigError
from llamaforge.llamacpp import placement as P
from llamaforge.llamacpp.options import BinaryOptions, ncmoe_overrides
from llamaforge.records import ModelFacts
from llamaforge.report.placement import compact

KINDS = ("ffn_up_exps", "ffn_down_exps", "ffn_gate_exps")


def _tensors(n_layers: int = 8) -> dict[str, int]:
    out = {"token_embd.weight": 1000, "output.weight": 1000}
    for i in range(n_layers):
        out[f"blk.{i}.attn_norm.weight"] = 10
        out[f"blk.{i}.ffn_gate_inp.weight"] = 20
        out.update({f"blk.{i}.{k}.weight": 300 + i for k in KINDS})
    return out


def test_strategies_parse_and_attn_aware_is_both():
    ps = P.parse("first:4, last:4,attn-aware:2,every:3,ot:blk\\.(1|2)\\.ffn_.*_exps")
    assert [p.text for p in ps] == ["first:4", "last:4", "attn-first:2", "attn-last:2", "every:3",
                                    "ot:blk\\.(1|2)\\.ffn_.*_exps"]
    assert [p.series for p in ps] == ["", "last", "attn-first", "attn-last", "every:3", "ot:blk\\.(1|2)\\.ffn_.*_exps"]
    assert P.split_items("ot:a{1,3},last:2") == ["ot:a{1,3}", "last:2"]


@pytest.mark.parametrize("bad,says", [("last", "names no count"), ("bogus:2", "unknown strategy"),
                                      ("every:0", "period"), ("last:-1", "count"), ("ot:blk[", "not a regular"),
                                      ("ot:blk\\.(1,2)", "comma"), ("last:2,last:2", "more than once"), ("", "no strategy")])
def test_bad_strategies_are_one_line_each(bad, says):
    with pytest.raises(ConfigError) as e:
        P.parse(bad)
    assert says in e.value.message and "\n" not in e.value.message and e.value.fix


def test_layers_of_each_strategy_on_an_interleaved_model():
    full = [3, 7]                       # qwen35moe: every 4th layer is full attention
    lay = {p.text: p.layers(8, full) for p in P.parse("first:3,last:3,every:2,attn-aware:3")}
    assert lay == {"first:3": [0, 1, 2], "last:3": [5, 6, 7], "every:2": [1, 3, 5, 7],
                   "attn-first:3": [0, 3, 7], "attn-last:3": [0, 1, 2]}
    assert P.parse("attn-last:7")[0].layers(8, full) == [0, 1, 2, 3, 4, 5, 6]   # full-attention ones go last


def test_overrides_are_llama_cpps_own_expert_pattern_per_layer():
    first = P.parse("first:3")[0].overrides(8)
    assert list(first) == ncmoe_overrides(3)          # first:N moves exactly what -ncmoe N moves
    last = P.parse("last:2")[0].overrides(8)
    names = list(_tensors())
    hit = [t for t in names if any(re.search(e.rpartition("=")[0], t) for e in last)]
    assert sorted(hit) == sorted(f"blk.{i}.{k}.weight" for i in (6, 7) for k in KINDS)
    opts = BinaryOptions(server=frozenset({"-ot"}), bench=frozenset({"-ot"}))
    assert opts.offload_args("llama-server", 2, -1, ot=last) == ["-ot", ",".join(last)]
    assert opts.offload_args("llama-bench", 2, -1, ot=last) == ["-ot", ";".join(last)]


def test_checks_against_the_model_refuse_in_one_line():
    names = list(_tensors())
    with pytest.raises(ConfigError, match="has 8 layers, so at most 8"):
        P.check(P.parse("last:99")[0], 8, names, "m.gguf")
    with pytest.raises(ConfigError, match="matches no tensor .* move 0 tensors"):
        P.check(P.parse("ot:blk\\.99\\.")[0], 8, names, "m.gguf")
    assert P.check(P.parse("ot:blk\\.(1|2)\\.ffn_.*_exps")[0], 8, names) == 2
    assert P.check(P.parse("every:2")[0], 8, names) == 4


def test_the_read_back_lines_of_llama_cpps_loader():
    log = ("0.00.111.369 D tensor blk.1.ffn_down_exps.weight (0 MiB q6_K) buffer type overridden to CPU\n"
           "0.00.111.392 D tensor blk.1.ffn_gate_exps.weight (12 MiB q4_K) buffer type overridden to CPU_REPACK\n"
           "load_tensors: CPU model buffer size = 0.00 MiB\n")
    got = P.moved_tensors(log)
    assert [(m.name, m.mib, m.type, m.buffer) for m in got] == [
        ("blk.1.ffn_down_exps.weight", 0.0, "q6_K", "CPU"), ("blk.1.ffn_gate_exps.weight", 12.0, "q4_K", "CPU_REPACK")]


def test_place_points_and_what_they_plan_to_move():
    tensors = _tensors()
    facts = ModelFacts(n_layers=8, full_attention_layers=[3, 7])
    pts = place_points("first:2,last:2,attn-first:2", None, facts, tensors)
    assert [(p.ncmoe, p.place) for p in pts] == [(2, "first:2"), (2, "last:2"), (2, "attn-first:2")]
    assert pts[0].ot == () and len(pts[1].ot) == 2
    names, nbytes = planned(pts[1], tensors)
    assert sorted(names) == sorted(f"blk.{i}.{k}.weight" for i in (6, 7) for k in KINDS)
    assert nbytes == 3 * (306 + 307)
    assert planned(pts[0], tensors)[0] == [f"blk.{i}.{k}.weight" for i in (0, 1) for k in KINDS]
    with pytest.raises(ConfigError):
        place_points("last:9", None, facts, tensors)


def test_compact_names_the_tensors_per_layer_group():
    names = [f"blk.{i}.{k}.weight" for i in (4, 5) for k in KINDS]
    assert compact(names) == "blk.{4,5}.ffn_{down,gate,up}_exps"
    assert compact(["blk.3.ffn_up_exps.weight"]) == "blk.3.ffn_up_exps"
    assert compact([]) == "none"


def test_each_point_gets_its_own_moved_detail_once(monkeypatch):
    from types import SimpleNamespace

    from llamaforge.bench import placed

    calls = []

    def fake_read_back(build, model_path, spec, threads):
        calls.append(spec.ncmoe)
        return {"source": "fake", "tensors": [[f"n{spec.ncmoe}", "CPU"]]}

    monkeypatch.setattr(placed, "_MOVED", {})
    monkeypatch.setattr(placed, "read_back", fake_read_back)
    monkeypatch.setattr(placed, "tensor_sizes", lambda _p: _tensors())
    build = SimpleNamespace(key="k-cpu")
    facts = ModelFacts(n_layers=8, full_attention_layers=[3, 7])
    four, eight = place_points("first:4,first:8", None, facts, _tensors())
    a = placed.moved_detail(build, "m.gguf", four, 2)
    b = placed.moved_detail(build, "m.gguf", eight, 2)
    placed.moved_detail(build, "m.gguf", four, 2)          # a second start of the first point: no new read-back
    assert a["read_back"]["tensors"] == [["n4", "CPU"]] and b["read_back"]["tensors"] == [["n8", "CPU"]]
    assert a["layers"] == [0, 1, 2, 3] and b["layers"] == list(range(8)) and calls == [4, 8]
