"""benchmarks/start_spread.py: one value per server start, across a sweep, its sentinels and re-runs."""

import importlib.util
import shutil
import sys
from pathlib import Path

from llamaforge.store import Point, Sample

ROOT = Path(__file__).resolve().parents[2]
_SPEC = importlib.util.spec_from_file_location("start_spread", ROOT / "benchmarks" / "start_spread.py")
spread = sys.modules["start_spread"] = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(spread)


def test_a_start_is_the_mean_of_its_measured_requests_and_warmups_do_not_count():
    p = Point("r", "k", "server", samples=[
        Sample(0, True, tg_tps=10.0, launch=1), Sample(1, False, tg_tps=100.0, launch=1),
        Sample(2, False, tg_tps=110.0, launch=1), Sample(3, False, tg_tps=160.0, launch=2)])
    q = Point("r", "k", "server", label="sentinel", samples=[Sample(0, False, tg_tps=120.0, launch=1)])
    assert spread.start_means([p, q], "tg_tps") == [105.0, 160.0, 120.0]


def test_the_committed_h200_store_gives_the_readme_s_vulkan_spread(monkeypatch, capsys, tmp_path):
    shutil.copy(ROOT / "results" / "h200" / "llamaforge.sqlite", tmp_path / "llamaforge.sqlite")   # never migrated in place
    monkeypatch.setenv("LLAMAFORGE_RESULTS", str(tmp_path))
    monkeypatch.chdir(ROOT)
    assert spread.main(["h200-24gib-k2-1201b"]) == 0
    out = capsys.readouterr().out
    assert "(+2 reproduce run(s))" in out
    vulkan = next(line for line in out.splitlines() if line.strip().startswith("Vulkan"))
    assert "7 starts, 101.1 – 162.5" in vulkan
