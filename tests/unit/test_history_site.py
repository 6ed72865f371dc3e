"""``history.publish``: the static site from a synthetic history (pages, refusal of a foreign folder,
republish, ``history.json`` round trip, hostile text) and the same site in a real headless Chromium (no
console message, every start dot drawn, the culprit link present)."""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

import pytest
from test_architecture import import_graph, measuring_loaded_by

from chromium_render import CHROMIUM, load_in_chromium, trace_points
from llamaforge.errors import ConfigError
from llamaforge.history.model import History, Level, RatioRow, RatioSeries, Series, SeriesKey, Step
from llamaforge.history.site import MARKER, page_json, publish, safe_url

HOSTILE = "</script><img src=x onerror=alert(1)>"
EVIL_URL = "javascript:alert(1)"
CULPRIT_URL = "https://github.com/ggml-org/llama.cpp/commit/" + "c" * 40
T0 = 1_735_689_600.0          # 2025-01-01 UTC


def _starts(rng: random.Random, centre: float, k: int, r: int = 3) -> list[list[float]]:
    out = []
    for _ in range(k):
        c = centre * (1 + rng.gauss(0, 0.015))
        out.append([round(c * (1 + rng.gauss(0, 0.005)), 3) for _ in range(r)])
    return out


def _levels(rng: random.Random, centres: list[float | None], ks: list[int], *, hostile_at: int | None = None
            ) -> list[Level]:
    levels = []
    for i, (c, k) in enumerate(zip(centres, ks, strict=True)):
        sha = f"{i:02d}" + f"{rng.getrandbits(152):038x}"
        lv = Level(sha, 8000 + 3 * i, label=f"b{4400 + 3 * i}", subject=f"ggml : tweak kernel {i}", date=T0 + i * 86400,
                   url=f"https://github.com/ggml-org/llama.cpp/commit/{sha}", starts=_starts(rng, c, k) if c else [])
        if c is None:
            lv.status, lv.note = "build-failed", "cmake: error in ggml-cuda.cu"
        if i == hostile_at:
            lv.subject, lv.url, lv.label = HOSTILE, EVIL_URL, "<b>x</b>"
        levels.append(lv)
    return levels


def make_history() -> History:
    """Two backends × tg, one pp series: 6–9 commits, 3–5 starts (one commit with 2, one with 1), a build
    failure, a located step (culprit link), an unlocated one, a hostile subject and a javascript: URL."""
    rng = random.Random(26)
    key = SeriesKey("h200", "cuda", "qwen3-30b-a3b-q4", "ncmoe=0", "tg", "llama-bench tg32 r3")
    cuda = Series(key, _levels(rng, [160, 161, 159, 160, 138, 137, 139, 138], [3, 4, 5, 3, 3, 4, 2, 1],
                               hostile_at=2))
    a, b = cuda.levels[3], cuda.levels[4]
    cuda.steps = [Step(a.sha, b.sha, 0.862, 0.83, 0.895, 1e-5, 3e-4, 15, 10, (cuda.levels[0].sha, a.sha),
                       (b.sha, cuda.levels[7].sha), 4, "Holm over 7 positions", "c" * 40, HOSTILE, CULPRIT_URL,
                       "bisect-7", "located", "3 commits measured")]
    vk_key = SeriesKey("h200", "vulkan", "qwen3-30b-a3b-q4", "ncmoe=0", "tg", "llama-bench tg32 r3")
    vulkan = Series(vk_key, _levels(rng, [100, 101, 100, None, 112, 113], [3, 3, 4, 0, 5, 3]))
    c, d = vulkan.levels[2], vulkan.levels[4]
    vulkan.steps = [Step(c.sha, d.sha, 1.12, 1.08, 1.16, 1e-4, 2e-3, 10, 8, culprit_url=EVIL_URL,
                         bisect_status="not located", bisect_note=HOSTILE)]
    pp = Series(SeriesKey("h200", "cuda", "qwen3-30b-a3b-q4", "ngl=99", "pp"),
                _levels(rng, [2500, 2510, 2490, 2505, 2500, 2495, 2502], [3, 3, 3, 4, 3, 3, 3]))
    rows = [RatioRow(lv.sha, lv.label, 0.62 + 0.03 * i, 0.6 + 0.03 * i, 0.64 + 0.03 * i, "differs", 3, 3)
            for i, lv in enumerate(cuda.levels[:6])]
    ratio = RatioSeries(key, vk_key, rows, f"the vulkan/cuda ratio went from 0.62× to 0.77× {HOSTILE}")
    return History([cuda, vulkan, pp], [ratio], T0 + 10 * 86400, [f"note: {HOSTILE}"])


def n_starts(s: Series) -> int:
    return sum(len(lv.starts) for lv in s.measured())


