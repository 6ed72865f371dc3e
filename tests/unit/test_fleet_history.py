"""fleet.history: the history.run options become the same glued argv on every host (backends per host),
bad values are refused before any host is contacted, each host's history and bisect runs are pulled back
under its machine name (one series per machine, culprits re-linked to the imported bisect runs), only
what is new or changed is pulled again, and a failing host is one row while the others finish.
The hosts are fakes (a store per host, the real export and agent listing); real SSH: test_fleet_real.py."""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from llamaforge import __version__
from llamaforge.bench.export import export_run
from llamaforge.errors import ConfigError, FleetError
from llamaforge.fleet import agent
from llamaforge.fleet import history as fh
from llamaforge.fleet.config import parse_fleet
from llamaforge.history.load import load_history
from llamaforge.history.site import publish
from llamaforge.paths import Paths
from llamaforge.records import HistorySummary, LaunchRecord, MachineRecord
from llamaforge.store import Point, Sample, Store

SETUP = "server p512 n64 r3"


# ---- argv -----------------------------------------------------------------------------------------
def test_history_options_become_glued_flags_with_each_hosts_backends():
    f = parse_fleet('[hosts.a]\ntarget = "a"\n[hosts.b]\ntarget = "b"\nbackends = ["cuda", "vulkan"]\n')
    a, b = f.select(None)
    opts = fh.history_options({"c": object(), "range": "0c1e57098..master", "every": "4", "continue_": True,
                               "bisect": True, "releases": False, "model": "-odd.gguf", "ncmoe": "0,8", "hosts": "a",
                               "fleet": None, "min_effect": "3%", "threads": "8"})
    assert opts == {"range": "0c1e57098..master", "every": "4", "continue": True, "bisect": True,
                    "model": "-odd.gguf", "ncmoe": "0,8", "min_effect": "3%"}
    assert fh.history_args(opts, fh.host_backend(a, opts)) == [
        "--range=0c1e57098..master", "--every=4", "--continue", "--bisect", "--model=-odd.gguf", "--ncmoe=0,8",
        "--min-effect=3%", "--backend=cpu"]
    assert fh.history_args(opts, fh.host_backend(b, opts))[-1] == "--backend=cuda,vulkan"
    assert fh.host_backend(b, {**opts, "backend": "cpu"}) == "cpu"    # --backend wins over fleet.toml


def test_a_hosts_threads_from_fleet_toml_reach_its_history_run_only():
    """``threads`` in fleet.toml is that host's ``--threads`` (hosts sharing cores, e.g. two on one box);
    a host without it leaves llama.cpp's threads to its own physical cores."""
    f = parse_fleet('[hosts.a]\ntarget = "a"\nthreads = 2\n[hosts.b]\ntarget = "b"\n')
    a, b = f.select(None)
    assert (a.threads, b.threads) == (2, None)
    opts = fh.history_options({"range": "x..y", "threads": "8"})      # the task's --threads is not passed on
    assert fh.history_args(opts, "cpu", a.threads) == ["--range=x..y", "--backend=cpu", "--threads=2"]
    assert fh.history_args(opts, "cpu", b.threads) == ["--range=x..y", "--backend=cpu"]


