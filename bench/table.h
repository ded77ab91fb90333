// bench/table.h - the one interface the benchmark driver (pmhash-bench)
// drives: a pmhash store of some engine, or a peer (libcuckoo, oneTBB's
// concurrent_hash_map, std::unordered_map + std::shared_mutex, LMDB,
// RocksDB), all behind the same five calls.
//
// Every call returns a pmhash::Status with the pmhash meanings: OK,
// NotFound (get, update, remove of an absent key), AlreadyExists (insert of a
// present key); anything else is an error the driver reports and fails on.
// All calls may be made from any number of threads at once; a thread calls
// thread_begin() before its first operation and thread_end() after its last
// (peers that keep per-thread handles, such as LMDB read transactions, use
// them; the default does nothing).
//
// Each table states what an acknowledged call guarantees (durability()), so
// that a result table never compares a volatile map with a durable index
// without saying so.
//
// Transactions (the txn workload, ycsb.h). A table with multi-key
// transactions runs one TxnRequest per transact() call: it reads every key
// of `reads`, then updates `write_key` to `value`, atomically (all or
// nothing, also across a crash) and serializably, with the table's
// durability. An attempt the table aborts (a lock wait timed out, a
// conflict) is retried by transact() itself through retry_aborted(), up to
// kTxnMaxAttempts attempts, and counted in *aborts. Results: OK (committed);
// NotFound (a key was absent: the transaction did not commit); Aborted
// (every attempt aborted); anything else an error. Tables without
// transactions say so in transactions_supported() (NotSupported and why)
// and the driver skips them for that workload.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "pmhash/options.h"
#include "pmhash/status.h"

namespace pmhash::bench {

// How a table is created. Paths: pmhash engines create `pool_path`; peers
// that keep files (LMDB, RocksDB) create their own directory `files_dir`
// (which must not exist yet; the table removes it when destroyed), on the
// same file system as the pool.
struct TableConfig {
  std::string pool_path;
  std::string files_dir;
  // byte, cache_line, page (files) or none (anonymous DRAM).
  std::string granularity = "cache_line";
  Durability durability = Durability::kStrict;
  // epoch durability: how often the peer's background thread makes
  // everything written so far durable.
  std::chrono::milliseconds epoch_interval{10};
  // Sizing hints: the most keys the table will hold, and item sizes.
  std::uint64_t capacity_hint = 0;
  // The most keys the table holds at once, when known (0: capacity_hint).
  std::uint64_t max_keys = 0;
  std::size_t key_size = 16;
  std::size_t value_size = 16;
  // Threads that will call the table at once.
  unsigned threads = 1;
  // DRAM peers that can start presized (libcuckoo): the slots to start
  // with, so that they grow from as small as the pmhash stores they are set
  // against; 0: the peer's own default. Never derived from capacity_hint.
  std::uint64_t initial_slots = 0;
  // pmhash only: bytes of the pool file (0: derived from the hints).
  std::uint64_t pool_size = 0;
  // The run will call transact() (RocksDB then opens a TransactionDB,
  // which its plain writes also go through).
  bool transactions = false;
  // Longest wait of a transaction for one lock before the attempt aborts
  // (tables whose transactions lock: pmhash engines, RocksDB).
  unsigned lock_timeout_ms = 100;
  // pmhash engines: engine options by full name (Options::set), in the
  // order given; those not set take the library's defaults.
  std::vector<std::pair<std::string, std::string>> engine_options;
};

// One transaction of the txn workload.
struct TxnRequest {
  std::span<const std::string_view> reads;
  std::string_view write_key;
  std::string_view value;
};

// Attempts of one transact() call before it gives up with Aborted.
inline constexpr unsigned kTxnMaxAttempts = 100;
// Longest backoff before a retry, microseconds (a power of two).
inline constexpr unsigned kTxnMaxBackoffUs = 1024;

// Runs attempt() until it returns anything but Aborted, at most
// kTxnMaxAttempts times; adds the aborted attempts to *aborts. After the
// k-th abort in a row it waits a random time below 2^(k+4) microseconds (at
// most kTxnMaxBackoffUs) before the next attempt: two transactions that timed
// out on each other's locks would otherwise start again together and meet
// again, and a lock holder descheduled on a busy machine gets time to
// finish.
template <typename Attempt>
Status retry_aborted(Attempt attempt, std::uint64_t* aborts) {
  thread_local std::minstd_rand rng(
      static_cast<std::uint32_t>(std::hash<std::thread::id>{}(std::this_thread::get_id())));
  Status last;
  for (unsigned i = 0; i < kTxnMaxAttempts; ++i) {
    if (i != 0) {
      const unsigned ceiling = std::min(kTxnMaxBackoffUs, 16u << std::min(i, 10u));
      std::this_thread::sleep_for(std::chrono::microseconds(rng() % ceiling));
    }
    last = attempt();
    if (!last.is_aborted()) return last;
    ++*aborts;
  }
  return Status::Aborted("aborted " + std::to_string(kTxnMaxAttempts) +
                         " times in a row, last: " + last.message());
}

// What a table can report about itself; absent fields do not apply.
// One engine property as a table reports it.
struct TableProperty {
  std::string name;  // "<engine>.<counter>"
  std::uint64_t value = 0;
  bool since_open = true;  // PropertyKind::kSinceOpen: a phase's share is after - before
};

struct TableStats {
  std::optional<std::uint64_t> items;
  std::optional<double> load_factor;       // items / slots
  std::optional<std::uint64_t> bytes;      // storage holding the data
  std::string bytes_kind;                  // "pool", "files" or "dram"
  std::optional<std::uint64_t> flushes;    // since the table was created
  std::optional<std::uint64_t> fences;
  std::optional<std::uint64_t> slots;      // index capacity (pmhash)
  // pmhash: the engine's properties (Stats::properties), each with its
  // kind from the engine's descriptor; empty for the peers.
  std::vector<TableProperty> properties;
  // Epoch durability: the points at which everything written before became
  // durable (epochs a pmhash engine ended, syncs a peer completed) since the
  // table was created. The run's seconds over their count is the interval
  // actually achieved, which a slow write-back stretches past the one asked.
  std::optional<std::uint64_t> durability_points;
  bool resizing = false;                   // background work still running
};

class Table {
 public:
  virtual ~Table() = default;

