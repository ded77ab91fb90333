// bench/microbench.h - the workload "micro" of pmhash-bench
// (bench/microbench.cc): five phases back to back on one shared table, a
// pmhash store against libcuckoo, repeated.
//
//   pmhash-bench --workload micro --engine ENGINE,libcuckoo --threads 1,2
//                --records 2000000 [--repeat 3] [-o NAME=VALUE] [--json micro.json]
//
// The driver (bench.cc) hands it the common flags (--engine: one pmhash
// engine, with libcuckoo in the list for the comparison; --threads,
// --records, --key-size, --value-size, --pool, --granularity, --seed,
// --no-check, --json, --csv) and the engine options (-o NAME=VALUE, as for
// every workload: a comma list of values is a sweep, one series of stores
// per value, named by the option and the value); the flags below are the
// workload's own.
//
// JSON: the pmhash-bench/1 document (report.h) with config.workloads
// ["micro"] and one run per series, table, thread count and repetition:
//   { engine, series, options (every option of the engine and its value,
//     as the table driver writes them; null for libcuckoo), kind ("pmhash"
//     or "peer"), threads, workload "micro", repetition, durability,
//     initial_slots, pool_size (pmhash), load: null, run: null,
//     phases: [ { name (insert, search (found), search (absent), update,
//                 delete), ops, seconds, ops_per_s, and for pmhash
//                 flushes_per_op, fences_per_op, resize_tail_s } ],
//     after_insert: { items, slots, load_factor, levels, expansions,
//                     items_moved } (pmhash) or null }
// A libcuckoo run's series is "libcuckoo"; each pmhash run is compared with
// the libcuckoo run of its repetition that started with as many slots.
// CSV: one line per run and phase.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace pmhash::bench {

// The workload's own flags.
struct MicroFlags {
  unsigned repeat = 3;
  std::uint64_t pool_size = 0;  // 0: derived from records and sizes
};

void add_micro_options(CLI::App& app, MicroFlags* flags);

// One configuration of the pmhash store: its engine options (by full
// name, in the order given) and the series it is reported as (the engine,
// and the values a sweep chose).
struct MicroSeries {
  std::string name;
  std::vector<std::pair<std::string, std::string>> options;
};

struct MicroConfig {
  std::vector<unsigned> threads = {1, 2};
  std::uint64_t records = 2'000'000;
  std::size_t key_size = 16;
  std::size_t value_size = 16;
  std::string engine;  // the driver gives one; empty: the default pool engine
  // Measured in this order in every repetition; empty: one series of the
  // engine with its default options.
  std::vector<MicroSeries> series;
  // -o as given, for the JSON's config.
  std::vector<std::string> engine_options;
  std::string pool_dir = "/dev/shm";
  std::uint64_t pool_size = 0;  // 0: derived from records and sizes
  std::string granularity = "cache_line";
  std::uint64_t seed = 1;
  bool check = true;
  bool libcuckoo = true;
  unsigned repeat = 3;
  std::string json_path;
  std::string csv_path;
  std::string command;  // the command line, for the JSON
};

// Runs the workload; 0 when every check passed, 1 after a failure (printed
// on stderr).
int run_micro(MicroConfig config);

}  // namespace pmhash::bench
