#!/usr/bin/env bash
# Runs every test of every build (release, asan, tsan), then a bounded
# fuzzing session on the fuzz build (scripts/fuzz.sh). Called by `make test`
# after the builds; exits non-zero if any of them failed.
set -euo pipefail
cd "$(dirname "$0")/.."

jobs=$(nproc)
status=0
failed=()
for preset in release asan tsan; do
  echo "=== tests: $preset ($(date -u +%T)) ==="
  case "$preset" in
    asan) export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 ;;
    tsan) export TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 ;;
  esac
  # The process-kill and crash tests (label crash) run once, in the release
  # build (the sanitizer builds have none). TSan runs the concurrency stress
  # tests (label stress) and the server's client suites (label server): the
  # unit tests under TSan took twenty minutes here, more than CI's time
  # allows; they run in release and under ASan.
  select=()
  if [ "$preset" = asan ]; then select=(-LE crash); fi
  if [ "$preset" = tsan ]; then select=(-L 'stress|server'); fi
  # A test that hangs (a livelock, a lost wake-up) fails after 10 minutes
  # instead of stalling the run.
  if ! ctest --test-dir "build/$preset" --output-on-failure -j "$jobs" --timeout 600 "${select[@]}"; then
    status=1
    log="build/$preset/Testing/Temporary/LastTestsFailed.log"
    if [ -f "$log" ]; then
      while IFS= read -r line; do failed+=("$preset: ${line#*:}"); done < "$log"
    else
      failed+=("$preset: ctest failed without a list of failed tests")
    fi
  fi
done
# One minute of fuzzing Store::open with damaged pools and half a minute
# each of the memory node's and the tcp client's wire handling (ASan +
# UBSan); the build takes about as long again. `make fuzz` runs longer.
echo "=== fuzz ($(date -u +%T)) ==="
if ! ./scripts/fuzz.sh 60 30; then
  status=1
  failed+=("fuzz: see build/fuzz/*.log")
fi
# The list of what failed comes last, where a reader of only the end of the
# output (a CI summary) sees it.
if [ ${#failed[@]} -gt 0 ]; then
  echo "=== failed (${#failed[@]}) ==="
  printf '  %s\n' "${failed[@]}"
else
  echo "=== every test passed ==="
fi
exit $status
