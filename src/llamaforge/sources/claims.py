"""A pin's claims: every pypi/tarball source it declares holds its commit, checked on every checkout.

A pin says "commit C, from these sources". C may already be in the mirror (fetched with git, or imported
from some source earlier), and that says nothing about the pin's other sources; so before a checkout uses
the mirror, each declared ``pypi:``/``tarball:`` source is checked against C, warm cache or cold:

* by its :mod:`.ledger` record, when one applies (same sha256 as the pin pins, if it pins one; for a
  local archive that is still there, the same sha256 as that file has now), else
* verified now as a cold checkout does (:func:`.providers.verify`: downloaded into the cache when it is
  not there, sha256 checked, CHANGELOG or archive header read), which writes the record.

A source that holds another commit is refused (:class:`.providers.SourceMismatch`: the same line and fix,
warm or cold). A source that cannot be checked now (offline and not cached, a file gone, an index without
it) is passed over in one notice line only when something else proves the commit: the mirror holds C as a
git commit (whose id is the hash of its content), or another declared source was checked to hold exactly
C. Otherwise the checkout is refused. git and path sources are not checked here: a native commit is its
own proof.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..config import SourceSpec
from ..console import notice
from ..errors import SourceError
from ..paths import Paths
from . import archives, ledger
from .mirror import Mirror
from .providers import Provided, SourceMismatch, Verified, expect_commit, local_tarball, verify

SNAPSHOT_KINDS = ("pypi", "tarball")


@dataclass
class Claims:
    """What checking a pin's snapshot sources against ``commit`` found."""

    commit: str
    label: str                                                               # the pin's name, for messages
    verified: dict[SourceSpec, Verified] = field(default_factory=dict)       # checked just now: files at hand
    unchecked: dict[SourceSpec, SourceError] = field(default_factory=dict)   # could not be checked now
    proving: list[SourceSpec] = field(default_factory=list)                  # checked to hold exactly the commit


def source_failure(spec: SourceSpec, e: BaseException) -> SourceError:
    """An OS or git error while using ``spec`` as the one-line SourceError every other failure is."""
    text = str(e).strip()
    return SourceError(f"{spec}: {type(e).__name__}: {text.splitlines()[0] if text else ''}",
                       "see the message; try another source")


def _applies(fact: ledger.SourceFact, spec: SourceSpec, paths: Paths) -> bool:
    """Whether a record speaks of the bytes the pin means (the pinned sha256; a local file as it is now)."""
    if spec.sha256 and fact.sha256 != spec.sha256.lower():
        return False
    local = local_tarball(spec, paths) if spec.kind == "tarball" else None
    if local is not None and local.is_file():
        return archives.sha256_of(local) == fact.sha256
    return True


def _fact(m: Mirror, spec: SourceSpec, paths: Paths, claims: Claims) -> ledger.SourceFact:
    """What ``spec`` holds: its record when one applies, else verified now (and kept in ``claims``)."""
    known = ledger.read(m, spec)
    if known is not None and _applies(known, spec, paths):
        return known
    v = verify(m, spec, paths)
    claims.verified[spec] = v
    return v.fact


def check_claims(m: Mirror, commit: str, specs: tuple[SourceSpec, ...], paths: Paths, label: str) -> Claims:
    """Check each pypi/tarball source of ``specs`` against ``commit``; SourceMismatch for one that holds another
    commit; those that cannot be checked now are kept in ``unchecked`` for :func:`settle`."""
    claims = Claims(commit, label)
    for spec in specs:
        if spec.kind not in SNAPSHOT_KINDS or spec in claims.verified or spec in claims.unchecked:
            continue
        try:
            fact = _fact(m, spec, paths, claims)
        except SourceMismatch:
            raise
        except SourceError as e:
            claims.unchecked[spec] = e
            continue
        except OSError as e:   # a cache folder that cannot be read or written
            claims.unchecked[spec] = source_failure(spec, e)
            continue
        expect_commit(spec, fact, commit, label)
        if fact.commit is not None:
            claims.proving.append(spec)
    return claims


def _proof(claims: Claims, prov: Provided) -> str | None:
    if prov.native_git:
        return "the mirror holds it as a git commit"
    if claims.proving:
        return f"{claims.proving[0]} holds it"
    return None


def settle(claims: Claims, prov: Provided) -> None:
    """Once the commit is at hand (``prov``): pass over each source that could not be checked with one notice
    when something proves the commit, else refuse (SourceError naming the first such source)."""
    if not claims.unchecked:
        return
    proof = _proof(claims, prov)
    if proof is None:
        spec, e = next(iter(claims.unchecked.items()))
        raise SourceError(
            f"pin {claims.label}: source {spec} could not be checked against llama.cpp {claims.commit} "
            f"({e.message}), and no other source proves that commit",
            f"{e.fix or 'make the source reachable'} (once checked, it is remembered); or list a git source "
            f"that has {claims.commit[:9]} in pins.{claims.label}.sources")
    for spec, e in claims.unchecked.items():
        notice(f"source {spec} could not be checked against llama.cpp {claims.commit} ({e.message}); "
               f"going on: {proof}")
