#!/usr/bin/env bash
# pmhash-server against Debian's redis-server, side by side in one sitting,
# with the Redis project's own load generator (redis-benchmark).
#
#   scripts/bench-server.sh [--build DIR] [--out DIR] [--requests N]
#                           [--disk-requests N] [--keys N]
#                           [--restart-keys LIST] [--media LIST]
#                           [--parts LIST] [--disk-parts LIST]
#                           [--ycsb-workloads LIST]
#
# Servers, each started fresh on an empty store:
#   redis-none       redis-server, no persistence
#   redis-everysec   appendonly, appendfsync everysec (loses up to ~1 s)
#   redis-always     appendonly, appendfsync always (every write fsynced)
#   pmhash-E         pmhash-server on engine E, every mode `pmhash engines
#                    --modes pool` lists (E:strict: every acknowledged write
#                    durable, the peer of redis-always; E:epoch: durable
#                    within two epochs, the peer of redis-everysec)
# Media (--media, default "shm disk"): shm puts pools and append-only
# files in /dev/shm (pools flushed by cache line, the emulation of
# persistent memory; an fsync of tmpfs costs little), disk in /var/tmp
# (pools written back by pwrite and fdatasync, append-only files fsynced
# to the disk). The tables also set pmhash on shm (persistent memory)
# beside Redis on disk: where each keeps its data durable in a deployment.
# pmhash-server runs with its default workers (docs/server.md).
#
# Load: redis-benchmark -t set,get,incr,mset -c 50 -P 1 and -P 16, values
# of 16 and 100 bytes, keys drawn from --keys (default 1,000,000),
# --requests each (default 1,000,000; MSET, ten keys a request, a tenth;
# on disk --disk-requests, default a tenth of --requests: each write waits
# for the disk).
# Then the restart: --restart-keys (default "1000000 10000000") keys
# written, the server killed with SIGKILL, restarted, and the time until it
# answers PING (Redis replays its append-only file; pmhash recovers its
# pool). Then YCSB (scripts/ycsb.sh,
# the project's binding over Jedis): on each server, fresh, YCSB_RECORDS
# records loaded (default 100000), then each of --ycsb-workloads (default
# "a b c f d"; E is not run: docs/server.md, YCSB) for YCSB_OPS operations
# (default 100000) with YCSB_THREADS client threads (default 16).
# The groups part runs each strict pmhash configuration again with
# --write-groups off (SET and MSET, 16-byte values): what group
# persistence buys, against the throughput part's runs with it.
# --parts (default "throughput groups restart ycsb") runs only the parts
# named; on disk only those of --disk-parts too (default "throughput
# groups": a strict write there waits about a millisecond for the disk,
# and loading ten million keys through one connection would take hours).
#
# Results: OUT/bench-server-<time>.json (every row) and .md (the tables,
# with each pmhash configuration's ratio to its Redis peer), and the
# figures OUT/server_*.png (bench/plot/server.py); OUT defaults to
# docs/results/server. The machine's cores are shared by the servers and
# the load generator: the numbers compare configurations within one run.
set -euo pipefail
cd "$(dirname "$0")/.."

build=build/release
out=docs/results/server
requests=1000000
disk_requests=""
disk_parts="throughput groups"
keys=1000000
restart_keys="1000000 10000000"
media="shm disk"
parts="throughput groups restart ycsb"
ycsb_workloads="a b c f d"
ycsb_records=${YCSB_RECORDS:-100000}
ycsb_ops=${YCSB_OPS:-100000}
ycsb_threads=${YCSB_THREADS:-16}
while [ $# -gt 0 ]; do
  case "$1" in
    --build) build=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --requests) requests=$2; shift 2 ;;
    --keys) keys=$2; shift 2 ;;
    --restart-keys) restart_keys=$2; shift 2 ;;
    --media) media=$2; shift 2 ;;
    --parts) parts=$2; shift 2 ;;
    --ycsb-workloads) ycsb_workloads=$2; shift 2 ;;
    --disk-requests) disk_requests=$2; shift 2 ;;
    --disk-parts) disk_parts=$2; shift 2 ;;
    -h|--help) sed -n '2,/^set -e/p' "$0" | sed '$d'; exit 0 ;;
    *) echo "bench-server: unknown flag $1 (--help)" >&2; exit 2 ;;
  esac
done

for tool in redis-server redis-benchmark redis-cli; do
  command -v "$tool" >/dev/null || { echo "bench-server: $tool is missing (scripts/bootstrap.sh bench-server)" >&2; exit 1; }
