"""Per-build runtime adjustments of a run: recorded quirks and CPU-Vulkan defaults.

* **Quirks** recorded in a build's manifest (:mod:`llamaforge.quirks`: a workaround its smoke run
  needed, e.g. ``--no-repack``) are added to that build's llama-server / llama-bench /
  llama-fit-params command lines.
* **A CPU Vulkan device** (Mesa lavapipe) gets defaults it survives: Mesa 22.3's lavapipe (Debian
  12) crashes (SIGSEGV) in llama.cpp's Vulkan backend on prompts longer than a few hundred tokens,
  so such a build runs with a prompt of at most :data:`CPU_VULKAN_PROMPT_TOKENS` tokens (lavapipe
  processes prompts at CPU speed anyway). A smaller ubatch is *not* a workaround: with ``-ub 128``
  the demo's ncmoe-8 point crashed in 2 of 2 runs (2026-11-30), at llama.cpp's default in 0 of 1.

Each adjustment is announced once per run (a notice), stored in the run's plan (``runtime``, by
build key) and listed in the report's provenance. ``--no-quirks`` (``Plan.quirks = False``) turns
them all off.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from ..builds.backends import is_cpu_vulkan_name
from ..console import notice
from ..quirks import quirk_args, recorded
from .plan import BuildLike, Plan

#: lavapipe default (see the module doc): the prompt size the demo has run without crashing;
#: checked by tests/integration/test_smoke_real.py
CPU_VULKAN_PROMPT_TOKENS = 192


@dataclass
class Runtime:
    """What a run changes for one build."""

    quirks: list[str] = field(default_factory=list)
    args: dict[str, list[str]] = field(default_factory=dict)     # binary → extra arguments
    prompt_tokens: int | None = None                              # cap on the plan's prompt size
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> Runtime:
        return cls(list(d.get("quirks") or []), {k: list(v) for k, v in (d.get("args") or {}).items()},
                   d.get("prompt_tokens"), list(d.get("notes") or []))


def is_cpu_vulkan(build: BuildLike) -> bool:
    """A Vulkan build whose device is the CPU (lavapipe/llvmpipe, SwiftShader), from its verification."""
    if build.backend != "vulkan":
        return False
    m = build.manifest or {}
    caps = m.get("capabilities") or {}
    if "vulkan_cpu_device" in caps:
        return bool(caps["vulkan_cpu_device"])
    devs = (m.get("verification") or {}).get("devices") or []
    return any(is_cpu_vulkan_name(str(d.get("name", ""))) for d in devs)


def compute(build: BuildLike, plan: Plan) -> Runtime:
    """The adjustments ``plan`` makes for ``build`` (pure: no notices)."""
    rt = Runtime()
    if not plan.quirks:
        return rt
    for q in recorded(build.manifest):
        rt.quirks.append(q["name"])
        ev = q.get("evidence") or {}
        why = ", ".join(str(x) for x in (ev.get("signal"), ev.get("cause")) if x)
        rt.notes.append(f"quirk {q['name']}: {q.get('summary', '')}"
                        + (f" (recorded from its smoke run: {why})" if why else ""))
    for binary in ("llama-server", "llama-bench", "llama-fit-params"):
        extra = quirk_args(build.manifest, binary)
        if extra:
            rt.args[binary] = extra
    if is_cpu_vulkan(build):
        if plan.prompt_tokens > CPU_VULKAN_PROMPT_TOKENS:
            rt.prompt_tokens = CPU_VULKAN_PROMPT_TOKENS
            rt.notes.append(f"CPU Vulkan device (lavapipe): prompt of {CPU_VULKAN_PROMPT_TOKENS} tokens instead of "
                            f"{plan.prompt_tokens} (long prompts crash it and take minutes)")
    return rt


def runtime_for(build: BuildLike, plan: Plan) -> Runtime:
    """The build's adjustments in this run: from the plan's record (resumed runs keep what they
    started with), else computed, recorded in the plan and announced once."""
    d = plan.runtime.get(build.key)
    if d is not None:
        return Runtime.from_dict(d)
    rt = compute(build, plan)
    plan.runtime[build.key] = rt.to_dict()
    for n in rt.notes:
        notice(f"{build.key}: {n} (--no-quirks disables)")
    return rt


def extra_args(build: BuildLike, plan: Plan, binary: str) -> list[str]:
    return list(runtime_for(build, plan).args.get(binary, []))


def prompt_tokens(build: BuildLike, plan: Plan) -> int:
    cap = runtime_for(build, plan).prompt_tokens
    return min(plan.prompt_tokens, cap) if cap else plan.prompt_tokens
