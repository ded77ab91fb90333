// bench/report.h - what pmhash-bench writes: the table on stdout, the JSON
// document (format "pmhash-bench/1", read by bench/plot) and the CSV.
//
// JSON layout (every number in base units: seconds, ns, bytes, ops/s):
//
//   { "format": "pmhash-bench/1", "command", "git_revision", "started_at",
//     "machine": { hostname, cpu_model, cores, memory_bytes, kernel, os },
//     "config":  { workloads, records, ops, duration_s, distribution, zipf,
//                  key_size, value_size, pool_dir, granularity, durability,
//                  seed, threads, engines },
//     "ceilings": [ { threads, granularity, region, region_bytes,
//                     dependent_reads_per_s, independent_reads_per_s,
//                     persists_per_s, nt_persists_per_s and
//                     nt16_persists_per_s (null where not measured),
//                     seq_read_bytes_per_s, seq_write_bytes_per_s,
//                     huge_page_fraction, page_size } ],
//     "runs": [ { engine, series (the engine, and in a sweep of engine
//                 options the swept values: "ENGINE split_bits=2 opportunistic=off"),
//                 kind, durability,
//                 durability_mode (strict, epoch or none), threads, workload,
//                 distribution, options (a pmhash engine: every option of
//                 the engine, keyed by its name with the dot as an
//                 underscore, "ENGINE_OPTION", valued as its type: number
//                 or boolean; peers: null),
//                 load: PHASE, run: PHASE or null, reopen: REOPEN or null,
//                 sequence_step (--sequence: 0 for the load, then 1, 2, ...
//                 for the run phases on the same store, in order; every
//                 run of a store repeats its load; else null) } ],
//     "skipped": [ { engine, kind, threads, workload, reason } ] }
//                 (runs not made: an engine without transactions under the
//                 txn workload; reason is the table's one-line note)
//   The runs of the micro workload (bench/microbench.h: "phases" instead
//   of load and run) and of the engines on memory nodes
//   (bench/remote_bench.h: kind "memnode") are the same document with the
//   fields their headers list.
//
//   PHASE: ops, seconds, monotonic_ns {start, end} (steady_clock, to split
//     a profile by phase), ops_per_s, ceiling_ops_per_s, ceiling_fraction,
//     mix {read, update, insert, delete, rmw, txn}, outcomes {ok, not_found,
//     already_exists}, transactions (txn workload's run phase, else null:
//     {committed, aborts: attempts aborted and retried, retried: transactions
//     retried at least once, reads_per_txn, writes_per_txn}; ops and
//     ops_per_s then count transactions), latency_ns {all, <op type>...: {count, mean, p50, p90,
//     p99, p999, max, histogram: [[upper bound ns, count]...]}},
//     timeseries {interval_s, t_s: [end of each interval, s], ops_per_s: [...]}
//     (the last interval may be shorter), load_factor [[ops, lf]...],
//     flushes_per_op, fences_per_op, bytes_per_key, bytes_kind,
//     load_factor_after (the table's load factor after the phase), slots
//     after the phase (pmhash), properties (pmhash, else null: the engine's
//     properties by name, {"nehash.splits": 3, ...} (pmhash engines
//     describes them); a PropertyKind::kSinceOpen property as counted in the phase,
//     a kNow one as it is after the phase); durable_every_ms (epoch
//     durability: the phase's time over the epochs ended or syncs done in
//     it, the loss interval achieved), quiesce_s, stream_exhausted.
//   Fields that do not apply to a table are null.
//
//   REOPEN (--reopen; pmhash_table.h): copy_s, image_bytes, clean: OPEN,
//     crash: OPEN or null, crash_skipped: why crash is null, or null.
//   OPEN: open_ns and recovery_ns (Stats), clean_shutdown (false: recovery
//     ran), wall_s (Store::open as called), items, slots, heap_used,
//     dram_bytes (what the index keeps in DRAM: a directory, say),
//     bytes_per_key (heap_used / items), check_s, properties (the
//     engine's, right after the open).
//
// The ceiling of a phase (bench --limits, ceilings.h) charges each read one
// random line read (independent_reads_per_s), each insert, update or delete
// one random 8-byte persist (persists_per_s), each rmw both and each
// transaction its reads and writes; the ceiling in ops/s is
// 1 / sum(share x cost). ceiling_fraction is the
// phase's throughput divided by it.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "ceilings.h"
#include "phase.h"
#include "pmhash_table.h"
#include "ycsb.h"

