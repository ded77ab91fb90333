#!/usr/bin/env bash
# Benchmark profiles of pmhash-bench, each one command (see the Makefile):
#
#   scripts/bench.sh quick   BUILD_DIR   (make run)       about 2 minutes
#   scripts/bench.sh results BUILD_DIR   (make results)   docs/results/README.md's tables
#   scripts/bench.sh full    BUILD_DIR   (make bench-full) paper-sized
#   scripts/bench.sh dali    BUILD_DIR   (make bench-dali) dali against its
#                                        peers, about 14 minutes
#   scripts/bench.sh nehash  BUILD_DIR   (make bench-nehash) the NEHASH
#                                        paper's evaluation, about 12 minutes
#   scripts/bench.sh pmeh    BUILD_DIR   (make bench-pmeh) pmeh's runs of
#                                        docs/design/pmeh.md §13.4
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
#         fdatasync, docs/persistence.md): dali with epoch durability
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
#
# The nehash profile (the nehash engine's issue; the NEHASH paper, sec. 6):
# 8-byte keys and values, pools in SHM_DIR (default /dev/shm) with
# cache_line granularity, strict durability, nehash against clevel (and
# pmeh in the ycsb part), in three parts:
#
#   ycsb    workloads nehash-a, nehash-b, nehash-g (50, 95 and 5% reads, the
#           rest inserts of new keys, uniform) at 1 and 2 threads;
#           NEHASH_RECORDS (default 2000000) records loaded, as many
#           operations run.
#   sweep   nehash with bucket-directory bits 1, 2, 4, 6, 8, 10 (sec. 6.2)
#           and clevel for reference, workload read at 1 and 2 threads: the
#           load phase is the insert throughput, the run the search
#           throughput; with --reopen, so that the open time is also seen
#           against the number of groups at a fixed key count.
#           NEHASH_SWEEP_RECORDS (default 1000000).
#   open    --reopen after loading each of NEHASH_OPEN_RECORDS (default
#           "1000000 10000000") keys at 2 threads: the open time after a
#           clean close and after a crash (a copy of the open, quiescent
#           pool), keys, groups and heap bytes per key.
#
# into docs/results/nehash/{ycsb,sweep,open-N}.{json,csv}, and figures in
# docs/results/nehash/: throughput.png, scaling.png, latency_cdf.png and
# op_latency_cdf.png (insert latency in nehash-g, search latency in
# nehash-b, p99 marked) from ycsb; bucket_bits.png from sweep; open_time.png
# from the open files and sweep.
#
# The pmeh profile (the pmeh engine's issue; docs/design/pmeh.md §13.4):
# 8-byte keys and values, pools in SHM_DIR (default /dev/shm), cache_line,
# strict, pmeh against clevel and nehash, in five parts:
#
#   uniform  workloads insert, read, delete (uniform) at 1 and 2 threads;
#            PMEH_RECORDS (default 200000) records, run phases of
#            PMEH_SECONDS (default 2) seconds.
#   skewed   workloads update, read, a with zipfian keys (0.99), pmeh with
#            the opportunistic switch on and off ("pmeh switch=on/off"); then
#            update and a for pmeh alone with 8 owner threads (skewed-w8),
#            where the switch has overloaded owners to relieve.
#   owners   workload a (uniform) at 2 threads: pmeh with one owner thread,
#            with two, and with two and delegated reads (three files).
#   movement load PMEH_MOVE_RECORDS (default "1000000") keys at 2 threads
#            into pmeh with k = 1, 2, 3 and into nehash: slots moved per
#            inserted key against 1.44/k, heap bytes per key, load factor.
#   step     workload insert (PMEH_STEP_RECORDS, default 200000, loaded and
#            as many inserted) at one thread, split step B = 0, 1, 4, 16:
#            the insert latency of gradual splits.
#   open     --reopen after loading each of PMEH_OPEN_RECORDS (default
#            "1000000 3000000") keys at 2 threads, pmeh, clevel and nehash:
#            the open time after a clean close and after a crash (a copy of
#            the open, quiescent pool), expected flat in the keys for pmeh.
#   kill     for each of PMEH_KILL_RECORDS (default "200000 1000000") keys N,
#            pmeh, clevel and nehash: `pmhash load` N/2 records (16-byte
#            keys, 2 threads), start loading more and SIGKILL it after
#            PMEH_KILL_AFTER (default 1) seconds, then `pmhash info` (crash
#            recovery) and `pmhash check`: kill.csv has the keys and the
#            open and recovery time of each.
#
# into docs/results/pmeh/{uniform,skewed,owners-*,movement-N,step,open-N}.{json,csv}
# and kill.csv,
# and figures in docs/results/pmeh/: throughput.png, scaling.png,
# latency_cdf.png (uniform, in uniform/), the same for skewed (in skewed/),
# data_movement.png, split_step.png and open_time.png. PMEH_PARTS (default
# "uniform skewed owners movement step open kill") chooses the parts. On the
# project's 2-core VM pmeh loads about 0.3M keys/s (every write is handed
# to an owner thread; callers and owners share the 2 cores), so the
# defaults take about 9 minutes; 10M keys take pmeh about half a minute
# each, so adding 10000000 to PMEH_OPEN_RECORDS and PMEH_MOVE_RECORDS (four
# loads) adds about 5 minutes (docs/results/README.md has both).
set -euo pipefail

