"""Bind a run's variants to builds and check every knob before anything is measured.

Each check fails with one line naming the variant and the fix, and nothing is measured:

* the backend must be known and **built** for the pin (with the variant's CMake defines, when it has any:
  a build whose recorded flags carry them; a variant without a define that another variant of the same
  backend sets gets a build without it) — builds are found, never made here (``llamaforge build``);
* every environment variable must be on the allow-list (:mod:`.knobs`) and act on the variant's backend;
* every argument must be an option the binary's probed ``--help`` lists (the same check the recorded
  quirks go through, :func:`llamaforge.llamacpp.quirks.lacking`): llama-server's for the server engine, also
  llama-bench's for ``--engine llama-bench|both``; options the sweep sets itself (the model, port,
  offload, fit) are refused.

Variants that differ only at run time resolve to the same build (one build, one key). For knobs whose
effect only a device line shows (:mod:`.knobs`), ``llama-bench --list-devices`` is run with and without the
variant's environment and kept (:attr:`VariantBuild.devices`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .. import proc
from ..errors import BenchError, BuildError, ConfigError
from ..llamacpp.quirks import lacking
from .build import VariantBuild
from .icd import check_icd, refuse
from .knobs import env_knob
from .model import Variant, parse_args
from .observe import device_facts

#: options the sweep sets per point or per run: a variant must not override them
SWEEP_OWNED = frozenset({
    "-m", "--model", "-mu", "--model-url", "-hf", "--hf-repo", "--port", "--host", "-np", "--parallel",
    "-ncmoe", "--n-cpu-moe", "-cmoe", "--cpu-moe", "-ot", "--override-tensor", "-fitt", "--fit-target", "--fit",
    "--log-file", "--log-jsonl", "--api-key", "--path", "-o", "--output", "-r", "--repetitions", "-p", "-n",
    "--n-prompt", "--n-gen", "-d", "--n-depth", "--list-devices",
})


def check_env(v: Variant) -> None:
    for name, value in v.env_dict.items():
        refuse(name, f"variant {v.name}", "leave it out: a variant may set only the knobs on llamaforge's list "
               "(README, 'Variant matrix'); driver choice: VK_DRIVER_FILES / AMD_VULKAN_ICD")
        k = env_knob(name, f"variant {v.name}")
        check_icd(name, value, f"variant {v.name}")
        if "*" not in k.backends and v.backend not in k.backends:
            raise ConfigError(f"variant {v.name}: {name} acts on {'/'.join(k.backends)} builds, not {v.backend}",
                              f"drop it, or give the variant a {k.backends[0]} backend")


def check_args(v: Variant, build: Any, engines: Sequence[str], *, sweeps_ngl: bool = False) -> None:
    """The variant's arguments against the probed ``--help`` of the binaries the run uses."""
    from ..llamacpp.options import build_options

    opts = [o for o, _v in parse_args(list(v.args))]
    owned = [o for o in opts if o in SWEEP_OWNED or (sweeps_ngl and o in ("-ngl", "--n-gpu-layers", "--gpu-layers"))]
    if owned:
        raise ConfigError(f"variant {v.name}: {owned[0]} is set by the sweep itself",
                          "leave it out of the variant (use bench's own options: --ncmoe, --ngl, --vram-budget, --fitt)")
    bo = build_options(build)
    for binary in dict.fromkeys("llama-bench" if e == "llama-bench" else "llama-server" for e in engines):
        missing = lacking(opts, set(bo.of(binary)))
        if missing:
            raise ConfigError(f"variant {v.name}: this {binary} has no {missing[0]} (build {build.key}, "
                              f"llama.cpp {str(build.commit)[:9]})",
                              f"check `{binary} --help` of that build for the option's name at this commit, or drop it"
                              + (" (llama-bench spells some options differently: use --engine server)"
                                 if binary == "llama-bench" else ""))


def _flags_match(build: Any, defines: dict[str, str], contested: set[str]) -> bool:
    flags = (build.manifest or {}).get("flags") or {}
    if any(str(flags.get(k)) != str(val) for k, val in defines.items()):
        return False
    return all(k in defines or str(flags.get(k, "OFF")).upper() in ("OFF", "0", "FALSE", "") for k in contested)


