// engine/index.h - what every engine implements, and the engine registry.
//
// The store hashes keys, checks size limits and hides threads; an engine
// implements the index itself over a pool and its heap. Each engine's main
// header states its on-media layout, persist order, recovery and the
// invariants check() verifies.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/hash.h"
#include "heap/heap.h"
#include "pmhash/engines.h"
#include "pmhash/options.h"
#include "pmhash/stats.h"
#include "pmhash/status.h"
#include "pmhash/transaction.h"
#include "pool/pool.h"

namespace pmhash::engine {

using ForEachFn = std::function<bool(std::string_view key, std::string_view value)>;
using ScanFn = std::function<void(std::string_view key, std::string_view value)>;

// A transaction of an engine that offers them (pmhash/transaction.h has the
// contract; the store checks sizes and hashes keys). Keys passed in are
// valid only during the call.
class Txn {
 public:
  virtual ~Txn() = default;
  virtual Status get(const Key& key, std::string* value) = 0;
  virtual Status insert(const Key& key, std::string_view value) = 0;
  virtual Status update(const Key& key, std::string_view value) = 0;
  virtual Status upsert(const Key& key, std::string_view value) = 0;
  virtual Status remove(const Key& key) = 0;
  virtual Status commit() = 0;
  virtual void abort() = 0;
};

class Index {
 public:
  virtual ~Index() = default;

  virtual Status get(const Key& key, std::string* value) = 0;
  virtual Status insert(const Key& key, std::string_view value) = 0;
  virtual Status update(const Key& key, std::string_view value) = 0;
  virtual Status upsert(const Key& key, std::string_view value) = 0;
  virtual Status remove(const Key& key) = 0;
  // Store::compare_and_swap: makes the key's value `desired` (nullopt:
  // removes the key) if it is `expected` (nullopt: the key is absent),
  // atomically with every other write of the key, and durable on return as
  // the engine's other writes are; Conflict, with nothing changed,
  // otherwise. (The store has checked the sizes.)
  virtual Status compare_and_swap(const Key& key, std::optional<std::string_view> expected,
                                  std::optional<std::string_view> desired) = 0;
  // ReadOptions::snapshot: the latest durable state, without locks. Engines
  // whose writes are durable on return read the latest state.
  virtual Status snapshot_get(const Key& key, std::string* value) { return get(key, value); }
  virtual Status begin(const TransactionOptions& options, std::unique_ptr<Txn>* txn) {
    (void)options;
    (void)txn;
    return Status::NotSupported("this engine has no transactions");
  }
  virtual Status for_each(const ForEachFn& fn) = 0;
  // Store::scan, with its guarantee and its cursor contract (any 64-bit
  // value is a position; 0 starts, *next == 0 ends; valid across resizes
  // and reopen). Each engine orders its hash space so that the parts a
  // resize moves a key between keep the key on the same side of every
  // cursor, and states that argument in its header. count >= 1 here.
  virtual Status scan(std::uint64_t cursor, std::size_t count, const ScanFn& fn,
                      std::uint64_t* next) = 0;
  // Store::random_cursor: maps `random`, uniform over 64 bits, to a cursor
  // at a part chosen about uniformly. Engines whose positions are hashes
  // (spread uniformly by construction) keep this default.
  virtual std::uint64_t random_cursor(std::uint64_t random) { return random; }
  // for_each on a pool that may be damaged (Store::salvage). Pool engines
  // validate every offset and length they follow (heap/checked.h): with
  // skipped == nullptr the first damaged entry ends the scan with
  // Corruption naming it; otherwise it is passed over and counted in
  // *skipped, and Corruption comes only when the damage hides the rest (a
  // table that cannot be walked). Engines that find no damage to skip run
  // for_each.
  virtual Status salvage(const ForEachFn& fn, std::uint64_t* skipped) {
    if (skipped != nullptr) *skipped = 0;
    return for_each(fn);
  }
  virtual std::uint64_t size() const = 0;
  virtual Status sync() = 0;
  virtual Status check() = 0;
  // Fills the index's part of Stats: items, slots, load_factor, resizing,
  // dram_bytes, the epoch fields where the engine has them, and exactly the
  // properties its descriptor declares, in that order.
  virtual void fill_stats(Stats* stats) const = 0;
  // Epoch engines: the epoch operations run in now (tests); 0 otherwise.
  virtual std::uint64_t current_epoch() const { return 0; }
  // Store::begin_write_group / end_write_group (pmhash/store.h): engines
  // that can share durability waits across a thread's writes override both.
  virtual void begin_write_group() {}
  virtual void end_write_group() {}
  // Stops background threads and leaves the index quiescent and durable.
  virtual void close() = 0;
};

// What an engine gets to work with. Outlives the Index.
struct Env {
  pool::Pool* pool = nullptr;
  heap::Heap* heap = nullptr;
  Options options;
};

struct EngineInfo {
  // What the engine is: name, location, capabilities, options.
  const EngineDescriptor* descriptor = nullptr;
  // Encodes the engine's creation options into the pool header's parameter
  // bytes; InvalidArgument for options the engine refuses.
  Status (*encode_params)(const Options& options, std::uint8_t* params);
  // Initialises an empty index in a freshly formatted pool.
  Status (*create)(const Env& env, std::unique_ptr<Index>* out);
  // Attaches to an existing index and recovers it (O(threads + levels)),
  // including heap recovery (Heap::recover) with the engine's keep().
  Status (*open)(const Env& env, std::unique_ptr<Index>* out);
  // Engines whose index lives on memory nodes (Options::memnodes) rather
  // than in a pool file: the store calls these instead of create and open
  // (which are then null), with no pool and no heap.
  Status (*create_remote)(const Options& options, std::unique_ptr<Index>* out) = nullptr;
  Status (*open_remote)(const Options& options, std::unique_ptr<Index>* out) = nullptr;
  // The 8 bytes a remote engine's index root starts with (RootHeader), by
  // which an open that names no engine finds it.
  const char* remote_magic = nullptr;
};

// nullptr when no engine has this name.
const EngineInfo* find_engine(std::string_view name);
// Comma-separated names, for error messages.
std::string engine_names();
// Comma-separated names of the engines whose index lives on memory nodes
// (those with create_remote).
std::string remote_engine_names();
// The remote engine whose index root starts with `magic` (8 bytes); nullptr
// when none does.
const EngineInfo* find_remote_engine(const char* magic);
// The names of the finished engines of a location, one per element
// (Store::engines(), Store::remote_engines()).
std::vector<std::string> engine_list(Location location);

}  // namespace pmhash::engine
