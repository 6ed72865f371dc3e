"""How fast this machine is, in the two kinds of work CI does: so that CI times from different VMs compare.

    python benchmarks/machine_speed.py [--rounds 3] [--json]

CI's time is mostly C++ compiles (a cold llama.cpp build) and single-threaded Python (the unit tests, the
CLI), on however many cores the VM has. A CI time alone says little when the VM changes under the project:
the 2-vCPU VMs this project ran on in December 2026 differed by ~2.5× (a cold CPU build of the default pin
took 380 s on one and 976 s on another). This prints, best of ``--rounds``:

* ``compile_s``: ``c++ -O2 -std=c++17 -c`` of a small file that includes the standard headers llama.cpp's
  sources include (parsing headers is most of a llama.cpp object's time) and instantiates a few templates;
* ``python_s``: a fixed pure-Python workload (dict, string and integer work, no imports), one core;
* the CPU model, logical cores and load average, from ``/proc/cpuinfo`` and ``os``.

``.ci/run`` writes this into ``test-artifacts/machine.json`` beside the phase times, and STATUS.md quotes it with
each CI time. It is a reference, not a target: nothing fails on it.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SOURCE = r"""
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <sstream>
#include <string>
#include <unordered_map>
#include <vector>

template <typename T> static T reduce(const std::vector<T> & v) {
    T s{};
    for (const auto & x : v) { s += x; }
    return s;
}

int work(int n) {
    std::map<std::string, std::vector<double>> m;
    std::unordered_map<int, std::string> u;
    for (int i = 0; i < n; ++i) {
        m[std::to_string(i)].push_back(std::sqrt(double(i)));
        u[i] = std::to_string(i * 7);
    }
    std::stringstream ss;
    for (auto & [k, v] : m) { ss << k << reduce(v); }
    std::vector<int> keys;
    for (auto & kv : u) { keys.push_back(kv.first); }
    std::sort(keys.begin(), keys.end(), std::greater<int>());
    return int(ss.str().size()) + int(u.size()) + keys.front();
}
"""


def _python_work() -> int:
    acc: dict[str, int] = {}
    total = 0
    for i in range(400_000):
        key = f"k{i % 5000}"
        acc[key] = acc.get(key, 0) + i
        total += len(key) * (i & 7)
    return total + sum(acc.values()) % 97


def python_seconds(rounds: int) -> float:
    best = float("inf")
    for _ in range(rounds):
        t0 = time.perf_counter()
        _python_work()
        best = min(best, time.perf_counter() - t0)
    return best


def compile_seconds(rounds: int) -> float | None:
    cxx = os.environ.get("CXX") or shutil.which("c++") or shutil.which("g++")
    if cxx is None:
        return None
    best = float("inf")
    with tempfile.TemporaryDirectory(prefix="llamaforge-speed-") as tmp:
        src = Path(tmp) / "speed.cpp"
        src.write_text(SOURCE)
        for _ in range(rounds):
            t0 = time.perf_counter()
            try:
                r = subprocess.run([cxx, "-O2", "-std=c++17", "-c", "-o", str(Path(tmp) / "speed.o"), str(src)],
                                   capture_output=True, text=True, timeout=300)
            except (OSError, subprocess.TimeoutExpired):
                return None
            if r.returncode != 0:
                return None
            best = min(best, time.perf_counter() - t0)
    return best


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def measure(rounds: int = 3) -> dict:
    return {"cpu": cpu_model(), "cores": os.cpu_count(), "load_1min": round(os.getloadavg()[0], 2),
            "compile_s": (round(c, 2) if (c := compile_seconds(rounds)) is not None else None),
            "python_s": round(python_seconds(rounds), 3), "python": platform.python_version()}


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3, help="best of this many runs of each workload (default 3)")
    ap.add_argument("--json", action="store_true", help="one JSON line instead of text")
    args = ap.parse_args(argv)
    m = measure(max(1, args.rounds))
    if args.json:
        print(json.dumps(m))
    else:
        comp = f"{m['compile_s']} s" if m["compile_s"] is not None else "no C++ compiler"
        print(f"{m['cpu']}, {m['cores']} logical cores, load {m['load_1min']}: C++ compile {comp}, "
              f"Python {m['python_s']} s (best of {args.rounds})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
