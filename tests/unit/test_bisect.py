"""Bisection logic with fake build/measure functions, and a whole run_bisect over a tiny real git
repo with a fake builder and a fake measure_point (the store, probes, Markdown and plot)."""

from __future__ import annotations

import math
import random
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest

from llamaforge import bisect as bis
from llamaforge.bisect import BisectError, BisectRequest, max_measured, search
from llamaforge.errors import BuildError, SourceError
from llamaforge.paths import Paths
from llamaforge.report import write_report
from llamaforge.report.kinds import bisect as bisect_kind
from llamaforge.store import Point, Sample, Store

GOOD, BAD = 100.0, 60.0


def shas(n: int) -> list[str]:
    return [f"{i:040x}" for i in range(n + 1)]


class Fake:
    """Commits >= first_bad are slow; commits in ``broken`` raise BuildError; counts calls."""

    def __init__(self, commits: list[str], first_bad: int, broken: set[int] = frozenset(), seed: int = 1,
                 bad_value: float = BAD) -> None:
        self.commits, self.first_bad, self.broken = commits, first_bad, set(broken)
        self.rng = random.Random(seed)
        self.bad_value = bad_value
        self.built: list[str] = []
        self.measured: list[str] = []

    def build(self, sha: str) -> str:
        self.built.append(sha)
        if self.commits.index(sha) in self.broken:
            raise BuildError("cpu build failed: src/x.cpp:3: error: expected ';'", "read the log", "/tmp/log",
                             "src/x.cpp:3: error: expected ';'")
        return f"build-{sha[:6]}"

    def measure(self, sha: str, built: str) -> list[float]:
        self.measured.append(sha)
        base = self.bad_value if self.commits.index(sha) >= self.first_bad else GOOD
        return [base * (1 + self.rng.uniform(-0.02, 0.02)) for _ in range(5)]


@pytest.mark.parametrize("n", [1, 2, 3, 5, 8, 16, 17, 33])
def test_search_names_every_possible_first_bad_commit_within_log2_bound(n: int) -> None:
    commits = shas(n)
    for first_bad in range(1, n + 1):
        f = Fake(commits, first_bad)
        res = search(commits, f.build, f.measure)
        assert res.first_bad == commits[first_bad]
        assert res.measured <= math.ceil(math.log2(n)) + 2 if n > 1 else res.measured == 2
        assert res.measured == max_measured(n) or res.measured < max_measured(n)
        assert res.skipped == []


def test_endpoints_are_measured_first_and_marked() -> None:
    commits = shas(8)
    f = Fake(commits, 3)
    res = search(commits, f.build, f.measure)
    assert f.measured[:2] == [commits[0], commits[-1]]
    assert [p.verdict for p in res.probes[:2]] == ["endpoint-good", "endpoint-bad"]
    assert {p.verdict for p in res.probes[2:]} <= {"good", "bad"}


def test_broken_midpoint_is_skipped_and_a_neighbour_probed() -> None:
    commits = shas(16)
    f = Fake(commits, first_bad=5, broken={8})
    res = search(commits, f.build, f.measure)
    assert res.first_bad == commits[5]
    assert res.skipped == [commits[8]]
    assert commits[8] not in f.measured                     # never measured what did not build
    assert f.built[2] == commits[8] and f.built[3] == commits[7]
    assert res.builds == 7 and res.measured == 6            # the fixture's numbers


def test_skips_that_hide_the_boundary_leave_candidates() -> None:
    commits = shas(8)
    f = Fake(commits, first_bad=4, broken={3, 4})
    res = search(commits, f.build, f.measure)
    assert res.first_bad is None
    assert res.candidates == commits[3:6]   # 3, 4 skipped, 5 bad: "the first bad commit could be any of"


def test_endpoints_that_do_not_differ_are_refused_with_the_numbers() -> None:
    commits = shas(8)
    f = Fake(commits, first_bad=4, bad_value=GOOD * 0.99)  # 1 % slower: below the 5 % minimum effect
    with pytest.raises(BisectError) as e:
        search(commits, f.build, f.measure, threshold=0.05)
    assert "do not differ significantly" in e.value.message
    assert "ratio 0.9" in e.value.message and "(n=5)" in e.value.message and "p = " in e.value.message
    assert e.value.fix
    assert len(f.measured) == 2                              # nothing but the endpoints was measured


def test_a_bad_endpoint_that_does_not_build_is_an_error_not_a_skip() -> None:
    commits = shas(4)
    f = Fake(commits, first_bad=2, broken={4})
    with pytest.raises(BisectError, match="bad endpoint .* does not build"):
        search(commits, f.build, f.measure)


