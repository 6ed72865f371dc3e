"""The bench options table: every option of ``bench``, ``fitmap``, ``demo``, ``fleet.bench`` and ``reproduce``,
declared once — name, type, bounds, help, default and converter — and checked here.

* :data:`OPTIONS` — one :class:`Option` row per option. A task's ``help=`` is :func:`help_for` (the rows'
  help, with the few texts a task states differently listed in :data:`TASKS`); its parameters and their
  defaults are checked against the rows by ``tests/unit/test_bench_cli_options.py``.
* :func:`convert` — given values through their rows' converters (``None`` stays "not given"): numbers
  through :mod:`llamaforge.values` (one ConfigError line with the fix), ``--extra`` through the allow-list,
  ``--depths`` and ``--min-effect`` through their parsers.
* :func:`bench_options` — the converted values of a run as a typed :class:`BenchOptions`, the input of
  :func:`llamaforge.bench.start.start_bench` (where the options are used: the plan, the builds, the run).
* the sequential-starts group (``--launches auto|K``, ``--max-launches``, ``--precision``), shared with
  ``compare`` and ``bisect``: :func:`parse_launches` → :class:`LaunchOptions`.

Adding a bench option: a row here, a field of :class:`BenchOptions`, the parameter in the task(s), and its
use in :mod:`llamaforge.bench.start`; the unit test names whatever is missing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..errors import ConfigError
from ..judge import Policy
from ..judge.sequential import DEFAULT_MAX_STARTS, DEFAULT_MIN_STARTS, DEFAULT_PRECISION
from ..values import SEED_MAX, as_float, as_int, parse_effect

# ---------------------------------------------------------------------------------- sequential starts
#: the help of the sequential-starts group (also compare's and bisect's)
LAUNCH_HELP = {
    "launches": "server starts per point: auto (default: from 3, more only where a verdict is still open, up to "
                "--max-launches) or a number K",
    "max_launches": f"with --launches auto: the most starts per point (default {DEFAULT_MAX_STARTS}); a point that "
                    "reaches it still open is reported unresolved, with its spread",
    "precision": f"with --launches auto: wanted half-width of a point's 95 % CI, e.g. 5% (default "
                 f"{DEFAULT_PRECISION:.0%})",
}

#: the most starts per point anyone can ask for (keeps a typo from scheduling a week of measuring)
MAX_LAUNCHES_LIMIT = 100


@dataclass(frozen=True)
class LaunchOptions:
    fixed: int | None          # K, or None for auto
    policy: Policy

    @property
    def auto(self) -> bool:
        return self.fixed is None


def parse_launches(launches: Any = "auto", max_launches: Any = None, precision: Any = None) -> LaunchOptions:
    """The three options checked together; one ConfigError line (with the fix) for anything unusable."""
    if isinstance(launches, LaunchOptions):
        return launches
    text = "auto" if launches is None else str(launches).strip().lower()
    max_n = None if max_launches is None else as_int(max_launches, "--max-launches", minimum=1,
                                                     maximum=MAX_LAUNCHES_LIMIT)
    prec = parse_effect(precision, option="--precision", default=DEFAULT_PRECISION, allow_zero=False)
    if text == "auto":
        top = DEFAULT_MAX_STARTS if max_n is None else max_n
        if top < DEFAULT_MIN_STARTS:
            raise ConfigError(f"--max-launches {top} leaves --launches auto no room (it starts with "
                              f"{DEFAULT_MIN_STARTS} starts per point)",
                              f"give --max-launches {DEFAULT_MIN_STARTS} or more, or a fixed count: --launches {top}")
        return LaunchOptions(None, Policy(max_starts=top, precision=prec))
    k = as_int(launches, "--launches", minimum=1, maximum=MAX_LAUNCHES_LIMIT)
    if max_n is not None and max_n != k:
        raise ConfigError(f"--max-launches {max_n} only applies to --launches auto (got --launches {k})",
                          "leave out --max-launches, or use --launches auto --max-launches N")
    return LaunchOptions(k, Policy(min_starts=k, max_starts=k, precision=prec))


# ---------------------------------------------------------------------------------- converters
def _text(o: Option, v: Any) -> str:
    return str(v)


def _flag(o: Option, v: Any) -> bool:
    return bool(v)


def _texts(o: Option, v: Any) -> tuple[str, ...]:
    return tuple(str(x) for x in (v if isinstance(v, list | tuple) else [v]))


def _int(o: Option, v: Any) -> int:
    return as_int(v, o.flag, minimum=o.minimum, maximum=o.maximum, example=o.example)  # type: ignore[arg-type]


def _float(o: Option, v: Any) -> float:
    return as_float(v, o.flag, positive=True, example=o.example, maximum=o.maximum)


def _launches(o: Option, v: Any) -> str | int | LaunchOptions:
    if isinstance(v, LaunchOptions):
        return v
    text = str(v).strip().lower()
    return "auto" if text == "auto" else _int(o, v)


def _effect(o: Option, v: Any) -> float:
    return parse_effect(v, option=o.flag, allow_zero=o.name != "precision")


def _extra(o: Option, v: Any) -> tuple[str, ...]:
    # start-up: bench.plan pulls in the model readers; only a run with --extra needs them here
    from .plan import split_extra

    return tuple(split_extra(str(v)))


def _depths(o: Option, v: Any) -> tuple[int, ...]:
    # start-up: bench.plan pulls in the model readers; only a run with --depths needs them here
    from .plan import parse_int_list

    return tuple(parse_int_list(str(v), what=o.flag, limit=1 << 24))


# ---------------------------------------------------------------------------------- the table
@dataclass(frozen=True)
class Option:
    """One option: its name (``--prompt-tokens`` is ``prompt_tokens``), help, default (the task signature's),
    converter (from what the CLI gives to the value used), bounds and an example for the fix of a refused
    value; ``host``: ``fleet.bench`` passes it on to every host."""

    name: str
    help: str
    convert: Callable[[Option, Any], Any] = _text
    default: Any = None
    minimum: int | None = None
    maximum: int | None = None
    example: str | None = None
    host: bool = False

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    @property
    def type(self) -> str:
        return self.convert.__name__.lstrip("_")


def _row(name: str, help: str, convert: Callable[[Option, Any], Any] = _text, **kw: Any) -> Option:  # noqa: A002
    return Option(name, help, convert, **kw)


_ROWS = [
    _row("model", "GGUF path or reference (synth:PRESET[:MIX], hf:..., pypi:..., URL)", host=True),
    _row("backends", "comma-separated builds to compare: cpu,cuda,vulkan (default cpu)"),
    _row("variant", "a variant to compare (repeatable): NAME=BACKEND[@PIN][:ENV=V ... -DDEFINE=V ... ARGS], e.g. "
                    "'fa-on=cuda:-fa on', 'vk-nocm2=vulkan:GGML_VK_DISABLE_COOPMAT2=1'; or the NAME of a variant in "
                    "variants.toml (beside pins.toml) or --variants-file. Replaces --backends/--pins", _texts),
    _row("variants_file", "a variants file (TOML, [variants.NAME] tables); without --variant: every variant in it"),
    _row("pins", "comma-separated pins or commits (default: the default pin); inside a llama.cpp checkout its "
                 "revisions: branch, tag, sha, HEAD, WORKTREE (default there: HEAD)", host=True),
    _row("ncmoe", "offload points: 0:40 (inclusive), 0:40:2, 0,2,5-8 (default 0; a dense model takes only 0), or auto: "
                  "the native-context threshold by bisection over fits, then an adaptive sweep that measures only the "
                  "points its conclusions need", default="0", host=True),
    _row("max_points", "with --ncmoe/--ngl auto: measure at most N points (all builds together)", _int, minimum=2,
         example="e.g. --max-points 12"),
    _row("time_budget", "with --ncmoe/--ngl auto: stop choosing new points after S seconds (the fits included)",
         _float),
    _row("stable_after", "with --ncmoe/--ngl auto: stop once N refinements per build changed no conclusion (default "
                         "2; 0: only when every interval is settled)", _int, minimum=0,
         example="e.g. --stable-after 2, or 0 to refine until settled"),
    _row("ngl", "optional -ngl sweep, same syntax (default: all layers); the sweep axis for a dense model, where "
                "auto sweeps it adaptively like --ncmoe auto", host=True),
    _row("repeats", "measured requests per launch after one discarded warm-up (default 3)", _int, default=3,
         minimum=1, maximum=10_000, host=True),
    _row("launches", LAUNCH_HELP["launches"] + "; starts are interleaved across points and builds (1 = between-start "
                     "spread not measured)", _launches, default="auto", minimum=1, maximum=MAX_LAUNCHES_LIMIT,
         host=True),
    _row("max_launches", LAUNCH_HELP["max_launches"], _int, minimum=1, maximum=MAX_LAUNCHES_LIMIT, host=True),
    _row("precision", LAUNCH_HELP["precision"], _effect, host=True),
    _row("seed", "seed of the randomised launch order (default: drawn and recorded in the run)", _int, minimum=0,
         maximum=SEED_MAX, example="e.g. --seed 1", host=True),
    _row("sentinel_every", "re-measure each build's first point every N launches and at the end to detect drift "
                           "(default: 10 for sweeps of more than 10 points × builds, else off; 0 = off)", _int,
         minimum=0, example="N > 0 re-measures the reference points every N launches, 0 is off", host=True),
    _row("engine", "server (default: llama-server, fitted context, warm-up), llama-bench, or both (the server, then "
                   "llama-bench at the same point with -d = the prompt: a cross-check; the summary uses the server)",
         default="server", host=True),
    _row("allow_busy", "measure even while another llamaforge sweep holds the host lock or another process computes "
                       "on the GPU (recorded in the run and its points)", _flag, default=False, host=True),
    _row("prompt_tokens", "prompt size in tokens, a multi-turn chat in the model's template (default 2500)", _int,
         default=2500, minimum=1, maximum=10_000_000, host=True),
    _row("n_predict", "tokens generated per request (default 128; the seed used 6144 — see the docs)", _int,
         default=128, minimum=1, maximum=10_000_000, host=True),
    _row("vram_budget", "emulate a smaller card: GiB of VRAM to leave usable per device (needs NVML)", _float,
         maximum=4096, example="--vram-budget 24", host=True),
    _row("fitt", "llama.cpp's -fitt margin in MiB per device (default: llama.cpp's 1024)", _int, minimum=0, host=True),
    _row("extra", "extra llama-server / llama-bench arguments, e.g. \"-fa on\"", _extra, host=True),
    _row("resume", "continue run RUN (id, name or unique id prefix): measure only its missing launches (same order)"),
    _row("retry_failed", "with --resume: measure failed points again", _flag, default=False),
    _row("threads", "CPU threads (-t)", _int, minimum=1, maximum=4096, host=True),
    _row("depths", "llama-bench engine: extra -d depths, e.g. 4096,16384", _depths, host=True),
    _row("load_timeout", "seconds to wait for a server to load (default 600)", _float, default=600.0, host=True),
    _row("request_timeout", "seconds to wait for one request (default 900)", _float, default=900.0, host=True),
    _row("bin_dir", "use the llama.cpp binaries in this folder instead of a managed build (one backend)"),
    _row("name", "a name for the run"),
    _row("ctx", "context size (-c) for every point; default: llama.cpp fits it (builds without --fit: llama.cpp's "
                "default)", _int, minimum=16, example="e.g. --ctx 8192, or leave it out to let llama.cpp fit",
         host=True),
    _row("allow_broken", "measure builds whose smoke run failed (they are refused otherwise)", _flag, default=False,
         host=True),
    _row("no_quirks", "do not apply the builds' recorded quirks (e.g. --no-repack) or the CPU-Vulkan (lavapipe) "
                      "defaults", _flag, default=False, host=True),
    # reproduce's own
    _row("points", "only these ncmoe points (same syntax as --ncmoe; default: all of the run's points)"),
    _row("min_effect", "the margin of the verdicts: within it 'same', beyond it 'differs' (0.05 or 5%; default 5%)",
         _effect, default="5%"),
    _row("against", "judge this stored sweep against RUN without measuring (the same plan in another session or on "
                    "another machine; builds matched by backend when their keys differ)"),
]

#: every option of the bench tasks, by name
OPTIONS: dict[str, Option] = {o.name: o for o in _ROWS}

#: the options ``fleet.bench`` passes to every host (``llamaforge bench`` there)
HOST_OPTIONS: tuple[str, ...] = tuple(o.name for o in _ROWS if o.host)


@dataclass(frozen=True)
class TaskOptions:
    """The table's options one task takes, and what it states differently: ``help`` texts and signature
    ``defaults`` of its own (``defaults=None`` for every option: the task passes only what is given)."""

    names: tuple[str, ...]
    help: Mapping[str, str] = field(default_factory=dict)
    defaults: Mapping[str, Any] | None = field(default_factory=dict)


_BENCH_ONLY = ("backends", "variant", "variants_file", "max_points", "time_budget", "stable_after", "resume",
               "retry_failed", "bin_dir", "name")

#: per task: which options of the table it takes and where its help or defaults differ from the table
TASKS: dict[str, TaskOptions] = {
    "bench": TaskOptions(tuple(n for n in OPTIONS if n in HOST_OPTIONS or n in _BENCH_ONLY)),
    "fitmap": TaskOptions(("model", "backends", "pins", "ncmoe", "ngl", "vram_budget", "fitt", "threads", "bin_dir"),
                          defaults={"backends": "cpu", "ncmoe": None}),
    "fleet.bench": TaskOptions(("backends", "name", "resume", *HOST_OPTIONS), help={
        "backends": "comma-separated builds (default: each host's backends in fleet.toml, else cpu)",
        "name": "a name for the fleet run",
        "resume": "continue fleet run RUN: only the hosts (and, on each, the points) not done yet"}, defaults=None),
    "demo": TaskOptions(("backends", "model", "ncmoe", "repeats", "prompt_tokens", "n_predict", "launches",
                         "max_launches"), help={
        "backends": "comma-separated backends (default: every backend this machine can build and run)",
        "model": "model reference (default synth:tiny-qwen35moe)",
        "ncmoe": "offload points (default: 0, half and all of the model's layers)",
        "repeats": "measured requests per point (default 2; a warm-up is always discarded)",
        "prompt_tokens": "prompt size (default 192: lavapipe processes ~20 tokens/s)",
        "n_predict": "tokens generated per request (default 16)",
        "launches": LAUNCH_HELP["launches"],
        "max_launches": "with --launches auto: the most starts per point (default 4 here, to keep the demo short)"},
        defaults={"model": "synth:tiny-qwen35moe", "ncmoe": None, "repeats": 2, "prompt_tokens": 192, "n_predict": 16,
                  "max_launches": 4}),
    "reproduce": TaskOptions(("points", "min_effect", "allow_busy", "against", "launches", "max_launches", "precision",
                              "bin_dir"), help={
        "launches": LAUNCH_HELP["launches"] + " (default: the first run's own)",
        "bin_dir": "the folder of the run's external (--bin-dir) build, if it had one: a folder stored in a run is "
                   "never run"}, defaults={"launches": None}),
}


def help_for(task: str, **own: str) -> dict[str, str]:
    """``@lf_task(help=...)`` of ``task``: its table options' help (the task's own texts where it states them
    differently, :data:`TASKS`) and ``own``, the help of its options outside the table."""
    t = TASKS[task]
    return {**{n: t.help.get(n, OPTIONS[n].help) for n in t.names}, **own}


def default_of(task: str, name: str) -> Any:
    """The default ``task``'s signature must give option ``name``."""
    t = TASKS[task]
    if t.defaults is None:
        return False if OPTIONS[name].convert is _flag else None
    return t.defaults.get(name, OPTIONS[name].default)


def task_values(task: str, values: Mapping[str, Any]) -> dict[str, Any]:
    """The values of ``task``'s table options among ``values`` (a task's ``locals()``)."""
    return {n: values[n] for n in TASKS[task].names if n in values}


def convert(values: Mapping[str, Any], names: Iterable[str] | None = None) -> dict[str, Any]:
    """The table's options among ``values`` (those in ``names``, default all) through their converters, in
    the table's order (so the first bad value is the same one every time); ``None`` stays ``None`` (not
    given). Keys outside the table are left out. The sequential-starts group is also checked together."""
    keep = set(values if names is None else names)
    out = {o.name: (None if values[o.name] is None else o.convert(o, values[o.name]))
           for o in _ROWS if o.name in values and o.name in keep}
    if any(out.get(k) is not None for k in ("launches", "max_launches", "precision")):
        parse_launches(out.get("launches"), out.get("max_launches"), out.get("precision"))
    return out


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
