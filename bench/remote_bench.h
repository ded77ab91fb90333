// bench/remote_bench.h - pmhash-bench's runs of the engines that live on
// memory nodes (Store::remote_engines()), with client processes
// (bench/remote_bench.cc).
//
//   pmhash-bench --engine sephash,race --transport shm,tcp --latency-ns 0,2000
//                --threads 1,2,4 --workload insert,read,a,b,c
//                --records 200000 --key-size 8 --value-size 8
//
// The driver (bench.cc) sends a run here when its engines are memory-node
// engines, and hands over the common flags: --engine, --threads (client
// processes, one per thread count), --workload (insert, read, a, b, c),
// --records, --ops, --key-size, --value-size, --pool (the directory of the
// nodes' files), --seed, --json, --csv. The flags below are the runs' own.
//
// JSON: the pmhash-bench/1 document (report.h) with one run per engine,
// transport, latency, client count and workload:
//   { engine, series, kind "memnode", threads (clients), clients,
//     transport, latency_ns, workload, durability "strict",
//     load: PHASE for insert (the timed load), else null,
//     run: PHASE for the other workloads, else null }
//   PHASE: ops, seconds, ops_per_s, round_trips_per_op, verbs_per_op,
//     bytes_per_op, merges, splits, split_bytes, split_bytes_per_split,
//     freed_bytes, reused_bytes, new_bytes
// CSV: the columns bench/plot/remote.py reads (engine, transport,
// latency_ns, clients, workload, ops, mops, ...).
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>
#include <vector>

namespace pmhash::bench {

// The runs' own flags.
struct RemoteFlags {
  std::vector<std::string> transports = {"shm"};
  std::vector<unsigned> latencies = {0};
  unsigned nodes = 2;
  std::uint64_t node_size = std::uint64_t{1} << 30;
  // tcp: the nodes' secret file (their authentication in the bootstrap is
  // then part of each connection's setup); empty: none.
  std::string secret_file;
};

void add_remote_options(CLI::App& app, RemoteFlags* flags);

struct RemoteConfig {
  RemoteFlags flags;
  std::vector<std::string> engines;
  std::vector<unsigned> clients = {1, 2, 4};
  std::vector<std::string> workloads = {"insert", "read", "a", "b", "c"};
  std::uint64_t records = 200000;
  std::uint64_t ops = 0;  // 0: records
  std::size_t key_size = 8;
  std::size_t value_size = 8;
  std::string dir = "/dev/shm";
  std::uint64_t seed = 1;
  std::string csv_path;
  std::string json_path;
  std::string command;  // the command line, for the JSON
  // -o NAME=VALUE of the driver: engine options of every store (one value
  // each; sweeps are for the pool engines' runs).
  std::vector<std::string> engine_options;
};

// True when `engine` (optionally NAME:MODE) lives on memory nodes.
bool is_remote_engine(const std::string& engine);

// Runs every combination; 0 when all passed, 1 after a failure, 2 for a
// bad flag (each printed on stderr).
int run_remote(const RemoteConfig& config);

}  // namespace pmhash::bench
