"""Real performance bisections over real llama.cpp histories (the fixtures of fixture_repo.py): CPU
builds of every probe (incremental), the tiny synthetic MoE model measured in llama-bench starts.

* the 20 ms-per-token slowdown: named, the broken commit skipped, the change shown against its parent;
* a slowdown of under 10 % of tg (a busy loop of 8 % of each decode's own time): named, or refused up
  front with the number of starts per commit it would take on this machine — never a wrong commit;
* a slowdown of about 15 % (17 % of each decode): named; on a machine too noisy for its budget, refused up
  front with what it would take (checked), and the test is skipped saying so.

Builds are shared across runs (the test workspace's build root): a re-run measures again but builds
only what it must. One probe's published build is removed first, so every run still makes a real
incremental build; the cold build of a fresh bisect tree is covered on a fresh cache (CI's cold run).
Every test prints what it measured: spreads, starts, verdicts, times.
"""

from __future__ import annotations

import json
import shutil
import sys
import time
from pathlib import Path

import pytest

from llamaforge.bisect import BisectRefused, BisectRequest, run_bisect
from llamaforge.builds import BuildOptions
from llamaforge.builds.incremental import IncrementalBuilder
from llamaforge.config import SourceSpec
from llamaforge.findings.bisection import start_trace
from llamaforge.report.kinds import bisect as bisect_kind
from llamaforge.sources import resolve_commit
from llamaforge.store import Store

sys.path.insert(0, str(Path(__file__).parent))
from fixture_repo import BROKEN_INDEX, N_COMMITS, SLOW_INDEX, SPIN7, SPIN15, make_fixture  # noqa: E402


def _unpublish(lf_paths, sha: str) -> None:
    """Remove the published build(s) of ``sha`` so that this run builds it again, incrementally."""
    for d in Path(lf_paths.builds).glob(f"{sha[:9]}-cpu-*"):
        if d.is_dir():
            shutil.rmtree(d, ignore_errors=True)


def _describe(store: Store, run_id: str, t0: float) -> list[str]:
    run = store.get_run(run_id)
    s = run.summary.to_json() if run.summary else {}
    q = (run.plan.bisect.quiet if run.plan.bisect else None) or {}
    lines = [f"run {run_id}: {s.get('status')} in {time.monotonic() - t0:.0f} s; quiet: {q.get('text')}"]
    if s.get("feasibility_line"):
        lines.append(f"  endpoints: {s['feasibility_line']}")
    for p in s.get("probes") or []:
        est = p.get("estimate") or {}
        spread = (est.get("spread") or {}).get("sd")
        lines.append(f"  {p['verdict']:>13} {p['sha'][:9]} k={p['k']:>2} centre {p.get('median') or 0:7.1f} t/s"
                     + (f" spread {spread:.1%}" if spread is not None else "")
                     + f" build {p.get('build_s') or 0:5.1f} s measure {p.get('measure_s') or 0:5.1f} s")
    if (s.get("culprit") or {}).get("line"):
        lines.append(f"  culprit check: {s['culprit']['line']} confirmed={s['culprit']['confirmed']}")
    if s.get("reason"):
        lines.append(f"  {s['reason']}")
    return lines


def _record(lf_paths, name: str, run_id: str, lines: list[str]) -> None:
    print("\n".join(lines))
    rec = lf_paths.cache / f"bisect-{name}-last.json"
    rec.write_text(json.dumps({"store": str(lf_paths.store_db), "run_id": run_id, "lines": lines}, indent=2))


def _bisect_or_refusal(lf_paths, req: BisectRequest, name: str) -> tuple:   # noqa: ANN001
    """Run the bisection; a refusal is an outcome, not an error. Prints and keeps what it measured (``name``:
    the record's file). Returns (result, the refusal or None, the run's probes)."""
    t0 = time.monotonic()
    with Store(lf_paths.store_db) as store:
        try:
            run_id, res = run_bisect(lf_paths, store, req, command=f"test_bisect_real {name}")
            refused = None
        except BisectRefused as e:
            refused, res = e, e.result
            run_id = store.list_runs("bisect")[-1].id
        lines = _describe(store, run_id, t0)
        probes = store.probes(run_id)
    _record(lf_paths, name, run_id, lines)
    return res, refused, probes


