"""The README and the docs site stay true: no numbers that go stale, an Architecture page that matches the
code, README links that lead somewhere.

- Test counts and CI times are measured per run and recorded with their commit in STATUS.md; quoted bare in
  the README or a docs page they went stale (issue 24: "the README's Testing section says 268 tests and
  704 s"). A test count may not be quoted there; a CI time only in a sentence that names the commit it was
  measured at (in backticks), with STATUS.md recording that commit with the same time.
- docs/architecture.md names only packages and modules that exist, and every package and top-level
  module of src/llamaforge is on it.
- Every relative link of the README names a file of the repository (and a heading, with an anchor).
  The docs pages' own links are checked by ``mkdocs build --strict`` in CI.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SRC = REPO / "src" / "llamaforge"
PAGES = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
ARCHITECTURE = REPO / "docs" / "architecture.md"

_TEST_COUNT = re.compile(r"\b\d[\d,]*\s+(?:unit\s+|integration\s+|slow\s+)?(?:tests?|passed|failed|skipped|errors?)\b", re.I)
_DURATION = re.compile(r"\b\d[\d,.]*\s?(?:s|sec|seconds?|min|minutes?|h|hours?)\b")
#: a sentence about the whole test run or CI (not "95 % CI", a confidence interval)
_ABOUT_CI = re.compile(r"\.ci/run|scripts/test\.sh|\bCI (?:run|runs|time|times|took|takes)\b|test suite|\bthe suite\b",
                       re.I)


def _sentences(text: str) -> list[str]:
    text = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)   # code blocks are commands, not claims
    blocks = re.split(r"\n\s*\n|\n\s*(?=[-*] |\d+\. |\|)", text)   # paragraphs, list items, table rows
    return [s for b in blocks for s in re.split(r"(?<=[.;!?])\s+(?=[A-Z`(*])", re.sub(r"\s+", " ", b))]


_COMMIT = re.compile(r"`([0-9a-f]{7,40})`")


def _recorded(status: str, sha: str, quote: str) -> bool:
    """Whether STATUS.md has a paragraph or list item that names commit ``sha`` and the time ``quote``."""
    return any(sha in b and quote in re.sub(r"\s+", " ", b) for b in re.split(r"\n\s*\n|\n\s*(?=[-*] )", status))


def stale_numbers(text: str, status: str = "") -> list[str]:
    """The test counts and CI times ``text`` quotes, less the CI times of a sentence that names its commit
    where ``status`` (STATUS.md) records that commit with the same time."""
    out = [m.group(0) for m in _TEST_COUNT.finditer(re.sub(r"\s+", " ", text))]
    for s in _sentences(text):
        if _ABOUT_CI.search(s):
            shas = _COMMIT.findall(s)
            out += [m.group(0) for m in _DURATION.finditer(s)
                    if not any(_recorded(status, sha, m.group(0)) for sha in shas)]
    return out


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(REPO)) for p in PAGES])
def test_no_page_quotes_a_test_count_or_a_ci_time(page):
    found = stale_numbers(page.read_text(encoding="utf-8"), (REPO / "STATUS.md").read_text(encoding="utf-8"))
    assert not found, (f"{page.relative_to(REPO)} quotes {found}: such numbers go stale; record measured CI "
                       "times with their commit in STATUS.md, and quote one only beside that commit")


def test_the_staleness_check_catches_what_the_old_readme_said():
    old = ("Builds are cached. On this 2-core machine `.ci/run` took\n704 s with every llamaforge cache empty "
           "(268 tests) and ≈ 5 min warm.")
    assert stale_numbers(old) == ["268 tests", "704 s", "5 min"]
    assert stale_numbers("a 95 % CI in 10 starts; a cold CPU build takes 223 s; 16 short server starts") == []


def test_a_ci_time_passes_only_beside_the_commit_status_records_it_for():
    status = "## Session\n\n- Clean-clone `.ci/run` of `abc1234`: rc 0, 17.6 min.\n- Of `def5678`: 41 min.\n"
    assert stale_numbers("The CI run at `abc1234` took 17.6 min.", status) == []
    assert stale_numbers("The CI run at `def5678` took 17.6 min.", status) == ["17.6 min"]   # another commit's
    assert stale_numbers("The CI run at `abc1234` took 16 min.", status) == ["16 min"]        # not what was measured
    assert stale_numbers("The CI run took 17.6 min.", status) == ["17.6 min"]                 # no commit named


def test_every_commit_a_page_quotes_a_ci_time_for_is_in_this_repository():
    import subprocess

    if not (REPO / ".git").exists():
        pytest.skip("not a git checkout")
    for page in PAGES:
        for s in _sentences(page.read_text(encoding="utf-8")):
            if _ABOUT_CI.search(s) and _DURATION.search(s):
                for sha in _COMMIT.findall(s):
                    r = subprocess.run(["git", "-C", str(REPO), "cat-file", "-e", f"{sha}^{{commit}}"],
                                       capture_output=True, timeout=30)
                    assert r.returncode == 0, f"{page.relative_to(REPO)} quotes a CI time of {sha}, not a commit here"


# -- the Architecture page ---------------------------------------------------------------------------

_PATHLIKE = re.compile(r"^[\w.]+(?:/[\w.]+)*(?:\.py|/)$")


def _named(page: Path) -> set[str]:
    return {s for s in re.findall(r"`([^`\s]+)`", page.read_text(encoding="utf-8")) if _PATHLIKE.match(s)}


def _exists(name: str) -> bool:
    if "/" not in name.rstrip("/"):   # a bare module name in a package's paragraph: somewhere under src
        return (REPO / name).exists() or (SRC / name).exists() or any(SRC.rglob(name))
    return (SRC / name).exists() or (REPO / name).exists()


def test_the_architecture_page_names_only_modules_that_exist():
    missing = sorted(n for n in _named(ARCHITECTURE) if not _exists(n))
    assert not missing, f"docs/architecture.md names {missing}, which src/llamaforge does not have: update the page"


def test_every_package_and_top_level_module_is_on_the_architecture_page():
    named = _named(ARCHITECTURE)
    packages = {f"{p.parent.relative_to(SRC).as_posix()}/" for p in SRC.rglob("__init__.py") if p.parent != SRC}
    modules = {p.name for p in SRC.glob("*.py") if p.name != "__init__.py"}
    absent = sorted((packages | modules) - named)
    assert not absent, f"docs/architecture.md does not describe {absent}: add them to the module map"


def foundations_on_page(text: str) -> set[str]:
    """The modules the page's **Foundations** layer names (``errors.py`` → ``errors``)."""
    m = re.search(r"^1\. \*\*Foundations\*\*(.*?)(?=^\d+\. \*\*)", text, re.M | re.S)
    return {n.removesuffix(".py") for n in re.findall(r"`([\w]+\.py)`", m.group(1))} if m else set()


