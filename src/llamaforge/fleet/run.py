"""Fleet operations: install, doctor, build and bench on every host at once.

``bench`` makes a local run of kind ``fleet`` (its plan: the hosts, their machine names and the bench
options; its summary: each host's status, error, imported run and export checksum). Per host, one job:
check the host's llamaforge version, copy ``pins.toml``, start the sweep as ``llamaforge bench --name
fleet-<fleet run>-<host>`` (or ``--resume`` it when the host already has that run unfinished) in a pty,
so a lost connection hangs it up (SIGHUP: the sweep kills its servers and exits; the host lock is
the host's own), export the run, pull the export back, check its sha256 and import it
(:mod:`llamaforge.fleet.merge`). ``--resume FLEET_RUN`` repeats this for hosts that are not done.
``--detach`` starts the sweeps in their own sessions and returns; ``--resume`` collects them later.
"""

from __future__ import annotations

import posixpath
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..bench.cli_options import convert
from ..errors import FleetError
from ..paths import Paths
from ..pathsafe import component, under
from ..records import FleetSection, FleetSummary, RunPlan
from ..store import Store
from . import BENCH_PASS
from .config import Fleet, FleetHost
from .install import check_version, file_sha256, install
from .jobs import LineSink, Outcome, Progress, for_each_host
from .merge import import_run, parse_export
from .remote import Remote

FLEET_KIND = "fleet"
_DETACH_SH = 'exec "$@" >"$LLAMAFORGE_FLEET_LOG" 2>&1 </dev/null'


def option_args(options: dict[str, Any]) -> list[str]:
    """``{"ncmoe": "0:8:4", "allow_busy": True, "seed": None}`` → ``["--ncmoe=0:8:4", "--allow-busy"]``:
    each value glued to its flag (a value starting with "-" stays a value); None/False are left out; a
    list repeats the flag."""
    out = []
    for k, v in options.items():
        if v is None or v is False:
            continue
        flag = "--" + k.replace("_", "-")
        if isinstance(v, list | tuple):   # a repeatable option: the flag once per value
            out += [f"{flag}={x}" for x in v]
        else:
            out.append(flag if v is True else f"{flag}={v}")
    return out


def remote_run_name(fleet_run: str, host: str) -> str:
    return f"fleet-{fleet_run}-{host}"


def host_backends(h: FleetHost, backends: str | None) -> str:
    return backends or ",".join(h.backends) or "cpu"


# ---- install / doctor / build ---------------------------------------------------------------
def install_all(hosts: list[FleetHost], wheel: Path, pins_file: Path, progress: Progress | None) -> list[Outcome]:
    def job(h: FleetHost, sink: LineSink) -> dict:
        with Remote(h) as r:
            sink.line(f"installing {wheel.name} into {r.ws('venv')}")
            info = install(r, wheel, pins_file, log=sink)
            sink.line(f"llamaforge {info.get('version')} (Python {info.get('python')}) installed")
            return info

    return list(for_each_host(hosts, job, progress))


def doctor_all(hosts: list[FleetHost], progress: Progress | None) -> list[Outcome]:
    def job(h: FleetHost, sink: LineSink) -> dict:
        with Remote(h) as r:
            check_version(r)
            sink.line("checking backends")
            out = r.agent("doctor")
            sink.line("done")
            return out

    return list(for_each_host(hosts, job, progress))


def build_all(hosts: list[FleetHost], pins_file: Path, backends: str | None, options: dict[str, Any],
              progress: Progress | None) -> list[Outcome]:
    def job(h: FleetHost, sink: LineSink) -> list[str]:
        with Remote(h) as r:
            check_version(r)
            r.put(pins_file, r.ws("pins.toml"))
            argv = [r.llamaforge, "build", f"--backends={host_backends(h, backends)}", *option_args(options)]
            r.run(argv, cwd=r.workspace, env=r.env(), stream=sink, pty=True, what="llamaforge build")
            # the build's own verdicts ("cached cpu build KEY ...", "built ...") lead the summary
            return [x for x in sink.tail if x.startswith(("cached ", "built "))] or list(sink.tail)[-1:]

    return list(for_each_host(hosts, job, progress))


