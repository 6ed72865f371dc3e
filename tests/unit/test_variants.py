"""Variants: parsing (--variant, variants.toml), the environment allow-list, what the log shows, and whether a
knob took effect — the last two against real llama-server logs (tests/fixtures/logs)."""

from __future__ import annotations

from pathlib import Path

import pytest

from llamaforge.errors import ConfigError
from llamaforge.variants.check import check_args, check_env
from llamaforge.variants.files import choose, load_file
from llamaforge.variants.knobs import ENV_KNOBS
from llamaforge.variants.model import Variant, parse_cli
from llamaforge.variants.observe import device_facts, observe_log
from llamaforge.variants.status import one_knob_pairs
from llamaforge.variants.took import NOT_TAKEN, TOOK, UNVERIFIED, pair, single

LOGS = Path(__file__).resolve().parents[1] / "fixtures" / "logs"
LLAMA_CPP_0C1E = Path.home() / ".cache" / "llamaforge" / "test-workspace" / "vendor" / "0c1e57098"


# ---- parsing -----------------------------------------------------------------------------------

def test_a_cli_variant_splits_into_backend_pin_env_defines_and_args():
    v = parse_cli("q8=cuda@default:GGML_CUDA_DISABLE_GRAPHS=1 -DGGML_CUDA_FA_ALL_QUANTS=ON -fa on -ctk q8_0")
    assert (v.name, v.backend, v.pin) == ("q8", "cuda", "default")
    assert v.env_dict == {"GGML_CUDA_DISABLE_GRAPHS": "1"}
    assert v.defines_dict == {"GGML_CUDA_FA_ALL_QUANTS": "ON"}
    assert v.args == ("-fa", "on", "-ctk", "q8_0")
    assert parse_cli("plain=vulkan").args == () and parse_cli("plain=vulkan").pin is None


@pytest.mark.parametrize("spec, msg", [
    ("fa-on", "has no '='"),
    ("bad name=cpu:-fa on", "variant name 'bad name' is not valid"),
    ("x=CUDA:-fa on", "is not a backend"),
    ("x=cpu:on -fa", "argument 'on' does not follow an option"),
    ("x=cpu:-fa 'on", "cannot split"),
    ("x=cpu:A=1 A=2", "A is set twice"),
])
def test_a_malformed_cli_variant_is_one_line(spec, msg):
    with pytest.raises(ConfigError, match=msg):
        parse_cli(spec)


def test_variants_toml_is_read_and_checked(tmp_path):
    f = tmp_path / "variants.toml"
    f.write_text('[variants.fa-on]\nbackend = "cuda"\nargs = "-fa on"\n'
                 '[variants.nocm2]\nbackend = "vulkan"\nenv = { GGML_VK_DISABLE_COOPMAT2 = "1" }\n'
                 '[variants.faq]\nbackend = "cuda"\nargs = ["-fa", "on"]\ndefines = { GGML_CUDA_FA_ALL_QUANTS = "ON" }\n')
    got = load_file(f)
    assert list(got) == ["fa-on", "nocm2", "faq"]
    assert got["fa-on"].args == ("-fa", "on") and got["nocm2"].env_dict == {"GGML_VK_DISABLE_COOPMAT2": "1"}
    assert got["faq"].defines_dict == {"GGML_CUDA_FA_ALL_QUANTS": "ON"}


@pytest.mark.parametrize("text, msg", [
    ('[variants.a]\nbackend = "cpu"\n[variants.a]\nbackend = "cuda"\n', "not valid TOML.*give every variant its own name"),
    ('[variants.a]\nbackend = "cpu"\ncolour = "red"\n', "unknown key 'colour'"),
    ('[variants.a]\nargs = "-fa on"\n', "has no backend"),
    ('[variants.a]\nbackend = "cpu"\nargs = "X=1 -fa on"\n', "holds environment variables"),
    ('[variants.a]\nbackend = "cpu"\nenv = { X = 1 }\n', "must be a string"),
    ('[other]\nx = 1\n', "unknown top-level key 'other'"),
])
def test_a_bad_variants_file_is_one_line(tmp_path, text, msg):
    f = tmp_path / "variants.toml"
    f.write_text(text)
    with pytest.raises(ConfigError, match=msg):
        load_file(f)


def test_two_variants_of_one_name_are_refused_wherever_they_come_from(tmp_path):
    with pytest.raises(ConfigError, match="two variants are named 'a'"):
        choose(["a=cpu:-fa on", "a=cpu:-fa off"], None, None)
    f = tmp_path / "v.toml"
    f.write_text('[variants.a]\nbackend = "cpu"\n')
    with pytest.raises(ConfigError, match=r"two variants are named 'a' \(v.toml .*and --variant\)"):
        choose(["a", "a=cpu:-fa off"], f, None)
    assert [v.name for v in choose([], f, None)] == ["a"]            # the whole file
    with pytest.raises(ConfigError, match="no variant named 'b'"):
        choose(["b"], f, None)


