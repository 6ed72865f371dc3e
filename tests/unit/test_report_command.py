"""The `report` task: resolves `latest`, writes to results/reports/<run id>/, one-line errors."""

from __future__ import annotations

import pytest
import run_fake
from invoke import Context

from llamaforge.commands.report import TASKS, report


@pytest.fixture
def results(tmp_path, monkeypatch):
    monkeypatch.setenv("LLAMAFORGE_RESULTS", str(tmp_path))
    return tmp_path


def test_report_task_is_exported():
    assert report in TASKS


def test_report_latest_writes_into_results_reports_run_id(results, capsys):
    store, run_id = run_fake.build(results, db="llamaforge.sqlite")
    store.close()
    report(Context(), run="latest")
    out_dir = results / "reports" / run_id
    assert (out_dir / "report.html").is_file() and (out_dir / "report.md").is_file()
    printed = capsys.readouterr().out
    assert run_id in printed and str(out_dir / "report.html") in printed


def test_report_out_option_and_min_effect(results, tmp_path):
    store, run_id = run_fake.build(results, db="llamaforge.sqlite")
    store.close()
    report(Context(), run=run_id[:12], out=str(tmp_path / "mine"), min_effect="0.5")
    md = (tmp_path / "mine" / "report.md").read_text()
    assert "faster by more than 50%" in md and "> Absent: none found.\n" in md  # the 17 % spike is below a 50 % bar


@pytest.mark.parametrize("kwargs, message", [
    ({"run": "nope"}, "no run 'nope'"),
    ({"run": "latest", "min_effect": "lots"}, "is not a number"),
])
def test_report_bad_input_is_one_line_without_traceback(results, capsys, kwargs, message):
    store, _ = run_fake.build(results, db="llamaforge.sqlite")
    store.close()
    with pytest.raises(SystemExit) as exc:
        report(Context(), **kwargs)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_report_without_a_store_says_how_to_get_one(results, capsys):
    with pytest.raises(SystemExit):
        report(Context(), run="latest")
    err = capsys.readouterr().err
    assert "no results store" in err and "bench" in err
    assert not (results / "llamaforge.sqlite").exists()
