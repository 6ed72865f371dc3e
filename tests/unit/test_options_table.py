"""Options declared once (issue 42): every measuring command's options come from one table,
:mod:`llamaforge.options.table` — the same name has the same type, default and help in every command unless the
table declares the command's own (a default of its own always with the reason); the stray constants are gone and
docs/options.md is the table."""

from __future__ import annotations

import ast
import inspect
from collections import defaultdict
from pathlib import Path

import pytest

from llamaforge.cli import ns
from llamaforge.errors import ConfigError
from llamaforge.options import table as t

REPO = Path(__file__).resolve().parents[2]
SRC = REPO / "src" / "llamaforge"
#: the commands issue 42 names (the variant matrix is bench --variant and compare --base-variant), and the others
#: that measure
MEASURING = ("bench", "compare", "bisect", "bisect-run", "history.run", "fitmap", "demo", "fleet.bench", "reproduce")
#: names two commands share that are not measuring options, each with why it is not a row (yet)
OWN_SHARED = {"fleet": "the fleet file: compare --base-host and the fleet.* tasks' own (commands/fleet.py)",
              "out": "a folder for what the command writes (demo's report, bisect's plot): not a measuring option"}


def _params(task: str) -> dict[str, inspect.Parameter]:
    params = inspect.signature(inspect.unwrap(ns[task].body)).parameters
    return dict(list(params.items())[1:])       # the Context first


def test_every_measuring_command_is_in_the_table():
    assert set(MEASURING) == set(t.TASKS)


def test_an_option_two_commands_take_is_a_row_of_the_table():
    """The same name in two commands is one row (so it cannot drift), unless it is named in OWN_SHARED."""
    takers: dict[str, list[str]] = defaultdict(list)
    for task in MEASURING:
        positional = set(ns[task].positional)
        for name in _params(task):
            if name not in positional:
                takers[name].append(task)
    loose = {n: ts for n, ts in takers.items() if len(ts) > 1 and n not in t.OPTIONS and n not in OWN_SHARED}
    assert not loose, f"options shared by commands but not in the table: {loose}"


@pytest.mark.parametrize("task", MEASURING)
def test_every_command_takes_its_table_options_with_the_tables_default_and_help(task):
    """Same name → same default and help, unless the task declares its own (TASKS[task].defaults / .help)."""
    params, decl, task_help = _params(task), t.TASKS[task], ns[task].option_help   # the --help texts (invoke_help)
    for name in params:
        if name in t.OPTIONS:
            assert name in decl.names, f"{task} takes table option {name} without declaring it in TASKS"
    for name in decl.names:
        assert name in params, f"{task} declares {name} but does not take it"
        assert params[name].default == t.default_of(task, name), (task, name)
        assert task_help.get(name) == decl.help.get(name, t.OPTIONS[name].help), (task, name)


@pytest.mark.parametrize("task", [k for k, v in t.TASKS.items() if v.defaults is not None])
def test_a_default_of_its_own_differs_from_the_table_and_says_why(task):
    decl = t.TASKS[task]
    assert set(decl.defaults) == set(decl.why), f"{task}: defaults without a reason, or reasons without a default"
    for name, value in decl.defaults.items():
        assert name in decl.names and value != t.OPTIONS[name].default, (task, name)
        assert len(decl.why[name]) > 20, (task, name)


def test_the_same_option_means_the_same_in_compare_bisect_history_and_bench():
    """Shared rows: one default where the commands agree (prompt 2500, 128 tokens, 3 requests, ``--launches auto``)."""
    for name, want in (("prompt_tokens", 2500), ("n_predict", 128), ("repeats", 3), ("launches", "auto"),
                       ("max_launches", None), ("min_effect", "5%"), ("engine", "server")):
        for task in MEASURING:
            if name in t.TASKS[task].names and name not in (t.TASKS[task].defaults or {}) \
                    and t.TASKS[task].defaults is not None:
                assert _params(task)[name].default == want, (task, name)
    assert t.default_of("compare", "prompt_tokens") == t.default_of("bench", "prompt_tokens") == 2500


def test_a_deprecated_alias_names_its_option_and_is_taken_only_beside_it():
    aliases = [o for o in t.OPTIONS.values() if o.alias_of]
    assert [o.name for o in aliases] == ["rounds"]
    for o in aliases:
        assert o.alias_of in t.OPTIONS and o.help.startswith("deprecated")
        for task, decl in t.TASKS.items():
            if o.name in decl.names:
                assert o.alias_of in decl.names, task


@pytest.mark.parametrize("task,args", [("compare", ("a",)), ("bisect", ("a", "b")), ("history.run", ()),
                                       ("bisect-run", ())])
def test_a_bad_shared_value_is_refused_by_the_table_before_anything_runs(task, args, monkeypatch):
    """``--prompt-tokens 0`` / ``--repeats 0``: the same one line, naming the option, in every command."""
    monkeypatch.setattr("sys.exit", lambda code=0: (_ for _ in ()).throw(SystemExit(code)))
    name = "prompt_tokens" if "prompt_tokens" in t.TASKS[task].names else "repeats"
    body = inspect.unwrap(ns[task].body)
    if task == "bisect-run":          # its setup errors exit 128 after one line
        with pytest.raises(SystemExit) as e:
            body(None, *args, **{name: "0"})
        assert e.value.code == 128
        return
    with pytest.raises(ConfigError) as e:
        body(None, *args, **{name: "0"})
    assert e.value.message == f"{t.OPTIONS[name].flag} 0 is out of range"


def _assigned(tree: ast.Module) -> set[str]:
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign):
            for target in node.targets:
                for n in ast.walk(target):
                    if isinstance(n, ast.Name):
                        out.add(n.id)
    return out


def test_the_stray_option_constants_are_gone():
    """``DEFAULT_LAUNCHES = 2`` (unused), history's own prompt constants and compare's second ``DEFAULT_REPEATS``:
    the defaults live in the table (and in records for the plan) only."""
    owners = {"DEFAULT_REPEATS": {"records.py"}, "DEFAULT_PROMPT_TOKENS": {"records.py"},
              "DEFAULT_N_PREDICT": {"records.py"}, "DEFAULT_LAUNCHES": set(), "DEFAULT_PROMPT": set(),
              "DEFAULT_PREDICT": set()}
    found = defaultdict(set)
    for path in SRC.rglob("*.py"):
        for name in _assigned(ast.parse(path.read_text(encoding="utf-8"))) & set(owners):
            found[name].add(str(path.relative_to(SRC)))
    stray = {n: sorted(ps - owners[n]) for n, ps in found.items() if ps - owners[n]}
    assert not stray, f"option defaults defined outside the table: {stray}"


def test_the_options_page_is_the_table():
    page = (REPO / "docs" / "options.md").read_text(encoding="utf-8")
    start, end = "edit the table, not this page -->\n", "<!-- /options-table -->"
    body = page[page.index(start) + len(start):page.index(end)]
    assert body == t.markdown(), ("docs/options.md is out of date: regenerate the part between its markers with "
                                  "python -c 'from llamaforge.options.table import markdown; print(markdown())'")


def test_help_for_refuses_own_help_for_a_table_option():
    with pytest.raises(TypeError, match="table options"):
        t.help_for("compare", repeats="my own words")
