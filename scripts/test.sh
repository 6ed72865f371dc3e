#!/usr/bin/env bash
# The test command (what .ci/run calls): lint, then every test — unit tests and the `slow` integration
# tests that build and run real llama.cpp (CPU and Vulkan on lavapipe).
#   scripts/test.sh                  ruff; every test not marked `measures` on every core (pytest-xdist; the
#                                    real tests among them check records, not speeds; tests/conftest.py groups
#                                    those that share a fixture); then the `measures` tests one at a time (their
#                                    assertions rest on measured speed: nothing may run beside them)
#   scripts/test.sh [pytest args]    ruff; one pytest with exactly these arguments, e.g. -m "not slow"
# LLAMAFORGE_TEST_ARTIFACTS=DIR keeps each phase's JUnit XML and slowest tests there (.ci/run sets it);
# LLAMAFORGE_TEST_WORKERS=N sets the fast phase's workers (default: one per core).
set -euo pipefail
cd "$(dirname "$0")/.."
ruff check src tests tasks.py benchmarks
if [ $# -gt 0 ]; then
  exec python3 -m pytest "$@"
fi
art=${LLAMAFORGE_TEST_ARTIFACTS:-}
rc=0
python3 -m pytest -q -ra -m "not measures" -n "${LLAMAFORGE_TEST_WORKERS:-auto}" --dist loadgroup --durations=40 \
  ${art:+--junitxml=$art/junit-parallel.xml} || rc=$?
python3 -m pytest -q -ra -m measures --durations=20 ${art:+--junitxml=$art/junit-measures.xml} || rc=$?
exit $rc
