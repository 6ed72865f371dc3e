"""The noise-aware bisection with fake build/measure functions (one call of ``measure`` = one server
start), and a whole run_bisect over a tiny real git repo with a fake builder and a fake start (the
store, probes, launches, summary, Markdown and plot).

The fakes draw whole starts: a start's level from the commit's level times a between-start factor
(log-normal, or bimodal: a share of starts lands in a low mode), its requests around it. Whatever the
noise, a search must name the right commit, say "undecided", or refuse up front — never a wrong commit.
"""

from __future__ import annotations

import importlib
import math
import subprocess
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from llamaforge import bisect as bis
from llamaforge.bisect import BisectError, BisectRefused, BisectRequest, max_measured, policy_for, search
from llamaforge.bisect.git_run import bisect_run_verdict, boundary
from llamaforge.bisect.quiet import QUIET_OPTIONS, QuietRequest, settings
from llamaforge.errors import BuildError, SourceError
from llamaforge.findings.bisection import start_trace
from llamaforge.judge import Starts
from llamaforge.paths import Paths
from llamaforge.report import write_report
from llamaforge.report.kinds import bisect as bisect_kind
from llamaforge.store import Point, Sample, Store

#: the search module (``llamaforge.bisect.search`` the attribute is the function of that name)
search_mod = importlib.import_module("llamaforge.bisect.search")

GOOD = 100.0


def shas(n: int) -> list[str]:
    return [f"{i:040x}" for i in range(n + 1)]


class Fake:
    """Commits ≥ ``first_bad`` are ``effect`` slower; ``broken`` do not build; ``level(i, k)`` may script
    the level of commit i's k-th start (1-based). Records every build and start."""

    def __init__(self, commits: list[str], first_bad: int, *, effect: float = 0.4, sd: float = 0.03,
                 broken: set[int] = frozenset(), seed: int = 1, bimodal: tuple[float, float] | None = None,
                 level: Callable[[int, int], float | None] | None = None, fail: set[int] = frozenset()) -> None:
        self.commits, self.first_bad, self.effect, self.sd = commits, first_bad, effect, sd
        self.broken, self.bimodal, self.script, self.fail = set(broken), bimodal, level, set(fail)
        self.rng = np.random.default_rng(seed)
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
        i = self.commits.index(sha)
        if i in self.fail:
            return []
        k = self.measured.count(sha)
        lvl = self.script(i, k) if self.script else None
        if lvl is None:
            lvl = GOOD * (1 - self.effect if i >= self.first_bad else 1.0)
            if self.bimodal and self.rng.random() < self.bimodal[0]:
                lvl *= self.bimodal[1]
            lvl *= math.exp(self.rng.normal(0, self.sd))
        return list(lvl * np.exp(self.rng.normal(0, 0.005, 3)))


def run(f: Fake, *, threshold: float = 0.05, max_launches: int | None = None):  # noqa: ANN201
    return search(f.commits, f.build, f.measure, threshold=threshold, policy=policy_for(max_launches))


@pytest.mark.parametrize("n", [1, 2, 3, 5, 8, 16])
def test_search_names_every_possible_first_bad_commit_within_log2_bound(n: int) -> None:
    commits = shas(n)
    for first_bad in range(1, n + 1):
        f = Fake(commits, first_bad, seed=first_bad)
        res = run(f)
        assert res.status == "found" and res.first_bad == commits[first_bad], res.reason
        assert res.measured <= max_measured(n) and res.skipped == []
        assert res.culprit and res.culprit["confirmed"] and "\u2212" in res.culprit["line"]
        assert all(p.k >= 3 for p in res.probes)                 # every commit judged on ≥ 3 starts


def test_endpoints_are_measured_first_interleaved_abba_and_nothing_else_is_built_before() -> None:
    commits = shas(8)
    f = Fake(commits, 3)
    res = run(f)
    assert f.built[:2] == [commits[0], commits[-1]]
    g, b = commits[0], commits[-1]
    assert f.measured[:6] == [g, b, b, g, g, b]                  # ABBA, before any probe is built
    assert [p.verdict for p in res.probes[:2]] == ["endpoint-good", "endpoint-bad"]
    assert res.endpoints["verdict"] == "differs" and res.feasibility and res.feasibility.feasible


