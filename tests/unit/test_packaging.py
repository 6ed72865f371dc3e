"""Packaging facts the code relies on."""

from __future__ import annotations

import tarfile
import tomllib
from pathlib import Path

from packaging.specifiers import SpecifierSet

PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"


def test_requires_python_excludes_versions_without_tarfile_data_filter() -> None:
    """sources.archives extracts with ``filter='data'`` (path traversal, links, device files);
    the filter exists from 3.11.4 on, so an older 3.11 must not install llamaforge."""
    spec = SpecifierSet(tomllib.loads(PYPROJECT.read_text())["project"]["requires-python"])
    assert "3.11.3" not in spec and "3.11.0" not in spec
    assert "3.11.4" in spec and "3.12.0" in spec
    assert hasattr(tarfile, "data_filter")
