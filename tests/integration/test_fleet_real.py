"""Fleet over a real OpenSSH server on 127.0.0.1 (tests/sshd_local.py: own host key, own user key, a free
non-default port, no system configuration): two hosts with their own workspaces (``alpha`` by address,
``beta-box`` by the name ``localhost``) and a third whose port refuses connections.

install (a wheel of this checkout into each workspace's venv), doctor (hosts × backends), build (both
hosts share the warm test build root through fleet.toml's env: cache hits, no cold build), a tiny-model
sweep on both (the synthetic model made on each host), the merged local store, the cross-machine report
and the refused host recorded while the others finish; ``--resume`` re-tries only that host and
duplicates nothing. The CLI runs as a child process, exactly as a user runs it.
"""

from __future__ import annotations

import json
import os
import platform
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from llamaforge import __version__
from llamaforge.store import Store

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests"))
from chromium_render import CHROMIUM, render_in_chromium  # noqa: E402
from sshd_local import free_port, local_sshd, sshd_binary  # noqa: E402


def _cli(ws: Path, *args: str, timeout: float = 900) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LLAMAFORGE_")}
    env.update(LLAMAFORGE_WORKSPACE=str(ws), PYTHONPATH=str(REPO / "src"), COLUMNS="250", NO_COLOR="1")
    return subprocess.run([sys.executable, "-m", "llamaforge", *args], cwd=ws, env=env, capture_output=True,
                          text=True, timeout=timeout)


@pytest.fixture(scope="module")
def fleet_ws(tmp_path_factory, cpu_build):
    if sshd_binary() is None:
        pytest.skip("sshd is not installed (apt-get install openssh-server; scripts/setup.sh does it)")
    tmp = tmp_path_factory.mktemp("fleet")
    build_root = os.environ.get("LLAMAFORGE_BUILD_ROOT") or str(Path.home() / ".cache/llamaforge/test-builds")
    assert Path(cpu_build.dir).is_relative_to(build_root)   # the warm build both hosts must hit
    with local_sshd(tmp / "sshd") as sshd:
        ws = tmp / "controller"
        ws.mkdir()
        kh = tmp / "known_hosts"   # alpha and nopython: strict, their key added by ssh-keyscan; beta: accept-new
        kh.write_text(subprocess.run(["ssh-keyscan", "-p", str(sshd.port), "127.0.0.1"], capture_output=True,
                                     text=True, check=True, timeout=30).stdout)
        shutil.copy(REPO / "pins.toml", ws / "pins.toml")
        hosts = []
        for name, addr, machine, policy in (("alpha", "127.0.0.1", "alpha", "strict"),
                                            ("beta", "localhost", "beta-box", "accept-new")):
            # the build root is the host's own setting (fleet.toml may not choose what runs there): its workspace's
            # llamaforge.toml, written on the host before fleet.install
            (tmp / f"ws-{name}").mkdir()
            (tmp / f"ws-{name}" / "llamaforge.toml").write_text(f'[paths]\nbuilds = "{build_root}"\n')
            hosts.append(f"""
[hosts.{name}]
target = "{sshd.user}@{addr}:{sshd.port}"
host_key = "{policy}"
known_hosts = "{kh}"
workspace = "{tmp / ('ws-' + name)}"
machine = "{machine}"
identity = "{sshd.user_key}"
python = "{sys.executable}"
system_site_packages = true
threads = 1
[hosts.{name}.env]
LLAMAFORGE_LOCK_DIR = "{tmp / ('lock-' + name)}"
""")
        hosts.append(f'[hosts.refused]\ntarget = "{sshd.user}@127.0.0.1:{free_port()}"\nidentity = "{sshd.user_key}"\n')
        hosts.append(f'[hosts.nopython]\ntarget = "{sshd.user}@127.0.0.1:{sshd.port}"\nidentity = "{sshd.user_key}"\n'
                     f'workspace = "{tmp / "ws-nopython"}"\npython = "/nonexistent/python3"\nknown_hosts = "{kh}"\n')
        (ws / "fleet.toml").write_text("\n".join(hosts))
        yield ws, tmp