def test_probes_are_interleaved_with_fresh_endpoint_starts() -> None:
    commits = shas(8)
    f = Fake(commits, 3)
    run(f)
    probe = commits[4]                                            # the first probe
    first = f.measured.index(probe)
    window = f.measured[first:first + 6]
    assert window.count(probe) == 3 and {x for x in window if x != probe} == {commits[0], commits[-1]}


def test_broken_midpoint_is_skipped_and_a_neighbour_probed() -> None:
    commits = shas(16)
    f = Fake(commits, first_bad=5, broken={8})
    res = run(f)
    assert res.first_bad == commits[5]
    assert res.skipped == [commits[8]]
    assert commits[8] not in f.measured                           # never measured what did not build
    assert f.built[2] == commits[8] and f.built[3] == commits[7]
    assert res.builds == 7 and res.measured == 6                  # the real fixture's numbers


def test_skips_that_hide_the_boundary_leave_candidates() -> None:
    commits = shas(8)
    f = Fake(commits, first_bad=4, broken={3, 4})
    res = run(f)
    assert res.first_bad is None and res.status == "skipped"
    assert res.candidates == commits[3:6]   # 3, 4 skipped, 5 bad: "the first bad commit could be any of"


def test_endpoints_that_are_the_same_are_refused_before_anything_else_is_built() -> None:
    commits = shas(8)
    f = Fake(commits, first_bad=4, effect=0.005, sd=0.005)        # 0.5 %: within the 5 % minimum effect
    with pytest.raises(BisectRefused) as e:
        run(f)
    assert "same within ±5%" in e.value.message and "spread" in e.value.message
    assert f.built == [commits[0], commits[-1]]
    assert e.value.fix and e.value.result.feasibility is not None


def test_a_change_smaller_than_the_spread_is_refused_up_front_with_the_starts_it_would_take() -> None:
    commits = shas(16)
    f = Fake(commits, first_bad=7, effect=0.15, sd=0.2, seed=2)
    with pytest.raises(BisectRefused) as e:
        run(f, threshold=0.02, max_launches=10)
    fea = e.value.result.feasibility
    assert fea is not None and not fea.feasible and (fea.needed is None or fea.needed > 10)
    msg = e.value.message
    assert "between-start spread" in msg and "tg \u2212" in msg
    if fea.needed:
        assert f"about {fea.needed} starts per commit" in msg and f"--max-launches to {fea.needed}" in e.value.fix
    assert f.built == [commits[0], commits[-1]]                   # nothing beyond the endpoints was built
    assert set(f.measured) == {commits[0], commits[-1]} and len(f.measured) <= 20


def _many(effect: float, sd: float, seeds: int, *, bimodal: tuple[float, float] | None = None,
          max_launches: int = 20) -> dict[str, int]:
    rng = np.random.default_rng(99)
    out = {"right": 0, "wrong": 0, "undecided": 0, "refused": 0}
    for seed in range(seeds):
        commits = shas(16)
        fb = int(rng.integers(1, 17))
        f = Fake(commits, fb, effect=effect, sd=sd, seed=seed, bimodal=bimodal)
        try:
            res = run(f, max_launches=max_launches)
        except BisectRefused:
            out["refused"] += 1
            continue
        if res.first_bad is None:
            out["undecided"] += 1
            assert res.status in ("undecided", "skipped") and commits[fb] in res.candidates, res.reason
        else:
            out["right" if res.first_bad == commits[fb] else "wrong"] += 1
    return out


def test_noisy_starts_give_the_right_commit_or_undecided_never_a_wrong_one() -> None:
    out = _many(effect=0.15, sd=0.05, seeds=60)
    assert out["wrong"] == 0, out
    assert out["right"] >= 50, out


def test_bimodal_starts_give_the_right_commit_or_undecided_never_a_wrong_one() -> None:
    """30 % of starts land in a low mode at 0.8× (as Vulkan's starts do on an H200): a good commit's
    low-mode starts sit near the bad commits' high mode. The search must not be misled by them."""
    out = _many(effect=0.25, sd=0.01, seeds=60, bimodal=(0.3, 0.8), max_launches=30)
    assert out["wrong"] == 0, out
    assert out["right"] >= 20, out            # it does locate the change, not only refuse or give up


