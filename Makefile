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
#   make bench-PROFILE  run the profile PROFILE of bench/profiles.toml
#                    through scripts/bench.sh (`make help` lists them with
#                    one line each; docs/benchmarks.md describes them):
#                    its pmhash-bench runs, its figures, and where they go.
#                    A profile's variables (records, seconds, directories,
#                    parts) are overridden by environment or make variables
#                    of the same name, e.g. make bench-full POOL_DIR=/mnt/pm.
#                    An unknown PROFILE is an error (exit 2) that lists the
#                    profiles. pmhash-bench is the one benchmark program.
#   make results     the profile behind docs/results/README.md, into docs/results
#   make figures     regenerate every figure in docs/results from its JSON:
#                    the plot steps of every profile whose results are
#                    committed (`committed = true` in bench/profiles.toml)
#   make help        the benchmark profiles (make bench-PROFILE)
#   make bench       pmhash-bench's micro workload: clevel against
#                    libcuckoo, repeated, into data/results/micro
#   make costs       the cost account, into docs/results/costs.md: the
#                    ceilings (incl. 8- and 16-byte non-temporal store +
#                    fence, and the page size), then per pool engine and
#                    durability (`pmhash engines --modes pool`) and per
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

# bench-PROFILE is a pattern rule, which .PHONY cannot name (a phony
# target skips the pattern search); no file of that name is ever made.
.PHONY: run test help bootstrap bootstrap-plot build-release build-asan build-tsan \
        build-fuzz bench results figures crash-long \
        costs cluster bench-server \
        fuzz clean

help:
	@echo "make run | test | results | figures | costs | fuzz | crash-long | cluster | bench | bench-server"
	@echo "make bench-PROFILE, one of (bench/profiles.toml):"
	@./scripts/bench.sh --list | sed 's/^/  /'

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

# The YCSB binding's jars come from Maven Central into ~/.m2 on its first
# build (scripts/ycsb.sh --build-only), before the test that runs it.
test: bootstrap
	@for p in release asan tsan fuzz; do echo "=== build: $$p ($$(date -u +%T)) ==="; $(MAKE) build-$$p || exit 1; done
	$(MAKE) bootstrap-plot
	./scripts/ycsb.sh --build-only
	./scripts/test.sh

FUZZ_SECONDS ?= 600
fuzz: build-fuzz
	./scripts/fuzz.sh $(FUZZ_SECONDS)

bench: build-release
	./scripts/bench.sh micro build/release

results: build-release bootstrap-plot
	./scripts/bench.sh results build/release

# pmhash-server against redis-server (scripts/bench-server.sh): redis-benchmark,
# restarts, and YCSB through the project's binding (scripts/ycsb.sh; sizes
# from YCSB_RECORDS, YCSB_OPS, YCSB_THREADS); results in docs/results/server/.
bench-server:
	./scripts/bootstrap.sh bench-server
	$(MAKE) build-release bootstrap-plot
	./scripts/bench-server.sh --build build/release

# Any profile of bench/profiles.toml by its name: bench-full, and one
# profile per engine evaluation (make help). The name is checked before
# anything is built.
bench-%:
	./scripts/bench.sh --check $*
	$(MAKE) build-release bootstrap-plot
	./scripts/bench.sh $* build/release

# The release build of the library and the bench only: the cost account
# needs neither the tests nor the other programs.
costs:
	@command -v perf >/dev/null || { echo "make costs: perf is missing; run scripts/bootstrap.sh costs" >&2; exit 2; }
	cmake --preset release >/dev/null
	cmake --build --preset release --target pmhash-bench pmhash
	./scripts/costs.sh build/release

cluster: build-release
	./scripts/cluster.sh start

crash-long: build-release
	./scripts/crash-long.sh build/release

# The plot steps of the profiles whose results are committed under
# docs/results (`committed = true` in bench/profiles.toml), on the JSON there.
figures: bootstrap-plot
	./scripts/bench.sh --figures

clean:
	rm -rf build
