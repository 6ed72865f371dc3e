"""Version-aware arguments: options read from ``--help``, command lines built from what a binary supports."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

from fakes import FakeBuild
from llamaforge.bench.engines.fit import fit_params
from llamaforge.bench.engines.llamabench import bench_args, samples_from
from llamaforge.bench.engines.server import fit_status_of, server_args
from llamaforge.bench.plan import FitOptions, Plan, PointSpec, Timeouts, make_plan
from llamaforge.bench.sweep import measure_point
from llamaforge.errors import BuildError
from llamaforge.llamacpp.llamabench import parse_results
from llamaforge.llamacpp.options import (
    BinaryOptions,
    build_options,
    ncmoe_overrides,
    parse_help,
    probe_binary,
)

FAKE = Path(__file__).with_name("bench_fake_server.py")

# excerpts in the exact layouts of llama.cpp's common_arg::to_string() and llama-bench's print_usage()
SERVER_HELP_NEW = """\
----- common params -----

-h,    --help, --usage                  print usage and exit
-m,    --model FNAME                    model path to load
-c,    --ctx-size N                     size of the prompt context (default: 0, 0 = loaded from model)
-ot,   --override-tensor <tensor name pattern>=<buffer type>,...
                                        override tensor buffer type
-ncmoe, --n-cpu-moe N                   keep the Mixture of Experts (MoE) weights of the first N layers in
                                        the CPU
-ncffn, --n-cpu-ffn N                   keep the dense FFN weights of the first N layers in the CPU
                                        (dense models; for MoE expert weights use --n-cpu-moe)
-fit,  --fit [on|off]                   whether to adjust unset arguments to fit in device memory
-fitt, --fit-target MiB0,MiB1,MiB2,...  target margin per device for --fit
-np,   --parallel N                     number of server slots (default: -1)
--log-jsonl                             log as JSON lines
"""
# a llama-server from before -ncmoe and --fit (mid 2025): -ot exists, -ncmoe is only *mentioned*
SERVER_HELP_OLD = """\
-h,    --help, --usage                  print usage and exit
-m,    --model FNAME                    model path to load
-c,    --ctx-size N                     size of the prompt context (default: 4096, 0 = loaded from model)
-ot,   --override-tensor <tensor name pattern>=<buffer type>,...
                                        override tensor buffer type (newer versions add --n-cpu-moe)
-np,   --parallel N                     number of parallel sequences to decode (default: 1)
-t,    --threads N                      number of threads to use during generation
"""
BENCH_HELP_OLD = """\
usage: llama-bench [options]

options:
  -h, --help
  -r, --repetitions <n>                       number of times to repeat each test (default: 5)
  -o, --output <csv|json|jsonl|md|sql>        output format printed to stdout (default: md)

test parameters:
  -m, --model <filename>                      (default: models/7B/ggml-model-q4_0.gguf)
  -p, --n-prompt <n>                          (default: 512)
  -n, --n-gen <n>                             (default: 128)
  -ngl, --n-gpu-layers <n>                    (default: 99)
  -ot --override-tensor <tensor name pattern>=<buffer type>;...
                                              (default: disabled)
  -t, --threads <n>                           (default: 2)
