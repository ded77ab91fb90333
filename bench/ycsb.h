// bench/ycsb.h - workloads of pmhash-bench and the operation streams they
// generate, all before any timing starts.
//
// Workloads (--workload). A run has a load phase, which inserts records
// 0..N-1 (N = --records) split into T contiguous slices, one per thread, and
// (except for "load") a run phase of --ops operations in this mix:
//
//   name       read  update insert delete rmw   keys (default distribution)
//   load       -     -      -      -      -     the load phase is the result
//   a          50    50                         zipfian        YCSB A
//   b          95    5                          zipfian        YCSB B
//   c          100                              zipfian        YCSB C
//   d          95           5                   latest         YCSB D
//   f          50                         50    zipfian        YCSB F
//   insert                  100                 new records    insert micro
//   read       100                              uniform        positive search
//   read-neg   100                              never-inserted negative search
//   update           100                        uniform
//   delete                         100          each record once, shuffled
//   mixed:R/I/U/D  R% read, I% insert, U% update, D% delete    uniform
//   txn        transactions of 3 reads + 1 update               uniform   YCSB+T
//   ENGINE-x   the mixes of the engines' papers, from the registry (below)
//
// rmw (YCSB's read-modify-write) is a get followed by an update of the same
// key, timed as one operation. YCSB E (scans) does not apply to a hash index.
//
// txn follows YCSB+T (Dey et al., ICDEW'14): every operation of the run
// phase is one transaction that reads kTxnReads records and then updates
// kTxnWrites other records to a new value, all of them distinct loaded
// records drawn by the workload's distribution (uniform unless
// --distribution says otherwise). A transaction is timed and counted as one
// operation, retries after an abort included; tables without multi-key
// transactions are skipped (table.h, Table::transactions_supported).
//
// Paper workloads. An engine may contribute the mixes of its paper's
// evaluation (pmhash/engines.h, PaperWorkload: "<engine>-<x>", shares of
// reads, updates, inserts of new keys and deletes, a key choice), so that
// its results can be set beside the paper's; the driver finds them through
// the registry and knows none by name. An insert in them is of a new key
// (which is what makes an index grow); reads draw from the loaded records
// and those inserted so far (a read of a record another thread has not
// inserted yet may miss). The papers' key and value sizes are the caller's
// to give (--key-size 8 --value-size 8 for 8-byte ones).
//
// --distribution overrides the default of every workload except read-neg,
// insert and delete, whose keys are fixed by what they measure.
//
// Keys. Record r's key is the code-format key of tools/common/records.h,
// key_size bytes (text from 11 bytes on, binary for 8 to 10 bytes, so that
// the papers' 8-byte keys can be measured); records inserted by the run
// phase continue the numbering at N; never-inserted keys are records from
// 2^40 on. Values come from a pool of kValuePool pre-generated values (the
// inserted values of records 0 to kValuePool - 1); operation j writes value
// j mod kValuePool.
//
// Streams. The run phase's operations are drawn as one global sequence
// (deterministic by --seed and the workload) with YCSB's key choosers
// (key_chooser.h), then dealt round-robin to the T threads: operation j goes
// to thread j mod T. Each thread's stream stores, per operation, one byte
// (type and the "must succeed" flag) and the key bytes inline, so a worker
// reads its stream sequentially and never computes a key while timed.
//
// Expected outcomes. An operation is marked "must succeed" when its outcome
// is certain whatever the interleaving: an insert of a new record, a read,
// update or rmw of a loaded record in a workload without deletes, a delete
// of the delete micro-benchmark, a negative read (must be NotFound). Reads of
// records inserted during the run may find them not yet inserted by another
// thread (NotFound is allowed); with deletes in the mix any NotFound is.
// Every transaction must commit (after retries) with every read finding its
// record and the update finding its own.
#pragma once

#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "key_chooser.h"
#include "workload.h"

namespace pmhash::bench {

enum class OpType : std::uint8_t { kRead, kUpdate, kInsert, kDelete, kRmw, kTxn };
inline constexpr std::size_t kOpTypes = 6;
inline constexpr const char* kOpNames[kOpTypes] = {"read",   "update", "insert",
                                                   "delete", "rmw",    "txn"};

// The shape of one transaction of the txn workload: kTxnReads reads, then
// kTxnWrites updates, of kTxnKeys distinct records.
inline constexpr std::size_t kTxnReads = 3;
inline constexpr std::size_t kTxnWrites = 1;
inline constexpr std::size_t kTxnKeys = kTxnReads + kTxnWrites;

// Fractions of the run phase's operations, summing to 1.
struct Mix {
  double share[kOpTypes] = {};

