"""Which llama.cpp options llamaforge passes on from ``--extra`` and from a stored plan: an allow-list.

``--extra "-fa on"`` ends up in the run's plan, and a plan comes back from the store when a run is
resumed or reproduced — possibly a store made elsewhere (a fleet import, a ``results/`` folder
from a repository). So extra arguments are checked the same way on both roads: every option
(a token that starts with ``-`` and is not a number) must be in :data:`ALLOWED`, written
``--name value`` or ``--name=value``. The list holds options that tune how llama.cpp runs
(threads, batches, KV cache, offload, devices, fitting, sampling, warm-up); it leaves out every
option that names a file, a folder, a URL or a network address (``-m``, ``--log-file``,
``--slot-save-path``, ``--lora``, ``--host``, ``--rpc``, ``-hf``, ...), so an argument from a
store can change a measurement but cannot read, write or fetch anything. Values are never
options of their own: llama.cpp takes no positional arguments.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from ..errors import BenchError

_GROUPS = {
    "threads": "-t --threads -tb --threads-batch -C --cpu-mask -Cr --cpu-range --cpu-strict --prio --poll "
               "-Cb --cpu-mask-batch -Crb --cpu-range-batch --cpu-strict-batch --prio-batch --poll-batch --numa",
    "context": "-c --ctx-size -n --predict --n-predict -b --batch-size -ub --ubatch-size --keep --swa-full "
               "-kvu --kv-unified --no-kv-unified -np --parallel -cb --cont-batching -nocb --no-cont-batching "
               "--context-shift --no-context-shift -cram --cache-ram --cache-reuse --cache-prompt --no-cache-prompt",
    "kv": "-fa --flash-attn -nkvo --no-kv-offload -kvo --kv-offload -ctk --cache-type-k -ctv --cache-type-v "
          "-dt --defrag-thold --op-offload --no-op-offload",
    "rope": "--rope-scaling --rope-scale --rope-freq-base --rope-freq-scale --yarn-orig-ctx --yarn-ext-factor "
            "--yarn-attn-factor --yarn-beta-slow --yarn-beta-fast",
    "memory": "--mlock --mmap --no-mmap -dio --direct-io --no-direct-io -dev --device -ngl --gpu-layers "
              "--n-gpu-layers -sm --split-mode -ts --tensor-split -mg --main-gpu -ot --override-tensor -cmoe "
              "--cpu-moe -ncmoe --n-cpu-moe --repack --no-repack -nr --no-host --check-tensors --override-kv",
    "fit": "-fit --fit -fitt --fit-target -fitc --fit-ctx",
    "server": "--warmup --no-warmup --perf --no-perf -e --escape --no-escape -to --timeout --threads-http "
              "--no-webui --no-mmproj --no-mmproj-offload --jinja --no-jinja --reasoning-format --reasoning-budget "
              "--chat-template --slots --no-slots --metrics -sps --slot-prompt-similarity -a --alias",
    "logging": "--log-disable --log-colors -v --verbose -lv --verbosity --log-verbosity --log-prefix "
               "--log-timestamps --log-jsonl",
    "sampling": "-s --seed --samplers --sampling-seq --ignore-eos --temp --top-k --top-p --min-p --top-nsigma "
                "--xtc-probability --xtc-threshold --typical --repeat-last-n --repeat-penalty --presence-penalty "
                "--frequency-penalty --dry-multiplier --dry-base --dry-allowed-length --dry-penalty-last-n "
                "--dry-sequence-breaker --dynatemp-range --dynatemp-exp --mirostat --mirostat-lr --mirostat-ent",
    "llama-bench": "-p --n-prompt --n-gen -pg -d --n-depth -r --repetitions --delay -mmp -nopo --no-op-offload "
                   "-embd --embeddings --progress",
}
#: the llama.cpp options ``--extra`` and stored plans may pass (see the module doc)
ALLOWED = frozenset(flag for group in _GROUPS.values() for flag in group.split())

_NUMBER = re.compile(r"-(\d|\.\d)")


def option_name(token: str) -> str | None:
    """The option a token names (``--temp=0.5`` → ``--temp``); None for a value (``on``, ``-1``, ``0.5``)."""
    if not token.startswith("-") or _NUMBER.match(token):
        return None
    return token.split("=", 1)[0]


def refused(args: Iterable[object]) -> list[str]:
    """The options in ``args`` that are not in :data:`ALLOWED` (in order, without repeats)."""
    out: list[str] = []
    for a in args:
        name = option_name(str(a))
        if name is not None and name not in ALLOWED and name not in out:
            out.append(name)
    return out


def check_extra(args: Iterable[object], *, where: str, fix: str) -> list[str]:
    """``args`` as strings, or a :class:`BenchError` naming the options llamaforge does not pass on.

    ``where`` says whose arguments they are (``--extra``, ``run X's stored plan``); ``fix`` what to do."""
    out = [str(a) for a in args]
    bad = refused(out)
    if bad:
        shown = ", ".join(repr(b) for b in bad[:5]) + (f" and {len(bad) - 5} more" if len(bad) > 5 else "")
        raise BenchError(f"{where} passes llama.cpp option(s) llamaforge does not allow: {shown} (only options that "
                         "tune a run; none that name a file, folder, URL or address)", fix)
    return out
