"""What a report says about points with one or two server starts, read as a user reads it.

Found re-rendering the committed H200 reports with the judge (issue 23):

* the note under the headline listed "the spread measured for Vulkan (11 %)" and "… for Vulkan (6 %)"
  side by side — one is generation, the other prompt processing, and the note did not say which; with no
  spread measured it said "for this build" in a table of two builds;
* a ratio between two one-start points printed "(starts 1.86–1.86)", which reads as several starts that
  agree exactly;
* the headline's "every start faster at 24" counted one-start points, where one start each always
  "separates".
"""

from __future__ import annotations

import re

import run_fake

from llamaforge.report import write_report


def _report_md(tmp_path, *, launches: int) -> str:
    """The Markdown report of a fake two-backend run measured with ``launches`` starts per point."""
    store, run_id = run_fake.build(tmp_path, launches=launches)
    try:
        return write_report(store, run_id, tmp_path / "out").md.read_text()
    finally:
        store.close()


def _headline(md: str) -> str:
    return md[md.index("## Headline"):md.index("## Summary")]


def test_the_assumed_spreads_name_their_series_and_metric(tmp_path):
    head = _headline(_report_md(tmp_path, launches=2))
    note = next(line for line in head.splitlines() if line.startswith("_\\* "))
    for who in ("Vulkan generation t/s", "Vulkan prompt t/s", "CPU generation t/s", "CPU prompt t/s"):
        assert f"measured for {who} on this machine" in note, note


def test_with_no_spread_measured_the_note_names_the_series_not_this_build(tmp_path):
    md = _report_md(tmp_path, launches=1)
    assert "for this build" not in md
    assert "no between-start spread measured for Vulkan generation t/s (assumed at most 25%" in md
    # the assumed bound is not a measured spread: no "starts of one point vary by 25 %" note
    assert "vary by 25%" not in _headline(md)


def test_a_ratio_of_one_start_each_shows_no_range(tmp_path):
    md = _report_md(tmp_path, launches=1)
    ratios = md[md.index("### Ratios"):md.index("## Sweet spots")]
    assert "(1 start each)" in ratios and "1×5 / 1×5" in ratios
    assert not re.search(r"starts (\d\.\d\d)–\1\b", md), "a one-start 'range' x–x is printed"


def test_one_start_points_do_not_count_as_every_start_faster(tmp_path):
    head = _headline(_report_md(tmp_path, launches=1))
    assert "faster than" in head and "every start" not in head


def test_two_start_points_still_say_every_start_faster(tmp_path):
    head = _headline(_report_md(tmp_path, launches=2))
    assert re.search(r"every start faster at \d+ \|", head), head