class Jumpy(Fake):
    """A shared machine whose speed jumps, as the CI VM's starts go: at every start, with chance ``jump``, the
    machine takes a new speed (log-normal, SD ``msd``) that every start keeps until the next jump."""

    def __init__(self, *a, jump: float = 0.1, msd: float = 0.15, **kw) -> None:  # noqa: ANN002, ANN003
        super().__init__(*a, **kw)
        self.jump, self.msd, self.speed = jump, msd, 0.0
        self.machine = np.random.default_rng(kw.get("seed", 1) + 1000)

    def measure(self, sha: str, built: str) -> list[float]:
        if self.machine.random() < self.jump:
            self.speed = self.machine.normal(0, self.msd)
        return [v * math.exp(self.speed) for v in super().measure(sha, built)]


def _wrong_probes(seeds: int) -> tuple[int, int]:
    """Probe verdicts that were wrong, and commits named wrongly, over ``seeds`` searches on a jumpy machine."""
    rng = np.random.default_rng(5)
    probes = named = 0
    for seed in range(seeds):
        commits = shas(16)
        fb = int(rng.integers(1, 17))
        try:
            res = run(Jumpy(commits, fb, effect=0.17, sd=0.10, seed=seed), max_launches=80)
        except BisectRefused:
            continue
        probes += sum(p.verdict in ("good", "bad") and (p.verdict == "bad") != (p.index >= fb) for p in res.probes)
        named += res.first_bad not in (None, commits[fb])
    return probes, named


def _every_start(lead: tuple[Starts, Starts], beside: tuple[Starts, Starts]) -> tuple[Starts, Starts, bool]:
    """The rule before ``references``: each endpoint's earlier and beside starts, always."""
    g, b = (Starts.of(list(e.groups) + list(n.groups)) for e, n in zip(lead, beside, strict=True))
    return g, b, False


def test_a_jumpy_machine_misleads_few_probes_judged_beside_the_endpoints(monkeypatch) -> None:
    """The CI VM's 15 % bisections called probes bad and good across the machine's jumps in speed: measured a
    minute after most of the endpoints' starts. A probe is judged against the endpoints' starts measured
    beside it and the few just before (``references``: beside alone once an endpoint moved), and its verdict
    must hold on the beside starts; judged against every endpoint start since the search began (as before),
    the same machine misleads many times as many probes. No commit is named wrongly either way: the
    culprit's check catches what the probes get wrong."""
    local, named = _wrong_probes(60)
    place = search_mod.place
    monkeypatch.setattr(search_mod, "place", lambda *a, beside=None, **k: place(*a, **k))
    monkeypatch.setattr(search_mod, "references", _every_start)
    monkeypatch.setattr(search_mod, "LEAD_STARTS", 10 ** 9)
    alone, named_alone = _wrong_probes(60)
    assert named == named_alone == 0
    assert local * 5 < alone, (local, alone)


def test_an_undecided_probe_is_measured_again_not_guessed() -> None:
    """Commit 8 (good) gives three ambiguous starts first: it gets more starts until it is clearly good."""
    commits = shas(16)
    f = Fake(commits, first_bad=12, level=lambda i, k: 80.0 if i == 8 and k <= 3 else None)
    res = run(f)
    p8 = next(p for p in res.probes if p.index == 8)
    assert p8.verdict == "good" and p8.placement is not None and p8.placement.k > 3
    assert res.first_bad == commits[12]


def test_a_probe_still_undecided_at_the_maximum_ends_the_search_undecided_with_the_range() -> None:
    """Commit 8's starts land alternately at the good and the bad level (a commit whose speed flips between
    starts): it is measured up to the maximum, then the search stops undecided — it never guesses."""
    commits = shas(16)
    f = Fake(commits, first_bad=12, level=lambda i, k: (GOOD if k % 2 else 60.0) if i == 8 else None)
    res = run(f, max_launches=8)
    assert res.status == "undecided" and res.first_bad is None
    assert "undecided between" in res.reason and res.candidates == commits[1:]
    p8 = next(p for p in res.probes if p.index == 8)
    assert p8.verdict == "undecided" and p8.k == 8


