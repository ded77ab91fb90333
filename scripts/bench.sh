#!/usr/bin/env bash
# Runs one benchmark profile of pmhash-bench (the Makefile's bench targets):
#
#   scripts/bench.sh PROFILE BUILD_DIR [pmhash-bench flags...]
#   scripts/bench.sh --list               the profiles, one line each
#   scripts/bench.sh --figures PROFILE... redraw the profiles' figures from
#                                         the results they hold (make figures)
#
# The profiles are data, in bench/profiles.toml (each profile's runs:
# engines, workloads, records, threads, seconds and other flags; its
# figures; where its results go); bench/run_profile.py runs them. Extra
# arguments go to every pmhash-bench run of the profile, after its own
# flags. Each profile's variables (records, seconds, directories, parts)
# are overridden by environment variables of the same name, e.g.
#   DALI_RECORDS=200000 scripts/bench.sh dali build/release
# docs/benchmarks.md describes every profile.
set -euo pipefail
cd "$(dirname "$0")/.."
exec python3 bench/run_profile.py "$@"
