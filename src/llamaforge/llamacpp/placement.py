"""Which layers' experts leave the GPU (``bench --place``): named strategies, their ``-ot`` arguments, and
what llama.cpp says it moved.

``-ncmoe N`` always takes the experts of the *first* N layers. Users place experts with ``-ot`` regexes
instead (the last N layers, every k-th, around the full-attention layers) and compare notes in threads; a
strategy here names one such placement:

==================  ======================================================================================
``first:N``         the experts of layers 0..N-1: exactly ``-ncmoe N`` (measured as today's ncmoe points)
``last:N``          the experts of the last N layers
``every:K``         the experts of every K-th layer (layers K-1, 2K-1, …): ⌊layers / K⌋ of them
``attn-first:N``    N layers' experts, the full-attention layers' first (then the others from layer 0)
``attn-last:N``     N layers' experts, the full-attention layers' last: they stay on the GPU longest
``attn-aware:N``    both of the above (so a spike at some N can be laid at the full-attention layers' door)
``ot:REGEX``        a raw ``-ot`` pattern (a tensor-name regex), its matches kept on the CPU
==================  ======================================================================================

Each strategy becomes one override per layer, ``blk\\.<i>\\.ffn_(up|down|gate|gate_up)_(ch|)exps=CPU``: the
tensors llama.cpp's own ``-ncmoe`` moves (``common/common.h``, :data:`~.options.FFN_EXPS_REGEX`), so a
``last:N`` point moves the same bytes as a ``first:N`` point of a model whose layers are alike.

What landed where is read back from llama.cpp itself: its model loader logs, at debug verbosity, one line
per overridden tensor — ``tensor blk.3.ffn_up_exps.weight (12 MiB q4_K) buffer type overridden to CPU`` —
which ``llama-fit-params -v`` prints in a fraction of a second without loading the weights
(:func:`moved_tensors`). Before anything runs, the strategies are checked against the model's tensor names
(:func:`check`): ``last:99`` of a 40-layer model, or a regex that matches no tensor, is refused in one line.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from ..errors import ConfigError
from .options import CPU_BUFFER, FFN_EXPS_REGEX

#: the strategies that take a layer count N (``every`` takes a period K, ``ot`` a regex)
COUNTED = ("first", "last", "attn-first", "attn-last")
STRATEGIES = (*COUNTED, "every", "ot")
#: ``attn-aware:N`` stands for both of these
ATTN_AWARE = ("attn-first", "attn-last")
EXAMPLE = "--place first:4,last:4,attn-aware:4 (or every:2, or ot:'blk\\.1[0-3]\\.ffn_.*_exps')"
_EXPERT = re.compile(r"^blk\.(\d+)" + FFN_EXPS_REGEX + r"\.")
#: llama.cpp's model loader (debug): ``tensor NAME (SIZE MiB TYPE) buffer type overridden to BUFT``
_OVERRIDDEN = re.compile(r"tensor (\S+) \((\d+(?:\.\d+)?) MiB ([\w.]+)\) buffer type overridden to (\S+)")


@dataclass(frozen=True)
class Placement:
    """One strategy of ``--place`` (see the module doc)."""

    strategy: str
    n: int = 0          # layers moved (first, last, attn-*), the period K (every)
    regex: str = ""     # ot

    @property
    def text(self) -> str:
        """As the user writes it (``last:4``)."""
        return f"ot:{self.regex}" if self.strategy == "ot" else f"{self.strategy}:{self.n}"

    @property
    def series(self) -> str:
        """The series it is measured as (the point label): N runs along the x axis, so ``last``, not ``last:4``;
        ``first`` is today's ncmoe series (no label)."""
        if self.strategy == "first":
            return ""
        return self.strategy if self.strategy in COUNTED else self.text

    def layers(self, n_layers: int, full_attention: Sequence[int] = ()) -> list[int]:
        """The layers whose experts it moves, ascending (``ot``: none known before the model's tensors are)."""
        n = self.n
        if self.strategy == "first":
            return list(range(n))
        if self.strategy == "last":
            return list(range(n_layers - n, n_layers))
        if self.strategy == "every":
            return [i for i in range(n_layers) if (i + 1) % n == 0]
        if self.strategy in ATTN_AWARE:
            full = [i for i in range(n_layers) if i in set(full_attention)]
            rest = [i for i in range(n_layers) if i not in set(full_attention)]
            order = full + rest if self.strategy == "attn-first" else rest + full
            return sorted(order[:n])
        return []

    def overrides(self, n_layers: int, full_attention: Sequence[int] = ()) -> tuple[str, ...]:
        """The ``-ot`` entries (``PATTERN=CPU``), one per layer (``ot``: the regex itself)."""
        if self.strategy == "ot":
            return (f"{self.regex}={CPU_BUFFER}",)
        return tuple(rf"blk\.{i}{FFN_EXPS_REGEX}={CPU_BUFFER}" for i in self.layers(n_layers, full_attention))


def split_items(text: str) -> list[str]:
    """``--place`` split at the commas outside brackets (a regex may hold ``{1,3}`` or ``(a|b)``)."""
    items, depth, cur = [], 0, ""
    for ch in text:
        depth += ch in "([{"
        depth -= ch in ")]}" and depth > 0
        if ch == "," and depth == 0:
            items.append(cur.strip())
            cur = ""
        else:
            cur += ch
    items.append(cur.strip())
    return [i for i in items if i]


