"""Two points' fitted contexts side by side (report.context_fit): values and ratio, never more than the fit says —
a range where the starts fitted differently, a bound where a side sits at the native cap, and a name for a
context that was set rather than fitted."""

from __future__ import annotations

from llamaforge.records import LaunchRecord
from llamaforge.report.context_fit import compare, differs, how_chosen, ratio, side, word
from llamaforge.report.data import Row
from llamaforge.store import Point
from llamaforge.variants.model import parse_cli

NATIVE = 262144


def _row(n_ctx: int | None, starts: list[int | None] | None = None, fit_status: str | None = "fitted",
         failed: tuple[int, ...] = ()) -> Row:
    launches = [LaunchRecord(launch=i + 1, n_ctx=c, status="failed" if i in failed else "ok").to_json()
                for i, c in enumerate(starts or [])]
    extra: dict = {"launches": launches}
    if fit_status is not None:
        extra["fit_status"] = fit_status
    p = Point(run_id="r", build_key="k", engine="server", ncmoe=0, status="ok", n_ctx=n_ctx, detail=extra)
    return Row(ncmoe=0, n_ctx=n_ctx, point=p)


def test_the_h200_flash_attention_fit_reads_as_values_and_ratio():
    on, off = _row(175616, [175616] * 5), _row(69376, [69376] * 5)
    assert compare(on, off, NATIVE) == "175,616 vs 69,376 (2.53×)"
    assert compare(off, on, NATIVE) == "69,376 vs 175,616 (0.40×)"


def test_a_side_at_the_native_cap_makes_the_ratio_a_bound():
    nat, short = _row(NATIVE, [NATIVE] * 5), _row(133120, [133120] * 5)
    assert compare(nat, short, NATIVE) == "native vs 133,120 (≥1.97×)"
    assert compare(short, nat, NATIVE) == "133,120 vs native (≤0.51×)"
    assert compare(nat, _row(NATIVE, [NATIVE] * 3), NATIVE) == "both native"
    assert compare(nat, short, None) == "262,144 vs 133,120 (1.97×)"      # no native known: no bound


def test_starts_that_fitted_differently_show_a_range_not_one_number():
    a = _row(69376, [69376, 70400, 69376])
    assert side(a) == (69376, 70400) and word(side(a), NATIVE) == "69,376–70,400"
    b = _row(175616, [175616] * 3)
    assert compare(b, a, NATIVE) == "175,616 vs 69,376–70,400 (2.49–2.53×)"
    assert differs(a, _row(69376, [69376] * 3))          # same stored n_ctx, but the starts disagreed
    assert ratio((100, 100), (50, 50), NATIVE) == "2.00×"


def test_a_failed_start_and_a_missing_value_do_not_count():
    r = _row(4096, [4096, 9999, None], failed=(1,))
    assert side(r) == (4096, 4096)
    assert side(_row(4096)) == (4096, 4096)                # no launches recorded: the point's own n_ctx
    assert side(_row(None)) is None and compare(_row(None), _row(4096), NATIVE) is None


def test_a_context_that_was_not_fitted_is_named():
    fa = [parse_cli("a=cuda:-fa on"), parse_cli("b=cuda:-fa off")]
    assert how_chosen(fa, [_row(4096), _row(2048)]) is None
    assert how_chosen([parse_cli("c=cuda:-c 8192"), *fa], [_row(8192)]) == "set with -c in a variant, not fitted"
    assert how_chosen(fa, [_row(4096, fit_status="fixed")]) == "context fixed by --ctx"
    assert how_chosen(fa, [_row(4096, fit_status=None)]) == "how the context was chosen is not recorded"
