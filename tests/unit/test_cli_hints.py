"""Every command line a message or docstring tells the user to type (`llamaforge runs RUN --failed`,
`inv fleet.bench --resume ID`, …) parses with the real CLI: the task exists, its options exist, and its
required positional arguments are there. ``runs`` takes its run as a positional argument (``--run`` too)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
from invoke.exceptions import ParseError
from invoke.parser import Parser

from llamaforge.cli import ns, program
from llamaforge.invoke_help import install

SRC = Path(__file__).resolve().parents[2] / "src" / "llamaforge"
_HINT = re.compile(r"`(?:llamaforge|inv) ([a-z][^`]*)`")
_PLACEHOLDER = re.compile(r"\{[^{}]*\}")


def _hints() -> list[tuple[str, str]]:
    """(where, the command line after the program name) of every backticked hint in the sources."""
    out = []
    for f in sorted(SRC.rglob("*.py")):
        for n, line in enumerate(f.read_text(encoding="utf-8").splitlines(), 1):
            for m in _HINT.finditer(line):
                out.append((f"{f.relative_to(SRC)}:{n}", m.group(1)))
    return out


HINTS = _hints()


def _argv(text: str) -> list[str]:
    """A hint as argv: f-string fields and UPPER-CASE placeholders become sample values."""
    while _PLACEHOLDER.search(text):
        text = _PLACEHOLDER.sub("X1", text)
    text = re.sub(r"\b(RUN|RUN2|DIR|ID|N|FILE|TASK|PRESET)\b", "X1", text)
    try:
        return shlex.split(text)
    except ValueError:
        return text.split()


def _parse(argv: list[str]):  # noqa: ANN202
    install()
    return Parser(initial=program.initial_context, contexts=ns.to_contexts()).parse_argv(argv)


def test_the_sources_have_hints_to_check():
    assert len(HINTS) > 20 and any(h.startswith("runs ") for _w, h in HINTS)


@pytest.mark.parametrize(("where", "hint"), HINTS, ids=[w for w, _h in HINTS])
def test_every_hinted_command_line_parses_with_the_real_cli(where, hint):
    if "..." in hint or "TASK" in hint:
        pytest.skip("a pattern, not a command line")
    argv = _argv(hint)
    assert argv[0] in ns.task_names or argv[0] in {a for al in ns.task_names.values() for a in al}, \
        f"{where}: no task {argv[0]!r}"
    if len(argv) == 1:
        return   # the bare task name in prose ("see `llamaforge doctor`"): the task exists
    try:
        _parse(argv)
    except ParseError as e:
        pytest.fail(f"{where}: `{hint}` does not parse: {e}")


@pytest.mark.parametrize("argv", [["runs", "R1"], ["runs", "R1", "--failed"], ["runs", "--run", "R1", "--failed"],
                                  ["runs", "--failed", "R1"]])
def test_runs_takes_its_run_as_a_positional_argument_or_an_option(argv):
    ctx = _parse(argv)[-1]
    assert ctx.args["run"].value == "R1"
    assert bool(ctx.args["failed"].value) == ("--failed" in argv)


def test_runs_without_a_run_lists_runs_and_required_positionals_stay_required():
    assert _parse(["runs"])[-1].args["run"].value is None
    assert _parse(["runs", "--kind", "sweep"])[-1].args["kind"].value == "sweep"
    with pytest.raises(ParseError, match="did not receive required positional arguments"):
        _parse(["report"])
    with pytest.raises(ParseError, match="did not receive required positional arguments"):
        _parse(["export"])
