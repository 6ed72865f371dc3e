"""Verify a build: right commit, sees its backend's device, capabilities recorded.

* ``--version`` must report the pinned commit — a consistency check only: llamaforge passes
  ``-DLLAMA_BUILD_COMMIT`` itself, so the proof of the commit is the source tree id recorded in
  the manifest (:mod:`llamaforge.builds.integrity`), re-checked here with the binaries' sha256.
* ``--list-devices`` must show a device of the built backend (``CUDA0: ...`` / ``Vulkan0: ...``);
  otherwise fail loudly — "built for CUDA but the binary sees only Vulkan0" is the trap the seed's
  user fell into (a distribution package that was the Vulkan build). A backend that runs on the host CPU
  and lists one device of its library (``BLAS: OpenBLAS``) must list it: a "blas" build whose binary lists
  none has no BLAS backend in it (OpenBLAS not found, a plain CPU binary) and is refused.
* A Vulkan build that sees no device is retried with ``GGML_VK_VISIBLE_DEVICES=0``: llama.cpp hides
  CPU-type Vulkan devices (Mesa lavapipe) unless asked; if one appears, that environment is
  recorded as the build's runtime environment (and said).
* Capabilities: devices (name, memory), the Vulkan device line (``matrix cores``, ``int dot``,
  ``fp16``, ``bf16``), CUDA compute capability.
* A smoke run, model or not (:mod:`llamaforge.builds.smoke`): the tiny synthetic model (or the given one)
  loads and generates a few tokens through llama-server and llama-bench; a crash is retried with
  the known workarounds (:mod:`llamaforge.llamacpp.quirks`), and one that helps becomes a recorded quirk.
  A build that builds but does not run fails verification.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from .. import proc
from ..backends import Backend
from ..backends import get as get_backend
from ..console import notice
from ..errors import BuildError, VerifyError
from ..llamacpp.devices import Device, list_devices, parse_cuda_lines, parse_version, parse_vulkan_lines


@dataclass
class Verification:
    ok: bool
    problems: list[str] = field(default_factory=list)
    fixes: list[str] = field(default_factory=list)
    version: dict = field(default_factory=dict)
    devices: list[dict] = field(default_factory=list)
    runtime_env: dict[str, str] = field(default_factory=dict)
    capabilities: dict = field(default_factory=dict)
    smoke: dict | None = None
    quirks: list[dict] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)      # facts that are not problems (e.g. external binaries)

    def to_dict(self) -> dict:
        return asdict(self)


def diagnose(backend: str, expected_commit: str, version: dict, devices: list[Device]) -> tuple[list[str], list[str]]:
    """Problems (and fixes) for what a binary reported. Pure, for unit tests."""
    problems: list[str] = []
    fixes: list[str] = []
    got = version.get("commit")
    if not got:
        problems.append("the binary's --version reports no commit")
        fixes.append("rebuild; llamaforge passes -DLLAMA_BUILD_COMMIT for non-git sources")
    elif got == "unknown" or not (expected_commit.startswith(got) or got.startswith(expected_commit[:len(got)])):
        problems.append(f"the binary reports commit {got}, but the pin is {expected_commit[:9]}")
        fixes.append("rebuild with `llamaforge build --rebuild` (a stale or foreign binary)")
    device_problem = _device_problem(get_backend(backend), devices)
    if device_problem:
        problems.append(device_problem[0])
        fixes.append(device_problem[1])
    return problems, fixes


def _device_problem(b: Backend, devices: list[Device]) -> tuple[str, str] | None:
    """(problem, fix) when the binary lists none of its backend's devices: another backend's only, or none at
    all — for a GPU backend a missing device, for one on the host CPU (BLAS) a binary without that backend."""
    prefix = b.device_prefix
    if not prefix or any(d.backend == prefix for d in devices):
        return None
    not_mine = f"this is not a {b.name} build: check the CMake flags ({b.switches}) and that you run the binary you built"
    if devices:
        seen = ", ".join(f"{d.label} ({d.name})" for d in devices)
        return f"built for {prefix} but the binary sees only {seen}", not_mine
    if not b.offloads:   # its compute is the host CPU's: a listed device is the backend itself
        return f"built for {prefix} but the binary has no {prefix} backend (`--list-devices` lists no {prefix} device)", \
            f"{b.no_device_fix}; {not_mine}"
    return f"the {prefix} build sees no device", b.no_device_fix


def _hidden_devices(backend: Backend, lister: Path, env: dict[str, str], devices: list[Device],
                    listing: str) -> tuple[dict[str, str], list[Device], str, bool]:
    """A build that sees none of its devices is listed again with the environment that shows the ones llama.cpp
    hides (a CPU Vulkan device: ``GGML_VK_VISIBLE_DEVICES=0``); where that helps, its environment becomes the
    build's runtime environment (and is said). Returns (env, devices, listing, retried)."""
    prefix = backend.device_prefix
    extra = backend.hidden_device_env(env)
    if not extra or any(d.backend == prefix for d in devices):
        return env, devices, listing, False
    env2 = {**env, **extra}
    devs2, listing2 = list_devices(lister, env2)
    if not any(d.backend == prefix for d in devs2):
        return env, devices, listing, False
    shown = " ".join(f"{k}={v}" for k, v in extra.items())
    notice(f"only a CPU {prefix} device is present ({devs2[0].name}); using it with {shown}")
    return env2, devs2, listing2, True


