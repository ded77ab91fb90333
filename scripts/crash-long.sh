#!/usr/bin/env bash
# make crash-long: the crash checker at length, for every registered engine.
#
#   scripts/crash-long.sh BUILD_DIR
#
# For each engine, each seed, each granularity and each durability the
# engine accepts (strict; epoch for engines that persist by epochs): the
# crash-state explorer (tests/crash_explore/explore.cc) on a one-thread and a
# two-thread workload, every drain a crash point; then the process-kill test
# with CRASH_KILLS kills per engine and durability on /dev/shm (and a fifth
# of that on the normal disk); then the memory-node explorer
# (tests/crash_explore/memnode_explore.cc) for every engine on memory nodes,
# each seed, two and three nodes, one and two threads, every fence of every
# node a crash point (the explorer gives each engine its small geometry by
# default, so that it merges and splits often: a crash inside a split is
# recovered by a takeover).
# Then the byte-flip test (tests/crash/byte_flip_test.cc) with CRASH_FLIP_SEEDS
# seeds: pools of every pool engine, clean and crashed, with 1, 10 and 100
# flipped bytes, each run through check, info, scan and get (15 seeds: 360
# trials); a signal death, a hang or a refused open that changed the file
# fails it.
# Then the shared-key exploration (durable linearizability: threads on
# common keys, taking turns inside drains, every crash image checked against
# every answer a call gave) for every pool engine and durability, each seed,
# two and three threads on CRASH_SHARED_KEYS keys.
# Everything is appended to CRASH_SUMMARY (JSON lines), and a per-engine
# table (the one in docs/crash-consistency.md) is printed at the end. Reproducers of any
# violation go to CRASH_REPRODUCERS. Exits non-zero on any violation.
#
# Knobs (environment), with their defaults:
#   CRASH_ENGINES=all              engines to explore (names, space-separated)
#   CRASH_SEEDS="1 2 3 4"          workload seeds
#   CRASH_OPS=2000                 operations per thread, one-thread runs
#                                  (two-thread runs: half, per thread)
#   CRASH_GRANULARITIES="cache_line page byte"
#   CRASH_EXHAUSTIVE=6             every subset up to this many dirty lines
#   CRASH_SAMPLES=8                random subsets at larger crash points
#   CRASH_KILLS=1000               process kills per engine (on /dev/shm)
#   CRASH_FLIP_SEEDS=15            byte-flip trials per engine, state and flip count
#   CRASH_MEMNODE_ENGINES=all      engines on memory nodes to explore
#   CRASH_MEMNODE_OPS=3000         operations per thread, one-thread runs
#                                  (two-thread runs: half, per thread)
#   CRASH_SHARED_ENGINES=all       engines for the shared-key exploration
#   CRASH_SHARED_OPS=600           operations per thread there
#   CRASH_SHARED_KEYS=16           shared keys
#   CRASH_SUMMARY=crash-long.jsonl
#   CRASH_REPRODUCERS=crash-reproducers
set -euo pipefail

