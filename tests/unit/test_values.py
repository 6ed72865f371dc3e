"""The one parser of option values (:mod:`llamaforge.values`): one rule for relative effects (compare --min-effect,
bisect --threshold, report --min-effect)."""

from __future__ import annotations

import pytest

from llamaforge.errors import ConfigError
from llamaforge.values import parse_effect


@pytest.mark.parametrize("text,value", [("5%", 0.05), ("0.5%", 0.005), ("0.1", 0.1), (0.05, 0.05), (" 12 % ", 0.12),
                                        (None, 0.05), ("", 0.05), ("0", 0.0)])
def test_a_fraction_or_a_percent_with_its_sign(text, value) -> None:
    assert parse_effect(text) == pytest.approx(value)


@pytest.mark.parametrize("text,match", [("5", "ambiguous"), ("1", "ambiguous"), (10, "ambiguous"),
                                        ("five", "not a number"), ("150%", "out of range"), ("-0.1", "out of range")])
def test_ambiguous_or_bad_input_is_one_clear_error(text, match) -> None:
    with pytest.raises(ConfigError, match=match) as e:
        parse_effect(text, option="--threshold")
    assert "--threshold" in str(e.value) and e.value.fix


def test_a_threshold_must_be_above_zero() -> None:
    with pytest.raises(ConfigError, match="out of range"):
        parse_effect("0", option="--threshold", allow_zero=False)
    assert parse_effect("5%", option="--threshold", allow_zero=False) == pytest.approx(0.05)


def test_the_commands_share_the_rule(tmp_path, monkeypatch, capsys) -> None:
    """compare, bisect, report and reproduce refuse the same ambiguous value with the same message."""
    from invoke import Context

    from llamaforge.commands.bench import reproduce
    from llamaforge.commands.regressions import bisect, compare
    from llamaforge.commands.report import report

    monkeypatch.setenv("LLAMAFORGE_WORKSPACE", str(tmp_path))
    for call in (lambda: compare(Context(), base="x", min_effect="5"),
                 lambda: bisect(Context(), good="a", bad="b", threshold="5"),
                 lambda: report(Context(), run="latest", min_effect="5"),
                 lambda: reproduce(Context(), run="latest", min_effect="5")):
        with pytest.raises(SystemExit) as e:
            call()
        assert e.value.code == 2
        assert "is ambiguous" in capsys.readouterr().err
