#!/usr/bin/env bash
# Installs the Debian packages pmhash needs to build, test and benchmark.
# Idempotent: only packages that are missing are installed, so a second run
# costs one dpkg query.
#
#   scripts/bootstrap.sh         what make run and make test need
#   scripts/bootstrap.sh costs   that, and perf (linux-perf) for make costs
#   scripts/bootstrap.sh bench-server
#                                that, and redis-server, the peer of make
#                                bench-server (its service is not started:
#                                the benchmark starts its own servers)
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config
  libpmem2-dev liburcu-dev libxxhash-dev
  # Memory-node authentication (src/remote/handshake.cc).
  libsodium-dev
  libgtest-dev libbenchmark-dev libcli11-dev nlohmann-json3-dev
  libcuckoo-dev libtbb-dev liblmdb-dev librocksdb-dev
  python3 python3-venv
  # ip netns: the sephash tests run memory nodes and clients in network
  # namespaces of their own.
  iproute2
  # The fuzz build (tests/fuzz): clang, and the runtime behind
  # -fsanitize=fuzzer,address,undefined, which clang only recommends.
  clang libclang-rt-14-dev
  # pmhash-server's tests speak to it with the real Redis tools (redis-cli)
  # and through the twemproxy proxy (nutcracker).
  redis-tools nutcracker
  # The YCSB binding (bench/ycsb, scripts/ycsb.sh): built with Maven, run by
  # make test against pmhash-server and by make bench-server.
  default-jdk-headless maven
)
if [ "${1:-}" = costs ]; then
  # make costs (scripts/costs.sh): perf record and perf stat.
  packages+=(linux-perf)
fi
if [ "${1:-}" = bench-server ]; then
  packages+=(redis-server)
fi

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
    missing+=("$p")
  fi
done

if [ "${#missing[@]}" -eq 0 ]; then
  exit 0
fi

echo "bootstrap: installing ${missing[*]}" >&2
sudo_cmd=()
if [ "$(id -u)" -ne 0 ]; then sudo_cmd=(sudo); fi
export DEBIAN_FRONTEND=noninteractive
"${sudo_cmd[@]}" apt-get update -qq
"${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
