# The two set-up commands of the README. Both install missing Debian packages
# first (scripts/bootstrap.sh), so they work on a fresh Debian 12 machine.
#   make run   build release and run the main job (load 1M keys, read back)
#   make test  build release, asan and tsan, run every test in each

.PHONY: run test bootstrap build-release build-asan build-tsan bench clean

bootstrap:
	./scripts/bootstrap.sh

build-release: bootstrap
	cmake --preset release >/dev/null
	cmake --build --preset release

build-asan: bootstrap
	cmake --preset asan >/dev/null
	cmake --build --preset asan

build-tsan: bootstrap
	cmake --preset tsan >/dev/null
	cmake --build --preset tsan

run: build-release
	./scripts/run.sh build/release

test: build-release build-asan build-tsan
	./scripts/test.sh

bench: build-release
	./build/release/bench/pmhash-microbench

clean:
	rm -rf build