def test_a_partial_change_never_names_a_commit_without_a_change() -> None:
    """Two changes (commits ≥ 6 at 0.9×, ≥ 12 at 0.8×): whatever the probes make of the middle, a named
    commit is one where the speed really changed, shown against its parent."""
    commits = shas(16)
    for seed in range(5):
        rng = np.random.default_rng(seed)
        f = Fake(commits, first_bad=12, seed=seed,
                 level=lambda i, _k, rng=rng: GOOD * (0.8 if i >= 12 else 0.9 if i >= 6 else 1.0) * math.exp(rng.normal(0, 0.01)))
        res = run(f, max_launches=12)
        assert res.first_bad in (None, commits[6], commits[12]), res.reason


def test_a_misled_search_is_caught_by_the_culprits_check_and_names_no_commit() -> None:
    """Commit 4 (good) measures slow in its first starts only (a load spike): the probes point at it, but
    its fresh ABBA starts against its parent show no change, so no commit is named."""
    commits = shas(16)
    f = Fake(commits, first_bad=5, level=lambda i, k: 60.0 if i == 4 and k <= 8 else None)
    res = run(f)
    assert next(p for p in res.probes if p.index == 4).verdict == "bad"
    assert res.first_bad is None and res.status == "undecided"
    assert res.culprit is not None and not res.culprit["confirmed"]
    # its slow starts reach into the check (the script counts every start of commit 4): the check is refuted or
    # undecided — "range a..b, undecided after K starts" — and either way no commit is named
    assert ("does not show there" in res.reason or "undecided after" in res.reason) and res.candidates == commits[1:]


def test_a_bad_endpoint_that_does_not_build_is_an_error_not_a_skip() -> None:
    commits = shas(4)
    f = Fake(commits, first_bad=2, broken={4})
    with pytest.raises(BisectError, match="bad endpoint .* does not build"):
        run(f)


def test_a_probe_whose_start_fails_is_skipped() -> None:
    commits = shas(8)
    f = Fake(commits, first_bad=6, fail={4})
    res = run(f)
    assert res.first_bad == commits[6]
    assert res.skipped == [commits[4]]


def test_an_endpoint_whose_start_fails_is_an_error() -> None:
    commits = shas(8)
    with pytest.raises(BisectError, match="bad endpoint .* gave no tg samples"):
        run(Fake(commits, first_bad=6, fail={8}))


@pytest.mark.parametrize("metric", ["tps", "latency", ""])
def test_unknown_metric_is_a_clear_error(metric: str) -> None:
    with pytest.raises(BisectError, match="unknown metric"):
        BisectRequest(good="a", bad="b", metric=metric)


def test_too_few_max_launches_or_repeats_are_refused() -> None:
    with pytest.raises(BisectError, match="--max-launches 2 is below the 3 starts") as e:
        BisectRequest(good="a", bad="b", max_launches=2)
    assert "--max-launches 3" in (e.value.fix or "")
    with pytest.raises(BisectError, match="--repeats must be at least 1"):
        BisectRequest(good="a", bad="b", repeats=0)
    assert BisectRequest(good="a", bad="b", repeats=1).repeats == 1   # requests need not be independent now


def test_bisect_run_judges_starts_against_the_boundary_and_skips_what_it_cannot_tell() -> None:
    mid = boundary(good_value=100, bad_value=50)
    assert abs(mid.value - math.sqrt(5000)) < 1e-9
    near = [[98.0, 99.0], [101.0, 100.5], [99.5, 100.0]]
    assert bisect_run_verdict(near, mid, max_starts=10)[0] == "good"
    assert bisect_run_verdict([[52.0], [51.0], [53.0]], mid, max_starts=10)[0] == "bad"
    assert bisect_run_verdict([[99.0], [101.0]], mid, max_starts=10)[0] == "undecided"   # two starts: no interval
    wide = [[40.0], [110.0], [75.0]]
    verdict, s = bisect_run_verdict(wide, mid, max_starts=10)
    assert verdict == "undecided" and s.low < mid.value < s.high
    ref = boundary(reference=100, threshold=0.05)
    assert bisect_run_verdict([[90.0], [90.5], [89.8]], ref, max_starts=10)[0] == "bad"
    assert bisect_run_verdict([[99.0], [99.5], [98.8]], ref, max_starts=10)[0] == "good"
    with pytest.raises(BisectError, match="needs --good-value"):
        boundary()
    with pytest.raises(BisectError, match="two different positive"):
        boundary(good_value=100, bad_value=100)


