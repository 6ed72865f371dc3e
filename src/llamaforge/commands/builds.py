"""Foundation commands: ``pins``, ``doctor``, ``build``, ``builds``, ``verify``."""

from __future__ import annotations

from pathlib import Path

from rich.table import Table

from ..backends import find as find_backend
from ..backends import parse as parse_backends
from ..builds import BuildOptions, list_builds
from ..builds import build as do_build
from ..console import console, esc
from ..errors import ConfigError, VerifyError
from ..llamacpp.devices import device_label
from ._common import as_int, csv_list, lf_task, paths, pins, writable_dir


@lf_task(name="pins")
def pins_(c):
    """List the pins in force (name, commit, sources in the order they are tried): the workspace's pins.toml,
    else the user's, else the release pins shipped with llamaforge."""
    from ..paths import shipped_pins_file

    ps = pins()
    where = "shipped release pins" if ps.path == shipped_pins_file() else str(ps.path)
    t = Table(title=esc(f"pins ({where})"))
    for col in ("pin", "commit", "sources", "description"):
        t.add_column(col)
    for name, p in ps.pins.items():
        t.add_row(esc(name + (" (default)" if name == ps.default else "")), esc(p.commit),
                  esc("\n".join(str(s) for s in p.sources)), esc(p.description or ""))
    console.print(t)


@lf_task(help={"force": "replace an existing pins.toml / llamaforge.toml (default: refuse)"})
def init(c, force=False):
    """Make the current folder a workspace: write a commented pins.toml (the shipped release pins) and
    llamaforge.toml (where outputs and caches go). Nothing requires one; existing files are kept unless --force."""
    from ..workspace import init_workspace

    for f in init_workspace(Path.cwd(), force=bool(force)):
        console.print(esc(f"wrote {f}"), markup=False, highlight=False)


@lf_task
def doctor(c):
    """Which backends this machine can build and run, and why not (each with the fix)."""
    from ..backends.toolchain import discover
    from ..builds.doctor import check

    _print_places()
    tc = discover()
    t = Table(title="toolchain")
    t.add_column("tool")
    t.add_column("version")
    t.add_column("path")
    for name, tool in (("cmake", tc.cmake), ("ninja", tc.ninja), ("cc", tc.cc), ("c++", tc.cxx), ("ccache", tc.ccache),
                       ("nvcc", tc.nvcc), ("glslc", tc.glslc)):
        t.add_row(name, esc(tool.version) if tool else "[red]missing[/]", esc(tool.path) if tool else "")
    vh = tc.vulkan_headers
    t.add_row("vulkan headers", esc(vh.version) if vh else "[red]missing/too old[/]", esc(vh.include) if vh else
              esc(", ".join(f"{h.version} at {h.include}" for h in tc.vulkan_seen)))
    console.print(t)
    t = Table(title="backends")
    for col in ("backend", "build", "run", "devices", "why not / fix"):
        t.add_column(col)
    for st in check(tc):
        yes = {True: "[green]yes[/]", False: "[red]no[/]", None: "[dim]?[/]"}
        t.add_row(st.backend + ("" if st.tested else " [dim](untested)[/]"), yes[st.can_build], yes[st.can_run],
                  esc("\n".join(st.devices)), esc("\n".join(f"{p} → {f}" for p, f in st.reasons)))
    console.print(t)


def _print_places() -> None:
    t = Table(title="places")
    for col in ("what", "where", "moved by"):
        t.add_column(col)
    for what, where, how in paths().places():
        t.add_row(what, esc(where), esc(how))
    console.print(t)


def _defines(define: list[str] | None) -> dict[str, str]:
    out = {}
    for d in define or []:
        k, eq, v = d.partition("=")
        if not eq or not k:
            raise ConfigError(f"bad --define {d!r}", "write --define NAME=VALUE (repeatable)")
        out[k.removeprefix("-D")] = v
    return out


#: ``build``'s help; ``fleet.build`` shows the same texts for the options it passes to every host
BUILD_HELP = {
    "backends": "comma-separated: cpu,cuda,vulkan,blas,rpc (also hip,sycl,metal: untested)",
    "pins": "comma-separated pin names or commits; inside a llama.cpp checkout its revisions (branch, tag, sha, HEAD, "
            "WORKTREE; default there: HEAD) (default: the default pin)",
    "source": "a llama.cpp checkout whose revisions --pins names (default: the one you are in)",
    "cuda_archs": "CUDA architectures, e.g. 90 or '86;89' (default: native when a GPU is visible)",
    "jobs": "parallel compile jobs (default: core count)",
    "build_type": "CMake build type (default Release)",
    "native": "GGML_NATIVE (default on; --no-native for portable binaries)",
    "define": "extra CMake -D NAME=VALUE (repeatable; part of the build key)",
    "nvcc": "path to nvcc", "glslc": "path to glslc",
    "vulkan_include": "directory with Vulkan headers (>= 1.3.261)",
    "rebuild": "ignore a cached build", "no_verify": "skip verification after building",
    "fa_all_quants": "CUDA: GGML_CUDA_FA_ALL_QUANTS=ON",
    "no_amx": "compile without llama.cpp's AMX code (AMX CPU × gcc < 13: see `llamaforge doctor`)",
}


