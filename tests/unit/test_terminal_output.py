"""Escape sequences from data never reach a terminal, a report or an export raw (issue 22, item 5).

A run name, a model path, a log tail or a GGUF's ``general.name`` holding ``ESC ]52;c;…`` (write the
clipboard), ``ESC [2J`` (clear the screen), a C1 ``0x9b`` (one-byte CSI) or U+202E (turn the line
around) is printed by the real CLI (a subprocess, as a user runs it) with each control character
written as its escape (``\\x1b``). Also: a closed pipe (``| head``) ends quietly, arguments that are
not UTF-8 give one line, ``inv`` (Invoke's own program) refuses ``--repeats abc`` in one line, and an
unusable output file is one line naming the path.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
import run_fake
from markupsafe import Markup
from models_fake import tiny_moe_gguf

from llamaforge.mdtext import md_code, md_text
from llamaforge.visible import visible

REPO = Path(__file__).resolve().parents[2]
#: what must never be printed raw (\t, \n and \r\n are layout)
RAW = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\ud800-\udfff]|\r(?!\n)")
OSC52 = "\x1b]52;c;aGVsbG8=\x07"
EVIL = f"run{OSC52}\x1b[2J\x1b[8mhidden\x9b31m\u202eevil\rover"


@pytest.fixture
def ws(tmp_path):
    shutil.copy(REPO / "pins.toml", tmp_path / "pins.toml")
    (tmp_path / "results").mkdir()
    return tmp_path


def _env(ws: Path) -> dict[str, str]:
    env = {**os.environ, "LLAMAFORGE_WORKSPACE": str(ws), "LLAMAFORGE_RESULTS": str(ws / "results"),
           "LLAMAFORGE_CACHE": str(ws / "cache"), "COLUMNS": "400", "PYTHONIOENCODING": "utf-8"}
    env.pop("LLAMAFORGE_DEBUG", None)
    return env


def cli(ws: Path, *args: str | bytes) -> subprocess.CompletedProcess:
    """The real CLI; stdout/stderr as bytes decoded leniently (a raw C1 byte must show up as itself)."""
    r = subprocess.run([sys.executable, "-m", "llamaforge", *args], cwd=ws, env=_env(ws), capture_output=True,
                       timeout=120)
    return subprocess.CompletedProcess(r.args, r.returncode, r.stdout.decode("utf-8", "surrogateescape"),
                                       r.stderr.decode("utf-8", "surrogateescape"))


def _clean(*texts: str) -> None:
    for t in texts:
        m = RAW.search(t)
        assert m is None, f"raw {m.group()!r} at {m.start()}: {t[max(0, m.start() - 80):m.start() + 40]!r}"


def _hostile_store(ws: Path) -> str:
    store, run_id = run_fake.build(ws / "results", db="llamaforge.sqlite")
    store.close()
    db = sqlite3.connect(ws / "results" / "llamaforge.sqlite")
    plan = json.loads(db.execute("SELECT plan_json FROM runs WHERE id=?", (run_id,)).fetchone()[0])
    plan["model"]["path"] = f"/models/{EVIL}.gguf"
    plan["model"]["ref"] = f"synth:{EVIL}"
    db.execute("UPDATE runs SET name=?, plan_json=? WHERE id=?", (EVIL, json.dumps(plan), run_id))
    db.execute("UPDATE points SET log_tail=?, failure_detail=? WHERE status='failed'", (f"tail {EVIL}", f"detail {EVIL}"))
    db.execute("UPDATE points SET build_info=?", (f"info {EVIL}",))   # a CSV column
    db.commit()
    db.close()
    return run_id


# -- the one function ---------------------------------------------------------------------------------

@pytest.mark.parametrize("raw,shown", [
    ("\x1b]52;c;aGk=\x07", "\\x1b]52;c;aGk=\\x07"), ("\x1b[2J", "\\x1b[2J"), ("a\x9bb", "a\\x9bb"),
    ("\x7f", "\\x7f"), ("a\u202eb\u2066c\u2069", "a\\u202eb\\u2066c\\u2069"), ("\x00", "\\x00"),
    ("\udcff\udcfe", "\\xff\\xfe"), ("\ud800", "\\ud800"), ("over\rwrite", "over\\x0dwrite"),
    ("line\nnext\ttab\r\n", "line\nnext\ttab\r\n"), ("ünïcödé → ok", "ünïcödé → ok")])
def test_visible_escapes_every_control_character_and_keeps_the_rest(raw, shown):
    assert visible(raw) == shown
    assert not RAW.search(visible(raw))


def test_one_line_escapes_line_breaks_too():
    assert visible("a\nb\tc\r\n", one_line=True) == "a\\x0ab\\x09c\\x0d\\x0a"


def test_markdown_and_html_values_show_escapes():
    assert md_text(EVIL).count("\\\\x1b") == 3 and not RAW.search(md_text(EVIL))
    assert not RAW.search(md_code(EVIL)) and "\\x1b]52" in md_code(EVIL)
    from llamaforge.report.html import _env

    tpl = _env().from_string("<p>{{ x }}</p><p>{{ y }}</p>")
    html = tpl.render(x=EVIL, y=Markup("<b>\x1b[2J</b>"))
    assert not RAW.search(html) and "\\x1b]52" in html and "<b>\\x1b[2J</b>" in html


# -- through the CLI -----------------------------------------------------------------------------------

def test_runs_prints_no_escape_sequence_from_run_names_and_paths(ws):
    run_id = _hostile_store(ws)
    r = cli(ws, "runs")
    assert r.returncode == 0, r.stderr
    _clean(r.stdout, r.stderr)
    assert "\\x1b]52;c;aGVsbG8=\\x07" in r.stdout and "\\u202eevil" in r.stdout
    r = cli(ws, "runs", "--run", run_id, "--failed")
    assert r.returncode == 0, r.stderr
    _clean(r.stdout, r.stderr)
    assert "tail run\\x1b]52" in r.stdout and "detail run\\x1b]52" in r.stdout


def test_report_md_and_html_carry_no_escape_sequence(ws):
    _hostile_store(ws)
    r = cli(ws, "report", "latest", "--out", str(ws / "rep"))
    assert r.returncode == 0, r.stderr
    _clean(r.stdout, r.stderr)
    md = (ws / "rep" / "report.md").read_text(encoding="utf-8")
    html = (ws / "rep" / "report.html").read_text(encoding="utf-8")
    _clean(md, html)
    assert "run\\\\x1b\\]52" in md and "\\x1b]52" in html       # Markdown: `\\x1b\]52` renders as \x1b]52


@pytest.mark.parametrize("fmt", ["csv", "json", "jsonl"])
def test_export_to_stdout_carries_no_escape_sequence(ws, fmt):
    _hostile_store(ws)
    r = cli(ws, "export", "latest", "--format", fmt)
    assert r.returncode == 0, r.stderr
    _clean(r.stdout, r.stderr)
    if fmt == "json":
        assert json.loads(r.stdout)["run"]["name"] == EVIL      # JSON keeps the value, escaped as \u001b
    if fmt == "csv":
        assert "info run\\x1b]52" in r.stdout


def _gguf_named(path: Path, name: str) -> Path:
    return tiny_moe_gguf(path, name=name, strings={"general.description": EVIL})


def test_model_info_of_a_gguf_whose_name_is_an_escape_sequence(ws):
    model = _gguf_named(ws / "evil.gguf", EVIL)
    r = cli(ws, "model.info", str(model))
    assert r.returncode == 0, r.stderr
    _clean(r.stdout, r.stderr)
    assert "run\\x1b]52;c;aGVsbG8=\\x07\\x1b[2J" in r.stdout
    r = cli(ws, "model.info", "-j", str(model))
    assert r.returncode == 0, r.stderr
    _clean(r.stdout, r.stderr)
    assert json.loads(r.stdout)["name"] == EVIL


def test_pin_descriptions_and_names_print_no_escape_sequence(ws):
    (ws / "pins.toml").write_text('default = "a\\u001b[2Jb"\n[pins."a\\u001b[2Jb"]\ncommit = "0c1e57098"\n'
                                  'description = "x\\u001b]52;c;aGk=\\u0007 \\u202e"\nsources = ["git"]\n')
    r = cli(ws, "pins")
    assert r.returncode == 0, r.stderr
    _clean(r.stdout, r.stderr)
    assert "a\\x1b[2Jb" in r.stdout and "\\x1b]52;c;aGk=\\x07" in r.stdout


@pytest.mark.parametrize("arg", [b"\xff\xfe", "\x1b]52;c;aGk=\x07", "\x9b2J", "a\u202eb"])
def test_hostile_run_argument_is_one_line(ws, arg):
    _hostile_store(ws)
    r = cli(ws, "runs", "--run", arg)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    _clean(r.stdout, r.stderr)
    assert "--run" in r.stderr and ("not UTF-8" in r.stderr if isinstance(arg, bytes) else "control" in r.stderr)


def test_an_error_message_with_escapes_in_it_is_one_clean_line(ws):
    """A message built from data (here: a store file that is a folder's name with ESC in it) is printed
    with its escapes visible, on one line."""
    bad = ws / f"res{OSC52}\nx"
    bad.write_text("not a store")
    env = {**_env(ws), "LLAMAFORGE_RESULTS": str(bad)}
    r = subprocess.run([sys.executable, "-m", "llamaforge", "runs"], cwd=ws, env=env, capture_output=True, timeout=120)
    err = r.stderr.decode("utf-8", "surrogateescape")
    assert r.returncode != 0 and "Traceback" not in err, err
    assert len(err.strip().splitlines()) == 1, err
    _clean(err)
    assert "\\x1b]52" in err


def test_a_closed_pipe_ends_quietly(ws):
    """`llamaforge model.info -j … | head -5`: the reader is gone before the JSON is written."""
    model = _gguf_named(ws / "m.gguf", "m")
    p = subprocess.Popen([sys.executable, "-m", "llamaforge", "model.info", "-j", str(model)], cwd=ws, env=_env(ws),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    p.stdout.close()                       # as `head` does once it has its lines
    err = p.stderr.read().decode()
    assert p.wait(timeout=120) == 1
    assert err == "", err                  # no BrokenPipeError traceback, no "Exception ignored"


def test_a_closed_pipe_under_rich_output_ends_quietly(ws):
    _hostile_store(ws)
    p = subprocess.Popen([sys.executable, "-m", "llamaforge", "runs"], cwd=ws, env=_env(ws), stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE)
    p.stdout.close()
    err = p.stderr.read().decode()
    assert p.wait(timeout=120) == 1 and err == "", err


@pytest.mark.parametrize("option,value,need", [("--repeats", "abc", "a whole number"),
                                               ("--load-timeout", "abc", "a number"),
                                               ("--prompt-tokens", "1e3", "a whole number")])
def test_inv_refuses_bad_numbers_in_one_line(ws, option, value, need):
    """Invoke's own program (`inv`, reading tasks.py) — not only the installed `llamaforge` — gives one line."""
    r = subprocess.run([sys.executable, "-m", "invoke", "--search-root", str(REPO), "bench", option, value],
                       cwd=ws, env=_env(ws), capture_output=True, text=True, timeout=120)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert f"{option} '{value}' is not {need}" in r.stderr and "fix:" in r.stderr


def test_load_timeout_takes_a_fraction_of_a_second(ws):
    """--load-timeout is seconds (a number), no longer cast to int by the parser: 1.5 passes the parser and
    the task checks the rest (here: no model)."""
    r = cli(ws, "bench", "--load-timeout", "1.5")
    assert r.returncode == 2 and "no model given" in r.stderr, r.stderr


@pytest.mark.parametrize("target,needle", [("/dev/full", "No space left on device"), ("{dir}", "is a folder"),
                                           ("{file}/x", "is a file, not a folder")])
def test_export_to_an_unusable_file_is_one_line_naming_it(ws, target, needle):
    _hostile_store(ws)
    (ws / "adir").mkdir()
    (ws / "afile").write_text("x")
    out = target.format(dir=ws / "adir", file=ws / "afile")
    r = cli(ws, "export", "latest", "--output", out)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert needle in r.stderr and out in r.stderr and "fix:" in r.stderr


@pytest.mark.parametrize("task", [["runs"], ["export", "latest"], ["reproduce", "latest"]])
def test_results_pointing_at_a_file_is_one_line(ws, task):
    (ws / "resfile").write_text("x")
    env = {**_env(ws), "LLAMAFORGE_RESULTS": str(ws / "resfile")}
    t0 = time.monotonic()
    r = subprocess.run([sys.executable, "-m", "llamaforge", *task], cwd=ws, env=env, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "resfile" in r.stderr, r.stderr
    assert time.monotonic() - t0 < 60


def test_export_to_a_full_filesystem_leaves_no_partial_file(ws, tmp_path):
    if os.geteuid() != 0:
        pytest.skip("needs root for a small tmpfs")
    small = tmp_path / "small"
    small.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16k", "tmpfs", str(small)], capture_output=True).returncode:
        pytest.skip("cannot mount a tmpfs here")
    try:
        _hostile_store(ws)
        r = cli(ws, "export", "latest", "--output", str(small / "run.json"))
        assert r.returncode == 2 and "No space left on device" in r.stderr and "run.json" in r.stderr, r.stderr
        assert list(small.iterdir()) == []          # neither run.json nor its temporary sibling
    finally:
        subprocess.run(["umount", "-l", str(small)], capture_output=True)


def test_hardened_streams_write_what_they_cannot_encode():
    """The consoles' last line of defence: a lone surrogate written to a strict UTF-8 stdout is escaped."""
    code = "from llamaforge.console import harden_streams; harden_streams(); print('a\\udcffb')"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=120,
                       env={**os.environ, "PYTHONIOENCODING": "utf-8:strict"})
    assert r.returncode == 0 and r.stdout == b"a\\udcffb\n", r.stderr
