#!/usr/bin/env bash
# YCSB against a server of the Redis protocol (pmhash-server, redis-server),
# with the project's binding (bench/ycsb: YCSB's core from Maven Central and
# a client over Jedis; docs/server.md, section YCSB).
#
#   scripts/ycsb.sh [--host H] [--port P] [--password PW] [--workloads LIST]
#                   [--records N] [--ops N] [--threads N] [--no-load]
#                   [--rows FILE [--row-extra JSON]] [-p NAME=VALUE]...
#   scripts/ycsb.sh --build-only
#
# Builds the binding with Maven first (bench/ycsb/target; offline once the
# jars are in ~/.m2, the first build fetches them), then loads --records
# records (YCSB's load phase, 10 fields of 100 bytes each) and runs each
# workload of --workloads (default "a"; any of a b c d f, in the order
# given: d inserts, so it goes last when several run on one load) for
# --ops operations with --threads client threads. Defaults: 127.0.0.1:6379,
# 100000 records, 100000 operations, 16 threads. -p passes a property to
# YCSB (e.g. -p dataintegrity=true to have every read checked).
# Workload E is refused: it scans in key order, which a hash index has not.
#
# YCSB's summary of each phase is printed. --rows FILE appends one JSON line
# per phase to FILE: workload, phase, records, ops, threads, ops_per_s,
# latency_us {OPERATION: {p50, p99, avg}}, and the fields of --row-extra (a
# JSON object). Exit status 1 if YCSB failed, did fewer operations than
# asked (a client thread that could not connect) or reported any operation
# that did not return OK (a failed read, update, insert or a check of
# dataintegrity), 2 on a usage error.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
binding=$root/bench/ycsb

host=127.0.0.1
port=6379
password=""
workloads="a"
records=100000
ops=100000
threads=16
load=1
rows=""
row_extra="{}"
build_only=0
props=()
while [ $# -gt 0 ]; do
  case "$1" in
    --host) host=$2; shift 2 ;;
    --port) port=$2; shift 2 ;;
    --password) password=$2; shift 2 ;;
    --workloads) workloads=$2; shift 2 ;;
    --records) records=$2; shift 2 ;;
    --ops) ops=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --no-load) load=0; shift ;;
    --rows) rows=$2; shift 2 ;;
    --row-extra) row_extra=$2; shift 2 ;;
    --build-only) build_only=1; shift ;;
    -p) props+=(-p "$2"); shift 2 ;;
    -h|--help) sed -n '2,27p' "$0"; exit 0 ;;
    *) echo "ycsb: unknown flag $1 (--help)" >&2; exit 2 ;;
  esac
done
for w in $workloads; do
  case "$w" in
    a|b|c|d|f) ;;
    e) echo "ycsb: workload E scans records in key order; a hash index has no order, the binding's scan is not implemented (docs/server.md, YCSB)" >&2; exit 2 ;;
    *) echo "ycsb: no workload '$w' (one of a b c d f)" >&2; exit 2 ;;
  esac
done

for tool in java mvn; do
  command -v "$tool" >/dev/null || { echo "ycsb: $tool is missing (scripts/bootstrap.sh installs it)" >&2; exit 1; }
done

# --- the binding ------------------------------------------------------------
# Rebuilt when a source is newer than the jar. One build at a time: a test
# and a benchmark may start this script together.
jar=$binding/target/pmhash-ycsb.jar
(
  flock 9
  if [ ! -f "$jar" ] || [ -n "$(find "$binding/pom.xml" "$binding/src" -newer "$jar" -print -quit)" ]; then
    echo "ycsb: building the binding (bench/ycsb)" >&2
    # Offline first: after the first build every jar is in ~/.m2.
    if ! mvn -B -q -o -f "$binding/pom.xml" package >"$binding/.build.log" 2>&1; then
      mvn -B -q -f "$binding/pom.xml" package >"$binding/.build.log" 2>&1 || {
        cat "$binding/.build.log" >&2
        echo "ycsb: mvn package failed in bench/ycsb (is Maven Central reachable for the first build?)" >&2
        exit 1
      }
    fi
  fi
) 9>"$binding/.build.lock"
[ "$build_only" = 1 ] && exit 0