@lf_task(iterable=["define"], help=BUILD_HELP)
def build(c, backends="cpu", pins=None, cuda_archs=None, jobs=None, build_type="Release", native=True,
          define=None, nvcc=None, glslc=None, vulkan_include=None, rebuild=False, no_verify=False,
          fa_all_quants=False, no_amx=False, source=None):
    """Build (or reuse) llama.cpp for one or more backends and pins; verify each build. Inside a llama.cpp checkout
    (or with --source DIR) --pins names its revisions (default HEAD), built from llamaforge's private mirror:
    the checkout's files, index and branches are never touched."""
    from ..sources.localrepo import checkout_from
    from ._common import pins as load

    bs = parse_backends(backends)
    co = checkout_from(str(source) if source is not None else None)
    opts = BuildOptions(build_type=build_type, native=native, cuda_archs=cuda_archs,
                        cuda_fa_all_quants=fa_all_quants, defines=_defines(define), no_amx=bool(no_amx),
                        jobs=as_int(jobs, "--jobs", minimum=1, maximum=4096) if jobs else None, nvcc=nvcc, glslc=glslc, vulkan_include=vulkan_include,
                        verify=not no_verify, rebuild=rebuild)
    if co is not None:
        from ..builds.revisions import build_revisions

        _print_builds(build_revisions(paths(), co, csv_list(pins, what="revision") or ["HEAD"], bs, opts))
        return
    ps = load()
    pin_list = [ps.resolve(p) for p in (csv_list(pins, what="pin") or [None])]
    _print_builds([do_build(paths(), pin, b, opts) for pin in pin_list for b in bs])


def _print_builds(builds) -> None:
    t = Table(title="builds")
    for col in ("key", "pin", "backend", "devices", "smoke", "capabilities"):
        t.add_column(col, overflow="fold")
    for b in builds:
        ver = b.manifest.get("verification") or {}
        caps = b.capabilities
        backend = find_backend(b.backend)
        capstr = backend.describe_capabilities(caps) if backend else []
        devs = ", ".join(f"{device_label(d['backend'], d['index'], d.get('indexed', True))}: {d['name']}"
                         for d in ver.get("devices", []))
        smoke = {"ok": "[green]ok[/]", "failed": "[red]failed[/]", "skipped": "[yellow]skipped[/]"}.get(
            b.manifest.get("smoke") or "", "[dim]not run[/]")
        quirks = [esc(q.get("name", "?")) for q in b.manifest.get("quirks") or []]
        if quirks:
            smoke += "\nquirks: " + ", ".join(quirks)
        t.add_row(esc(b.key), esc(b.pin), esc(b.backend), esc(devs or "-"), smoke, esc("\n".join(capstr) or "-"))
    console.print(t)
    for b in builds:
        console.print(esc(f"  {b.key}: {b.dir}"), soft_wrap=True)


@lf_task
def builds(c):
    """List the cached builds of this workspace."""
    _print_builds(list_builds(paths()))


@lf_task(help={"backends": "comma-separated backends (default: every cached build's backend)",
               "pins": "pins or commits (default: the default pin)",
               "model": "the smoke run's model (default: the tiny synthetic MoE, made once and cached)"})
def verify(c, backends=None, pins=None, model=None):
    """Re-verify cached builds: pinned commit, a device of the backend, capabilities, and a smoke run
    (load + generate through llama-server and llama-bench; crashes retried with known workarounds)."""
    from ..builds import find_build
    from ..builds.verify import print_smoke_tail, reverify

    p = paths()
    from ._common import pins as load

    ps = load()
    names = csv_list(backends, what="backend") if backends else sorted({b.backend for b in list_builds(p)})
    if not names:
        raise VerifyError("no builds to verify", "run `llamaforge build --backends cpu` first")
    parse_backends(names)
    model_path = None
    if model:
        from ..models import resolve_model

        model_path = Path(resolve_model(model, p))
    failed = []
    done = []
    for pin_ref in csv_list(pins, what="pin") or [None]:
        for name in names:
            b = reverify(find_build(p, pin_ref, name, pins=ps), p, model_path)
            done.append(b)
            if not b.manifest["verification"]["ok"]:
                failed.append(b)
    _print_builds(done)
    if failed:
        from ..builds.verify import raise_for

        for b in failed[1:]:
            ver = b.manifest["verification"]
            print_smoke_tail(ver)
            console.print(f"[red]{b.backend} build {b.key}: {ver['problems'][0]}[/]", soft_wrap=True)
        raise_for(failed[0].manifest["verification"], failed[0])
    console.print("[green]all builds verified[/]")


@lf_task(name="source-tarball", help={"pin": "pin name or commit (default: the default pin)",
                                      "out": "output folder (default: the current folder)",
                                      "no_trim": "keep docs/, media/, benches/ and every vocab GGUF"})
def source_tarball(c, pin=None, out=".", no_trim=False):
    """Write the pin's llama.cpp tree as a tarball (commit in its pax header) for offline machines:
    use it there as a `tarball:FILE` source."""
    from ..sources import checkout
    from ..sources.export import write_tarball

    p = paths()
    pn = pins().resolve(pin)
    writable_dir(out, "--out")         # before the checkout (a clone can take minutes)
    tree = checkout(pn, p)
    dest = Path(out) / f"llama.cpp-{tree.commit[:9]}.tar.gz"
    write_tarball(tree.path, tree.commit, dest, trim=not no_trim)
    console.print(esc(f"wrote {dest} ({dest.stat().st_size / 1e6:.1f} MB, commit {tree.commit})"))


TASKS = [pins_, init, doctor, build, builds, verify, source_tarball]
