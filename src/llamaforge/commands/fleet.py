"""``fleet.*`` tasks: ``install``, ``doctor``, ``build``, ``bench`` on the hosts of ``fleet.toml``
(thin: parse options, call :mod:`llamaforge.fleet.run`, print one table)."""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from rich.table import Table

from ..bench.cli_options import HOST_OPTIONS, convert, help_for, task_values
from ..console import console, esc, info
from ..errors import FleetError
from ..records import FleetSummary
from ._common import as_int, csv_list, lf_task, paths
from .builds import BUILD_HELP
from .history import RUN_HELP

_COMMON_HELP = {"hosts": "comma-separated host names from fleet.toml (default: every host)",
                "fleet": "the fleet file (default: fleet.toml next to pins.toml)"}


def _hosts(fleet: str | None, hosts: str | None):  # noqa: ANN202
    from ..fleet.config import FLEET_FILE, load_fleet

    f = load_fleet(Path(fleet) if fleet else paths().workspace / FLEET_FILE)
    return f, f.select(csv_list(hosts, what="host") if hosts else None)


def _failures(outcomes, what: str) -> None:  # noqa: ANN001
    bad = [o for o in outcomes if not o.ok]
    if bad:
        first = bad[0]
        raise FleetError(f"{what} failed on {len(bad)} of {len(outcomes)} host(s); first: {first.error}",
                         first.fix or "see the table above")


def _check_backends(backends: str | None, hosts) -> None:  # noqa: ANN001
    """Backend names are checked here, before any host is contacted."""
    from ..backends import parse as parse_backends

    if backends is not None:
        parse_backends(csv_list(backends, what="backend"))


def _progress(hosts):  # noqa: ANN001, ANN202
    from ..fleet.jobs import Progress

    return Progress([h.name for h in hosts])


@lf_task(help=_COMMON_HELP)
def install(c, hosts=None, fleet=None):
    """Build a wheel of this checkout and install it into a venv in each host's workspace (the host's own
    package index settings apply); print each host's llamaforge and Python version."""
    from ..fleet.install import build_wheel
    from ..fleet.run import install_all

    f, hs = _hosts(fleet, hosts)
    with tempfile.TemporaryDirectory(prefix="llamaforge-fleet-") as tmp:
        wheel = build_wheel(Path(tmp))
        info(esc(f"built {wheel.name}"))
        with _progress(hs) as pr:
            outs = install_all(hs, wheel, paths().pins_file, pr)
    t = Table(title="fleet install")
    for col in ("host", "machine", "llamaforge", "python", "error"):
        t.add_column(col, overflow="fold")
    by = {o.host: o for o in outs}
    for h in hs:
        o = by[h.name]
        v = o.value or {}
        t.add_row(esc(h.name), esc(h.machine), esc(v.get("version", "-")), esc(v.get("python", "-")),
                  esc(o.error or ""))
    console.print(t)
    _failures(outs, "install")


@lf_task(help=_COMMON_HELP)
def doctor(c, hosts=None, fleet=None):
    """One table, hosts × backends: can build, can run, devices, and why not (with the fix)."""
    from ..fleet.run import doctor_all

    f, hs = _hosts(fleet, hosts)
    with _progress(hs) as pr:
        outs = doctor_all(hs, pr)
    yes = {True: "[green]yes[/]", False: "[red]no[/]", None: "[dim]?[/]"}
    t = Table(title="fleet doctor")
    for col in ("host", "backend", "build", "run", "devices", "why not / fix"):
        t.add_column(col, overflow="fold")
    by = {o.host: o for o in outs}
    for h in hs:
        o = by[h.name]
        if not o.ok:
            t.add_row(esc(h.name), "-", yes[False], yes[False], "-", esc(f"{o.error} → {o.fix}"))
            continue
        for b in o.value.get("backends") or []:
            t.add_row(esc(h.name), esc(b.get("backend")), yes.get(b.get("can_build"), "?"),
                      yes.get(b.get("can_run"), "?"), esc("\n".join(b.get("devices") or [])),
                      esc("\n".join(f"{p} → {fx}" for p, fx in b.get("reasons") or [])))
    console.print(t)
    _failures(outs, "doctor")