@pytest.mark.slow
@pytest.mark.measures
def test_bisect_names_the_slowdown_commit_and_skips_the_broken_one(lf_paths, cpu_build, tiny_model, tmp_path):
    fx = make_fixture(cpu_build.source_dir)
    assert len(fx.commits) == N_COMMITS + 1
    _unpublish(lf_paths, fx.commits[7])          # the first probe after the broken one: an incremental build
    # 8 tokens, one request a start: the slow commits pay 20 ms a token, and a −90 % change needs no long requests
    req = BisectRequest(good=fx.good, bad=fx.bad, metric="tg", backend="cpu", model=str(tiny_model), source=fx.spec,
                        n_predict=8, repeats=1)
    t0 = time.monotonic()
    with Store(lf_paths.store_db) as store:
        run_id, res = run_bisect(lf_paths, store, req, command="test_bisect_real")
        run = store.get_run(run_id)
        probes = store.probes(run_id)
        md = bisect_kind.lead(store, run)
        png = bisect_kind.plot(store, run, tmp_path / "bisect.png")
        trace = start_trace(store, run, "tg_tps")      # every start in the order measured, with its time
        timeline = bisect_kind.timeline(store, run, tmp_path / "starts.png")
        lines = _describe(store, run_id, t0)

    assert res.first_bad == fx.slow, f"expected {fx.slow[:9]} ({fx.subjects[SLOW_INDEX]}), got {res.reason}"
    assert run.summary.subject == fx.subjects[SLOW_INDEX]
    assert fx.broken in res.skipped, "the broken commit sits at the first midpoint and must be skipped"
    assert [p.verdict for p in probes if p.commit_sha == fx.broken] == ["skip"]
    assert res.builds <= 7 and res.measured <= 6   # ⌈log2 16⌉ + 2
    assert png.stat().st_size > 0 and fx.slow in md and "95 % CI" in md
    assert len(trace) == res.starts and all(t is not None for t, *_ in trace) and timeline.stat().st_size > 0
    assert [t for t, *_ in trace] == sorted(t for t, *_ in trace)     # the schedule's order is the clock's
    # the slowdown is real and shown against its parent: the endpoints differ a lot, the culprit's CI too
    assert res.endpoints["verdict"] == "differs" and res.endpoints["ratio"] < 0.8
    c = run.summary.culprit
    assert c["confirmed"] and c["good"] == fx.commits[SLOW_INDEX - 1] and c["judgement"]["high"] < 0.95
    # the confirmation (bisect/confirm.py, issue 41): fresh starts of the commit and its parent, ABBA
    assert c["status"] == "confirmed" and c["order"].startswith("ABBA") and min(c["k"]) >= 3 and "ABBA" in c["line"]
    assert all(p.k >= 3 for p in res.probes if p.verdict != "skip")
    # quieter starts recorded: physical cores, and the scheduling options this llama-bench has
    quiet = run.plan.bisect.quiet
    assert quiet["threads"] and quiet["threads_from"] == "physical cores"
    assert "--cpu-strict" in quiet["args"] and "--prio" in quiet["args"]

    built = [p for p in probes if p.build_s is not None and p.note != "cached build"]
    rebuilt = [p for p in probes if p.commit_sha == fx.commits[7]]
    assert rebuilt and rebuilt[0].incremental is True, "the unpublished probe is rebuilt incrementally"
    if run.plan.bisect.cold_start:
        assert built[0].incremental is False, "the first build of a fresh bisect dir is cold"
    lines += [f"{'incremental' if p.incremental else 'cold' if p.incremental is False else 'cached/skip':<12} "
              f"{p.commit_sha[:9]}: {p.build_s or 0:6.1f} s ({p.verdict})" for p in probes]
    _record(lf_paths, "speed", run_id, lines)
    assert BROKEN_INDEX > SLOW_INDEX


#: the small slowdown's budget of starts per commit: a quiet machine (2 % between starts) locates a 7 % change
#: within it; a noisy one (the CI VM: 8-15 %) is refused, and the refusal's endpoints run up to this many
#: starts each (20 cost the CI VM ~48 s for the same refusal)
SMALL_LAUNCHES = 10