def test_probe_that_gives_no_samples_is_skipped() -> None:
    commits = shas(8)
    f = Fake(commits, first_bad=6)
    orig = f.measure
    res = search(commits, f.build, lambda s, b: [] if s == commits[4] else orig(s, b))
    assert res.first_bad == commits[6]
    assert res.skipped == [commits[4]]


@pytest.mark.parametrize("metric", ["tps", "latency", ""])
def test_unknown_metric_is_a_clear_error(metric: str) -> None:
    with pytest.raises(BisectError, match="unknown metric"):
        BisectRequest(good="a", bad="b", metric=metric)


def test_too_few_repeats_is_refused() -> None:
    with pytest.raises(BisectError, match="too few"):
        BisectRequest(good="a", bad="b", repeats=3)


def test_bisect_run_verdict_by_nearest_value_and_by_reference() -> None:
    assert bis.bisect_run_verdict([98, 99, 101], good_value=100, bad_value=50) == "good"
    assert bis.bisect_run_verdict([55, 52, 51], good_value=100, bad_value=50) == "bad"
    assert bis.bisect_run_verdict([94, 94, 94], reference=100, threshold=0.05) == "bad"
    assert bis.bisect_run_verdict([96, 96, 96], reference=100, threshold=0.05) == "good"
    with pytest.raises(BisectError, match="needs --good-value"):
        bis.bisect_run_verdict([1.0])


# ------------------------------------------------------------------- run_bisect over a real git repo


def _git(repo: Path, *args: str) -> str:
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@x.invalid", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@x.invalid", "GIT_CONFIG_GLOBAL": "/dev/null", "GIT_CONFIG_NOSYSTEM": "1",
           "PATH": "/usr/bin:/bin"}
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True, env=env).stdout.strip()


