#!/usr/bin/env bash
# Benchmark profiles of pmhash-bench, each one command (see the Makefile):
#
#   scripts/bench.sh quick   BUILD_DIR   (make run)       about 2 minutes
#   scripts/bench.sh results BUILD_DIR   (make results)   the README's tables
#   scripts/bench.sh full    BUILD_DIR   (make bench-full) paper-sized
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
set -euo pipefail

if [ $# -lt 2 ]; then
  echo "usage: $0 quick|results|full BUILD_DIR [pmhash-bench flags...]" >&2
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
    args=(--engine pmhash,libcuckoo,lmdb --workload load,a,b,c --records 500000 --threads 1,2)
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
  *)
    echo "$0: unknown profile '$profile' (quick, results or full)" >&2
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
"$bench" "${args[@]}" --pool "$pool_dir" --granularity cache_line \
  --json "$out/$name.json" --csv "$out/$name.csv" "$@"
"$python" bench/plot.py --out "$out" "$out/$name.json"
echo "bench.sh: $profile profile: results in $out/$name.json, figures in $out/"
