"""Cached, keyed builds of llama.cpp.

A build key is (commit, backend, CMake flags, toolchain fingerprint); its directory
``<build root>/<commit9>-<backend>-<hash10>/`` holds:

    src -> <worktree>    a symlink, so every build sees its source at ``../src`` — with
                         CCACHE_BASEDIR set to the build dir and CCACHE_NOHASHDIR, compile
                         commands are identical across commits and ccache hits for unchanged files
    out/                 the CMake build tree (ninja when present)
    build.log            configure + build output
    manifest.json        written LAST and atomically: key, flags, toolchain, timings, binaries
                         (sha256), the options each binary's --help lists (``options``), the
                         source tree id and its evidence, capabilities, verification. It is a
                         cache hit only while the worktree is still clean at that tree and the
                         binaries still hash to the recorded sha256 (:mod:`.integrity`).
    .lock                flock: concurrent builds of one key are serialised

An interrupted build never leaves a manifest, so it is never reused (the next build resumes
the CMake tree incrementally and writes a manifest only at the end).
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import re
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from .. import proc
from ..backends import Backend, FlagOptions
from ..backends import get as get_backend
from ..backends.toolchain import Toolchain, discover
from ..config import Pin
from ..console import console, esc, notice
from ..errors import BuildError
from ..files import file_lock, sha256_file, write_json_atomic  # noqa: F401 (write_json_atomic: re-exported)
from ..llamacpp.options import probe_build
from ..paths import Paths
from ..redact import redact_text
from . import cmake_tree, verify
from .hostcpu import is_native, native_cpu, runs_here
from .integrity import binary_problems, source_evidence
from .manifest import MANIFEST, MANIFEST_VERSION, Build, read_manifest
from .source_flags import source_flags

TARGETS_REQUIRED = ("llama-server", "llama-bench")
TARGETS_OPTIONAL = ("llama-fit-params",)


@dataclass
class BuildOptions(FlagOptions):
    jobs: int | None = None              # default: number of cores
    nvcc: str | None = None
    glslc: str | None = None
    vulkan_include: str | None = None
    verify: bool = True
    rebuild: bool = False                # ignore a valid manifest


def make_key(commit: str, backend: str, flags: dict[str, str], fingerprint: dict[str, str],
             cpu: dict | None = None) -> tuple[str, dict]:
    """The key string and the key's content (what the hash covers). ``cpu`` (the host CPU of a
    ``GGML_NATIVE`` build, :func:`~llamaforge.builds.hostcpu.native_cpu`) is part of it when given."""
    content = {"commit": commit[:9], "backend": backend, "flags": dict(sorted(flags.items())),
               "toolchain": dict(sorted(fingerprint.items()))}
    if cpu is not None:
        content["cpu"] = {k: cpu[k] for k in ("arch", "model", "isa", "id") if k in cpu}
    digest = hashlib.sha256(json.dumps(content, sort_keys=True).encode()).hexdigest()[:10]
    return f"{commit[:9]}-{backend}-{digest}", content


def hit_problems(d: Path, m: dict, evidence: dict) -> list[str]:
    """Why a complete manifest must not be reused for a source with ``evidence`` (empty: reuse it)."""
    recorded = (m.get("source") or {}).get("tree")
    if not recorded:
        return ["it records no source tree (built by an older llamaforge)"]
    if recorded != evidence["tree"]:
        return [f"it was built from source tree {recorded[:12]}, but the source is {evidence['tree'][:12]}"]
    return binary_problems(d, m)


def _valid_hit(d: Path, evidence: dict, *, quiet: bool = False) -> dict | None:
    """The manifest of ``d`` when it may be reused; else None (tampered binaries are removed, so
    the rebuild relinks them instead of trusting their timestamps)."""
    m = read_manifest(d)
    if m is None:
        return None
    why = hit_problems(d, m, evidence)
    if not why:
        return m
    if not quiet:
        notice(f"cached build {d.name} is not reused: {why[0]}; rebuilding")
    if binary_problems(d, m):
        for info in (m.get("binaries") or {}).values():
            (d / info["path"]).unlink(missing_ok=True)
    return None


def _locked(path: Path):  # noqa: ANN202
    return file_lock(path, f"another llamaforge is building {path.name.removesuffix('.lock')}; waiting for it")


_ERR = re.compile(r"(?:\berror\b[:\s]|CMake Error|fatal error|No space left on device|undefined reference)", re.I)


def first_error(log_text: str) -> str | None:
    for line in log_text.splitlines():
        if _ERR.search(line) and "-Werror" not in line and "error_" not in line.split(":")[0]:
            return line.strip()[:300]
    return None


def _disk_full(text: str) -> bool:
    return "No space left on device" in text


def _ccache_env(build_dir: Path, paths: Paths) -> dict[str, str]:
    env = {"CCACHE_BASEDIR": str(build_dir), "CCACHE_NOHASHDIR": "1", "CCACHE_SLOPPINESS": "include_file_mtime,include_file_ctime,time_macros"}
    if "CCACHE_DIR" not in os.environ:
        env["CCACHE_DIR"] = str(paths.ccache_dir)
        env.setdefault("CCACHE_MAXSIZE", os.environ.get("CCACHE_MAXSIZE", "8G"))
    return env


def build_dir_for(paths: Paths, key: str) -> Path:
    return paths.builds / key


def _available_targets(cmake: str, out: Path, env: dict[str, str]) -> set[str]:
    r = proc.run([cmake, "--build", str(out), "--target", "help"], env=env, timeout=120)
    names = set()
    for line in r.output.splitlines():
        m = re.match(r"^(?:\.\.\. )?([A-Za-z0-9_.+-]+)(?::| )", line.strip())
        if m:
            names.add(m.group(1))
    return names


class _NinjaProgress:
    """Turns ninja's ``[n/m]`` lines into a rich progress bar."""

    def __init__(self, progress: Progress, task: int) -> None:
        self.progress, self.task = progress, task

    def __call__(self, line: str) -> None:
        m = re.match(r"^\[(\d+)/(\d+)\]", line)
        if m:
            self.progress.update(self.task, completed=int(m.group(1)), total=int(m.group(2)))


