"""A stored comparison (``llamaforge compare``, ``fleet compare``) as text: each side's estimate, the ratio B/A with
its interval and p, the verdict word, and how the verdicts were reached — the same words in the terminal
(:func:`llamaforge.compare.show.print_compare`) and in the report (:mod:`llamaforge.report.kinds.compare`).
Stores made before the judge keep their shape (``median``/``ci_low``/``ratio_ci_low``).
"""

from __future__ import annotations

from ..judge import INCONCLUSIVE
from ..judge.wording import ratio_text
from ..records import CompareSummary


def verdict_word(c: dict | None) -> str:
    """``better`` / ``worse`` (differs, by direction), ``same``, ``inconclusive`` for a stored judgement."""
    if not c:
        return INCONCLUSIVE
    v = c.get("verdict")
    if v == "differs":   # B/A above 1 is better where higher is better (t/s), worse where lower is (ms)
        return "better" if (c["ratio"] > 1) == (c.get("better") != "lower") else "worse"
    return str(v)


def fmt_side(d: dict | None) -> str:
    """A side's stored estimate: ``161.0 [150.2, 172.8] (3×3)``; old stores (median/ci) keep their shape."""
    if not d:
        return "–"
    if "centre" not in d:   # stored before the judge
        n = d.get("shape") or f"n={d.get('n')}"
        return f"{d['median']:.1f} [{d['ci_low']:.1f}, {d['ci_high']:.1f}] ({n})"
    if d.get("modes"):
        return "modes " + " / ".join(f"{m['centre']:.1f} ({m['k']})" for m in d["modes"]) + f" ({d['shape']})"
    if d["kind"] == "ci":
        return f"{d['centre']:.1f} [{d['low']:.1f}, {d['high']:.1f}] ({d['shape']})"
    if d["kind"] == "range":
        return f"{d['centre']:.1f} (range {d['low']:.1f}–{d['high']:.1f}, {d['shape']})"
    return f"{d['centre']:.1f} ({d['shape']}, spread unknown)"


def fmt_cmp(c: dict | None) -> tuple[str, str, str]:
    """(ratio with its interval, p of the verdict or why there is none, verdict word)."""
    if not c:
        return "–", "–", INCONCLUSIVE
    if "verdict" in c and "low" in c:
        if c.get("p_differs") is None:
            lo, hi = c.get("start_range") or (c["low"], c["high"])
            return _ratio(c["ratio"], lo, hi, "starts"), "– (< 3 starts)", verdict_word(c)
        p = c["p_differs"] if c["verdict"] != "same" else c["p_same"]
        return _ratio(c["ratio"], c["low"], c["high"]), f"{p:.3g}", verdict_word(c)
    mark = {"better": "better", "worse": "worse"}.get(c.get("verdict", ""), "same")   # stored before the judge
    return _ratio(c["ratio"], c["ratio_ci_low"], c["ratio_ci_high"]), f"{c['p_value']:.3g}", mark


def _ratio(ratio: float, low: float, high: float, interval: str = "ci") -> str:
    """B/A with its interval, three decimals near 1 (``1.300 [1.280, 1.320]``), ``A 115× faster [80, 162]``
    far from it (:func:`llamaforge.judge.wording.ratio_text`)."""
    return ratio_text(ratio, low, high, interval=interval, decimals=3, unit="")


def adjustment(s: CompareSummary) -> str | None:
    """The adjustment the stored intervals were made at (``Holm, 4 comparisons``), or None: a run stored before
    intervals were kept at Holm's level (or a family of one) shows 95 % intervals."""
    for r in s.comparisons:
        a = (r.get("comparison") or {}).get("adjusted")
        if a:
            return str(a)
    return None


def ci_header(s: CompareSummary) -> str:
    """The ratio column's name: the interval the verdicts used (``B/A [CI: Holm, 4 comparisons]``)."""
    a = adjustment(s)
    return f"B/A [CI: {a}]" if a else "B/A [95 % CI]"


def compare_note(s: CompareSummary) -> str:
    """How a compare run's verdicts were reached, in one paragraph (terminal and report)."""
    e = float(s.min_effect if s.min_effect is not None else 0.05)
    a = adjustment(s)
    ci = (f"with the CI its verdict used ({a}: each at the level Holm's step-down tested it at, wider than 95 %)"
          if a else "with its 95 % CI")
    launches = s.launches
    how = (f"--launches auto: rounds added while a verdict was open, up to {launches.get('max_launches')} starts per "
           "side, each look at α/2" if isinstance(launches, dict) else f"{launches or 'fixed'} server start(s) per side")
    return (f"Judged on server starts (requests of one start are not independent): B/A of the start-level centres "
            f"{ci}; same = the CI lies within ±{e:.0%}, better/worse = it lies outside, inconclusive = it "
            f"spans both; Holm's method over all points and metrics; {how}. With fewer than 3 starts a side, no CI or "
            "p-value: the range of start ratios, and the verdict assumes a between-start spread.")
