"""write_report on a store populated with a realistic fake sweep (see run_fake.py)."""

from __future__ import annotations

import dataclasses
import json
import math
import re
import shlex
import statistics

import pytest
import run_fake
from matplotlib import image as mpimg
from scipy import stats as sps

from llamaforge.errors import StoreError
from llamaforge.records import GpuInfo
from llamaforge.report import ReportError, build_report, write_report


@pytest.fixture
def fake(tmp_path):
    store, run_id = run_fake.build(tmp_path)
    yield store, run_id, tmp_path
    store.close()


def _md_table(md: str, header_start: str) -> list[list[str]]:
    lines = md.splitlines()
    i = next(k for k, line in enumerate(lines) if line.startswith(header_start))
    out = []
    for line in lines[i + 2:]:
        if not line.startswith("|"):
            break
        out.append([re.sub(r"\\([\[\]*_])", r"\1", c.strip()) for c in line.strip("|").split(" | ")])  # md_text escapes
    return out


def _centre_ci_shape(cell: str) -> tuple[float, float, float, int, int]:
    """``590.4 [580.1, 600.9] (4×5)`` → (centre, low, high, starts K, requests per start R)."""
    m = re.fullmatch(r"([\d,.]+) \[([\d,.]+), ([\d,.]+)\] \((\d+)×(\d+)\)", cell)
    assert m, cell
    c, lo, hi = (float(m.group(i).replace(",", "")) for i in (1, 2, 3))
    return c, lo, hi, int(m.group(4)), int(m.group(5))


def _by_start(p, metric: str) -> list[float]:
    """The point's start medians, computed here from the raw samples (warm-ups left out)."""
    groups: dict[int, list[float]] = {}
    for s in p.samples:
        if not s.warmup:
            groups.setdefault(s.launch, []).append(getattr(s, metric))
    return [statistics.median(groups[k]) for k in sorted(groups)]


def _centre_and_ci(medians: list[float]) -> tuple[float, float, float]:
    """Geometric mean of the start medians with a 95 % t-interval on their logs (independent of the judge)."""
    logs = [math.log(v) for v in medians]
    m, k = statistics.fmean(logs), len(logs)
    half = float(sps.t.ppf(0.975, k - 1)) * statistics.stdev(logs) / math.sqrt(k)
    return math.exp(m), math.exp(m - half), math.exp(m + half)


def test_report_writes_markdown_html_and_one_png_per_plot(fake):
    store, run_id, tmp = fake
    rp = write_report(store, run_id, tmp / "out")
    assert rp.md.is_file() and rp.html.is_file()
    assert sorted(p.name for p in rp.pngs) == ["context.png", "memory.png", "pp.png", "tg.png", "ttft.png", "ttft_p95.png"]
    assert all(p.is_file() and p.parent == tmp / "out" for p in rp.pngs)


def test_summary_numbers_in_markdown_equal_the_stores_starts(fake):
    store, run_id, tmp = fake
    md = write_report(store, run_id, tmp / "out").md.read_text()
    rows = _md_table(md, "| series | point |")
    by = {(r[0], r[1]): r for r in rows}
    points = {(p.build_key.split("-")[0], p.ncmoe): p for p in store.points(run_id)}
    first = by[("Vulkan", "first ncmoe with native context")]
    assert first[2] == "5" and first[3] == f"{run_fake.NATIVE:,}"
    p = points[("vulkan", 5)]
    for col, metric in ((6, "pp_tps"), (7, "tg_tps")):
        centre, lo, hi, k, r = _centre_ci_shape(first[col])
        assert (k, r) == (4, 5)  # 4 server starts of 5 requests: the warm-ups are not counted
        want = _centre_and_ci(_by_start(p, metric))
        assert (centre, lo, hi) == pytest.approx(tuple(round(x, 1) for x in want), abs=0.051)
    assert by[("Vulkan", "all layers on the device (ncmoe 0)")][3] == "failed: oom"
    cpu0 = by[("CPU", "all layers on the device (ncmoe 0)")]
    want0 = _centre_and_ci(_by_start(points[("cpu", 0)], "tg_tps"))[0]
    assert _centre_ci_shape(cpu0[7])[0] == pytest.approx(round(want0, 1), abs=0.051)