#: full tier: a 7 % step, found or refused; the default tier checks the capability with the tests named
@pytest.mark.full(covered_by=["tests/integration/test_bisect_real.py::test_bisect_names_the_slowdown_commit_and_skips_the_broken_one"])
@pytest.mark.slow
@pytest.mark.measures
def test_bisect_small_slowdown_is_found_or_refused_up_front(lf_paths, cpu_build, tiny_model):
    """Under 10 % of tg: named, or refused before anything beyond the endpoints is built, with the number
    of starts per commit it would take here. Never a wrong commit."""
    fx = make_fixture(cpu_build.source_dir, variant=SPIN7)
    req = BisectRequest(good=fx.good, bad=fx.bad, metric="tg", backend="cpu", model=str(tiny_model), source=fx.spec,
                        threshold=0.02, max_launches=SMALL_LAUNCHES, n_predict=32)
    res, refused, probes = _bisect_or_refusal(lf_paths, req, "small")
    assert res.first_bad in (None, fx.slow), f"a wrong commit: {res.first_bad}"
    if refused is not None:
        f = res.feasibility
        assert f is not None and not f.feasible and "between-start spread" in refused.message
        assert f.needed is None or (f.needed > SMALL_LAUNCHES and f"about {f.needed} starts per commit" in refused.message)
        assert {p.commit_sha for p in probes} == {fx.good, fx.bad}, "nothing beyond the endpoints was built"
    elif res.first_bad is None:
        assert res.status == "undecided" and fx.slow in res.candidates, res.reason
    else:
        assert res.culprit and res.culprit["confirmed"]
        # a slowdown, of a sane size: the 8 % spin is designed as −7 %, but these 2-vCPU VMs measure a planted
        # spin up to about twice its design (the history fixture's −20 % measured −45 % on 2026-12-03)
        assert 0.6 < res.culprit["judgement"]["ratio"] < 1.0


#: the 15 % bisection's budget of starts per commit. The bisection plans what the endpoints' spread needs and
#: spends only what each probe takes (here, 2 % between starts: 9 per commit); the budget only caps it.
#: A CI machine measured 13.4 % between starts (tiny model at 198 t/s, half this machine's speed), for which
#: the plan is about 55 starts per commit: with a budget of 30 the bisection refused, correctly. 80 covers
#: a spread up to about 14 %; a noisier machine is refused with the number it would take, and the test checks
#: that refusal and is skipped, saying why (a cold CI run here: 15.7 %, about 130 needed).
MAX_LAUNCHES_15 = 80
#: requests per start. The start is what varies (benchmarks/start_cost.py: 32 tokens once a start or three times,
#: the spread between starts is the same, ~15 % on this VM), so one request a start is the cheapest
#: information per second of the machine: a start 0.8 → 0.55 s
REPEATS_15 = 1


