# The two set-up commands of the README. Both install missing Debian packages
# first (scripts/bootstrap.sh), so they work on a fresh Debian 12 machine.
#   make run         build release and run the main job: a 2-minute benchmark
#                    profile (every pmhash engine, libcuckoo and LMDB on
#                    Load/A/B/C), its figures, and a load/reopen/read-back check
#   make test        build release, asan and tsan, run every test in each
# Benchmarks (results and figures: see README, "Benchmarks"):
#   make bench-full  the paper-sized profile, every engine and peer
#   make results     the profile behind the README's tables, into docs/results
#   make figures     regenerate every figure in docs/results from its JSON
#   make bench       pmhash-microbench, pmhash against libcuckoo, repeated

.PHONY: run test bootstrap bootstrap-plot build-release build-asan build-tsan \
        bench bench-full results figures clean

bootstrap:
	./scripts/bootstrap.sh

bootstrap-plot: bootstrap
	./scripts/bootstrap-plot.sh

build-release: bootstrap
	cmake --preset release >/dev/null
	cmake --build --preset release

build-asan: bootstrap
	cmake --preset asan >/dev/null
	cmake --build --preset asan

build-tsan: bootstrap
	cmake --preset tsan >/dev/null
	cmake --build --preset tsan

run: build-release bootstrap-plot
	./scripts/run.sh build/release

test: build-release build-asan build-tsan
	./scripts/test.sh

bench: build-release
	./build/release/bench/pmhash-microbench

bench-full: build-release bootstrap-plot
	./scripts/bench.sh full build/release

results: build-release bootstrap-plot
	./scripts/bench.sh results build/release

figures: bootstrap-plot
	.venv/bin/python bench/plot.py --out docs/results docs/results/*.json

clean:
	rm -rf build