def test_publish_writes_every_page_and_the_data(tmp_path):
    h = make_history()
    res = publish(h, tmp_path / "site")
    out = tmp_path / "site"
    assert res.out == out and res.n_series == 3
    names = sorted(p.relative_to(out).as_posix() for p in res.pages)
    assert names == sorted(["index.html", "ratios.html", *(f"series/{s.key.slug}.html" for s in h.series)])
    assert all(p.is_file() for p in res.pages)
    assert (out / MARKER).is_file() and (out / "assets" / "site.js").is_file()
    js = (out / "assets" / "plotly.min.js").read_text(encoding="utf-8")
    assert len(js) > 1_000_000 and "plotly.js" in js[:200]
    for p in res.pages:
        text = p.read_text(encoding="utf-8")
        assert "cdn" not in text.lower() and "//cdn" not in text
        root = "../" if p.parent.name == "series" else ""
        assert f'<script src="{root}assets/plotly.min.js"></script>' in text
    index = (out / "index.html").read_text(encoding="utf-8")
    for s in h.series:
        assert f'href="series/{s.key.slug}.html"' in index
    assert 'href="ratios.html"' in index and "−14 %" in index and "[−17, −10]" in index
    assert f'<a href="{CULPRIT_URL}">' in index


def test_history_json_round_trips(tmp_path):
    h = make_history()
    publish(h, tmp_path / "site")
    back = History.from_dict(json.loads((tmp_path / "site" / "history.json").read_text(encoding="utf-8")))
    assert back == h and back.to_dict() == h.to_dict()


def test_a_non_empty_folder_that_is_not_a_site_is_refused_and_nothing_is_written(tmp_path):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "thesis.tex").write_text("precious")
    with pytest.raises(ConfigError) as e:
        publish(make_history(), out)
    assert "\n" not in str(e.value) and "not a history site" in e.value.message and e.value.fix
    assert sorted(p.name for p in out.iterdir()) == ["thesis.tex"]
    (tmp_path / "file").write_text("x")
    with pytest.raises(ConfigError, match="is a file"):
        publish(make_history(), tmp_path / "file")
    empty = tmp_path / "empty"
    empty.mkdir()
    assert publish(make_history(), empty).n_series == 3


def test_republish_replaces_pages_and_removes_stale_series_pages(tmp_path):
    h = make_history()
    out = tmp_path / "site"
    publish(h, out)
    gone = out / "series" / f"{h.series[2].key.slug}.html"
    assert gone.is_file()
    (out / "series" / "old-series.html").write_text("stale")
    h.series = h.series[:2]
    h.series[0].levels[0].subject = "a new subject for the republish"
    res = publish(h, out)
    assert res.n_series == 2 and not gone.exists() and not (out / "series" / "old-series.html").exists()
    assert sorted(p.name for p in (out / "series").iterdir()) == sorted(f"{s.key.slug}.html" for s in h.series)
    assert "a new subject for the republish" in (out / "series" / f"{h.series[0].key.slug}.html").read_text()
    assert History.from_dict(json.loads((out / "history.json").read_text())).series == h.series


def test_hostile_text_is_escaped_and_a_javascript_url_never_linked(tmp_path):
    res = publish(make_history(), tmp_path / "site")
    for p in res.pages:
        text = p.read_text(encoding="utf-8")
        assert "<img" not in text and "<b>x</b>" not in text, p.name
        assert "javascript:" not in text.lower(), p.name
        data = re.search(r'<script type="application/json" id="page-data">(.*?)</script>', text, re.S)
        assert data and "<" not in data.group(1)
        json.loads(data.group(1))
    series = (tmp_path / "site" / "series" / f"{make_history().series[0].key.slug}.html").read_text()
    assert "&lt;/script&gt;&lt;img src=x onerror=alert(1)&gt;" in series      # the table shows it, inert
    assert f'<a href="{CULPRIT_URL}"><code>ccccccccc</code></a>' in series


def test_only_http_urls_are_links_and_page_json_cannot_close_its_script():
    assert safe_url("https://github.com/x/y/commit/ab") and safe_url("http://gitea.local/a")
    for bad in (EVIL_URL, "JavaScript:alert(1)", " javascript:x", "data:text/html,<b>", "//evil.example/x",
                "https://", "https://a.b/x\"onmouseover=1", "ftp://a.b/c", None, 3):
        assert safe_url(bad) is None, bad
    text = str(page_json({"s": HOSTILE, "x": float("nan"), "c": "<!-- & -->"}))
    assert "</" not in text and "<!--" not in text and "<" not in text
    assert json.loads(text) == {"s": HOSTILE, "x": None, "c": "<!-- & -->"}


