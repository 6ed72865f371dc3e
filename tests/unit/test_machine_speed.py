"""benchmarks/machine_speed.py, the machine's speed that .ci/run keeps beside the CI time."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "machine_speed.py"


def test_it_prints_one_json_line_with_the_cpu_and_a_python_time_and_no_compile_without_a_compiler(tmp_path):
    r = subprocess.run([sys.executable, str(SCRIPT), "--json", "--rounds", "1"], capture_output=True, text=True,
                       timeout=120, env={"PATH": "/usr/bin:/bin", "CXX": str(tmp_path / "no-such-c++")})
    assert r.returncode == 0, r.stderr
    m = json.loads(r.stdout)
    assert m["cpu"] and m["cores"] >= 1
    assert 0 < m["python_s"] < 60
    assert m["compile_s"] is None, "a compiler that is not there is no number, not a crash"