def build(paths: Paths, pin: Pin, backend: Backend | str, opts: BuildOptions | None = None, *,
          tree=None, toolchain: Toolchain | None = None, build_dir: Path | None = None) -> Build:
    """Build (or reuse) ``backend`` for ``pin``.

    ``tree`` may be a ready SourceTree (compare/bisect). ``build_dir`` builds in a given directory
    instead of the key's own (bisect keeps one worktree + build tree per backend and moves it
    from commit to commit, so ninja rebuilds only what changed); the result is then published
    under the key's directory (binaries + manifest), so later lookups are cache hits.
    """
    from ..sources import checkout

    opts = opts or BuildOptions()
    backend = get_backend(backend) if isinstance(backend, str) else backend
    tc = toolchain or discover(nvcc=opts.nvcc, glslc=opts.glslc, vulkan_include=opts.vulkan_include,
                               backends=(backend.name,))
    flags = backend.cmake_flags(tc, opts)   # raises ToolchainError with the fix
    tree = tree or checkout(pin, paths)
    evidence = source_evidence(tree)      # a dirty worktree is refused before anything is reused or built
    for name, value in source_flags(tree.path).items():   # e.g. no npm-built web UI; a --define still wins
        flags.setdefault(name, value)
    flags["LLAMA_BUILD_COMMIT"] = tree.commit[:9]
    if tree.build_number is not None:
        flags["LLAMA_BUILD_NUMBER"] = str(tree.build_number)
    elif not tree.native_git:
        flags["LLAMA_BUILD_NUMBER"] = "0"   # an imported snapshot's history is 1 commit long: say "unknown" (0)
    key, key_content = make_key(tree.commit, backend.name, flags, tc.fingerprint(backend.name),
                                native_cpu() if is_native(flags) else None)
    d = build_dir_for(paths, key)
    if not opts.rebuild and (m := _valid_hit(d, evidence)):
        console.print("[green]cached[/] " + esc(f"{backend.name} build {key} ({pin.name} @ {tree.commit[:9]})"), soft_wrap=True)
        return _checked(Build.from_manifest(d, _reused_for(m, tree, evidence)), opts, paths)
    if build_dir is not None:
        with _locked(build_dir.parent / f"{build_dir.name}.lock"):
            b = _build_locked(paths, pin, backend, opts, tc, tree, flags, key, key_content, build_dir, evidence)
        return publish(b, d)

    with _locked(d.parent / f"{key}.lock"):
        if not opts.rebuild and (m := _valid_hit(d, evidence, quiet=True)):   # built by another process meanwhile
            b = Build.from_manifest(d, _reused_for(m, tree, evidence))
        else:
            return _build_locked(paths, pin, backend, opts, tc, tree, flags, key, key_content, d, evidence)
    return _checked(b, opts, paths)