def verify_build(build: Any, model: Path | None = None, *, paths: Any = None, smoke: bool = True,
                 quirks: bool = True) -> Verification:
    """Run the checks on a :class:`~llamaforge.builds.Build`; never raises for a failed check (see ``ok``).

    ``model`` is the smoke run's model (default: the tiny synthetic one, made with the build's own
    vocab files; ``paths`` locates the model cache). ``smoke=False`` skips the smoke run (unit
    tests); ``quirks=False`` does not try workarounds when it crashes."""
    server = build.binary("llama-server")
    env = dict(build.env)
    r = proc.run([server, "--version"], env=env, timeout=60)
    version = parse_version(r.output)
    # llama-bench also prints the backends' init lines (`ggml_vulkan: 0 = ... | matrix cores: ...`,
    # `Device 0: ..., compute capability 9.0`), which llama-server keeps quiet about
    lister = build.binary("llama-bench")
    devices, listing = list_devices(lister, env)
    backend = get_backend(build.backend)
    env, devices, listing, retried = _hidden_devices(backend, lister, env, devices, listing)
    problems, fixes = diagnose(build.backend, build.commit, version, devices)
    # --version only echoes the LLAMA_BUILD_COMMIT llamaforge injected; what proves the build is
    # the pinned commit is the recorded source tree (build.integrity), and its binaries' sha256
    from .integrity import binary_problems, source_problems

    notes: list[str] = []
    if build.manifest.get("external"):
        # --bin-dir: binaries llamaforge did not build; --version is all there is to say which commit
        notes.append("external binaries: the commit is what --version reports; no source tree proves it")
    else:
        for bad in binary_problems(build.dir, build.manifest) + source_problems(build.manifest):
            problems.append(bad)
            fixes.append(f"rebuild: `llamaforge build --backends {build.backend} --rebuild`")
    caps: dict[str, Any] = {"devices": [asdict(d) for d in devices]}
    vk = parse_vulkan_lines(listing)
    if vk:
        caps["vulkan_devices"] = vk
        caps["vulkan"] = {"matrix_cores": vk[0].get("matrix_cores"), "int_dot": vk[0].get("int_dot"),
                          "fp16": vk[0].get("fp16"), "bf16": vk[0].get("bf16")}
    caps.update(backend.verify_capabilities([d.name for d in devices], retried))
    if not build.manifest.get("external"):
        own_caps, own_problems = backend.binary_checks(build.manifest.get("binaries") or {})
        caps.update(own_caps)
        for bad, fix in own_problems:
            problems.append(bad)
            fixes.append(fix)
    cu = parse_cuda_lines(listing)
    if cu:
        caps["cuda_devices"] = cu
    runtime_env = {k: val for k, val in env.items() if k.startswith(("GGML_", "CUDA_", "VK_"))}
    v = Verification(not problems, problems, fixes, version, [asdict(d) for d in devices], runtime_env, caps,
                     notes=notes)
    if smoke and v.ok:
        _smoke_into(v, build, model, env, paths, quirks)
    elif smoke:
        from .smoke import SmokeResult

        v.smoke = SmokeResult("skipped", error="not smoke-run: " + v.problems[0]).to_dict()
    return v


def smoke_model(build: Any, paths: Any = None) -> Path:
    """The smoke run's model: the tiny synthetic MoE, generated once with the build's vocab files."""
    from ..models import resolve_model
    from ..paths import Paths
    from .smoke import SMOKE_MODEL

    vocab = Path(build.source_dir) / "models"
    return Path(resolve_model(SMOKE_MODEL, paths or Paths.default(),
                              vocab_dir=vocab if vocab.is_dir() else None, progress=False))


