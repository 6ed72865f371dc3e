"""What a variant is: a named build (pin × backend × CMake defines) plus runtime environment and arguments.

A variant is the unit a matrix compares (``fa-on``, ``vk-nocm2``, ``cuda-q8kv``). It is written either on
the command line, ``--variant 'NAME=BACKEND[@PIN][:TOKENS]'`` (repeatable), where ``TOKENS`` are read like
a shell line: leading ``VAR=VALUE`` words are environment variables, ``-DNAME=VALUE`` words are CMake
defines of the build, everything else is llama-server arguments::

    --variant 'fa-on=cuda:-fa on'
    --variant 'vk-nocm2=vulkan:GGML_VK_DISABLE_COOPMAT2=1'
    --variant 'cuda-faq=cuda:-DGGML_CUDA_FA_ALL_QUANTS=ON -fa on -ctk q8_0 -ctv q8_0'

or in ``variants.toml`` beside ``pins.toml`` (:mod:`.files`). This module is pure data and parsing; the
checks that need a build (the binary's ``--help``, the allow-list of environment variables) live in
:mod:`.check`.

**Knobs.** Two variants are compared knob by knob (:meth:`Variant.knobs`): the build's backend, pin and each
define; each environment variable; each llama-server option (aliases folded: ``-fa`` = ``--flash-attn``;
``--no-X`` and ``--X`` are one knob; the K and V cache types are one knob, "KV cache type"). Where two
variants differ in exactly one knob, the report states that knob's effect.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field

from ..errors import ConfigError

NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,39}$")
ENV_WORD = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)=(.*)$", re.S)
DEFINE_WORD = re.compile(r"^-D([A-Z][A-Z0-9_]*)=(.*)$", re.S)
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
MAX_VALUE = 4096

#: option spellings folded onto one knob name (llama.cpp's ``common/arg.cpp`` at 0c1e57098)
ALIASES = {
    "-fa": "--flash-attn", "-ctk": "--cache-type-k", "-ctv": "--cache-type-v", "-nkvo": "--kv-offload",
    "-kvo": "--kv-offload", "--no-kv-offload": "--kv-offload", "-ngl": "--n-gpu-layers", "--gpu-layers": "--n-gpu-layers",
    "-c": "--ctx-size", "-b": "--batch-size", "-ub": "--ubatch-size", "-t": "--threads", "-tb": "--threads-batch",
    "-mg": "--main-gpu", "-sm": "--split-mode", "-ts": "--tensor-split", "-dev": "--device", "--no-mmap": "--mmap",
    "-ctkd": "--cache-type-k-draft", "-ctvd": "--cache-type-v-draft", "--no-repack": "--repack",
    "--no-op-offload": "--op-offload", "-cb": "--cont-batching", "-nocb": "--cont-batching",
    "--no-cont-batching": "--cont-batching", "--no-warmup": "--warmup",
}
#: options whose bare form switches something off (``-nkvo``: KV offload off)
NEGATIVE = frozenset({"-nkvo", "--no-kv-offload", "--no-mmap", "--no-repack", "--no-op-offload", "-nocb",
                      "--no-cont-batching", "--no-warmup"})
#: knobs reported under one name: the K and V cache types buy context together
KNOB_GROUPS = {"--cache-type-k": "kv-cache-type", "--cache-type-v": "kv-cache-type"}
#: what a knob is called in the report
KNOB_TITLES = {"--flash-attn": "flash attention", "kv-cache-type": "KV cache type", "--kv-offload": "KV offload",
               "--n-gpu-layers": "layers on the GPU", "--ctx-size": "context size", "--batch-size": "batch size",
               "--ubatch-size": "ubatch size", "--threads": "threads", "--mmap": "mmap", "--mlock": "mlock",
               "backend": "backend", "pin": "llama.cpp pin"}


def canonical(option: str) -> str:
    return ALIASES.get(option, option)


def knob_id(option: str) -> str:
    c = canonical(option)
    return KNOB_GROUPS.get(c, c)


def knob_title(knob: str) -> str:
    if knob.startswith("env:"):
        return knob[4:]
    if knob.startswith("define:"):
        return f"-D{knob[7:]}"
    return KNOB_TITLES.get(knob, knob)


def parse_args(args: list[str]) -> list[tuple[str, str | None]]:
    """``["-fa", "on", "-nkvo"]`` → ``[("-fa", "on"), ("-nkvo", None)]``: a word that does not start with a
    dash (or is a negative number) is the value of the option before it."""
    out: list[tuple[str, str | None]] = []
    for a in args:
        is_value = not a.startswith("-") or re.fullmatch(r"-\d+(\.\d+)?", a) is not None
        if is_value and out and out[-1][1] is None:
            out[-1] = (out[-1][0], a)
        elif is_value:
            raise ConfigError(f"argument {a!r} does not follow an option",
                              "write llama-server options with their values, e.g. -fa on -ctk q8_0")
        else:
            out.append((a, None))
    return out


@dataclass(frozen=True)
class Variant:
    """One named combination of build, environment and arguments (see the module doc)."""

    name: str
    backend: str
    pin: str | None = None
    defines: tuple[tuple[str, str], ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    args: tuple[str, ...] = ()
    origin: str = "--variant"          # where it was declared (for messages)
    description: str = ""

    @property
    def env_dict(self) -> dict[str, str]:
        return dict(self.env)

    @property
    def defines_dict(self) -> dict[str, str]:
        return dict(self.defines)

    def options(self) -> list[tuple[str, str | None]]:
        return parse_args(list(self.args))

    def knobs(self) -> dict[str, str]:
        """Knob → its value in this variant (absent knobs are llama.cpp's defaults); see the module doc."""
        out: dict[str, str] = {"backend": self.backend, "pin": self.pin or "default"}
        out.update({f"define:{k}": v for k, v in self.defines})
        out.update({f"env:{k}": v for k, v in self.env})
        for opt, val in self.options():
            k = knob_id(opt)
            v = ("off" if opt in NEGATIVE else "on") if val is None else val
            if k == "kv-cache-type":
                side = "k" if canonical(opt) == "--cache-type-k" else "v"
                prev = dict(p.split("=", 1) for p in out.get(k, "").split(",") if p)
                prev[side] = v
                v = ",".join(f"{s}={prev[s]}" for s in sorted(prev))
            out[k] = v
        return out

    def describe(self) -> str:
        """``cuda@default GGML_VK_X=1 -fa on`` — how it was written, for tables."""
        parts = [self.backend + (f"@{self.pin}" if self.pin else "")]
        parts += [f"-D{k}={v}" for k, v in self.defines] + [f"{k}={v}" for k, v in self.env]
        if self.args:
            parts.append(shlex.join(self.args))
        return " ".join(parts)

    def to_dict(self) -> dict:
        d: dict = {"name": self.name, "backend": self.backend, "pin": self.pin, "defines": dict(self.defines),
                   "env": dict(self.env), "args": list(self.args), "origin": self.origin}
        if self.description:
            d["description"] = self.description
        return d

    @classmethod
    def from_dict(cls, d: dict) -> Variant:
        return cls(str(d["name"]), str(d["backend"]), d.get("pin"), tuple(sorted((d.get("defines") or {}).items())),
                   tuple(sorted((d.get("env") or {}).items())), tuple(d.get("args") or ()),
                   str(d.get("origin") or "--variant"), str(d.get("description") or ""))


@dataclass
class VariantSet:
    """The variants of one run, in declaration order; names are unique (:func:`add` refuses a second)."""

    variants: list[Variant] = field(default_factory=list)

    def add(self, v: Variant) -> None:
        other = next((o for o in self.variants if o.name == v.name), None)
        if other is not None:
            raise ConfigError(f"two variants are named {v.name!r} ({other.origin} and {v.origin})",
                              "give every variant its own name")
        self.variants.append(v)

    def __iter__(self):  # noqa: ANN204
        return iter(self.variants)

    def __len__(self) -> int:
        return len(self.variants)


def check_name(name: str, where: str) -> str:
    if not NAME_RE.match(name or ""):
        raise ConfigError(f"{where}: variant name {name!r} is not valid",
                          "use letters, digits, '.', '-' and '_' (up to 40 characters, starting with a letter or digit)")
    return name


def check_value(value: str, where: str) -> str:
    if not isinstance(value, str):
        raise ConfigError(f"{where} must be a string (got {type(value).__name__})", 'quote it, e.g. "1"')
    if _CONTROL.search(value) or len(value) > MAX_VALUE:
        raise ConfigError(f"{where} contains a control character or is too long",
                          f"give a single-line value of at most {MAX_VALUE} characters")
    return value


def _target(text: str, where: str) -> tuple[str, str | None]:
    backend, _, pin = text.strip().partition("@")
    if not re.fullmatch(r"[a-z][a-z0-9]{0,15}", backend):
        raise ConfigError(f"{where}: {text!r} is not a backend", "write NAME=BACKEND[@PIN]:ARGS, e.g. fa-on=cuda:-fa on")
    if pin and not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}", pin):
        raise ConfigError(f"{where}: pin {pin!r} is not valid", "name a pin of pins.toml or a commit, e.g. cuda@default")
    return backend, pin or None