# ---- bench ------------------------------------------------------------------------------------
def _start_fleet_run(store: Store, fleet: Fleet, hosts: list[FleetHost], backends: str | None,
                     options: dict[str, Any], command: str | None, name: str | None) -> str:
    plan = RunPlan(fleet=FleetSection(file=str(fleet.path) if fleet.path else None,
                                      hosts={h.name: {"machine": h.machine, "target": str(h.target)} for h in hosts}
                                      ).keep_nulls("file"),
                   bench_args=option_args(options), host_backends={h.name: host_backends(h, backends) for h in hosts})
    run_id = store.new_run(FLEET_KIND, plan, command=command, name=name, env={})
    store.set_run_summary(run_id, FleetSummary(hosts={h.name: {"machine": h.machine, "status": "pending"} for h in hosts}))
    return run_id


def check_stored_bench_args(run_id: str, plan: RunPlan) -> None:
    """A resumed fleet run's stored host command lines, checked as data (a store is data): only options
    ``fleet.bench`` passes (never ``--bin-dir``), ``--extra`` through the allow-list, backends by name."""
    from ..backends import parse as parse_backends

    fix = "start a new fleet run with `inv fleet.bench` (a store is data: its host command lines are checked)"
    args = plan.bench_args
    if not isinstance(args, list):
        raise FleetError(f"fleet run {run_id} has no stored host options", fix)
    allowed = {"--" + k.replace("_", "-"): k for k in BENCH_PASS}
    for a in args:
        flag, eq, value = str(a).partition("=")
        if flag not in allowed:
            raise FleetError(f"fleet run {run_id}'s stored host options include {str(a)[:80]!r}, which "
                             "fleet.bench never passes", fix)
        if eq:       # a value: through its row of the bench options table (numbers in bounds, --extra allow-listed)
            convert({allowed[flag]: value})
    for backends in (plan.host_backends or {}).values():
        parse_backends(str(backends))


def _resume_hosts(store: Store, fleet: Fleet, run_ref: str) -> tuple[str, list[FleetHost]]:
    run = store.get_run(run_ref)
    if run.kind != FLEET_KIND:
        raise FleetError(f"run {run.id} is a {run.kind} run, not a fleet run", "resume a run made by `fleet.bench`")
    stored = (run.plan.fleet.hosts if run.plan.fleet else None) or {}
    hosts = fleet.select(list(stored))
    for h in hosts:
        was = (stored[h.name] or {}).get("machine")
        if was != h.machine:
            raise FleetError(f"host {h.name} is machine {h.machine!r} in fleet.toml but {was!r} in run {run.id}",
                             "restore its machine = \"...\" in fleet.toml, or start a new fleet run")
    check_stored_bench_args(run.id, run.plan)   # before any host is reached
    state = run.summary_as(FleetSummary).hosts
    return run.id, [h for h in hosts if (state.get(h.name) or {}).get("status") != "ok"]


#: how long a detached sweep may take to hold its lock (start-up, model synthesis on the host)
DETACH_START_S = 300.0


def _wait_started(r: Remote, h: FleetHost, name: str, log: str) -> None:
    """Return once the detached sweep ``name`` holds its lock (or is already done): until then the
    host looks idle, and a ``--resume`` arriving in that window would start a second sweep."""
    deadline = time.monotonic() + DETACH_START_S
    while True:
        st = r.agent("run-status", name)
        if st.get("measuring") or (st.get("exists") and st.get("status") != "running"):
            return      # measuring, or already ended (done, or stopped: --resume takes it from there)
        if time.monotonic() > deadline:
            raise FleetError(f"host {h.name}: the detached sweep did not start within {DETACH_START_S:.0f} s",
                             f"read its log on the host ({log}), fix the cause, then run with --resume")
        time.sleep(0.5)


