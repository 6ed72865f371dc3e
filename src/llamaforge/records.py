"""Typed, versioned records for everything llamaforge stores as JSON: one schema, read and written here.

The store keeps a run's plan, its environment, build manifests and each point's memory breakdown as
JSON text (``runs.plan_json``, ``runs.env_json``, ``builds.manifest_json``, ``points.mem_breakdown_json``).
Every reader goes through the records below instead of reading dictionaries by key, so a key that
nothing writes cannot be read (the roofline once read ``bytes_per_token_base``, ``memory_bandwidth_gbs``
and ``env["cpu"]``, which no writer produced, and was "unknown" in every real run).

- :func:`to_json` / :func:`from_json` are the one conversion. ``to_json`` stamps
  :data:`VERSION_KEY` = :data:`RECORD_VERSION`; ``from_json`` reads it (absent: version 0, a store
  written before records) and applies each record's migration ladder (``MIGRATIONS[i]`` takes a
  dict from version ``i`` to ``i + 1``) before reading the fields.
- Keys a record does not know are kept in its ``unknown`` and written back unchanged, so a record
  round-trips what an older or newer writer stored (another module's new plan key is not lost). ``unknown``
  is never read by key: a key some module reads is a typed field of its record.
- :func:`field_table` is the field → type table (in the spirit of llama-bench's one field list):
  adding a stored field is one edit to its dataclass.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Self

RECORD_VERSION = 1
VERSION_KEY = "record_version"

Migration = Callable[[dict], dict]


def _num(x: Any) -> float | None:
    if isinstance(x, bool) or not isinstance(x, int | float):
        return None
    return float(x) if math.isfinite(x) else None


def _pos(x: Any) -> float | None:
    v = _num(x)
    return v if v is not None and v > 0 else None


@dataclass
class Record:
    """Base of every stored record: typed fields, unknown keys kept in ``unknown``."""

    #: JSON key of a field whose Python name differs (``self_`` → ``"self"``)
    KEYS: ClassVar[dict[str, str]] = {}
    #: the migration ladder of this record: MIGRATIONS[i] takes version i to i + 1
    MIGRATIONS: ClassVar[tuple[Migration, ...]] = ()

    #: the stored keys this version does not know (an older or newer writer's), written back unchanged and never
    #: read by key: a key that is read is a typed field (keyword-only: last in ``__init__``)
    unknown: dict = field(default_factory=dict, kw_only=True)

    def to_json(self) -> dict:
        """The record as stored, without the version key (see the module function :func:`to_json`)."""
        out: dict[str, Any] = {}
        for f in _fields(type(self)):
            v = getattr(self, f.name)
            if f.name == "unknown":
                continue
            if v is None and f.name not in self._present:
                continue        # an absent optional field stays absent
            out[self.KEYS.get(f.name, f.name)] = _dump(v)
        out.update(self.unknown)
        return out

    @classmethod
    def from_json(cls, d: Any, version: int | None = None) -> Self:
        """Read a stored dict of any version (``None``: the dict's own :data:`VERSION_KEY`, else 0); a record
        of this class gives a copy of itself."""
        if isinstance(d, cls):
            return cls.from_json(d.to_json(), RECORD_VERSION)
        d = dict(d) if isinstance(d, dict) else {}
        v = version if version is not None else int(d.pop(VERSION_KEY, 0) or 0)
        d.pop(VERSION_KEY, None)
        for step in cls.MIGRATIONS[v:RECORD_VERSION]:
            d = step(d)
        hints = _type_hints(cls)
        kw: dict[str, Any] = {}
        present: set[str] = set()
        for f in _fields(cls):
            if f.name == "unknown":
                continue
            key = cls.KEYS.get(f.name, f.name)
            if key in d:
                kw[f.name] = _load(hints[f.name], d.pop(key), v)
                present.add(f.name)
        rec = cls(**kw, unknown=d)
        rec._present = present
        return rec

    def replace(self, **changes: Any) -> Self:
        """A copy with ``changes``; optional fields the stored form had (as ``null``) stay in it, those set
        to None here leave it."""
        out = dataclasses.replace(self, **changes)
        out._present = self._present - {k for k, v in changes.items() if v is None}
        return out

    def keep_nulls(self, *names: str) -> Self:
        """A copy that writes these fields even while None (as ``null``), as a writer that always stored the key
        did; ``self`` is left as it is."""
        out = dataclasses.replace(self)
        out._present = self._present | set(names)
        return out

    @property
    def _present(self) -> set[str]:
        return self.__dict__.get("_present_keys", set())

    @_present.setter
    def _present(self, keys: set[str]) -> None:
        self.__dict__["_present_keys"] = keys


def _fields(cls: type) -> tuple[dataclasses.Field, ...]:
    return dataclasses.fields(cls)


@functools.cache
def _type_hints(cls: type) -> dict[str, Any]:
    """The field types of a record class, resolved once per class (launch records are read per point, often)."""
    return typing.get_type_hints(cls)


def _dump(v: Any) -> Any:
    if isinstance(v, Record):
        return v.to_json()
    if isinstance(v, list | tuple):
        return [_dump(x) for x in v]
    if isinstance(v, dict):
        return {k: _dump(x) for k, x in v.items()}
    return v


def _members(tp: Any) -> tuple[Any, ...]:
    """The types ``tp`` allows: ``X | None`` → X and NoneType; ``X`` → X."""
    if isinstance(tp, types.UnionType) or typing.get_origin(tp) is typing.Union:
        return typing.get_args(tp)
    return (tp,)


def _record_type(tp: Any) -> type[Record] | None:
    """The Record class in ``tp`` (``X``, ``X | None``), else None."""
    return next((a for a in _members(tp) if isinstance(a, type) and issubclass(a, Record)), None)


def _load(tp: Any, v: Any, version: int) -> Any:
    rec = _record_type(tp)
    if rec is not None:
        if isinstance(v, dict):
            return rec.from_json(v, version)
        return None if rec is not tp else rec()     # a section that is never None: its defaults
    if typing.get_origin(tp) is list:
        (item,) = typing.get_args(tp) or (Any,)
        inner = _record_type(item)
        if v is not None and not isinstance(v, list | tuple):   # a crafted store's ``"backends": 5``: one line
            raise TypeError(f"a list was stored as {type(v).__name__}")
        if inner is not None:
            return [inner.from_json(x, version) for x in v or [] if isinstance(x, dict)]
        return list(v) if isinstance(v, list | tuple) else v
    if isinstance(v, list) and any(typing.get_origin(a) is tuple for a in _members(tp)):
        return tuple(v)          # JSON has no tuples (``ncmoe_range``)
    return v


# ------------------------------------------------------------------------------ environment


def _gpu_v1(d: dict) -> dict:
    if "memory_bandwidth_gbs" in d and "memory_bandwidth_gbps" not in d:   # the phantom key (issue 13)
        d["memory_bandwidth_gbps"] = d.pop("memory_bandwidth_gbs")
    return d


@dataclass
class GpuInfo(Record):
    """One NVIDIA GPU as NVML saw it when the run started (``envinfo``)."""

    MIGRATIONS: ClassVar[tuple[Migration, ...]] = (_gpu_v1,)

    index: int | None = None
    name: str | None = None
    memory_total_mib: int | None = None
    memory_free_mib: int | None = None
    clock_sm_mhz: int | None = None
    clock_sm_max_mhz: int | None = None
    clock_mem_mhz: int | None = None
    clock_mem_max_mhz: int | None = None
    memory_bus_width_bits: int | None = None
    memory_bandwidth_gbps: float | None = None   # theoretical: max memory clock × 2 × bus width (GB/s)
    power_limit_w: float | None = None
    temperature_c: float | None = None
    compute_capability: str | None = None


#: the machine of a launch stored before llamaforge recorded one
UNKNOWN_MACHINE = "unknown"


@dataclass
class MachineRecord(Record):
    """Which machine measured something (:mod:`llamaforge.machine`): a short stable ``id`` derived from
    the boot id, ``/etc/machine-id`` and the GPU UUIDs (a reboot or another VM changes it), the host name
    for display only (two VMs of one image share it), and the ``parts`` that went into the id.
    Launches stored before this existed have none: their machine is ``unknown``."""

    id: str | None = None
    host: str | None = None
    parts: list[str] = field(default_factory=list)   # boot_id, machine_id, gpu_uuids×N, or override
    stable: str | None = None                        # the id without the boot id (machine.stable_id), where it differs

    def label(self) -> str:
        """``id (host)`` for reports and the terminal."""
        return f"{self.id or UNKNOWN_MACHINE}" + (f" ({self.host})" if self.host else "")


@dataclass
class ResumeRecord(Record):
    """One ``bench --resume`` of a run (``Environment.resumes``): when, on which machine, which machines
    had measured the run's earlier launches (id → launches), and the warning printed when they differ."""

    at: float | None = None
    machine: MachineRecord | None = None
    earlier: dict = field(default_factory=dict)
    warning: str | None = None


def _env_v1(d: dict) -> dict:
    """Version 0 shapes: ``cpu`` as a string or ``{"name"|"model", "memory_bandwidth_gbs"|"_gbps"}``,
    and ``ram_memory_bandwidth_gbs``; all become ``cpu_model`` / ``ram_bandwidth_gbps``."""
    cpu = d.pop("cpu", None)
    if isinstance(cpu, dict):
        d.setdefault("cpu_model", cpu.get("name") or cpu.get("model"))
        bw = _pos(cpu.get("memory_bandwidth_gbps")) or _pos(cpu.get("memory_bandwidth_gbs"))
        if bw is not None:
            d.setdefault("ram_bandwidth_gbps", bw)
    elif isinstance(cpu, str) and cpu:
        d.setdefault("cpu_model", cpu)
    for old in ("ram_memory_bandwidth_gbs", "ram_memory_bandwidth_gbps"):
        if old in d:
            d.setdefault("ram_bandwidth_gbps", d.pop(old))
    return d


@dataclass
class Environment(Record):
    """The machine a run was measured on (``runs.env_json``; written by :func:`envinfo.collect_env`); ``unknown``
    holds the tool versions (nvcc, vulkan_instance, ...)."""

    MIGRATIONS: ClassVar[tuple[Migration, ...]] = (_env_v1,)

    host: str | None = None
    machine: str | None = None                   # LLAMAFORGE_MACHINE (fleet), else the host name
    os: str | None = None
    kernel: str | None = None
    python: str | None = None
    cpu_model: str | None = None
    cpu_cores_logical: int | None = None
    cpu_cores_physical: int | None = None
    cpu_affinity: int | None = None
    ram_total_mib: int | None = None
    ram_available_mib: int | None = None
    ram_bandwidth_gbps: float | None = None      # measured copy bandwidth of host RAM (GB/s), see envinfo
    gpus: list[GpuInfo] = field(default_factory=list)
    nvidia_driver: str | None = None
    cuda_driver: str | None = None
    llamaforge: str | None = None
    machine_identity: MachineRecord | None = None  # the machine that started the run (llamaforge.machine)
    resumes: list[ResumeRecord] = field(default_factory=list)   # every later `bench --resume` of it
    fleet_host: str | None = None                # a run imported from a fleet host: the host (fleet.merge)
    machines: dict[str, dict] | None = None      # a fleet report's environment per machine (report.data; not stored)

    def cpu_bandwidth(self) -> tuple[str, float | None]:
        """(CPU name, host RAM bandwidth GB/s or None)."""
        return self.cpu_model or "CPU", _pos(self.ram_bandwidth_gbps)


# ------------------------------------------------------------------------------ model facts


def _facts_v1(d: dict) -> dict:
    if "bytes_per_token_base" in d:   # the phantom key (issue 13): the writer stores bytes_per_token_ctx0
        d.setdefault("bytes_per_token_ctx0", d.pop("bytes_per_token_base"))
    return d


#: a KV cache of a sliding-window layer holds the window plus one ubatch (llama.cpp's default 512)
DEFAULT_UBATCH = 512


@dataclass
class ModelFacts(Record):
    """What a model is, the one record of it: written from a GGUF file's header (or a synthetic plan) by
    :func:`llamaforge.models.gguf_info.facts_from_plan`, which sets every field, and stored in a run's plan
    (``plan.model.facts``), where every reader of a stored run reads it. Every field is optional because plans
    of older versions, and hand-made plans, carry a subset (``full_attention_interval``: only those)."""

    MIGRATIONS: ClassVar[tuple[Migration, ...]] = (_facts_v1,)

    path: str | None = None
    arch: str | None = None
    name: str | None = None
    n_layers: int | None = None
    full_attention_layers: list[int] | None = None
    full_attention_interval: int | None = None   # older plans: every N-th layer is full attention
    linear_attention_layers: list[int] | None = None
    n_experts: int | None = None
    n_experts_used: int | None = None
    has_shared_expert: bool | None = None
    vocab_size: int | None = None
    n_ctx_train: int | None = None
    n_embd: int | None = None
    n_head: int | None = None
    n_head_kv: int | None = None
    head_dim: int | None = None
    file_bytes: int | None = None
    tensor_count: int | None = None
    params_total: int | None = None
    params_active: int | None = None
    bytes_by_group: dict[str, int] | None = None
    types: dict[str, int] | None = None          # type name -> number of tensors
    bytes_by_type: dict[str, int] | None = None
    weight_bytes_per_token: int | None = None    # weights read per generated token
    kv_bytes_per_token_ctx: int | None = None    # f16 K+V bytes per context token (full-attention layers)
    recurrent_state_bytes: int | None = None     # per sequence, f32
    ncmoe_range: tuple[int, int] | None = None   # (0, 0) for a model without experts
    synthetic: bool | None = None
    tied_embeddings: bool | None = None          # no output.weight: token_embd is also the output projection
    sliding_window: int | None = None            # tokens a sliding-window layer attends to (0: none)
    swa_layers: list[int] | None = None
    kv_bytes_per_token_swa: int | None = None    # f16 K+V bytes per cached token of the sliding-window layers
    file_bytes_estimated: bool | None = None
    metadata: dict[str, Any] | None = None       # scalar metadata (arrays summarised)
    bpw: float | None = None                     # bits per weight of the tensor data (4 decimals)
    bytes_per_token_ctx0: int | None = None      # weights + recurrent state read per token (no KV)

    @property
    def is_moe(self) -> bool:
        return (self.n_experts or 0) > 0

    def base_bytes_per_token(self) -> float | None:
        """Bytes read per token without the KV cache (``bytes_per_token_ctx0``, else weights + recurrent state;
        None when the facts lack both)."""
        v = _pos(self.bytes_per_token_ctx0)
        if v is not None:
            return v
        w = _num(self.weight_bytes_per_token)
        return None if w is None else w + (_num(self.recurrent_state_bytes) or 0.0)

    def bytes_per_token(self, ctx: float = 0) -> float | None:
        """Bytes read per generated token at context ``ctx`` (sliding-window layers: at most their window)."""
        base = self.base_bytes_per_token()
        if base is None:
            return None
        ctx = max(0, ctx)
        kv = _num(self.kv_bytes_per_token_ctx) or 0.0
        swa, window = _pos(self.kv_bytes_per_token_swa), _pos(self.sliding_window)
        swa_read = 0.0 if swa is None else swa * (min(ctx, window) if window else ctx)
        return base + kv * ctx + swa_read

    def kv_cache_bytes(self, ctx: int, n_ubatch: int = DEFAULT_UBATCH) -> int:
        """f16 KV cache of one sequence at context ``ctx``: full-attention layers hold ``ctx`` tokens,
        sliding-window layers at most window + one ubatch (llama.cpp's ``llama_kv_cache_iswa``)."""
        ctx, window = max(0, ctx), self.sliding_window or 0
        swa_tokens = min(ctx, window + n_ubatch) if window else ctx
        return (self.kv_bytes_per_token_ctx or 0) * ctx + (self.kv_bytes_per_token_swa or 0) * swa_tokens

    def full_attention_layer_list(self) -> list[int]:
        """0-based indices of full-attention layers (the list, or derived from the interval)."""
        if isinstance(self.full_attention_layers, list | tuple):
            return sorted(int(x) for x in self.full_attention_layers if _num(x) is not None)
        iv, n = self.full_attention_interval, self.n_layers
        if isinstance(iv, int) and iv > 0 and isinstance(n, int):
            return [i for i in range(n) if (i + 1) % iv == 0]
        return []


# ------------------------------------------------------------------------------ run plan


@dataclass
class ModelSection(Record):
    ref: str | None = None
    path: str | None = None
    facts: ModelFacts = field(default_factory=ModelFacts)
    download: dict | None = None                 # how a downloaded model was checked (sha256, ...)


@dataclass
class PointSpec(Record):
    """One offload setting to measure (``RunPlan.points``). ``ngl=-1`` means llama.cpp's default (all layers).
    ``extra_args`` are added for this point only (rarely needed; used to inject faults in tests) and stored
    only when given."""

    ncmoe: int = 0
    ngl: int = -1
    extra_args: tuple[str, ...] = ()
    # ``--place``: the strategy (``last:4``; empty: the first ncmoe layers, ``-ncmoe``) and the ``-ot`` entries
    # it is passed as (then ``ncmoe`` is the number of layers whose experts it moves: the x axis)
    place: str = ""
    ot: tuple[str, ...] = ()
    # ``--split`` / ``--tensor-split`` (several devices, RPC): ``-sm`` (layer, row, …) and the ratio as written
    # (``3:1``, passed as ``-ts 3,1``); empty: llama.cpp's default
    split_mode: str = ""
    tensor_split: str = ""

    def __post_init__(self) -> None:
        self.extra_args = tuple(str(a) for a in self.extra_args or ())
        self.place = str(self.place or "")
        self.ot = tuple(str(a) for a in self.ot or ())
        self.split_mode = str(self.split_mode or "")
        self.tensor_split = str(self.tensor_split or "")

    def __hash__(self) -> int:   # hashable, as the frozen class it replaced: a point names one setting
        return hash((self.ncmoe, self.ngl, self.extra_args, self.place, self.ot, self.split_mode, self.tensor_split))

    def to_json(self) -> dict:
        out = super().to_json()
        for k in ("extra_args", "place", "ot", "split_mode", "tensor_split"):
            if not out.get(k):
                out.pop(k, None)
        return out


@dataclass
class Timeouts(Record):
    """How long a server may take to load the model, and one request to finish (seconds)."""

    load_s: float = 600.0
    request_s: float = 900.0


@dataclass
class FitSection(Record):
    """How llama.cpp fits the context (``bench.plan.FitOptions`` is this class): ``fitt_mib`` → ``-fitt`` (margin
    per device, MiB), or ``vram_budget_gib`` to emulate a smaller card (margin = free − budget + llama.cpp's
    default 1 GiB, per device, from NVML: ``bench.fit.resolve_fit`` fills ``margins_mib`` when the run starts)."""

    fitt_mib: int | None = None
    vram_budget_gib: float | None = None
    margins_mib: list[int] | None = None   # resolved per device margins
    fitt_arg: str | None = None            # as stored: the ``-fitt`` value of :meth:`target` when it was written
    notice: str | None = None

    def target(self) -> str | None:
        """The ``-fitt`` value: the per-device margins, else ``fitt_mib``, else None."""
        if self.margins_mib:
            return ",".join(str(m) for m in self.margins_mib)
        if self.fitt_mib is not None:
            return str(self.fitt_mib)
        return None

    def to_json(self) -> dict:
        """As stored, with ``fitt_arg`` the ``-fitt`` value of :meth:`target` as written (where there is one)."""
        target = self.target()
        return super().to_json() if target is None else {**super().to_json(), "fitt_arg": target}


@dataclass
class CompareSide(Record):
    """One side (A: base, B: head) of a compare run."""

    ref: str | None = None
    backend: str | None = None
    source: str | None = None
    build: str | None = None
    commit: str | None = None
    variant: dict | None = None           # --base-variant / --head-variant: variants.VariantBuild.to_record
    host: str | None = None               # a side measured on a fleet host (compare --base-host/--head-host)
    machine: str | None = None
    run: str | None = None                # ... the imported run of that host

    def text(self) -> str:
        """``ref (backend)``, plus ``on MACHINE`` for a side measured on a fleet host."""
        return f"{self.ref} ({self.backend})" + (f" on {self.machine}" if self.machine else "")


@dataclass
class CompareSection(Record):
    """The ``compare`` run kind's part of the plan."""

    KEYS: ClassVar[dict[str, str]] = {"a": "A", "b": "B"}

    a: CompareSide | None = None
    b: CompareSide | None = None
    repeats: int | None = None
    rounds: int | str | None = None       # server starts per side; "auto" for --launches auto
    max_launches: int | None = None
    per_round: int | None = None          # requests per server start
    min_effect: float | None = None
    interleave: str | None = None
    fleet_run: str | None = None          # compare --base-host/--head-host: the fleet run that measured both


@dataclass
class FleetSection(Record):
    """``plan.fleet``: of a fleet run (``fleet.toml`` and its hosts) or of a run imported from a host
    (the fleet run, host, machine and the host's own run id)."""

    file: str | None = None
    hosts: dict | None = None                    # host name → {machine, target} (a fleet run)
    run: str | None = None                       # the fleet run (an imported run)
    host: str | None = None
    machine: str | None = None
    remote_run: str | None = None
    remote_updated: float | None = None          # the host's run's ``updated`` when pulled (fleet.history) ...
    remote_points: int | None = None             # ... and its points then: pull again only what changed


@dataclass
class BisectSection(Record):
    """The ``bisect`` run kind's part of the plan: its request (``bisect.session.BisectRequest``), the commits
    between the ends and how each is measured."""

    good: str | None = None
    bad: str | None = None
    good_sha: str | None = None                    # the commits good and bad resolved to
    bad_sha: str | None = None
    metric: str | None = None                      # tg or pp
    backend: str | None = None
    threshold: float | None = None                 # the minimum effect: the ends must differ by more (0.05: 5 %)
    repeats: int | None = None                     # llama-bench -r: requests inside one start
    source: str | None = None                      # path:DIR / git:URL for commits not in the mirror yet
    commits: list[str] = field(default_factory=list)   # good, then the first-parent line up to bad
    subjects: dict = field(default_factory=dict)   # commit → its subject line
    max_measured: int | None = None                # the most commits a clean bisection measures: ⌈log2 N⌉ + 2
    build_dir: str | None = None                   # the incremental build's folder
    cold_start: bool | None = None                 # that folder held no build yet when the bisect started
    min_starts: int | None = None                  # starts per commit before the judge compares it
    max_launches: int | None = None                # starts per commit at most
    unit: str | None = None                        # what one start is
    quiet: dict = field(default_factory=dict)      # bisect.quiet.Quiet: threads and scheduling options used


@dataclass
class HistorySection(Record):
    """A history run's plan (``inv history.run``): which commits, how each is measured, and the series it
    extends (:mod:`llamaforge.history`)."""

    selection: str | None = None                    # "--range a..b --every 2", "--releases", "--commits ..."
    setup: str | None = None                        # how one start measures (the series key's setup)
    commits: list[dict] = field(default_factory=list)   # history.select.Chosen.to_dict, in order: the plan
    source: str | None = None
    min_starts: int | None = None
    max_launches: int | None = None
    precision: float | None = None
    min_effect: float | None = None
    continues: bool | None = None                   # --continue: only what is new since the series' last run
    bisect: bool | None = None
    quiet: dict = field(default_factory=dict)       # per build key: bisect.quiet.Quiet (llama-bench on cpu)


def _plan_v1(d: dict) -> dict:
    if not isinstance(d.get("fit"), dict):   # very old / hand-made plans stored ``"fit": true``
        d["fit"] = {}
    return d


@dataclass
class AdaptiveSection(Record):
    """An adaptive sweep's part of the plan (``bench --ncmoe auto`` / ``--ngl auto``,
    :mod:`llamaforge.bench.autosweep`); every point is given as a value of ``axis``."""

    axis: str = "ncmoe"                               # the option swept: ncmoe, or ngl (a dense model)
    options: dict = field(default_factory=dict)       # bench.adaptive.AdaptiveOptions
    fitmap_run: str | None = None
    ctx: dict = field(default_factory=dict)           # build key → {point: fitted context} (the fits made)
    sentinels: str | None = None
    domain: list[int] = field(default_factory=list)
    stopped: str | None = None                        # stable | max-points | time-budget (None: not finished)
    n_measured: int | None = None
    chosen: list[dict] = field(default_factory=list)  # {series, <axis>, reason}, in the order measured
    confirmed: list[dict] = field(default_factory=list)
    interpolated: dict = field(default_factory=dict)  # build key → {point: tg median}: never a measurement
    conclusions: dict = field(default_factory=dict)   # threshold, sweet_spot, regions, anomalies


@dataclass
class BisectRunSection(Record):
    """``plan.bisect_run``: the run of one commit under ``git bisect run`` (:mod:`llamaforge.bisect.git_run`)."""

    boundary: str | None = None                       # the value between good and bad, as text
    max_launches: int | None = None
    quiet: dict = field(default_factory=dict)         # bisect.quiet.Quiet.to_dict


@dataclass
class PlanNotes(Record):
    """``plan.notes`` (stored as ``"extra"``): how a fit-map run chose its points (``bench.autosweep``)."""

    search: str | None = None


#: what a plan means where it does not say (``bench.plan`` explains the choices)
DEFAULT_REPEATS = 3
DEFAULT_PROMPT_TOKENS = 2500
DEFAULT_N_PREDICT = 128


@dataclass
class RpcSection(Record):
    """``bench --rpc``: the rpc-server endpoints (``host:port``) of the run as given (``local:N``: that many
    started by llamaforge on 127.0.0.1 for the sweep, their ports chosen when it starts), and the devices
    llama.cpp listed with them (``RPC0: 127.0.0.1:50052``)."""

    given: list[str] = field(default_factory=list)
    endpoints: list[str] = field(default_factory=list)
    local: int = 0
    devices: list[str] = field(default_factory=list)


@dataclass
class RunPlan(Record):
    """A run's plan (``runs.plan_json``), and the sweep plan itself (``bench.plan.Plan`` is this class): the
    model, builds × points × engine × repeats × prompt and how each start measures, plus one section per run
    kind that needs one (``compare``, ``bisect``, ``history``, ``adaptive``, ``fleet``; ``reproduces`` for a
    re-run). A new sweep's plan is made and checked by ``bench.plan.make_plan``; a stored one is read as it
    is, with the defaults below for what an older plan lacks."""

    KEYS: ClassVar[dict[str, str]] = {"prompt_tokens": "prompt_tokens_target", "build_keys": "builds", "notes": "extra"}
    MIGRATIONS: ClassVar[tuple[Migration, ...]] = (_plan_v1,)

    model: ModelSection = field(default_factory=ModelSection)
    build_keys: list[str] = field(default_factory=list)     # filled when the run starts
    backends: list[str] = field(default_factory=list)
    pins: list[str] = field(default_factory=list)
    points: list[PointSpec] = field(default_factory=list)
    engine: str = "server"                       # server, llama-bench, both (bench.plan.ENGINES); fitmap: fit
    repeats: int = DEFAULT_REPEATS
    prompt_tokens: int = DEFAULT_PROMPT_TOKENS   # stored as ``prompt_tokens_target``
    n_predict: int = DEFAULT_N_PREDICT
    fit: FitSection = field(default_factory=FitSection)
    extra_args: list[str] = field(default_factory=list)
    threads: int | None = None
    timeouts: Timeouts = field(default_factory=Timeouts)
    warmup: bool = True
    stream: bool | None = None                   # measured requests streamed (server-sent events; None: stored before)
    bench_depths: list[int] = field(default_factory=list)   # llama-bench -d
    launches: int = 1                            # server starts per point (K); with ``sequential``: the first K
    sequential: dict | None = None               # --launches auto: max_launches, precision, min_effect
    seed: int | None = None                      # schedule seed (drawn and recorded when the run starts)
    sentinel_every: int | None = None            # None = automatic (see bench.schedule); 0 = off
    ctx: int | None = None                       # -c for every point (else llama.cpp fits it, where it can)
    quirks: bool = True                          # apply recorded quirks / CPU-Vulkan defaults
    runtime: dict = field(default_factory=dict)  # per build key: bench.adjust.Runtime
    compare: CompareSection | None = None        # run kind "compare"
    bisect: BisectSection | None = None          # run kind "bisect"
    history: HistorySection | None = None        # run kind "history"
    reproduces: str | None = None                # the run this one re-measures ("reproduce")
    adaptive: AdaptiveSection | None = None      # a sweep whose points were chosen (bench --ncmoe auto)
    # --variant: one record per variant (llamaforge.variants.VariantBuild.to_record: name, backend, pin, defines,
    # env, args, build key, device listings); its points carry the variant's name as their label
    variants: list[dict] = field(default_factory=list)
    fleet: FleetSection | None = None            # run kind "fleet", or a run imported from a fleet host
    bench_args: list[str] | None = None          # run kind "fleet": the options every host's bench gets
    host_backends: dict | None = None            # run kind "fleet": host name → backends
    bisect_run: BisectRunSection | None = None   # run kind "bisect-run"
    fleet_hosts: dict | None = None              # a fleet report's plan: FleetSummary.hosts (report.data; not stored)
    notes: PlanNotes | None = None               # stored as "extra": a fit-map run's search (bench.autosweep)
    # bench --rpc (llamacpp.rpc): the rpc-servers every llama-server start uses; --main-gpu / --device passed through
    rpc: RpcSection | None = None
    main_gpu: int | None = None
    device: str | None = None

    @property
    def facts(self) -> ModelFacts:
        return self.model.facts

    @property
    def model_ref(self) -> str:
        return str(self.model.ref or self.model.path or self.facts.name or "unknown model")

    @property
    def model_path(self) -> Path:
        return Path(self.model.path or "")

    @property
    def n_layers(self) -> int | None:
        v = self.facts.n_layers
        return int(v) if v is not None else None

    def sweep_only(self) -> RunPlan:
        """A copy of the sweep this plan measures, without what a run of it added (the sections of other run
        kinds, ``reproduces``, the chosen points' ``adaptive`` record, the fleet import, unknown keys): what a
        re-measurement starts from."""
        return type(self).from_json(self).replace(
            compare=None, bisect=None, history=None, reproduces=None, adaptive=None, fleet=None, bench_args=None,
            host_backends=None, bisect_run=None, fleet_hosts=None, notes=None, unknown={})

    def differences(self, other: RunPlan) -> list[str]:
        """What keeps two sweeps from being measurements of one plan (``[]``: the same plan): the model, the
        engine, the prompt, the generation length, the fit the user asked for (budget, margin; the margins
        derived from them may differ between machines), the extra arguments and a fixed context."""
        out = ["model"] if self.model.ref != other.model.ref else []
        for name in ("engine", "prompt_tokens", "n_predict", "extra_args", "ctx"):
            if getattr(self, name) != getattr(other, name):
                out.append(name)
        for name in ("vram_budget_gib", "fitt_mib"):
            if getattr(self.fit, name, None) != getattr(other.fit, name, None):
                out.append(f"fit {name}")
        if _variant_defs(self.variants) != _variant_defs(other.variants):
            out.append("variants")
        return out


def _variant_defs(variants: list[dict]) -> list[tuple]:
    """What makes two runs' variants the same: names, backends, pins, defines, environment and arguments."""
    return [(v.get("name"), v.get("backend"), v.get("pin"), sorted((v.get("defines") or {}).items()),
             sorted((v.get("env") or {}).items()), list(v.get("args") or [])) for v in variants]


# ------------------------------------------------------------------------------ builds


@dataclass
class BuildManifest(Record):
    """The part of a build manifest the store and the reports read (``builds.manifest_json``)."""

    key: str = ""
    backend: str | None = None
    pin: str | None = None
    commit: str | None = None
    flags: dict = field(default_factory=dict)
    toolchain: dict = field(default_factory=dict)
    capabilities: dict = field(default_factory=dict)
    binaries: dict = field(default_factory=dict)
    build_number: int | None = None              # an external build's (bench.external); llama-bench's build_number

    def device_names(self) -> list[str]:
        return [str(d.get("name", "")) for d in self.capabilities.get("devices") or [] if isinstance(d, dict)]


class BuildLike(typing.Protocol):
    key: str
    backend: str
    pin: str
    commit: str
    manifest: dict | None


def build_manifest(b: BuildLike) -> dict:
    """What the store keeps of a build (its manifest, with the identity fields on top)."""
    return {**(b.manifest or {}), "key": b.key, "backend": b.backend, "pin": b.pin, "commit": b.commit}


# ------------------------------------------------------------------------------ launches


@dataclass
class LaunchRecord(Record):
    """One start of a point: a llama-server start or a llama-bench process (``PointDetail.launches``, stored as
    ``points.extra_json`` ``launches``; written by ``bench.sweep.merge_launch``, read through ``store.Point.launches``): its position in the run's
    schedule, status, times, memory, telemetry, the machine that measured it (``None`` in launches stored before
    that: ``unknown``) and its engine-gap requests. Launches stored before a field existed lack its key (they
    read as None and are written back without it); :meth:`stored` is what the writer stores: every field, None
    as ``null``."""

    launch: int = 1                      # 1-based start of the point
    seq: int | None = None               # position in the run's schedule (interleaved over points and builds)
    status: str | None = None            # ok | failed (None: stored without one, read as ok)
    failure_class: str | None = None     # oom | crash | hang | unhealthy | bad-response | fit | error
    started: float | None = None         # wall clock (time.time()) of the start ...
    finished: float | None = None        # ... and of its end
    n_ctx: int | None = None             # the context this start fitted
    rss_peak_mib: float | None = None
    vram_self_mib: float | None = None
    vram_used_mib: float | None = None
    t_load_s: float | None = None
    telemetry: dict | None = None        # bench.telemetry.TelemetrySampler.summary
    host_mem: dict | None = None         # bench.monitor.MonitorResult.host_mem: rss_anon/file_peak_mib, source
    busy: dict | None = None             # --allow-busy: {"gpu_processes": [...]} found before the start
    machine: MachineRecord | None = None
    engine_gap: dict | None = None       # bench.engine_gap.record (server: requests) / bench_record (llama-bench)

    @property
    def machine_id(self) -> str:
        return (self.machine.id if self.machine else None) or UNKNOWN_MACHINE

    @property
    def ok(self) -> bool:
        """Whether this start succeeded (a launch stored without a status counts as ok)."""
        return self.status is None or self.status == "ok"

    def seconds(self) -> float | None:
        """Wall time of this start (start to stop), None when either time is missing."""
        return self.finished - self.started if self.started and self.finished else None

    def complete(self) -> LaunchRecord:
        """A copy that writes every field, None as ``null``: what ``merge_launch`` stores."""
        return self.keep_nulls(*(f.name for f in _fields(type(self)) if f.name != "unknown"))

    def stored(self) -> dict:
        """The stored form as ``merge_launch`` writes it: every field, None as ``null``."""
        return self.complete().to_json()


# ------------------------------------------------------------------------------ a measured point


def _detail_v1(d: dict) -> dict:
    """Version 0 (every ``extra_json`` written before the record) has the shape of version 1."""
    return d


@dataclass
class PointDetail(Record):
    """What a measured point records beyond its columns (``store.Point.detail``, stored in ``points.extra_json``;
    the JSON export's and the fleet import's ``"extra"``): how its context was chosen, its prompt, the model's
    metadata, memory and telemetry, every start (:class:`LaunchRecord`), why more starts stopped, llama-bench's
    own rows. Each field is written by one producer, named beside it; a stored key no field knows stays in
    ``unknown``. Nested payloads (``fit``, ``prompt``, ``telemetry``, ...) are their producer's ``to_dict()``.
    An absent field is None (a list: empty) and is written back absent, so a stored detail round-trips as it
    was; :func:`mistyped` names a stored value of the wrong type (the store reads such a row as damaged)."""

    MIGRATIONS: ClassVar[tuple[Migration, ...]] = (_detail_v1,)
    #: list fields written only when they hold something (or were stored, even empty)
    _OPTIONAL_LISTS: ClassVar[tuple[str, ...]] = ("warnings", "launches")

    # how the context was chosen (bench.engines.server / llamabench / fit)
    fit_status: str | None = None        # fitted | fixed | unsupported | refused | refused-unfitted (findings.labels)
    fit_note: str | None = None          # why the fit the user asked for was not made
    fit_refused: str | None = None       # llama-server's own words when it refused to fit (llamacpp.server.fit_refusal)
    fit_reused: bool | None = None       # llama-bench: the fit of an earlier point of this build was reused
    fit: dict | None = None              # llama-fit-params' result (bench.engines.fit.FitResult.to_dict)
    placement: str | None = None         # engine "fit": where the experts went (FitResult.placement; null: no fit)
    n_ctx_source: str | None = None      # llama-bench: where n_ctx came from ("llama-fit-params"; null: unknown)
    # what was measured (bench.engines.server)
    prompt: dict | None = None           # bench.prompts.Prompt.to_dict
    model_meta: dict | None = None       # llama-server's /models meta of the loaded model
    output_guard: dict | None = None     # tokens banned after the server rejected its own non-UTF-8 output
    engine_gap: dict | None = None       # --engine both: bench.engine_gap.record / bench_record
    warnings: list[str] = field(default_factory=list)   # a request that generated fewer tokens, a launch's n_ctx
    llama_bench: list[dict] | None = None   # llama-bench's result objects as it printed them (the jsonl export)
    # memory and conditions (bench.monitor.store_monitor, bench.engines.server, bench.sweep)
    vram_self_source: str | None = None  # "fit_memory_breakdown": vram_self_mib from llama.cpp, not NVML
    host_mem: dict | None = None         # bench.monitor.MonitorResult.host_mem
    telemetry: dict | None = None        # bench.telemetry.TelemetrySampler.summary (the first flagged start's)
    observed: dict | None = None         # a variant's point: what the binary ran with (variants.observe.observe_log)
    busy: dict | None = None             # --allow-busy: what else was computing (bench.sweep.busy_gpu_check)
    # the starts (bench.sweep.merge_launch) and why there were not more (bench.auto_launches, bench.autosweep)
    launches: list[LaunchRecord] = field(default_factory=list)
    sequential: dict | None = None       # bench.auto_launches: K, status, reason
    # --place (bench.placed.moved_detail): the strategy, the layers and tensors it moves, their bytes, and what
    # llama.cpp said it overrode (read_back: source, tensors as [name, buffer], MiB)
    moved: dict | None = None
    # every device's memory as llama.cpp's memory breakdown gives it (bench.engines.server; llamacpp.rpc.devices_mem):
    # name, description (an RPC device: its endpoint), total, free, self, model, context, compute (MiB); "Host" last
    devices_mem: list[dict] | None = None

    def to_json(self) -> dict:
        out = super().to_json()
        for name in self._OPTIONAL_LISTS:
            if not getattr(self, name) and name not in self._present:
                out.pop(name, None)
        return out

    @classmethod
    def from_json(cls, d: Any, version: int | None = None) -> Self:
        rec = super().from_json(d, version)
        rec.__dict__["_unversioned"] = isinstance(d, dict) and VERSION_KEY not in d and version is None
        return rec

    @property
    def empty(self) -> bool:
        """Nothing recorded (the store keeps such a point's ``extra_json`` NULL)."""
        return not self.to_json()

    def stored(self) -> dict | None:
        """The ``points.extra_json`` of a point written now: None when empty, else stamped with the version."""
        return None if self.empty else to_json(self)

    def exported(self) -> dict | None:
        """The JSON export's ``"extra"``: the detail as the store holds it (a row written before points were
        versioned: without the version key), None when there is none."""
        if self.empty:
            return None
        return self.to_json() if self.__dict__.get("_unversioned") else to_json(self)

    def merge(self, new: PointDetail, launch: int, *, flagged: bool) -> None:
        """Fold a later start's detail into this point's (``bench.sweep.merge_launch``): its warnings prefixed
        with the start, its telemetry unless this one's is ``flagged`` (throttled, loaded), its host memory,
        its ``busy`` when set; any other field only where this one has none. Launches are the caller's."""
        self.warnings.extend(f"launch {launch}: {w}" for w in new.warnings)
        if new.telemetry is not None and not flagged:
            self.telemetry = new.telemetry
        if new.host_mem is not None:
            self.host_mem = new.host_mem
        self.busy = new.busy or self.busy
        present = set(self._present)
        for f in _fields(type(self)):
            if f.name in ("unknown", "telemetry", "host_mem", "busy", *self._OPTIONAL_LISTS):
                continue
            if getattr(self, f.name) is None and f.name not in present and (
                    getattr(new, f.name) is not None or f.name in new._present):
                setattr(self, f.name, getattr(new, f.name))
                present.add(f.name)
        self._present = present
        for k, v in new.unknown.items():
            self.unknown.setdefault(k, v)


def _problem(tp: Any, v: Any, path: str) -> str | None:
    """Why ``v`` (at ``path``) is not a value of the annotation ``tp``; None when it is."""
    members = _members(tp)
    if v is None:
        return None if type(None) in members or Any in members else f"{path} holds null, not {_type_name(tp)}"
    for a in members:
        if a is Any:
            return None
        origin = typing.get_origin(a) or a
        if isinstance(origin, type) and issubclass(origin, Record) and isinstance(v, Record):
            return mistyped(v, f"{path}.")
        if isinstance(v, bool):          # JSON true is no number
            if origin is bool:
                return None
            continue
        if (origin is float and isinstance(v, int | float)) or (origin in (int, str, dict) and isinstance(v, origin)):
            return None
        if origin in (list, tuple) and isinstance(v, list | tuple):
            (item,) = typing.get_args(a)[:1] or (Any,)
            return next((why for i, x in enumerate(v) if (why := _problem(item, x, f"{path}[{i}]"))), None)
    return f"{path} holds {type(v).__name__} {str(v)[:40]!r}, not {_type_name(tp)}"


def mistyped(rec: Record, prefix: str = "") -> str | None:
    """The first field of ``rec`` (or of a record inside it) whose value is not of its declared type, as
    ``launches[0].status holds int 5, not str | None``; None when every field fits. ``from_json`` keeps what a
    store holds as it is: a reader of stored data checks with this (``store.Store.points`` reads such a point as
    a damaged row)."""
    hints = _type_hints(type(rec))
    for f in _fields(type(rec)):
        if f.name != "unknown" and (why := _problem(hints[f.name], getattr(rec, f.name),
                                                    prefix + rec.KEYS.get(f.name, f.name))):
            return why
    return None


# ------------------------------------------------------------------------------ memory breakdown


@dataclass
class MemRow(Record):
    """One row of llama.cpp's ``fit_memory_breakdown`` (MiB)."""

    KEYS: ClassVar[dict[str, str]] = {"self_": "self"}

    kind: str | None = None          # device | host | buffer_type
    name: str | None = None
    total: float | None = None
    free: float | None = None
    self_: float | None = None
    model: float | None = None
    context: float | None = None
    compute: float | None = None


def breakdown_shape(mb: Any) -> dict | None:
    """Any stored breakdown in the runner's shape ``{"unit", "devices", "host", "other"}``.

    Older writers stored ``{name: row}`` or llama.cpp's list of rows; in those an entry without a
    ``kind`` is a device when it has a ``total`` and is not named host/CPU, else a buffer type."""
    if isinstance(mb, dict) and isinstance(mb.get("devices"), list):
        return mb
    if isinstance(mb, dict):
        rows = [dict(v, name=k) for k, v in mb.items() if isinstance(v, dict)]
    elif isinstance(mb, list):
        rows = [dict(e) for e in mb if isinstance(e, dict)]
    else:
        return None
    out: dict[str, Any] = {"unit": "MiB", "devices": [], "host": None, "other": []}
    for r in rows:
        kind = str(r.get("kind") or "").lower()
        name = str(r.get("name") or "").lower()
        if not kind:
            kind = ("device" if _num(r.get("total")) and "host" not in name and not name.startswith("cpu")
                    else "buffer_type")
        r["kind"] = kind
        if kind == "device":
            out["devices"].append(r)
        elif kind == "host" and out["host"] is None:
            out["host"] = r
        else:
            out["other"].append(r)
    return out


@dataclass
class MemoryBreakdown(Record):
    """A point's memory split as llama.cpp reported it (``points.mem_breakdown_json``)."""

    MIGRATIONS: ClassVar[tuple[Migration, ...]] = (lambda d: breakdown_shape(d) or {},)

    unit: str = "MiB"
    devices: list[MemRow] = field(default_factory=list)
    host: MemRow | None = None
    other: list[MemRow] = field(default_factory=list)

    @classmethod
    def of(cls, stored: Any) -> MemoryBreakdown | None:
        """A stored breakdown of any shape (dict of rows, list of rows, the runner's), or None."""
        shaped = breakdown_shape(stored)
        return None if not shaped else cls.from_json(shaped, RECORD_VERSION)


# ------------------------------------------------------------------------------ run summaries


@dataclass
class RunSummary(Record):
    """What a run concluded (``runs.summary_json``): one record per run kind (:data:`SUMMARIES`); a run of
    another kind keeps its summary in ``unknown``. Written once the run ends (a fleet run: as hosts report)."""



@dataclass
class SweepSummary(RunSummary):
    """A sweep's counts and times (``bench.summary.run_summary``), and its re-measurement's verdict."""

    points: int | None = None
    ok: int | None = None
    failed: int | None = None
    failures: dict = field(default_factory=dict)      # failure class → points
    unstable_points: int | None = None
    time: dict = field(default_factory=dict)          # wall_s, load_s, warmup_s, measure_s
    machines: dict | None = None                      # bench.summary.machines_summary (None: stored before)
    allow_busy: bool | None = None                    # measured with --allow-busy
    reproduce: dict | None = None                     # this run re-measures another: reproduce.Verdict.to_dict


@dataclass
class CompareSummary(RunSummary):
    """A compare run's verdicts: one row per point and metric (``compare.comparisons``)."""

    comparisons: list[dict] = field(default_factory=list)
    min_effect: float | None = None
    points: int | None = None
    failed: int | None = None
    launches: dict | int | None = None     # the policy of --launches auto (a dict), or the fixed starts per side
    stops: dict | None = None              # point index → why --launches auto stopped adding starts
    cross_machine: bool | None = None      # compare --base-host/--head-host


@dataclass
class BisectSummary(RunSummary):
    """A bisection's result (``bisect.session.summary``)."""

    status: str | None = None              # found | undecided | skipped | refused
    first_bad: str | None = None
    subject: str | None = None
    candidates: list[str] = field(default_factory=list)
    reason: str | None = None
    builds: int | None = None
    measured: int | None = None
    skipped: list[str] = field(default_factory=list)
    starts: int | None = None
    endpoints: dict | None = None
    feasibility: dict | None = None
    feasibility_line: str | None = None
    culprit: dict | None = None
    metric: str | None = None
    quiet: dict | None = None
    probes: list[dict] = field(default_factory=list)


@dataclass
class FleetSummary(RunSummary):
    """A fleet run's state per host (``fleet.run.bench_all``): machine, status, imported run, error and fix."""

    hosts: dict = field(default_factory=dict)


@dataclass
class HistorySummary(RunSummary):
    """A history run's progress and what it found (``history.run``): commits measured, failed (build or run,
    per backend), the steps located by bisect (``culprits``: history.bisect_steps.Culprit.to_dict)."""

    measured: list[str] = field(default_factory=list)
    failed: dict = field(default_factory=dict)            # sha → {backend: "build: ..." | "run: ..."}
    starts: int | None = None
    builds: dict = field(default_factory=dict)            # sha → {backend: {"key", "build_s", "how"}}
    measure_s: dict = field(default_factory=dict)         # sha → seconds measuring (all backends and points)
    culprits: list[dict] = field(default_factory=list)
    stops: dict = field(default_factory=dict)             # "sha backend ncmoe" → why starts stopped
    pairs: list[dict] = field(default_factory=list)       # neighbours measured interleaved: history.run.pair_rows


#: run kind → its summary record (other kinds: :class:`RunSummary`)
SUMMARIES: dict[str, type[RunSummary]] = {"sweep": SweepSummary, "compare": CompareSummary,
                                          "bisect": BisectSummary, "fleet": FleetSummary,
                                          "history": HistorySummary}


def summary_record(kind: str, d: Any) -> RunSummary | None:
    """A stored summary of a run of ``kind`` as its record (None: the run has none yet)."""
    if d is None:
        return None
    cls = SUMMARIES.get(kind, RunSummary)
    return d if type(d) is cls else cls.from_json(d.to_json() if isinstance(d, Record) else d)


# ------------------------------------------------------------------------------ conversion


def to_json(rec: Record) -> dict:
    """The stored form of a top-level record, stamped with :data:`RECORD_VERSION`."""
    return {**rec.to_json(), VERSION_KEY: RECORD_VERSION}


R = typing.TypeVar("R", bound=Record)


def from_json(cls: type[R], d: Any) -> R:
    """Read a stored top-level record of any version (see :meth:`Record.from_json`)."""
    return cls.from_json(d)


def stamp(d: dict | None) -> dict:
    """A stored dict written by a module that builds its JSON itself, stamped with the current version."""
    return {**(d or {}), VERSION_KEY: RECORD_VERSION}


TOP_LEVEL: tuple[type[Record], ...] = (RunPlan, Environment, BuildManifest, MemoryBreakdown, LaunchRecord,
                                       PointDetail, *SUMMARIES.values())


def _type_name(tp: Any) -> str:
    if isinstance(tp, type):
        return tp.__name__
    return str(tp).replace("typing.", "").replace("llamaforge.records.", "")


def field_table(cls: type[Record] | None = None) -> dict[str, dict[str, str]]:
    """Record name → {stored key → type}; every record reachable from the top-level ones (or ``cls``)."""
    out: dict[str, dict[str, str]] = {}
    todo = [cls] if cls else list(TOP_LEVEL)
    while todo:
        c = todo.pop(0)
        if c.__name__ in out:
            continue
        hints = typing.get_type_hints(c)
        out[c.__name__] = {c.KEYS.get(f.name, f.name): _type_name(hints[f.name]) for f in _fields(c)}
        for f in _fields(c):
            tp = hints[f.name]
            inner = _record_type(tp) or (_record_type((typing.get_args(tp) or (None,))[0])
                                         if typing.get_origin(tp) is list else None)
            if inner is not None:
                todo.append(inner)
    return out
