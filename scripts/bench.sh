#!/usr/bin/env bash
# Benchmark profiles of pmhash-bench, each one command (see the Makefile):
#
#   scripts/bench.sh quick   BUILD_DIR   (make run)       about 2 minutes
#   scripts/bench.sh results BUILD_DIR   (make results)   the README's tables
#   scripts/bench.sh full    BUILD_DIR   (make bench-full) paper-sized
#   scripts/bench.sh dali    BUILD_DIR   (make bench-dali) dali against its
#                                        peers, about 14 minutes
#
# Each profile runs pmhash-bench once (ceilings first, then every workload,
# thread count and engine), writes RESULT.json and RESULT.csv, prints the
# table, and turns the JSON into figures with bench/plot.py (matplotlib from
# the project's .venv, made by scripts/bootstrap-plot.sh):
#
#   quick    ./data/results/quick.json      figures in ./data/results/
#   results  docs/results/results.json      figures in docs/results/ (committed)
#   full     ./data/results/full/full.json  figures in ./data/results/full/
#
# Pools and the peers' files go to /dev/shm (override with POOL_DIR), where
# pmhash runs with cache_line granularity, the code path of persistent memory
# (clwb + sfence), and LMDB and RocksDB sync to the same file system.
# Extra arguments after BUILD_DIR are passed to pmhash-bench.
#
# The dali profile (the dali engine's issue; the Dali paper, sec. 5) runs
# pmhash-bench twice, on workloads load, a, b, c and txn (transactions of 3
# reads + 1 update, uniform keys as in the paper) at 1 and 2 threads:
#
#   disk  a pool file on the normal disk, page granularity (pwrite +
#         fdatasync, README "Persistence"): dali with epoch durability
#         against LMDB and RocksDB with the same loss window, 10 ms (their
#         epoch modes, MDB_NOSYNC + mdb_env_sync and unsynced WAL +
#         SyncWAL, every 10 ms; dali epochs of 5 ms, as a crash may lose
#         two). Directory: POOL_DIR, default /var/tmp. No ceilings: on a
#         disk they charge each write one write-back and fdatasync, which
#         none of these tables issues per write in epoch mode.
#   shm   /dev/shm (SHM_DIR), cache_line granularity (clwb + sfence): dali
#         epoch against clevel strict and dali strict.
#
# into docs/results/dali/{disk,shm}.{json,csv}, figures in
# docs/results/dali/disk/ and docs/results/dali/shm/. DALI_RECORDS (default
# 1000000) scales the records, DALI_SECONDS (default 2) bounds each run
# phase; the load phases take most of the time (1M records: about 9 minutes
# for disk, 5 for shm on the project's 2-core VM).
set -euo pipefail

if [ $# -lt 2 ]; then
  echo "usage: $0 quick|results|full|dali BUILD_DIR [pmhash-bench flags...]" >&2
  exit 2
fi
cd "$(dirname "$0")/.."
profile=$1
build=$2
shift 2

bench=$build/bench/pmhash-bench
python=.venv/bin/python
pool_dir=${POOL_DIR:-/dev/shm}
micro=insert,read,read-neg,update,delete

case "$profile" in
  quick)
    out=data/results
    name=quick
    args=(--engine clevel,dali:epoch,libcuckoo,lmdb --workload load,a,b,c --records 500000 --threads 1,2)
    ;;
  results)
    out=docs/results
    name=results
    args=(--engine all --workload "load,a,b,c,$micro" --records 1000000 --threads 1,2)
    ;;
  full)
    out=data/results/full
    name=full
    args=(--engine all --workload "load,a,b,c,d,f,$micro" --records 10000000 --threads 1,2)
    ;;
  dali)
    out=docs/results/dali
    ;;
  *)
    echo "$0: unknown profile '$profile' (quick, results, full or dali)" >&2
    exit 2
    ;;
esac

for program in "$bench" "$python"; do
  if [ ! -x "$program" ]; then
    echo "bench.sh: $program is missing (make build-release; scripts/bootstrap-plot.sh)" >&2
    exit 1
  fi
done

mkdir -p "$out"

if [ "$profile" = dali ]; then
  records=${DALI_RECORDS:-1000000}
  seconds=${DALI_SECONDS:-2}
  disk_dir=${POOL_DIR:-/var/tmp}
  shm_dir=${SHM_DIR:-/dev/shm}
  common=(--workload load,a,b,c,txn --threads 1,2 --records "$records" --duration "$seconds"
          --loss-window-ms 10)
  echo "bench.sh: dali, part 1 of 2: page granularity in $disk_dir, epoch durability"
  "$bench" "${common[@]}" --engine dali,lmdb,rocksdb --durability epoch \
    --pool "$disk_dir" --granularity page --no-ceilings \
    --json "$out/disk.json" --csv "$out/disk.csv" "$@"
  echo "bench.sh: dali, part 2 of 2: cache_line granularity in $shm_dir"
  "$bench" "${common[@]}" --engine dali:epoch,clevel,dali:strict --durability strict \
    --pool "$shm_dir" --granularity cache_line \
    --json "$out/shm.json" --csv "$out/shm.csv" "$@"
  for part in disk shm; do
    "$python" bench/plot.py --out "$out/$part" "$out/$part.json"
  done
  echo "bench.sh: dali profile: results in $out/{disk,shm}.{json,csv}, figures in $out/{disk,shm}/"
  exit 0
fi

"$bench" "${args[@]}" --pool "$pool_dir" --granularity cache_line \
  --json "$out/$name.json" --csv "$out/$name.csv" "$@"
"$python" bench/plot.py --out "$out" "$out/$name.json"
echo "bench.sh: $profile profile: results in $out/$name.json, figures in $out/"