if [ $# -ne 1 ]; then
  echo "usage: $0 BUILD_DIR   (e.g. $0 build/release)" >&2
  exit 2
fi
build=$1
explore="$build/tests/pmhash-crash-explore"
memnode_explore="$build/tests/pmhash-memnode-crash-explore"
engines=${CRASH_ENGINES:-$("$explore" --list-engines)}
seeds=${CRASH_SEEDS:-1 2 3 4}
ops=${CRASH_OPS:-2000}
granularities=${CRASH_GRANULARITIES:-cache_line page byte}
exhaustive=${CRASH_EXHAUSTIVE:-6}
samples=${CRASH_SAMPLES:-8}
kills=${CRASH_KILLS:-1000}
flip_seeds=${CRASH_FLIP_SEEDS:-15}
memnode_engines=${CRASH_MEMNODE_ENGINES:-$("$memnode_explore" --list-engines)}
memnode_ops=${CRASH_MEMNODE_OPS:-3000}
shared_engines=${CRASH_SHARED_ENGINES:-$engines}
shared_ops=${CRASH_SHARED_OPS:-600}
shared_keys=${CRASH_SHARED_KEYS:-16}
summary=${CRASH_SUMMARY:-crash-long.jsonl}
reproducers=${CRASH_REPRODUCERS:-crash-reproducers}

: > "$summary"
status=0
# run TITLE COMMAND...: prints the title, runs the command, and marks the
# whole run failed when it fails (the other runs still go on).
run() {
  echo "=== $1 ==="
  shift
  if ! "$@"; then status=1; fi
}
# Where every exploration records its summary and reproducers.
record=(--exhaustive "$exhaustive" --samples "$samples" --summary "$summary" --reproducers "$reproducers")

for engine in $engines; do
  for durability in $("$explore" --durabilities "$engine"); do
    for granularity in $granularities; do
      for seed in $seeds; do
        for threads in 1 2; do
          per_thread=$(( threads == 1 ? ops : ops / 2 ))
          run "explore: $engine $durability $granularity seed $seed, $threads thread(s), $per_thread ops each" \
            "$explore" --engine "$engine" --durability "$durability" --granularity "$granularity" \
            --seed "$seed" --threads "$threads" --ops "$per_thread" --keys 300 "${record[@]}"
        done
      done
    done
  done
done

for engine in $shared_engines; do
  for durability in $("$explore" --durabilities "$engine"); do
    for seed in $seeds; do
      for threads in 2 3; do
        run "shared keys: $engine $durability seed $seed, $threads threads, $shared_ops ops each, $shared_keys keys" \
          "$explore" --engine "$engine" --durability "$durability" --shared-keys \
          --seed "$seed" --threads "$threads" --ops "$shared_ops" --keys "$shared_keys" "${record[@]}"
      done
    done
  done
done

kill_filter=""
for engine in $engines; do kill_filter="$kill_filter${kill_filter:+:}*KillTest*/${engine}_*"; done
run "process kills: $kills per engine on /dev/shm, $(( kills / 5 )) on disk" \
  env PMHASH_KILLS="$kills" PMHASH_CRASH_SUMMARY="$(realpath "$summary")" \
  "$build/tests/pmhash-crash-tests" --gtest_filter="$kill_filter"

run "byte flips: $flip_seeds seeds per engine, pool state and flip count" \
  env PMHASH_FLIP_SEEDS="$flip_seeds" "$build/tests/pmhash-crash-tests" --gtest_filter='*ByteFlipTest*'

for engine in $memnode_engines; do
  for nodes in 2 3; do
    for seed in $seeds; do
      for threads in 1 2; do
        per_thread=$(( threads == 1 ? memnode_ops : memnode_ops / 2 ))
        run "memory nodes: $engine on $nodes nodes, seed $seed, $threads thread(s), $per_thread ops each" \
          "$memnode_explore" --engine "$engine" --nodes "$nodes" --seed "$seed" --threads "$threads" \
          --ops "$per_thread" --keys $(( per_thread / 3 + 100 )) "${record[@]}"
      done
    done
  done
done

python3 - "$summary" <<'PY'
import json, sys
rows = {}
for line in open(sys.argv[1]):
    r = json.loads(line)
    name = r["engine"] + " (" + r.get("durability", "strict") + ")"
    if r.get("shared"):
        name = r["engine"] + " (" + r.get("durability", "strict") + ", shared keys)"
    if "nodes" in r:
        name = r["engine"] + " (memory nodes)"
    e = rows.setdefault(name, {"images": 0, "recovery_images": 0, "points": 0, "kills": 0, "violations": 0})
    e["images"] += r.get("images", 0)
    e["recovery_images"] += r.get("recovery_images", 0)
    e["points"] += r.get("explored", 0)
    e["kills"] += r.get("kills", 0)
    e["violations"] += r.get("violations", 0)
print("| engine (durability) | crash points explored | crash images | crashes during recovery | process kills | violations |")
print("|---|---:|---:|---:|---:|---:|")
for name, e in sorted(rows.items()):
    print(f"| {name} | {e['points']:,} | {e['images']:,} | {e['recovery_images']:,} | {e['kills']:,} | {e['violations']} |")
PY
exit $status