# --- the phases ---------------------------------------------------------------
summary=$(mktemp)
# YCSB's stderr (its progress and start-up notes) is shown only on failure.
trap 'rm -f "$summary" "$summary.err"' EXIT
py=/usr/bin/python3
[ -x "$py" ] || py=$(command -v python3)

connection=(-p "redis.host=$host" -p "redis.port=$port")
[ -n "$password" ] && connection+=(-p "redis.password=$password")

# phase load|run WORKLOAD: runs YCSB, prints its summary, checks it, adds a row.
phase() {
  local kind=$1 w=$2 flag=-load
  [ "$kind" = run ] && flag=-t
  echo "ycsb: $kind, workload $w, $host:$port, $records records, $ops operations, $threads threads" >&2
  if ! java -cp "$jar:$binding/target/lib/*" site.ycsb.Client "$flag" \
      -db site.pmhash.ycsb.PmhashClient -P "$binding/workloads/workload$w" \
      -p "recordcount=$records" -p "operationcount=$ops" -threads "$threads" \
      -p hdrhistogram.percentiles=50,99 "${connection[@]}" ${props[@]+"${props[@]}"} \
      >"$summary" 2>"$summary.err"; then
    cat "$summary" "$summary.err"
    echo "ycsb: YCSB's $kind of workload $w failed" >&2
    return 1
  fi
  cat "$summary"
  "$py" - "$summary" "$w" "$kind" "$records" "$ops" "$threads" "${rows:-/dev/null}" "$row_extra" <<'EOF'
import json, sys
path, workload, kind, records, ops, threads, rows, extra = sys.argv[1:]
stats = {}
for line in open(path):
    parts = [p.strip() for p in line.split(",")]
    if len(parts) == 3 and parts[0].startswith("[") and parts[0].endswith("]"):
        stats.setdefault(parts[0][1:-1], {})[parts[1]] = parts[2]
bad = []
for op, s in sorted(stats.items()):
    if op.endswith("-FAILED"):
        bad.append("%s %s" % (op, s.get("Operations", "?")))
    for name, n in s.items():
        if name.startswith("Return=") and name != "Return=OK":
            bad.append("%s %s %s" % (op, name, n))
overall = stats.get("OVERALL", {})
if "Throughput(ops/sec)" not in overall:
    sys.exit("ycsb: YCSB printed no throughput")
# A client thread that could not connect ends without a word in the
# summary (YCSB prints its exception and goes on): count what was done.
# Every operation of a core workload is one or two of these (F's
# read-modify-write is a READ and an UPDATE).
expected = int(records) if kind == "load" else int(ops)
done = sum(int(n) for op in ("READ", "UPDATE", "INSERT", "DELETE", "SCAN")
           for name, n in stats.get(op, {}).items() if name.startswith("Return="))
if done < expected:
    bad.append("%d operations done of %d asked (a client thread that could not start?)" % (done, expected))
if bad:
    sys.exit("ycsb: %s of workload %s failed: %s" % (kind, workload, "; ".join(bad)))
latency = {}
for op, s in stats.items():
    if op in ("OVERALL", "CLEANUP") or "50thPercentileLatency(us)" not in s:
        continue
    latency[op] = {"p50": float(s["50thPercentileLatency(us)"]),
                   "p99": float(s["99thPercentileLatency(us)"]),
                   "avg": float(s["AverageLatency(us)"])}
row = {"kind": "ycsb", "workload": workload, "phase": kind, "records": int(records),
       "ops": int(records) if kind == "load" else int(ops), "threads": int(threads),
       "ops_per_s": float(overall["Throughput(ops/sec)"]), "latency_us": latency}
row.update(json.loads(extra))
with open(rows, "a") as f:
    f.write(json.dumps(row) + "\n")
EOF
}

set -- $workloads
if [ "$load" = 1 ]; then phase load "$1"; fi
for w in $workloads; do phase run "$w"; done
