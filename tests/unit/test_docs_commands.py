"""Every command line the README and the docs site tell a user to type parses with the real CLI.

Each ``inv …`` / ``llamaforge …`` line in README.md and docs/**/*.md — in shell code blocks and in
backticked spans — must name a task of the real Invoke collection and only options that task has, and
parse with llamaforge's own parser (``_parse``/``_argv`` of test_cli_hints.py, which checks the hints in
the sources the same way). Doc notation is read first: ``[--opt X]`` is an optional part, ``a|b`` a
choice (the first is taken), ``…`` "and so on", UPPER-CASE words placeholders (a whole number where the
option takes one).

And the README is the front door: it opens with the two commands for a fresh machine, the main job
(``inv demo``) and the test command that ``.ci/run`` calls.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
from invoke.exceptions import ParseError
from test_cli_hints import _argv, _parse

from llamaforge.cli import ns, program

REPO = Path(__file__).resolve().parents[2]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
PROGRAMS = {"inv", "llamaforge"}
#: words that may stand before the program in a command line (`/usr/bin/time llamaforge demo`)
WRAPPERS = {"/usr/bin/time", "time", "nice", "python", "python3", "-m"}
SHELL_LANGS = {"", "bash", "sh", "shell", "console"}
SEPARATORS = {"&&", "||", ";", "|"}
_FENCE = re.compile(r"^\s*(```|~~~)\s*(\S*)")
_SPAN = re.compile(r"`([^`]+)`")
_ENV = re.compile(r"^[A-Z_][A-Z0-9_]*=")


def _commands_in_words(words: list[str]) -> list[list[str]]:
    """The commands (words after the program name) of one shell line split into words."""
    out, segment = [], []
    for w in [*words, ";"]:
        if w not in SEPARATORS:
            segment.append(w)
            continue
        for i, word in enumerate(segment):
            if word in PROGRAMS:
                out.append(segment[i + 1:])
                break
            if not (_ENV.match(word) or word in WRAPPERS):
                break
        segment = []
    return out


def _split(text: str) -> list[str]:
    try:
        return shlex.split(text, comments=True)
    except ValueError:
        return text.split()


def commands_in(text: str) -> list[tuple[int, str]]:
    """(line number, command after the program name) of every command line in Markdown ``text``."""
    found: list[tuple[int, list[str]]] = []
    lines = text.splitlines()
    fence, lang, para, start, pending = None, "", [], 0, ""
    for n, line in enumerate([*lines, ""], 1):
        m = _FENCE.match(line)
        if fence is None and m:
            found += _spans(" ".join(para), start)
            fence, lang, para = m.group(1), m.group(2).lower(), []
        elif fence is not None:
            if line.strip().startswith(fence):
                fence = None
            elif lang in SHELL_LANGS:
                pending += line
                if pending.endswith("\\"):
                    pending = pending[:-1] + " "
                    continue
                found += [(n, c) for c in _commands_in_words(_split(pending))]
                pending = ""
        elif line.strip():
            start = start if para else n
            para.append(line)
        else:
            found += _spans(" ".join(para), start)
            para = []
    # `inv …` alone names the program, not a command line
    return [(n, shlex.join(words)) for n, words in found if set(words) - {"…", "..."}]


def _spans(paragraph: str, line: int) -> list[tuple[int, list[str]]]:
    return [(line, c) for s in _SPAN.findall(paragraph) for c in _commands_in_words(_split(s))]


def _notation(command: str) -> str:
    """Doc notation made a command line: optional parts kept, the first of a choice, no ellipsis."""
    words = []
    for w in shlex.split(command):
        w = w.lstrip("[").rstrip("]").rstrip("…")
        if w in ("", "...", "…"):
            continue
        if "|" in w and not w.startswith("-"):
            w = w.split("|")[0]
        words.append(w)
    return shlex.join(words)


def _typed(argv: list[str]) -> list[str]:
    """A placeholder given to an option that takes a number becomes a number (``--layers N`` → 1)."""
    ctx = next((c for c in ns.to_contexts() if argv[0] == c.name or argv[0] in c.aliases), None)
    out = argv[:1]
    for prev, w in zip(argv, argv[1:], strict=False):
        arg = ctx.flags.get(prev) if ctx is not None else None
        if arg is not None and arg.takes_value and arg.kind in (int, float):
            try:
                arg.kind(w)
            except ValueError:
                w = "1"
        out.append(w)
    return out


def _task_names() -> set[str]:
    return set(ns.task_names) | {a for aliases in ns.task_names.values() for a in aliases}


def problem(command: str) -> str | None:
    """Why ``command`` (the words after ``inv``/``llamaforge``) is not a command line of this CLI, or None."""
    argv = _argv(_notation(command))
    if not argv:
        return "an empty command"
    if argv[0].startswith("-"):
        unknown = [w for w in argv if w.startswith("--") and w.split("=")[0] not in program.initial_context.flags]
        return f"no core option {unknown[0]!r}" if unknown else None
    if argv[0] not in _task_names():
        return f"no task {argv[0]!r}"
    if len(argv) == 1:
        return None   # the bare task name in prose ("`inv model.synth`, `inv model.twin`"): it exists
    try:
        _parse(_typed(argv))
    except ParseError as e:
        return f"does not parse: {e}"
    except SystemExit:
        return "a value the option cannot take"
    return None


def _doc_commands() -> list[tuple[str, str]]:
    out = []
    for page in PAGES:
        for n, cmd in commands_in(page.read_text(encoding="utf-8")):
            out.append((f"{page.relative_to(REPO)}:{n}", cmd))
    return out


DOC_COMMANDS = _doc_commands()


def test_the_docs_have_command_lines_to_check():
    pages = {where.split(":")[0] for where, _c in DOC_COMMANDS}
    assert len(DOC_COMMANDS) > 60 and "README.md" in pages and len(pages) > 8


@pytest.mark.parametrize(("where", "command"), DOC_COMMANDS, ids=[w for w, _c in DOC_COMMANDS])
def test_every_command_line_in_the_docs_names_a_task_and_its_options(where, command):
    if "TASK" in command.split():
        pytest.skip("a pattern, not a command line")
    why = problem(command)
    assert why is None, f"{where}: `{command}`: {why}"


@pytest.mark.parametrize(("command", "why"), [
    ("bench --model M --no-such-option 3", "no-such-option"),
    ("bench --model M --ncmoe 0:8 --repeats", "repeats"),
    ("no-such-task --model M", "no task"),
    ("report", None),
    ("report RUN --no-such-flag", "no-such-flag"),
    ("--no-such-core-flag", "no core option"),
])
def test_the_checker_refuses_a_missing_task_or_option(command, why):
    got = problem(command)
    assert (got is None) if why is None else (got is not None and why in got), got


def test_doc_notation_and_placeholders_are_read_as_a_user_would():
    assert problem("model.synth PRESET [--mix q4_k_m|iq4_nl|q8_0] [--layers N --experts N …] [--plan]") is None
    assert problem("export RUN --format json|csv|jsonl") is None
    assert problem("bench --model M --ngl -1") is None
    assert problem("bench --model M --ncmoe 0:40:2,9,11 [--vram-budget 24] [--repeats 3]") is None


def test_commands_are_found_in_code_blocks_and_backticks_but_not_in_other_languages():
    text = """Run `inv bench --model M --ncmoe 0:8` or `llamaforge report
RUN --with R2`; not `compare --base A`.

