"""tests/ci_deadline.py: when a test needing a cold build beyond the default pin's is skipped under CI's deadline."""

from __future__ import annotations

from pathlib import Path

import pytest

import ci_deadline
from ci_deadline import COLD_BUILD_NEEDS_S, skip_reason


def test_no_deadline_or_a_cached_build_never_skips():
    assert skip_reason("x", cached=False, now=1000.0, deadline_s=None) is None
    assert skip_reason("x", cached=True, now=1000.0, deadline_s=1000.0) is None     # even at the deadline


def test_a_cold_build_runs_only_with_enough_time_left():
    now = 1_000_000.0
    assert skip_reason("x", cached=False, now=now, deadline_s=now + COLD_BUILD_NEEDS_S) is None
    why = skip_reason("the CPU build of lcpp-0.3.33 (78d2f5246)", cached=False, now=now,
                      deadline_s=now + COLD_BUILD_NEEDS_S - 60)
    assert why and why.startswith("CI deadline: 24 min left") and "lcpp-0.3.33" in why
    assert "scripts/test.sh -m slow" in why                        # how to run it after all
    late = skip_reason("x", cached=False, now=now, deadline_s=now - 300)
    assert late and late.startswith("CI deadline: 0 min left")


@pytest.mark.parametrize("raw, want", [("", None), ("  ", None), ("1733350000", 1733350000.0), ("1733350000.5", 1733350000.5)])
def test_the_deadline_is_read_from_the_environment(raw, want):
    assert ci_deadline.deadline({ci_deadline.DEADLINE_ENV: raw}) == want
    assert ci_deadline.deadline({}) is None


@pytest.mark.parametrize("raw", ["soon", "nan", "inf", "-5", "0"])
def test_a_deadline_that_is_not_a_time_is_an_error_with_the_fix(raw):
    with pytest.raises(ValueError, match=r"is not a time: give epoch seconds"):
        ci_deadline.deadline({ci_deadline.DEADLINE_ENV: raw})


def test_tests_using_pin_build_are_collected_last(pytestconfig):
    root = Path(__file__).resolve().parents[1] / "conftest.py"      # tests/conftest.py, as pytest loaded it
    (conftest,) = [p for p in pytestconfig.pluginmanager.get_plugins() if getattr(p, "__file__", None) == str(root)]

    class Item:
        def __init__(self, name: str, fixtures: tuple[str, ...]) -> None:
            self.nodeid, self.fixturenames = f"tests/integration/{name}", fixtures

        def get_closest_marker(self, _name: str) -> None:
            return None

    items = [Item("a", ("pin_build",)), Item("b", ()), Item("c", ("cpu_build", "pin_build")), Item("d", ("cpu_build",))]
    conftest.pytest_collection_modifyitems(None, items)
    assert [it.nodeid[-1] for it in items] == ["b", "d", "a", "c"]
