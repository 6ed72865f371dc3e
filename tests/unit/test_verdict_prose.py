"""Every sentence from a verdict (issue 41): report prose is worded by the class of the judge's verdict behind it —
differs / same within ±E / not proven either way — and an inconclusive verdict never reads as "no regression", "no
step", "holds" or "tie".

(a) Reports rendered from crafted stores whose verdicts are all inconclusive hold none of the strong phrases.
(b) An architecture scan: no renderer writes a strong phrase in a string of its own; they come only from
    :mod:`llamaforge.findings.prose`, which words each by a verdict's class.
"""

from __future__ import annotations

import ast
import math
import re
from pathlib import Path

import pytest

from llamaforge.findings import prose
from llamaforge.history.markdown import render
from llamaforge.history.model import History, Level, Series, SeriesKey
from llamaforge.records import LaunchRecord
from llamaforge.report import write_report
from llamaforge.report.data import load
from llamaforge.report.matrix import build_matrix, matrix_section
from llamaforge.store import Point, Sample
from llamaforge.variants.model import parse_cli

SRC = Path(__file__).resolve().parents[2] / "src" / "llamaforge"
REPO = SRC.parents[1]
#: claims stronger than an inconclusive verdict (and, bare, than any verdict)
STRONG = re.compile(r"no regression|\bno step\b|\bholds?\b|\bties?\b|\btied\b|in every session|no change|"
                    r"faster at all|no difference|at every offload", re.I)
#: the renderers: everything that writes report, history or command prose from stored verdicts
RENDERERS = [*SRC.glob("report/**/*.py"), *SRC.glob("findings/*.py"), SRC / "history" / "markdown.py",
             SRC / "history" / "show.py", SRC / "history" / "site.py", SRC / "compare" / "show.py",
             SRC / "reproduce" / "show.py", *SRC.glob("commands/*.py")]
WORDING = SRC / "findings" / "prose.py"
#: strings that contain a listed word in another sense (not a claim about two sides)
NOT_CLAIMS = {"tie",   # report/adaptive.py: the stored value of a region without a winner, compared, never printed
              "give llama.cpp's models/ folder (it holds ggml-vocab-*.gguf), or leave --vocab-dir out",
              "tied: no output.weight, the token embedding is the output projection (read whole for every token)"}
#: a strong phrase allowed where it says the verdict's class outright
QUALIFIED = re.compile(r"never (?:counted as )?a tie|not proven either way: no step found|"
                       r"makes no difference|no step found, and one beyond|same within ±[\d.]+ %: no step", re.I)

KEY = "0c1e57098-cpu-aaaaaaaaaa"


def _strong(text: str) -> list[str]:
    """The strong phrases in ``text`` that no qualifier around them turns into a verdict's own words."""
    found = []
    for m in STRONG.finditer(text):
        around = text[max(0, m.start() - 40): m.end() + 40]
        if not QUALIFIED.search(around):
            found.append(around.replace("\n", " "))
    return found


# ------------------------------------------------------------------------------------------------------ (a)


def _point(run: str, name: str, ncmoe: int, tg: float, spread: float) -> Point:
    """Three starts at tg × (1 − spread, 1, 1 + spread): a known ratio and interval, no randomness."""
    p = Point(run_id=run, build_key=KEY, engine="server", ncmoe=ncmoe, label=name, status="ok", n_ctx=4096,
              n_ctx_train=8192, detail={"fit_status": "fitted",
                                       "launches": [LaunchRecord(launch=i + 1, n_ctx=4096).to_json() for i in range(3)]})
    for launch, f in enumerate((1 - spread, 1.0, 1 + spread), start=1):
        p.samples += [Sample(idx=i, warmup=False, tg_tps=tg * f, pp_tps=10 * tg * f, launch=launch) for i in range(2)]
    return p


@pytest.fixture
def open_run(store):
    """Two variants 8 % apart with a 5 % spread between starts at every point: every verdict is inconclusive."""
    specs = ["a=cpu:-fa off", "b=cpu:-fa on"]
    records = [{**parse_cli(s).to_dict(), "build": KEY} for s in specs]
    run_id = store.new_run("sweep", {"builds": [KEY], "backends": ["cpu"], "variants": records,
                                     "points": [{"ncmoe": n, "ngl": -1} for n in (0, 2, 4)],
                                     "model": {"ref": "m.gguf", "facts": {"n_layers": 8}}})
    store.add_build({"key": KEY, "backend": "cpu", "pin": "default", "commit": "0c1e57098"}, run_id)
    for n in (0, 2, 4):
        store.record_point(_point(run_id, "a", n, 100.0, 0.05))
        store.record_point(_point(run_id, "b", n, 108.0, 0.05))
    return run_id


