"""``fleet.history``: the same performance history (``history.run``) on every host at once, one series per
machine, pulled back into the local store, where ``history.show`` / ``history.publish`` see every host.

Per host, one job: check the host's llamaforge version, copy ``pins.toml``, run ``llamaforge history.run``
with the given options in a pty (a lost connection hangs it up; the host keeps its own store, so its next
``--continue`` picks up what was left), then list the host's history runs and the bisect runs their
located steps link (agent ``history-runs``) and pull back every one that is new or changed since it was
last imported (export, sha256, copy, check). The controller imports them as ``<id>.<machine>`` with the
host's machine name from ``fleet.toml`` (which is also the host's ``LLAMAFORGE_MACHINE``), so a host's
runs form that machine's series and never mix with another host's; a culprit's ``run`` is re-linked to
the imported bisect run. A host that fails is one row of the table; the others go on.
"""

from __future__ import annotations

import posixpath
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import FleetError
from ..paths import Paths
from ..pathsafe import component, under
from ..store import Store
from .config import FleetHost
from .install import check_version, file_sha256
from .jobs import LineSink, Progress, for_each_host
from .merge import import_run, imported_id, parse_export
from .remote import Remote
from .run import option_args

#: the ``history.run`` options ``fleet.history`` passes to every host (same names, same meaning); not
#: ``--threads`` (a host's own: ``threads`` in fleet.toml, else its physical cores) nor ``--quiet-starts`` (on by
#: default everywhere)
HISTORY_PASS = ("range", "every", "releases", "commits", "source", "backend", "model", "ncmoe", "engine", "repeats",
                "prompt_tokens", "n_predict", "min_launches", "max_launches", "precision", "min_effect", "continue",
                "bisect", "bisect_max_launches", "vram_budget", "ctx")
#: where a host's pulled exports go, locally under ``results/fleet/`` and on the host under its workspace
PULL_DIR = "history"


def history_options(values: dict[str, Any]) -> dict[str, Any]:
    """The given ``history.run`` options of a task's values (``continue_`` → ``continue``); None/False left out."""
    out = {}
    for k, v in values.items():
        name = k.rstrip("_")
        if name in HISTORY_PASS and v is not None and v is not False:
            out[name] = v
    return out


def host_backend(h: FleetHost, options: dict[str, Any]) -> str:
    """``--backend`` if given, else the host's backends in ``fleet.toml``, else cpu."""
    return str(options.get("backend") or ",".join(h.backends) or "cpu")


def history_args(options: dict[str, Any], backend: str, threads: int | None = None) -> list[str]:
    """The host's ``history.run`` arguments: each value glued to its flag (:func:`.run.option_args`);
    ``threads``: the host's own (fleet.toml), when it sets one."""
    return option_args({**{k: v for k, v in options.items() if k in HISTORY_PASS}, "backend": backend,
                        "threads": threads})


def check_history_options(options: dict[str, Any], backend: str) -> Any:
    """Every value checked here as ``history.run`` checks it (a ``HistoryRequest``), before any host is
    contacted; the host checks again. ``--source``'s path and the range's commits are the host's."""
    from ..backends import parse as parse_backends
    from ..config import SourceSpec
    from ..history.run import HistoryRequest
    from ..history.select import Selection
    from ..values import as_float, as_int, csv_list, parse_effect

    o = options
    parse_backends(csv_list(backend, what="backend"))
    sel = Selection(range=o.get("range"), every=as_int(o.get("every", 1), "--every"), releases=bool(o.get("releases")),
                    commits=tuple(csv_list(o["commits"], what="commit")) if o.get("commits") else (),
                    source=SourceSpec.parse(o["source"], where="--source") if o.get("source") else None)
    kw: dict[str, Any] = {"selection": sel, "backends": tuple(csv_list(backend, what="backend")),
                          "resume": bool(o.get("continue")), "bisect": bool(o.get("bisect"))}
    for name, field_ in (("repeats", "repeats"), ("prompt_tokens", "prompt_tokens"), ("n_predict", "n_predict"),
                         ("min_launches", "min_starts"), ("max_launches", "max_starts"),
                         ("bisect_max_launches", "bisect_max_starts"), ("ctx", "ctx")):
        if o.get(name) is not None:
            kw[field_] = as_int(o[name], "--" + name.replace("_", "-"), minimum=1)
    if o.get("vram_budget") is not None:
        kw["vram_budget"] = as_float(o["vram_budget"], "--vram-budget", positive=True)
    for name in ("precision", "min_effect"):
        if o.get(name) is not None:
            kw[name] = parse_effect(o[name], option="--" + name.replace("_", "-"), allow_zero=False)
    if o.get("ncmoe") is not None:
        kw["ncmoe"] = tuple(as_int(x, "--ncmoe", minimum=0) for x in csv_list(o["ncmoe"], what="ncmoe"))
    kw.update({k: str(o[k]) for k in ("model", "engine") if o.get(k) is not None})
    return HistoryRequest(**kw)


