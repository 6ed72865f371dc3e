"""Per-build runtime adjustments of a run: recorded quirks and CPU-Vulkan defaults.

* **Quirks** recorded in a build's manifest (:mod:`llamaforge.llamacpp.quirks`: a workaround its smoke run
  needed, e.g. ``--no-repack``) are added to that build's llama-server / llama-bench /
  llama-fit-params command lines — to each binary that accepts them (its ``--help`` options in the
  manifest). A binary that cannot take a needed workaround (llama-bench before ``--repack``
  existed, e.g. llama.cpp 78d2f5246) is *blocked*: its llama-bench points fail with that reason
  and the fix instead of crashing (llama-fit-params is only left without the option: it fits
  with ``no_alloc``, loading no weights, so it never reaches the repack/AMX code).
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

from ..backends import find as find_backend
from ..console import notice
from ..llamacpp.quirks import lacking, recorded
from ..variants.build import variant_args
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
    blocked: dict[str, list[str]] = field(default_factory=dict)  # binary → quirks it cannot take

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> Runtime:
        return cls(list(d.get("quirks") or []), {k: list(v) for k, v in (d.get("args") or {}).items()},
                   d.get("prompt_tokens"), list(d.get("notes") or []),
                   {k: list(v) for k, v in (d.get("blocked") or {}).items()})


def is_cpu_vulkan(build: BuildLike) -> bool:
    """A Vulkan build whose device is the CPU (lavapipe/llvmpipe, SwiftShader), from its verification (what
    its backend says: :meth:`~llamaforge.backends.Backend.cpu_device`)."""
    backend = find_backend(build.backend)
    return backend is not None and backend.cpu_device(build.manifest or {})


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
    _quirk_args(build, rt)
    if is_cpu_vulkan(build):
        if plan.prompt_tokens > CPU_VULKAN_PROMPT_TOKENS:
            rt.prompt_tokens = CPU_VULKAN_PROMPT_TOKENS
            rt.notes.append(f"CPU Vulkan device (lavapipe): prompt of {CPU_VULKAN_PROMPT_TOKENS} tokens instead of "
                            f"{plan.prompt_tokens} (long prompts crash it and take minutes)")
    return rt


def _known_options(build: BuildLike) -> dict | None:
    """The ``--help`` options per binary recorded in the manifest (None: not recorded; not probed here)."""
    opts = (build.manifest or {}).get("options")
    return opts if isinstance(opts, dict) else None


def _quirk_args(build: BuildLike, rt: Runtime) -> None:
    """Each recorded quirk's arguments to the binaries that accept them; the others are blocked
    (llama-server / llama-bench) or left without them (llama-fit-params: see the module doc)."""
    known = _known_options(build)
    for q in recorded(build.manifest):
        unsupported = q.get("unsupported") if isinstance(q.get("unsupported"), dict) else {}
        for binary in ("llama-server", "llama-bench", "llama-fit-params"):
            args = [str(a) for a in q["args"].get(binary) or unsupported.get(binary) or []]
            flags = (known or {}).get(binary)
            missing = lacking(args, set(flags)) if flags is not None else []
            if binary in unsupported or missing:
                if binary != "llama-fit-params":
                    rt.blocked.setdefault(binary, []).append(q["name"])
                    rt.notes.append(f"quirk {q['name']}: this build's {binary} has no "
                                    f"{' '.join(missing or lacking(args, set()))}: it cannot avoid the crash, "
                                    f"so its {binary} points are not measured")
                continue
            if args:
                rt.args.setdefault(binary, []).extend(args)


def blocked_reason(build: BuildLike, plan: Plan, binary: str) -> str | None:
    """Why ``binary`` of ``build`` must not run in this plan (a needed quirk it cannot take), with the fix."""
    names = runtime_for(build, plan).blocked.get(binary)
    if not names:
        return None
    other = "--engine server" if binary == "llama-bench" else "a newer pin"
    return (f"this build's {binary} cannot take the {', '.join(names)} workaround its smoke run needed "
            f"(it has no such option), so it would crash here; measure it with {other}, or rebuild with "
            "`llamaforge build --no-amx`")


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
    """The build's recorded quirk arguments for ``binary``, then a variant's own (:mod:`llamaforge.variants`)."""
    return list(runtime_for(build, plan).args.get(binary, [])) + variant_args(build, binary)


def prompt_tokens(build: BuildLike, plan: Plan) -> int:
    cap = runtime_for(build, plan).prompt_tokens
    return min(plan.prompt_tokens, cap) if cap else plan.prompt_tokens
