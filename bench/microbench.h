// bench/microbench.h - the workload "micro" of pmhash-bench
// (bench/microbench.cc): five phases back to back on one shared table, a
// pmhash store against libcuckoo, repeated.
//
//   pmhash-bench --workload micro --engine clevel,libcuckoo --threads 1,2
//                --records 2000000 [--repeat 3] [--json micro.json]
//
// The driver (bench.cc) hands it the common flags (--engine: one pmhash
// engine, with libcuckoo in the list for the comparison; --threads,
// --records, --key-size, --value-size, --pool, --granularity, --seed,
// --no-check, --json, --csv); the flags below are the workload's own.
//
// JSON: the pmhash-bench/1 document (report.h) with config.workloads
// ["micro"] and one run per table, thread count and repetition:
//   { engine, series, kind ("pmhash" or "peer"), threads, workload "micro",
//     repetition, durability, load: null, run: null,
//     phases: [ { name (insert, search (found), search (absent), update,
//                 delete), ops, seconds, ops_per_s, and for pmhash
//                 flushes_per_op, fences_per_op, resize_tail_s } ],
//     after_insert: { items, slots, load_factor, levels, expansions,
//                     items_moved } (pmhash) or null }
// CSV: one line per run and phase.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>
#include <vector>

namespace pmhash::bench {

// The workload's own flags.
struct MicroFlags {
  unsigned initial_level_log2 = 10;
  unsigned repeat = 3;
  bool tag_filter = true;
  std::uint64_t pool_size = 0;  // 0: derived from records and sizes
};

void add_micro_options(CLI::App& app, MicroFlags* flags);

struct MicroConfig {
  std::vector<unsigned> threads = {1, 2};
  std::uint64_t records = 2'000'000;
  std::size_t key_size = 16;
  std::size_t value_size = 16;
  std::string engine = "clevel";
  std::string pool_dir = "/dev/shm";
  std::uint64_t pool_size = 0;  // 0: derived from records and sizes
  std::string granularity = "cache_line";
  unsigned initial_level_log2 = 10;
  std::uint64_t seed = 1;
  bool check = true;
  bool libcuckoo = true;
  unsigned repeat = 3;
  bool tag_filter = true;
  std::string json_path;
  std::string csv_path;
  std::string command;  // the command line, for the JSON
};

// Runs the workload; 0 when every check passed, 1 after a failure (printed
// on stderr).
int run_micro(MicroConfig config);

}  // namespace pmhash::bench
