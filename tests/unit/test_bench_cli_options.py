"""The bench options table (issue 24): every option of bench, fitmap, demo, fleet.bench and reproduce is declared
once, in :mod:`llamaforge.bench.cli_options`; each task's parameters, help and defaults are checked against it
here, and every number goes through the one parser (:mod:`llamaforge.values`)."""

from __future__ import annotations

import ast
import dataclasses
import inspect
from pathlib import Path

import pytest

from llamaforge.bench import cli_options as co
from llamaforge.cli import ns
from llamaforge.errors import ConfigError
from llamaforge.values import as_float, as_int

SRC = Path(__file__).resolve().parents[2] / "src" / "llamaforge"


def _signature(task: str) -> dict[str, inspect.Parameter]:
    body = ns[task].body
    params = inspect.signature(inspect.unwrap(body)).parameters
    return {n: p for n, p in list(params.items())[1:]}      # the Context first


@pytest.mark.parametrize("task", sorted(co.TASKS))
def test_each_task_takes_the_options_it_declares_and_no_other_table_option(task):
    params = _signature(task)
    names = set(co.TASKS[task].names)
    assert names <= set(params), f"{task} lacks {sorted(names - set(params))}"
    stray = {n for n in params if n in co.OPTIONS} - names
    assert not stray, f"{task} takes table options it does not declare in TASKS: {sorted(stray)}"


@pytest.mark.parametrize("task", sorted(co.TASKS))
def test_each_task_help_is_the_tables_or_its_declared_own(task):
    t = ns[task]
    for name in co.TASKS[task].names:
        want = co.TASKS[task].help.get(name, co.OPTIONS[name].help)
        assert t.option_help.get(name) == want, (task, name)
    for name in co.TASKS[task].help:
        assert name in co.TASKS[task].names, f"{task}: help of {name}, which it does not take"
        assert co.TASKS[task].help[name] != co.OPTIONS[name].help, f"{task}: {name}'s own help is the table's"


@pytest.mark.parametrize("task", sorted(co.TASKS))
def test_each_task_default_is_the_tables_or_its_declared_own(task):
    params = _signature(task)
    for name in co.TASKS[task].names:
        assert params[name].default == co.default_of(task, name), (task, name)


def test_bench_takes_every_bench_option_and_only_those():
    assert set(_signature("bench")) == set(co.TASKS["bench"].names)


def test_bench_options_has_a_field_per_bench_option_with_the_tables_default():
    fields = {f.name: f for f in dataclasses.fields(co.BenchOptions)}
    assert set(fields) == set(co.TASKS["bench"].names) - set(co._GROUPED)
    made = co.BenchOptions()
    for name in fields:
        default = co.OPTIONS[name].default
        if default is None or name in ("launches", "ncmoe"):   # ncmoe None: the task's default points
            continue
        assert getattr(made, name) == co.OPTIONS[name].convert(co.OPTIONS[name], default), name
    assert made.launches == co.parse_launches(co.OPTIONS["launches"].default)


def test_bench_options_converts_cli_text_and_keeps_defaults():
    o = co.bench_options(model="m.gguf", repeats="5", load_timeout="30", seed="7", depths="4096,8192",
                         launches="4", variant=["a=cpu"], allow_busy=True, ncmoe=None)
    assert (o.repeats, o.load_timeout, o.seed, o.depths, o.variant) == (5, 30.0, 7, (4096, 8192), ("a=cpu",))
    assert o.launches.fixed == 4 and o.allow_busy and o.prompt_tokens == 2500 and o.ncmoe is None
    with pytest.raises(TypeError, match="hosts"):
        co.bench_options(hosts="a")


def test_the_hosts_get_exactly_the_table_rows_marked_host():
    from llamaforge.fleet import BENCH_PASS

    assert BENCH_PASS == co.HOST_OPTIONS
    assert set(co.HOST_OPTIONS) <= set(co.TASKS["bench"].names)


@pytest.mark.parametrize("name", [o.name for o in co.OPTIONS.values() if o.type in ("int", "float")])
def test_every_number_option_is_refused_in_one_line_naming_it_with_the_fix(name):
    o = co.OPTIONS[name]
    for bad in ("abc", "-7", "9" * 30, "nan"):
        if o.maximum is None and bad == "9" * 30:
            continue                 # no upper bound: a large count (or a long timeout) is one
        with pytest.raises(ConfigError) as e:
            co.convert({name: bad})
        assert o.flag in e.value.message and "\n" not in e.value.message, (name, bad)
        assert e.value.fix and e.value.fix.startswith(f"give {o.flag} "), (name, bad, e.value.fix)


def test_the_first_bad_value_in_table_order_is_the_one_named():
    with pytest.raises(ConfigError, match="--repeats"):
        co.convert({"prompt_tokens": "x", "repeats": "y"})


def test_the_number_parser_states_the_range_and_the_example():
    with pytest.raises(ConfigError) as e:
        as_int("0", "--ctx", minimum=16, example="e.g. --ctx 8192")
    assert e.value.message == "--ctx 0 is out of range" and e.value.fix == "give --ctx a whole number at least 16; e.g. --ctx 8192"
    with pytest.raises(ConfigError) as e:
        as_int("12", "--launches", minimum=1, maximum=10)
    assert e.value.fix == "give --launches a whole number 1..10"
    assert as_int(" 1_000 ", "--n") == 1000 and as_float("2.5", "--x", positive=True) == 2.5
    with pytest.raises(ConfigError, match="not a whole number"):
        as_int(True, "--n")


def _int_calls(path: Path) -> list[str]:
    """Functions of ``path`` that call the builtin ``int()`` on something: a parser of their own."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return sorted({f"{path.name}:{fn.name}" for fn in ast.walk(tree) if isinstance(fn, ast.FunctionDef)
                   for node in ast.walk(fn) if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                   and node.func.id == "int"})


def test_no_command_module_parses_integers_itself():
    """One integer parser for options (:func:`llamaforge.values.as_int`): the commands and the table call it."""
    found = [f for p in sorted((SRC / "commands").glob("*.py")) for f in _int_calls(p)]
    found += _int_calls(SRC / "bench" / "cli_options.py")
    assert not found, found


def test_demo_imports_no_private_name_of_another_module():
    tree = ast.parse((SRC / "commands" / "demo.py").read_text(encoding="utf-8"))
    private = [a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) for a in n.names
               if a.name.startswith("_")]
    assert not private, private
