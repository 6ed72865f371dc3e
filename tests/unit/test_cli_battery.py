"""The CLI battery (issue 22): EVERY task of the ``llamaforge`` collection, each of its options given
hostile values (wrong types, huge and negative numbers, control characters, bytes that are not UTF-8,
paths that are files, directories, read-only or on a full filesystem). Each must end with one error
line and a non-zero exit: no traceback, no raw control character in the output.

The tasks and their options are read from :data:`llamaforge.cli.ns`, so a new task or option is in
the battery without editing it: an option is given the values of its kind (from its name and its
default, see :func:`kind_of`), and text values always. Everything runs in-process through the real
Invoke program (the same parser, the same ``lf_task`` wrapper), in a workspace whose only llama.cpp
source is a folder that does not exist and whose cache is empty: nothing that gets past validation can
start a real build, clone or download. A case that fails deep in an area another helper of issue 22
owns is marked xfail with its owner (see :data:`OWNED`).
"""

from __future__ import annotations

import contextlib
import errno
import io
import os
import re
import subprocess
import traceback
from collections.abc import Iterator
from pathlib import Path

import pytest
import run_fake
from models_fake import tiny_moe_gguf

from llamaforge.cli import ns, program

#: raw control characters that must never reach the output (\t, \n and \r\n are layout)
RAW = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\ud800-\udfff]|\r(?!\n)")

TEXT = {"osc52": "\x1b]52;c;aGVsbG8=\x07", "clear": "\x1b[2J", "c1": "x\x9b31mred", "bidi": "ab\u202ecd",
        "newline": "a\nb", "non-utf8": "\udcff\udcfe"}     # the last: argv bytes ff fe, as Python decodes them
# issue 41 (third review): full-width and Arabic-Indic digits are no numbers; a list value given twice is refused
INTS = {"word": "abc", "negative": "-7", "huge": "9" * 30, "float": "1.5", "exp": "1e999", "fullwidth": "\uff13",
        "arabic-indic": "\u0663"}
FLOATS = {"word": "abc", "negative": "-7", "nan": "nan", "inf": "inf", "huge": "1e999", "fullwidth": "\uff11.\uff15"}
SPECS = {"word": "abc", "negative": "-5", "huge-range": "0:99999999999999999999999", "huge": "9" * 30,
         "fullwidth": "\uff10:\uff12", "reversed": "5:1"}
# paths: {file} an ordinary file, {dir} a folder, {ro} a read-only folder, {full} a full filesystem
OUT_FILES = {"dir": "{dir}", "dev-full": "/dev/full", "under-file": "{file}/x", "read-only": "{ro}/x",
             "full": "{full}/x"}
OUT_DIRS = {"file": "{file}", "under-file": "{file}/x", "read-only": "{ro}/x", "full": "{full}/x"}
IN_FILES = {"dir": "{dir}", "missing": "{dir}/missing.gguf", "empty": "{empty}", "dev-full": "/dev/full"}
MODEL_REFS = {**IN_FILES, "bad-url": "http://[::1/x.gguf", "bad-synth": "synth:no-such-preset", "bad-hf": "hf:../x"}
IN_DIRS = {"file": "{file}", "missing": "{dir}/missing"}

#: options by name (any task); the rest: by the type of the default, else text
KINDS = {
    "ints": {"jobs", "threads", "fitt", "ctx", "seed", "launches", "sentinel_every", "max_points", "stable_after",
             "layers", "experts", "experts_used", "n_embd", "n_ff_exp", "vocab", "repeats", "rounds",
             "prompt_tokens", "n_predict"},
    "floats": {"vram_budget", "load_timeout", "request_timeout", "time_budget", "good_value", "bad_value",
               "reference"},
    "specs": {"ncmoe", "ngl", "depths", "points", "min_effect", "threshold"},
    "model_refs": {"model", "ref"},
    "in_files": {"src", "fleet", "nvcc", "glslc"},
    "in_dirs": {"bin_dir", "vocab_dir", "vulkan_include"},
}
OUT_FILE_OPTIONS = {("model.synth", "out"), ("model.twin", "out"), ("export", "output")}
OUT_DIR_OPTIONS = {"out"}
VALUES = {"ints": INTS, "floats": FLOATS, "specs": SPECS, "model_refs": MODEL_REFS, "in_files": IN_FILES,
          "in_dirs": IN_DIRS,
          "out_files": OUT_FILES, "out_dirs": OUT_DIRS}

