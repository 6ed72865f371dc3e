"""The options table: every option the measuring commands share, declared once — name, type, bounds, help and
default — and, per task, which of them it takes and what it states differently.

* :data:`OPTIONS` — one :class:`Option` row per option. An option of the same name means the same thing with the
  same default in every task that takes it (``bench``, ``fitmap``, ``demo``, ``fleet.bench``, ``reproduce``,
  ``compare``, ``bisect``, ``bisect-run``, ``history.run``; the variant matrix is ``bench --variant`` and
  ``compare --base-variant``).
* :data:`TASKS` — per task a :class:`TaskOptions`: the rows it takes, help texts of its own (where its wording
  must say something the row does not, e.g. ``history.run``'s backends are one series each) and defaults of its
  own, **each with the reason** (:attr:`TaskOptions.why`): e.g. ``bisect`` measures many commits with
  llama-bench and generates 32 tokens per sample, not 128. A task's ``help=`` is :func:`help_for`; its
  parameters' defaults are :func:`default_of`, checked by ``tests/unit/test_bench_cli_options.py`` and
  ``tests/unit/test_options_table.py``.
* deprecated spellings (:attr:`Option.alias_of`): ``compare --rounds K`` is ``--launches K``, kept because CI
  examples use it.
* :func:`convert` — given values through their rows' converters (``None`` stays "not given"): numbers through
  :mod:`llamaforge.values` (one ConfigError line with the fix). The bench's own types (``--extra``, ``--depths``)
  are converted by :mod:`llamaforge.bench.cli_options`, which passes their converters in (this table sits below
  the bench and never imports it).
* the sequential-starts group (``--launches auto|K``, ``--max-launches``, ``--precision``) of bench, compare,
  reproduce and demo: :func:`parse_launches` → :class:`LaunchOptions`.

Adding an option: a row here and the parameter in the task(s) that take it (with the task in :data:`TASKS`); the
unit tests name whatever is missing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..errors import ConfigError
from ..judge import Policy
from ..judge.sequential import DEFAULT_MAX_STARTS, DEFAULT_MIN_STARTS, DEFAULT_PRECISION
from ..records import DEFAULT_N_PREDICT, DEFAULT_PROMPT_TOKENS, DEFAULT_REPEATS
from ..values import SEED_MAX, as_float, as_int, parse_effect

# ---------------------------------------------------------------------------------- sequential starts
#: the help of the sequential-starts group
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
    return parse_effect(v, option=o.flag, allow_zero=o.zero_ok)


#: a converter given by the caller (:func:`convert`'s ``special``): the bench's own types
Converter = Callable[["Option", Any], Any]


# ---------------------------------------------------------------------------------- the table
@dataclass(frozen=True)
class Option:
    """One option: its name (``--prompt-tokens`` is ``prompt_tokens``), help, default (the task signature's),
    converter (from what the CLI gives to the value used; ``None`` with ``kind``: the bench converts it), bounds
    and an example for the fix of a refused value; ``host``: ``fleet.bench`` passes it on to every host;
    ``alias_of``: a deprecated spelling of that option, kept while scripts use it."""

    name: str
    help: str
    convert: Converter | None = _text
    default: Any = None
    minimum: int | None = None
    maximum: int | None = None
    example: str | None = None
    host: bool = False
    kind: str = ""
    zero_ok: bool = True
    alias_of: str | None = None

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    @property
    def type(self) -> str:
        return self.kind or (self.convert.__name__.lstrip("_") if self.convert else "")


def _row(name: str, help: str, convert: Converter | None = _text, **kw: Any) -> Option:  # noqa: A002
    return Option(name, help, convert, **kw)


#: the model of the commands that need none of yours (a commit comparison, a bisection, a history)
TINY_MODEL = "synth:tiny-qwen35moe"

_ROWS = [
    _row("model", "GGUF path or reference (synth:PRESET[:MIX], hf:..., pypi:..., URL)", host=True),
    _row("backends", "comma-separated builds to compare: cpu,cuda,vulkan (default cpu)"),
    _row("backend", "the backend to build and measure: cpu, cuda, vulkan, ... (default cpu)", default="cpu"),
    _row("variant", "a variant to compare (repeatable): NAME=BACKEND[@PIN][:ENV=V ... -DDEFINE=V ... ARGS], e.g. "
                    "'fa-on=cuda:-fa on', 'vk-nocm2=vulkan:GGML_VK_DISABLE_COOPMAT2=1'; or the NAME of a variant in "
                    "variants.toml (beside pins.toml) or --variants-file. Replaces --backends/--pins", _texts),
    _row("variants_file", "a variants file (TOML, [variants.NAME] tables); without --variant: every variant in it"),
    _row("pins", "comma-separated pins or commits (default: the default pin); inside a llama.cpp checkout its "
                 "revisions: branch, tag, sha, HEAD, WORKTREE (default there: HEAD)", host=True),
    _row("source", "where commits come from when not in the mirror: path:DIR (a llama.cpp checkout) or git:URL"),
    _row("ncmoe", "offload points: 0:40 (inclusive), 0:40:2, 0,2,5-8 (default 0; a dense model takes only 0), or auto: "
                  "the native-context threshold by bisection over fits, then an adaptive sweep that measures only the "
                  "points its conclusions need", default="0", host=True),
    _row("place", "which layers' experts leave the GPU, as strategies (each its own series, N along the x axis): "
                  "first:N (= -ncmoe N), last:N, every:K, attn-first:N / attn-last:N (full-attention layers' experts "
                  "moved first / last; attn-aware:N = both), ot:REGEX (a raw -ot pattern), comma-separated; "
                  "replaces --ncmoe"),
    _row("rpc", "llama.cpp RPC: rpc-servers whose devices the model is split over, HOST:PORT,… (unauthenticated: "
                "trusted networks only), or local:N to start N on 127.0.0.1 from the rpc build for the sweep; with "
                "--backends rpc"),
    _row("split", "split modes to sweep (-sm, each its own series): none, layer, row, tensor, comma-separated; an "
                  "infeasible one (row on a device without split buffers) is a refused point, explained"),
    _row("tensor_split", "ratios to sweep (-ts, each its own series): 3:1,1:1 (':' between devices, ',' between "
                         "settings); at most as many parts as devices (local GPUs + RPC devices)"),
    _row("main_gpu", "-mg: the device of the model (-sm none) or of intermediate results and KV (-sm row)", _int,
         minimum=0, example="e.g. --main-gpu 0"),
    _row("device", "-dev: the devices to offload to, as llama.cpp names them (e.g. CUDA0,RPC0), passed through"),
    _row("max_points", "with --ncmoe/--ngl auto: measure at most N points (all builds together)", _int, minimum=2,
         example="e.g. --max-points 12"),
    _row("time_budget", "with --ncmoe/--ngl auto: stop choosing new points after S seconds (the fits included)",
         _float),
    _row("stable_after", "with --ncmoe/--ngl auto: stop once N refinements per build changed no conclusion (default "
                         "2; 0: only when every interval is settled)", _int, minimum=0,
         example="e.g. --stable-after 2, or 0 to refine until settled"),
    _row("ngl", "optional -ngl sweep, same syntax (default: all layers); the sweep axis for a dense model, where "
                "auto sweeps it adaptively like --ncmoe auto", host=True),
    _row("metric", "tg (generation t/s) or pp (prompt processing t/s)", default="tg"),
    _row("repeats", f"measured requests per launch after one discarded warm-up (default {DEFAULT_REPEATS})", _int,
         default=DEFAULT_REPEATS, minimum=1, maximum=10_000, host=True),
    _row("launches", LAUNCH_HELP["launches"] + "; starts are interleaved across points and builds (1 = between-start "
                     "spread not measured)", _launches, default="auto", minimum=1, maximum=MAX_LAUNCHES_LIMIT,
         host=True),
    _row("max_launches", LAUNCH_HELP["max_launches"], _int, minimum=1, maximum=MAX_LAUNCHES_LIMIT, host=True),
    _row("precision", LAUNCH_HELP["precision"], _effect, host=True, zero_ok=False),
    _row("min_launches", f"starts per commit and point before the judge compares them (default {DEFAULT_MIN_STARTS}); "
                         "more, up to --max-launches, only while a verdict is open", _int, default=DEFAULT_MIN_STARTS,
         minimum=2, maximum=MAX_LAUNCHES_LIMIT),
    _row("rounds", "deprecated: the old name of --launches K", _int, minimum=1, maximum=MAX_LAUNCHES_LIMIT,
         alias_of="launches"),
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
    _row("prompt_tokens", f"prompt size in tokens, a multi-turn chat in the model's template (default "
                          f"{DEFAULT_PROMPT_TOKENS})", _int, default=DEFAULT_PROMPT_TOKENS, minimum=1,
         maximum=10_000_000, host=True),
    _row("n_predict", f"tokens generated per request (default {DEFAULT_N_PREDICT}; the seed used 6144 — see the docs)",
         _int, default=DEFAULT_N_PREDICT, minimum=1, maximum=10_000_000, host=True),
    _row("vram_budget", "emulate a smaller card: GiB of VRAM to leave usable per device (needs NVML)", _float,
         maximum=4096, example="--vram-budget 24", host=True),
    _row("fitt", "llama.cpp's -fitt margin in MiB per device (default: llama.cpp's 1024)", _int, minimum=0, host=True),
    _row("extra", "extra llama-server / llama-bench arguments, e.g. \"-fa on\"", None, kind="extra", host=True),
    _row("resume", "continue run RUN (id, name or unique id prefix): measure only its missing launches (same order)"),
    _row("retry_failed", "with --resume: measure failed points again", _flag, default=False),
    _row("threads", "CPU threads (-t)", _int, minimum=1, maximum=4096, host=True),
    _row("quiet_starts", "on cpu add --cpu-strict 1 --prio 2 --poll 50 where llama-bench has them, on the physical "
                         "cores (default on; --no-quiet-starts: none)", _flag, default=True),
    _row("depths", "llama-bench engine: extra -d depths, e.g. 4096,16384", None, kind="depths", host=True),
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
    # reproduce's, compare's, bisect's and history's verdicts
    _row("points", "only these ncmoe points (same syntax as --ncmoe; default: all of the run's points)"),
    _row("min_effect", "the margin of the verdicts: within it 'same', beyond it 'differs' (0.05 or 5%; default 5%)",
         _effect, default="5%"),
    _row("threshold", "minimum effect: the endpoints must differ by more than this (0.05 or 5%; default 5%)", _effect,
         default="5%", zero_ok=False),
    _row("against", "judge this stored sweep against RUN without measuring (the same plan in another session or on "
                    "another machine; builds matched by backend when their keys differ)"),
]

#: every option of the table, by name
OPTIONS: dict[str, Option] = {o.name: o for o in _ROWS}

#: the options ``fleet.bench`` passes to every host (``llamaforge bench`` there)
HOST_OPTIONS: tuple[str, ...] = tuple(o.name for o in _ROWS if o.host)


@dataclass(frozen=True)
class TaskOptions:
    """The table's options one task takes, and what it states differently: ``help`` texts of its own, signature
    ``defaults`` of its own (``defaults=None`` for every option: the task passes only what is given) and, for every
    default of its own, ``why`` it differs."""

    names: tuple[str, ...]
    help: Mapping[str, str] = field(default_factory=dict)
    defaults: Mapping[str, Any] | None = field(default_factory=dict)
    why: Mapping[str, str] = field(default_factory=dict)


_BENCH_ONLY = ("backends", "place", "rpc", "split", "tensor_split", "main_gpu", "device", "variant", "variants_file", "max_points", "time_budget", "stable_after", "resume",
               "retry_failed", "bin_dir", "name")

#: why the commits' commands (compare, bisect, bisect-run, history.run) default to a model
_WHY_TINY = ("a commit comparison, bisection or history needs no model of yours: the tiny synthetic MoE is made in a "
             "second and shows a change in llama.cpp; a sweep (bench, fitmap) is about your model and has no default")
_MODEL_TINY = f"model: a .gguf path, synth:PRESET, hf:..., pypi:..., URL (default {TINY_MODEL})"
#: bisect's and bisect-run's llama-bench sample
_WHY_BISECT_PREDICT = ("bisect measures tg with llama-bench over many commits: 32 tokens per sample keep a probe short "
                       "(pp samples generate nothing)")
_BISECT_PREDICT = "generated tokens per tg sample (default 32)"
_CORES = "CPU threads (-t; default on cpu with --quiet-starts: the physical cores)"

#: per task: which options of the table it takes and where its help or defaults differ from the table
TASKS: dict[str, TaskOptions] = {
    "bench": TaskOptions(tuple(n for n in OPTIONS if n in HOST_OPTIONS or n in _BENCH_ONLY)),
    "fitmap": TaskOptions(("model", "backends", "pins", "ncmoe", "ngl", "vram_budget", "fitt", "threads", "bin_dir"),
                          defaults={"backends": "cpu", "ncmoe": None},
                          why={"backends": "a fit map is one backend's table: it names it",
                               "ncmoe": "a fit map's default points are every -ncmoe up to the layer count"}),
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
        defaults={"model": TINY_MODEL, "ncmoe": None, "repeats": 2, "prompt_tokens": 192, "n_predict": 16,
                  "max_launches": 4},
        why={n: "the demo must finish in minutes on lavapipe (~20 prompt tokens/s)"
             for n in ("model", "ncmoe", "repeats", "prompt_tokens", "n_predict", "max_launches")}),
    "reproduce": TaskOptions(("points", "min_effect", "allow_busy", "against", "launches", "max_launches", "precision",
                              "bin_dir"), help={
        "launches": LAUNCH_HELP["launches"] + " (default: the first run's own)",
        "bin_dir": "the folder of the run's external (--bin-dir) build, if it had one: a folder stored in a run is "
                   "never run"}, defaults={"launches": None},
        why={"launches": "a re-run measures as many starts as the first run did unless told otherwise"}),
    "compare": TaskOptions(("backend", "model", "ncmoe", "repeats", "launches", "max_launches", "rounds", "min_effect",
                            "engine", "prompt_tokens", "n_predict", "threads", "source"), help={
        "backend": "backend of both sides (default cpu)",
        "model": _MODEL_TINY,
        "ncmoe": "offload points as in bench: 0:40:2, 0,2,5-8, 12 (default 0; no auto)",
        "launches": LAUNCH_HELP["launches"] + "; starts per side, ABBA-interleaved",
        "min_effect": "the margin of the verdicts: within it 'same', beyond it 'better'/'worse' (0.05 or 5%; default "
                      "5%)",
        "engine": "server (default) or llama-bench",
        "source": "a llama.cpp checkout whose revisions A and B are (default: the one you are in), or where commits "
                  "not in the mirror come from (git:URL or path:DIR)"},
        defaults={"model": TINY_MODEL}, why={"model": _WHY_TINY}),
    "bisect": TaskOptions(("metric", "backend", "threshold", "model", "repeats", "max_launches", "source", "n_predict",
                           "threads", "quiet_starts"), help={
        "model": _MODEL_TINY,
        "max_launches": f"most starts (llama-bench processes) per commit (default {DEFAULT_MAX_STARTS}); a change that "
                        "needs more is refused up front with the number it would take",
        "source": "a llama.cpp checkout whose revisions --good and --bad are (default: the one you are in), or where "
                  "the commits come from when not in the mirror: path:DIR or git:URL",
        "n_predict": _BISECT_PREDICT, "threads": _CORES},
        defaults={"model": TINY_MODEL, "n_predict": 32}, why={"model": _WHY_TINY, "n_predict": _WHY_BISECT_PREDICT}),
    "bisect-run": TaskOptions(("metric", "backend", "threshold", "source", "model", "repeats", "max_launches",
                               "n_predict"), help={
        "threshold": "with --reference: bad when clearly more than this below it (0.05 or 5%; default 5%)",
        "source": "the llama.cpp checkout git bisect drives (default: the current directory)",
        "model": _MODEL_TINY,
        "max_launches": f"most starts of the commit (default {DEFAULT_MAX_STARTS}); still undecided then: exit 125 "
                        "(skip)",
        "n_predict": _BISECT_PREDICT},
        defaults={"source": ".", "model": TINY_MODEL, "n_predict": 32},
        why={"source": "git bisect run runs it inside the checkout it drives", "model": _WHY_TINY,
             "n_predict": _WHY_BISECT_PREDICT}),
    "history.run": TaskOptions(("source", "backend", "model", "ncmoe", "engine", "repeats", "prompt_tokens",
                                "n_predict", "threads", "quiet_starts", "min_launches", "max_launches", "precision",
                                "min_effect", "vram_budget", "ctx"), help={
        "backend": "comma-separated backends, each a series of its own (default cpu)",
        "model": _MODEL_TINY,
        "ncmoe": "offload points as in bench: 0:40:2, 0,2,5-8 (default 0; no auto): each point a series of its own",
        "engine": "server (pp, tg, time to first token, memory; default) or llama-bench (pp, tg)",
        "prompt_tokens": "prompt size in tokens, a multi-turn chat in the model's template (default 512)",
        "n_predict": "tokens generated per request (default 64)",
        "threads": _CORES,
        "max_launches": f"the most starts per commit and point (default {DEFAULT_MAX_STARTS}): more than "
                        "--min-launches only while a commit cannot be told from the previous one",
        "precision": f"wanted half-width of a level's 95 % CI (default {DEFAULT_PRECISION:.0%})",
        "min_effect": "the smallest change that counts as a step (0.05 or 5%; default 5%)"},
        defaults={"model": TINY_MODEL, "prompt_tokens": 512, "n_predict": 64},
        why={"model": _WHY_TINY,
             "prompt_tokens": "a series' key holds its setup (p512 n64): another default would start every stored "
                              "history over; and small enough for a CPU nightly",
             "n_predict": "a series' key holds its setup (p512 n64): another default would start every stored "
                          "history over; and small enough for a CPU nightly"}),
}


def help_for(task: str, **own: str) -> dict[str, str]:
    """``@lf_task(help=...)`` of ``task``: its table options' help (the task's own texts where it states them
    differently, :data:`TASKS`) and ``own``, the help of its options outside the table."""
    t = TASKS[task]
    clash = sorted(set(own) & set(OPTIONS))
    if clash:
        raise TypeError(f"{task}: {', '.join(clash)} are table options: declare them in TASKS, not as own help")
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


def convert(values: Mapping[str, Any], names: Iterable[str] | None = None,
            special: Mapping[str, Converter] | None = None, *, check_group: bool = True) -> dict[str, Any]:
    """The table's options among ``values`` (those in ``names``, default all) through their converters, in
    the table's order (so the first bad value is the same one every time); ``None`` stays ``None`` (not
    given). Keys outside the table are left out. ``special``: the converters of the rows of a ``kind`` (the
    bench's ``extra`` and ``depths``). The sequential-starts group is also checked together (``check_group``; not
    for ``history.run``, whose --min-launches/--max-launches its request checks together)."""
    keep = set(values if names is None else names)
    out: dict[str, Any] = {}
    for o in _ROWS:
        if o.name not in values or o.name not in keep:
            continue
        fn = o.convert or (special or {}).get(o.kind)
        if fn is None:
            raise TypeError(f"{o.flag} ({o.kind}) is converted by the bench: llamaforge.bench.cli_options.convert")
        out[o.name] = None if values[o.name] is None else fn(o, values[o.name])
    if check_group and any(out.get(k) is not None for k in ("launches", "max_launches", "precision")):
        parse_launches(out.get("launches"), out.get("max_launches"), out.get("precision"))
    return out


# ---------------------------------------------------------------------------------- the reference page
def _default_text(v: Any) -> str:
    if v is None:
        return "–"
    if isinstance(v, bool):
        return "on" if v else "off"
    return f"`{v}`"


def markdown() -> str:
    """The options reference (``docs/options.md`` between its markers): every row, and per task what it states
    differently — its own defaults with why. ``tests/unit/test_options_table.py`` keeps the page equal to it."""
    tasks_of = {n: [t for t, o in TASKS.items() if n in o.names] for n in OPTIONS}
    out = ["| option | type | default | takes it | help |", "|---|---|---|---|---|"]
    for o in _ROWS:
        if not tasks_of[o.name]:
            continue
        help_ = o.help.replace("|", "\\|")
        if o.alias_of:
            help_ += f" (deprecated alias of `--{o.alias_of.replace('_', '-')}`)"
        out.append(f"| `{o.flag}` | {o.type} | {_default_text(o.default)} | {', '.join(tasks_of[o.name])} | {help_} |")
    out += ["", "Defaults a command states differently, and why:", "", "| command | option | default | why |",
            "|---|---|---|---|"]
    for task, t in TASKS.items():
        for name in t.defaults or {}:
            out.append(f"| `{task}` | `{OPTIONS[name].flag}` | {_default_text(t.defaults[name])} | "  # type: ignore[index]
                       f"{t.why[name].replace('|', chr(92) + '|')} |")
    out += ["", "`fleet.bench` passes only what is given (each host's `bench` applies the defaults)."]
    return "\n".join(out) + "\n"
