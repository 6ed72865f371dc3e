"""The results store: one SQLite file (``results/llamaforge.sqlite``), WAL, schema-versioned.

Data first, reports second: every measured request is a row in ``samples`` with its raw JSON; a
point (one offload setting on one build) and its samples are written in ONE transaction when the
point finishes, so a ``kill -9`` loses at most the point in flight and ``--resume`` measures
exactly what is missing. Runs of every kind (``sweep``, ``compare``, ``bisect``) live here.

Tables
  runs     id, kind, name, status, created, updated, command, plan_json, env_json, summary_json,
           parent_run (the run this one re-measures: ``llamaforge reproduce``; schema v2, NULL before)
  builds   key, backend, pin, commit_sha, manifest_json           (a build's manifest incl. capabilities)
  run_builds  run_id, build_key
  points   one offload setting on one build in one run: context that fitted, memory, timings,
           status ok|failed with failure class and log tail, the exact command
  samples  one measured request (``warmup`` = 1 for the discarded warm-up); ``launch`` = which
           server start of the point it came from (1..K; a point measured in K launches keeps all
           of them under one ``points`` row; ``extra_json`` is the point's :class:`records.PointDetail`,
           whose ``launches`` describe each launch)
  probes   bisect/compare bookkeeping: one row per measured commit

Every free-text and JSON field (a run's command, plan, env and summary; a build's manifest; a
point's command, failure detail, log tail and extras; samples' raw answers; probes' subjects and
notes) passes through :mod:`llamaforge.redact` when written and when read: URL queries, fragments
and credentials (a presigned model URL, a token in a git URL) and the ``HF_TOKEN`` value are never
stored, and never shown from stores written before that. Ids, names and keys are identifiers, kept
as they are.

Schema versions: ``_SCHEMA`` is v1; :data:`MIGRATIONS` is the ladder v1 → v2 → … Opening an older
store backs it up next to itself (``NAME.v1-backup.sqlite``), then applies every missing step in ONE
transaction (all or nothing). A file that is not a readable SQLite store raises :class:`StoreError`
with the way out (``sqlite3 FILE .recover``, or move it aside) instead of a traceback; a full disk is said
to be one (the store is intact); an SQLite file of someone else's (tables, but neither ``meta`` nor
``runs``) is refused before anything is added to it.
"""

from __future__ import annotations

import json
import secrets
import shutil
import sqlite3
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, TypeVar

from .errors import StoreError
from .records import (
    Environment,
    LaunchRecord,
    PointDetail,
    RunPlan,
    RunSummary,
    mistyped,
    summary_record,
    to_json,
)
from .redact import env_secrets, redact_obj, redact_text

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT);
CREATE TABLE IF NOT EXISTS runs (
    id TEXT PRIMARY KEY, kind TEXT NOT NULL, name TEXT, status TEXT NOT NULL,
    created REAL NOT NULL, updated REAL NOT NULL, command TEXT, plan_json TEXT, env_json TEXT,
    summary_json TEXT);
CREATE TABLE IF NOT EXISTS builds (
    key TEXT PRIMARY KEY, backend TEXT, pin TEXT, commit_sha TEXT, manifest_json TEXT);
CREATE TABLE IF NOT EXISTS run_builds (
    run_id TEXT NOT NULL REFERENCES runs(id), build_key TEXT NOT NULL REFERENCES builds(key),
    PRIMARY KEY (run_id, build_key));
