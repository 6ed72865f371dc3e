"""The variant matrix report from a stored run (synthetic starts, known effects): head-to-head wins/ties/losses,
placements, per-knob effects pooled where they hold, KV context vs speed, and a knob that did not take effect."""

from __future__ import annotations

import math
import random

import pytest

from llamaforge.records import LaunchRecord
from llamaforge.report import write_report
from llamaforge.report.data import load
from llamaforge.report.matrix import build_matrix, matrix_section
from llamaforge.store import Point, Sample
from llamaforge.variants.model import parse_cli

KEY = "0c1e57098-cpu-aaaaaaaaaa"
NATIVE = 8192
ON = {"flash_attn": "enabled", "type_k": "f16", "type_v": "f16", "kv_kib_per_token": 2.0, "model_on_device": False,
      "kv_on_device": False, "n_ctx": 4096}
#: variant → (its spec, tg centre per ncmoe 0/2/4/6, its observed facts, the context it fitted per ncmoe)
VARIANTS = {
    "fa-off": ("fa-off=cpu:-fa off", (100, 100, 100, 100), {**ON, "flash_attn": "disabled"}, (1024, 1536, 2048, 2560)),
    "fa-on": ("fa-on=cpu:-fa on", (130, 130, 100, 100), ON, (4096, 6144, NATIVE, NATIVE)),
    "nkvo": ("nkvo=cpu:-fa on -nkvo", (130, 130, 100, 100), ON, (4096, 6144, NATIVE, NATIVE)),
    "q8": ("q8=cpu:-fa on -ctk q8_0 -ctv q8_0", (110.5, 110.5, 85, 85),
           {**ON, "type_k": "q8_0", "type_v": "q8_0", "kv_kib_per_token": 1.0625}, (NATIVE,) * 4),
}
#: llama.cpp's device buffers (MiB): without flash attention the compute buffer grows with the context
MEM = {"fa-off": (10, 900)}


def _breakdown(name: str) -> dict:
    ctx, compute = MEM.get(name, (40, 100))
    return {"devices": [{"name": "GPU0", "kind": "device", "model": 1000, "context": ctx, "compute": compute}],
            "host": {"name": "Host", "kind": "host", "model": 10, "context": 0, "compute": 5}, "other": []}


def _point(run: str, name: str, ncmoe: int, tg: float, facts: dict, rng: random.Random, k: int = 5,
           n_ctx: int = 4096, spread: float = 0.005) -> Point:
    p = Point(run_id=run, build_key=KEY, engine="server", ncmoe=ncmoe, label=name, status="ok", n_ctx=n_ctx,
              n_ctx_train=NATIVE, mem_breakdown=_breakdown(name),
              detail={"observed": facts, "fit_status": "fitted",
                     "launches": [LaunchRecord(launch=i + 1, n_ctx=n_ctx, status="ok").to_json()
                                  for i in range(k)]})
    for launch in range(1, k + 1):
        c = tg * math.exp(rng.gauss(0, spread))
        p.samples += [Sample(idx=i, warmup=False, tg_tps=c * (1 + 0.002 * i), pp_tps=10 * c, launch=launch)
                      for i in range(2)]
    return p


def _new_run(store, specs: list[str], ncmoes: tuple[int, ...]) -> str:
    records = [{**parse_cli(spec).to_dict(), "build": KEY} for spec in specs]
    run_id = store.new_run("sweep", {"builds": [KEY], "backends": ["cpu"], "variants": records,
                                     "points": [{"ncmoe": n, "ngl": -1} for n in ncmoes],
                                     "model": {"ref": "m.gguf", "facts": {"n_layers": 8}}})
    store.add_build({"key": KEY, "backend": "cpu", "pin": "default", "commit": "0c1e57098"}, run_id)
    return run_id


@pytest.fixture
def run(store):
    rng = random.Random(11)
    run_id = _new_run(store, [spec for spec, *_ in VARIANTS.values()], (0, 2, 4, 6))
    for name, (_spec, tgs, facts, ctxs) in VARIANTS.items():
        for ncmoe, tg, ctx in zip((0, 2, 4, 6), tgs, ctxs, strict=True):
            store.record_point(_point(run_id, name, ncmoe, tg, {**facts, "n_ctx": ctx}, rng, n_ctx=ctx))
    return run_id


def _table(sec, title):
    return next(t for t in sec.tables if t.title == title)


def test_head_to_head_counts_wins_ties_and_losses_per_point(store, run):
    sec = matrix_section(load(store, run))
    assert sec is not None and [s.name for s in load(store, run).series] == list(VARIANTS)
    h2h = {(d["a"], d["b"]): d for d in _table(sec, "Head-to-head").data}
    d = h2h[("fa-off", "fa-on")]
    assert d["tg"] == {"wins": 0, "same": 2, "losses": 2, "not_proven": 0}   # fa-on +30 % at ncmoe 0 and 2, alike beyond
    assert d["differs_in"] == ["flash attention"]
    assert h2h[("fa-on", "q8")]["tg"]["wins"] == 4               # q8_0 KV: −15 % everywhere