  // The name used on the command line: "clevel", "libcuckoo", "tbb",
  // "std", "lmdb", "rocksdb".
  virtual std::string name() const = 0;
  // "pmhash" for the engines of this project, "peer" otherwise.
  virtual std::string kind() const = 0;
  // One line: what survives a crash once a call has returned, e.g.
  // "none (volatile DRAM)", "strict: fdatasync per transaction".
  virtual std::string durability() const = 0;

  virtual Status insert(std::string_view key, std::string_view value) = 0;
  virtual Status get(std::string_view key, std::string* value) = 0;
  virtual Status update(std::string_view key, std::string_view value) = 0;
  virtual Status remove(std::string_view key) = 0;

  virtual void thread_begin() {}
  virtual void thread_end() {}

  // OK if transact() works; else NotSupported saying why.
  virtual Status transactions_supported() const {
    return Status::NotSupported(name() + " has no multi-key transactions");
  }
  // One transaction (see the top of the file); *buffer receives the reads.
  virtual Status transact(const TxnRequest& request, std::string* buffer,
                          std::uint64_t* aborts) {
    (void)request;
    (void)buffer;
    (void)aborts;
    return transactions_supported();
  }

  // Cheap enough to call every millisecond while a phase runs.
  virtual TableStats stats() const = 0;

  // Waits (untimed, between phases) until background work started by the
  // last phase (a resize, a compaction) has finished; false on timeout.
  virtual bool quiesce(std::chrono::seconds timeout) {
    (void)timeout;
    return true;
  }
};

// Creates the peer `name` (one of peer_names()); throws std::runtime_error
// with a one-line message if it cannot.
std::unique_ptr<Table> make_peer(const std::string& name, const TableConfig& config);

// libcuckoo, tbb, std, lmdb, rocksdb.
const std::vector<std::string>& peer_names();

}  // namespace pmhash::bench
