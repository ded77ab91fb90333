#!/usr/bin/env bash
# The main job of `make run`: builds nothing, only runs BUILD_DIR's programs.
#
#   scripts/run.sh BUILD_DIR      (make run: scripts/run.sh build/release)
#
#   0. scripts/bench.sh quick              the quick benchmark profile: clevel,
#                                          dali (epoch durability), libcuckoo
#                                          and LMDB on YCSB Load, A, B, C at 1
#                                          and 2 threads; the comparison table,
#                                          and figures in ./data/results/
#   1. pmhash create ./data/demo.pool      a fresh 1 GiB pool of the default
#                                          engine (the registry's first pool
#                                          engine; the step says which)
#   2. pmhash-readback                     loads 1M keys with 2 threads, closes,
#                                          reopens, reads every key back and
#                                          compares its value (bench/readback.cc)
#   3. pmhash get                          looks one loaded key up again through
#                                          the command-line tool
#   4. pmhash info, pmhash check           the pool's shape; every invariant
#
# Exits non-zero as soon as a step fails, naming it. Leaves ./data/demo.pool
# for `pmhash info ./data/demo.pool`.
#
# Persistence: ./data is an ordinary file system, where libpmem2 would pick
# page granularity (an msync per persist). Unless PMEM2_FORCE_GRANULARITY is
# already set, the job uses cache_line, the code path of real persistent
# memory (clwb + sfence), which keeps it well under a minute; run with
# PMEM2_FORCE_GRANULARITY=page to exercise the msync path instead.
set -euo pipefail

if [ $# -ne 1 ]; then
  echo "usage: $0 BUILD_DIR   (e.g. $0 build/release)" >&2
  exit 2
fi
cd "$(dirname "$0")/.."
build=$1

records=1000000
threads=2
pool=./data/demo.pool
cli=$build/pmhash
readback=$build/bench/pmhash-readback
export PMEM2_FORCE_GRANULARITY=${PMEM2_FORCE_GRANULARITY:-cache_line}

for program in "$cli" "$readback"; do
  if [ ! -x "$program" ]; then
    echo "run.sh: $program is missing; build first (make build-release)" >&2
    exit 1
  fi
done

step="(setup)"
trap 'echo "run.sh: FAILED in step: $step" >&2' ERR

begin() {
  step=$1
  echo
  echo "== $step"
}

begin "benchmark: quick profile (scripts/bench.sh quick)"
./scripts/bench.sh quick "$build"

begin "create $pool"
mkdir -p "$(dirname "$pool")"
rm -f "$pool"
"$cli" create "$pool" --size 1G --force
engine=$("$cli" info "$pool" --json | python3 -c 'import json, sys; print(json.load(sys.stdin)["engine"])')
echo "run.sh: created $pool with the default engine, $engine"

begin "load $records keys with $threads threads, reopen, read them back (granularity $PMEM2_FORCE_GRANULARITY)"
log=$(mktemp)
trap 'rm -f "$log"' EXIT
"$readback" "$pool" --records "$records" --threads "$threads" | tee "$log"

begin "look one loaded key up with pmhash get"
# pmhash-readback's last line: "sample:    KEY VALUE"
read -r _ key value < <(grep '^sample:' "$log")
echo "$cli get $pool $key"
got=$("$cli" get "$pool" "$key")
echo "$got"
if [[ "$got" != *"$value"* ]]; then
  echo "run.sh: pmhash get $key printed '$got', expected the value '$value'" >&2
  false
fi

begin "pmhash info $pool"
"$cli" info "$pool"

begin "pmhash check $pool"
"$cli" check "$pool"

echo
echo "run.sh: OK: $records keys loaded and read back; $pool is left for 'pmhash info $pool'"
