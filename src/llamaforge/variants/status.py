"""Which knobs of a stored run's variants took effect: per variant, and per pair that differs in one knob.

Pure functions of stored data (the run's ``Plan.variants`` records and its points' ``detail.observed``),
shared by the bench command (which warns at the end of a run) and the matrix report.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..findings.labels import is_sentinel
from ..store import Point
from .model import Variant
from .took import NOT_TAKEN, Status, pair, single

#: knobs of the build itself: a different binary, never "not taken"
BUILD_KNOBS = ("backend", "pin", "define:")


@dataclass(frozen=True)
class KnobPair:
    """Two variants that differ in exactly one knob: ``base`` (the knob absent, off, or declared first) and ``other``."""

    knob: str
    base: Variant
    other: Variant

    @property
    def values(self) -> tuple[str, str]:
        return self.base.knobs().get(self.knob, "default"), self.other.knobs().get(self.knob, "default")


def variants_of(records: Sequence[dict]) -> list[Variant]:
    return [Variant.from_dict(r) for r in records]


def facts_by_point(points: Sequence[Point], name: str) -> dict[tuple[int, int], dict]:
    """(ncmoe, ngl) → the observed facts of variant ``name``'s ok points."""
    return {(p.ncmoe, p.ngl): dict(p.detail.observed or {}) for p in points
            if p.label == name and not is_sentinel(p.label) and p.status == "ok"}


_OFF = {"off", "0", "false", "disabled", "no", "default"}


def _base_first(knob: str, a: Variant, b: Variant) -> tuple[Variant, Variant]:
    va, vb = a.knobs().get(knob), b.knobs().get(knob)
    if va is None or str(va).lower() in _OFF:
        return a, b
    if vb is None or str(vb).lower() in _OFF:
        return b, a
    return a, b


def one_knob_pairs(variants: Sequence[Variant]) -> list[KnobPair]:
    """Every pair of variants whose knobs differ in exactly one (absent = llama.cpp's default)."""
    out = []
    for i, a in enumerate(variants):
        for b in variants[i + 1:]:
            ka, kb = a.knobs(), b.knobs()
            diff = [k for k in dict.fromkeys([*ka, *kb]) if ka.get(k) != kb.get(k)]
            if len(diff) == 1:
                base, other = _base_first(diff[0], a, b)
                out.append(KnobPair(diff[0], base, other))
    return out


def single_statuses(record: dict, facts: Sequence[dict]) -> list[Status]:
    """Every runtime knob of one variant, judged on its own launches and device listing."""
    v = Variant.from_dict(record)
    return [single(k, val, facts, record.get("devices"), record.get("base_devices"))
            for k, val in v.knobs().items() if not k.startswith(BUILD_KNOBS)]


def pair_status(kp: KnobPair, records: dict[str, dict], points: Sequence[Point]) -> Status:
    """The knob of a one-knob pair, judged on both variants' logs at their common points. Its ``why`` reads
    other vs base ("flash_attn enabled vs flash_attn disabled"), the order in which reports name the pair."""
    fa, fb = facts_by_point(points, kp.base.name), facts_by_point(points, kp.other.name)
    common = sorted(set(fa) & set(fb))
    ra, rb = records.get(kp.base.name) or {}, records.get(kp.other.name) or {}
    return pair(kp.knob, [fb[c] for c in common], [fa[c] for c in common], _listing(rb, ra, kp.other),
                _listing(ra, rb, kp.base))


def _listing(mine: dict, other: dict, v: Variant) -> dict | None:
    """A variant's device listing: its own, or — a variant without environment on the other's build — the
    listing the other took with the build's own environment."""
    if mine.get("devices"):
        return mine["devices"]
    if not v.env and mine.get("build") == other.get("build"):
        return other.get("base_devices")
    return None


def not_taken(records: Sequence[dict], points: Sequence[Point]) -> list[tuple[str, Status]]:
    """(variant or pair, status) of every knob that did not take effect: a variant's own, then each pair's."""
    out: list[tuple[str, Status]] = []
    for r in records:
        facts = list(facts_by_point(points, str(r.get("name"))).values())
        out += [(str(r.get("name")), s) for s in single_statuses(r, facts) if s.status == NOT_TAKEN]
    by_name = {str(r.get("name")): r for r in records}
    for kp in one_knob_pairs(variants_of(records)):
        s = pair_status(kp, by_name, points)
        if s.status == NOT_TAKEN and not any(s2.knob == s.knob and who in (kp.base.name, kp.other.name)
                                             for who, s2 in out):
            out.append((f"{kp.base.name} vs {kp.other.name}", s))
    return out
