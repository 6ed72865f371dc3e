"""CI's deadline for the one cold build CI can do without: the oldest release pin's.

``.ci/run`` has 90 minutes. A cold run (a fresh machine: no ``~/.cache``) builds llama.cpp three times: the
default pin for the CPU and for Vulkan (every real test needs them), and the oldest llama-cpp-python release
pin of ``pins.toml`` (only the tests of an older release going through the tool need it). On a 2-vCPU VM
with ``compile_s`` 2.16 (``benchmarks/machine_speed.py``) that last build took 863 s and the whole cold CI
91.3 min (2026-12-04, STATUS.md): one slow machine away from losing every result to the time limit.

So ``.ci/run`` exports ``LLAMAFORGE_CI_DEADLINE`` (epoch seconds), the tests that need such a build run last
(``tests/conftest.py``), and each asks :func:`skip_reason` first: a build that is already there always runs
(a warm cache costs seconds); a cold one runs when at least :data:`COLD_BUILD_NEEDS_S` are left, and is
otherwise skipped with the reason (pytest's ``-ra`` summary prints it). Outside ``.ci/run`` (no deadline)
nothing is ever skipped. On the fast VMs a cold CI took 40 min, so there the build always runs.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

DEADLINE_ENV = "LLAMAFORGE_CI_DEADLINE"
#: a cold build of the oldest release pin (863 s measured on the slowest VM seen), the ~3 min of tests that use
#: it, and the docs build after them, with ~7 min to spare
COLD_BUILD_NEEDS_S = 25 * 60


def deadline(environ: Mapping[str, str]) -> float | None:
    """The deadline ``.ci/run`` set (epoch seconds), or ``None`` outside CI; a value that is not a time is an error."""
    raw = environ.get(DEADLINE_ENV, "").strip()
    if not raw:
        return None
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"{DEADLINE_ENV}={raw!r} is not a time: give epoch seconds, e.g. $(( $(date +%s) + 5400 ))")
    return value


def skip_reason(what: str, *, cached: bool, now: float, deadline_s: float | None,
                needs_s: float = COLD_BUILD_NEEDS_S) -> str | None:
    """Why a test needing the build ``what`` must not start it now, or ``None`` when it may."""
    if cached or deadline_s is None:
        return None
    left = deadline_s - now
    if left >= needs_s:
        return None
    return (f"CI deadline: {max(left, 0) / 60:.0f} min left, and {what} is not built here; its cold build and tests "
            f"need ~{needs_s / 60:.0f} min (863 s for the build on a 2-vCPU VM): run "
            "`scripts/test.sh -m slow tests/integration/test_release_pins_real.py` to build and test it")