  double operator[](OpType t) const { return share[static_cast<std::size_t>(t)]; }
  bool has(OpType t) const { return (*this)[t] > 0; }
};

struct WorkloadSpec {
  std::string name;
  std::string description;        // for table headers: "50% read, 50% update"
  Mix mix;
  bool run_phase = true;          // false: "load", the load phase is the result
  bool negative_reads = false;    // read-neg: every read misses
  bool distinct_deletes = false;  // delete: each record deleted once
  Distribution distribution = Distribution::kUniform;
  bool distribution_fixed = false;  // --distribution does not apply
};

inline std::string distribution_name(Distribution d) {
  switch (d) {
    case Distribution::kUniform: return "uniform";
    case Distribution::kZipfian: return "zipfian";
    case Distribution::kLatest: return "latest";
  }
  return "?";
}

inline std::optional<Distribution> parse_distribution(std::string_view name) {
  if (name == "uniform") return Distribution::kUniform;
  if (name == "zipfian") return Distribution::kZipfian;
  if (name == "latest") return Distribution::kLatest;
  return std::nullopt;
}

// Parses a --workload name; on failure returns nullopt and sets *error to a
// one-line reason.
std::optional<WorkloadSpec> parse_workload(std::string_view name, std::string* error);

// The workload names parse_workload takes, comma-separated, the engines'
// paper workloads last.
std::string workload_names();
// The engines' paper workloads, each "NAME: its description", separated by
// "; " (for --help).
std::string paper_workloads_help();

// Keys, values and the load phase's key order, shared by every run.
class KeySpace {
 public:
  static constexpr std::uint64_t kNegativeBase = std::uint64_t{1} << 40;
  static constexpr std::size_t kValuePool = 1024;

  // key_size: at least kMinBinaryKeySize (throws Failure otherwise).
  KeySpace(std::size_t key_size, std::size_t value_size, std::uint64_t seed);

  std::size_t key_size() const { return gen_.key_size(); }
  std::size_t value_size() const { return gen_.value_size(); }

  // Writes record r's key to out[0, key_size).
  void key(std::uint64_t record, char* out) const { gen_.key(record, out); }
  std::string key(std::uint64_t record) const { return gen_.key(record); }
  std::string_view value(std::uint64_t j) const {
    return {values_.data() + (j % kValuePool) * value_size(), value_size()};
  }

 private:
  records::RecordGen gen_;
  std::vector<char> values_;
};

// The keys of the load phase, records 0..N-1 in order.
class LoadKeys {
 public:
  LoadKeys(const KeySpace& space, std::uint64_t records);
  std::uint64_t records() const { return records_; }
  std::string_view key(std::uint64_t r) const {
    return {keys_.data() + r * key_size_, key_size_};
  }

 private:
  std::uint64_t records_;
  std::size_t key_size_;
  std::vector<char> keys_;
};

// One thread's operations of a run phase.
struct OpStream {
  static constexpr std::uint8_t kMustSucceed = 0x80;
  static constexpr std::uint8_t kTypeMask = 0x07;

  std::vector<std::uint8_t> ops;
  std::vector<char> keys;  // ops.size() * keys_per_op * key_size
  std::size_t keys_per_op = 1;  // kTxnKeys in a txn stream
  std::uint64_t first_op = 0;  // global index of ops[0] (values: j mod pool)

  std::size_t size() const { return ops.size(); }
};

struct StreamParams {
  std::uint64_t records = 0;  // loaded before the run phase
  std::uint64_t ops = 0;
  unsigned threads = 1;
  Distribution distribution = Distribution::kUniform;
  double zipf = 0.99;
  std::uint64_t seed = 1;
};

// The run phase's streams, one per thread. For the delete workload, ops is
// capped at records; the txn workload needs at least kTxnKeys records.
std::vector<OpStream> generate_streams(const WorkloadSpec& spec, const KeySpace& space,
                                       const StreamParams& params);

// Operations the run phase will perform (the delete workload deletes each
// record at most once).
inline std::uint64_t run_ops(const WorkloadSpec& spec, std::uint64_t records, std::uint64_t ops) {
  if (!spec.run_phase) return 0;
  if (spec.distinct_deletes) return std::min(ops, records);
  return ops;
}

}  // namespace pmhash::bench