def parse(text: str) -> list[Placement]:
    """The strategies of ``--place`` (ConfigError, one line, on anything else)."""
    out: list[Placement] = []
    for item in split_items(str(text or "")):
        name, sep, arg = item.partition(":")
        name = name.strip().lower()
        if not sep or not arg.strip():
            raise ConfigError(f"--place {item!r} names no count", f"write STRATEGY:N, e.g. {EXAMPLE}")
        if name == "ot":
            try:
                re.compile(arg)
            except re.error as e:
                raise ConfigError(f"--place ot:{arg} is not a regular expression ({e})",
                                  "quote it for the shell, e.g. ot:'blk\\.1[0-3]\\.ffn_.*_exps'") from None
            if "," in arg:
                raise ConfigError(f"--place ot:{arg} holds a comma, which llama.cpp's -ot takes as the end of a pattern",
                                  "write the alternatives with | instead, e.g. ot:'blk\\.(10|11|12)\\.ffn_.*_exps'")
            out.append(Placement("ot", regex=arg))
            continue
        if name not in (*STRATEGIES, "attn-aware"):
            raise ConfigError(f"--place {item!r}: unknown strategy {name!r}",
                              f"use one of {', '.join((*STRATEGIES, 'attn-aware'))}, e.g. {EXAMPLE}")
        if not arg.strip().isdigit() or int(arg) < (1 if name == "every" else 0):
            raise ConfigError(f"--place {item!r}: {arg!r} is not a {'period ≥ 1' if name == 'every' else 'count ≥ 0'}",
                              f"e.g. {EXAMPLE}")
        out += [Placement(s, int(arg)) for s in (ATTN_AWARE if name == "attn-aware" else (name,))]
    if not out:
        raise ConfigError("--place names no strategy", f"e.g. {EXAMPLE}")
    seen: set[Placement] = set()
    for p in out:
        if p in seen:
            raise ConfigError(f"--place names {p.text} more than once", f"give each strategy once, e.g. {EXAMPLE}")
        seen.add(p)
    return out


def series_of(text: str) -> str:
    """The series (point label) of a stored strategy's text (``last:4`` → ``last``; ``first:N`` and none: "")."""
    return parse(text)[0].series if text else ""


def layers_of(tensor_names: Sequence[str]) -> set[int]:
    """The layers of ``blk.<i>.*`` tensor names."""
    return {int(m.group(1)) for t in tensor_names if (m := re.match(r"^blk\.(\d+)\.", t))}


def max_layer(tensor_names: Sequence[str]) -> int:
    """The highest layer index among tensor names (-1: none)."""
    return max(layers_of(tensor_names), default=-1)


def expert_layers(tensor_names: Sequence[str]) -> set[int]:
    """The layers that hold expert tensors (``blk.<i>.ffn_*_exps.*``)."""
    return {int(m.group(1)) for t in tensor_names if (m := _EXPERT.match(t))}


def matched(regex: str, tensor_names: Sequence[str]) -> list[str]:
    """The tensors a ``-ot`` pattern selects: llama.cpp searches each name (``std::regex_search``)."""
    rx = re.compile(regex)
    return [t for t in tensor_names if rx.search(t)]


def check(p: Placement, n_layers: int, tensor_names: Sequence[str], model: str = "the model") -> int:
    """The number of layers ``p`` moves the experts of (a point's x), or ConfigError in one line: more layers
    than the model has, or a regex that moves no tensor ("moved 0 tensors" is an error, never a silent
    no-op)."""
    experts = expert_layers(tensor_names)
    if p.strategy == "ot":
        hit = matched(p.regex, tensor_names)
        if not hit:
            raise ConfigError(f"--place ot:{p.regex} matches no tensor of {model} (it would move 0 tensors)",
                              "expert tensors are named blk.<layer>.ffn_(up|down|gate)_exps.weight, e.g. "
                              "ot:'blk\\.1[0-3]\\.ffn_.*_exps' for the experts of layers 10–13")
        return len(layers_of(hit))
    if p.strategy == "every":
        if p.n > n_layers:
            raise ConfigError(f"--place every:{p.n}: {model} has {n_layers} layers", f"use a period ≤ {n_layers}")
        return len(p.layers(n_layers))
    if p.n > n_layers:
        raise ConfigError(f"--place {p.text}: {model} has {n_layers} layers, so at most {n_layers} can move",
                          f"use N ≤ {n_layers}, e.g. --place {p.strategy}:{min(4, n_layers)}")
    if p.n and experts and not experts & set(p.layers(n_layers)):
        raise ConfigError(f"--place {p.text} moves no expert tensor of {model} (its layers hold no experts)",
                          "pick layers that hold experts")
    return p.n


@dataclass(frozen=True)
class Moved:
    """One tensor llama.cpp put in another buffer than its default (its load log)."""

    name: str
    mib: float
    type: str
    buffer: str


def moved_tensors(log: str) -> list[Moved]:
    """Every ``buffer type overridden`` line of a llama.cpp load log (debug verbosity: ``-v``)."""
    return [Moved(m.group(1), float(m.group(2)), m.group(3), m.group(4)) for m in _OVERRIDDEN.finditer(log)]
