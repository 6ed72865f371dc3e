"""What a report is made of, before it is rendered: sections of tables (rows as text for the reader,
``data`` as numbers for tests and machines), plots and notes. Markdown and HTML render these."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class Table:
    columns: list[str]
    rows: list[list[str]] = field(default_factory=list)
    data: list[dict] = field(default_factory=list)
    title: str = ""
    note: str = ""
    code_cols: tuple[int, ...] = ()      # columns rendered as code (commands)


@dataclass
class Section:
    id: str
    title: str
    intro: str = ""
    tables: list[Table] = field(default_factory=list)
    plots: list[Any] = field(default_factory=list)   # plots.Plot
    absent: str | None = None
    notes: list[str] = field(default_factory=list)