"""


def _build(tmp_path: Path, server: str, bench: str, fit: str | None, key: str = "old-cpu") -> FakeBuild:
    opts = {"llama-server": parse_help(server), "llama-bench": parse_help(bench),
            "llama-fit-params": parse_help(fit) if fit is not None else None}
    return FakeBuild(key, tmp_path, manifest={"options": opts})


def _plan(**kw) -> Plan:
    base = dict(model_ref="m.gguf", model_path=Path("/m.gguf"), model_facts={"n_layers": 8},
                points=[PointSpec(0)], repeats=2, prompt_tokens=64, n_predict=8)
    base.update(kw)
    return make_plan(**base)


def test_help_options_are_the_names_at_the_start_of_option_lines():
    new = parse_help(SERVER_HELP_NEW)
    assert {"-m", "--model", "-ncmoe", "--n-cpu-moe", "-ot", "--override-tensor", "-fit", "--fit",
            "-fitt", "--fit-target", "--log-jsonl", "-h", "--help", "--usage"} <= set(new)
    old = parse_help(SERVER_HELP_OLD)
    assert "--n-cpu-moe" not in old and "--fit" not in old   # mentioned in a description only
    assert {"-ot", "--override-tensor", "-c"} <= set(old)
    bench = parse_help(BENCH_HELP_OLD)
    assert {"-ot", "--override-tensor", "-p", "-n", "-r", "-o"} <= set(bench) and "--n-cpu-moe" not in bench


def test_ncmoe_equivalent_is_llama_cpps_own_per_layer_expert_pattern():
    ot = ncmoe_overrides(3)
    assert ot == [rf"blk\.{i}\.ffn_(up|down|gate|gate_up)_(ch|)exps=CPU" for i in range(3)]
    pats = [re.compile(o.rsplit("=", 1)[0]) for o in ncmoe_overrides(2)]

    def on_cpu(name: str) -> bool:   # llama.cpp matches with std::regex_search
        return any(p.search(name) for p in pats)

    assert on_cpu("blk.0.ffn_up_exps.weight") and on_cpu("blk.1.ffn_down_exps.weight")
    assert on_cpu("blk.1.ffn_gate_up_exps.weight") and on_cpu("blk.0.ffn_gate_chexps.weight")
    assert not on_cpu("blk.2.ffn_up_exps.weight") and not on_cpu("blk.10.ffn_up_exps.weight")
    assert not on_cpu("blk.0.ffn_up_shexp.weight") and not on_cpu("blk.0.attn_q.weight")
    assert ncmoe_overrides(0) == []


def test_argv_for_a_binary_without_fit_target_and_without_ncmoe(tmp_path):
    """The acceptance test: an older llama.cpp (no -ncmoe, no --fit/-fitt, no llama-fit-params)."""
    b = _build(tmp_path, SERVER_HELP_OLD, BENCH_HELP_OLD, None)
    plan = _plan(fit=FitOptions(fitt_mib=512))
    args = server_args(b, Path("/m.gguf"), PointSpec(2), plan)
    assert "--n-cpu-moe" not in args and "-ncmoe" not in args
    assert "--fit-target" not in args and "-fitt" not in args
    ot = args[args.index("--override-tensor") + 1]
    assert ot.split(",") == ncmoe_overrides(2)
    assert "--log-jsonl" not in args and "--no-mmproj" not in args       # not in this binary's help
    assert "-c" not in args and fit_status_of(b, plan) == "unsupported"   # llama.cpp's default context

    fixed = _plan(ctx=4096)
    args = server_args(b, Path("/m.gguf"), PointSpec(0), fixed)
    assert args[args.index("-c") + 1] == "4096" and "--override-tensor" not in args
    assert fit_status_of(b, fixed) == "fixed"

    bargs = bench_args(b, Path("/m.gguf"), PointSpec(3), plan)
    assert "--n-cpu-moe" not in bargs
    assert bargs[bargs.index("--override-tensor") + 1].split(";") == ncmoe_overrides(3)   # llama-bench: ';'
    assert "--override-tensor" not in bench_args(b, Path("/m.gguf"), PointSpec(0), plan)

    fit = fit_params(b, Path("/m.gguf"), PointSpec(2))
    assert not fit.ok and "no llama-fit-params" in fit.output


def test_argv_for_a_current_binary_uses_ncmoe_and_fit_target(tmp_path):
    b = _build(tmp_path, SERVER_HELP_NEW, BENCH_HELP_OLD + "  -ncmoe, --n-cpu-moe <n>   (default: 0)\n",
               SERVER_HELP_NEW, key="new-cpu")
    plan = _plan(fit=FitOptions(fitt_mib=512))
    args = server_args(b, Path("/m.gguf"), PointSpec(2), plan)
    assert args[args.index("--n-cpu-moe") + 1] == "2" and "--override-tensor" not in args
    assert args[args.index("--fit-target") + 1] == "512" and "--log-jsonl" in args
    assert fit_status_of(b, plan) == "fitted"
    bargs = bench_args(b, Path("/m.gguf"), PointSpec(2), plan)
    assert bargs[bargs.index("--n-cpu-moe") + 1] == "2"


def test_a_binary_with_neither_ncmoe_nor_ot_fails_the_point_with_the_fix(tmp_path):
    from llamaforge.llamacpp.server import PointFailure

    ancient = "-m,    --model FNAME    model path\n-c,    --ctx-size N    context\n"
    b = _build(tmp_path, ancient, ancient, None)
    with pytest.raises(PointFailure) as e:
        server_args(b, Path("/m.gguf"), PointSpec(1), _plan())
    assert e.value.cls == "error" and "neither -ncmoe nor -ot" in e.value.detail and "pin" in e.value.detail
    assert server_args(b, Path("/m.gguf"), PointSpec(0), _plan())   # ncmoe 0 needs neither
    with pytest.raises(BuildError):
        BinaryOptions.from_dict({"llama-server": []}).ncmoe_args("llama-server", 1)


def _script(path: Path, body: str) -> Path:
    path.write_text(f"#!{sys.executable}\n{body}")
    path.chmod(0o755)
    return path


def test_a_help_that_cannot_be_parsed_is_one_clear_error(tmp_path):
    exe = _script(tmp_path / "llama-server", "print('Segmentation fault (core dumped)')\nraise SystemExit(139)\n")
    with pytest.raises(BuildError) as e:
        probe_binary(exe)
    msg = e.value.message
    assert "cannot read the options of llama-server" in msg and "Segmentation fault" in msg and "139" in msg
    assert "--help" in (e.value.fix or "")


def test_options_are_probed_once_and_added_to_an_old_manifest(tmp_path):
    for name in ("llama-server", "llama-bench"):
        _script(tmp_path / name, "import sys\nprint('-m, --model F\\n-ncmoe, --n-cpu-moe N')\n")
    manifest = {"key": "k1", "status": "ok"}
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    b = FakeBuild("k1", tmp_path, manifest=manifest)
    opts = build_options(b)
    assert opts.server_ncmoe and opts.bench_ncmoe and not opts.has_fit_params and not opts.server_fit
    on_disk = json.loads((tmp_path / "manifest.json").read_text())
    assert on_disk["options"]["llama-fit-params"] is None and "--n-cpu-moe" in on_disk["options"]["llama-server"]
    (tmp_path / "llama-server").unlink()        # now read from the manifest, not probed again
    assert build_options(FakeBuild("k1", tmp_path, manifest=on_disk)).server_ncmoe


def test_llama_bench_results_are_read_by_key_tolerating_older_fields():
    text = "\n".join([
        "not json",
        json.dumps({"n_prompt": 64, "n_gen": 0, "samples_ts": [100.0, 110.0], "samples_ns": [640000000, 581818181],
                    "build_commit": "abc", "build_number": 7}),
        # older: no samples_ts, no n_depth
        json.dumps({"n_prompt": 0, "n_gen": 16, "samples_ns": [200000000, 160000000]}),
        # oldest: only the average
        json.dumps({"n_prompt": 32, "n_gen": 0, "avg_ts": 50.0, "stddev_ts": 1.0}),
        json.dumps({"unrelated": True}),
    ])
    res = parse_results(text)
    assert len(res) == 3
    s = samples_from(res)
    assert [x.pp_tps for x in s if x.test == "pp64"] == [100.0, 110.0]
    tg = [x for x in s if x.test == "tg16"]
    assert [round(x.tg_tps, 6) for x in tg] == [80.0, 100.0] and tg[0].raw["sample_from"] == "samples_ns"
    avg = [x for x in s if x.test == "pp32"]
    assert len(avg) == 1 and avg[0].pp_tps == 50.0 and avg[0].raw["sample_from"] == "avg_ts"
    assert avg[0].prompt_ms is None


@pytest.mark.parametrize("with_fit_params", [True, False])
def test_fit_refused_by_the_server_is_detected_and_rerun_with_fitted_context(tmp_path, store, with_fit_params):
    d = tmp_path / "bin"
    d.mkdir()
    _script(d / "llama-server", FAKE.read_text())
    if with_fit_params:
        _script(d / "llama-fit-params", "import sys\nif '--help' in sys.argv:\n    print('-m, --model F\\n"
                "-ncmoe, --n-cpu-moe N\\n-fitt, --fit-target M')\nelse:\n    print('-c 4096 -ngl -1')\n")
    b = FakeBuild("refuse", d, mode="fit-refused")
    run = store.new_run("sweep", {})
    p = measure_point(b, Path("/m.gguf"), PointSpec(2), _plan(timeouts=Timeouts(20, 20)), store, run)
    assert p.status == "ok", p.log_tail
    assert "tensor_buft_overrides already set by user" in p.detail.fit_refused
    if with_fit_params:
        assert p.detail.fit_status == "refused" and p.detail.fit["n_ctx"] == 4096
        assert p.command[p.command.index("-c") + 1] == "4096" and p.n_ctx == 4096
        assert list(d.parent.rglob("*.unfitted.log")) or list((store.path.parent / "logs").rglob("*.unfitted.log"))
    else:
        assert p.detail.fit_status == "refused-unfitted" and "-c" not in p.command and p.n_ctx == 8192
    stored = store.points(run)[0]
    assert stored.detail.fit_status == p.detail.fit_status


def test_the_report_says_how_contexts_were_chosen_when_not_fitted(tmp_path):
    import run_fake

    from llamaforge.report.contents import build_sections
    from llamaforge.report.data import load
    from llamaforge.store import Point, Sample

    st, run = run_fake.build(tmp_path, backends=("cpu",), points=False)
    for n, status in ((0, "unsupported"), (1, "unsupported"), (2, "refused")):
        p = Point(run, "cpu-0c1e570-abcd", "server", ncmoe=n, n_ctx=4096, detail={"fit_status": status},
                  samples=[Sample(1, False, "", 64, 1.0, 100.0, 8, 1.0, 10.0)])
        st.record_point(p)
    sections = build_sections(load(st, run), [])
    summary = next(s for s in sections if s.id == "summary")
    text = " ".join(summary.notes)
    assert "cannot fit (no --fit)" in text and "(2 of 3 points)" in text
    assert "re-run with -c from llama-fit-params (1 of 3 points)" in text
    points = next(s for s in sections if s.id.startswith("points-"))
    notes = [row[-1] for row in points.tables[0].rows]
    assert "ctx: llama.cpp default" in notes[0] and "fit refused" in notes[2]
    st.close()


def test_a_sweep_over_a_binary_with_unreadable_help_stops_before_measuring(tmp_path, store):
    from llamaforge.bench.sweep import run_sweep

    d = tmp_path / "broken"
    d.mkdir()
    for name in ("llama-server", "llama-bench"):
        _script(d / name, "print('Illegal instruction')\nraise SystemExit(132)\n")
    with pytest.raises(BuildError, match="cannot read the options of llama-server"):
        run_sweep(_plan(), [FakeBuild("broken", d)], store, progress=False)
    assert store.list_runs() == []
