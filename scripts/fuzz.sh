#!/usr/bin/env bash
# Runs the pool-open fuzzer of the fuzz build (`make build-fuzz`) for SECONDS
# (default 60): `make test` runs a bounded session, `make fuzz` a longer one
# (FUZZ_SECONDS). Exits non-zero when an input crashes the target, trips ASan
# or UBSan, leaks, or runs longer than 10 s (a hang); the input is saved under
# build/fuzz/artifacts/ and replays with `build/fuzz/tests/fuzz/pmhash-pool-open-fuzzer FILE`.
#
# Inputs found interesting accumulate in build/fuzz/corpus/ (each run starts
# from them and from the seeds in tests/fuzz/corpus/).
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=${1:-60}
bin=build/fuzz/tests/fuzz/pmhash-pool-open-fuzzer
corpus=build/fuzz/corpus/pool_open
artifacts=build/fuzz/artifacts
log=build/fuzz/pool_open.log
mkdir -p "$corpus" "$artifacts"

export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1

echo "=== fuzzing Store::open on damaged pools for ${seconds} s (log: $log) ==="
# -max_len: an input is a list of patches of a few bytes each (tests/fuzz/
# pool_open_fuzzer.cc); -timeout: one input over 10 s is reported as a hang.
"$bin" -max_total_time="$seconds" -timeout=10 -max_len=128 -print_final_stats=1 \
  -artifact_prefix="$artifacts/" "$corpus" tests/fuzz/corpus >"$log" 2>&1 &
pid=$!
status=0
wait "$pid" || status=$?
# The target removes its pool files at exit, but not after a crash or a hang.
rm -f "/dev/shm/pmhash-fuzz-$pid.pool" "/dev/shm/pmhash-fuzz-$pid-base.pool"

# Progress lines are many: print the final statistics, and after a failure
# everything from the first report of it on.
progress='^#[0-9]+[[:space:]]+(NEW|REDUCE|pulse|INITED|DONE)[[:space:]]'
if [ "$status" -eq 0 ]; then
  grep -E '^(#[0-9]+[[:space:]]+DONE|Done|stat::)' "$log"
else
  awk '/ERROR|runtime error|pool_open_fuzzer:|[Tt]imeout|deadly signal/ { on = 1 } on' "$log" |
    grep -vE "$progress"
  echo "fuzz: the target failed (exit $status); reproducer in $artifacts/" >&2
fi
exit "$status"
