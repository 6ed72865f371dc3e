"""The CLI behaves like Invoke users expect: ``TASK --help`` / ``TASK -h`` print help for every task
(never run it), options have only the short flags we chose, and runs are found by id, name or prefix."""

from __future__ import annotations

import contextlib
import io
import subprocess
import sys
from pathlib import Path

import pytest
from invoke import Collection

from llamaforge.cli import ns, program
from llamaforge.errors import StoreError
from llamaforge.invoke_help import SHORT_FLAGS
from llamaforge.store import Store

REPO = Path(__file__).resolve().parents[2]


def _task_names(coll: Collection, prefix: str = "") -> list[str]:
    out = [prefix + name for name in coll.tasks]
    for name, sub in coll.collections.items():
        out += _task_names(sub, f"{prefix}{name}.")
    return sorted(out)


TASK_NAMES = _task_names(ns)


def _run(argv: list[str]) -> tuple[str, int]:
    out = io.StringIO()
    code = 0
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        try:
            program.run(["llamaforge", *argv], exit=False)
        except SystemExit as e:  # a task that ran and failed exits non-zero
            code = e.code if isinstance(e.code, int) else 1
    return out.getvalue(), code


def test_the_collection_has_the_tasks_with_positional_arguments():
    assert {"model.synth", "model.info", "report", "compare", "bisect", "export"} <= set(TASK_NAMES)


@pytest.mark.parametrize("flag", ["--help", "-h"])
@pytest.mark.parametrize("task", TASK_NAMES)
def test_task_help_prints_the_tasks_help_and_runs_nothing(task, flag, monkeypatch, tmp_path):
    monkeypatch.setenv("LLAMAFORGE_WORKSPACE", str(tmp_path))   # a task that ran would touch this
    monkeypatch.setenv("LLAMAFORGE_RESULTS", str(tmp_path / "results"))
    text, code = _run([task, flag])
    assert code == 0, text
    assert f"Usage: llamaforge [--core-opts] {task} [" in text
    assert "Docstring:" in text and "Error" not in text
    assert list(tmp_path.iterdir()) == []


def test_help_after_a_positional_value_and_before_the_task_still_work():
    text, code = _run(["model.info", "synth:tiny-qwen3moe", "--help"])
    assert code == 0 and "model.info [--options]" in text
    text, code = _run(["--help", "model.synth"])
    assert code == 0 and "model.synth [--options]" in text


def test_a_value_of_an_option_may_still_be_dash_dash_help():
    """Only an option's name position means help: ``--extra --help`` passes "--help" as the value."""
    from invoke.parser import Parser

    from llamaforge.invoke_help import install

    install()
    parser = Parser(initial=program.initial_context, contexts=ns.to_contexts())
    result = parser.parse_argv(["bench", "--extra", "--help"])
    assert result[-1].args["extra"].value == "--help"


def test_missing_positional_argument_is_still_an_error():
    text, _ = _run(["model.synth"])
    assert "did not receive required positional arguments" in text   # (exit=False: no exit code)


def test_plain_inv_in_the_repo_prints_help_for_a_task_with_a_positional_argument():
    """The issue's own command: `inv model.synth --help` ran the task with preset="--help"."""
    r = subprocess.run([sys.executable, "-m", "invoke", "model.synth", "--help"], cwd=REPO, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "model.synth [--options]" in r.stdout and "Error" not in r.stdout + r.stderr


@pytest.mark.parametrize("task", TASK_NAMES)
def test_options_have_only_the_chosen_short_flags(task):
    t = ns[task]
    for arg in t.get_arguments():
        shorts = [n for n in arg.names if len(n) == 1]
        assert all(n.isalpha() for n in arg.names if len(n) <= 1), arg.names   # no empty `--=INT` flag
        assert "h" not in shorts, f"{task} --{arg.name} takes -h, which is help"
        assert shorts == ([SHORT_FLAGS[arg.attr_name or arg.name]] if (arg.attr_name or arg.name) in SHORT_FLAGS
                          else []), (task, arg.names)


def test_n_predict_and_threads_have_no_short_flag_and_model_has_m():
    names = {a.name: a.names for a in ns["bench"].get_arguments()}
    assert names["n_predict"] == ("n-predict",) or list(names["n_predict"]) == ["n-predict"]
    assert list(names["threads"]) == ["threads", "t"]
    assert list(names["model"]) == ["model", "m"]


# ---- runs by name ---------------------------------------------------------------------------------
@pytest.fixture
def store(tmp_path):
    s = Store(tmp_path / "llamaforge.sqlite")
    yield s
    s.close()


def _add(store: Store, run_id: str, name: str | None, created: float) -> str:
    store.db.execute("INSERT INTO runs (id, kind, name, status, created, updated, plan_json, env_json)"
                     " VALUES (?, 'sweep', ?, 'done', ?, ?, '{}', '{}')", (run_id, name, created, created))
    return run_id


@pytest.fixture
def runs(store):
    _add(store, "20261130-100000-aaaa", "first", 1.0)
    _add(store, "20261130-110000-bbbb", "sweep-a", 2.0)
    _add(store, "20261130-110000-bbcc", "sweep-a", 3.0)
    _add(store, "20261130-120000-cccc", "20261130-100000-aaaa", 4.0)   # named like another run's id
    _add(store, "20261130-130000-dddd", None, 5.0)
    return store


def test_run_by_exact_id_name_and_unique_prefix(runs):
    assert runs.get_run("first").id == "20261130-100000-aaaa"
    assert runs.get_run("sweep-a").id == "20261130-110000-bbcc"        # a shared name: the newest run
    assert runs.get_run("20261130-13").id == "20261130-130000-dddd"    # a unique id prefix
    assert runs.get_run("latest").id == "20261130-130000-dddd"


def test_an_exact_id_wins_over_a_name(runs):
    assert runs.get_run("20261130-100000-aaaa").id == "20261130-100000-aaaa"
    assert runs.get_run("20261130-120000-cccc").id == "20261130-120000-cccc"


def test_an_ambiguous_prefix_lists_the_candidates(runs):
    with pytest.raises(StoreError) as e:
        runs.get_run("20261130-110000-bb")
    msg = str(e.value)
    assert "ambiguous" in msg and "20261130-110000-bbbb" in msg and "20261130-110000-bbcc" in msg
    assert "-aaaa" not in msg


@pytest.mark.parametrize("ref", ["%", "_", "2026113_", "%aaaa"])
def test_like_wildcards_in_a_reference_are_literal(runs, ref):
    with pytest.raises(StoreError, match="no run"):
        runs.get_run(ref)


def test_tasks_find_runs_by_name(tmp_path, monkeypatch, capsys):
    import run_fake
    from invoke import Context

    from llamaforge.commands.report import report

    monkeypatch.setenv("LLAMAFORGE_RESULTS", str(tmp_path))
    store, run_id = run_fake.build(tmp_path, db="llamaforge.sqlite")
    name = store.get_run(run_id).name
    store.close()
    assert name, "the fake run has a name"
    report(Context(), run=name)
    assert (tmp_path / "reports" / run_id / "report.md").is_file()