# ---- the environment allow-list ------------------------------------------------------------------

def test_an_environment_variable_off_the_list_is_refused():
    with pytest.raises(ConfigError, match="GGML_VK_DISABLE_COOPMAT3 is not on llamaforge's list"):
        check_env(parse_cli("x=vulkan:GGML_VK_DISABLE_COOPMAT3=1"))
    with pytest.raises(ConfigError, match="GGML_CUDA_FORCE_MMQ is a CMake option.*-DGGML_CUDA_FORCE_MMQ=ON"):
        check_env(parse_cli("x=cuda:GGML_CUDA_FORCE_MMQ=1"))
    with pytest.raises(ConfigError, match="acts on vulkan builds, not cuda"):
        check_env(parse_cli("x=cuda:GGML_VK_DISABLE_F16=1"))
    check_env(parse_cli("x=vulkan:GGML_VK_DISABLE_F16=1 AMD_VULKAN_ICD=RADV"))   # a manifest: test_hostile_round3


@pytest.mark.skipif(not (LLAMA_CPP_0C1E / "ggml").is_dir(), reason="the pinned llama.cpp tree is not here")
def test_every_ggml_name_on_the_list_is_read_by_the_pinned_llama_cpp():
    """The allow-list names what llama.cpp 0c1e57098 really reads (a misspelt name would be ignored silently)."""
    text = "".join(p.read_text(errors="replace") for p in (LLAMA_CPP_0C1E / "ggml" / "src").rglob("*.c*"))
    for k in ENV_KNOBS:
        if k.name.startswith("GGML_"):
            assert f'getenv("{k.name}")' in text, k.name


def test_arguments_are_checked_against_the_probed_help():
    class B:
        key, commit = "0c1e57098-cpu-x", "0c1e57098"
        manifest = {"options": {"llama-server": ["-fa", "--flash-attn", "-ctk", "-m"], "llama-bench": ["-m", "-fa"],
                                "llama-fit-params": ["-m"]}}
        dir = Path("/nonexistent")

        def binary(self, name):
            return Path("/bin") / name

    check_args(parse_cli("x=cpu:-fa on -ctk q8_0"), B(), ["server"])
    with pytest.raises(ConfigError, match="this llama-server has no --no-mmap"):
        check_args(parse_cli("x=cpu:-fa on --no-mmap"), B(), ["server"])
    with pytest.raises(ConfigError, match="this llama-bench has no -ctk"):
        check_args(parse_cli("x=cpu:-ctk q8_0"), B(), ["server", "llama-bench"])
    with pytest.raises(ConfigError, match="--n-cpu-moe is set by the sweep itself"):
        check_args(parse_cli("x=cpu:--n-cpu-moe 3"), B(), ["server"])


# ---- knobs and pairs ----------------------------------------------------------------------------

def test_knobs_fold_aliases_and_pairs_differ_in_exactly_one():
    a, b = parse_cli("a=cpu:-fa on"), parse_cli("b=cpu:--flash-attn off")
    c, d = parse_cli("c=cpu:-fa on -nkvo"), parse_cli("d=vulkan")
    e = parse_cli("e=vulkan:GGML_VK_DISABLE_F16=1")
    f = parse_cli("f=cpu:-fa on -ctk q8_0 -ctv q8_0")
    assert a.knobs()["--flash-attn"] == "on" and c.knobs()["--kv-offload"] == "off"
    assert f.knobs()["kv-cache-type"] == "k=q8_0,v=q8_0"
    got = {(p.knob, p.base.name, p.other.name) for p in one_knob_pairs([a, b, c, d, e, f])}
    assert got == {("--flash-attn", "b", "a"), ("--kv-offload", "a", "c"), ("env:GGML_VK_DISABLE_F16", "d", "e"),
                   ("kv-cache-type", "a", "f")}


# ---- what the real log shows ---------------------------------------------------------------------

def test_the_real_log_shows_flash_attention_kv_types_and_buffers():
    on, auto, q8, nkvo = (observe_log(LOGS / f"cpu-{n}.jsonl") for n in ("fa_on", "fa_def", "ctk", "nkvo"))
    assert on["flash_attn"] == "enabled" and on["flash_attn_asked"] == "enabled"
    assert auto["flash_attn_asked"] == "auto" and auto["flash_attn"] == "enabled"   # resolved on the CPU
    assert (q8["type_k"], q8["type_v"], on["type_k"]) == ("q8_0", "q8_0", "f16")
    assert q8["kv_kib_per_token"] < on["kv_kib_per_token"]
    assert on["n_ctx"] == 4096 and on["threads"] == 1 and on["mmap"] is True
    assert nkvo["kv_buffers"] == ["CPU"] and nkvo["model_on_device"] is False