done
part() { [[ " $parts " == *" $1 "* ]]; }
# media_for PART: the media PART runs on.
media_for() {
  local m
  for m in $media; do
    [ "$m" = disk ] && [[ " $disk_parts " != *" $1 "* ]] && continue
    echo "$m"
  done
}
[ -n "$disk_requests" ] || disk_requests=$(( (requests + 9) / 10 ))
for p in $parts; do
  case "$p" in
    throughput|groups|restart|ycsb) ;;
    *) echo "bench-server: no part '$p' (throughput groups restart ycsb)" >&2; exit 2 ;;
  esac
done
# The binding is built (its jars fetched the first time) before any server
# starts, so that a missing JDK stops the sitting at once, not after hours.
if part ycsb; then scripts/ycsb.sh --build-only; fi
[ -x "$build/pmhash-server" ] || { echo "bench-server: no $build/pmhash-server (make build-release)" >&2; exit 1; }

mkdir -p "$out"
stamp=$(date -u +%Y%m%dT%H%M%SZ)
rows=$(mktemp)
work=$(mktemp -d)
pid=""
cleanup() {
  [ -n "$pid" ] && kill -9 "$pid" 2>/dev/null || true
  rm -rf "$work" "$rows"
  rm -rf /dev/shm/pmhash-bench-server-* /var/tmp/pmhash-bench-server-*
}
trap cleanup EXIT
trap 'exit 1' INT TERM PIPE  # through the EXIT trap: no server left behind

# Below the kernel's ephemeral ports (32768 and up), which a client's
# connection may hold as its own; each fresh server takes the next port
# (next_port), so that no socket of the one before is in its way (a
# restart keeps its port).
port=$((20000 + RANDOM % 10000))
next_port() { port=$((port + 1)); }
# The system's interpreter: a version manager's shim (pyenv) takes a
# quarter of a second to start, more than some restarts take.
py=/usr/bin/python3
[ -x "$py" ] || py=$(command -v python3)

dir_of() { # medium -> a fresh directory on it
  local base=/dev/shm
  [ "$1" = disk ] && base=/var/tmp
  local d
  d=$(mktemp -d "$base/pmhash-bench-server-XXXX")
  echo "$d"
}

wait_ready() { # waits until PING answers PONG; prints the microseconds since $1 (date +%s%N)
  # One process polls a socket every millisecond: starting redis-cli per
  # poll would cost more than some restarts take.
  "$py" -c '
import socket, sys, time
port, t0 = int(sys.argv[1]), int(sys.argv[2])
deadline = time.time() + 300
while time.time() < deadline:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
            s.sendall(b"PING\r\n")
            if s.recv(64).startswith(b"+PONG"):
                print((time.time_ns() - t0) // 1000)
                sys.exit(0)
    except OSError:
        pass
    time.sleep(0.001)
sys.exit("bench-server: the server on port %d never answered" % port)
' "$port" "$1"
}

# start NAME MEDIUM DIR: starts configuration NAME with its data in DIR.
start() {
  local name=$1 medium=$2 dir=$3 groups=${4:-on}
  local gran=cache_line
  [ "$medium" = disk ] && gran=page
  case "$name" in
    redis-none) redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no --dir "$dir" \
                  --daemonize no >"$dir/log" 2>&1 & ;;
    redis-everysec|redis-always)
      redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly yes \
        --appendfsync "${name#redis-}" --dir "$dir" --daemonize no >"$dir/log" 2>&1 & ;;
    pmhash-*)
      local mode=${name#pmhash-}
      local engine=${mode%%:*} durability=${mode#*:}
      local size=4G
      PMEM2_FORCE_GRANULARITY=$gran "$build/pmhash-server" --pool "$dir/server.pool" --create \
        --engine "$engine" --durability "$durability" --size "$size" --port "$port" \
        --write-groups "$groups" >"$dir/log" 2>&1 & ;;
  esac
  pid=$!
}

stop() {
  kill -9 "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  pid=""
}

configs=(redis-none redis-everysec redis-always)
while read -r m; do configs+=("pmhash-$m"); done < <("$build/pmhash" engines --modes pool)

# --- throughput ---------------------------------------------------------------
part throughput && for medium in $(media_for throughput); do
  for name in "${configs[@]}"; do
    for size in 16 100; do
      for pipeline in 1 16; do
        dir=$(dir_of "$medium")
        next_port
        start "$name" "$medium" "$dir"
        wait_ready "$(date +%s%N)" >/dev/null
        echo "bench-server: $medium $name ${size}B -P $pipeline" >&2
        n=$requests
        [ "$medium" = disk ] && n=$disk_requests
        # MSET sets ten keys per request: a tenth as many requests.
        { redis-benchmark -p "$port" -t set,get,incr -c 50 -P "$pipeline" -n "$n" \
            -r "$keys" -d "$size" --csv 2>/dev/null
          redis-benchmark -p "$port" -t mset -c 50 -P "$pipeline" -n "$(( (n + 9) / 10 ))" \
            -r "$keys" -d "$size" --csv 2>/dev/null | tail -n +2; } |
          awk -F'","' -v m="$medium" -v n="$name" -v s="$size" -v p="$pipeline" \
            'NR > 1 { gsub(/"/, "", $1); gsub(/"/, "", $2);
                      if ($2 !~ /^[0-9.]+$/) { print "bench-server: no rate in: " $0 > "/dev/stderr"; next }
                      printf "{\"kind\":\"throughput\",\"medium\":\"%s\",\"server\":\"%s\",\"value_bytes\":%s,\"pipeline\":%s,\"test\":\"%s\",\"rps\":%s}\n", m, n, s, p, $1, $2 }' >>"$rows"
        stop
        rm -rf "$dir"
      done
    done
  done