def test_quiet_settings_use_physical_cores_and_only_the_options_the_binary_has() -> None:
    q = settings(QuietRequest("cpu"), ["-t", "--cpu-strict", "--poll", "-m"], cores=4)
    assert q.threads == 4 and q.threads_from == "physical cores"
    assert q.args == ("--cpu-strict", "1", "--poll", "50") and q.missing == ("--prio",)
    assert "-t 4" in q.describe() and "no --prio" in q.describe()
    full = settings(QuietRequest("cpu"), [o for o, _ in QUIET_OPTIONS], cores=2)
    assert full.args == ("--cpu-strict", "1", "--prio", "2", "--poll", "50")
    assert settings(QuietRequest("cpu", threads=3), ["--prio"], cores=8).threads == 3
    assert settings(QuietRequest("vulkan"), ["--prio"], cores=8) .args == ()
    off = settings(QuietRequest("cpu", enabled=False), ["--prio"], cores=8)
    assert off.args == () and off.threads is None and off.to_dict()["enabled"] is False


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


def _fake_measure_launch(slow_from: int, commits: list[str], *, effect: float = 0.4, sd: float = 0.01):
    from llamaforge.bench.sweep import merge_launch

    rng = np.random.default_rng(3)
    seen: list[dict] = []

    def measure_launch(build, model_path, spec, plan, store, run_id, *, label, launch, seq, acc=None,  # noqa: ANN001, ANN202
                       log_dir=None):
        seen.append({"threads": plan.threads, "extra_args": list(plan.extra_args), "repeats": plan.repeats,
                     "sha": build.commit})
        base = GOOD * ((1 - effect) if commits.index(build.commit) >= slow_from else 1.0)
        lvl = base * math.exp(rng.normal(0, sd))
        one = Point(run_id=run_id, build_key=build.key, engine="llama-bench", label=label,
                    samples=[Sample(idx=i + 1, warmup=False, test="tg32", tg_tps=lvl * (1 + rng.uniform(-0.003, 0.003)),
                                    launch=launch) for i in range(plan.repeats)])
        merged = merge_launch(acc, one, launch, seq)
        store.record_point(merged)
        return merged

    measure_launch.seen = seen
    return measure_launch


class FakeBuilder:
    OPTIONS = {"llama-bench": ["-m", "-t", "-r", "--cpu-strict", "--prio", "--poll"], "llama-server": ["-m"],
               "llama-fit-params": None}

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

        return SimpleNamespace(key=f"{sha[:9]}-cpu-0", backend="cpu", pin=sha[:9], commit=sha, dir=f"/nonexistent/{sha}",
                               manifest={"built_at": time.time() + 1, "options": self.OPTIONS,
                                         "timings": {"configure_s": 1.0, "build_s": 2.0,
                                                     "incremental": len(self.calls) > 1}})