def test_the_foundations_layer_on_the_page_is_the_one_the_architecture_test_enforces():
    from test_architecture import FOUNDATIONS

    on_page = foundations_on_page(ARCHITECTURE.read_text(encoding="utf-8"))
    assert on_page == FOUNDATIONS, (f"docs/architecture.md's Foundations layer lacks {sorted(FOUNDATIONS - on_page)} "
                                    f"and has {sorted(on_page - FOUNDATIONS)} beyond test_architecture.FOUNDATIONS")
    assert foundations_on_page("1. **Foundations** — `a.py`, `b.py`\n2. **Floor** — `c.py`\n") == {"a", "b"}


def test_the_architecture_check_sees_a_missing_module(tmp_path):
    page = tmp_path / "architecture.md"
    page.write_text("| `bench/sweep.py` | the sweep |\n| `bench/nowhere.py` | gone |\n| `nothing/` | gone |\n")
    assert sorted(n for n in _named(page) if not _exists(n)) == ["bench/nowhere.py", "nothing/"]


# -- README links ------------------------------------------------------------------------------------

_LINK = re.compile(r"\]\(([^)\s]+)\)")


def _slug(heading: str) -> str:
    """GitHub's anchor of a heading (its ``{#id}`` when it names one)."""
    m = re.search(r"\{#([\w-]+)\}\s*$", heading)
    if m:
        return m.group(1)
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    text = re.sub(r"^```.*?^```", "", page.read_text(encoding="utf-8"), flags=re.S | re.M)
    return {_slug(h) for h in re.findall(r"^#{1,6}\s+(.+)$", text, re.M)}


def test_every_relative_link_of_the_readme_leads_somewhere():
    readme = REPO / "README.md"
    bad = []
    for link in _LINK.findall(readme.read_text(encoding="utf-8")):
        if re.match(r"^[a-z]+:", link):
            continue
        path, _, anchor = link.partition("#")
        target = (REPO / path) if path else readme
        if not target.exists():
            bad.append(f"{link}: no such file")
        elif anchor and target.suffix == ".md" and anchor not in _anchors(target):
            bad.append(f"{link}: no heading #{anchor} there")
    assert not bad, bad
