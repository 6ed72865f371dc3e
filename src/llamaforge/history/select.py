"""Which commits a history measures, in the series' order.

* ``--range A..B``: the first-parent line from A to B, both included (A must be on B's first-parent line;
  a branch or tag B of a git/path ``--source`` is fetched again, so a nightly sees new commits);
* ``--every N``: of that line every N-th commit counted from A, and always B;
* ``--releases``: the release pins of ``pins.toml`` (those with a PyPI sdist source), in file order,
  built from their own sources;
* ``--commits c1,c2``: exactly those.

``--continue`` narrows a range to what is new since the series' last run: the commits after the newest
commit already measured (``--every`` counted from there, and always the new tip) plus any commit an
interrupted run planned and never measured.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from ..config import Pin, Pins, SourceSpec
from ..errors import ConfigError
from ..sources import commit_facts, fresh_ref, on_first_parent_line, resolve_commit

_SHA = re.compile(r"^[0-9a-fA-F]{7,40}$")


@dataclass(frozen=True)
class Chosen:
    """One commit to measure: its full sha, where it sits, and how to build it."""

    sha: str
    order: int
    label: str
    subject: str = ""
    date: float | None = None
    pin: Pin | None = None          # a release pin: built from its own sources (else: the incremental builder)

    def to_dict(self) -> dict:
        return {"sha": self.sha, "order": self.order, "label": self.label, "subject": self.subject, "date": self.date,
                "pin": self.pin.name if self.pin else None}


@dataclass(frozen=True)
class Selection:
    range: str | None = None
    every: int = 1
    releases: bool = False
    commits: tuple[str, ...] = ()
    source: SourceSpec | None = None

    def __post_init__(self) -> None:
        given = [n for n, v in (("--range", self.range), ("--releases", self.releases), ("--commits", self.commits)) if v]
        if len(given) != 1:
            raise ConfigError("say which commits: exactly one of --range A..B, --releases or --commits c1,c2"
                              + (f" (got {', '.join(given)})" if given else ""),
                              "e.g. --range v1..master --every 4, or --releases")
        if self.every < 1:
            raise ConfigError(f"--every must be at least 1 (got {self.every})",
                              "--every 1 measures every commit, --every 4 every fourth (and always the newest)")
        if self.every != 1 and not self.range:
            raise ConfigError("--every thins a --range", "use it with --range A..B")
        if self.range is not None:
            self.ends()

    def ends(self) -> tuple[str, str]:
        a, sep, b = (self.range or "").partition("..")
        if not sep or not a or not b or b.startswith(".") or any(x.startswith("-") for x in (a, b)):
            raise ConfigError(f"--range {self.range!r} is not OLDER..NEWER", "e.g. --range 0c1e57098..master")
        return a, b

    def text(self) -> str:
        if self.range:
            return f"--range {self.range}" + (f" --every {self.every}" if self.every > 1 else "")
        return "--releases" if self.releases else "--commits " + ",".join(self.commits)


def thin(line: Sequence[str], every: int) -> list[str]:
    """Every ``every``-th commit of ``line`` counted from its first, and always its last."""
    keep = [c for i, c in enumerate(line) if i % every == 0]
    if line and keep[-1] != line[-1]:
        keep.append(line[-1])
    return keep


def _chosen(paths: object, sha: str, label: str | None = None, pin: Pin | None = None, order: int | None = None) -> Chosen:
    f = commit_facts(paths, sha)
    return Chosen(sha, f.count if order is None else order, label or sha[:9], f.subject, f.date, pin)


def _newest(paths: object, ref: str, spec: SourceSpec | None) -> str:
    if spec is not None and spec.kind in ("git", "path") and not _SHA.match(ref):
        return fresh_ref(paths, ref, spec)          # a branch or tag: as it is now
    return resolve_commit(paths, ref, spec)


def range_line(paths: object, sel: Selection) -> list[str]:
    a, b = sel.ends()
    return on_first_parent_line(paths, a, _newest(paths, b, sel.source), sel.source)


def release_pins(pins: Pins) -> list[Pin]:
    """The release pins (a PyPI sdist among their sources), oldest first, one per commit."""
    out: dict[str, Pin] = {}
    for pin in pins.pins.values():
        if any(s.kind == "pypi" for s in pin.sources) and pin.name != pins.default:
            out.setdefault(pin.commit, pin)
    if len(out) < 2:
        raise ConfigError(f"--releases needs at least two release pins in {pins.path or 'pins.toml'} (found {len(out)})",
                          "add [pins.NAME] entries with a pypi:llama-cpp-python==VER source")
    return list(out.values())


def choose(paths: object, pins: Pins, sel: Selection, *, measured: Sequence[str] = (),
           planned: Sequence[str] = (), resume: bool = False) -> list[Chosen]:
    """The commits to measure, in order (see the module doc); with ``resume`` (``--continue``) only those
    after the newest of ``measured`` and any of ``planned`` not in ``measured``."""
    if sel.releases:
        # built from the pins' own sources (an sdist is imported into the mirror only when it is checked out)
        chosen = [Chosen(p.commit, i, p.name, p.description, None, p) for i, p in enumerate(release_pins(pins))]
    elif sel.commits:
        chosen = sorted((_chosen(paths, resolve_commit(paths, c, sel.source)) for c in sel.commits),
                        key=lambda c: (c.order, c.date or 0))
    else:
        line = range_line(paths, sel)
        if resume:
            done = set(measured)
            last = max((i for i, c in enumerate(line) if c in done), default=-1)
            pick = [c for c in planned if c in line[: last + 1] and c not in done]
            pick += thin(line[last + 1:], sel.every) if last + 1 < len(line) else []
            return [_chosen(paths, c) for c in sorted(set(pick), key=line.index)]
        chosen = [_chosen(paths, c) for c in thin(line, sel.every)]
    if resume:
        chosen = [c for c in chosen if c.sha not in set(measured)]
    return chosen