def _smoke_into(v: Verification, build: Any, model: Path | None, env: dict[str, str], paths: Any,
                quirks: bool) -> None:
    from ..errors import LlamaforgeError
    from .smoke import SmokeResult, run_smoke

    try:
        model_path = Path(model) if model is not None else smoke_model(build, paths)
    except LlamaforgeError as e:
        v.smoke = SmokeResult("skipped", error=f"no smoke model: {e}").to_dict()
        notice(f"{build.key}: smoke run skipped ({e})")
        return
    try:
        res = run_smoke(build, model_path, env, quirks=quirks)
    except Exception as e:  # noqa: BLE001 - a fault of the smoke machinery must not mark a build broken
        v.smoke = SmokeResult("skipped", str(model_path), error=f"the smoke run could not run: {type(e).__name__}: {e}").to_dict()
        notice(f"{build.key}: smoke run skipped ({v.smoke['error']})")
        return
    v.smoke = res.to_dict()
    v.quirks = [q.to_dict() for q in res.quirks]
    if res.status == "failed":
        v.ok = False
        tried = [n for n in res.notes if n.startswith("quirk ")]
        v.problems.append(f"builds but does not run: {res.error}" + (f" ({'; '.join(tried)})" if tried else ""))
        v.fixes.append("read the smoke logs in " + str(Path(build.dir) / "smoke")
                       + "; `llamaforge bench --allow-broken` measures it anyway")


def apply_to_manifest(manifest: dict, v: Verification) -> None:
    """Record a verification in a build manifest: ``verification``, capabilities, ``smoke`` (ok |
    failed | skipped) and ``quirks`` (replaced: a re-verification re-derives them)."""
    manifest["verification"] = v.to_dict()
    manifest.setdefault("capabilities", {}).update(v.capabilities)
    if v.smoke is not None:
        manifest["smoke"] = v.smoke.get("status")
        manifest["quirks"] = list(v.quirks)


def reverify(build: Any, paths: Any = None, model: Path | None = None) -> Any:
    """Verify (with a smoke run) a cached build again and rewrite its manifest, under the build's
    lock. Returns the build with the new manifest. External builds (no manifest file) are only
    verified in memory."""
    from ..files import file_lock, write_json_atomic
    from .manifest import MANIFEST, Build, read_manifest

    d = Path(build.dir)
    if build.manifest.get("external") or not (d / MANIFEST).is_file():
        v = verify_build(build, model, paths=paths)
        apply_to_manifest(build.manifest, v)
        return build
    with file_lock(d.parent / f"{d.name}.lock", f"another llamaforge is using {d.name}; waiting for it"):
        m = read_manifest(d) or dict(build.manifest)
        b = Build.from_manifest(d, m) if type(build) is Build else build
        v = verify_build(b, model, paths=paths)
        apply_to_manifest(m, v)
        write_json_atomic(d / MANIFEST, m)
    b.manifest = m
    return b


def ensure_runnable(build: Any, paths: Any = None, *, allow_broken: bool = False) -> Any:
    """A build bench may measure: smoke-run now if it never was; a build whose smoke run failed is
    refused (a BenchError with the fix) unless ``allow_broken``. External builds (``--bin-dir``)
    pass unchanged."""
    from ..errors import BenchError

    if (build.manifest or {}).get("external"):
        return build
    if "smoke" not in build.manifest:
        notice(f"smoke-testing build {build.key} first (it was never smoke-run)")
        build = reverify(build, paths)
    if build.manifest.get("smoke") == "failed":
        sm = (build.manifest.get("verification") or {}).get("smoke") or {}
        if not allow_broken:
            raise BenchError(f"{build.backend} build {build.key} builds but does not run (smoke run: {sm.get('error') or 'failed'})",
                             f"see `llamaforge verify --backends {build.backend}`; --allow-broken measures it anyway")
        notice(f"measuring {build.key} although its smoke run failed (--allow-broken)")
    return build


def print_smoke_tail(ver: dict) -> None:
    """The log tail of a failed smoke run (what `build`/`verify` show before their error line)."""
    from ..console import console

    sm = ver.get("smoke") or {}
    if sm.get("status") == "failed" and sm.get("log_tail"):
        console.rule("smoke run log (tail)")
        console.print(sm["log_tail"], markup=False, highlight=False)
        console.rule()


def raise_for(ver: dict, build: Any) -> None:
    """Raise the first problem of a failed verification: a build that builds but does not run is a
    :class:`~llamaforge.errors.BuildError` (bisect skips such commits), others a VerifyError."""
    probs, fixes = ver.get("problems") or ["verification failed"], ver.get("fixes") or [None]
    if (ver.get("smoke") or {}).get("status") == "failed":
        print_smoke_tail(ver)
        raise BuildError(f"{build.backend} build {build.key} {probs[-1]}", fixes[-1],
                         str(Path(build.dir) / "smoke"), (ver.get("smoke") or {}).get("error"))
    raise VerifyError(f"{build.backend} build {build.key}: {probs[0]}", fixes[0])