def _reused_for(m: dict, tree, evidence: dict) -> dict:
    """The manifest of a cache hit as this caller sees it: the same tree id, but the worktree this
    caller checked (another workspace sharing the build root may have built it from its own copy),
    so ``Build.source_dir`` and ``verify`` look at the files that were just proven clean."""
    src = dict(m.get("source") or {})
    if src.get("path") == str(tree.path):
        return m
    src.update(path=str(tree.path), evidence=evidence, built_from=src.get("path"))
    return {**m, "source": src}


def _checked(b: Build, opts: BuildOptions, paths: Paths) -> Build:
    """A cached build as ``build`` returns it: smoke-run once if it never was (manifests from before
    smoke runs, or ``--no-verify``), and an error when it builds but does not run."""
    if not opts.verify:
        return b
    if b.manifest.get("smoke") in (None, "timeout"):
        why = "never smoke-run" if "smoke" not in b.manifest else "its last smoke run timed out"
        console.print(f"smoke-testing cached build {b.key} ({why})", soft_wrap=True)
        b = verify.reverify(b, paths)
    if b.manifest.get("smoke") == "failed":
        verify.raise_for(b.manifest.get("verification") or {}, b)
    return b


def _link_source(d: Path, tree) -> Path:
    """``d/src`` → the worktree (replacing a link to another tree): every build sees its source at ``../src``."""
    src = d / "src"
    if src.is_symlink() or src.exists():
        if src.resolve() != Path(tree.path).resolve():
            src.unlink()
    if not src.exists():
        src.symlink_to(Path(tree.path).resolve(), target_is_directory=True)
    return src


def _configure_argv(tc: Toolchain, backend: Backend, src: Path, out: Path, flags: dict) -> list[str]:
    assert tc.cmake is not None
    cfg = [tc.cmake.path, "-S", str(src), "-B", str(out)]
    if tc.ninja:
        cfg += ["-G", "Ninja", f"-DCMAKE_MAKE_PROGRAM={tc.ninja.path}"]
    if tc.ccache:
        cfg += [f"-DCMAKE_C_COMPILER_LAUNCHER={tc.ccache.path}", f"-DCMAKE_CXX_COMPILER_LAUNCHER={tc.ccache.path}"]
        cfg += [f"-DCMAKE_{lang}_COMPILER_LAUNCHER={tc.ccache.path}" for lang in backend.launcher_languages]
    return cfg + [f"-D{k}={v}" for k, v in sorted(flags.items())]


def _targets(cmake: str, out: Path, env: dict[str, str], log: Path, backend: Backend) -> list[str]:
    """The targets to build: the required ones (an error if the commit lacks one) and the optional ones it has
    (the backend's own among them, e.g. rpc-server)."""
    targets = [t for t in TARGETS_REQUIRED + TARGETS_OPTIONAL + backend.extra_targets]
    avail = _available_targets(cmake, out, env)
    if avail:
        missing = [t for t in TARGETS_REQUIRED if t not in avail]
        if missing:
            raise BuildError(f"this llama.cpp commit has no {', '.join(missing)} target",
                             "pick a newer commit (llamaforge needs llama-server and llama-bench)", str(log))
        targets = [t for t in targets if t in avail]
    return targets


def _binaries(d: Path, out: Path, targets: list[str]) -> dict:
    binaries = {}
    for t in targets:
        p = out / "bin" / t
        if p.exists():
            binaries[t] = {"path": str(p.relative_to(d)), "size": p.stat().st_size, "sha256": sha256_file(p)}
    return binaries


def _build_capabilities(backend: Backend, log: Path, cache_txt: str) -> dict:
    """What the build itself tells about the backend (glslc features, CUDA archs), from its log and CMake cache."""
    return {"backend": backend.name, **backend.build_capabilities(log.read_text(errors="replace"), cache_txt)}