@pytest.mark.slow
@pytest.mark.measures
#: full tier: statistical power at a 15 % step; the default tier checks the capability with the test named
@pytest.mark.full(covered_by=["tests/integration/test_bisect_real.py::test_bisect_names_the_slowdown_commit_and_skips_the_broken_one"])
def test_bisect_15_percent_slowdown_is_found(lf_paths, cpu_build, tiny_bpe_model):
    fx = make_fixture(cpu_build.source_dir, variant=SPIN15)
    _unpublish(lf_paths, fx.commits[4])          # the first probe: a real incremental build every run
    # the tiny model with Qwen's 152k tokenizer: ~4x slower a token than the SentencePiece one, and steadier per
    # start for it (32 tokens a request here: 8-13 % between starts against 20-25 %), which this precision needs
    req = BisectRequest(good=fx.good, bad=fx.bad, metric="tg", backend="cpu", model=str(tiny_bpe_model), source=fx.spec,
                        max_launches=MAX_LAUNCHES_15, n_predict=32, repeats=REPEATS_15)
    res, refused, probes = _bisect_or_refusal(lf_paths, req, "15pct")
    if refused is not None:
        # a machine too noisy to locate this change within the budget (a cold CI run here on 2026-12-03: 15.7 %
        # between starts, about 130 starts a commit needed): the refusal must come from the endpoints' own
        # spread, name what it would take, and build nothing beyond them. The change itself is located
        # on every machine by the 20 ms bisect and the history test's factor-of-two steps
        f = res.feasibility
        assert f is not None and not f.feasible and "between-start spread" in refused.message, refused.message
        assert f.needed is not None and f.needed > MAX_LAUNCHES_15, refused.message
        assert f"about {f.needed} starts per commit" in refused.message
        assert {p.commit_sha for p in probes} == {fx.good, fx.bad}, "nothing beyond the endpoints was built"
        pytest.skip(f"this machine is too noisy to locate a 15 % change within {MAX_LAUNCHES_15} starts a commit "
                    f"(the bisect refused, correctly: {refused.message[:160]})")
    if res.first_bad is None and res.culprit is not None and not res.culprit["confirmed"]:
        # the probes pointed at a commit and its fresh ABBA re-measurement against its parent did not show the
        # change, so the bisection ends undecided instead of naming it: honest, and short of this test's premise.
        # Seen once (a CI run here on 2026-12-03, 14.8 % between starts): a probe before the slowdown, measured
        # ~90 s after the endpoints, was judged bad against them across the VM's drift (STATUS.md). A wrong
        # commit named still fails this test; so does an undecided end for any other reason
        assert res.status == "undecided" and "does not show there" in res.reason, res.reason
        pytest.skip(f"the 15 % bisection ended undecided, its culprit check refusing the commit the probes "
                    f"pointed at: {res.reason[:200]}")
    if res.first_bad is None and res.status == "undecided" and "is undecided after" in res.reason:
        # a probe the judge could not place within --max-launches (seen 2026-12-07 on a 2-vCPU VM: −0.4 % vs good,
        # +14.2 % vs bad after 80 starts, p 0.0034 against a per-look α of 0.0028, the endpoints having moved): the
        # range is named instead of a commit (issue 41, point 2), short of this test's premise. The range must hold
        # the slowdown; a wrong commit named still fails
        assert fx.slow[:12] in res.reason and "the change lies in that range" in res.reason, res.reason
        pytest.skip(f"the 15 % bisection ended with a range, undecided within the budget: {res.reason[:200]}")
    assert res.first_bad == fx.slow, res.reason
    j, e = res.culprit["judgement"], res.endpoints
    # a confirmed slowdown, and the step it names is the endpoints' change (their intervals overlap). Not a band
    # around 15 %: the spin is relative to the decode time, but on a loaded 2-vCPU VM (a CI run measured −35.6 %
    # [−46.6, −22.3] for the culprit, −25.4 % [−40.4, −6.6] for the endpoints) what one thread's spin costs varies
    assert res.culprit["confirmed"] and j["high"] < 1 and e["high"] < 1, (j, e)
    assert j["low"] <= e["high"] and e["low"] <= j["high"], (j, e)


#: full tier: compare of the planted slowdown in the library; the default tier checks the capability with the tests named
@pytest.mark.full(covered_by=["tests/integration/test_installed_real.py::test_inside_a_llama_cpp_checkout_compare_and_bisect_take_its_revisions",
                              "tests/integration/test_regression_workflow_real.py::test_the_workflow_tracks_the_newest_commit_against_the_last_good_one"])
@pytest.mark.slow
@pytest.mark.measures
def test_compare_marks_the_planted_slowdown_worse_and_renders(lf_paths, cpu_build, tiny_model, tmp_path):
    """`compare` on real builds of two commits of the fixture history: base = the commit before the
    slowdown, head = the slowdown commit. Generation must come out significantly worse."""
    from llamaforge.bench.plan import make_points
    from llamaforge.compare.judged import comparisons
    from llamaforge.compare.session import CompareRequest, Side, run_compare
    from llamaforge.findings.comparison import verdict_word
    from llamaforge.report.kinds import compare as compare_kind

    fx = make_fixture(cpu_build.source_dir)
    base = fx.commits[0]
    req = CompareRequest(base=Side("A", base, "cpu", fx.spec), head=Side("B", fx.slow, "cpu", fx.spec),
                         model=str(tiny_model), points=make_points("0", None, n_layers=8), repeats=2, rounds=4,
                         prompt_tokens=64, n_predict=32, threads=2)
    with Store(lf_paths.store_db) as store:
        run_id = run_compare(lf_paths, store, req, command="test_compare_real", progress=False)
        rows = {r["metric"]: r for r in comparisons(store, run_id)}
        md = compare_kind.lead(store, store.get_run(run_id))
    tg = rows["tg"]
    assert tg["A"]["n_requests"] == 8 and tg["B"]["n_requests"] == 8   # every measured request kept, warm-ups not
    assert tg["comparison"]["verdict"] == "differs" and verdict_word(tg["comparison"]) == "worse", tg
    assert tg["comparison"]["ratio"] < 0.8
    assert "worse" in md