def test_the_crafted_run_is_inconclusive_everywhere(store, open_run):
    m = build_matrix(load(store, open_run), 0.05)
    assert m is not None and {j.verdict for j in m.verdicts.values()} == {"inconclusive"}


def test_a_report_of_inconclusive_verdicts_claims_nothing_stronger(store, open_run, tmp_path):
    md = write_report(store, open_run, tmp_path / "rep").md.read_text()
    assert not _strong(md), _strong(md)
    assert "not proven either way" in md
    assert "b generates faster than a" not in md and "a generates faster than b" not in md
    assert "no point judged faster" in md


def test_an_inconclusive_pair_is_neither_a_tie_nor_a_first_place(store, open_run):
    sec = matrix_section(load(store, open_run))
    h2h = next(t for t in sec.tables if t.title == "Head-to-head")
    assert h2h.data[0]["tg"] == {"wins": 0, "same": 0, "losses": 0, "not_proven": 3}
    places = next(t for t in sec.tables if t.title == "Placements")
    assert all("1st" not in cell and "unranked (not proven) ×3" in cell for r in places.rows for cell in r[1:])
    knob = next(t for t in sec.tables if t.title == "Per-knob effects").rows[0]
    # three inconclusive points: never pooled into one effect, each stands alone
    assert knob[4].count("not proven either way at ncmoe") == 3, knob[4]


def test_the_interval_beside_a_matrix_verdict_is_the_one_it_used(store, open_run):
    m = build_matrix(load(store, open_run), 0.05)
    for j in m.verdicts.values():
        assert j.adjusted == f"Holm, {len(m.verdicts)} comparisons"
        assert j.low < 1.05 < j.high or j.low < 1 / 1.05 < j.high    # reaches the band: inconclusive
    note = next(t for t in matrix_section(load(store, open_run)).tables if t.title == "Head-to-head per point").note
    assert f"Holm, {len(m.verdicts)} comparisons" in note


def _level(i: int, tg: float, spread: float) -> Level:
    sha = f"{i:040x}"
    return Level(sha=sha, order=i, label=sha[:9], subject=f"commit {i}",
                 starts=[[tg * f] * 3 for f in (1 - spread, 1.0, 1 + spread)])


def test_a_history_never_says_no_step_for_an_inconclusive_neighbour():
    key = SeriesKey("box", "cpu", "m", "ncmoe=0", "tg", "llama-bench tg32 r3")
    s = Series(key, [_level(0, 100.0, 0.06), _level(1, 94.0, 0.06), _level(2, 100.0, 0.001),
                     _level(3, 100.2, 0.001)])
    md = render(History([s], generated=0.0), "t")
    assert "- no step" not in md and not _strong(md.replace("→ 000000000", "")), _strong(md)
    lines = [ln for ln in md.splitlines() if ln.startswith("- 0")]
    assert len(lines) == 3
    assert "0.94×" in lines[0] and "not proven either way: no step found, and one beyond ±5 % is not ruled out" in lines[0]
    assert "same within ±5 %: no step" in lines[2]      # a verdict "same" may say "no step", with its margin
    assert "Holm, 3 comparisons" in lines[0]


@pytest.mark.parametrize(("verdict", "words"), [("differs", "differs"), ("same", "same within ±5 %"),
                                                ("inconclusive", "not proven either way"),
                                                (None, "not proven either way")])
def test_each_class_has_its_own_words(verdict, words):
    assert prose.class_words(verdict, 0.05) == words


def test_counts_say_each_class():
    got = prose.counts(["differs"] * 13 + ["same", "inconclusive"], 0.05, differs="CUDA faster")
    assert got == "CUDA faster at 13 of 15 points, same within ±5 % at 1, not proven either way at 1"
    assert prose.in_sessions(3, 4, judged=True) == "judged at every point in 3 of 4 sessions, not in every session"


# ------------------------------------------------------------------------------------------------------ (b)