def test_an_empty_history_and_a_series_with_no_measured_commit_still_publish(tmp_path):
    assert publish(History(), tmp_path / "empty").n_series == 0
    assert "No series yet" in (tmp_path / "empty" / "index.html").read_text()
    failed = Series(SeriesKey("m", "cpu", "tiny", "ngl=0", "tg"),
                    [Level("a" * 40, 1, status="build-failed", note="no compiler"), Level("b" * 40, 2, starts=[[0.0]])])
    odd = Series(SeriesKey("m", "cpu", "tiny", "ngl=0", "host"), _levels(random.Random(1), [900, 910], [3, 2]))
    for lv in odd.levels:                                   # memory: one value per start
        lv.starts = [[s[0]] for s in lv.starts]
    res = publish(History([failed, odd]), tmp_path / "odd")
    page = (tmp_path / "odd" / "series" / f"{failed.key.slug}.html").read_text()
    assert "build-failed: no compiler" in page and "no data" in page
    assert res.n_series == 2 and len(res.pages) == 4
    host = (tmp_path / "odd" / "series" / f"{odd.key.slug}.html").read_text()
    assert "peak host memory" in host and "lower is better" in host and "range of 2 starts" in host


def test_the_site_is_pure_it_loads_no_measuring_module():
    """The site reads the model and asks the judge; it never loads bench, builds, bisect, sources, fleet,
    commands (or any module that measures), even through a function-local or ``TYPE_CHECKING`` import."""
    found = measuring_loaded_by(import_graph(type_checking=True), ("history.site", "history.model"))
    assert not found, "; ".join(found)


# -- the site in a real headless Chromium -----------------------------------------------------------

chromium = pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="chromium is not installed")


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> tuple[History, Path]:
    h = make_history()
    out = tmp_path_factory.mktemp("history-site") / "site"
    publish(h, out)
    return h, out


@chromium
def test_the_console_capture_sees_an_error_and_a_throw(tmp_path):
    """The check below cannot pass vacuously: a console.error and an uncaught exception are both seen."""
    page = tmp_path / "bad.html"
    page.write_text("<!DOCTYPE html><html><body><p>x</p><script>console.error('deliberate-error');</script>"
                    "<script>throw new Error('deliberate-throw');</script></body></html>")
    loaded = load_in_chromium(page, tmp_path / "profile")
    assert any("deliberate-error" in c for c in loaded.console), loaded.log[-2000:]
    assert any("Uncaught Error: deliberate-throw" in c for c in loaded.console), loaded.log[-2000:]
    out = tmp_path / "site"                              # a site whose plotly.js went missing says so
    publish(make_history(), out)
    (out / "assets" / "plotly.min.js").unlink()
    broken = load_in_chromium(out / "ratios.html", tmp_path / "profile")
    assert any("plotly.js did not load" in c for c in broken.console), broken.console


@chromium
def test_the_series_page_draws_every_start_and_links_the_culprit(site, tmp_path):
    h, out = site
    doms = {}
    for s in h.series[:2]:                          # a located step (cuda); a build failure (vulkan)
        loaded = load_in_chromium(out / "series" / f"{s.key.slug}.html", tmp_path / "profile")
        doms[s.key] = loaded.dom
        assert loaded.console == [], loaded.console
        assert 'class="main-svg"' in loaded.dom
        assert trace_points(loaded.dom, "starts") == n_starts(s) > 0
        assert trace_points(loaded.dom, "median") == len(s.measured())
        assert "<img" not in loaded.dom and "javascript:" not in loaded.dom
    cuda = doms[h.series[0].key]
    assert f'<a href="{CULPRIT_URL}"><code>ccccccccc</code></a>' in cuda
    assert "−14 % [−17, −10]" in cuda                                         # the step's mark on the plot


@chromium
def test_the_index_and_the_ratio_page_render_without_console_messages(site, tmp_path):
    h, out = site
    index = load_in_chromium(out / "index.html", tmp_path / "profile")
    assert index.console == [], index.console
    assert index.dom.count('class="main-svg"') >= len(h.series)                # a sparkline per series
    assert f'<a href="{CULPRIT_URL}">' in index.dom
    ratios = load_in_chromium(out / "ratios.html", tmp_path / "profile")
    assert ratios.console == [], ratios.console
    assert trace_points(ratios.dom, "ratio") == len(h.ratios[0].rows)
    assert "<img" not in index.dom + ratios.dom


def test_a_steps_confirmation_is_said_on_the_site_and_an_unconfirmed_one_names_no_commit():
    from llamaforge.history.site import _step_view

    rng = random.Random(41)
    s = Series(SeriesKey("m", "cpu", "tiny", "ncmoe=0", "tg", "server"), _levels(rng, [100, 100, 80, 80], [3] * 4))
    a, b = s.levels[1], s.levels[2]
    line = "tg −20 % [−24, −16] against its parent, 5+5 fresh starts interleaved (ABBA)"
    confirmed = Step(a.sha, b.sha, 0.8, 0.76, 0.84, 1e-5, 1e-4, 6, 6, culprit=b.sha,
                     confirmation={"status": "confirmed", "line": line})
    view = _step_view(confirmed, s, {})
    assert view["culprit"] == b.sha and f"confirmed: {line}" in view["bisect_status"]
    unconfirmed = Step(a.sha, b.sha, 0.8, 0.76, 0.84, 1e-5, 1e-4, 6, 6)       # adjacent, never re-measured
    view = _step_view(unconfirmed, s, {})
    assert view["culprit"] is None and view["bisect_status"].startswith("unconfirmed")