@pytest.mark.parametrize("opts, needle", [
    ({"range": "a..b", "every": "0"}, "--every must be at least 1"),
    ({"range": "a..b", "every": "x"}, "--every"),
    ({"range": "a..b", "backend": "cuda,opengl"}, "opengl"),
    ({"range": "a..b", "backend": "cpu,cpu"}, "give each backend once"),
    ({"releases": True, "commits": "abc1234"}, "exactly one of"),
    ({"range": "-x..b"}, "is not OLDER..NEWER"),
    ({"every": "2", "commits": "abc1234"}, "--every thins a --range"),
    ({"range": "a..b", "min_effect": "0"}, "--min-effect"),
    ({"range": "a..b", "min_launches": "1"}, "--min-launches must be at least 2"),
    ({"range": "a..b", "min_launches": "5", "max_launches": "3"}, "below --min-launches"),
    ({"range": "a..b", "engine": "vllm"}, "--engine"),
    ({"range": "a..b", "ncmoe": "-1"}, "--ncmoe"),
    ({"range": "a..b", "source": "ftp:x"}, "--source"),
])
def test_bad_history_options_are_refused_before_any_host(opts, needle, tmp_path, monkeypatch):
    f = parse_fleet('[hosts.a]\ntarget = "a"\n')
    monkeypatch.setattr(fh, "Remote", _unreachable_remote)
    with Store(tmp_path / "s.sqlite") as store, pytest.raises(ConfigError) as e:
        fh.history_all(store, Paths(tmp_path), f.select(None), opts)
    assert needle in str(e.value) and "\n" not in str(e.value)


def _unreachable_remote(h):
    raise AssertionError(f"host {h.name} contacted before the options were checked")