def _docstrings(tree: ast.AST) -> set[int]:
    out = set()
    for n in ast.walk(tree):
        body = getattr(n, "body", None)
        if isinstance(n, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and body and \
                isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
            out.add(id(body[0].value))
    return out


def strong_literals(path: Path) -> list[str]:
    """Every string of ``path`` (its docstrings and comments aside) that writes a strong claim by itself."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    docs = _docstrings(tree)
    return [f"{path.relative_to(SRC)}:{n.lineno}: {n.value[:90]!r}" for n in ast.walk(tree)
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docs
            and n.value not in NOT_CLAIMS and _strong(n.value)]


def test_the_scan_sees_a_hard_coded_claim(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text('"""A doc may say no regression."""\n'
                   'def f(j):\n    return "no regression" if j.verdict != "differs" else "worse"\n'
                   'def g(k):\n    return f"holds in every session ({k})"\n')
    ok = tmp_path / "ok.py"
    ok.write_text('def f(j):\n    return "differs" if j.verdict == "differs" else "never a tie"\n')
    assert len(strong_literals_at(bad)) == 2 and strong_literals_at(ok) == []


def strong_literals_at(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docs = _docstrings(tree)
    return [n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)
            and id(n) not in docs and _strong(n.value)]


def test_report_prose_comes_only_from_the_verdict_wording():
    assert WORDING in RENDERERS and len(RENDERERS) > 30
    found = [x for p in sorted(set(RENDERERS)) if p != WORDING for x in strong_literals(p)]
    assert not found, "strong claims written outside findings/prose.py (word them by the verdict's class there): " \
        + "; ".join(found)


def test_the_ci_example_and_the_docs_never_call_an_open_verdict_no_regression():
    script = (REPO / "examples" / "github-actions" / "regression.sh").read_text()
    assert "no regression" not in script and "exit 4" in script and "not proven either way: add starts" in script
    fleet = (REPO / "docs" / "fleet.md").read_text()
    assert "not proven either way: add starts" in fleet and "exit 4" in fleet
    for doc in [*(REPO / "docs").glob("*.md"), REPO / "README.md"]:
        text = doc.read_text(encoding="utf-8")
        for bad in ("at every offload in every session", "inconclusive counts as a tie", "holds in every session",
                    "no difference at ncmoe"):
            assert bad not in text, f"{doc.name}: {bad!r}"


def test_the_inconclusive_fraction_of_a_family_is_not_hidden():
    """The arithmetic the sentences rest on: a class count always adds up to the family."""
    vs = ["differs", "inconclusive", "same", None]
    got = prose.counts(vs, 0.1)
    nums = [int(x) for x in re.findall(r"at (\d+)", got)]
    assert sum(nums) == len(vs) and math.isclose(nums[0], 1)


# ------------------------------------------------------------------------------------------- the bisect report


def test_a_bisect_series_has_one_name():
    from llamaforge.report.data import _series_names

    keys = [("dd7063675-cpu-0", "llama-bench", "dd7063675"), ("0c1e57098-cpu-0", "llama-bench", "0c1e57098")]
    by_key = {k[0]: {"pin": k[2], "commit": k[2] + "aaaa"} for k in keys}
    names = _series_names(keys, {}, set(), by_key, lambda key: "cpu")
    assert names == ["CPU dd7063675", "CPU 0c1e57098"]


def test_the_bisect_endpoints_say_their_k_by_r_and_which_the_verdict_used():
    from llamaforge.records import BisectSummary
    from llamaforge.report.kinds.bisect import _endpoints

    est = {"centre": 678.4, "shape": "4×3"}
    s = BisectSummary(endpoints={"a": est, "b": {"centre": 520.0, "shape": "4×3"}, "ratio": 0.77, "low": 0.74,
                                 "high": 0.80, "verdict": "differs", "min_effect": 0.05})
    rows = [{"verdict": "endpoint-good", "median": 661.7, "values": [], "estimate": {"shape": "12×3"}},
            {"verdict": "endpoint-bad", "median": 519.0, "values": [], "estimate": {"shape": "11×3"}}]
    text = " ".join(_endpoints(s, rows))
    assert "good 678.4 t/s (4×3)" in text and "used these 4×3 and 4×3 starts" in text
    assert "good 661.7 t/s (12×3)" in text and "never against these totals" in text
