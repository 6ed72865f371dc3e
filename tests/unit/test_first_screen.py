"""What a newcomer reads in the report of ``inv demo`` (issue 40, "the first screen a person reads").

A demo on a machine without a GPU measures CPU against lavapipe Vulkan (about 115× slower) at ncmoe 0, n/2
and n with ``--launches auto`` up to 4 starts. Its report printed the ratio as "0.01–0.01×", called one of
three CPU points "best tg" although their intervals overlapped, and put "K=4: unresolved" in one table and
"differs" in another with nothing joining them. These runs are built like that demo, in a real store.
"""

from __future__ import annotations

import random
import re

import run_fake

from llamaforge.records import BuildManifest, ModelSection, PointDetail, PointSpec, RunPlan
from llamaforge.report import ReportPaths, write_report
from llamaforge.store import Point, Sample, Store

POINTS = (0, 4, 8)


def _samples(rng: random.Random, tg: float, spread: float, starts: int) -> list[Sample]:
    out = []
    for launch in range(1, starts + 1):
        level = tg * rng.uniform(1 - spread, 1 + spread)
        out.append(Sample(0, True, "", 192, 1.0, tg * 5, 16, 1.0, tg / 2, launch=launch))   # warm-up, ignored
        out += [Sample(i, False, "", 192, 1.0, level * 9 * rng.uniform(0.995, 1.005), 16, 1.0,
                       level * rng.uniform(0.995, 1.005), launch=launch) for i in range(1, 4)]
    return out


def _run(tmp_path, tg: dict[str, tuple[float, ...]], **kw) -> str:
    return _report(tmp_path, tg, **kw).md.read_text()


def _report(tmp_path, tg: dict[str, tuple[float, ...]], *, spread: dict[str, float], unresolved: tuple[str, ...] = (),
            starts: int = 4) -> ReportPaths:
    """The Markdown report of a demo-like run: ``tg[backend]`` per point of :data:`POINTS`; the backends in
    ``unresolved`` stopped unresolved at K = ``starts`` (``--launches auto`` at its maximum)."""
    store = Store(tmp_path / "s.sqlite")
    plan = RunPlan(model=ModelSection(ref="synth:tiny-qwen35moe", path="/m/t.gguf", facts=run_fake.FACTS),
                   backends=list(tg), points=[PointSpec(n) for n in POINTS], repeats=3, launches=3,
                   prompt_tokens=192, n_predict=16, sequential={"max_launches": starts, "precision": 0.05})
    run_id = store.new_run("sweep", plan, command="llamaforge demo", env=run_fake.ENV, name="demo")
    rng = random.Random(40)
    for b, levels in tg.items():
        key = f"{b}-0c1e570-abcd"
        store.add_build(BuildManifest(key, b, "dev", "0c1e57098" + "0" * 31).to_json(), run_id)
        for n, level in zip(POINTS, levels, strict=True):
            p = Point(run_id, key, "server", ncmoe=n, n_ctx_train=run_fake.NATIVE, prompt_tokens=192, n_predict=16)
            p.n_ctx = run_fake.NATIVE
            p.samples = _samples(rng, level, spread[b], starts)
            stop = {"k": starts, "status": "resolved", "reason": f"±1.0% at {starts} starts (precision ±5%)"}
            if b in unresolved:
                stop = {"k": starts, "status": "unresolved", "reason": f"unresolved at the maximum of {starts} starts: "
                        "±7.9% is wider than the precision ±5%; between-start spread 5%"}
            p.detail = PointDetail.from_json({"launches": run_fake._launch_records(n, starts), "sequential": stop})
            store.record_point(p)
    store.set_run_status(run_id, "done")
    try:
        return write_report(store, run_id, tmp_path / "out")
    finally:
        store.close()


def _section(md: str, head: str, end: str) -> str:
    return md[md.index(head):md.index(end)]


def _row(md: str, start: str) -> list[str]:
    line = next(ln for ln in md.splitlines() if ln.startswith(start))
    return [c.strip().replace("\\[", "[").replace("\\]", "]") for c in line.strip("|").split("|")]


def test_the_lavapipe_ratio_reads_cpu_n_times_faster_not_a_hundredth(tmp_path):
    md = _run(tmp_path, {"cpu": (100.0, 101.0, 102.0), "vulkan": (0.87, 0.88, 0.89)},
              spread={"cpu": 0.01, "vulkan": 0.01})
    head = _section(md, "## Headline", "## Summary")
    assert "0.01" not in head and "0.01" not in _section(md, "### Ratios", "## Sweet spots")
    cell = _row(head, "| Vulkan / CPU | generation t/s")[4]
    assert re.fullmatch(r"CPU 11\d(?:\.\d)?–11\d(?:\.\d)?× faster over the points; at ncmoe 0: CPU 11\d× faster \[\d+, \d+\] differs",
                        cell), cell