def test_run_bisect_stores_starts_probes_the_culprits_change_and_renders(repo, env, monkeypatch, tmp_path) -> None:
    r, commits, _side = repo
    fake = _fake_measure_launch(5, commits)
    monkeypatch.setattr("llamaforge.bisect.session.measure_launch", fake)
    monkeypatch.setattr("llamaforge.bisect.quiet.physical_cores", lambda: 2)
    fb = FakeBuilder(broken={commits[6]})
    with Store(env.store_db) as store:
        run_id, res = bis.run_bisect(env, store, BisectRequest(good=commits[0], bad=commits[8], source=f"path:{r}"),
                                     builder=fb)
        assert res.first_bad == commits[5]
        run = store.get_run(run_id)
        assert run.kind == "bisect" and run.status == "done"
        s = run.summary.to_json()
        assert s["first_bad"] == commits[5] and s["subject"] == "commit 5 (slow)" and s["status"] == "found"
        assert s["culprit"]["confirmed"] and s["culprit"]["judgement"]["ratio"] < 0.7
        assert s["feasibility"]["feasible"] and s["endpoints"]["verdict"] == "differs"
        probes = store.probes(run_id)
        assert [p.commit_sha for p in probes] == fb.calls
        assert {p.verdict for p in probes} >= {"endpoint-good", "endpoint-bad", "skip"}
        points = {p.label: p for p in store.points(run_id)}
        assert set(points) == {p.commit_sha[:9] for p in probes if p.verdict != "skip"}
        assert all(len(p.launch_groups("tg_tps")) >= 3 for p in points.values())   # starts as launches
        assert sum(len(p.launch_groups("tg_tps")) for p in points.values()) == s["starts"]
        # the quieter settings: physical cores and the options this llama-bench lists, in the plan
        quiet = run.plan.bisect.quiet
        assert quiet["threads"] == 2 and quiet["args"] == ["--cpu-strict", "1", "--prio", "2", "--poll", "50"]
        assert all(x["threads"] == 2 and "--prio" in x["extra_args"] for x in fake.seen)
        assert run.plan.threads == 2
        md = bisect_kind.lead(store, run)
        assert commits[5] in md and "skip" in md and "does not build" in md and "![" in md
        assert f"commit {commits[5][:12]}: tg \u2212" in md and "95 % CI" in md and "spread" in md
        png = bisect_kind.plot(store, run, tmp_path / "out" / "bisect.png")
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        trace = start_trace(store, run, "tg_tps")          # every start in the order measured
        assert [sha for _t, sha, _verdict, _v in trace] == [x["sha"] for x in fake.seen]
        assert {verdict for _t, _sha, verdict, _v in trace} >= {"endpoint-good", "endpoint-bad", "bad"}
        rp = write_report(store, run_id, tmp_path / "report")
        assert rp.md.read_text().startswith(md.rstrip())
        assert [p.name for p in rp.pngs].count("probes.png") == 1 and [p.name for p in rp.pngs].count("starts.png") == 1


def test_run_bisect_stores_a_refusal_and_names_the_run(repo, env, monkeypatch) -> None:
    r, commits, _side = repo
    monkeypatch.setattr("llamaforge.bisect.session.measure_launch", _fake_measure_launch(5, commits, effect=0.003))
    fb = FakeBuilder()
    with Store(env.store_db) as store:
        with pytest.raises(BisectRefused) as e:
            bis.run_bisect(env, store, BisectRequest(good=commits[0], bad=commits[8], source=f"path:{r}"), builder=fb)
        run = store.list_runs("bisect")[-1]
        assert run.status == "refused" and run.summary.status == "refused"
        assert run.id in (e.value.fix or "") and "same within" in run.summary.reason
        assert fb.calls == [commits[0], commits[8]]
        md = bisect_kind.lead(store, store.get_run(run.id))
        assert "refused: " in md


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


def test_bisect_run_setup_error_exits_128_so_git_bisect_stops(tmp_path: Path) -> None:
    import sys

    (tmp_path / "notgit").mkdir()
    r = subprocess.run([sys.executable, "-c", "from llamaforge.cli import main; main()", "bisect-run", "--source",
                        str(tmp_path / "notgit"), "--good-value", "100", "--bad-value", "50"],
                       capture_output=True, text=True, cwd=tmp_path, timeout=120,
                       env={"PATH": "/usr/bin:/bin", "LLAMAFORGE_WORKSPACE": str(tmp_path), "HOME": str(tmp_path)})
    assert r.returncode == 128, r.stdout + r.stderr
    assert "not a git checkout" in r.stderr


@pytest.mark.parametrize("args, needle", [
    (["--max-launches", "1"], "--max-launches 1 is below the 3 starts"),
    (["--max-launches", "many"], "--max-launches"),
    (["--repeats", "0"], "--repeats 0 is out of range"),      # the options table's one line, as in every command
])
def test_bad_bisect_options_are_one_clear_line(tmp_path: Path, args: list[str], needle: str) -> None:
    import os
    import sys

    env = {**os.environ, "LLAMAFORGE_WORKSPACE": str(tmp_path), "LLAMAFORGE_RESULTS": str(tmp_path / "results"),
           "COLUMNS": "400"}
    env.pop("LLAMAFORGE_DEBUG", None)
    r = subprocess.run([sys.executable, "-m", "llamaforge", "bisect", "--good", "a", "--bad", "b", *args], cwd=tmp_path,
                       env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 2, (r.stdout, r.stderr)
    err = " ".join(r.stderr.split())
    assert "Traceback" not in r.stderr and err.startswith("error:") and "fix:" in err and needle in err, err