#: ``fleet.build``'s help: ``build``'s for the options every host gets, and what differs on a fleet
_BUILD_HELP = {**{k: BUILD_HELP[k] for k in ("pins", "rebuild", "no_verify", "native", "build_type", "cuda_archs",
                                              "define")},
               "backends": "comma-separated backends (default: each host's backends in fleet.toml, else cpu)",
               "jobs": "parallel compile jobs on each host (default: its core count)", **_COMMON_HELP}


@lf_task(iterable=["define"], help=_BUILD_HELP)
def build(c, backends=None, pins=None, jobs=None, rebuild=False, no_verify=False, native=True, build_type=None,
          cuda_archs=None, define=None, hosts=None, fleet=None):
    """Build (or reuse) llama.cpp on every host at once (`llamaforge build` there, same options)."""
    from ..fleet.run import build_all

    f, hs = _hosts(fleet, hosts)
    _check_backends(backends, hs)
    opts = {"pins": pins, "jobs": as_int(jobs, "--jobs", minimum=1, maximum=4096) if jobs else None,
            "rebuild": bool(rebuild), "no_verify": bool(no_verify), "no_native": not native or None,
            "build_type": build_type, "cuda_archs": cuda_archs, "define": list(define or []) or None}
    with _progress(hs) as pr:
        outs = build_all(hs, paths().pins_file, backends, opts, pr)
    t = Table(title="fleet build")
    for col in ("host", "machine", "status", "last line"):
        t.add_column(col, overflow="fold")
    by = {o.host: o for o in outs}
    for h in hs:
        o = by[h.name]
        last = (o.value or o.tail or [""])[-1] if o.ok else f"{o.error} → {o.fix}"
        t.add_row(esc(h.name), esc(h.machine), "[green]ok[/]" if o.ok else "[red]failed[/]", esc(last))
    console.print(t)
    _failures(outs, "build")


@lf_task(help=help_for("fleet.bench", **_COMMON_HELP,
                       detach="start the sweeps in their own sessions and return (they outlive the connection); "
                              "collect them later with --resume"))
def bench(c, model=None, backends=None, pins=None, ncmoe=None, ngl=None, repeats=None, launches=None,
          max_launches=None, precision=None, engine=None,
          prompt_tokens=None, n_predict=None, vram_budget=None, fitt=None, extra=None, threads=None, depths=None,
          load_timeout=None, request_timeout=None, ctx=None, seed=None, sentinel_every=None, allow_busy=False,
          allow_broken=False, no_quirks=False, name=None, resume=None, detach=False, hosts=None, fleet=None):
    """Sweep on every host at once (`llamaforge bench` there, same options; synthetic models are made on each
    host), pull each host's run back (export + sha256), import it into the local store and link the imports
    as one fleet run. A failing host is recorded with its error; the others finish.

    Example: inv fleet.bench --model synth:tiny-qwen35moe --ncmoe 0:8:4 ; inv report latest"""
    from ..fleet.run import bench_all
    from ..store import Store

    if not resume and not model:
        raise FleetError("no model given", "pass --model PATH-on-the-hosts or a reference (synth:tiny-qwen35moe, hf:...)")
    options = task_values("fleet.bench", locals())
    convert(options)          # every value checked here, before any host is contacted (each host checks again)
    options = {k: v for k, v in options.items() if k in HOST_OPTIONS}
    f, hs = _hosts(fleet, hosts)
    _check_backends(backends, hs)
    p = paths()
    with Store(p.store_db) as store, _progress(hs) as pr:
        run_id = bench_all(store, p, f, hs, backends=backends, options=options, resume=resume, detach=bool(detach),
                           command=" ".join(sys.argv), name=name, progress=pr)
    with Store(p.store_db) as store:
        run = store.get_run(run_id)
    _print_fleet_run(run)
    info(f"fleet run: [bold]{esc(run_id)}[/]  " + esc(f"(report: `llamaforge report {run_id}`)"))
    states = run.summary_as(FleetSummary).hosts.items()
    if any(s.get("status") == "detached" for _, s in states):
        info(esc(f"detached sweeps keep measuring on their hosts; collect them with `inv fleet.bench --resume {run_id}`"))
    bad = {h: s for h, s in states if s.get("status") == "failed"}
    if bad:
        h, s = next(iter(bad.items()))
        raise FleetError(f"{len(bad)} host(s) failed; first: {s.get('error')}",
                         (s.get("fix") or "fix it") + f"; then `inv fleet.bench --resume {run_id}`")