done

# --- group persistence: the same writes without write groups ---------------------
# Each pmhash configuration with strict durability again, started with
# --write-groups off (every write waits for its own durability): SET and
# MSET of 16-byte values; the throughput part measured them with groups.
part groups && for medium in $(media_for groups); do
  for name in "${configs[@]:3}"; do
    [[ "$name" == *:strict ]] || continue
    for pipeline in 1 16; do
      dir=$(dir_of "$medium")
      next_port
      start "$name" "$medium" "$dir" off
      wait_ready "$(date +%s%N)" >/dev/null
      echo "bench-server: $medium $name without write groups -P $pipeline" >&2
      n=$requests
      [ "$medium" = disk ] && n=$disk_requests
      { redis-benchmark -p "$port" -t set -c 50 -P "$pipeline" -n "$n" -r "$keys" -d 16 --csv 2>/dev/null
        redis-benchmark -p "$port" -t mset -c 50 -P "$pipeline" -n "$(( (n + 9) / 10 ))" \
          -r "$keys" -d 16 --csv 2>/dev/null | tail -n +2; } |
        awk -F'","' -v m="$medium" -v n="$name" -v p="$pipeline" \
          'NR > 1 { gsub(/"/, "", $1); gsub(/"/, "", $2);
                    if ($2 !~ /^[0-9.]+$/) { print "bench-server: no rate in: " $0 > "/dev/stderr"; next }
                    printf "{\"kind\":\"groups_off\",\"medium\":\"%s\",\"server\":\"%s\",\"value_bytes\":16,\"pipeline\":%s,\"test\":\"%s\",\"rps\":%s}\n", m, n, p, $1, $2 }' >>"$rows"
      stop
      rm -rf "$dir"
    done
  done
done

# --- restart after SIGKILL ------------------------------------------------------
# KEYS keys of 16-byte values, as redis-cli --pipe mass insertion.
load() {
  python3 - "$1" <<'EOF' | redis-cli -p "$port" --pipe >/dev/null
import sys
n = int(sys.argv[1])
out = sys.stdout.buffer
for i in range(n):
    k = b"key:%012d" % i
    out.write(b"*3\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$16\r\n%016d\r\n" % (len(k), k, i))
EOF
}

part restart && for medium in $(media_for restart); do
  for n in $restart_keys; do
    for name in redis-everysec redis-always "${configs[@]:3}"; do
      dir=$(dir_of "$medium")
      next_port
      start "$name" "$medium" "$dir"
      wait_ready "$(date +%s%N)" >/dev/null
      echo "bench-server: restart of $medium $name with $n keys" >&2
      load "$n"
      [ "$(redis-cli -p "$port" dbsize)" -ge "$n" ] || { echo "bench-server: $name lost keys while loading" >&2; exit 1; }
      stop
      # The poller starts first, so that its own start-up overlaps the
      # server's instead of adding to it.
      t0=$(date +%s%N)
      wait_ready "$t0" >"$dir/ready_us" &
      poller=$!
      case "$name" in
        pmhash-*) # the pool exists now: open it, without --create
          local_mode=${name#pmhash-}
          gran=cache_line; [ "$medium" = disk ] && gran=page
          PMEM2_FORCE_GRANULARITY=$gran "$build/pmhash-server" --pool "$dir/server.pool" \
            --durability "${local_mode#*:}" --port "$port" >"$dir/log2" 2>&1 &
          pid=$! ;;
        *) start "$name" "$medium" "$dir" ;;
      esac
      wait "$poller"
      us=$(cat "$dir/ready_us")
      keys_after=$(redis-cli -p "$port" dbsize)
      echo "{\"kind\":\"restart\",\"medium\":\"$medium\",\"server\":\"$name\",\"keys\":$n,\"keys_after\":$keys_after,\"ready_us\":$us}" >>"$rows"
      stop
      rm -rf "$dir"
    done
  done