#: per task: option values that get it past its first checks (a valid run, model, preset), so the
#: hostile value is what is judged; every other option keeps its default
BASE = {
    "bench": {"model": "{gguf}"}, "fitmap": {"model": "{gguf}"}, "fleet.bench": {"model": "{gguf}"},
    "export": {"run": "latest"}, "report": {"run": "latest"}, "reproduce": {"run": "latest"},
    "model.info": {"model": "{gguf}"}, "model.fetch": {"ref": "{gguf}"},
    "model.twin": {"src": "{gguf}", "out": "{new}"}, "model.synth": {"preset": "tiny-qwen35moe", "out": "{new}"},
    "compare": {"base": "default"}, "bisect": {"good": "default", "bad": "default"},
}

#: (task, option, case) → the helper of issue 22 that owns the fix (strict xfail until that branch is merged:
#: then the case passes, the xfail fails, and the line is removed here)
OWNED: dict[tuple[str, str, str], str] = {}   # every owner's branch is merged


def kind_of(task: str, arg) -> str:  # noqa: ANN001
    name = arg.name
    if arg.kind is bool:
        return "bool"
    if (task, name) in OUT_FILE_OPTIONS:
        return "out_files"
    if name in OUT_DIR_OPTIONS:
        return "out_dirs"
    for kind, names in KINDS.items():
        if name in names:
            return kind
    if arg.kind is int:
        return "ints"
    if arg.kind is float:
        return "floats"
    return "text"


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def cases() -> Iterator:
    for task in sorted(ns.task_names):
        args = ns[task].get_arguments()
        # every task, options or not: an unknown argument full of escape sequences
        yield pytest.param(task, None, "unknown-arg", [TEXT["osc52"] + TEXT["clear"]], id=f"{task}-unknown-arg")
        for arg in args:
            kind = kind_of(task, arg)
            if kind == "bool":
                yield pytest.param(task, arg.name, "bool-value", [f"{_flag(arg.name)}=abc"],
                                   id=f"{task}-{arg.name}-bool-value")
                continue
            table = {**VALUES.get(kind, {}), **{f"text-{k}": v for k, v in TEXT.items()}}
            for case, value in table.items():
                marks = []
                owner = OWNED.get((task, arg.name, case))
                if owner:
                    marks.append(pytest.mark.xfail(reason=f"owned by {owner}", strict=True))
                yield pytest.param(task, arg.name, case, [_flag(arg.name), value], marks=marks,
                                   id=f"{task}-{arg.name}-{case}")


@contextlib.contextmanager
def _tmpfs(where: Path, options: str) -> Iterator[bool]:
    """A small tmpfs at ``where`` (root only); yields whether it is mounted."""
    where.mkdir()
    ok = os.geteuid() == 0 and subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(where)],
                                              capture_output=True).returncode == 0
    try:
        yield ok
    finally:
        if ok:
            subprocess.run(["umount", "-l", str(where)], capture_output=True)


def _fill(d: Path) -> None:
    with contextlib.suppress(OSError), open(d / "filler", "wb") as f:
        while True:
            f.write(b"\0" * 4096)
            f.flush()


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> Iterator[dict[str, str]]:
    root = tmp_path_factory.mktemp("battery")
    ws = root / "ws"
    ws.mkdir()
    (ws / "pins.toml").write_text('default = "default"\n[pins.default]\ncommit = "0c1e57098"\n'
                                  f'sources = ["path:{root}/no-such-llama.cpp"]\n')
    (ws / "results").mkdir()
    store, _ = run_fake.build(ws / "results", db="llamaforge.sqlite")
    store.close()
    (root / "file").write_text("not a folder\n")
    (root / "empty").write_bytes(b"")
    (root / "dir").mkdir()
    with _tmpfs(root / "full", "size=64k") as full, _tmpfs(root / "ro", "ro,size=64k") as ro:
        if full:
            _fill(root / "full")
        if not ro and os.geteuid() != 0:
            (root / "ro").chmod(0o555)
        yield {"root": str(root), "ws": str(ws), "file": str(root / "file"), "empty": str(root / "empty"),
               "dir": str(root / "dir"), "full": str(root / "full") if full else "", "ro": str(root / "ro") if
               (ro or os.geteuid() != 0) else "", "gguf": str(tiny_moe_gguf(root / "tiny.gguf"))}


