# The two set-up commands of the README. Both install missing Debian packages
# first (scripts/bootstrap.sh), so they work on a fresh Debian 12 machine.
# No other target installs anything: on a fresh machine run `make bootstrap`
# (Debian packages) once before them; the benchmark targets that plot also
# need `make bootstrap-plot` (matplotlib in .venv, from PyPI), which they call.
#   make run         build release and run the main job: a 2-minute benchmark
#                    profile (every pmhash engine, libcuckoo and LMDB on
#                    Load/A/B/C), its figures, and a load/reopen/read-back check
#   make test        build release, asan and tsan, run every test in each;
#                    build the fuzz target and fuzz it for a minute
# Benchmarks (docs/benchmarks.md):
#   make bench-full  the paper-sized profile, every engine and peer
#   make results     the profile behind docs/results/README.md, into docs/results
#   make bench-dali  dali (epochs) against LMDB and RocksDB on a disk file
#                    (page granularity) and against clevel in /dev/shm, YCSB
#                    load/A/B/C and transactions (3 reads + 1 update), into
#                    docs/results/dali (about 14 minutes; DALI_RECORDS,
#                    DALI_SECONDS, POOL_DIR: scripts/bench.sh)
#   make bench-nehash the NEHASH paper's evaluation (8-byte keys and values,
#                    /dev/shm, cache_line): workloads nehash-a/b/g at 1 and 2
#                    threads against clevel and pmeh; the bucket-directory bits sweep
#                    1-10 (insert and search); open time after a clean close
#                    and after a crash at 1M and 10M keys; into
#                    docs/results/nehash (about 12 minutes; NEHASH_RECORDS,
#                    NEHASH_SWEEP_RECORDS, NEHASH_OPEN_RECORDS, SHM_DIR:
#                    scripts/bench.sh)
#   make bench-pmeh  pmeh's runs (docs/design/pmeh.md §13.4; 8-byte keys and
#                    values, /dev/shm, cache_line): insert/read/delete
#                    uniform and update/read/a zipfian with the switch on
#                    and off against clevel and nehash at 1 and 2 threads;
#                    owner threads and delegated reads; data movement for
#                    k = 1, 2, 3 and nehash; split-step latency B = 0, 1, 4,
#                    16; open time at 1M and 3M keys (10M: set
#                    PMEH_OPEN_RECORDS) and after SIGKILL during a load; into
#                    docs/results/pmeh (about 9 minutes; PMEH_RECORDS,
#                    PMEH_SECONDS, PMEH_MOVE_RECORDS, PMEH_STEP_RECORDS,
#                    PMEH_OPEN_RECORDS, PMEH_KILL_RECORDS, PMEH_PARTS, SHM_DIR:
#                    scripts/bench.sh)
#   make bench-sephash  sephash and race (the RACE-hashing baseline) on two
#                    memory nodes with 1, 2 and 4 client
#                    processes: insert, read, YCSB A/B/C over shm (0 and
#                    2000 ns injected latency) and tcp loopback, into
#                    docs/results/sephash/runs.{json,csv,txt} (SEPHASH_RECORDS,
#                    default 200000)
# Every bench target above runs a profile of bench/profiles.toml through
# scripts/bench.sh, and pmhash-bench is the one benchmark program.
#   make figures     regenerate every figure in docs/results from its JSON
#   make bench       pmhash-bench's micro workload: clevel against
#                    libcuckoo, repeated, into data/results/micro
#   make costs       the cost account, into docs/results/costs.md: the
#                    ceilings (incl. 8- and 16-byte non-temporal store +
#                    fence, and the page size), then per engine (clevel,
#                    nehash, pmeh strict; dali strict and epoch) and per
#                    phase of pmhash-bench --preset peers-8b: Mops/s, ns/op
#                    per thread, flushes and fences per op, bytes per key,
#                    the top 5 functions of a perf record (cpu-clock) of
#                    the phase, hardware counters where perf stat has them
#                    (about 10 minutes; COSTS_RECORDS (default 1000000),
#                    SHM_DIR, COSTS_HUGE_DIR (a huge=advise tmpfs: adds
#                    huge pages against /dev/shm): scripts/costs.sh).
#                    Needs linux-perf: scripts/bootstrap.sh costs.
#                    The peers' shape by hand: pmhash-bench --preset
#                    peers-8b (flags after it override it, e.g. --records
#                    1000000; --sequence runs the workloads one after
#                    another on one store)
# Fuzzing (docs/fuzzing.md):
#   make fuzz        every fuzz target for FUZZ_SECONDS each (default 600;
#                    clang, ASan + UBSan, build/fuzz): Store::open on damaged
#                    pools, a memory node's request handling, the tcp
#                    client's reply parsing, pmhash-server's RESP parser
#                    (scripts/fuzz.sh)
# The Redis-protocol server (docs/server.md):
#   make cluster     three pmhash-servers (pools in ./data/cluster) behind
#                    nutcracker on 127.0.0.1:22121; scripts/cluster.sh has
#                    the shapes and flags, `scripts/cluster.sh stop` ends it
# Crash checking (docs/crash-consistency.md):
#   make crash-long  the crash checker at length for every engine (hours;
#                    knobs in scripts/crash-long.sh)

