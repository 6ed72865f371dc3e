"""Bad numbers and crafted files give one clear line, not a traceback (through the real CLI):
non-numeric options, huge --ncmoe/--ngl ranges (refused with the valid range, before anything is
expanded), and GGUFs with general.alignment=0 or a string where a count belongs (written with the
gguf package)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from models_fake import tiny_moe_gguf

from llamaforge.bench.plan import make_points
from llamaforge.errors import BenchError, ModelError
from llamaforge.models.gguf_info import model_facts


def _gguf(path: Path, *, alignment: int | None = None, block_count: int | str = 4) -> Path:
    return tiny_moe_gguf(path, block_count=block_count, context_length=4096, alignment=alignment)


def _cli(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    (tmp_path / "pins.toml").write_text('default = "d"\n[pins.d]\ncommit = "0c1e57098"\nsources = ["git"]\n')
    env = {**os.environ, "LLAMAFORGE_WORKSPACE": str(tmp_path), "LLAMAFORGE_RESULTS": str(tmp_path / "results"),
           "COLUMNS": "400"}
    env.pop("LLAMAFORGE_DEBUG", None)
    return subprocess.run([sys.executable, "-m", "llamaforge", *args], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=120)


def _one_line(r: subprocess.CompletedProcess, *needles: str) -> None:
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert "Traceback" not in r.stderr and "Error:" not in r.stderr.replace("error:", "")
    err = " ".join(r.stderr.split())
    assert err.startswith("error:") and "fix:" in err
    for n in needles:
        assert n in err, err


@pytest.mark.parametrize("option,value", [("--repeats", "abc"), ("--load-timeout", "ten"),
                                          ("--vram-budget", "lots"), ("--vram-budget", "nan")])
def test_non_numeric_bench_options(tmp_path, option, value):
    model = _gguf(tmp_path / "m.gguf")
    _one_line(_cli(tmp_path, "bench", "--model", str(model), option, value), option, value)


@pytest.mark.parametrize("value,what,kw,needle", [("-5", "--request-timeout", {"positive": True}, "> 0"),
                                                  ("inf", "--load-timeout", {"positive": True}, "> 0"),
                                                  ("0", "--vram-budget", {"positive": True}, "> 0")])
def test_as_float_refuses_with_the_fix(value, what, kw, needle):
    from llamaforge.commands._common import as_float
    from llamaforge.errors import ConfigError

    with pytest.raises(ConfigError) as ei:
        as_float(value, what, **kw)
    assert what in ei.value.message and needle in (ei.value.fix or "")


@pytest.mark.parametrize("value,kw", [("1.5", {}), ("x", {}), ("0", {"minimum": 1}), ("99999", {"maximum": 10})])
def test_as_int_refuses_with_the_fix(value, kw):
    from llamaforge.commands._common import as_int
    from llamaforge.errors import ConfigError

    with pytest.raises(ConfigError, match="--repeats"):
        as_int(value, "--repeats", **kw)


@pytest.mark.parametrize("option,value,valid", [("--ncmoe", "0:100000000", "0..4"),
                                                ("--ngl", "0:100000000", "0..999")])
def test_huge_ranges_are_refused_with_the_valid_range(tmp_path, option, value, valid):
    model = _gguf(tmp_path / "m.gguf")
    _one_line(_cli(tmp_path, "bench", "--model", str(model), option, value), option, valid)


def test_huge_ranges_are_checked_before_they_are_expanded():
    with pytest.raises(BenchError, match="0..999"):
        make_points("0", "0:" + "9" * 30, n_layers=4)
    with pytest.raises(BenchError, match="at most 4096 values"):
        make_points("0:100000", n_layers=None)


@pytest.mark.parametrize("kw,needle", [({"alignment": 0}, "general.alignment is 0"),
                                       ({"alignment": 48}, "general.alignment is 48"),
                                       ({"block_count": "four"}, "qwen3moe.block_count is 'four'")])
def test_crafted_ggufs(tmp_path, kw, needle):
    model = _gguf(tmp_path / "crafted.gguf", **kw)
    with pytest.raises(ModelError, match=needle):
        model_facts(model)
    _one_line(_cli(tmp_path, "model.info", str(model)), needle)
    _one_line(_cli(tmp_path, "bench", "--model", str(model)), needle)


def test_a_well_formed_gguf_still_reads(tmp_path):
    f = model_facts(_gguf(tmp_path / "ok.gguf"))
    assert f.n_layers == 4 and f.n_experts == 4


@pytest.mark.parametrize("cmd", [["report", "nosuchrun"], ["reproduce", "nosuchrun"]])
def test_min_effect_takes_a_percentage_on_the_command_line(tmp_path, cmd):
    """``--min-effect 5%`` (as the help says) reaches the command: it fails on the unknown run, not on the value;
    a float default made Invoke refuse every percentage as "not a whole number"."""
    r = _cli(tmp_path, *cmd, "--min-effect", "5%")
    assert r.returncode != 0 and "--min-effect" not in r.stderr and "whole number" not in r.stderr, r.stderr
    if cmd[0] == "reproduce":   # it reads the value first: a bare number >= 1 stays refused as ambiguous
        r = _cli(tmp_path, *cmd, "--min-effect", "5")
        assert r.returncode != 0 and "--min-effect" in r.stderr, r.stderr
