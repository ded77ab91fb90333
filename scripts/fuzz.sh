#!/usr/bin/env bash
# Runs the libFuzzer targets of the fuzz build (`make build-fuzz`), one after
# the other:
#   pool_open        Store::open on damaged pools, for SECONDS (default 60)
#   memnode_request  a memory node's handling of a connection's bytes, and
#   tcp_reply        the tcp client's handling of a node's replies, and
#   resp_request     pmhash-server's Redis-protocol request parser, for
#                    WIRE_SECONDS each (default: SECONDS)
# `make test` runs a bounded session (60 s, 30 s each), `make fuzz` a longer
# one (FUZZ_SECONDS for every target). Exits non-zero when an input crashes
# a target, trips ASan or UBSan, leaks, or runs longer than 30 s (a hang);
# the input is saved under build/fuzz/artifacts/ and replays with
# `build/fuzz/tests/fuzz/pmhash-<target>-fuzzer FILE`.
#
# Inputs found interesting accumulate in build/fuzz/corpus/<target>/ (each
# run starts from them and from the target's seeds in tests/fuzz/).
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=${1:-60}
wire_seconds=${2:-$seconds}
artifacts=build/fuzz/artifacts
mkdir -p "$artifacts"

export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1

# run TARGET SECONDS SEEDS MAX_LEN DESCRIPTION
run() {
  local target=$1 secs=$2 seeds=$3 max_len=$4 what=$5
  local bin=build/fuzz/tests/fuzz/pmhash-${target//_/-}-fuzzer
  local corpus=build/fuzz/corpus/$target
  local log=build/fuzz/$target.log
  mkdir -p "$corpus"
  echo "=== fuzzing $what for ${secs} s (log: $log) ==="
  # -timeout: one input over 30 s is reported as a hang. (The slowest seed,
  # nehash-group-header-deep-depth, opens a 2^24-entry directory and runs
  # check, stats and scans over it: about 6 s under ASan on an idle core.)
  "$bin" -max_total_time="$secs" -timeout=30 -max_len="$max_len" -print_final_stats=1 \
    -artifact_prefix="$artifacts/$target-" "$corpus" "$seeds" >"$log" 2>&1 &
  local pid=$!
  local status=0
  wait "$pid" || status=$?
  # The pool-open target removes its pool files at exit, but not after a
  # crash or a hang.
  rm -f "/dev/shm/pmhash-fuzz-$pid.pool" "/dev/shm/pmhash-fuzz-$pid-base.pool"
  # Progress lines are many: print the final statistics, and after a
  # failure everything from the first report of it on.
  local progress='^#[0-9]+[[:space:]]+(NEW|REDUCE|pulse|INITED|DONE)[[:space:]]'
  if [ "$status" -eq 0 ]; then
    grep -E '^(#[0-9]+[[:space:]]+DONE|Done|stat::)' "$log"
  else
    awk '/ERROR|runtime error|_fuzzer:|[Tt]imeout|deadly signal/ { on = 1 } on' "$log" |
      grep -vE "$progress"
    echo "fuzz: $target failed (exit $status); reproducer in $artifacts/" >&2
  fi
  return "$status"
}

status=0
# pool_open: an input is a list of patches of a few bytes each
# (tests/fuzz/pool_open_fuzzer.cc).
run pool_open "$seconds" tests/fuzz/corpus 128 "Store::open on damaged pools" || status=1
# The wire targets: a request stream of a few frames (the largest seed,
# the start of a 64 MiB WRITE, is 4 KiB); a reply stream of a few responses.
run memnode_request "$wire_seconds" tests/fuzz/corpus-memnode-request 8192 \
  "a memory node's handling of a connection's bytes" || status=1
run tcp_reply "$wire_seconds" tests/fuzz/corpus-tcp-reply 16384 \
  "the tcp client's handling of a node's replies" || status=1
# A few pipelined requests, split into reads of 1 to 16 bytes.
run resp_request "$wire_seconds" tests/fuzz/corpus-resp-request 4096 \
  "the Redis-protocol request parser" || status=1
exit "$status"