def find_variant_build(paths: Any, v: Variant, contested: set[str], *, allow_broken: bool = False) -> Any:
    """The build of ``v``: :func:`~llamaforge.builds.find_build` without defines in play, else the newest
    build of that backend and pin whose recorded CMake flags match (see the module doc)."""
    from ..backends import get as get_backend
    from ..builds import find_build, list_builds
    from ..builds.hostcpu import runs_here
    from ..builds.verify import ensure_runnable
    from ..config import load_pins

    get_backend(v.backend)
    try:
        if not v.defines and not contested:
            return ensure_runnable(find_build(paths, v.pin, v.backend), paths, allow_broken=allow_broken)
        pin = load_pins(paths.pins_file).resolve(v.pin)
    except BuildError as e:
        raise BuildError(f"variant {v.name}: {e.message}", e.fix) from None
    cands = [b for b in list_builds(paths) if b.backend == v.backend and runs_here(b.manifest)[0]
             and (b.commit.startswith(pin.commit[:9]) or pin.commit.startswith(b.commit[:9]))
             and _flags_match(b, v.defines_dict, contested)]
    if not cands:
        defs = " ".join(f"--define {k}={val}" for k, val in v.defines)
        want = (" with " + ", ".join(f"{k}={val}" for k, val in v.defines)) if v.defines else \
            " without " + ", ".join(sorted(contested))
        raise BuildError(f"variant {v.name}: no {v.backend} build of pin {pin.name} ({pin.commit[:9]}){want}",
                         f"run `llamaforge build --backends {v.backend} --pins {pin.name}" + (f" {defs}" if defs else "")
                         + "`")
    best = max(cands, key=lambda b: b.manifest.get("built_at", 0))
    return ensure_runnable(best, paths, allow_broken=allow_broken)


def list_devices(build: Any, env: dict[str, str]) -> dict | None:
    """``llama-bench --list-devices`` of ``build`` under ``env`` (``None`` when it cannot run)."""
    try:
        r = proc.run([build.binary("llama-bench"), "--list-devices"], env=env, timeout=120)
    except (OSError, BuildError):
        return None
    return device_facts(r.output)


def _device_listings(v: Variant, build: Any, base: dict[str, dict | None]) -> tuple[dict | None, dict | None]:
    from .knobs import BY_NAME

    if not any(BY_NAME[n].device_field for n in v.env_dict if n in BY_NAME):
        return None, None
    if build.key not in base:
        base[build.key] = list_devices(build, dict(build.env))
    return list_devices(build, {**dict(build.env), **v.env_dict}), base[build.key]


def resolve(variants: Sequence[Variant], paths: Any, *, engines: Sequence[str] = ("server",),
            sweeps_ngl: bool = False, allow_broken: bool = False) -> list[VariantBuild]:
    """Every variant bound to its (existing) build, checked (module doc); raises before anything is measured."""
    if len(variants) < 1:
        raise BenchError("no variants given", "give --variant NAME=BACKEND:ARGS (repeatable) or --variants-file FILE")
    for v in variants:       # the cheap checks first: a typo fails before any build is looked up
        check_env(v)
    contested: dict[tuple[str, str | None], set[str]] = {}
    for v in variants:
        contested.setdefault((v.backend, v.pin), set()).update(v.defines_dict)
    out: list[VariantBuild] = []
    base: dict[str, dict | None] = {}
    for v in variants:
        b = find_variant_build(paths, v, contested[(v.backend, v.pin)], allow_broken=allow_broken)
        check_args(v, b, engines, sweeps_ngl=sweeps_ngl)
        devices, base_devices = _device_listings(v, b, base)
        out.append(VariantBuild(b, v, devices, base_devices))
    return out


def bind(v: Variant, build: Any, engines: Sequence[str] = ("server",)) -> VariantBuild:
    """One variant on a build given to it (``compare`` builds its sides itself), checked like :func:`resolve`."""
    check_env(v)
    check_args(v, build, engines)
    devices, base_devices = _device_listings(v, build, {})
    return VariantBuild(build, v, devices, base_devices)


def from_records(records: Sequence[dict], builds: Sequence[Any]) -> list[VariantBuild]:
    """A stored run's variants (``Plan.variants``) bound again to its builds (by key): resume and reproduce."""
    by_key = {b.key: b for b in builds}
    out = []
    for r in records:
        b = by_key.get(str(r.get("build")))
        if b is None:
            raise BenchError(f"variant {r.get('name')}: its build {r.get('build')} is not among the run's builds",
                             "rebuild it with `llamaforge build` (same pin, backend and defines)")
        v = _stored_variant(r)
        out.append(VariantBuild(b, v, r.get("devices"), r.get("base_devices")))
    return out


def _stored_variant(r: dict) -> Variant:
    """A variant read from a store (data written by anyone): its environment on the allow-list and its
    arguments through the same allow-list as ``--extra`` (no option naming a file, folder, URL or address)."""
    from ..bench.argcheck import check_extra

    try:
        v = Variant.from_dict(r)
    except (TypeError, ValueError, KeyError, AttributeError) as e:
        raise BenchError(f"a stored variant is malformed ({type(e).__name__}: {e})",
                         "measure anew with `llamaforge bench --variant ...`") from None
    check_env(v)
    check_extra(v.args, where=f"stored variant {v.name}",
                fix="a store is data: measure anew with `llamaforge bench --variant ...` and the knobs you want")
    return v