# ---- fake hosts -----------------------------------------------------------------------------------
def _history_run(store: Store, machine: str, machine_id: str, tg: dict[str, float], *, bisect: str | None = None,
                 status: str = "done") -> str:
    """A history run as ``history.run`` stores it: one build and point per commit, three starts each."""
    shas = list(tg)
    plan = {"model": {"ref": "synth:tiny"}, "backends": ["cpu"], "points": [{"ncmoe": 0}],
            "history": {"selection": "--commits " + ",".join(shas), "setup": SETUP, "min_effect": 0.05,
                        "commits": [{"sha": s, "order": int(s[1:]), "label": s, "subject": f"commit {s}"} for s in shas]}}
    run = store.new_run("history", plan, env={"machine": machine}, name="history")
    for sha, v in tg.items():
        key = f"{sha}-cpu-k"
        store.add_build({"key": key, "backend": "cpu", "commit": sha}, run)
        p = Point(run, key, "server", ncmoe=0, label=sha, prompt_tokens=512, n_predict=64)
        p.samples = [Sample(i, False, pp_tps=100.0 + i % 3, tg_tps=v * (1 + 0.004 * (i % 3) + 0.003 * (i // 3)),
                            launch=1 + i // 3) for i in range(9)]
        p.detail.launches = [LaunchRecord(launch=n, status="ok", machine=MachineRecord(id=machine_id, host="h"))
                             for n in (1, 2, 3)]
        store.record_point(p)
    mid = len(shas) // 2     # the step the tests plant: between the middle two commits
    culprits = [{"backend": "cpu", "point": "ncmoe=0", "metric": "tg", "before": shas[mid - 1], "after": shas[mid],
                 "culprit": shas[mid], "run": bisect, "status": "found"}] if bisect else []
    store.set_run_summary(run, HistorySummary(measured=shas, culprits=culprits))
    store.set_run_status(run, status)
    return run


def _bisect_run(store: Store, machine: str) -> str:
    rid = store.new_run("bisect", {"model": {"ref": "synth:tiny"}}, env={"machine": machine}, name="bisect")
    store.set_run_status(rid, "done")
    return rid


class FakeRemote:
    """A fleet host: its own workspace and store; ``history.run`` is the host's ``night`` (which stores
    runs and returns an exit status), ``export`` and the agent's listing are the real ones."""

    hosts: dict[str, dict[str, Any]] = {}

    def __init__(self, h: Any) -> None:
        self.host, self.cfg = h, FakeRemote.hosts[h.name]
        self.llamaforge = "llamaforge"

    def __enter__(self) -> FakeRemote:
        if self.cfg.get("unreachable"):
            raise FleetError(f"host {self.host.name} ({self.host.target}) is unreachable (refused)", "start sshd")
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    @property
    def workspace(self) -> str:
        return str(self.cfg["ws"])

    def ws(self, *parts: str) -> str:
        return str(Path(self.workspace, *parts))

    def env(self) -> dict[str, str]:
        return {"LLAMAFORGE_MACHINE": self.host.machine}

    def _store(self) -> Store:
        return Store(Path(self.workspace) / "results" / "llamaforge.sqlite")

    def put(self, local: Path, remote: str) -> None:
        shutil.copy(local, remote)

    def get(self, remote: str, local: Path) -> None:
        local.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(remote, local)

    def mkdir(self, path: str) -> None:
        Path(path).mkdir(parents=True, exist_ok=True)

    def agent(self, command: str, *args: str) -> dict:
        if command == "info":
            return {"version": __version__}
        if command == "sha256":
            return agent.sha256(args[0])
        assert command == "history-runs"
        with self._store() as s:
            return agent.history_listing(s)

    def run(self, argv: list[str], *, stream: Any = None, check: bool = True, **kw: Any) -> Any:
        self.cfg["calls"].append(list(argv))
        with self._store() as s:
            if argv[1] == "history.run":
                code = self.cfg["night"](s, self.host)
                if code:
                    stream.write("error: llama.cpp did not build  fix: see the build log\n")
                return SimpleNamespace(exited=code, stdout="", stderr="")
            assert argv[1] == "export"
            flags = dict(a[2:].split("=", 1) for a in argv[2:])
            Path(flags["output"]).write_text(export_run(s, flags["run"], "json"))
            return SimpleNamespace(exited=0, stdout="", stderr="")


def _fleet(tmp_path: Path, monkeypatch, nights: dict[str, Any], extra: str = "") -> tuple[Any, Paths]:
    body = "".join(f'[hosts.{n}]\ntarget = "{n}"\nmachine = "box-{n}"\n' for n in nights) + extra
    f = parse_fleet(body)
    FakeRemote.hosts = {}
    for n, night in nights.items():
        (tmp_path / f"ws-{n}").mkdir()
        FakeRemote.hosts[n] = {"ws": tmp_path / f"ws-{n}", "night": night, "calls": []}
    monkeypatch.setattr(fh, "Remote", FakeRemote)
    ws = tmp_path / "controller"
    ws.mkdir()
    (ws / "pins.toml").write_text("")
    return f, Paths(ws)


def _exports(host: str) -> list[str]:
    return [next(a.split("=", 1)[1] for a in c if a.startswith("--run=")) for c in FakeRemote.hosts[host]["calls"]
            if c[1] == "export"]


def _night(tg: dict[str, float], *, bisect: bool = False):
    def night(store: Store, h: Any) -> int:
        _history_run(store, h.machine, f"id-{h.name}", tg, bisect=_bisect_run(store, h.machine) if bisect else None)
        return 0
    return night


def _nothing(store: Store, h: Any) -> int:
    return 0


# ---- import -----------------------------------------------------------------------------------------
def test_two_hosts_become_two_series_one_machine_each_with_culprits_relinked(tmp_path, monkeypatch):
    f, paths = _fleet(tmp_path, monkeypatch, {
        "a": _night({"c1": 10.0, "c2": 10.0, "c3": 8.0, "c4": 8.0}, bisect=True),
        "b": _night({"c1": 20.0, "c2": 20.0, "c3": 20.0, "c4": 20.0})})
    opts = {"commits": "c1,c2,c3,c4", "bisect": True}
    with Store(paths.store_db) as store:
        outs = fh.history_all(store, paths, f.select(None), opts)
        assert [(o.host, o.machine, o.status, o.measured, o.located) for o in outs] == [
            ("a", "box-a", "ok", 4, 1), ("b", "box-b", "ok", 4, 0)]
        a, b = outs
        assert len(a.runs) == len(a.new) == 1 and len(a.bisects) == 1 and len(b.runs) == 1 and b.bisects == []
        for o in outs:   # one machine per host: its name (fleet.toml) and its starts' machine id
            run = store.get_run(o.runs[0])
            assert run.kind == "history" and run.id.endswith(f".{o.machine}") and run.env.machine == o.machine
            assert run.plan.fleet.host == o.host and run.plan.fleet.remote_run == run.id.rsplit(".", 1)[0]
            ids = {ln.machine_id for p in store.points(run.id) for ln in p.launches}
            assert ids == {f"id-{o.host}"}
        culprit = store.get_run(a.runs[0]).summary_as(HistorySummary).culprits[0]
        assert culprit["run"] == a.bisects[0] and store.get_run(a.bisects[0]).kind == "bisect"

        hist = load_history(store)
        assert {s.key.machine for s in hist.series} == {"box-a", "box-b"}
        tg = {s.key.machine: s for s in hist.series if s.key.metric == "tg"}
        assert [lv.sha for lv in tg["box-a"].levels] == ["c1", "c2", "c3", "c4"]
        assert all(len(lv.starts) == 3 for s in tg.values() for lv in s.levels)
        assert {s.key.setup for s in hist.series} == {SETUP}
        site = publish(hist, tmp_path / "site")       # both hosts in one site
        data = (tmp_path / "site" / "history.json").read_text()
        assert site.n_series == len(hist.series) and '"box-a"' in data and '"box-b"' in data
        step = tg["box-a"].steps[0]                   # the step's culprit links the imported bisect run
        assert (step.before, step.after, step.culprit, step.bisect_run) == ("c2", "c3", "c3", a.bisects[0])
        assert a.bisects[0] in data and not tg["box-b"].steps
    for host, backend in (("a", "cpu"), ("b", "cpu")):
        run_argv = FakeRemote.hosts[host]["calls"][0]
        assert run_argv == ["llamaforge", "history.run", "--commits=c1,c2,c3,c4", "--bisect", f"--backend={backend}"]


def test_only_new_or_changed_runs_are_pulled_again_and_nothing_is_doubled(tmp_path, monkeypatch):
    nights = {"a": _night({"c1": 10.0, "c2": 10.0}), "b": _night({"c1": 20.0, "c2": 20.0})}
    f, paths = _fleet(tmp_path, monkeypatch, nights)
    with Store(paths.store_db) as store:
        first = fh.history_all(store, paths, f.select(None), {"commits": "c1,c2"})
        samples = store.db.execute("SELECT COUNT(*) FROM samples").fetchone()[0]
        FakeRemote.hosts["a"]["night"] = _night({"c3": 9.0})     # a: one new commit
        FakeRemote.hosts["b"]["night"] = _nothing                # b: nothing new (--continue)
        for h in FakeRemote.hosts.values():
            h["calls"].clear()
        a, b = fh.history_all(store, paths, f.select(None), {"commits": "c1,c2,c3", "continue": True})
        assert (a.status, b.status) == ("ok", "ok")
        assert len(_exports("a")) == 1 and _exports("b") == []
        assert a.new == [a.runs[0]] and a.new[0] not in first[0].runs and b.new == [] and b.measured == 0
        assert store.db.execute("SELECT COUNT(*) FROM samples").fetchone()[0] == samples + 9
        with Store(tmp_path / "ws-b" / "results" / "llamaforge.sqlite") as rb:   # a run changed on the host
            old = rb.list_runs("history")[0].id
            rb.set_run_summary(old, HistorySummary(measured=["c1", "c2"], culprits=[]))
        FakeRemote.hosts["a"]["night"] = _nothing
        for h in FakeRemote.hosts.values():
            h["calls"].clear()
        fh.history_all(store, paths, f.select(None), {"commits": "c1,c2,c3", "continue": True})
        assert _exports("a") == [] and _exports("b") == [old]
        assert store.db.execute("SELECT COUNT(*) FROM samples").fetchone()[0] == samples + 9
        assert len(store.list_runs("history")) == 3


def test_a_failing_host_is_one_row_and_what_it_stored_is_still_imported(tmp_path, monkeypatch):
    def broken(store: Store, h: Any) -> int:
        _history_run(store, h.machine, "id-a", {"c1": 10.0}, status="interrupted")
        return 2

    f, paths = _fleet(tmp_path, monkeypatch, {"a": broken, "b": _night({"c1": 20.0}), "c": _nothing})
    FakeRemote.hosts["c"]["unreachable"] = True
    with Store(paths.store_db) as store:
        a, b, c = fh.history_all(store, paths, f.select(None), {"commits": "c1"})
        assert (a.status, b.status, c.status) == ("failed", "ok", "failed")
        assert "history.run failed: error: llama.cpp did not build" in a.error and "--continue" in a.fix
        assert len(a.runs) == 1 and store.get_run(a.runs[0]).status == "interrupted"
        assert "unreachable" in c.error and c.fix == "start sshd" and c.runs == []
        assert {s.key.machine for s in load_history(store).series} == {"box-a", "box-b"}


def test_a_pulled_export_of_another_run_is_refused(tmp_path, monkeypatch):
    f, paths = _fleet(tmp_path, monkeypatch, {"a": _night({"c1": 10.0}), "b": _night({"c1": 20.0})})
    real = FakeRemote.run

    def swap(self, argv, **kw):   # host a's export holds another run than the one asked for
        if argv[1] == "export" and self.host.name == "a":
            with self._store() as s:
                other = _history_run(s, "box-a", "id-a", {"c9": 1.0})
            argv = [a if not a.startswith("--run=") else f"--run={other}" for a in argv]
        return real(self, argv, **kw)

    monkeypatch.setattr(FakeRemote, "run", swap)
    with Store(paths.store_db) as store:
        a, b = fh.history_all(store, paths, f.select(None), {"commits": "c1"})
        assert a.status == "failed" and "holds run" in a.error and b.status == "ok"


# ---- the task -----------------------------------------------------------------------------------------
def test_fleet_history_prints_one_row_per_host_and_fails_in_one_line(tmp_path, monkeypatch, capsys):
    from llamaforge.cli import program

    f, paths = _fleet(tmp_path, monkeypatch, {"a": _night({"c1": 10.0}), "b": _nothing})
    FakeRemote.hosts["b"]["unreachable"] = True
    ws = paths.workspace
    (ws / "fleet.toml").write_text('[hosts.a]\ntarget = "a"\nmachine = "box-a"\n[hosts.b]\ntarget = "b"\n'
                                   'machine = "box-b"\n')
    monkeypatch.setenv("LLAMAFORGE_WORKSPACE", str(ws))
    monkeypatch.setenv("COLUMNS", "200")
    from llamaforge import console as con

    monkeypatch.setattr(con.console, "width", 200)   # created at import: COLUMNS set here comes too late
    with pytest.raises(SystemExit) as e:
        program.run(["llamaforge", "fleet.history", "--commits", "c1", "--continue"], exit=True)
    out, err = capsys.readouterr()
    assert e.value.code == 2 and "1 of 2 host(s) failed" in err and len(err.strip().splitlines()) == 1, err
    assert re.search(r"│ a\s+│ box-a\s+│ ok\s+│ \S+\.box-a\s+│ 1 ", out), out
    assert re.search(r"│ b\s+│ box-b\s+│ failed .*unreachable", out), out
    assert FakeRemote.hosts["a"]["calls"][0] == ["llamaforge", "history.run", "--commits=c1", "--continue",
                                                 "--backend=cpu"]

    for h in FakeRemote.hosts.values():
        h["calls"].clear()
    with pytest.raises(SystemExit) as e:
        program.run(["llamaforge", "fleet.history", "--range", "a..b", "--every", "0"], exit=True)
    err = capsys.readouterr().err
    assert e.value.code == 2 and "--every must be at least 1" in err and len(err.strip().splitlines()) == 1
    assert all(not h["calls"] for h in FakeRemote.hosts.values())
