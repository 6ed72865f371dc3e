"""The package version follows CHANGELOG.md (issue 42, deliverable 6): the changelog has versioned releases,
newest first, and its newest heading is the package's version (``.dev0`` while it is unreleased)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from packaging.version import Version

import llamaforge

ROOT = Path(__file__).resolve().parents[2]
HEADING = re.compile(r"^## (\d+\.\d+\.\d+) — (unreleased|\d{4}-\d{2}-\d{2})(?: \(commit ([0-9a-f]{7,40})\))?$")


def releases(text: str) -> list[tuple[str, str, str | None]]:
    """``(version, date or "unreleased", commit)`` of every ``## `` heading; a heading of another shape fails."""
    out = []
    for line in text.splitlines():
        if line.startswith("## "):
            m = HEADING.match(line)
            assert m, f"a CHANGELOG.md heading that is not '## X.Y.Z — YYYY-MM-DD (commit …)' or '— unreleased': {line!r}"
            out.append(m.groups())
    return out


def expected_version(rels: list[tuple[str, str, str | None]]) -> str:
    newest, date, _ = rels[0]
    return f"{newest}.dev0" if date == "unreleased" else newest


def test_the_changelog_has_versioned_releases_newest_first():
    rels = releases((ROOT / "CHANGELOG.md").read_text(encoding="utf-8"))
    assert len(rels) >= 2, "CHANGELOG.md needs versioned releases, not one unreleased section"
    versions = [Version(v) for v, _, _ in rels]
    assert versions == sorted(versions, reverse=True) and len(set(versions)) == len(versions), versions
    assert all(d != "unreleased" for _, d, _ in rels[1:]), "only the newest version may be unreleased"
    dates = [d for _, d, _ in rels if d != "unreleased"]
    assert dates == sorted(dates, reverse=True), dates
    assert all(c for _, d, c in rels if d != "unreleased"), "a released version names the commit it was"


def test_the_package_version_is_the_newest_changelog_heading():
    rels = releases((ROOT / "CHANGELOG.md").read_text(encoding="utf-8"))
    assert llamaforge.__version__ == expected_version(rels)
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert "version" not in project["project"] and "version" in project["project"]["dynamic"]
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "llamaforge.__version__"}


def test_the_rule_refuses_a_version_that_does_not_follow():
    rels = releases("## 0.4.0 — unreleased\n\n## 0.3.0 — 2026-12-07 (commit abcdef1)\n")
    assert expected_version(rels) == "0.4.0.dev0" != "0.3.0"
    assert expected_version(releases("## 0.4.0 — 2026-12-09 (commit abcdef1)\n")) == "0.4.0"
    try:
        releases("## Unreleased\n")
    except AssertionError:
        pass
    else:
        raise AssertionError("a heading without a version was accepted")