@dataclass
class HostHistory:
    """What ``fleet.history`` did on one host."""

    host: str
    machine: str
    status: str = "pending"                 # ok | failed
    runs: list[str] = field(default_factory=list)       # history runs imported (local ids)
    bisects: list[str] = field(default_factory=list)    # bisect runs imported (local ids)
    new: list[str] = field(default_factory=list)        # of ``runs``: those this call's history.run made
    measured: int = 0                       # commits measured by the new runs
    failed: int = 0                         # commits that failed (build or run) in the new runs
    located: int = 0                        # steps with a culprit in the new runs
    error: str | None = None
    fix: str | None = None


def _pulled(store: Store, machine: str) -> dict[str, tuple[Any, Any]]:
    """The host's runs already imported for ``machine``: remote id → (its ``updated``, points) then."""
    out = {}
    for kind in ("history", "bisect"):
        for run in store.list_runs(kind):
            f = run.plan.fleet
            if f is not None and f.machine == machine and f.remote_run:
                out[f.remote_run] = (f.remote_updated, f.remote_points)
    return out


def to_pull(listing: dict, pulled: dict[str, tuple[Any, Any]]) -> list[dict]:
    """Of the host's ``history-runs`` listing: the runs to pull back (never imported, or changed since their
    import: another ``updated`` or point count), bisect runs first; each ``{"id", "kind", "updated", "points"}``."""
    want: dict[str, dict] = {}
    for run in listing.get("runs") or []:
        for kind, r in [("bisect", b) for b in run.get("bisect") or []] + [("history", run)]:
            rid = str(r.get("id") or "")
            if rid and rid not in want and pulled.get(rid) != (r.get("updated"), r.get("points")):
                want[rid] = {"id": rid, "kind": kind, "updated": r.get("updated"), "points": r.get("points")}
    return sorted(want.values(), key=lambda r: r["kind"] != "bisect")


def pull_export(r: Remote, run_id: str, remote_out: str, local: Path) -> str:
    """Export run ``run_id`` on the host to ``remote_out``, copy it to ``local`` and check its sha256."""
    r.mkdir(posixpath.dirname(remote_out))
    r.run([r.llamaforge, "export", f"--run={run_id}", "--format=json", f"--output={remote_out}"],
          cwd=r.workspace, env=r.env(), what="llamaforge export")
    sums = r.agent("sha256", remote_out)
    r.get(remote_out, local)
    got = file_sha256(local)
    if got != sums.get("sha256"):
        raise FleetError(f"host {r.host.name}: the pulled export of run {run_id} has sha256 {got[:12]}…, the "
                         f"host's is {str(sums.get('sha256'))[:12]}…", "run the fleet history again")
    return got


def _error_line(sink: LineSink, exited: int) -> str:
    return next((x for x in reversed(sink.tail) if x.lower().startswith("error")),
                sink.tail[-1] if sink.tail else f"exit {exited}")