def test_install_doctor_and_build_on_two_hosts_with_a_refused_one(fleet_ws):
    ws, tmp = fleet_ws
    r = _cli(ws, "fleet.install")
    out = r.stdout + r.stderr
    assert r.returncode == 2, out
    for name in ("alpha", "beta"):   # the install table: one row per host with its llamaforge and Python
        row = next(ln for ln in r.stdout.splitlines() if re.match(rf"^│ {name} ", ln))
        assert f"│ {__version__} " in row and f"│ {platform.python_version()} " in row, row
    assert "host refused (" in out and "is unreachable" in out and "Traceback" not in out, out
    assert "host nopython has no Python at '/nonexistent/python3'" in out, out
    for name in ("alpha", "beta"):
        assert (tmp / f"ws-{name}" / "venv" / "bin" / "llamaforge").is_file()
        assert (tmp / f"ws-{name}" / "pins.toml").read_text() == (ws / "pins.toml").read_text()

    r = _cli(ws, "fleet.doctor", "--hosts", "alpha,beta")
    assert r.returncode == 0, r.stdout + r.stderr
    rows = [ln for ln in r.stdout.splitlines() if "│ cpu" in ln]
    assert len(rows) == 2 and all("yes" in ln for ln in rows), r.stdout

    r = _cli(ws, "fleet.build", "--hosts", "alpha,beta", "--backends", "cpu", timeout=1200)
    assert r.returncode == 0, r.stdout + r.stderr
    cached = [ln for ln in r.stdout.splitlines() if "cached cpu build" in ln]
    assert {ln.split("│")[0].strip() for ln in cached} >= {"alpha", "beta"}, r.stdout

    r = _cli(ws, "fleet.doctor", "--hosts", "alpha,nosuch")
    assert r.returncode == 2 and "unknown host 'nosuch'" in r.stderr and len(r.stderr.strip().splitlines()) == 1

    init = next((tmp / "ws-beta" / "venv").glob("lib/python*/site-packages/llamaforge/__init__.py"))
    good = init.read_text()
    init.write_text(good.replace(f'__version__ = "{__version__}"', '__version__ = "0.0.0-other"'))
    try:   # a host with another llamaforge is refused with one line naming both versions and the fix
        r = _cli(ws, "fleet.build", "--hosts", "beta", "--backends", "cpu")
        assert r.returncode == 2, r.stdout + r.stderr
        assert f"host beta runs llamaforge 0.0.0-other, this checkout is {__version__}" in r.stderr
        assert "fleet.install" in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    finally:
        init.write_text(good)