done

# --- YCSB ------------------------------------------------------------------------
# One load per server, then the workloads in order on it (D inserts: last).
part ycsb && for medium in $(media_for ycsb); do
  for name in "${configs[@]}"; do
    dir=$(dir_of "$medium")
    next_port
    start "$name" "$medium" "$dir"
    wait_ready "$(date +%s%N)" >/dev/null
    echo "bench-server: YCSB on $medium $name" >&2
    scripts/ycsb.sh --port "$port" --workloads "$ycsb_workloads" --records "$ycsb_records" \
      --ops "$ycsb_ops" --threads "$ycsb_threads" --rows "$rows" \
      --row-extra "{\"medium\":\"$medium\",\"server\":\"$name\"}" >"$dir/ycsb.out" ||
      { cat "$dir/ycsb.out" >&2; echo "bench-server: YCSB failed on $medium $name" >&2; exit 1; }
    stop
    rm -rf "$dir"
  done
done

json=$out/bench-server-$stamp.json
"$py" - "$rows" "$json" "$out/bench-server-$stamp.md" "$requests" "$keys" \
  "$ycsb_records" "$ycsb_ops" "$ycsb_threads" "$disk_requests" <<'EOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
meta = {"requests": int(sys.argv[4]), "keys": int(sys.argv[5]), "disk_requests": int(sys.argv[9]),
        "ycsb": {"records": int(sys.argv[6]), "ops": int(sys.argv[7]), "threads": int(sys.argv[8])}}
# One row per line: a sitting's file stays readable and diffable.
with open(sys.argv[2], "w") as f:
    f.write('{"meta": %s,\n "rows": [\n' % json.dumps(meta))
    f.write(",\n".join("  " + json.dumps(r) for r in rows))
    f.write("\n]}\n")
def peer(server):
    return "redis-everysec" if server.endswith(":epoch") else "redis-always"
tp = [r for r in rows if r["kind"] == "throughput"]
md = ["# pmhash-server and redis-server, one sitting", ""]
if tp:
    md += ["scripts/bench-server.sh: redis-benchmark -c 50, %d requests (disk: %d; MSET of ten keys: a tenth as many) over %d keys."
           % (meta["requests"], meta["disk_requests"], meta["keys"]),
           "Ratios: each pmhash configuration against its Redis peer of the same durability",
           "(strict: appendfsync always; epoch durability: appendfsync everysec), and GET against redis-none.", ""]
for medium in sorted({r["medium"] for r in tp}):
    md += ["## Throughput, %s (requests/s)" % medium, "",
           "| server | bytes | -P | test | rps | vs peer |", "|---|---|---|---|---|---|"]
    index = {(r["server"], r["value_bytes"], r["pipeline"], r["test"]): r["rps"] for r in tp if r["medium"] == medium}
    for (server, size, p, test), rps in sorted(index.items()):
        ratio = ""
        if server.startswith("pmhash-"):
            ref = "redis-none" if test.startswith("GET") else peer(server)
            base = index.get((ref, size, p, test))
            if base:
                ratio = "%.2f× %s" % (float(rps) / float(base), ref)
        md.append("| %s | %s | %s | %s | %.0f | %s |" % (server, size, p, test, float(rps), ratio))
    md.append("")
# Where each keeps its data durable when deployed: pmhash on persistent
# memory (shm, flushed by cache line), Redis's append-only file on disk.
pm = {(r["server"], r["value_bytes"], r["pipeline"], r["test"]): r["rps"] for r in tp if r["medium"] == "shm"}
disk = {(r["server"], r["value_bytes"], r["pipeline"], r["test"]): r["rps"] for r in tp if r["medium"] == "disk"}
pairs = [(k, rps) for k, rps in sorted(pm.items()) if k[0].startswith("pmhash-") and not k[3].startswith("GET")
         and (peer(k[0]),) + k[1:] in disk]