def _expand(value: str, world: dict[str, str], new: Path) -> str:
    for key in ("full", "ro"):
        if "{" + key + "}" in value and not world[key]:
            pytest.skip(f"no {key} filesystem here (needs root for a tmpfs)")
    return value.format(**world, new=new)


def _reset_consoles() -> None:
    """Drop what a failed print left in rich's buffers, so one broken case cannot spoil the next."""
    from llamaforge.console import console, err_console

    for c in (console, err_console):
        with contextlib.suppress(AttributeError):
            del c._buffer[:]
            c._buffer_index = 0


def run_cli(argv: list[str]) -> tuple[int, str, str]:
    """``llamaforge ARGV`` in-process, with strict UTF-8 stdout/stderr like a real terminal's."""
    out = io.TextIOWrapper(io.BytesIO(), encoding="utf-8", errors="strict", write_through=True)
    err = io.TextIOWrapper(io.BytesIO(), encoding="utf-8", errors="strict", write_through=True)
    code = 0
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            program.run(["llamaforge", *argv], exit=True)
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        except BaseException:   # noqa: BLE001 - what the user would see as a traceback
            err.write(traceback.format_exc())
            code = -1
        finally:
            _reset_consoles()
    return code, out.buffer.getvalue().decode("utf-8", "replace"), err.buffer.getvalue().decode("utf-8", "replace")


@pytest.mark.parametrize("task,option,case,extra", list(cases()))
def test_every_task_refuses_hostile_values_in_one_line(world, tmp_path, monkeypatch, task, option, case, extra):
    monkeypatch.setenv("LLAMAFORGE_WORKSPACE", world["ws"])
    monkeypatch.setenv("LLAMAFORGE_RESULTS", str(Path(world["ws"]) / "results"))
    monkeypatch.setenv("LLAMAFORGE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("LLAMAFORGE_BUILD_ROOT", str(tmp_path / "builds"))
    monkeypatch.delenv("LLAMAFORGE_DEBUG", raising=False)
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.chdir(world["ws"])
    base = {k: v for k, v in BASE.get(task, {}).items() if k != option}
    argv = [task]
    for k, v in base.items():
        argv += [_flag(k), _expand(v, world, tmp_path / "new.gguf")]
    argv += [_expand(x, world, tmp_path / "new.gguf") for x in extra]
    code, out, err = run_cli(argv)
    shown = f"llamaforge {argv!r}\nexit {code}\nstdout:\n{out}\nstderr:\n{err}"
    assert "Traceback" not in err and "Traceback" not in out, shown
    assert code != 0, shown
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert lines, shown
    assert len(lines) == 1, shown
    assert not RAW.search(out) and not RAW.search(err), shown


def test_the_battery_covers_every_task_and_option():
    ids = {(p.values[0], p.values[1]) for p in cases()}
    for task in ns.task_names:
        assert (task, None) in ids
        for arg in ns[task].get_arguments():
            assert (task, arg.name) in ids, (task, arg.name)
    assert len(ids) > 150


def test_ENOSPC_really_happens_on_the_full_filesystem(world):
    if not world["full"]:
        pytest.skip("no tmpfs here")
    with pytest.raises(OSError) as ei, open(Path(world["full"]) / "x", "wb") as f:
        f.write(b"\0" * 65536)
        f.flush()
    assert ei.value.errno == errno.ENOSPC


def test_bisect_run_keeps_exit_128_for_refused_values(world, monkeypatch):
    """`git bisect run` reads 1..127 as "bad": a value refused by lf_task must still stop the bisection."""
    monkeypatch.setenv("LLAMAFORGE_WORKSPACE", world["ws"])
    monkeypatch.chdir(world["ws"])
    for argv in (["--metric", TEXT["clear"]], ["--source", world["file"] + "\udcff"], ["--repeats", "abc"]):
        code, _, err = run_cli(["bisect-run", *argv])
        assert code == 128 and len(err.strip().splitlines()) == 1, err