def split_words(words: list[str], where: str) -> tuple[dict[str, str], dict[str, str], list[str]]:
    """(env, defines, args) of a variant's words: env assignments first, ``-DNAME=VALUE`` anywhere."""
    env: dict[str, str] = {}
    defines: dict[str, str] = {}
    args: list[str] = []
    for w in words:
        check_value(w, where)
        if (m := DEFINE_WORD.match(w)) is not None:
            defines[m.group(1)] = m.group(2)
        elif not args and (m := ENV_WORD.match(w)) is not None:
            if m.group(1) in env:
                raise ConfigError(f"{where}: {m.group(1)} is set twice", "set each environment variable once")
            env[m.group(1)] = m.group(2)
        else:
            args.append(w)
    return env, defines, args


def parse_cli(spec: str) -> Variant:
    """``NAME=BACKEND[@PIN][:TOKENS]`` → :class:`Variant` (see the module doc); one line when malformed."""
    where = f"--variant {spec!r}"
    name, eq, rest = str(spec).partition("=")
    if not eq:
        raise ConfigError(f"{where} has no '='", "write NAME=BACKEND[:ARGS], e.g. --variant 'fa-on=cuda:-fa on', "
                          "or give the NAME of a variant in variants.toml")
    check_name(name.strip(), where)
    target, _, words = rest.partition(":")
    backend, pin = _target(target, where)
    try:
        toks = shlex.split(words)
    except ValueError as e:
        raise ConfigError(f"{where}: cannot split its arguments ({e})", "quote it like 'fa-on=cuda:-fa on'") from e
    env, defines, args = split_words(toks, where)
    parse_args(args)
    return Variant(name.strip(), backend, pin, tuple(sorted(defines.items())), tuple(sorted(env.items())), tuple(args))
