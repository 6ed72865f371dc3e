"""``variants.toml`` (beside ``pins.toml``, or ``--variants-file``) and choosing a run's variants.

::

    [variants.fa-on]              # the variant's name: letters, digits, '.', '-', '_'
    backend = "cuda"              # a backend llamaforge builds (cpu, cuda, vulkan, ...)
    pin = "default"               # optional: a pin of pins.toml (default: the default pin)
    args = "-fa on"               # llama-server arguments: a string (split like a shell) or a list
    env = { GGML_VK_DISABLE_COOPMAT2 = "1" }       # optional: from the allow-list (variants.knobs)
    defines = { GGML_CUDA_FA_ALL_QUANTS = "ON" }   # optional: CMake defines of the build
    description = "CUDA with flash attention"      # optional

The file is written by others: every value is checked (names, strings, no control characters); a
malformed file, an unknown key or a name declared twice is one line naming the place.
"""

from __future__ import annotations

import shlex
import tomllib
from pathlib import Path

from ..errors import ConfigError
from .model import Variant, VariantSet, check_name, check_value, parse_args, parse_cli, split_words

VARIANTS_FILE = "variants.toml"
_KEYS = {"backend", "pin", "args", "env", "defines", "description"}


def _table(v: object, where: str) -> dict[str, str]:
    if v is None:
        return {}
    if not isinstance(v, dict):
        raise ConfigError(f"{where} must be a table of NAME = \"VALUE\"", f'e.g. {where.rsplit(".", 1)[-1]} = {{ X = "1" }}')
    return {str(k): check_value(val, f"{where}.{k}") for k, val in v.items()}


def _args(v: object, where: str) -> list[str]:
    if v is None:
        return []
    if isinstance(v, str):
        try:
            return shlex.split(check_value(v, where))
        except ValueError as e:
            raise ConfigError(f"{where}: cannot split {v!r} ({e})", 'write args = "-fa on" or ["-fa", "on"]') from e
    if isinstance(v, list):
        return [check_value(x, where) for x in v]
    raise ConfigError(f"{where} must be a string or a list of strings", 'e.g. args = "-fa on"')


def variant_of(name: str, d: object, where: str) -> Variant:
    check_name(name, where)
    if not isinstance(d, dict):
        raise ConfigError(f"{where} must be a table", f'write [variants.{name}] backend = "cuda"')
    unknown = sorted(set(d) - _KEYS)
    if unknown:
        raise ConfigError(f"{where}: unknown key {unknown[0]!r}", f"use only: {', '.join(sorted(_KEYS))}")
    backend = d.get("backend")
    if not isinstance(backend, str) or not backend.strip():
        raise ConfigError(f"{where} has no backend", f'add backend = "cuda" (or cpu, vulkan, ...) to [variants.{name}]')
    pin = d.get("pin")
    if pin is not None:
        check_value(pin, f"{where}.pin")
    spec = f"{name}={backend.strip()}" + (f"@{pin}" if pin else "")
    parse_cli(spec)   # the backend and pin spelled like on the command line
    env = _table(d.get("env"), f"{where}.env")
    defines = _table(d.get("defines"), f"{where}.defines")
    words_env, words_def, args = split_words(_args(d.get("args"), f"{where}.args"), f"{where}.args")
    if words_env or words_def:
        raise ConfigError(f"{where}.args holds environment variables or -D defines",
                          "put them under env = { ... } and defines = { ... }")
    parse_args(args)
    return Variant(name, backend.strip(), pin, tuple(sorted(defines.items())), tuple(sorted(env.items())),
                   tuple(args), origin=where.split(" ")[0], description=str(d.get("description") or ""))


def load_file(path: Path) -> dict[str, Variant]:
    """The variants of a file, by name, in the file's order."""
    try:
        data = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as e:
        raise ConfigError(f"cannot read {path}: {e.strerror or e}", "check the path (--variants-file)") from e
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise ConfigError(f"{path} is not valid TOML: {e}",
                          "fix the line it names (a name declared twice is an error: give every variant its own name)"
                          ) from e
    extra = sorted(set(data) - {"variants"})
    if extra:
        raise ConfigError(f"{path}: unknown top-level key {extra[0]!r}", "declare variants as [variants.NAME] tables")
    table = data.get("variants") or {}
    if not isinstance(table, dict) or not table:
        raise ConfigError(f"{path} declares no variants", 'add e.g. [variants.fa-on] backend = "cuda" args = "-fa on"')
    return {name: variant_of(name, d, f"{path.name} [variants.{name}]") for name, d in table.items()}


def choose(specs: list[str] | None, file: Path | None, default_file: Path | None) -> list[Variant]:
    """The run's variants: each ``--variant`` is an inline definition (``NAME=…``) or the name of a variant of
    the variants file (``file``, else ``default_file`` when it exists); with ``file`` and no ``--variant``,
    every variant of the file. Two variants of one name are refused (:class:`VariantSet`)."""
    specs = [s for s in (specs or []) if str(s).strip()]
    source = file or (default_file if default_file is not None and default_file.is_file() else None)
    known = load_file(source) if source is not None and (file is not None or any("=" not in s for s in specs)) else {}
    out = VariantSet()
    if file is not None and not specs:
        for v in known.values():
            out.add(v)
        return list(out)
    for s in specs:
        if "=" in s:
            out.add(parse_cli(s))
            continue
        name = s.strip()
        if name not in known:
            where = f" in {source}" if source is not None else f" (no {VARIANTS_FILE} beside pins.toml)"
            raise ConfigError(f"no variant named {name!r}{where}",
                              f"define it inline (--variant '{name}=BACKEND:ARGS') or in [variants.{name}]"
                              + (f" of {source}" if source is not None else f" of {VARIANTS_FILE}"))
        out.add(known[name])
    return list(out)