if [ $# -lt 2 ]; then
  echo "usage: $0 quick|results|full|dali|nehash|pmeh BUILD_DIR [pmhash-bench flags...]" >&2
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
  nehash)
    out=docs/results/nehash
    ;;
  pmeh)
    out=docs/results/pmeh
    ;;
  *)
    echo "$0: unknown profile '$profile' (quick, results, full, dali, nehash or pmeh)" >&2
    exit 2
    ;;
esac

for program in "$bench" "$python" "$build/pmhash"; do
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

if [ "$profile" = nehash ]; then
  records=${NEHASH_RECORDS:-2000000}
  sweep_records=${NEHASH_SWEEP_RECORDS:-1000000}
  open_records=${NEHASH_OPEN_RECORDS:-1000000 10000000}
  shm_dir=${SHM_DIR:-/dev/shm}
  # nehash against clevel, and in the ycsb part against pmeh too (named: it
  # need not be in --list-engines).
  engines=nehash,clevel
  ycsb_engines=$engines,pmeh
  common=(--key-size 8 --value-size 8 --pool "$shm_dir" --granularity cache_line
          --durability strict)
  echo "bench.sh: nehash, part 1 of 3: workloads nehash-a/b/g, $records records, engines $ycsb_engines"
  "$bench" "${common[@]}" --engine "$ycsb_engines" --workload nehash-a,nehash-b,nehash-g \
    --threads 1,2 --records "$records" \
    --json "$out/ycsb.json" --csv "$out/ycsb.csv" "$@"
  echo "bench.sh: nehash, part 2 of 3: bucket-directory bits 1-10, $sweep_records records"
  "$bench" "${common[@]}" --engine nehash,clevel -o nehash.bucket_bits=1,2,4,6,8,10 \
    --workload read --threads 1,2 --records "$sweep_records" --reopen --no-ceilings \
    --json "$out/sweep.json" --csv "$out/sweep.csv" "$@"
  open_files=()
  rm -f "$out"/open-*.json "$out"/open-*.csv
  for n in $open_records; do
    echo "bench.sh: nehash, part 3 of 3: open time after loading $n keys"
    "$bench" "${common[@]}" --engine "$engines" --workload load --threads 2 \
      --records "$n" --reopen --no-ceilings \
      --json "$out/open-$n.json" --csv "$out/open-$n.csv" "$@"
    open_files+=("$out/open-$n.json")
  done
  "$python" bench/plot.py --out "$out" --figures throughput,scaling,latency_cdf,op_latency_cdf \
    "$out/ycsb.json"
  "$python" bench/plot.py --out "$out" --figures bucket_bits "$out/sweep.json"
  "$python" bench/plot.py --out "$out" --figures open_time "${open_files[@]}" "$out/sweep.json"
  echo "bench.sh: nehash profile: results in $out/{ycsb,sweep,open-*}.{json,csv}, figures in $out/"
  exit 0