def test_a_knob_that_did_not_take_effect_is_flagged_not_counted(store, run):
    sec = matrix_section(load(store, run))
    row = next(r for r in _table(sec, "Head-to-head").rows if r[0] == "fa-on vs nkvo")
    assert row[3] == row[4] == row[5] == "– (no effective difference)" and "KV offload did not take effect" in row[6]
    knob = next(d for d in _table(sec, "Per-knob effects").data if d["knob"] == "--kv-offload")
    assert knob["status"]["status"] == "not taken" and knob["tg"] == []
    nkvo = next(r for r in _table(sec, "Per-knob effects").rows if r[1] == "nkvo vs fa-on")
    assert nkvo[5] == "– (did not take effect)"
    kinds = _table(sec, "Variants").rows
    assert "KV offload: not taken" in next(r for r in kinds if r[0] == "nkvo")[4]


def test_per_knob_effects_say_where_the_effect_holds(store, run):
    sec = matrix_section(load(store, run))
    fa = next(r for r in _table(sec, "Per-knob effects").rows if r[0].startswith("flash attention"))
    assert fa[0] == "flash attention: on vs off" and fa[1] == "fa-on vs fa-off" and fa[2].startswith("took")
    assert fa[4].startswith("+30 % [") and "at ncmoe 0–2 (2 points: +30 to +30 %)" in fa[4]
    assert "same within ±5 % at ncmoe 4–6" in fa[4] and "no difference" not in fa[4]
    kv = next(r for r in _table(sec, "Per-knob effects").rows if r[0].startswith("KV cache type"))
    assert kv[4].startswith("-15 % [") and "at ncmoe 0–6 (4 points: -15 to -15 %)" in kv[4]


def test_per_knob_effects_state_the_fitted_context_per_point(store, run):
    """The largest effect of a knob can be on the context the fit gives, not on speed: the table says it, with
    values and ratio (no CI: a fit), 'native' where the fit stops, and a bound where a side sits there."""
    t = _table(matrix_section(load(store, run)), "Per-knob effects")
    assert t.columns[5] == "context (fit)" and "the fit's result" in t.note and "no CI" in t.note
    rows = {r[1]: r for r in t.rows}
    assert rows["fa-on vs fa-off"][5] == ("4,096 vs 1,024 (4.00×) at ncmoe 0; 6,144 vs 1,536 (4.00×) at ncmoe 2; "
                                          "native vs 2,048 (≥4.00×) at ncmoe 4; native vs 2,560 (≥3.20×) at ncmoe 6")
    assert rows["q8 vs fa-on"][5] == "native vs 4,096 (≥2.00×) at ncmoe 0; native vs 6,144 (≥1.33×) at ncmoe 2; " \
                                     "both native at ncmoe 4–6"
    fa = next(d for d in t.data if d["other"] == "fa-on" and d["base"] == "fa-off")
    assert fa["context"][0] == {"point": "ncmoe 0", "a": [1024, 1024], "b": [4096, 4096]}


def test_took_effect_reads_in_the_order_the_row_names_the_pair(store, run):
    fa = next(r for r in _table(matrix_section(load(store, run)), "Per-knob effects").rows if r[1] == "fa-on vs fa-off")
    assert fa[0] == "flash attention: on vs off" and fa[2] == "took (flash_attn enabled vs flash_attn disabled)"


def test_context_gained_vs_speed_lost_covers_any_knob_that_changes_the_context(store, run):
    t = _table(matrix_section(load(store, run)), "Context gained vs speed lost")
    by = {(r[1], r[2]): r for r in t.rows}
    assert {w for w, _p in by} == {"fa-on vs fa-off", "q8 vs fa-on"}      # nkvo: not taken, same context
    fa0 = by[("fa-on vs fa-off", "ncmoe 0")]
    assert fa0[0] == "flash attention: on vs off" and fa0[3] == "1,024 → 4,096 (4.00×)" and fa0[4] == "2.0 → 2.0"
    assert fa0[5] == "10 / 900 → 40 / 100" and fa0[6] == "5 → 5"
    assert fa0[8].startswith("1.30× [") and fa0[8].endswith("differs")
    assert by[("fa-on vs fa-off", "ncmoe 4")][3] == "2,048 → native (≥4.00×)"
    assert by[("fa-on vs fa-off", "ncmoe 4")][8].endswith(("same", "inconclusive"))
    q8 = by[("q8 vs fa-on", "ncmoe 0")]
    assert q8[3] == "4,096 → native (≥2.00×)" and q8[4] == "2.0 → 1.0625" and q8[8].endswith("differs")
    assert by[("q8 vs fa-on", "ncmoe 6")][3] == "native → native (both at the cap)"