def test_differs_but_unresolved_is_one_sentence_with_the_conservative_end(tmp_path):
    md = _run(tmp_path, {"cpu": (100.0, 101.0, 102.0), "vulkan": (0.87, 0.88, 0.89)},
              spread={"cpu": 0.08, "vulkan": 0.01}, unresolved=("cpu",))
    cell = _row(_section(md, "## Headline", "## Summary"), "| Vulkan / CPU | generation t/s")[4]
    m = re.search(r"at ncmoe 0: CPU (\d+)× faster \[(\d+), (\d+)\]: differs \(CPU faster at least (\d+)×\); "
                  r"not resolved to ±5 % at K=4$", cell)
    assert m, cell
    assert m.group(4) == m.group(2)          # "at least" is the interval's conservative end, as printed
    ratios = _section(md, "### Ratios", "## Sweet spots")
    assert "; not resolved to ±5 % at K=4" in _row(ratios, "| all layers on the device (ncmoe 0)")[5]
    stopped = _row(_section(md, "## Replication", "## Failed points"), "| CPU | 0 |")[7]
    assert stopped == "K=4: unresolved at the maximum of 4 starts: ±7.9% is wider than the precision ±5%; " \
                      "between-start spread 5%"


def test_the_sweet_spot_names_one_point_only_when_the_judge_separates_it(tmp_path):
    md = _run(tmp_path, {"cpu": (100.0, 80.0, 60.0)}, spread={"cpu": 0.01})
    cell = _row(_section(md, "## Sweet spots", "## Anomalies"), "| CPU |")[2]
    assert re.fullmatch(r"N=0: tg (?:99|100)\.\d \[[\d.]+, [\d.]+\] \(4×3\), faster than the runner-up N=4 by more than 5 %",
                        cell), cell
    assert _row(_section(md, "## Summary", "## Sweet spots"), "| CPU | best tg at native context")[2] == "0"


def test_points_within_the_margin_are_named_as_a_tie_not_a_best(tmp_path):
    md = _run(tmp_path, {"cpu": (100.0, 100.5, 101.0)}, spread={"cpu": 0.005})
    cell = _row(_section(md, "## Sweet spots", "## Anomalies"), "| CPU |")[2]
    assert re.fullmatch(r"N=0, N=4 and N=8: same within ±5 % \(fastest centre N=8: tg 10\d\.\d \[[\d.]+, [\d.]+\] "
                        r"\(4×3\)\)", cell), cell
    summary = _section(md, "## Summary", "## Sweet spots")
    assert "best tg" not in summary
    assert _row(summary, "| CPU | fastest tg centre at native context (no single best: see Sweet spots)")[2] == "8"


def test_points_the_judge_cannot_tell_apart_are_not_called_a_tie(tmp_path):
    md = _run(tmp_path, {"cpu": (100.0, 103.0, 104.0)}, spread={"cpu": 0.10}, starts=3)
    cell = _row(_section(md, "## Sweet spots", "## Anomalies"), "| CPU |")[2]
    assert cell.startswith("no single best: ") and "are not told apart within ±5 % (fastest centre N=" in cell, cell
    assert "tie within" not in cell


def test_the_demo_prints_the_headline_and_the_sweet_spots_in_the_reports_words(tmp_path):
    rp = _report(tmp_path, {"cpu": (100.0, 100.5, 101.0), "vulkan": (0.87, 0.88, 0.89)},
                 spread={"cpu": 0.005, "vulkan": 0.005})
    lines = rp.summary
    assert len(lines) == 4, lines
    assert re.fullmatch(r"Vulkan / CPU generation t/s: CPU generates faster than Vulkan at 3/3 points \(judged "
                        r"differs\), every start faster at 3 \(3 differs\); CPU 11\d(?:\.\d)?–11\d(?:\.\d)?× faster over the points; at ncmoe 0: "
                        r"CPU 11\d× faster \[\d+, \d+\] differs", lines[0]), lines[0]
    assert lines[3].startswith("sweet spot, CPU: N=0, N=4 and N=8: same within ±5 % (fastest centre N="), lines[3]
    md = rp.md.read_text()
    assert all(line.split(": ", 1)[1].split(" (")[0] in md.replace("\\[", "[").replace("\\]", "]") for line in lines)
