#!/usr/bin/env bash
# Scheduled regression check (called by llamaforge-regression.yml; runs anywhere llamaforge is installed):
# compare the newest llama.cpp commit of a branch against the last good one, remember the new one
# only when the judge called every metric "same" or "better", and write the report. The store and the
# state live in LLAMAFORGE_WORKSPACE.
#
# Exit: 0 = every metric judged same (within --min-effect) or better: the newest commit is the new last
#           good one (or there was no new commit),
#       1 = a metric got worse (the last good commit stays),
#       4 = inconclusive, not proven either way: add starts (LF_COMPARE_ARGS="--max-launches 20", or a larger
#           --min-effect); the last good commit stays, so the next night compares against it again,
#       anything else = the check itself failed (llamaforge's one-line error says why).
#
# Settings (environment):
#   LLAMAFORGE_WORKSPACE  the workspace: store, builds cache and results/regression/ (keep it between runs)
#   LF_SOURCE             where llama.cpp comes from (default git:https://github.com/ggml-org/llama.cpp)
#   LF_BRANCH             the branch whose newest commit is checked (default master)
#   LF_FIRST_BASE         the baseline before any run was good: a pin name or commit (default: the default pin)
#   LF_BACKEND            cuda, vulkan, cpu, ... (default cuda)
#   LF_MODEL              model reference (default synth:tiny-qwen35moe)
#   LF_NCMOE              offload points (default 0)
#   LF_COMPARE_ARGS       more `llamaforge compare` options, space-separated (e.g. "--min-effect 10%")
#   LLAMAFORGE            the llamaforge command (default llamaforge), space-separated words
set -euo pipefail

: "${LLAMAFORGE_WORKSPACE:?set LLAMAFORGE_WORKSPACE to a folder kept between runs}"
source_spec="${LF_SOURCE:-git:https://github.com/ggml-org/llama.cpp}"
branch="${LF_BRANCH:-master}"
read -r -a lf <<<"${LLAMAFORGE:-llamaforge}"
read -r -a extra <<<"${LF_COMPARE_ARGS:-}"
state="$LLAMAFORGE_WORKSPACE/results/regression"
mkdir -p -- "$state"

case "$source_spec" in
  git:*) url="${source_spec#git:}" ;;
  path:*) url="${source_spec#path:}" ;;
  *) echo "error: LF_SOURCE must be git:URL or path:DIR (got $source_spec)" >&2; exit 2 ;;
esac
newest="$(git ls-remote -- "$url" "refs/heads/$branch" | cut -f1)"
if [ -z "$newest" ]; then
  echo "error: no branch $branch at $url  fix: set LF_BRANCH to an existing branch" >&2
  exit 2
fi
last_good="$(cat -- "$state/last-good" 2>/dev/null || true)"
last_good="${last_good:-${LF_FIRST_BASE:-default}}"
echo "newest $branch: $newest; last good: $last_good"
if [ "$newest" = "$last_good" ]; then
  echo "no new commit since the last good one"
  exit 0
fi

set +e
"${lf[@]}" compare --base "$last_good" --head "$newest" --source "$source_spec" --backend "${LF_BACKEND:-cuda}" \
  --model "${LF_MODEL:-synth:tiny-qwen35moe}" --ncmoe "${LF_NCMOE:-0}" --fail-on-worse --fail-on-inconclusive \
  "${extra[@]}"
rc=$?
set -e
case "$rc" in
  0) outcome=same-or-better ;;
  3) outcome=worse ;;
  4) outcome=inconclusive ;;
  *) exit "$rc" ;;
esac
"${lf[@]}" report latest
printf '%s\t%s\t%s\t%s\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$last_good" "$newest" "$outcome" >>"$state/history.tsv"
if [ "$rc" -eq 3 ]; then
  echo "REGRESSION: $newest is worse than $last_good (the last good commit stays $last_good)"
  exit 1
fi
if [ "$rc" -eq 4 ]; then
  echo "INCONCLUSIVE: $newest against $last_good is not proven either way: add starts" \
    "(the last good commit stays $last_good)"
  exit 4
fi
printf '%s\n' "$newest" >"$state/last-good"
echo "judged same or better at every point and metric: $newest is the new last good commit"