def test_a_knob_took_effect_only_where_the_log_says_so():
    on, auto, q8, nkvo = (observe_log(LOGS / f"cpu-{n}.jsonl") for n in ("fa_on", "fa_def", "ctk", "nkvo"))
    off = {**on, "flash_attn": "disabled", "flash_attn_asked": "disabled"}
    assert pair("--flash-attn", [off], [on]).status == TOOK
    s = pair("--flash-attn", [auto], [on])            # -fa on where auto already enabled it
    assert s.status == NOT_TAKEN and "flash_attn enabled in both" in s.why
    assert pair("kv-cache-type", [on], [q8]).status == TOOK
    s = pair("--kv-offload", [auto], [nkvo])          # -nkvo on a CPU build: nothing is on a device
    assert s.status == NOT_TAKEN and "nothing is on a GPU device" in s.why
    assert single("--kv-offload", "off", [nkvo]).status == NOT_TAKEN
    assert single("--flash-attn", "off", [on]).status == NOT_TAKEN        # asked off, the log says enabled
    assert single("--flash-attn", "on", [on]).status == TOOK
    assert single("--cont-batching", "off", [on]).status == UNVERIFIED
    assert single("backend", "cuda", []).status == TOOK


def test_an_environment_knob_is_judged_on_the_real_device_line():
    base, no_f16, no_cm = (device_facts((LOGS / f"lavapipe-list-devices{x}.txt").read_text())
                           for x in ("", "-disable-f16", "-disable-coopmat"))
    assert base["vulkan"][0]["matrix_cores"] == "none" and base["vulkan"][0]["fp16"] == 1
    assert base["devices"] == ["Vulkan0: llvmpipe (LLVM 15.0.6, 256 bits)"] and no_f16["vulkan"][0]["fp16"] == 0
    assert single("env:GGML_VK_DISABLE_F16", "1", [], no_f16, base).status == TOOK
    s = single("env:GGML_VK_DISABLE_COOPMAT", "1", [], no_cm, base)     # lavapipe has no coopmat to disable
    assert s.status == NOT_TAKEN and "matrix cores: none with and without it" in s.why
    assert single("env:GGML_VK_DISABLE_FUSION", "1", [], base, base).status == UNVERIFIED
    assert pair("env:GGML_VK_DISABLE_F16", [], [], base, no_f16).status == TOOK


def test_a_variant_round_trips_through_its_record():
    v = parse_cli("q8=cuda@default:GGML_CUDA_DISABLE_GRAPHS=1 -DGGML_CUDA_FA_ALL_QUANTS=ON -fa on")
    assert Variant.from_dict(v.to_dict()) == v


def test_the_24gib_example_reads_and_pairs_its_knobs():
    vs = load_file(Path(__file__).resolve().parents[2] / "examples" / "variants-24gib.toml")
    assert len(vs) == 6 and {v.backend for v in vs.values()} == {"cuda", "vulkan"}
    pairs = {(p.knob, p.base.name, p.other.name) for p in one_knob_pairs(list(vs.values()))}
    assert ("--flash-attn", "cuda-fa-off", "cuda-fa-on") in pairs and ("--flash-attn", "vk-fa-off", "vk-fa-on") in pairs
    assert ("kv-cache-type", "cuda-fa-on", "cuda-q8kv") in pairs and ("backend", "cuda-fa-on", "vk-fa-on") in pairs
    for v in vs.values():
        check_env(v)


def test_a_stored_variant_is_data_checked_again_before_it_runs():
    """A shared store's variant (``Plan.variants``) passes the same allow-lists as one given on the command
    line: an environment variable that picks code (``LD_PRELOAD``) or an argument that writes a file
    (``--slot-save-path``) is one line, not passed to llama-server."""
    from types import SimpleNamespace

    from llamaforge.errors import BenchError
    from llamaforge.variants.check import from_records

    build = SimpleNamespace(key="k1", backend="cpu")
    ok = {"name": "fa", "backend": "cpu", "build": "k1", "args": ["-fa", "on"]}
    assert from_records([ok], [build])[0].variant.args == ("-fa", "on")
    with pytest.raises(ConfigError, match="LD_PRELOAD"):
        from_records([{**ok, "env": {"LD_PRELOAD": "/tmp/x.so"}}], [build])
    with pytest.raises(BenchError, match="slot-save-path"):
        from_records([{**ok, "args": ["--slot-save-path", "/tmp/x"]}], [build])
    with pytest.raises(BenchError, match="malformed"):
        from_records([{"backend": "cpu", "build": "k1"}], [build])