def test_bench_on_both_hosts_merges_into_one_store_and_one_cross_machine_report(fleet_ws):
    ws, tmp = fleet_ws
    args = ["fleet.bench", "--hosts", "alpha,beta,refused", "--model", "synth:tiny-qwen35moe", "--backends", "cpu", "--ncmoe", "0,8", "--repeats", "2",
            "--launches", "1", "--prompt-tokens", "64", "--n-predict", "8", "--threads", "1"]
    r = _cli(ws, *args, timeout=1500)
    out = r.stdout + r.stderr
    assert r.returncode == 2 and "1 host(s) failed" in r.stderr and "host refused" in r.stderr, out
    assert "Traceback" not in out
    with Store(ws / "results" / "llamaforge.sqlite") as store:
        fleet = store.list_runs(kind="fleet")[-1]
        hosts = fleet.summary.hosts
        assert (hosts["alpha"]["status"], hosts["beta"]["status"], hosts["refused"]["status"]) == ("ok", "ok", "failed")
        assert "unreachable" in hosts["refused"]["error"]
        counts = {}
        for name, machine in (("alpha", "alpha"), ("beta", "beta-box")):
            run = store.get_run(hosts[name]["run"])
            assert run.id.endswith("." + machine) and run.env.machine == machine and run.status == "done"
            assert run.plan.fleet.run == fleet.id and run.plan.model.ref == "synth:tiny-qwen35moe"
            pts = store.points(run.id)
            assert sorted(p.ncmoe for p in pts) == [0, 8] and all(p.status == "ok" for p in pts), pts
            assert all(len(p.measured("tg_tps")) == 2 and len(p.measured("pp_tps")) == 2 for p in pts)
            export = Path(hosts[name]["export"])
            assert export.is_file() and json.loads(export.read_text())["run"]["id"] == run.plan.fleet.remote_run
            counts[name] = len(pts)
        n_samples = store.db.execute("SELECT COUNT(*) FROM samples").fetchone()[0]

    r = _cli(ws, "fleet.bench", "--resume", fleet.id, timeout=600)   # only the refused host is tried again
    assert r.returncode == 2 and "host refused" in r.stderr, r.stdout + r.stderr
    assert re.search(r"^refused\s+│", r.stdout, re.M), r.stdout
    assert not re.search(r"^(alpha|beta)\s+│", r.stdout, re.M), r.stdout
    with Store(ws / "results" / "llamaforge.sqlite") as store:
        assert store.db.execute("SELECT COUNT(*) FROM samples").fetchone()[0] == n_samples
        assert len(store.list_runs(kind="fleet")) == 1

    r = _cli(ws, "report", fleet.id, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    md = (ws / "results" / "reports" / fleet.id / "report.md").read_text()
    assert "| alpha · CPU |" in md and "| beta-box · CPU |" in md
    assert "alpha · CPU/beta-box · CPU" in md    # the cross-machine ratio with its significance mark
    if CHROMIUM and Path(CHROMIUM).exists():
        dom = render_in_chromium(ws / "results" / "reports" / fleet.id / "report.html", tmp / "profile",
                                 tmp / "fleet-report.png")
        assert "alpha · CPU" in dom and "beta-box · CPU" in dom and dom.count("<table>") >= 4


def test_history_on_two_hosts_is_one_series_per_machine_and_continue_pulls_nothing_new(fleet_ws, cpu_build):
    """fleet.history over two real commits of the bisect fixture (a local "upstream", ``--source path:``) on
    alpha and beta (sharing the warm incremental build tree through the build root; one thread each, from
    fleet.toml: both run at once on this machine's cores, and two spinning thread pools on two cores take
    ~40 s a start instead of ~2) and the refused host:
    each host's history run pulled back under its machine name, two series in ``history.show``; a second
    ``--continue`` measures and pulls nothing and doubles no sample."""
    sys.path.insert(0, str(Path(__file__).parent))
    from fixture_repo import make_fixture

    from llamaforge.history.load import load_history

    ws, tmp = fleet_ws
    fx = make_fixture(cpu_build.source_dir)
    args = ["fleet.history", "--hosts", "alpha,beta,refused", "--range", f"{fx.commits[0]}..{fx.commits[1]}",
            "--source", fx.spec, "--backend", "cpu", "--model", "synth:tiny-qwen35moe", "--repeats", "2",
            "--min-launches", "2", "--max-launches", "2", "--prompt-tokens", "64", "--n-predict", "8", "--continue"]
    r = _cli(ws, *args, timeout=2400)
    out = r.stdout + r.stderr
    assert r.returncode == 2 and "1 of 3 host(s) failed" in r.stderr and "Traceback" not in out, out
    assert re.search(r"^│ refused\s+│.*failed.*unreachable", r.stdout, re.M), r.stdout
    with Store(ws / "results" / "llamaforge.sqlite") as store:
        runs = {r.plan.fleet.host: r for r in store.list_runs("history") if r.plan.fleet}
        assert set(runs) == {"alpha", "beta"}, runs
        for host, machine in (("alpha", "alpha"), ("beta", "beta-box")):
            run = runs[host]
            assert run.id.endswith("." + machine) and run.env.machine == machine and run.status == "done"
            assert run.summary.measured == fx.commits[:2] and not run.summary.failed
        hist = load_history(store)
        tg = {s.key.machine: s for s in hist.series if s.key.metric == "tg"}
        assert set(tg) == {"alpha", "beta-box"}, [s.key for s in hist.series]
        assert all([lv.sha for lv in s.levels] == fx.commits[:2] and all(len(lv.starts) == 2 for lv in s.levels)
                   for s in tg.values())
        n_samples = store.db.execute("SELECT COUNT(*) FROM samples").fetchone()[0]

    r = _cli(ws, *[a if a != "alpha,beta,refused" else "alpha,beta" for a in args], timeout=900)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "nothing new to measure" in r.stdout and "0 history, 0 bisect" in r.stdout, r.stdout
    with Store(ws / "results" / "llamaforge.sqlite") as store:
        assert store.db.execute("SELECT COUNT(*) FROM samples").fetchone()[0] == n_samples
        assert len([r for r in store.list_runs("history") if r.plan.fleet]) == 2
    r = _cli(ws, "history.show", "--metric", "tg")
    assert r.returncode == 0 and "alpha" in r.stdout and "beta-box" in r.stdout, r.stdout + r.stderr


def test_compare_one_build_on_two_hosts(fleet_ws):
    ws, tmp = fleet_ws
    r = _cli(ws, "compare", "--base", "default", "--backend", "cpu", "--base-host", "alpha", "--head-host", "beta",
             "--ncmoe", "0", "--repeats", "2", "--launches", "4", "--prompt-tokens", "64", "--n-predict", "8",
             "--threads", "1", timeout=1200)
    out = r.stdout + r.stderr
    assert r.returncode == 0 and "Traceback" not in out, out
    assert "not interleaved across machines" in out and "on alpha vs" in out and "on beta-box" in out, out
    with Store(ws / "results" / "llamaforge.sqlite") as store:
        run = store.list_runs(kind="compare")[-1]
        c = run.plan.compare.to_json()
        assert (c["A"]["machine"], c["B"]["machine"]) == ("alpha", "beta-box") and c["A"]["commit"] == c["B"]["commit"]
        for side in ("A", "B"):   # 4 server starts per side on its host: the test's n
            pts = store.points(c[side]["run"])
            assert len(pts) == 1 and len(pts[0].launch_groups("tg_tps")) == 4, pts
        rows = run.summary.comparisons
        assert {r["metric"] for r in rows} >= {"tg", "pp"} and all(r["comparison"] for r in rows if r["metric"] == "tg")
        assert all(r["A"]["shape"].startswith("4") for r in rows if r["A"])
    r = _cli(ws, "report", run.id, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    md = (ws / "results" / "reports" / run.id / "report.md").read_text()
    assert "machine **alpha**" in md and "machine **beta-box**" in md and "not interleaved across machines" in md


def _leftovers(workspace: Path) -> list[str]:
    """Processes (the remote sweep, its llama-servers) that run for ``workspace`` (their environment says so)."""
    import psutil

    out = []
    for p in psutil.process_iter(["pid", "cmdline"]):
        try:
            if p.environ().get("LLAMAFORGE_WORKSPACE") == str(workspace):
                out.append(f"{p.pid}: {' '.join(p.info['cmdline'] or [])[:120]}")
        except (psutil.Error, OSError):
            continue
    return out


def test_killing_the_controller_stops_the_remote_sweep_and_resume_completes_it(fleet_ws):
    import signal
    import sqlite3
    import time

    ws, tmp = fleet_ws
    remote_ws = tmp / "ws-alpha"
    t0 = time.time()
    env = {k: v for k, v in os.environ.items() if not k.startswith("LLAMAFORGE_")}
    env.update(LLAMAFORGE_WORKSPACE=str(ws), PYTHONPATH=str(REPO / "src"), COLUMNS="250", NO_COLOR="1")
    log = (tmp / "controller.log").open("w")
    ctl = subprocess.Popen([sys.executable, "-m", "llamaforge", "fleet.bench", "--hosts", "alpha", "--model",
                            "synth:tiny-qwen35moe", "--backends", "cpu", "--ncmoe", "0,2,4,6,8", "--repeats", "2",
                            "--launches", "1", "--prompt-tokens", "64", "--n-predict", "8", "--threads", "1"],
                           cwd=ws, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)

    def remote_points() -> int:
        try:
            with sqlite3.connect(f"file:{remote_ws / 'results' / 'llamaforge.sqlite'}?mode=ro", uri=True) as db:
                return db.execute("SELECT COUNT(*) FROM points p JOIN runs r ON p.run_id=r.id WHERE r.name LIKE"
                                  " 'fleet-%-alpha' AND r.created > ?", (t0,)).fetchone()[0]
        except sqlite3.Error:
            return 0

    try:
        deadline = time.monotonic() + 600
        while remote_points() < 1:
            assert ctl.poll() is None, (tmp / "controller.log").read_text()
            assert time.monotonic() < deadline, "the remote sweep stored no point in 10 minutes"
            time.sleep(0.3)
        assert _leftovers(remote_ws), "the remote sweep is not running while its first point is stored?"
    finally:
        os.killpg(ctl.pid, signal.SIGKILL)   # the controller dies without a word: only the lost connection tells
        ctl.wait()
        log.close()
    n_before = remote_points()
    assert n_before < 5, "the sweep finished before the controller was killed: nothing to resume"
    deadline = time.monotonic() + 30
    while (left := _leftovers(remote_ws)) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not left, f"the remote sweep outlived the lost connection: {left}"

    with Store(ws / "results" / "llamaforge.sqlite") as store:
        fid = store.list_runs(kind="fleet")[-1].id
    r = _cli(ws, "fleet.bench", "--resume", fid, timeout=900)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "resuming run" in r.stdout, r.stdout
    with Store(ws / "results" / "llamaforge.sqlite") as store:
        run = store.get_run(fid)
        assert run.status == "done"
        pts = store.points(run.summary.hosts["alpha"]["run"])
        assert sorted(p.ncmoe for p in pts) == [0, 2, 4, 6, 8] and all(p.status == "ok" for p in pts)
        assert all(len(p.measured("tg_tps")) == 2 for p in pts)   # the interrupted point re-measured, none doubled
    assert not _leftovers(remote_ws)


def test_a_detached_sweep_outlives_the_controller_and_resume_collects_it(fleet_ws):
    import time

    ws, tmp = fleet_ws
    r = _cli(ws, "fleet.bench", "--hosts", "beta", "--detach", "--model", "synth:tiny-qwen35moe", "--backends", "cpu",
             "--ncmoe", "0,8", "--repeats", "2", "--launches", "1", "--prompt-tokens", "64", "--n-predict", "8",
             "--threads", "1")
    assert r.returncode == 0 and "detached" in r.stdout, r.stdout + r.stderr
    with Store(ws / "results" / "llamaforge.sqlite") as store:
        fid = store.list_runs(kind="fleet")[-1].id
        assert store.get_run(fid).summary.hosts["beta"]["status"] == "detached"
    deadline = time.monotonic() + 600
    while True:   # the controller is gone between calls; the sweep keeps measuring on the host
        r = _cli(ws, "fleet.bench", "--resume", fid)
        assert r.returncode == 0, r.stdout + r.stderr
        with Store(ws / "results" / "llamaforge.sqlite") as store:
            run = store.get_run(fid)
        if run.status == "done":
            break
        assert "still being measured" in r.stdout and time.monotonic() < deadline, r.stdout
        time.sleep(3)
    with Store(ws / "results" / "llamaforge.sqlite") as store:
        pts = store.points(run.summary.hosts["beta"]["run"])
        assert sorted(p.ncmoe for p in pts) == [0, 8] and all(len(p.measured("tg_tps")) == 2 for p in pts)
    assert not _leftovers(tmp / "ws-beta")
