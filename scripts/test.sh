#!/usr/bin/env bash
# The test command (what .ci/run calls): lint, then the tests of a tier (docs/testing.md, Tiers).
#   scripts/test.sh                  the default tier: ruff; the fast tests (pytest-xdist, 2 workers a core); then the
#                                    real-llama.cpp tests (`slow`) but the full tier's, one at a time (nothing may run
#                                    beside them: llama.cpp's spinning thread pools slow down many times over when two
#                                    share 2 cores — docs/testing.md)
#   scripts/test.sh --full           the full tier: the same and the `full` tests, which need a cold build the default
#                                    tier does not make (the oldest release pin's); the nightly example runs it
#   scripts/test.sh [pytest args]    ruff; one pytest with exactly these arguments, e.g. -m "not slow"
# LLAMAFORGE_TEST_ARTIFACTS=DIR keeps each phase's JUnit XML and slowest tests there (.ci/run sets it);
# LLAMAFORGE_TEST_WORKERS=N sets the fast phase's workers (default: two per core: many wait on
# a child process or a socket — docs/testing.md).
set -euo pipefail
cd "$(dirname "$0")/.."
slow="slow and not full"
if [ "${1:-}" = --full ]; then
  if [ $# -gt 1 ]; then
    echo "scripts/test.sh: --full takes no other arguments (to give pytest its own, leave --full out)" >&2
    exit 2
  fi
  slow=slow
  shift
fi
ruff check src tests tasks.py benchmarks
if [ $# -gt 0 ]; then
  exec python3 -m pytest "$@"
fi
art=${LLAMAFORGE_TEST_ARTIFACTS:-}
rc=0
python3 -m pytest -q -ra -m "not slow" -n "${LLAMAFORGE_TEST_WORKERS:-$((2 * $(nproc)))}" --durations=20 \
  ${art:+--junitxml=$art/junit-fast.xml} || rc=$?
python3 -m pytest -q -ra -m "$slow" --durations=40 tests/integration ${art:+--junitxml=$art/junit-slow.xml} || rc=$?
exit $rc