def _build_locked(paths: Paths, pin: Pin, backend: Backend, opts: BuildOptions, tc: Toolchain, tree, flags: dict,
                  key: str, key_content: dict, d: Path, evidence: dict) -> Build:
    d.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(FileNotFoundError):
        (d / MANIFEST).unlink()          # from here on the build is not valid until finished
    src = _link_source(d, tree)
    out = d / "out"
    incremental = (out / "CMakeCache.txt").exists()
    log = d / "build.log"
    log.write_text(f"# llamaforge build {key}\n# source {tree.path} ({redact_text(tree.origin)})\n")
    env = _ccache_env(d, paths)
    cfg = _configure_argv(tc, backend, src, out, flags)
    fresh = cmake_tree.reset_if_changed(out, cfg)     # a reused tree keeps no define of an earlier key
    jobs = opts.jobs or os.cpu_count() or 2
    t0 = time.monotonic()
    console.print("[bold]building[/] " + esc(f"{backend.name} for {pin.name} @ {tree.commit[:9]} → {d}"
                                             + (f" ({fresh})" if fresh else "")), soft_wrap=True)
    try:
        r = proc.run(cfg, env=env, log_path=log, timeout=1800)
    except OSError as e:
        raise BuildError(f"cannot run cmake: {e}", "install cmake (see `llamaforge doctor`)") from e
    t_cfg = time.monotonic() - t0
    _check_step("configure", backend, r, log)
    cmake_tree.record(out, cfg)
    targets = _targets(cfg[0], out, env, log, backend)
    t1 = time.monotonic()
    with Progress(TextColumn("[bold blue]{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
                  TimeElapsedColumn(), console=console, transient=True) as progress:
        task = progress.add_task(esc(f"{backend.name} {tree.commit[:9]}"), total=None)
        r = proc.run([tc.cmake.path, "--build", str(out), "-j", str(jobs), "--target", *targets], env=env,
                     log_path=log, timeout=4 * 3600, on_line=_NinjaProgress(progress, task))
    t_build = time.monotonic() - t1
    _check_step("build", backend, r, log)

    after = source_evidence(tree)
    if after["tree"] != evidence["tree"]:
        raise BuildError(f"the source in {tree.path} changed during the build ({evidence['tree'][:12]} → {after['tree'][:12]})",
                         "leave the worktree alone while building, and build again", str(log))
    cache_txt = (out / "CMakeCache.txt").read_text(errors="replace")
    binaries, caps = _binaries(d, out, targets), _build_capabilities(backend, log, cache_txt)
    manifest = {
        "manifest_version": MANIFEST_VERSION, "status": "ok", "key": key, "key_content": key_content,
        "backend": backend.name, "pin": pin.name, "commit": tree.commit, "mirror_commit": tree.mirror_commit,
        "source": {"origin": redact_text(tree.origin), "path": str(tree.path), "native_git": tree.native_git,
                   "subject": getattr(tree, "subject", ""), "tree": evidence["tree"], "evidence": evidence,
                   **({"dirty": {"diff_sha256": tree.dirty}} if getattr(tree, "dirty", None) else {})},
        # --version reports the LLAMA_BUILD_COMMIT llamaforge passed in: it shows which flags the
        # binary was built with, not which source; source.evidence is what proves the commit
        "commit_check": "source.evidence (tree id); --version only shows the injected LLAMA_BUILD_COMMIT",
        "flags": flags, "toolchain": tc.to_dict(), "fingerprint": tc.fingerprint(backend.name),
        "timings": {"configure_s": round(t_cfg, 2), "build_s": round(t_build, 2), "jobs": jobs, "incremental": incremental,
                    **({"configure": fresh} if fresh else {})},
        "compiled_with": cmake_tree.effective_flags(cache_txt),
        "binaries": binaries, "capabilities": caps, "log": str(log), "built_at": time.time(),
    }
    return _finish(d, manifest, opts, paths,
                   f"[green]built[/] {esc(key)} in {t_cfg + t_build:.0f} s (configure {t_cfg:.0f} s, build {t_build:.0f} s)")


def _finish(d: Path, manifest: dict, opts: BuildOptions, paths: Paths, done: str) -> Build:
    """Probe the binaries' options, verify (smoke run), write the manifest atomically; a verification
    that fails is raised after the manifest is written (the build exists, it just does not run)."""
    b = Build.from_manifest(d, manifest)
    # what each binary accepts (its --help), so command lines are built from it; a --help we
    # cannot read is a BuildError here, before any manifest is written
    manifest["options"] = probe_build(b)
    if opts.verify:
        verify.apply_to_manifest(manifest, verify.verify_build(b, paths=paths))
    try:
        write_json_atomic(d / MANIFEST, manifest)
    except OSError as e:
        if e.errno == errno.ENOSPC:
            raise BuildError("disk full while writing the build manifest", "free disk space and build again") from e
        raise
    console.print(done)
    b = Build.from_manifest(d, manifest)
    if opts.verify and not manifest["verification"]["ok"]:
        verify.raise_for(manifest["verification"], b)
    return b


def _check_step(stage: str, backend: Backend, r: proc.Result, log: Path) -> None:
    """Raise for a failed configure/build step, or for a build log that could not be written (disk full):
    its contents (glslc support, the first error) are read afterwards, so a truncated log is a failed build."""
    if r.log_error:
        what = "failed" if not r.ok else "ran"
        raise BuildError(f"{backend.name} {stage} {what}, but its log {log} could not be written: {r.log_error}",
                         "free disk space and build again (the partial build is not reused)", str(log),
                         first_error(r.output))
    if not r.ok:
        _raise_failed(stage, backend, r.output, log)


def _raise_failed(stage: str, backend: Backend, output: str, log: Path) -> None:
    err = first_error(output)
    if _disk_full(output):
        raise BuildError(f"{backend.name} {stage} failed: disk full", "free disk space and build again (the partial build is not reused)", str(log), err)
    raise BuildError(f"{backend.name} {stage} failed: {err or 'see the log'}", f"read {log}", str(log), err)


def publish(b: Build, dest: Path) -> Build:
    """Copy a build's binaries and manifest into ``dest`` (a key directory) and return it from there."""
    tmp = dest.with_name(dest.name + f".publish{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    (tmp / "out" / "bin").mkdir(parents=True)
    for info in b.manifest["binaries"].values():
        shutil.copy2(b.dir / info["path"], tmp / info["path"])
    m = dict(b.manifest)
    m["built_in"] = str(b.dir)
    write_json_atomic(tmp / MANIFEST, m)
    shutil.rmtree(dest, ignore_errors=True)
    os.replace(tmp, dest)
    return Build.from_manifest(dest, m)


def list_builds(paths: Paths) -> list[Build]:
    out = []
    if paths.builds.is_dir():
        for d in sorted(paths.builds.iterdir()):
            if d.is_dir() and (m := read_manifest(d)):
                out.append(Build.from_manifest(d, m))
    return out


def find_build(paths: Paths, pin_ref: str | None, backend: str, pins=None) -> Build:
    """The newest valid build of ``backend`` for the pin (name or commit). No building."""
    from ..config import load_pins

    pins = pins or load_pins(paths.pins_file)
    pin = pins.resolve(pin_ref)
    get_backend(backend)
    cands = [b for b in list_builds(paths) if b.backend == backend and
             (b.commit.startswith(pin.commit[:9]) or pin.commit.startswith(b.commit[:9]))]
    if not cands:
        raise BuildError(f"{backend} is not built for pin {pin.name} ({pin.commit[:9]})",
                         f"run `llamaforge build --backends {backend} --pins {pin.name}`")
    here = [b for b in cands if runs_here(b.manifest)[0]]
    if not here:
        why = runs_here(cands[0].manifest)[1]
        raise BuildError(f"the {backend} build of pin {pin.name} ({cands[0].key}) is {why}",
                         f"build it for this CPU: `llamaforge build --backends {backend} --pins {pin.name}`")
    b = max(here, key=lambda b: b.manifest.get("built_at", 0))
    bad = binary_problems(b.dir, b.manifest)
    if bad:
        raise BuildError(f"{backend} build {b.key}: {bad[0]}",
                         f"rebuild it: `llamaforge build --backends {backend} --pins {pin.name}`")
    return b