def _bench_job(fleet_run: str, plan: RunPlan, pins_file: Path, local_dir: Path, detach: bool
               ) -> Callable[[FleetHost, LineSink], dict]:
    def job(h: FleetHost, sink: LineSink) -> dict:
        with Remote(h) as r:
            check_version(r)
            r.put(pins_file, r.ws("pins.toml"))
            name = remote_run_name(fleet_run, h.name)
            st = r.agent("run-status", name)
            if st.get("measuring"):   # a detached sweep (or another controller) is measuring it right now
                sink.line(f"run {st.get('id')} is still being measured ({st.get('points')} points stored)")
                return {"detached": True, "log": r.ws("results", "fleet", f"{component(name)}.log")}
            if not st.get("exists"):
                argv = [r.llamaforge, "bench", f"--backends={(plan.host_backends or {})[h.name]}", *(plan.bench_args or []),
                        f"--name={name}"]
            elif st.get("status") != "done":
                sink.line(f"resuming run {st.get('id')} ({st.get('points')} points stored)")
                argv = [r.llamaforge, "bench", f"--resume={name}"]
            else:
                argv = []
            bench_error = None
            if argv and detach:
                log = r.ws("results", "fleet", f"{component(name)}.log")
                r.mkdir(posixpath.dirname(log))
                r.run(["setsid", "-f", "sh", "-c", _DETACH_SH, "sh", *argv], cwd=r.workspace,
                      env={**r.env(), "LLAMAFORGE_FLEET_LOG": log}, what="setsid llamaforge bench")
                _wait_started(r, h, name, log)    # else an immediate --resume could start a second sweep
                sink.line(f"detached; log: {log}")
                return {"detached": True, "log": log}
            if argv:
                res = r.run(argv, cwd=r.workspace, env=r.env(), stream=sink, pty=True, check=False)
                if res.exited != 0:
                    bench_error = next((x for x in reversed(sink.tail) if x.lower().startswith("error")),
                                       sink.tail[-1] if sink.tail else f"exit {res.exited}")
            st = r.agent("run-status", name)
            if not st.get("exists"):
                raise FleetError(f"host {h.name}: the sweep stored no run ({bench_error or 'no output'})",
                                 "fix the cause on the host (see its output above) and run with --resume")
            remote_out = r.ws("results", "fleet", component(fleet_run), f"{component(h.name)}.json")
            r.mkdir(posixpath.dirname(remote_out))
            r.run([r.llamaforge, "export", f"--run={name}", "--format=json", f"--output={remote_out}"],
                  cwd=r.workspace, env=r.env(), what="llamaforge export")
            sums = r.agent("sha256", remote_out)
            local = local_dir / f"{component(h.name)}.json"
            r.get(remote_out, local)
            got = file_sha256(local)
            if got != sums.get("sha256"):
                raise FleetError(f"host {h.name}: the pulled export's sha256 {got[:12]}… differs from the host's "
                                 f"{str(sums.get('sha256'))[:12]}…", "run the fleet bench again with --resume")
            sink.line(f"pulled run {st.get('id')} ({st.get('points')} points, sha256 {got[:12]}…)")
            return {"export": str(local), "sha256": got, "remote_run": st.get("id"), "bench_error": bench_error,
                    "remote_status": st.get("status")}

    return job


def bench_all(store: Store, paths: Paths, fleet: Fleet, hosts: list[FleetHost], *, backends: str | None = None,
              options: dict[str, Any] | None = None, resume: str | None = None, detach: bool = False,
              command: str | None = None, name: str | None = None, progress: Progress | None = None) -> str:
    """Sweep on every host at once and merge the runs into ``store``; the fleet run's id."""
    if resume:
        fleet_run, todo = _resume_hosts(store, fleet, resume)
    else:
        fleet_run = _start_fleet_run(store, fleet, hosts, backends, options or {}, command, name)
        todo = hosts
    run = store.get_run(fleet_run)
    plan = run.plan
    summary = run.summary_as(FleetSummary)
    state: dict[str, dict] = dict(summary.hosts)
    store.set_run_status(fleet_run, "running")
    local_dir = under(paths.results / "fleet", fleet_run)
    job = _bench_job(fleet_run, plan, paths.pins_file, local_dir, detach)
    machines = {h.name: h.machine for h in hosts + todo}
    for out in for_each_host(todo, job, progress):
        st = dict(state.get(out.host) or {}, machine=machines[out.host])
        if out.ok and out.value.get("detached"):
            st.update(status="detached", error=None, fix=None, log=out.value["log"])
        elif out.ok:
            try:
                doc = parse_export(Path(out.value["export"]).read_text(encoding="utf-8"))
                rid = import_run(store, doc, machine=st["machine"], host=out.host, fleet_run=fleet_run)
            except FleetError as e:
                st.update(status="failed", error=e.message, fix=e.fix)
            else:
                err = out.value.get("bench_error")
                done = out.value.get("remote_status") == "done" and not err
                st.update(status="ok" if done else "failed", run=rid, remote_run=out.value["remote_run"],
                          sha256=out.value["sha256"], export=out.value["export"],
                          error=None if done else (err or f"the host's run is {out.value.get('remote_status')}"),
                          fix=None if done else "fix the cause on the host and run the fleet bench with --resume")
        else:
            st.update(status="failed", error=out.error, fix=out.fix, tail=out.tail[-5:])
        state[out.host] = st
        store.set_run_summary(fleet_run, summary.replace(hosts=state))
    statuses = {s.get("status") for s in state.values()}
    store.set_run_status(fleet_run, "done" if statuses == {"ok"} else
                         "detached" if "detached" in statuses else "partial" if "ok" in statuses else "failed")
    return fleet_run