def test_head_to_head_states_the_fitted_context(store, run):
    sec = matrix_section(load(store, run))
    h2h = {(d["a"], d["b"]): d for d in _table(sec, "Head-to-head").data}
    assert h2h[("fa-off", "fa-on")]["context"] == {"larger": 0, "same": 0, "smaller": 4}
    assert h2h[("fa-on", "q8")]["context"] == {"larger": 0, "same": 2, "smaller": 2}
    per = _table(sec, "Head-to-head per point")
    row = next(r for r in per.rows if r[:2] == ["fa-on / fa-off", "context (fit)"])
    assert row[2:] == ["4,096 vs 1,024 (4.00×)", "6,144 vs 1,536 (4.00×)", "native vs 2,048 (≥4.00×)",
                       "native vs 2,560 (≥3.20×)"]
    assert next(r for r in per.rows if r[:2] == ["q8 / fa-on", "context (fit)"])[5] == "both native"


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


def _fixed_point(run: str, name: str, tg: float, spread: float) -> Point:
    """Three starts at tg × (1 − spread, 1, 1 + spread): a known ratio and interval, no randomness."""
    p = Point(run_id=run, build_key=KEY, engine="server", ncmoe=0, label=name, status="ok", n_ctx=4096,
              n_ctx_train=NATIVE, detail={"observed": ON if name == "on" else {**ON, "flash_attn": "disabled"},
                                         "fit_status": "fitted",
                                         "launches": [LaunchRecord(launch=i + 1, n_ctx=4096).to_json()
                                                      for i in range(3)]})
    for launch, f in enumerate((1 - spread, 1.0, 1 + spread), start=1):
        p.samples += [Sample(idx=i, warmup=False, tg_tps=tg * f, pp_tps=10 * tg * f, launch=launch) for i in range(2)]
    return p


def test_a_one_point_knob_effect_never_claims_more_than_the_head_to_head(store):
    """fa-on is 15 % faster at its one point with p ≈ 0.01: 'differs' in a family of the two knob effects alone,
    not over the matrix's 30 comparisons (four more variants, none one knob away). The per-knob table must not
    call it a difference where the head-to-head, over the matrix, calls it inconclusive."""
    fillers = [f"x{i}=cpu:-fa off -t {i} -b {64 * i}" for i in range(2, 6)]
    run_id = _new_run(store, ["off=cpu:-fa off", "on=cpu:-fa on", *fillers], (0,))
    store.record_point(_fixed_point(run_id, "off", 100.0, 0.025))
    store.record_point(_fixed_point(run_id, "on", 115.0, 0.025))
    for spec in fillers:
        store.record_point(_fixed_point(run_id, spec.split("=", 1)[0], 100.0, 0.025))
    sec = matrix_section(load(store, run_id))
    m = build_matrix(load(store, run_id), 0.05)
    assert len(m.verdicts) == 30 and len(_table(sec, "Per-knob effects").data) == 1
    j = m.verdicts[("off", "on", "tg", (0, -1))]
    assert 0.05 / 30 < j.p_differs < 0.05 / 2 and j.verdict == "inconclusive"
    # the interval printed is the one the verdict used (Holm's level): it reaches into the band, unlike the
    # unadjusted 95 % interval (whose low end clears 1.05)
    assert j.low < 1.05 < j.ratio and j.adjusted == "Holm, 30 comparisons"
    knob = _table(sec, "Per-knob effects").rows[0]
    assert knob[1] == "on vs off" and knob[4].startswith("not proven either way at ncmoe 0 (+15 % [")
    low = float(knob[4].split("[")[1].split(",")[0])
    assert low < 5            # the pooled effect's interval is Holm's too: never "[+6, …] not proven"
    assert "Holm's method over one family: the table's 2 pooled effects and the matrix's 30 comparisons" in \
        _table(sec, "Per-knob effects").note


def test_a_context_set_with_c_is_not_called_a_fit(store):
    run_id = _new_run(store, ["c4k=cpu:-c 4096", "c8k=cpu:-c 8192"], (0,))
    rng = random.Random(3)
    for name, ctx in (("c4k", 4096), ("c8k", 8192)):
        store.record_point(_point(run_id, name, 0, 100.0, {**ON, "n_ctx": ctx}, rng, n_ctx=ctx))
    sec = matrix_section(load(store, run_id))
    knob = _table(sec, "Per-knob effects").rows[0]
    assert knob[0] == "context size: 8192 vs 4096" and knob[2].startswith("took")
    assert knob[5] == "8,192 vs 4,096 (2.00×) at ncmoe 0 (set with -c in a variant, not fitted)"
    gained = _table(sec, "Context gained vs speed lost").rows[0]
    assert gained[3] == "4,096 → 8,192 (2.00×) (set with -c in a variant, not fitted)"
    assert "Not every context here is a fit: set with -c in a variant" in _table(sec, "Head-to-head per point").note
