#!/usr/bin/env bash
# docs/results/dali/ab-strict-epoch.sh - dali's strict writes against clevel's
# and dali's epoch mode against libcuckoo on YCSB A, for two builds of
# pmhash-bench run interleaved (A B A B ...), so that both ratios of each
# build come from the same runs on the same (shared, noisy) machine.
#
#   ab-strict-epoch.sh OLD_BENCH NEW_BENCH [ROUNDS] [STRICT_RECORDS] [EPOCH_RECORDS]
#
# Shape: pools in /dev/shm, cache_line, 8-byte keys and values, 2 threads,
# uniform strict writes (insert, update, delete), YCSB A with its own
# (zipfian) distribution. Prints the run-phase Mops/s of every run, then per
# build the medians and the ratios dali strict / clevel strict (per write
# workload) and dali epoch / libcuckoo (A).
set -euo pipefail
old=$1 new=$2 rounds=${3:-2} strict_records=${4:-200000} epoch_records=${5:-1000000}
out=$(mktemp -d /tmp/dali-ab.XXXXXX)
common=(--key-size 8 --value-size 8 --threads 2 --no-ceilings --no-check)
for r in $(seq 1 "$rounds"); do
  for build in old new; do
    bench=$old; [ "$build" = new ] && bench=$new
    "$bench" --engine dali:strict,clevel:strict --workload insert,update,delete \
      --records "$strict_records" --distribution uniform "${common[@]}" \
      --csv "$out/$build-strict-$r.csv" > /dev/null
    "$bench" --engine dali:epoch,libcuckoo --workload a --records "$epoch_records" \
      "${common[@]}" --csv "$out/$build-epoch-$r.csv" > /dev/null
  done
done
python3 - "$out" "$rounds" <<'PY'
import csv, statistics, sys, glob, os
out, rounds = sys.argv[1], int(sys.argv[2])
runs = {}  # (build, engine, workload) -> [Mops/s]
for path in sorted(glob.glob(os.path.join(out, "*.csv"))):
    build = os.path.basename(path).split("-")[0]
    for row in csv.DictReader(open(path)):
        key = (build, row["engine"], row["workload"])
        runs.setdefault(key, []).append(float(row["run_ops_per_s"]) / 1e6)
for key in sorted(runs):
    print("%-4s %-10s %-7s runs %s" % (key + (" ".join("%.3f" % v for v in runs[key]),)))
med = {k: statistics.median(v) for k, v in runs.items()}
for build in ("old", "new"):
    print("%s:" % build)
    for w in ("insert", "update", "delete"):
        d, c = med[(build, "dali", w)], med[(build, "clevel", w)]
        print("  %-6s dali strict %.3f / clevel strict %.3f = %.2f" % (w, d, c, d / c))
    d, c = med[(build, "dali", "a")], med[(build, "libcuckoo", "a")]
    print("  a      dali epoch %.3f / libcuckoo %.3f = %.2f" % (d, c, d / c))
PY
rm -rf "$out"
