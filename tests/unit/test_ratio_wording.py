"""How ratios are said (issue 40: the first screen a person reads).

After ``inv demo`` on a machine without a GPU the lavapipe-Vulkan / CPU ratio read "0.01–0.01×": a reader
saw an interval whose ends agree and had to work out that CPU was about 115× faster. One formatter
(:mod:`llamaforge.judge.wording`) now says every ratio; these tests hold it to the sentences people read.
"""

from __future__ import annotations

import re

import pytest

from llamaforge.judge import judge
from llamaforge.judge.wording import at_least, differs_unresolved, interval_text, ratio_text, span_text


def test_a_ratio_far_below_one_names_the_faster_side_with_the_interval_turned_round():
    # Vulkan/CPU = 0.0087 [0.0062, 0.0125]: CPU is 115× faster, at least 80× and at most 161.3×
    assert ratio_text(0.0087, 0.0062, 0.0125, num="Vulkan", den="CPU") == "CPU 115× faster [80, 162]"
    assert ratio_text(0.0087, 0.0062, 0.0125, num="Vulkan", den="CPU", metric="tg") == "CPU 115× faster (tg) [80, 162]"


def test_a_ratio_far_above_one_names_the_numerator():
    assert ratio_text(2.87, 2.83, 2.91, num="Vulkan", den="CPU") == "Vulkan 2.87× faster [2.83, 2.91]"
    assert ratio_text(12.34, 11.1, 13.3, num="CUDA", den="Vulkan", interval="starts") == \
        "CUDA 12.3× faster (starts 11.1–13.3)"


def test_near_one_the_plain_form_stays():
    assert ratio_text(1.66, 1.35, 2.01) == "1.66× [1.35, 2.01]"
    assert ratio_text(0.83, 0.70, 0.90, interval="starts") == "0.83× (starts 0.70–0.90)"
    assert ratio_text(1.86, interval="one") == "1.86× (1 start each)"
    assert ratio_text(1.3, 1.28, 1.32, decimals=3) == "1.300× [1.280, 1.320]"


def test_far_centre_but_an_interval_that_reaches_one_is_not_turned_into_faster():
    assert ratio_text(2.87, 0.90, 5.10, num="Vulkan", den="CPU", interval="starts") == "2.87× (starts 0.90–5.10)"


@pytest.mark.parametrize(("ratio", "low", "high"), [(1 / 115.3, 1 / 115.31, 1 / 115.29), (1.002, 1.001, 1.004),
                                                      (0.0087, 0.0086, 0.0088), (0.004, 0.001, 1.2)])
def test_an_interval_never_prints_two_equal_ends_and_nothing_prints_as_zero(ratio, low, high):
    text = ratio_text(ratio, low, high, num="Vulkan", den="CPU")
    ends = re.search(r"\[([\d.]+), ([\d.]+)\]", text)
    assert ends and ends.group(1) != ends.group(2), text
    assert not re.search(r"(?<![\d.])0\.0+(?![\d.]*[1-9])", text), text


def test_a_range_of_ratios_over_the_points_is_said_the_same_way():
    assert span_text(0.0085, 0.0089, num="Vulkan", den="CPU") == "CPU 112–118× faster"
    assert span_text(1.75, 3.10, num="Vulkan", den="CPU") == "Vulkan 1.75–3.10× faster"
    assert span_text(0.80, 1.30, num="Vulkan", den="CPU") == "0.80–1.30×"
    assert span_text(0.0086, 0.0087, num="Vulkan", den="CPU") != "CPU 115–115× faster"


def test_at_least_is_the_conservative_end_rounded_down():
    assert at_least(0.0087, 0.0062, 0.0125, num="Vulkan", den="CPU") == "CPU faster at least 80×"
    assert at_least(1.2, 1.069, 1.3, num="Vulkan", den="CPU") == "Vulkan faster at least 1.06×"
    assert at_least(1.2, 0.98, 1.3, num="Vulkan", den="CPU") is None        # no side is faster for sure