namespace pmhash::bench {

struct RunResult {
  std::string engine;
  // What tables and figures call the run's table: the engine, and for a
  // sweep of engine options (-o NAME=V1,V2) the values ("ENGINE split_bits=2").
  std::string series;
  // pmhash engines: every engine option, by full name, with the value the
  // store ran with (set or default); empty for peers.
  std::vector<std::pair<std::string, std::string>> options;
  std::string kind;
  std::string durability;
  unsigned threads = 0;
  WorkloadSpec workload;
  Distribution distribution = Distribution::kUniform;
  PhaseOutcome load;
  std::optional<PhaseOutcome> run;
  // Bytes of DRAM the table allocated (malloc), for tables that report no
  // storage of their own; measured after the load phase and after the run.
  std::optional<std::uint64_t> dram_after_load;
  std::optional<std::uint64_t> dram_after_run;
  std::optional<Ceilings> ceilings;
  // --reopen: the opens between the load and the run phase (pmhash only).
  std::optional<ReopenOutcome> reopen;
  // --sequence: the phase's place in its store's sequence, 0 for the load
  // (whose RunResult has no run phase); every RunResult of one store holds
  // the same load. Unset for a store of its own per workload.
  std::optional<unsigned> sequence_step;

  const PhaseOutcome& measured() const { return run ? *run : load; }
};

// A run the driver did not make, and why (one line).
struct SkippedRun {
  std::string engine;
  std::string kind;
  unsigned threads = 0;
  std::string workload;
  std::string reason;
};

// Ops/s a phase of this mix could reach if each operation cost exactly one
// random line read or one random persist; nullopt without ceilings.
std::optional<double> ceiling_ops_per_s(const Mix& mix, const Ceilings& c);

nlohmann::json machine_json();
// `git describe`-like revision of the source tree ("abc1234", "+dirty"), or
// "unknown".
std::string git_revision();
std::string utc_now();

nlohmann::json run_json(const RunResult& r);
// A store's engine options, {"ENGINE_OPTION": value, ...} as a run's
// "options" (each valued as its type); null when there are none.
nlohmann::json options_json(const std::vector<std::pair<std::string, std::string>>& options);
nlohmann::json ceilings_json(const Ceilings& c);
nlohmann::json skipped_json(const SkippedRun& s);

// The human-readable table: a header per workload, a row per run.
void print_workload_header(std::ostream& out, const WorkloadSpec& spec, const std::string& params);
void print_row_header(std::ostream& out);
void print_row(std::ostream& out, const RunResult& r);
// A row named `name` instead of the series: a phase of a --sequence.
void print_row(std::ostream& out, const RunResult& r, const std::string& name);
// The line above the rows of one --sequence store: its engine and threads.
void print_sequence_header(std::ostream& out, const std::string& label);
void print_skipped_row(std::ostream& out, const SkippedRun& s);
// The line under a row with --reopen: open times, keys, bytes/key.
void print_reopen(std::ostream& out, const ReopenOutcome& r);
// The line under a pmhash row: the engine's non-zero properties in the
// measured phase (PHASE's "properties"); nothing when all are zero.
void print_properties_line(std::ostream& out, const PhaseOutcome& m);
void print_ceilings(std::ostream& out, const std::vector<Ceilings>& ceilings);

// One CSV line per run, with a header line.
void write_csv(std::ostream& out, const std::vector<RunResult>& runs);

}  // namespace pmhash::bench