.PHONY: run test bootstrap bootstrap-plot build-release build-asan build-tsan \
        build-fuzz bench bench-full bench-dali bench-nehash bench-pmeh bench-sephash results figures crash-long \
        costs cluster \
        fuzz clean

bootstrap:
	./scripts/bootstrap.sh

bootstrap-plot:
	./scripts/bootstrap-plot.sh

build-release:
	cmake --preset release >/dev/null
	cmake --build --preset release

build-asan:
	cmake --preset asan >/dev/null
	cmake --build --preset asan

build-tsan:
	cmake --preset tsan >/dev/null
	cmake --build --preset tsan

build-fuzz:
	cmake --preset fuzz >/dev/null
	cmake --build --preset fuzz

run: bootstrap
	$(MAKE) build-release bootstrap-plot
	./scripts/run.sh build/release

test: bootstrap
	$(MAKE) build-release build-asan build-tsan build-fuzz bootstrap-plot
	./scripts/test.sh

FUZZ_SECONDS ?= 600
fuzz: build-fuzz
	./scripts/fuzz.sh $(FUZZ_SECONDS)

bench: build-release
	./scripts/bench.sh micro build/release

bench-full: build-release bootstrap-plot
	./scripts/bench.sh full build/release

results: build-release bootstrap-plot
	./scripts/bench.sh results build/release

bench-dali: build-release bootstrap-plot
	./scripts/bench.sh dali build/release

bench-nehash: build-release bootstrap-plot
	./scripts/bench.sh nehash build/release

bench-pmeh: build-release bootstrap-plot
	./scripts/bench.sh pmeh build/release

# The release build of the library and the bench only: the cost account
# needs neither the tests nor the other programs.
costs:
	@command -v perf >/dev/null || { echo "make costs: perf is missing; run scripts/bootstrap.sh costs" >&2; exit 2; }
	cmake --preset release >/dev/null
	cmake --build --preset release --target pmhash-bench
	./scripts/costs.sh build/release

SEPHASH_RECORDS ?= 200000
bench-sephash: build-release bootstrap-plot
	SEPHASH_RECORDS=$(SEPHASH_RECORDS) ./scripts/bench.sh sephash build/release

cluster: build-release
	./scripts/cluster.sh start

crash-long: build-release
	./scripts/crash-long.sh build/release

# The plot steps of the profiles whose results are committed under
# docs/results (bench/profiles.toml), on the JSON there.
figures: bootstrap-plot
	./scripts/bench.sh --figures results dali nehash pmeh sephash

clean:
	rm -rf build
