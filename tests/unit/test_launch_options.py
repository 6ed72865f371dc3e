"""The sequential-starts options (``--launches auto|K``, ``--max-launches``, ``--precision``): parsed once
(bench/cli_options.py) for bench, compare, reproduce and demo, and bad values are one line through the CLI."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from llamaforge.bench.cli_options import parse_launches
from llamaforge.errors import ConfigError

SRC = Path(__file__).resolve().parents[2] / "src"


def test_auto_is_the_default_and_a_number_is_fixed():
    auto = parse_launches()
    assert auto.auto and auto.policy.min_starts == 3 and auto.policy.max_starts == 10 and auto.policy.precision == 0.05
    fixed = parse_launches("5")
    assert fixed.fixed == 5 and fixed.policy.min_starts == fixed.policy.max_starts == 5
    assert parse_launches("auto", "6", "2%").policy.max_starts == 6
    assert parse_launches("auto", None, "2%").policy.precision == pytest.approx(0.02)


@pytest.mark.parametrize("args,text", [
    (("auto", None, "0"), "--precision"),
    (("auto", "1", None), "--max-launches 1 leaves --launches auto no room"),
    (("auto", "2", None), "--max-launches 2 leaves --launches auto no room"),
    (("0", None, None), "--launches"),
    (("abc", None, None), "--launches"),
    (("3", "5", None), "--max-launches 5 only applies to --launches auto"),
    (("auto", "100000", None), "--max-launches"),
    (("auto", None, "150%"), "--precision"),
])
def test_bad_values_are_one_clear_error(args, text):
    with pytest.raises(ConfigError) as e:
        parse_launches(*args)
    assert text in e.value.message and e.value.fix


@pytest.mark.parametrize("cmd", [
    ["bench", "--model", "synth:tiny-qwen35moe", "--precision", "0"],
    ["bench", "--model", "synth:tiny-qwen35moe", "--launches", "auto", "--max-launches", "1"],
    ["compare", "--base", "default", "--launches", "auto", "--max-launches", "1"],
])
def test_bad_values_through_the_cli_are_one_line_before_anything_runs(cmd, tmp_path):
    env = {**os.environ, "PYTHONPATH": str(SRC), "LLAMAFORGE_RESULTS": str(tmp_path / "r"),
           "LLAMAFORGE_WORKSPACE": str(tmp_path)}
    r = subprocess.run([sys.executable, "-m", "llamaforge", *cmd], capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode != 0
    err = r.stderr.strip().splitlines()
    assert len(err) == 1 and "Traceback" not in r.stderr and ("--precision" in err[0] or "--max-launches" in err[0])
    assert not (tmp_path / "r" / "llamaforge.sqlite").exists()