def test_differs_but_unresolved_is_one_sentence():
    assert differs_unresolved(0.0087, 0.0062, 0.0125, k=4, precision=0.05, num="Vulkan", den="CPU") == \
        "differs (CPU faster at least 80×); not resolved to ±5 % at K=4"
    assert differs_unresolved(1.2, 1.069, 1.3, k=6, precision=0.025, num="B", den="A") == \
        "differs (B faster at least 1.06×); not resolved to ±2.5 % at K=6"


def test_a_judgement_says_its_ratio_through_the_same_formatter():
    cpu = [[100.0 * f] * 3 for f in (0.97, 1.0, 1.03)]
    vk = [[0.87 * f] * 3 for f in (0.99, 1.0, 1.01)]
    j = judge(cpu, vk)                                           # B/A = Vulkan/CPU
    assert j is not None and j.verdict == "differs"
    text = j.fmt("Vulkan", "CPU")
    assert re.fullmatch(r"CPU 11[0-9]× faster \[\d+, \d+\] differs", text), text
    assert "0.01" not in text
    assert interval_text(*j.interval()).startswith("[0.00")      # the bare interval keeps its digits too
    assert interval_text(*j.interval()) != "[0.01, 0.01]"


def test_a_stored_comparison_far_from_one_is_said_as_which_side_is_faster():
    from llamaforge.findings.comparison import fmt_cmp

    c = {"verdict": "differs", "ratio": 0.0087, "low": 0.0062, "high": 0.0125, "p_differs": 1e-4, "p_same": 1.0}
    assert fmt_cmp(c) == ("A 115× faster [80, 162]", "0.0001", "worse")
    near = {"verdict": "differs", "ratio": 1.3, "low": 1.28, "high": 1.32, "p_differs": 1e-4, "p_same": 1.0}
    assert fmt_cmp(near)[0] == "1.300 [1.280, 1.320]"


def test_the_history_site_names_a_backend_ratio_the_way_it_was_computed():
    """``history.ratio.ratio_series(a, b)`` is a's level over b's (1.6 = CUDA 1.6× Vulkan); the page said
    "vulkan / cuda" above those numbers."""
    from llamaforge.history.model import RatioRow, RatioSeries, SeriesKey
    from llamaforge.history.site import _ratio_view

    cuda = SeriesKey("m", "cuda", "model", "ncmoe=0", "tg", "")
    vk = SeriesKey("m", "vulkan", "model", "ncmoe=0", "tg", "")
    rows = [RatioRow("a" * 40, "b1", 1.6, 1.5, 1.7, "differs", 3, 3),
            RatioRow("b" * 40, "b2", 0.0087, 0.0062, 0.0125, "differs", 3, 3)]
    v = _ratio_view(RatioSeries(cuda, vk, rows), 0, [])
    assert v["title"].startswith("cuda / vulkan")
    assert (v["rows"][0]["text"], v["rows"][0]["interval"]) == ("1.60×", "[1.50, 1.70]")
    assert (v["rows"][1]["text"], v["rows"][1]["interval"]) == ("vulkan 115× faster", "[80, 162]")


def test_the_matrix_turns_a_stored_verdict_round_with_the_same_formatter():
    from llamaforge.report.matrix import _fmt_other_over_base

    slow = [[1.0 * f] * 3 for f in (0.99, 1.0, 1.01)]
    fast = [[115.0 * f] * 3 for f in (0.99, 1.0, 1.01)]
    j = judge(fast, slow)                       # judged base / other = slow / fast
    assert j is not None
    assert re.fullmatch(r"fa-on 11\d× faster \[\d+, \d+\] differs", _fmt_other_over_base(j, True, "fa-off", "fa-on"))
    assert re.fullmatch(r"fa-on 11\d× faster \[\d+, \d+\] differs", _fmt_other_over_base(
        judge(slow, fast), False, "fa-off", "fa-on"))