def test_points_table_data_match_every_stored_point(fake):
    store, run_id, tmp = fake
    _, sections = build_report(store, run_id, tmp / "out")
    tables = [t for s in sections if s.title.startswith("Points:") for t in s.tables]
    data = {(d["series"], d["ncmoe"]): d for t in tables for d in t.data}
    assert len(data) == 18
    for p in store.points(run_id):
        d = data[("Vulkan" if p.build_key.startswith("vulkan") else "CPU", p.ncmoe)]
        assert d["ok"] == (p.status == "ok")
        assert d["n_ctx"] == p.n_ctx and d["rss_mib"] == p.rss_peak_mib
        if p.mem_breakdown:
            dev = p.mem_breakdown["devices"][0]
            assert d["gpu_mem"] == {k: dev[k] for k in ("model", "context", "compute")}
        if p.status == "ok":
            for m in ("tg", "pp"):
                medians = _by_start(p, f"{m}_tps")
                assert d[m]["starts"] == pytest.approx(medians) and (d[m]["k"], d[m]["kind"]) == (4, "ci")
                assert (d[m]["centre"], d[m]["low"], d[m]["high"]) == pytest.approx(_centre_and_ci(medians))
        else:
            assert d["tg"] is None


def test_plots_are_not_blank(fake):
    store, run_id, tmp = fake
    for png in write_report(store, run_id, tmp / "out").pngs:
        img = mpimg.imread(png)
        assert img.shape[0] > 200 and img.shape[1] > 200
        assert float(img[..., :3].var()) > 1e-3, f"{png.name} looks blank"


def test_ratios_follow_the_fixed_backend_order_with_the_judges_verdicts(fake):
    store, run_id, tmp = fake
    md = write_report(store, run_id, tmp / "out").md.read_text()
    rows = _md_table(md, "| scenario | ratio |")
    assert rows and all(r[1] == "Vulkan/CPU" for r in rows)
    first = next(r for r in rows if r[0] == "first ncmoe with native context")
    # Vulkan tg ~40 vs CPU ~20: beyond 2× a ratio is said as who is how many times faster
    m = re.fullmatch(r"Vulkan (2\.\d\d)× faster \[(\d\.\d\d), (\d\.\d\d)\] differs", first[5])
    assert m, first[5]
    assert 1.05 < float(m.group(2)) <= float(m.group(1)) <= float(m.group(3))   # the whole CI clears +5 %
    assert first[6] == "4×5 / 4×5"


def test_two_start_points_show_the_range_of_starts_and_no_confidence_interval(tmp_path):
    store, run_id = run_fake.build(tmp_path, launches=2)
    md = write_report(store, run_id, tmp_path / "out").md.read_text()
    first = next(r for r in _md_table(md, "| scenario | ratio |") if r[0] == "first ncmoe with native context")
    assert re.fullmatch(r"Vulkan 2\.\d\d× faster \(starts \d\.\d\d–\d\.\d\d\) differs\*", first[5]), first[5]
    summ = {(r[0], r[1]): r for r in _md_table(md, "| series | point |")}
    assert re.fullmatch(r"[\d.]+ \(range [\d.]+–[\d.]+, 2×5\)", summ[("Vulkan", "first ncmoe with native context")][7])
    assert "p=" not in md and "assuming the between-start spread measured for" in md


def test_vulkan_spike_is_flagged_with_the_full_attention_layer_it_moved(fake):
    store, run_id, tmp = fake
    md = write_report(store, run_id, tmp / "out").md.read_text()
    rows = _md_table(md, "| series | metric | ncmoe | beats ncmoe |")
    assert [(r[0], r[1], r[2], r[3], r[6]) for r in rows] == [("Vulkan", "generation t/s", "4", "3", "3")]
    assert re.fullmatch(r"1\.\d\d× \[1\.\d\d, 1\.\d\d\] differs", rows[0][5]) and "(4×5)" in rows[0][4]


def test_a_spike_inside_one_server_start_per_point_is_not_an_anomaly(tmp_path):
    """The same +17 % spike measured with five requests in ONE start per point: requests of one server are not
    replicates, so the report flags nothing and says why."""
    store, run_id = run_fake.build(tmp_path, launches=1)
    md = write_report(store, run_id, tmp_path / "out").md.read_text()
    assert "| series | metric | ncmoe | beats ncmoe |" not in md
    assert "> Absent: none found; points have at most 1 server start(s)" in md