@pytest.mark.slow
@pytest.mark.measures
def test_bisect_run_builds_the_checkout_in_place_and_exits_by_its_verdict(lf_paths, cpu_build, tiny_model, tmp_path,
                                                                          capsys):
    """`llamaforge bisect-run` (what `git bisect run` calls) on a real checkout: one build of HEAD in place,
    measured in starts until the interval of its level clears the boundary: exit 1 against a reference it
    cannot reach and 0 against one it clearly beats (the second call reuses the build)."""
    from invoke import Context

    from llamaforge.commands.regressions import bisect_run
    from llamaforge.proc import run

    fx = make_fixture(cpu_build.source_dir)
    checkout = tmp_path / "checkout"
    assert run(["git", "clone", "-q", "--", str(fx.path), str(checkout)], timeout=600).ok
    assert run(["git", "-C", str(checkout), "checkout", "-q", fx.commits[0]], timeout=120).ok
    codes, lines = [], []
    for reference in ("1e12", "1e-9"):
        with pytest.raises(SystemExit) as e:
            bisect_run(Context(), source=str(checkout), reference=reference, model=str(tiny_model), repeats=4,
                       n_predict=16)
        codes.append(e.value.code)
        captured = capsys.readouterr()
        lines.append(captured.out + captured.err)
    assert codes == [1, 0], lines
    assert f"{fx.commits[0][:12]} tg " in lines[1] and "over 3 starts" in lines[1] and "→ good" in lines[1]
    with Store(lf_paths.store_db) as store:
        runs = [r for r in store.list_runs("bisect-run") if r.name == f"bisect-run {fx.commits[0][:9]}"]
        points = [p for r in runs[-2:] for p in store.points(r.id)]
    assert len(runs) >= 2 and all(r.status == "done" for r in runs[-2:])
    assert len(points) == 2 and all(p.status == "ok" and len(p.launch_groups("tg_tps")) == 3 for p in points)


@pytest.mark.slow
def test_the_bisect_tree_keeps_no_define_of_an_earlier_build(lf_paths, cpu_build):
    """The shared bisect tree, built once with an extra define and then without it: the second configure starts
    afresh (CMake would keep the define in its cache) and says why; what the binaries were compiled with is in
    the manifest. (A stale ``CMAKE_CXX_FLAGS_RELEASE=-O1`` once made every probe a slower build than its
    endpoints: builds/cmake_tree.py.) The define changes no compile command, so ninja recompiles nothing."""
    fx = make_fixture(cpu_build.source_dir)
    sha = resolve_commit(lf_paths, fx.commits[1], SourceSpec.parse(fx.spec))
    marked = IncrementalBuilder(lf_paths, "cpu", BuildOptions(defines={"LLAMAFORGE_TREE_MARK": "1"}))
    first = marked(sha)
    cache = marked.build_dir / "out" / "CMakeCache.txt"
    assert "LLAMAFORGE_TREE_MARK:" in cache.read_text()
    _unpublish(lf_paths, sha)                        # both builds of the commit go: the plain one is built now
    plain = IncrementalBuilder(lf_paths, "cpu")(sha)
    assert Path(first.dir) != Path(plain.dir)
    assert "LLAMAFORGE_TREE_MARK" not in cache.read_text()
    t = plain.manifest["timings"]
    assert "-DLLAMAFORGE_TREE_MARK=1" in t.get("configure", ""), t
    flags = plain.manifest["compiled_with"]
    assert flags["CMAKE_BUILD_TYPE"] == "Release" and "-O3" in flags["CMAKE_CXX_FLAGS_RELEASE"], flags
    print(f"plain build after the marked one: configure {t['configure_s']} s, build {t['build_s']} s ({t['configure']})")
