#!/usr/bin/env bash
# The test command (what .ci/run calls): lint, then every test — unit tests and the `slow`
# integration tests that build and run real llama.cpp (CPU and Vulkan on lavapipe).
#   scripts/test.sh [pytest args]      e.g. scripts/test.sh -m "not slow" for the fast ones
set -euo pipefail
cd "$(dirname "$0")/.."
ruff check src tests tasks.py benchmarks
python3 -m pytest "${@:--q}"
