"""The variant matrix report from a stored run (synthetic starts, known effects): head-to-head wins/ties/losses,
placements, per-knob effects pooled where they hold, KV context vs speed, and a knob that did not take effect."""

from __future__ import annotations

import math
import random

import pytest

from llamaforge.report import write_report
from llamaforge.report.data import load
from llamaforge.report.matrix import build_matrix, matrix_section
from llamaforge.store import Point, Sample
from llamaforge.variants.model import parse_cli

KEY = "0c1e57098-cpu-aaaaaaaaaa"
ON = {"flash_attn": "enabled", "type_k": "f16", "type_v": "f16", "kv_kib_per_token": 2.0, "model_on_device": False,
      "kv_on_device": False, "n_ctx": 4096}
#: variant → (its spec, tg centre per ncmoe 0/2/4/6, its observed facts)
VARIANTS = {
    "fa-off": ("fa-off=cpu:-fa off", (100, 100, 100, 100), {**ON, "flash_attn": "disabled"}),
    "fa-on": ("fa-on=cpu:-fa on", (130, 130, 100, 100), ON),
    "nkvo": ("nkvo=cpu:-fa on -nkvo", (130, 130, 100, 100), ON),
    "q8": ("q8=cpu:-fa on -ctk q8_0 -ctv q8_0", (110.5, 110.5, 85, 85),
           {**ON, "type_k": "q8_0", "type_v": "q8_0", "kv_kib_per_token": 1.0625}),
}


def _point(run: str, name: str, ncmoe: int, tg: float, facts: dict, rng: random.Random, k: int = 5) -> Point:
    p = Point(run_id=run, build_key=KEY, engine="server", ncmoe=ncmoe, label=name, status="ok",
              n_ctx=8192 if name == "q8" else 4096, extra={"observed": facts,
                                                           "launches": [{"launch": i + 1} for i in range(k)]})
    for launch in range(1, k + 1):
        c = tg * math.exp(rng.gauss(0, 0.005))
        p.samples += [Sample(idx=i, warmup=False, tg_tps=c * (1 + 0.002 * i), pp_tps=10 * c, launch=launch)
                      for i in range(2)]
    return p


@pytest.fixture
def run(store):
    rng = random.Random(11)
    records = [{**parse_cli(spec).to_dict(), "build": KEY} for spec, _tg, _f in VARIANTS.values()]
    run_id = store.new_run("sweep", {"builds": [KEY], "backends": ["cpu"], "variants": records,
                                     "points": [{"ncmoe": n, "ngl": -1} for n in (0, 2, 4, 6)],
                                     "model": {"ref": "m.gguf", "facts": {"n_layers": 8}}})
    store.add_build({"key": KEY, "backend": "cpu", "pin": "default", "commit": "0c1e57098"}, run_id)
    for name, (_spec, tgs, facts) in VARIANTS.items():
        for ncmoe, tg in zip((0, 2, 4, 6), tgs, strict=True):
            store.record_point(_point(run_id, name, ncmoe, tg, {**facts, "n_ctx": 8192 if name == "q8" else 4096}, rng))
    return run_id


def _table(sec, title):
    return next(t for t in sec.tables if t.title == title)


def test_head_to_head_counts_wins_ties_and_losses_per_point(store, run):
    sec = matrix_section(load(store, run))
    assert sec is not None and [s.name for s in load(store, run).series] == list(VARIANTS)
    h2h = {(d["a"], d["b"]): d for d in _table(sec, "Head-to-head").data}
    d = h2h[("fa-off", "fa-on")]
    assert d["tg"] == {"wins": 0, "ties": 2, "losses": 2}      # fa-on +30 % at ncmoe 0 and 2, alike beyond
    assert d["differs_in"] == ["flash attention"]
    assert h2h[("fa-on", "q8")]["tg"]["wins"] == 4               # q8_0 KV: −15 % everywhere


def test_a_knob_that_did_not_take_effect_is_flagged_not_counted(store, run):
    sec = matrix_section(load(store, run))
    row = next(r for r in _table(sec, "Head-to-head").rows if r[0] == "fa-on vs nkvo")
    assert row[3] == row[4] == "– (no effective difference)" and "KV offload did not take effect" in row[5]
    knob = next(d for d in _table(sec, "Per-knob effects").data if d["knob"] == "--kv-offload")
    assert knob["status"]["status"] == "not taken" and knob["tg"] == []
    kinds = _table(sec, "Variants").rows
    assert "KV offload: not taken" in next(r for r in kinds if r[0] == "nkvo")[4]


def test_per_knob_effects_say_where_the_effect_holds(store, run):
    sec = matrix_section(load(store, run))
    fa = next(r for r in _table(sec, "Per-knob effects").rows if r[0].startswith("flash attention"))
    assert fa[0] == "flash attention: on vs off" and fa[1] == "fa-on vs fa-off" and fa[2].startswith("took")
    assert fa[4].startswith("+30 % [") and "at ncmoe 0–2 (2 points)" in fa[4]
    assert "no difference at ncmoe 4–6" in fa[4]
    kv = next(r for r in _table(sec, "Per-knob effects").rows if r[0].startswith("KV cache type"))
    assert kv[4].startswith("-15 % [") and "at ncmoe 0–6 (4 points)" in kv[4]


def test_kv_types_show_context_gained_against_speed_lost(store, run):
    t = _table(matrix_section(load(store, run)), "KV cache type: context gained vs speed lost")
    assert t.rows[0][0] == "q8 vs fa-on" and t.rows[0][2] == "4096 → 8192 (×2.00)"
    assert t.rows[0][3] == "2.0 → 1.0625" and t.rows[0][5].startswith("0.85× [") and t.rows[0][5].endswith("differs")


def test_placements_count_ties_as_shared_places(store, run):
    t = _table(matrix_section(load(store, run)), "Placements")
    got = {d["variant"]: d["tg"] for d in t.data}
    assert got["fa-off"] == {"4": 2, "1": 2}       # last at ncmoe 0 and 2, tied first beyond
    assert got["fa-on"] == got["nkvo"] == {"1": 4}  # nkvo is no difference from fa-on (knob not taken)
    assert got["q8"] == {"3": 2, "4": 2}


def test_a_run_without_variants_has_no_matrix(store):
    run_id = store.new_run("sweep", {"builds": [KEY]})
    store.record_point(_point(run_id, "", 0, 100.0, {}, random.Random(1)))
    data = load(store, run_id)
    assert build_matrix(data, 0.05) is None and matrix_section(data) is None


def test_the_written_report_carries_the_matrix(store, run, tmp_path):
    rp = write_report(store, run, tmp_path / "rep")
    md = rp.md.read_text()
    assert "## Variant matrix" in md and "Head-to-head" in md and "Per-knob effects" in md
    assert md.index("Variant matrix") < md.index("Points: fa-off")