def test_sweet_spots_name_first_native_and_pareto_fronts(fake):
    store, run_id, tmp = fake
    _, sections = build_report(store, run_id, tmp / "out")
    sweet = next(s for s in sections if s.id == "sweet-spots").tables[0].data
    vk = next(d for d in sweet if d["series"] == "Vulkan")
    assert vk["first_native"] == 5 and vk["best_native"] == 5
    assert vk["pareto_tg"] == [1, 4, 5]


def test_markdown_gives_the_exact_command_of_each_point(fake):
    store, run_id, tmp = fake
    md = write_report(store, run_id, tmp / "out").md.read_text()
    for p in store.points(run_id):
        assert f"`{shlex.join(p.command)}`" in md


def test_markdown_links_plots_relatively(fake):
    store, run_id, tmp = fake
    md = write_report(store, run_id, tmp / "out").md.read_text()
    assert re.findall(r"!\[[^\]]*\]\(([^)]+)\)", md) == ["context.png", "pp.png", "tg.png", "memory.png", "ttft.png", "ttft_p95.png"]


def test_html_is_self_contained_with_every_plot_inline(fake):
    store, run_id, tmp = fake
    rp = write_report(store, run_id, tmp / "out")
    page = rp.html.read_text()
    assert page.count('src="data:image/png;base64,') == len(rp.pngs)
    assert not re.search(r"""(src|href)=["'](https?:|//|file:)""", page)
    assert "<script" not in page and "<link" not in page
    assert page.count("<table>") >= 8


def test_roofline_uses_device_bandwidth_or_says_unknown(fake):
    store, run_id, tmp = fake
    _, sections = build_report(store, run_id, tmp / "out")
    roof = next(s for s in sections if s.id == "roofline").tables[0].data
    vk1 = next(d for d in roof if d["series"] == "Vulkan" and d["ncmoe"] == 1)
    p = next(p for p in store.points(run_id) if p.build_key.startswith("vulkan") and p.ncmoe == 1)
    want_bytes = run_fake.FACTS.bytes_per_token_ctx0 + run_fake.FACTS.kv_bytes_per_token_ctx * (512 + 32)
    assert vk1["bytes_per_token"] == want_bytes
    assert vk1["achieved_gbs"] == pytest.approx(want_bytes * _centre_and_ci(_by_start(p, "tg_tps"))[0] / 1e9)
    assert vk1["fraction"] == pytest.approx(vk1["achieved_gbs"] / 40.0)
    cpu1 = next(d for d in roof if d["series"] == "CPU" and d["ncmoe"] == 1)
    assert cpu1["fraction"] == pytest.approx(cpu1["achieved_gbs"] / run_fake.ENV.ram_bandwidth_gbps)

    env = dataclasses.replace(run_fake.ENV, gpus=[GpuInfo(name="llvmpipe")], ram_bandwidth_gbps=None)
    store.update_run_env(run_id, env)
    md = write_report(store, run_id, tmp / "out2").md.read_text()
    rows = _md_table(md, "| series | device | ncmoe |")
    assert rows and all(r[-1] == "unknown" for r in rows)


def test_single_backend_report_says_why_comparison_is_absent(tmp_path):
    store, run_id = run_fake.build(tmp_path, backends=("cpu",))
    md = write_report(store, run_id, tmp_path / "out").md.read_text()
    assert "Comparison between backends absent: this run has only one series (CPU)" in md
    assert "| scenario | ratio |" not in md


def test_run_with_only_failed_points_still_reports_with_reasons(tmp_path):
    store, run_id = run_fake.build(tmp_path, all_failed=True)
    rp = write_report(store, run_id, tmp_path / "out")
    md = rp.md.read_text()
    assert rp.pngs == []
    assert "> Absent: every point failed" in md and "> Absent: no point succeeded, so there is nothing to plot" in md
    assert len(_md_table(md, "| series | ncmoe | class | detail |")) == 18


def test_run_without_points_is_a_report_error(tmp_path):
    store, run_id = run_fake.build(tmp_path, points=False)
    with pytest.raises(ReportError, match="has no points"):
        write_report(store, run_id, tmp_path / "out")


def test_unknown_run_is_a_store_error(fake):
    store, _, tmp = fake
    with pytest.raises(StoreError, match="no run 'nope'"):
        write_report(store, "nope", tmp / "out")