if pairs:
    md += ["## pmhash on persistent memory (shm) against Redis on disk (requests/s)", "",
           "Writes only: pmhash's rows of the shm runs, Redis's of the disk runs (the append-only file",
           "fsynced to the disk), each against the Redis configuration of the same durability.", "",
           "| server | bytes | -P | test | rps | Redis on disk | rps | ratio |", "|---|---|---|---|---|---|---|---|"]
    for k, rps in pairs:
        ref = peer(k[0])
        base = disk[(ref,) + k[1:]]
        md.append("| %s | %s | %s | %s | %.0f | %s | %.0f | %.2f× |" % (
            k[0], k[1], k[2], k[3], float(rps), ref, float(base), float(rps) / float(base)))
    md.append("")
off = [r for r in rows if r["kind"] == "groups_off"]
if off:
    md += ["## Group persistence: with and without write groups (requests/s)", "",
           "pmhash-server --write-groups on (the default) and off, 16-byte values; the rows with groups are",
           "the throughput tables' (docs/server.md, \"Group commit\").", "",
           "| medium | server | -P | test | with groups | without | ratio |", "|---|---|---|---|---|---|---|"]
    on = {(r["medium"], r["server"], r["pipeline"], r["test"]): r["rps"] for r in tp if r["value_bytes"] == 16}
    for r in sorted(off, key=lambda r: (r["medium"], r["server"], r["pipeline"], r["test"])):
        w = on.get((r["medium"], r["server"], r["pipeline"], r["test"]))
        ratio = "%.2f×" % (float(w) / float(r["rps"])) if w and float(r["rps"]) > 0 else ""
        md.append("| %s | %s | %s | %s | %s | %.0f | %s |" % (r["medium"], r["server"], r["pipeline"], r["test"],
                  "%.0f" % float(w) if w else "", float(r["rps"]), ratio))
    md.append("")
rs = [r for r in rows if r["kind"] == "restart"]
if rs:
    md += ["## Restart after SIGKILL (time until PING answers)", "",
           "| medium | server | keys | keys after | ms |", "|---|---|---|---|---|"]
    for r in rs:
        md.append("| %s | %s | %d | %d | %.1f |" % (r["medium"], r["server"], r["keys"], r["keys_after"], r["ready_us"] / 1000))
    md.append("")
ys = [r for r in rows if r["kind"] == "ycsb"]
def lat(r, ops):
    for op in ops:
        if op in r["latency_us"]:
            l = r["latency_us"][op]
            return "%.0f / %.0f" % (l["p50"], l["p99"])
    return ""
for medium in sorted({r["medium"] for r in ys}):
    y = meta["ycsb"]
    md += ["## YCSB, %s (operations/s; latencies p50 / p99 in µs)" % medium, "",
           "scripts/ycsb.sh: %d records of 10 fields × 100 bytes, %d operations per workload, %d client threads;"
           % (y["records"], y["ops"], y["threads"]),
           "load is YCSB's load phase (inserts); the write column is UPDATE (A, B, F) or INSERT (load, D).",
           "Ratios of throughput: against the Redis peer of the same durability and against redis-none.", "",
           "| workload | server | ops/s | read | write | vs peer | vs redis-none |", "|---|---|---|---|---|---|---|"]
    index = {(r["workload"] if r["phase"] == "run" else "load", r["server"]): r for r in ys if r["medium"] == medium}
    order = {w: i for i, w in enumerate(["load", "a", "b", "c", "f", "d"])}
    for (w, server), r in sorted(index.items(), key=lambda kv: (order.get(kv[0][0], 99), kv[0][1])):
        ratios = ["", ""]
        if server.startswith("pmhash-"):
            for i, ref in enumerate([peer(server), "redis-none"]):
                base = index.get((w, ref))
                if base:
                    ratios[i] = "%.2f×" % (r["ops_per_s"] / base["ops_per_s"])
        md.append("| %s | %s | %.0f | %s | %s | %s | %s |" % (
            w.upper() if w != "load" else w, server, r["ops_per_s"], lat(r, ["READ"]),
            lat(r, ["UPDATE", "INSERT"]), ratios[0], ratios[1]))
    md.append("")
open(sys.argv[3], "w").write("\n".join(md) + "\n")
print(sys.argv[3])
EOF
# The figures (bench/plot/server.py; matplotlib from .venv, which
# scripts/bootstrap-plot.sh makes): server_*.png next to the tables.
if [ -x .venv/bin/python ]; then
  .venv/bin/python bench/plot/server.py "$json" --out "$out"
else
  echo "bench-server: no .venv (scripts/bootstrap-plot.sh): no figures drawn" >&2
fi
