"""An infeasible combination (``-sm row`` on a device without split buffers) is explained, not counted as a
failure (issue 43, deliverable 2): the run summary, the report's header and its failed-points section count
it apart."""

from __future__ import annotations

from llamaforge.bench.summary import run_summary
from llamaforge.findings.labels import INFEASIBLE, is_infeasible
from llamaforge.report.data import Row, Series, failed_count
from llamaforge.store import Point, Sample, Store


def test_rows_count_an_infeasible_point_apart():
    rows = [Row(0), Row(1, ok=False, failure_class="oom"), Row(2, ok=False, failure_class=INFEASIBLE)]
    assert failed_count(rows) == "1 failed, 1 infeasible"
    assert failed_count(rows[:2]) == "1 failed"
    s = Series(key=("k", "server", ""), name="CPU", backend="cpu", build=None, rows=rows)
    assert [r.ncmoe for r in s.failed_rows] == [1] and [r.ncmoe for r in s.infeasible_rows] == [2]
    assert is_infeasible("failed", INFEASIBLE) and not is_infeasible("ok", INFEASIBLE)


def test_the_run_summary_does_not_call_it_a_failure(tmp_path):
    with Store(tmp_path / "s.sqlite") as st:
        run = st.new_run("bench", {})
        st.record_point(Point(run, "k", "server", 0, samples=[Sample(1, False, tg_tps=10.0)]))
        st.record_point(Point(run, "k", "server", 1, status="failed", failure_class=INFEASIBLE,
                              failure_detail="-sm row is infeasible here"))
        st.record_point(Point(run, "k", "server", 2, status="failed", failure_class="oom"))
        summ = run_summary(st, run)
    assert (summ.points, summ.ok, summ.failed) == (3, 1, 1)
    assert summ.failures == {INFEASIBLE: 1, "oom": 1}
