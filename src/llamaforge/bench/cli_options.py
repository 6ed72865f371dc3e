"""The bench's side of the options table (:mod:`llamaforge.options.table`, where every option of ``bench``,
``fitmap``, ``demo``, ``fleet.bench``, ``reproduce`` — and of ``compare``, ``bisect`` and ``history.run`` — is
declared once: name, type, bounds, help, default, and per task what it states differently, with why).

* :func:`convert` — the table's :func:`~llamaforge.options.table.convert` with the bench's own types: ``--extra``
  through the allow-list, ``--depths`` through the list parser.
* :func:`bench_options` — the converted values of a run as a typed :class:`BenchOptions`, the input of
  :func:`llamaforge.bench.start.start_bench` (where the options are used: the plan, the builds, the run).
* the table's names, re-exported for the bench's callers: :data:`OPTIONS`, :data:`TASKS`, :data:`HOST_OPTIONS`,
  :func:`help_for`, :func:`default_of`, :func:`task_values`, :func:`parse_launches` → :class:`LaunchOptions`.

Adding a bench option: a row in the table, a field of :class:`BenchOptions`, the parameter in the task(s), and its
use in :mod:`llamaforge.bench.start`; the unit test names whatever is missing.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..options.table import (  # noqa: F401 (the table's names, re-exported for the bench's callers)
    HOST_OPTIONS,
    LAUNCH_HELP,
    MAX_LAUNCHES_LIMIT,
    OPTIONS,
    TASKS,
    LaunchOptions,
    Option,
    TaskOptions,
    default_of,
    help_for,
    parse_launches,
    task_values,
)
from ..options.table import convert as convert_table


def _extra(o: Option, v: Any) -> tuple[str, ...]:
    # start-up: bench.plan pulls in the model readers; only a run with --extra needs them here
    from .plan import split_extra

    return tuple(split_extra(str(v)))


def _depths(o: Option, v: Any) -> tuple[int, ...]:
    # start-up: bench.plan pulls in the model readers; only a run with --depths needs them here
    from .plan import parse_int_list

    return tuple(parse_int_list(str(v), what=o.flag, limit=1 << 24))


#: the converters of the bench's own types (rows of that ``kind`` in the table)
SPECIAL = {"extra": _extra, "depths": _depths}


def convert(values: Mapping[str, Any], names: Iterable[str] | None = None) -> dict[str, Any]:
    """The table's :func:`~llamaforge.options.table.convert` with the bench's own types (``--extra``, ``--depths``)."""
    return convert_table(values, names, SPECIAL)


# ---------------------------------------------------------------------------------- the typed result
@dataclass(frozen=True)
class BenchOptions:
    """A sweep's options, converted (``None``: not given, the run's default applies); what
    :func:`llamaforge.bench.start.start_bench` takes. ``launches`` is the sequential-starts group
    (``--launches``/``--max-launches``/``--precision`` together)."""

    model: str | None = None
    backends: str | None = None
    variant: tuple[str, ...] = ()
    variants_file: str | None = None
    pins: str | None = None
    ncmoe: str | None = None          # None: 0 (bench), every -ncmoe up to the layer count (fitmap)
    place: str | None = None          # placement strategies (llamacpp.placement), instead of --ncmoe
    rpc: str | None = None            # rpc-servers (HOST:PORT,… or local:N; llamacpp.rpc)
    split: str | None = None          # -sm modes swept
    tensor_split: str | None = None   # -ts ratios swept (3:1,1:1)
    main_gpu: int | None = None       # -mg
    device: str | None = None         # -dev
    max_points: int | None = None
    time_budget: float | None = None
    stable_after: int | None = None
    ngl: str | None = None
    repeats: int = 3
    launches: LaunchOptions = field(default_factory=lambda: parse_launches("auto"))
    seed: int | None = None
    sentinel_every: int | None = None
    engine: str = "server"
    allow_busy: bool = False
    prompt_tokens: int = 2500
    n_predict: int = 128
    vram_budget: float | None = None
    fitt: int | None = None
    extra: tuple[str, ...] = ()
    resume: str | None = None
    retry_failed: bool = False
    threads: int | None = None
    depths: tuple[int, ...] = ()
    load_timeout: float = 600.0
    request_timeout: float = 900.0
    bin_dir: str | None = None
    name: str | None = None
    ctx: int | None = None
    allow_broken: bool = False
    no_quirks: bool = False


#: the table's options that are not fields of :class:`BenchOptions` (folded into ``launches``)
_GROUPED = ("max_launches", "precision")


def bench_options(**values: Any) -> BenchOptions:
    """The given options (CLI values or Python values) converted and checked by the table, as one
    :class:`BenchOptions`; a value left out or ``None`` keeps the field's default."""
    unknown = sorted(set(values) - set(TASKS["bench"].names))
    if unknown:
        raise TypeError(f"not bench options: {', '.join(unknown)}")
    given = convert(values)
    lo = values.get("launches")
    launches = lo if isinstance(lo, LaunchOptions) else parse_launches(
        given.get("launches") or "auto", given.get("max_launches"), values.get("precision"))
    kept = {k: v for k, v in given.items() if v is not None and k not in _GROUPED}
    return BenchOptions(**{**kept, "launches": launches})