CREATE TABLE IF NOT EXISTS points (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id TEXT NOT NULL REFERENCES runs(id),
    build_key TEXT NOT NULL,
    engine TEXT NOT NULL,            -- server | llama-bench | fit
    ncmoe INTEGER NOT NULL DEFAULT 0,
    ngl INTEGER NOT NULL DEFAULT -1, -- -1 = all layers (llama.cpp's default / 999)
    label TEXT NOT NULL DEFAULT '',  -- free tag: compare side (A/B), bisect commit, ...
    status TEXT NOT NULL,            -- ok | failed
    failure_class TEXT, failure_detail TEXT, log_tail TEXT,
    n_ctx INTEGER, n_ctx_train INTEGER,
    vram_used_mib REAL, vram_self_mib REAL, vram_total_mib REAL, rss_peak_mib REAL,
    mem_breakdown_json TEXT,
    prompt_tokens INTEGER, n_predict INTEGER,
    t_load_s REAL, t_warmup_s REAL, t_measure_s REAL,
    command_json TEXT, build_info TEXT, extra_json TEXT,
    started REAL, finished REAL,
    UNIQUE (run_id, build_key, engine, ncmoe, ngl, label));
CREATE TABLE IF NOT EXISTS samples (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    point_id INTEGER NOT NULL REFERENCES points(id) ON DELETE CASCADE,
    idx INTEGER NOT NULL, warmup INTEGER NOT NULL DEFAULT 0,
    test TEXT NOT NULL DEFAULT '',   -- llama-bench test name (pp512, tg128, ...) or '' for server requests
    launch INTEGER NOT NULL DEFAULT 1, -- server start (1..K) of the point this request ran in
    prompt_n INTEGER, prompt_ms REAL, pp_tps REAL,
    predicted_n INTEGER, predicted_ms REAL, tg_tps REAL,
    raw_json TEXT);
CREATE INDEX IF NOT EXISTS samples_point ON samples(point_id);
CREATE TABLE IF NOT EXISTS probes (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id TEXT NOT NULL REFERENCES runs(id),
    seq INTEGER NOT NULL, commit_sha TEXT NOT NULL, subject TEXT, build_key TEXT,
    verdict TEXT,                    -- good | bad | skip | endpoint-good | endpoint-bad | A | B
    build_s REAL, measure_s REAL, incremental INTEGER, note TEXT);
"""




#: columns v1 stores gained in place before the ladder existed (parent_run: ``reproduce``; launch: the
#: server start of a sample); a fresh v1 schema has ``launch`` already. Later columns get a step of their own.
ADDED_COLUMNS_V2 = (("runs", "parent_run", "TEXT"), ("samples", "launch", "INTEGER NOT NULL DEFAULT 1"))


def _v2_columns_and_indexes(db: sqlite3.Connection) -> None:
    """v1 → v2: the columns of :data:`ADDED_COLUMNS_V2` where missing, and indexes for lookups v1 served
    only by full scans: a run's reproductions, a run's probes (compare/bisect reports), the latest run of a kind."""
    for table, col, decl in ADDED_COLUMNS_V2:
        if col not in {r[1] for r in db.execute(f"PRAGMA table_info({table})")}:
            db.execute(f"ALTER TABLE {table} ADD COLUMN {col} {decl}")
    db.execute("CREATE INDEX IF NOT EXISTS runs_parent ON runs(parent_run)")
    db.execute("CREATE INDEX IF NOT EXISTS probes_run ON probes(run_id, seq)")
    db.execute("CREATE INDEX IF NOT EXISTS runs_kind_created ON runs(kind, created)")


#: v2 → v3: the client-side latency of a streamed request (issue 42's latency metrics); NULL in older rows
ADDED_COLUMNS_V3 = (("samples", "e2e_ms", "REAL"), ("samples", "itl_ms", "REAL"), ("samples", "itl_p95_ms", "REAL"))


def _v3_latency_columns(db: sqlite3.Connection) -> None:
    """v2 → v3: the columns of :data:`ADDED_COLUMNS_V3` where missing."""
    for table, col, decl in ADDED_COLUMNS_V3:
        if col not in {r[1] for r in db.execute(f"PRAGMA table_info({table})")}:
            db.execute(f"ALTER TABLE {table} ADD COLUMN {col} {decl}")


# The migration ladder: MIGRATIONS[i] takes a store from schema v(i+1) to v(i+2). Append, never edit.
MIGRATIONS: list[Callable[[sqlite3.Connection], None]] = [_v2_columns_and_indexes, _v3_latency_columns]
SCHEMA_VERSION = 1 + len(MIGRATIONS)


#: less free space than this on the store's file system makes an I/O error a full disk
DISK_FULL_BYTES = 1 << 20


def _disk_full(path: Path) -> bool:
    try:
        return shutil.disk_usage(Path(path).parent).free < DISK_FULL_BYTES
    except OSError:
        return False


def store_error(path: Path, exc: sqlite3.Error) -> StoreError:
    """The one-line error for a store SQLite cannot use: busy, read-only, or not a (healthy) database."""
    msg = " ".join((str(exc) or type(exc).__name__).split())
    msg = msg if len(msg) <= 100 else msg[:100] + "…"
    low = msg.lower()
    if "locked" in low or "busy" in low:
        return StoreError(f"the results store {path} is busy ({msg})",
                          "another llamaforge is writing to it; try again when it is done")
    if "full" in low or ("i/o error" in low and _disk_full(path)):   # SQLITE_FULL, or the -shm/-wal it could not grow
        return StoreError(f"the disk holding the results store {path} is full ({msg})",
                          "free disk space, then run the command again (the store itself is intact: SQLite rolls "
                          "back a write that does not fit)")
    if "readonly" in low or "read-only" in low or "unable to open" in low:
        return StoreError(f"cannot write the results store {path} ({msg})",
                          "make its folder writable, or move the results with --data-dir (LLAMAFORGE_DATA) or LLAMAFORGE_RESULTS")
    return StoreError(f"the results store {path} is damaged or not a llamaforge store ({msg})",
                      f"recover what is readable with `sqlite3 {path} .recover | sqlite3 {path}.recovered` and move "
                      f"it into place, or move the file aside (`mv {path} {path}.damaged`) to start a new store")


def backup_path(path: Path, version: int) -> Path:
    """Where the copy of a v``version`` store goes before it is migrated (never overwrites one)."""
    dest = path.with_name(f"{path.stem}.v{version}-backup{path.suffix}")
    if dest.exists():
        dest = path.with_name(f"{path.stem}.v{version}-backup-{time.strftime('%Y%m%d-%H%M%S')}{path.suffix}")
    return dest


def _j(obj: Any) -> str | None:
    return None if obj is None else json.dumps(obj, sort_keys=True, default=str)


#: a stored JSON column is read only up to this size and depth, a long text column (log tail, failure detail)
#: only its last MAX_LONG_TEXT characters (substr in SQL: a crafted 300 MiB log tail never reaches Python)
MAX_JSON_CHARS = 32 * 1024 * 1024
MAX_JSON_DEPTH = 64
MAX_LONG_TEXT = 64 * 1024


class DamagedRow(StoreError):
    """One row of a store that cannot be read as what it claims to be (a crafted or damaged column)."""


def _too_deep(obj: Any, limit: int = MAX_JSON_DEPTH) -> bool:
    stack = [(obj, 1)]
    while stack:
        o, d = stack.pop()
        kids = o.values() if isinstance(o, dict) else o if isinstance(o, list) else None
        if kids is None:
            continue
        if d > limit:
            return True
        stack.extend((k, d + 1) for k in kids)
    return False


def _uj(text: Any, what: str = "a JSON column", want: type | tuple[type, ...] | None = None) -> Any:
    """Stored JSON, bounded in size and depth and of the shape ``want``; :class:`DamagedRow` otherwise."""
    if text is None:
        return None
    if not isinstance(text, str):
        raise DamagedRow(f"{what} is not JSON text ({type(text).__name__})")
    if len(text) > MAX_JSON_CHARS:
        raise DamagedRow(f"{what} is larger than {MAX_JSON_CHARS // 2**20} MiB")
    try:
        obj = json.loads(text)
    except RecursionError:
        raise DamagedRow(f"{what} is nested deeper than {MAX_JSON_DEPTH} levels") from None
    except ValueError as e:
        raise DamagedRow(f"{what} is not valid JSON ({e})") from None
    if _too_deep(obj):
        raise DamagedRow(f"{what} is nested deeper than {MAX_JSON_DEPTH} levels")
    if want is not None and obj is not None and not isinstance(obj, want):
        raise DamagedRow(f"{what} holds {type(obj).__name__}, not "
                         + (" or ".join(t.__name__ for t in want) if isinstance(want, tuple) else want.__name__))
    return obj


def _ruj(text: Any, secrets: tuple[str, ...] | None = None, what: str = "a JSON column",
         want: type | tuple[type, ...] | None = None) -> Any:
    """Stored JSON, redacted on the way out (stores written before a field was redacted on the way in)."""
    obj = _uj(text, what, want)
    return None if obj is None else redact_obj(obj, secrets)


#: what a row's cells may hold, by the field's annotation (SQLite keeps any value in any column)
def _cell_ok(annotation: str, v: Any) -> bool:
    if v is None:
        return "None" in annotation or annotation in ("str", "dict", "list")
    if isinstance(v, bool):
        return False
    base = annotation.replace(" | None", "")
    if base == "int":
        return isinstance(v, int)
    if base == "float":
        return isinstance(v, int | float)
    if base == "str":
        return isinstance(v, str)
    return True


def _checked_cells(cls: type, values: dict[str, Any], what: str) -> dict[str, Any]:
    types = {f.name: str(f.type) for f in fields(cls)}
    for k, v in values.items():
        if k in types and not _cell_ok(types[k], v):
            raise DamagedRow(f"{what}: {k} holds {type(v).__name__} {str(v)[:40]!r}, not {types[k]}")
    return values


def _check_detail(p: Point, what: str) -> None:
    """A stored point's detail whose value is not of its field's type is a damaged row, as a cell would be."""
    why = mistyped(p.detail)
    if why is not None:
        raise DamagedRow(f"{what}: extra_json {why}")


def stored_value(v: Any) -> Any:
    """What a JSON field of a point holds in its column: a record's stored form (:meth:`PointDetail.stored`)."""
    return v.stored() if isinstance(v, PointDetail) else v


def _skipped(what: str, problems: list[str], path: Path) -> None:
    """One notice for the damaged rows a listing left out."""
    if problems:
        from .console import notice

        more = f" (and {len(problems) - 3} more)" if len(problems) > 3 else ""
        notice(f"skipped {len(problems)} damaged {what}: " + "; ".join(problems[:3]) + more
               + f" — a store is data: recover it (`sqlite3 {path} .recover`) or measure anew")


_JSON_WANT: dict[str, type | tuple[type, ...]] = {"plan_json": dict, "env_json": dict, "summary_json": dict,
                                                  "manifest_json": dict, "extra_json": dict, "raw_json": dict,
                                                  "mem_breakdown_json": (dict, list), "command_json": list}


def _col(name: str) -> str:
    """A column as read: JSON at most MAX_JSON_CHARS + 1 characters (larger: refused), long text its end."""
    if name.endswith("_json"):
        return f"substr({name}, 1, {MAX_JSON_CHARS + 1}) AS {name}"
    return name


S = TypeVar("S", bound=RunSummary)


@dataclass
class Run:
    """A stored run. ``plan``, ``env`` and ``summary`` are records (:mod:`llamaforge.records`; the summary's class
    follows the run's kind, :data:`records.SUMMARIES`): older shapes migrated, unknown keys kept in their
    ``extra``; a dict given here is read into its record."""

    id: str
    kind: str
    name: str | None
    status: str
    created: float
    updated: float
    command: str | None
    plan: RunPlan
    env: Environment
    summary: RunSummary | None
    parent_run: str | None = None     # the run this one reproduces

    def __post_init__(self) -> None:
        if not isinstance(self.plan, RunPlan):
            self.plan = RunPlan.from_json(self.plan or {})
        if not isinstance(self.env, Environment):
            self.env = Environment.from_json(self.env or {})
        self.summary = summary_record(self.kind, self.summary)

    def summary_as(self, cls: type[S]) -> S:
        """The summary as the record of this run's kind (an empty one while the run has none)."""
        return self.summary if isinstance(self.summary, cls) else cls()


def _summary_json(summary: RunSummary | None) -> str | None:
    return None if summary is None else _j(redact_obj(to_json(summary)))


# How a field of Point / Sample is kept (``dataclasses.field`` metadata). Their fields are the one list of a
# point's and a sample's columns: the store's, the exports' (bench.export) and the fleet import's (fleet.merge).
_TEXT: dict[str, bool] = {"text": True}                  # free text: redacted on the way in and out
_LONG: dict[str, bool] = {"text": True, "long": True}    # ... and multi-line: not a CSV column
_JSON: dict[str, bool] = {"json": True}                  # JSON text in the column ``<name>_json``; not in the CSV
#: ... a record stored under another name (column ``extra_json``, the exports' and the fleet import's ``extra``)
_DETAIL: dict[str, Any] = {"json": True, "key": "extra"}
_ROWS: dict[str, bool] = {"rows": True}                  # not a column of the point: its row id, its sample rows


@dataclass
class Sample:
    idx: int
    warmup: bool
    test: str = ""
    prompt_n: int | None = None
    prompt_ms: float | None = None
    pp_tps: float | None = None
    predicted_n: int | None = None
    predicted_ms: float | None = None
    tg_tps: float | None = None
    raw: dict | None = field(default=None, metadata=_JSON)
    launch: int = 1
    # schema v3, streamed server requests only (None elsewhere and in older stores): what the client saw
    e2e_ms: float | None = None       # the request's wall time on this side: sent → its last answer read
    itl_ms: float | None = None       # the median time between two generated tokens as they arrived
    itl_p95_ms: float | None = None   # their 95th percentile, from a request of ≥ 20 inter-token gaps


@dataclass
class Point:
    """One offload setting on one build. ``id`` is set once stored."""

    run_id: str
    build_key: str
    engine: str
    ncmoe: int = 0
    ngl: int = -1
    label: str = ""
    status: str = "ok"
    failure_class: str | None = None   # oom | crash | hang | unhealthy | bad-response | fit | error
    failure_detail: str | None = field(default=None, metadata=_LONG)
    log_tail: str | None = field(default=None, metadata=_LONG)
    n_ctx: int | None = None
    n_ctx_train: int | None = None
    vram_used_mib: float | None = None    # peak device memory used by every process, summed over devices
    vram_self_mib: float | None = None    # peak device memory of llama.cpp's own process tree
    vram_total_mib: float | None = None
    rss_peak_mib: float | None = None     # peak resident host memory of llama.cpp's process tree
    mem_breakdown: dict | None = field(default=None, metadata=_JSON)
    prompt_tokens: int | None = None
    n_predict: int | None = None
    t_load_s: float | None = None
    t_warmup_s: float | None = None
    t_measure_s: float | None = None
    command: list[str] | None = field(default=None, metadata=_JSON)
    build_info: str | None = field(default=None, metadata=_TEXT)
    #: fit, prompt, memory, telemetry, launches, ... (:class:`records.PointDetail`; a stored dict given is read
    #: into it); stored as ``extra_json``
    detail: PointDetail = field(default_factory=PointDetail, metadata=_DETAIL)
    started: float | None = None
    finished: float | None = None
    samples: list[Sample] = field(default_factory=list, metadata=_ROWS)
    id: int | None = field(default=None, metadata=_ROWS)

    def __post_init__(self) -> None:
        if not isinstance(self.detail, PointDetail):
            self.detail = PointDetail.from_json(self.detail or {})

    @property
    def key(self) -> tuple[str, str, int, int, str]:
        return (self.build_key, self.engine, self.ncmoe, self.ngl, self.label)

    def measured(self, metric: str, test: str | None = None) -> list[float]:
        """Raw non-warm-up values of ``pp_tps`` or ``tg_tps`` (optionally one llama-bench test)."""
        out = []
        for s in self.samples:
            if s.warmup or (test is not None and s.test != test):
                continue
            v = getattr(s, metric)
            if v is not None:
                out.append(float(v))
        return out

    def launch_groups(self, metric: str, test: str | None = None) -> list[list[float]]:
        """:meth:`measured` split by launch (server start), in launch order: the clusters of the
        nested statistics (``stats.cluster_summary``)."""
        groups: dict[int, list[float]] = {}
        for s in self.samples:
            if s.warmup or (test is not None and s.test != test):
                continue
            v = getattr(s, metric)
            if v is not None:
                groups.setdefault(s.launch, []).append(float(v))
        return [groups[k] for k in sorted(groups)]

    @property
    def launches(self) -> list[LaunchRecord]:
        """Per-launch records (``launch``, ``seq``, ``status``, times, memory, machine, engine gap) of a point
        measured in several server starts (``detail.launches``, stored as :meth:`LaunchRecord.stored` dicts);
        ``[]`` for points stored before launches existed."""
        return self.detail.launches

    def seconds_per_launch(self) -> float | None:
        """Median wall time of one of this point's server starts (start to stop), from its launch
        records (or the point's own times); None when neither was stored."""
        secs = sorted(s for r in self.launches if (s := r.seconds()) is not None)
        if secs:
            return secs[len(secs) // 2]
        return (self.finished - self.started) if self.started and self.finished else None


@dataclass
class Probe:
    run_id: str
    seq: int
    commit_sha: str
    subject: str | None = None
    build_key: str | None = None
    verdict: str | None = None
    build_s: float | None = None
    measure_s: float | None = None
    incremental: bool | None = None
    note: str | None = None


def _names(cls: type, *, without: tuple[str, ...] = ()) -> tuple[str, ...]:
    """``cls``'s field names in order, without those whose metadata has any of ``without``."""
    return tuple(f.name for f in fields(cls) if not any(f.metadata.get(k) for k in without))


def _flagged(cls: type, flag: str) -> frozenset[str]:
    return frozenset(f.name for f in fields(cls) if f.metadata.get(flag))


#: everything a point carries besides its samples (field names; :data:`POINT_KEYS` the exports' keys)
POINT_FIELDS = _names(Point, without=("rows",))
#: field → its key in the JSON export and the fleet import, and the name of its ``<key>_json`` column
POINT_KEYS: dict[str, str] = {f.name: f.metadata.get("key", f.name) for f in fields(Point) if f.name in POINT_FIELDS}
#: the point fields with a column of their own in ``points`` (the others: ``<name>_json``)
POINT_COLUMNS = _names(Point, without=("rows", "json"))
#: the point fields of the CSV export (one line each)
POINT_CSV = _names(Point, without=("rows", "json", "long"))
#: everything a sample carries: the JSON export's and the fleet import's keys
SAMPLE_FIELDS = _names(Sample)
#: the sample fields of the CSV export
SAMPLE_CSV = _names(Sample, without=("json",))
_POINT_JSON = tuple(n for n in POINT_FIELDS if n in _flagged(Point, "json"))
_POINT_TEXT = _flagged(Point, "text")
_SAMPLE_JSON = _flagged(Sample, "json")
_SAMPLE_COLUMNS = tuple(f"{n}_json" if n in _SAMPLE_JSON else n for n in SAMPLE_FIELDS)
_LONG_TEXT = _flagged(Point, "long")
#: the columns as read (:func:`_col`; long text: its last MAX_LONG_TEXT characters)
_POINT_SELECT = ("SELECT id, " + ", ".join(f"substr({c}, -{MAX_LONG_TEXT}) AS {c}" if c in _LONG_TEXT else c
                                           for c in POINT_COLUMNS)
                 + ", " + ", ".join(_col(f"{POINT_KEYS[c]}_json") for c in _POINT_JSON) + " FROM points")
_SAMPLE_SELECT = "SELECT " + ", ".join(_col(c) for c in _SAMPLE_COLUMNS) + " FROM samples"


def check_results_folder(folder: Path, *, create: bool = True) -> None:
    """The results folder must be a folder (``LLAMAFORGE_RESULTS`` naming a file is one line, not a traceback);
    made when missing (``create``)."""
    if folder.exists() and not folder.is_dir():
        raise StoreError(f"the results folder {folder} is not a folder",
                         "point --data-dir (LLAMAFORGE_DATA) or LLAMAFORGE_RESULTS at a folder (or move that file away)")
    if not create:
        return
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise StoreError(f"cannot create the results folder {folder}: {e.strerror}",
                         "point --data-dir (LLAMAFORGE_DATA) or LLAMAFORGE_RESULTS at a folder you can write to") from None


def foreign_tables(db: sqlite3.Connection) -> list[str]:
    """The tables of a database that is not a llamaforge store (``[]`` for an empty file or one of ours:
    a store always has ``meta`` or ``runs``)."""
    names = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table' AND name NOT LIKE 'sqlite_%'")]
    return [] if not names or {"meta", "runs"} & set(names) else sorted(names)


def _text(value: str, what: str) -> str:
    """A user's text as SQLite can take it (not UTF-8, e.g. ``$'\\xff'``: one line instead of a traceback)."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise StoreError(f"{what} {value!r} is not valid UTF-8 text", "give it as plain text") from None
    return value


class Store:
    """Access to one store file. Safe for several processes (WAL, busy timeout)."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        check_results_folder(self.path.parent)
        self.backup: Path | None = None   # set when opening migrated the store
        self.db = sqlite3.connect(str(self.path), timeout=30, isolation_level=None)
        try:
            self._refuse_foreign()   # before anything (even the WAL mode) changes the file
            self.db.row_factory = sqlite3.Row
            self.db.execute("PRAGMA journal_mode=WAL")
            self.db.execute("PRAGMA foreign_keys=ON")
            self.db.execute("PRAGMA synchronous=NORMAL")
            self._migrate()
        except sqlite3.Error as e:
            self.db.close()
            raise store_error(self.path, e) from e
        except BaseException:
            self.db.close()
            raise

    def close(self) -> None:
        self.db.close()

    def _refuse_foreign(self) -> None:
        foreign = foreign_tables(self.db)
        if foreign:
            shown = ", ".join(foreign[:5]) + (f" and {len(foreign) - 5} more" if len(foreign) > 5 else "")
            raise StoreError(f"{self.path} is an SQLite database but not a llamaforge store (its tables: {shown}); "
                             "it was left unchanged", "point LLAMAFORGE_RESULTS at another folder, or move the file "
                             "away")

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def tx(self) -> Iterator[sqlite3.Connection]:
        self.db.execute("BEGIN IMMEDIATE")
        try:
            yield self.db
        except BaseException:
            self.db.execute("ROLLBACK")
            raise
        self.db.execute("COMMIT")

    def schema_version(self) -> int:
        row = self.db.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
        return int(row[0]) if row else 0

    def _migrate(self) -> None:
        self.db.executescript(_SCHEMA)  # v1, idempotent (IF NOT EXISTS); executescript manages its own commit
        with self.tx() as db:
            if self.schema_version() == 0:   # a new file: v1 was just created
                db.execute("INSERT INTO meta VALUES ('schema_version', '1')")
        version = self.schema_version()
        if version > SCHEMA_VERSION:
            raise StoreError(f"{self.path} has schema v{version}, newer than this llamaforge (v{SCHEMA_VERSION})",
                             "upgrade llamaforge or use another LLAMAFORGE_RESULTS folder")
        if version == SCHEMA_VERSION:
            return
        has_data = self.db.execute("SELECT EXISTS (SELECT 1 FROM runs)").fetchone()[0]
        if has_data:   # a consistent snapshot (the backup API reads through SQLite, WAL included)
            self.backup = backup_path(self.path, version)
            dest = sqlite3.connect(str(self.backup))
            try:
                self.db.backup(dest)
            finally:
                dest.close()
        with self.tx() as db:
            start = self.schema_version()   # another process may have migrated meanwhile
            for n, step in enumerate(MIGRATIONS[start - 1:], start=start):
                try:
                    step(db)
                except sqlite3.Error as e:   # the transaction rolls back: the store stays as it was
                    if "malformed" in str(e) or "not a database" in str(e):   # damage, not the migration
                        raise store_error(self.path, e) from e
                    raise StoreError(f"migrating {self.path} from schema v{n} to v{n + 1} failed ({e}); "
                                     "the store was left unchanged",
                                     "keep using the llamaforge that wrote it, and report this") from e
            db.execute("UPDATE meta SET value=? WHERE key='schema_version'", (str(SCHEMA_VERSION),))
        if self.backup and start == version:
            from .console import notice

            notice(f"migrated the results store {self.path} from schema v{version} to v{SCHEMA_VERSION} "
                   f"(the v{version} file is kept as {self.backup})")
        elif self.backup:
            self.backup.unlink(missing_ok=True)
            self.backup = None

    # ---- runs -------------------------------------------------------------------------------
    def new_run(self, kind: str, plan: dict | RunPlan, *, command: str | None = None,
                env: dict | Environment | None = None, name: str | None = None, parent_run: str | None = None) -> str:
        """A new run (status ``running``). The plan and env are stored as versioned records: a dict passes
        through :class:`RunPlan` / :class:`Environment` (unknown keys kept, older shapes migrated)."""
        plan = to_json(plan if isinstance(plan, RunPlan) else RunPlan.from_json(plan))
        env = to_json(env if isinstance(env, Environment) else Environment.from_json(env or {}))
        run_id = time.strftime("%Y%m%d-%H%M%S") + "-" + secrets.token_hex(2)
        name = _text(name, "--name") if name else name
        now = time.time()
        self.db.execute("INSERT INTO runs (id, kind, name, status, created, updated, command, plan_json, env_json,"
                        " parent_run) VALUES (?,?,?,?,?,?,?,?,?,?)",
                        (run_id, kind, name, "running", now, now, redact_text(command), _j(redact_obj(plan)),
                         _j(redact_obj(env or {})), parent_run))
        return run_id

    def put_run(self, run: Run) -> None:
        """Insert ``run`` with its own id, or update the stored run of that id (imports: ``fleet``)."""
        self.db.execute("INSERT INTO runs (id, kind, name, status, created, updated, command, plan_json, env_json,"
                        " summary_json, parent_run) VALUES (?,?,?,?,?,?,?,?,?,?,?) ON CONFLICT(id) DO UPDATE SET"
                        " kind=excluded.kind, name=excluded.name, status=excluded.status, updated=excluded.updated,"
                        " command=excluded.command, plan_json=excluded.plan_json, env_json=excluded.env_json,"
                        " summary_json=excluded.summary_json",
                        (run.id, run.kind, run.name, run.status, run.created, run.updated, redact_text(run.command),
                         _j(redact_obj(to_json(run.plan))), _j(redact_obj(to_json(run.env))), _summary_json(run.summary),
                         run.parent_run))

    def child_runs(self, run_id: str) -> list[Run]:
        """Runs that reproduce ``run_id`` (oldest first)."""
        rows = self.db.execute(self._RUN_SELECT + " WHERE parent_run=? ORDER BY created", (run_id,))
        return self._runs(rows)

    def _runs(self, rows: Any) -> list[Run]:
        """The runs of ``rows``; damaged ones left out with one notice."""
        out, problems = [], []
        for r in rows:
            try:
                out.append(self._run(r))
            except DamagedRow as e:
                problems.append(e.message)
        _skipped("runs", problems, self.path)
        return out

    def _run(self, row: sqlite3.Row) -> Run:
        # URLs are redacted on the way in and again on the way out (stores written before that)
        rid = row["id"]
        what = f"run {str(rid)[:40]!r}"
        try:
            cells = _checked_cells(Run, {k: row[k] for k in ("id", "kind", "name", "status", "created", "updated",
                                                             "command")}, what)
            cells["created"], cells["updated"] = float(cells["created"]), float(cells["updated"])
            return Run(rid, cells["kind"], cells["name"], cells["status"], cells["created"], cells["updated"],
                       redact_text(cells["command"]),
                       RunPlan.from_json(redact_obj(_uj(row["plan_json"], f"{what}: plan_json", dict) or {})),
                       Environment.from_json(_ruj(row["env_json"], None, f"{what}: env_json", dict) or {}),
                       _ruj(row["summary_json"], None, f"{what}: summary_json", dict),
                       row["parent_run"] if "parent_run" in row.keys() else None)
        except DamagedRow as e:
            raise DamagedRow(e.message, self._damaged_fix) from None
        except (TypeError, ValueError, KeyError, AttributeError, RecursionError) as e:
            raise DamagedRow(f"{what} is damaged ({type(e).__name__}: {str(e)[:80]})", self._damaged_fix) from None

    @property
    def _damaged_fix(self) -> str:
        return f"a store is data: recover it (`sqlite3 {self.path} .recover`) or measure anew"

    _RUN_SELECT = ("SELECT id, kind, name, status, created, updated, command, " +
                   ", ".join(_col(c) for c in ("plan_json", "env_json", "summary_json")) + ", parent_run FROM runs")

    def get_run(self, run_id: str, kind: str | None = None) -> Run:
        """A run by reference — the one resolver for every command that takes a run:

        ``latest`` (optionally of one kind), else its exact id, else its exact ``--name`` (a name
        several runs share means the newest of them), else a unique id prefix. A prefix matching
        several runs is an error that lists them."""
        ref = _text(str(run_id or "").strip(), "run")
        if ref in ("latest", "last", ""):
            kind = _text(kind, "--kind") if kind else kind
            q, args = self._RUN_SELECT, []
            if kind:
                q, args = q + " WHERE kind=?", [kind]
            row = self.db.execute(q + " ORDER BY created DESC LIMIT 1", args).fetchone()
        else:
            row = self.db.execute(self._RUN_SELECT + " WHERE id=?", (ref,)).fetchone()
            if row is None:
                row = self.db.execute(self._RUN_SELECT + " WHERE name=? ORDER BY created DESC LIMIT 1", (ref,)).fetchone()
            if row is None:  # a prefix compared as text (no LIKE: '%' and '_' in a reference are literal)
                rows = self.db.execute(self._RUN_SELECT + " WHERE substr(id, 1, ?)=? ORDER BY created DESC",
                                       (len(ref), ref)).fetchall()
                if len(rows) > 1:
                    shown = ", ".join(f"{r['id']}" + (f" ({r['name']})" if r["name"] else "") for r in rows[:6])
                    more = f" and {len(rows) - 6} more" if len(rows) > 6 else ""
                    raise StoreError(f"run {ref!r} is ambiguous: it starts {len(rows)} run ids: {shown}{more}",
                                     "give more characters of the id, or the run's name (see `llamaforge runs`)")
                row = rows[0] if rows else None
        if row is None:
            raise StoreError(f"no run {ref or run_id!r} in {self.path} (no such id, name or id prefix)",
                             "list runs with `llamaforge runs`, or measure one with `llamaforge bench`")
        return self._run(row)

    def list_runs(self, kind: str | None = None) -> list[Run]:
        kind = _text(kind, "--kind") if kind else kind
        q, args = self._RUN_SELECT, []
        if kind:
            q, args = q + " WHERE kind=?", [kind]
        return self._runs(self.db.execute(q + " ORDER BY created", args))

    def set_run_status(self, run_id: str, status: str) -> None:
        self.db.execute("UPDATE runs SET status=?, updated=? WHERE id=?", (status, time.time(), run_id))

    def set_run_summary(self, run_id: str, summary: RunSummary | dict) -> None:
        """Store a run's summary as the record of its kind (a dict is read into it)."""
        if not isinstance(summary, RunSummary):
            row = self.db.execute("SELECT kind FROM runs WHERE id=?", (run_id,)).fetchone()
            summary = summary_record(row[0] if row else "", summary)
        self.db.execute("UPDATE runs SET summary_json=?, updated=? WHERE id=?", (_summary_json(summary), time.time(), run_id))

    def update_run_plan(self, run_id: str, plan: dict | RunPlan) -> None:
        """Replace a run's plan (the adaptive sweep records the points it chose as it goes)."""
        plan = to_json(plan if isinstance(plan, RunPlan) else RunPlan.from_json(plan))
        self.db.execute("UPDATE runs SET plan_json=?, updated=? WHERE id=?", (_j(redact_obj(plan)), time.time(), run_id))

    def update_run_env(self, run_id: str, env: dict | Environment) -> None:
        env = to_json(env if isinstance(env, Environment) else Environment.from_json(env))
        self.db.execute("UPDATE runs SET env_json=?, updated=? WHERE id=?", (_j(redact_obj(env)), time.time(), run_id))

    # ---- builds -----------------------------------------------------------------------------
    def add_build(self, manifest: dict, run_id: str | None = None) -> None:
        """Store a build manifest (``key``, ``backend``, ``pin``, ``commit`` fields) and link it to a run."""
        key = manifest["key"]
        self.db.execute("INSERT OR REPLACE INTO builds (key, backend, pin, commit_sha, manifest_json) VALUES (?,?,?,?,?)",
                        (key, manifest.get("backend"), manifest.get("pin"), manifest.get("commit"),
                         _j(redact_obj(manifest))))
        if run_id:
            self.db.execute("INSERT OR IGNORE INTO run_builds VALUES (?, ?)", (run_id, key))

    def link_build(self, run_id: str, key: str) -> None:
        """Link an already stored build to a run."""
        self.db.execute("INSERT OR IGNORE INTO run_builds VALUES (?, ?)", (run_id, key))

    def builds_for_run(self, run_id: str) -> list[dict]:
        rows = self.db.execute(f"SELECT b.key, substr(b.manifest_json, 1, {MAX_JSON_CHARS + 1}) FROM builds b JOIN run_builds rb"
                               " ON rb.build_key=b.key WHERE rb.run_id=? ORDER BY b.backend, b.key", (run_id,))
        out, problems = [], []
        for r in rows:
            try:
                m = _ruj(r[1], None, f"build {str(r[0])[:40]!r}: manifest_json", dict)
            except DamagedRow as e:
                problems.append(e.message)
                continue
            if m is not None:
                out.append(m)
        _skipped("builds", problems, self.path)
        return out

    def get_build(self, key: str) -> dict | None:
        row = self.db.execute(f"SELECT {_col('manifest_json')} FROM builds WHERE key=?", (key,)).fetchone()
        if not row:
            return None
        try:
            return _ruj(row[0], None, f"build {key[:40]!r}: manifest_json", dict)
        except DamagedRow as e:
            raise DamagedRow(e.message, self._damaged_fix) from None

    # ---- points & samples -------------------------------------------------------------------
    def record_point(self, p: Point) -> int:
        """Write a point and its samples atomically, replacing an earlier attempt of the same key."""
        with self.tx() as db:
            db.execute("DELETE FROM points WHERE run_id=? AND build_key=? AND engine=? AND ncmoe=? AND ngl=? AND label=?",
                       (p.run_id, *p.key))
            sec = env_secrets()
            vals = [redact_text(getattr(p, c), sec) if c in _POINT_TEXT else getattr(p, c) for c in POINT_COLUMNS]
            cols = [*POINT_COLUMNS, *(f"{POINT_KEYS[c]}_json" for c in _POINT_JSON)]
            vals += [_j(redact_obj(stored_value(getattr(p, c)), sec)) for c in _POINT_JSON]
            cur = db.execute(f"INSERT INTO points ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})", vals)
            pid = int(cur.lastrowid)
            db.executemany(
                f"INSERT INTO samples (point_id, {', '.join(_SAMPLE_COLUMNS)}) VALUES (?{',?' * len(_SAMPLE_COLUMNS)})",
                [(pid, *(_j(redact_obj(getattr(s, c), sec)) if c in _SAMPLE_JSON else
                         int(s.warmup) if c == "warmup" else getattr(s, c) for c in SAMPLE_FIELDS))
                 for s in p.samples])
            db.execute("UPDATE runs SET updated=? WHERE id=?", (time.time(), p.run_id))
        p.id = pid
        return pid

    def points(self, run_id: str, *, build_key: str | None = None, engine: str | None = None,
               with_samples: bool = True) -> list[Point]:
        q, args = _POINT_SELECT + " WHERE run_id=?", [run_id]
        if build_key:
            q, args = q + " AND build_key=?", args + [build_key]
        if engine:
            q, args = q + " AND engine=?", args + [engine]
        out, problems = [], []
        sec = env_secrets()
        for r in self.db.execute(q + " ORDER BY build_key, engine, label, ncmoe, ngl", args).fetchall():
            what = f"point {r['id']} of run {str(run_id)[:40]!r}"
            try:
                cells = _checked_cells(Point, {c: r[c] for c in POINT_COLUMNS}, what)
                p = Point(**{c: redact_text(v, sec) if c in _POINT_TEXT else v for c, v in cells.items()},
                          **{c: _ruj(r[f"{k}_json"], sec, f"{what}: {k}_json", _JSON_WANT[f"{k}_json"])
                             for c in _POINT_JSON if (k := POINT_KEYS[c])})
                _check_detail(p, what)
                p.id = r["id"]
                if with_samples:
                    p.samples = self.samples(p.id)
            except DamagedRow as e:
                problems.append(e.message)
                continue
            except (TypeError, ValueError, KeyError, AttributeError, RecursionError) as e:   # a detail of no shape
                problems.append(f"{what} is damaged ({type(e).__name__}: {str(e)[:80]})")
                continue
            out.append(p)
        _skipped("points", problems, self.path)
        return out

    def point_counts(self, run_id: str) -> tuple[int, int]:
        """(points, ok points) of a run, without reading them (``runs`` lists every run)."""
        row = self.db.execute("SELECT count(*), coalesce(sum(status = 'ok'), 0) FROM points WHERE run_id=?",
                              (run_id,)).fetchone()
        return int(row[0]), int(row[1])

    def samples(self, point_id: int) -> list[Sample]:
        rows = self.db.execute(_SAMPLE_SELECT + " WHERE point_id=? ORDER BY launch, warmup DESC, idx", (point_id,))
        sec = env_secrets()
        out, problems = [], []
        for r in rows:
            what = f"sample of point {point_id}"
            try:
                vals = {n: _ruj(r[col], sec, f"{what}: {col}", dict) if n in _SAMPLE_JSON else
                        bool(r[col]) if n == "warmup" else r[col] for n, col in zip(SAMPLE_FIELDS, _SAMPLE_COLUMNS, strict=True)}
                out.append(Sample(**_checked_cells(Sample, {k: v for k, v in vals.items() if k != "warmup"}, what)
                                  | {"warmup": vals["warmup"]}))
            except DamagedRow as e:
                problems.append(e.message)
        _skipped("samples", problems, self.path)
        return out

    def done_keys(self, run_id: str, *, include_failed: bool = True) -> set[tuple[str, str, int, int, str]]:
        """Keys of points already stored (for ``--resume``)."""
        q = "SELECT build_key, engine, ncmoe, ngl, label, status FROM points WHERE run_id=?"
        return {(r[0], r[1], r[2], r[3], r[4]) for r in self.db.execute(q, (run_id,))
                if include_failed or r[5] == "ok"}

    # ---- probes (compare / bisect) ----------------------------------------------------------
    def add_probe(self, p: Probe) -> None:
        self.db.execute("INSERT INTO probes (run_id, seq, commit_sha, subject, build_key, verdict, build_s, measure_s,"
                        " incremental, note) VALUES (?,?,?,?,?,?,?,?,?,?)",
                        (p.run_id, p.seq, p.commit_sha, redact_text(p.subject), p.build_key, p.verdict, p.build_s,
                         p.measure_s, None if p.incremental is None else int(p.incremental), redact_text(p.note)))

    def probes(self, run_id: str) -> list[Probe]:
        rows = self.db.execute("SELECT * FROM probes WHERE run_id=? ORDER BY seq, id", (run_id,))
        return [Probe(r["run_id"], r["seq"], r["commit_sha"], redact_text(r["subject"]), r["build_key"], r["verdict"],
                      r["build_s"], r["measure_s"], None if r["incremental"] is None else bool(r["incremental"]),
                      redact_text(r["note"]))
                for r in rows]