def _print_fleet_run(run) -> None:  # noqa: ANN001
    t = Table(title=esc(f"fleet run {run.id} ({run.status})"))
    for col in ("host", "machine", "status", "imported run", "error"):
        t.add_column(col, overflow="fold")
    for h, s in run.summary_as(FleetSummary).hosts.items():
        color = {"ok": "green", "failed": "red"}.get(str(s.get("status")), "yellow")
        t.add_row(esc(h), esc(s.get("machine")), f"[{color}]{esc(s.get('status'))}[/]", esc(s.get("run") or "-"),
                  esc(s.get("error") or ""))
    console.print(t)


#: ``fleet.history``'s help: ``history.run``'s (every host runs it with the same options; ``--threads`` and
#: ``--quiet-starts`` are each host's own: ``fleet.history.HISTORY_PASS``), and what differs on a fleet
_HISTORY_HELP = {
    **{k: v for k, v in RUN_HELP.items() if k not in ("threads", "quiet_starts")},
    "range": RUN_HELP["range"] + "; each host resolves it in its own mirror",
    "releases": "the release pins of pins.toml (copied to every host)",
    "source": "where commits come from on the hosts: git:URL, or path:DIR on each host",
    "backend": "comma-separated backends (default: each host's backends in fleet.toml, else cpu)",
    "model": "model: a path on the hosts or a reference (default synth:tiny-qwen35moe, made on each host)",
    "continue": "only what is new since each machine's last run of the series",
    "bisect": "locate every new step to its commit, on the host that measured it",
    "vram_budget": "emulate a smaller card on every host: GiB of VRAM left usable per device",
    **_COMMON_HELP,
}


@lf_task(name="history", help=_HISTORY_HELP)
def history(c, range=None, every=None, releases=False, commits=None, source=None, backend=None,  # noqa: A002
            model=None, ncmoe=None, engine=None, repeats=None, prompt_tokens=None, n_predict=None, min_launches=None,
            max_launches=None, precision=None, min_effect=None, continue_=False, bisect=False, bisect_max_launches=None,
            vram_budget=None, ctx=None, hosts=None, fleet=None):
    """Run the same performance history (`llamaforge history.run` there, same options) on every host at once,
    then pull each host's history runs (and the bisect runs of its steps) into the local store under the
    host's machine name: one series per machine, never mixed; `history.show` and `history.publish` then show
    every host. A failing host is one row of the table; the others finish.

    Example: inv fleet.history --range 0c1e57098..master --every 8 --continue --bisect ; inv history.publish site"""
    from ..fleet.history import check_hosts_options, history_all, history_options
    from ..store import Store

    options = history_options(dict(locals()))
    f, hs = _hosts(fleet, hosts)
    check_hosts_options(hs, options)     # every value checked here, before any host is contacted
    p = paths()
    with Store(p.store_db) as store, _progress(hs) as pr:
        outs = history_all(store, p, hs, options, progress=pr)
    _print_history(outs)
    bad = [o for o in outs if o.status != "ok"]
    if bad:
        raise FleetError(f"{len(bad)} of {len(outs)} host(s) failed; first: {bad[0].error}",
                         bad[0].fix or "see the table above")
    info(esc("merged: `llamaforge history.show` (or `history.publish DIR`) shows every machine's series"))


def _print_history(outs) -> None:  # noqa: ANN001
    t = Table(title="fleet history")
    for col in ("host", "machine", "status", "new runs", "measured", "failed", "located", "pulled", "error"):
        t.add_column(col, overflow="fold")
    for o in outs:
        color = "green" if o.status == "ok" else "red"
        t.add_row(esc(o.host), esc(o.machine), f"[{color}]{esc(o.status)}[/]", esc(", ".join(o.new) or "-"),
                  str(o.measured), str(o.failed), str(o.located), f"{len(o.runs)} history, {len(o.bisects)} bisect",
                  esc(o.error or ""))
    console.print(t)