```bash
scripts/setup.sh && inv demo        # the main job
LLAMAFORGE_RESULTS=x llamaforge export RUN \\
    --format csv
/usr/bin/time llamaforge demo
pip install llamaforge
```

```toml
workspace = "llamaforge"
```
"""
    assert [c for _n, c in commands_in(text)] == [
        "bench --model M --ncmoe 0:8", "report RUN --with R2", "demo", "export RUN --format csv", "demo"]


def test_a_page_naming_a_missing_option_fails(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("Sweep with `inv bench --model M --ncmoe-auto`.\n\n```bash\ninv fitmap --no-fit\n```\n")
    bad = [(n, c, problem(c)) for n, c in commands_in(page.read_text())]
    assert [(n, c) for n, c, why in bad if why] == [(1, "bench --model M --ncmoe-auto"), (4, "fitmap --no-fit")]


# -- the front door ----------------------------------------------------------------------------------

def _first_code_block(text: str) -> list[str]:
    block = re.search(r"^```\w*\n(.*?)^```", text, re.S | re.M)
    assert block, "the README has no code block"
    return [ln for ln in block.group(1).splitlines() if ln.strip()]


def _ci_test_command() -> str:
    """The test command .ci/run calls (the first word of its line that runs the tests)."""
    for line in (REPO / ".ci" / "run").read_text(encoding="utf-8").splitlines():
        words = _split(line)
        while words and "=" in words[0] and not words[0].startswith(("scripts/", "-")):
            words = words[1:]                            # environment assignments before the command
        if words and words[0].startswith("scripts/") and "test" in words[0]:
            return words[0]
    raise AssertionError(".ci/run calls no scripts/*test* command")


def test_the_readme_opens_with_the_demo_and_the_test_command_ci_runs():
    text = (REPO / "README.md").read_text(encoding="utf-8")
    before = text[:text.index("```")]
    assert before.count("\n") <= 4, "the two commands come first, right after the title"
    first, second = _first_code_block(text)
    assert [c for _n, c in commands_in(f"```bash\n{first}\n```")] == ["demo"]
    test_cmd = _ci_test_command()
    assert _split(second)[-1] == test_cmd or test_cmd in _split(second), (second, test_cmd)
    assert (REPO / test_cmd).is_file()


def test_the_readme_is_a_front_door_not_a_manual():
    assert len((REPO / "README.md").read_text(encoding="utf-8").splitlines()) <= 300