fi

if [ "$profile" = pmeh ]; then
  records=${PMEH_RECORDS:-200000}
  seconds=${PMEH_SECONDS:-2}
  move_records=${PMEH_MOVE_RECORDS:-1000000}
  step_records=${PMEH_STEP_RECORDS:-200000}
  open_records=${PMEH_OPEN_RECORDS:-1000000 3000000}
  parts=${PMEH_PARTS:-uniform skewed owners movement step open kill}
  kill_records=${PMEH_KILL_RECORDS:-200000 1000000}
  kill_after=${PMEH_KILL_AFTER:-1}
  cli=$build/pmhash
  shm_dir=${SHM_DIR:-/dev/shm}
  common=(--key-size 8 --value-size 8 --pool "$shm_dir" --granularity cache_line
          --durability strict)
  for part in $parts; do
    case "$part" in
      uniform)
        echo "bench.sh: pmeh uniform: insert/read/delete, $records records"
        "$bench" "${common[@]}" --engine pmeh,clevel,nehash --workload insert,read,delete \
          --distribution uniform --threads 1,2 --records "$records" --duration "$seconds" \
          --json "$out/uniform.json" --csv "$out/uniform.csv" "$@"
        "$python" bench/plot.py --out "$out/uniform" --figures throughput,scaling,latency_cdf \
          "$out/uniform.json"
        ;;
      skewed)
        echo "bench.sh: pmeh skewed: update/read/a, zipfian 0.99, switch on and off"
        "$bench" "${common[@]}" --engine pmeh,clevel,nehash -o pmeh.opportunistic=on,off \
          --workload update,read,a --distribution zipfian --zipf 0.99 --threads 1,2 \
          --records "$records" --duration "$seconds" \
          --json "$out/skewed.json" --csv "$out/skewed.csv" "$@"
        "$python" bench/plot.py --out "$out/skewed" --figures throughput,scaling,latency_cdf \
          "$out/skewed.json"
        # With the default W (one owner on 2 cores) no owner can carry more
        # than its fair share, so the switch has nothing to do; with 8 owners
        # the hot keys' zones overload theirs and are switched to SHARED.
        echo "bench.sh: pmeh skewed: update/a, zipfian 0.99, 8 owner threads, switch on and off"
        "$bench" "${common[@]}" --engine pmeh -o pmeh.opportunistic=on,off -o pmeh.workers=8 \
          --workload update,a --distribution zipfian --zipf 0.99 --threads 1,2 \
          --records "$records" --duration "$seconds" --no-ceilings \
          --json "$out/skewed-w8.json" --csv "$out/skewed-w8.csv" "$@"
        ;;
      owners)
        echo "bench.sh: pmeh owners: workload a with W = 1, W = 2, W = 2 and delegated reads"
        for variant in w1 w2 w2-delegate-reads; do
          flags=(-o "pmeh.workers=${variant:1:1}")
          if [ "$variant" = w2-delegate-reads ]; then flags+=(-o pmeh.delegate_reads=true); fi
          "$bench" "${common[@]}" --engine pmeh "${flags[@]}" --workload a \
            --distribution uniform --threads 2 --records "$records" --duration "$seconds" \
            --no-ceilings --json "$out/owners-$variant.json" --csv "$out/owners-$variant.csv" "$@"
        done
        ;;
      movement)
        move_files=()
        rm -f "$out"/movement-*.json "$out"/movement-*.csv
        for n in $move_records; do
          echo "bench.sh: pmeh movement: load $n keys, k = 1, 2, 3 and nehash"
          "$bench" "${common[@]}" --engine pmeh,nehash -o pmeh.split_bits=1,2,3 --workload load \
            --threads 2 --records "$n" --no-ceilings \
            --json "$out/movement-$n.json" --csv "$out/movement-$n.csv" "$@"
          move_files+=("$out/movement-$n.json")
        done
        "$python" bench/plot.py --out "$out" --figures data_movement "${move_files[@]}"
        ;;
      step)
        echo "bench.sh: pmeh step: insert latency, split step B = 0, 1, 4, 16"
        "$bench" "${common[@]}" --engine pmeh -o pmeh.split_step=0,1,4,16 --workload insert \
          --threads 1 --records "$step_records" --ops "$step_records" --no-ceilings \
          --json "$out/step.json" --csv "$out/step.csv" "$@"
        "$python" bench/plot.py --out "$out" --figures split_step "$out/step.json"
        ;;
      open)
        open_files=()
        rm -f "$out"/open-*.json "$out"/open-*.csv
        for n in $open_records; do
          echo "bench.sh: pmeh open: open time after loading $n keys"
          "$bench" "${common[@]}" --engine pmeh,clevel,nehash --workload load --threads 2 \
            --records "$n" --reopen --no-ceilings \
            --json "$out/open-$n.json" --csv "$out/open-$n.csv" "$@"
          open_files+=("$out/open-$n.json")
        done
        "$python" bench/plot.py --out "$out" --figures open_time "${open_files[@]}"
        ;;
      kill)
        echo "engine,records_loaded,items_after_crash,open_ns,recovery_ns,clean_shutdown" \
          > "$out/kill.csv"
        pool=$shm_dir/pmhash-bench-kill-$$.pool
        for n in $kill_records; do
          for engine in pmeh clevel nehash; do
            echo "bench.sh: pmeh kill: $engine, $((n / 2)) keys loaded, SIGKILL during a further load"
            size=$(( n * 800 > (1 << 30) ? n * 800 : (1 << 30) ))
            load=(--threads 2 --key-size 16 --value-size 8)
            "$cli" create "$pool" --engine "$engine" --size "$size" --force
            "$cli" load "$pool" "${load[@]}" --records $((n / 2)) --seed 1 >/dev/null
            # More than any engine inserts before the kill: it is still loading.
            "$cli" load "$pool" "${load[@]}" --records $((n * 10)) --seed 2 >/dev/null 2>&1 &
            loader=$!
            sleep "$kill_after"
            kill -KILL "$loader" 2>/dev/null || true
            wait "$loader" 2>/dev/null || true
            "$cli" info "$pool" --json > "$pool.info"
            "$cli" check "$pool" >/dev/null
            "$python" - "$engine" $((n / 2)) "$pool.info" >> "$out/kill.csv" <<'PY'
import json, sys
engine, loaded, path = sys.argv[1], sys.argv[2], sys.argv[3]
info = json.load(open(path))
print(f"{engine},{loaded},{info['items']},{info['open_ns']},{info['recovery_ns']},"
      f"{str(info['clean_shutdown']).lower()}")
PY
            rm -f "$pool" "$pool.info"
          done
        done
        column -s, -t < "$out/kill.csv"
        ;;
      *)
        echo "bench.sh: unknown pmeh part '$part' (uniform skewed owners movement step open kill)" >&2
        exit 2
        ;;
    esac
  done
  echo "bench.sh: pmeh profile: results and figures in $out/"
  exit 0
fi

"$bench" "${args[@]}" --pool "$pool_dir" --granularity cache_line \
  --json "$out/$name.json" --csv "$out/$name.csv" "$@"
"$python" bench/plot.py --out "$out" "$out/$name.json"
echo "bench.sh: $profile profile: results in $out/$name.json, figures in $out/"