def _history_job(options: dict[str, Any], pins_file: Path, local_dir: Path,
                 pulled: dict[str, dict[str, tuple[Any, Any]]]) -> Callable[[FleetHost, LineSink], dict]:
    def job(h: FleetHost, sink: LineSink) -> dict:
        with Remote(h) as r:
            check_version(r)
            r.put(pins_file, r.ws("pins.toml"))
            before = {x["id"] for x in r.agent("history-runs").get("runs") or []}
            argv = [r.llamaforge, "history.run", *history_args(options, host_backend(h, options), h.threads)]
            res = r.run(argv, cwd=r.workspace, env=r.env(), stream=sink, pty=True, check=False)
            error = _error_line(sink, res.exited) if res.exited != 0 else None
            listing = r.agent("history-runs")
            exports = []
            for x in to_pull(listing, pulled.get(h.name, {})):
                name = f"{component(x['id'])}.json"
                local = local_dir / component(h.name) / name
                pull_export(r, x["id"], r.ws("results", "fleet", PULL_DIR, name), local)
                exports.append({**x, "export": str(local), "new": x["id"] not in before})
            sink.line(f"pulled {len(exports)} run(s) back" + (f"; history.run failed: {error}" if error else ""))
            return {"exports": exports, "error": error}

    return job


def relink(doc: dict, machine: str) -> dict:
    """An exported history run with each culprit's ``run`` (a host's bisect run) as its imported id."""
    summ = doc["run"].get("summary")
    if isinstance(summ, dict) and isinstance(summ.get("culprits"), list):
        summ["culprits"] = [dict(c, run=imported_id(c["run"], machine)) if isinstance(c, dict) and c.get("run")
                            and isinstance(c["run"], str) else c for c in summ["culprits"]]
    return doc


def import_pulled(store: Store, h: FleetHost, value: dict, out: HostHistory) -> None:
    """Import one host's pulled exports (bisect runs, then history runs) under its machine name."""
    for x in value.get("exports") or []:
        doc = parse_export(Path(x["export"]).read_text(encoding="utf-8"))
        if doc["run"].get("kind") != x["kind"] or doc["run"]["id"] != x["id"]:
            raise FleetError(f"host {h.name}: the export of run {x['id']} holds run {doc['run']['id']} "
                             f"({doc['run'].get('kind')})", "run the fleet history again")
        if x["kind"] == "history":
            relink(doc, h.machine)
        rid = import_run(store, doc, machine=h.machine, host=h.name, fleet_run=None,
                         note={"remote_updated": x.get("updated"), "remote_points": x.get("points")})
        (out.runs if x["kind"] == "history" else out.bisects).append(rid)
        if x["kind"] == "history" and x.get("new"):
            summ = doc["run"].get("summary") or {}
            out.new.append(rid)
            out.measured += len(summ.get("measured") or [])
            out.failed += len(summ.get("failed") or {})
            out.located += sum(1 for c in summ.get("culprits") or [] if isinstance(c, dict) and c.get("culprit"))


def check_hosts_options(hosts: list[FleetHost], options: dict[str, Any]) -> None:
    """:func:`check_history_options` for every host's backends (before any host is contacted)."""
    for h in hosts:
        check_history_options(options, host_backend(h, options))


def history_all(store: Store, paths: Paths, hosts: list[FleetHost], options: dict[str, Any], *,
                progress: Progress | None = None) -> list[HostHistory]:
    """Run ``history.run`` with ``options`` on every host at once and import each host's history (its
    machine's series) into ``store``; one :class:`HostHistory` per host, in the hosts' order."""
    check_hosts_options(hosts, options)
    pulled = {h.name: _pulled(store, h.machine) for h in hosts}
    job = _history_job(options, paths.pins_file, under(paths.results / "fleet", PULL_DIR), pulled)
    by_host = {h.name: h for h in hosts}
    results = {h.name: HostHistory(h.name, h.machine) for h in hosts}
    for o in for_each_host(hosts, job, progress):
        res = results[o.host]
        if not o.ok:
            res.status, res.error, res.fix = "failed", o.error, o.fix
            continue
        try:
            import_pulled(store, by_host[o.host], o.value, res)
        except FleetError as e:
            res.status, res.error, res.fix = "failed", e.message, e.fix
            continue
        err = o.value.get("error")
        res.status = "failed" if err else "ok"
        if err:
            res.error = f"host {o.host}: history.run failed: {err}"
            res.fix = "fix the cause on the host (its output above); what it stored is imported; run again with --continue"
    return [results[h.name] for h in hosts]