def test_min_effect_out_of_range_is_a_report_error(fake):
    store, run_id, tmp = fake
    with pytest.raises(ReportError, match="min-effect"):
        write_report(store, run_id, tmp / "out", min_effect=5)


def test_compare_run_splits_series_by_label_and_reads_b_over_a(tmp_path):
    store, run_id = run_fake.build(tmp_path, backends=("cpu",), kind="compare", labels=("A", "B"))
    md = write_report(store, run_id, tmp_path / "out").md.read_text()
    rows = _md_table(md, "| scenario | ratio |")
    assert rows and all(r[1] == "CPU B/CPU A" for r in rows)
    assert all(re.fullmatch(r"1\.[23]\d× \[1\.[123]\d, 1\.[234]\d\] differs", r[5]) for r in rows), rows


def test_bisect_run_lists_probes_and_plots_speed_per_commit(tmp_path):
    from llamaforge.store import Probe

    commits = ("aaaa111", "bbbb222")
    store, run_id = run_fake.build(tmp_path, backends=("cpu",), kind="bisect", labels=commits)
    for i, c in enumerate(commits):
        store.add_probe(Probe(run_id, i, c + "0" * 33, subject=f"commit {i}", verdict="good" if i == 0 else "bad"))
    rp = write_report(store, run_id, tmp_path / "out")
    assert "probes.png" in [p.name for p in rp.pngs]
    rows = _md_table(rp.md.read_text(), "| seq | commit |")
    assert [(r[0], r[3]) for r in rows] == [("0", "good"), ("1", "bad")]


def test_roofline_reads_what_envinfo_writes(fake):
    """The keys collect_env writes (memory_bandwidth_gbps per GPU, cpu_model, ram_bandwidth_gbps) reach the roofline."""
    from llamaforge.envinfo import collect_env

    store, run_id, tmp = fake
    env = collect_env()
    assert env["ram_bandwidth_gbps"] > 0 and env["cpu_model"]
    env["gpus"] = [{"name": "llvmpipe", "memory_bandwidth_gbps": 80.0}]
    store.update_run_env(run_id, env)
    _, sections = build_report(store, run_id, tmp / "out")
    t = next(s for s in sections if s.id == "roofline").tables[0]
    assert {d["device_gbs"] for d in t.data if d["series"] == "Vulkan"} == {80.0}
    cpu = [d for d in t.data if d["series"] == "CPU"]
    assert {r[1] for r in t.rows if r[0] == "CPU"} == {env["cpu_model"]}
    assert cpu and all(d["device_gbs"] == env["ram_bandwidth_gbps"] and d["fraction"] > 0 for d in cpu)


def test_roofline_reads_a_store_written_in_the_old_phantom_keys(fake):
    """Version-0 envs (``cpu`` dict, ``memory_bandwidth_gbs``) are migrated when read, not ignored."""
    store, run_id, tmp = fake
    store.db.execute("UPDATE runs SET env_json=? WHERE id=?", (json.dumps({
        "gpus": [{"name": "llvmpipe", "memory_bandwidth_gbs": 30.0}],
        "cpu": {"name": "Old CPU", "memory_bandwidth_gbs": 10.0}}), run_id))
    _, sections = build_report(store, run_id, tmp / "out")
    t = next(s for s in sections if s.id == "roofline").tables[0]
    assert {d["device_gbs"] for d in t.data} == {30.0, 10.0}
    assert {r[1] for r in t.rows if r[0] == "CPU"} == {"Old CPU"}


def test_an_anomaly_from_two_starts_states_the_spread_it_assumes(tmp_path):
    """Two starts per point (many requests each): no interval of their own, so the spike is flagged only as
    'differs*' under the spread measured for the build over its points, and the section says so."""
    store, run_id = run_fake.build(tmp_path, launches=2, n_samples=8)
    md = write_report(store, run_id, tmp_path / "out").md.read_text()
    sec = md[md.index("## Anomalies"):md.index("## Plots")]
    row = next(line for line in sec.splitlines() if line.startswith("| Vulkan | generation"))
    assert "differs\\*" in row and "(starts " in row and "[" not in row.split("|")[6]
    assert "assuming the between-start spread measured for Vulkan" in sec