@pytest.fixture
def repo(tmp_path: Path) -> tuple[Path, list[str], str]:
    """main: c0..c8 (c5 is 'slow'); branch side forks at c2 with one commit."""
    r = tmp_path / "up"
    r.mkdir()
    _git(r, "init", "-q", "-b", "main")
    commits = []
    for i in range(9):
        (r / "f.txt").write_text(f"{i}\n")
        _git(r, "add", "-A")
        _git(r, "commit", "-q", "-m", f"commit {i}" + (" (slow)" if i == 5 else ""))
        commits.append(_git(r, "rev-parse", "HEAD"))
    _git(r, "checkout", "-q", "-b", "side", commits[2])
    (r / "g.txt").write_text("side\n")
    _git(r, "add", "-A")
    _git(r, "commit", "-q", "-m", "side")
    side = _git(r, "rev-parse", "HEAD")
    _git(r, "checkout", "-q", "main")
    return r, commits, side


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Paths:
    monkeypatch.setenv("LLAMAFORGE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("LLAMAFORGE_BUILD_ROOT", str(tmp_path / "builds"))
    monkeypatch.setenv("LLAMAFORGE_RESULTS", str(tmp_path / "results"))
    (tmp_path / "ws").mkdir()
    monkeypatch.setattr("llamaforge.bisect.session.resolve_model", lambda ref, paths: tmp_path / "model.gguf")
    return Paths(tmp_path / "ws")


def _fake_measure_point(slow_from: int, commits: list[str]):
    rng = random.Random(3)

    def measure_point(build, model_path, spec, plan, store, run_id, label=""):  # noqa: ANN001
        base = BAD if commits.index(build.commit) >= slow_from else GOOD
        p = Point(run_id=run_id, build_key=build.key, engine="llama-bench", label=label,
                  samples=[Sample(idx=i + 1, warmup=False, test="tg32", tg_tps=base * (1 + rng.uniform(-0.02, 0.02)))
                           for i in range(plan.repeats)])
        store.record_point(p)
        return p

    return measure_point


class FakeBuilder:
    def __init__(self, broken: set[str] = frozenset()) -> None:
        self.broken = broken
        self.calls: list[str] = []
        self.cold_at_start = True
        self.build_dir = Path("/nonexistent/bisect-cpu/build")

    def __call__(self, sha: str):  # noqa: ANN204
        self.calls.append(sha)
        if sha in self.broken:
            raise BuildError("cpu build failed: boom", "read the log", None, "x.cpp:1: error: boom")
        import time

        return SimpleNamespace(key=f"{sha[:9]}-cpu-0", backend="cpu", pin=sha[:9], commit=sha,
                               manifest={"built_at": time.time() + 1, "timings": {"configure_s": 1.0, "build_s": 2.0,
                                                                                 "incremental": len(self.calls) > 1}})


def test_run_bisect_stores_probes_points_summary_and_renders(repo, env, monkeypatch, tmp_path) -> None:
    r, commits, _side = repo
    monkeypatch.setattr("llamaforge.bisect.session.measure_point", _fake_measure_point(5, commits))
    fb = FakeBuilder(broken={commits[6]})
    with Store(env.store_db) as store:
        run_id, res = bis.run_bisect(env, store, BisectRequest(good=commits[0], bad=commits[8], source=f"path:{r}"),
                                     builder=fb)
        assert res.first_bad == commits[5]
        run = store.get_run(run_id)
        assert run.kind == "bisect" and run.status == "done"
        assert run.summary["first_bad"] == commits[5] and run.summary["subject"] == "commit 5 (slow)"
        probes = store.probes(run_id)
        assert [p.commit_sha for p in probes] == fb.calls
        assert {p.verdict for p in probes} >= {"endpoint-good", "endpoint-bad", "skip"}
        assert all(p.build_s is not None for p in probes)
        labels = {p.label for p in store.points(run_id)}
        assert labels == {p.commit_sha[:9] for p in probes if p.verdict != "skip"}
        md = bisect_kind.lead(store, run)
        assert commits[5] in md and "skip" in md and "does not build" in md and "![" in md
        png = bisect_kind.plot(store, run, tmp_path / "out" / "bisect.png")
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        # `llamaforge bisect` and `llamaforge report` write one report: the lead, then one plot of the commits
        rp = write_report(store, run_id, tmp_path / "report")
        assert rp.md.read_text().startswith(md.rstrip()) and [p.name for p in rp.pngs].count("probes.png") == 1


def test_good_that_is_not_an_ancestor_of_bad_is_refused(repo, env) -> None:
    r, commits, side = repo
    with Store(env.store_db) as store, pytest.raises(SourceError, match="not an ancestor") as e:
        bis.run_bisect(env, store, BisectRequest(good=side, bad=commits[8], source=f"path:{r}"), builder=FakeBuilder())
    assert e.value.fix


def test_reversed_endpoints_are_refused(repo, env) -> None:
    r, commits, _ = repo
    with Store(env.store_db) as store, pytest.raises(SourceError, match="not an ancestor"):
        bis.run_bisect(env, store, BisectRequest(good=commits[8], bad=commits[0], source=f"path:{r}"), builder=FakeBuilder())


def test_unknown_commit_is_a_clear_error(repo, env) -> None:
    r, commits, _ = repo
    with Store(env.store_db) as store, pytest.raises(SourceError) as e:
        bis.run_bisect(env, store, BisectRequest(good="deadbeef" * 5, bad=commits[8], source=f"path:{r}"),
                       builder=FakeBuilder())
    assert "deadbeef" in e.value.message and e.value.fix


def test_same_commit_twice_is_refused(repo, env) -> None:
    r, commits, _ = repo
    with Store(env.store_db) as store, pytest.raises(BisectError, match="same commit"):
        bis.run_bisect(env, store, BisectRequest(good=commits[3], bad=commits[3], source=f"path:{r}"), builder=FakeBuilder())


def test_classify_calls_a_loaded_good_commit_good_by_its_best_sample() -> None:
    good, bad = [92, 61, 80, 116, 99], [17, 19, 17, 14, 3]
    loaded_good = [20, 25, 34, 40, 110]      # median 34: nearer the bad median, but one clean repetition
    assert bis.classify(loaded_good, good, bad) == "good"
    assert bis.classify([15, 16, 18, 12, 17], good, bad) == "bad"
    assert bis.classify([45, 44, 46], [100, 100], [20, 20]) == "good"   # log scale: 45 is 2.2× from 100, 2.25× from 20


def test_bisect_run_setup_error_exits_128_so_git_bisect_stops(tmp_path: Path) -> None:
    import sys

    (tmp_path / "notgit").mkdir()
    r = subprocess.run([sys.executable, "-c", "from llamaforge.cli import main; main()", "bisect-run", "--source",
                        str(tmp_path / "notgit"), "--good-value", "100", "--bad-value", "50"],
                       capture_output=True, text=True, cwd=tmp_path, timeout=120,
                       env={"PATH": "/usr/bin:/bin", "LLAMAFORGE_WORKSPACE": str(tmp_path), "HOME": str(tmp_path)})
    assert r.returncode == 128, r.stdout + r.stderr
    assert "not a git checkout" in r.stderr
