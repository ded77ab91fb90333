// pmhash/store.h - a persistent, concurrent hash index in one pool file.
//
//   std::unique_ptr<pmhash::Store> store;
//   pmhash::Status s = pmhash::Store::create("/dev/shm/a.pool", {}, &store);
//   s = store->insert("key", "value");
//   std::string v;
//   s = store->get("key", &v);
//   s = store->close();
//
// Thread safety: every method may be called from any number of threads at
// once, except close(), which must not race with other calls on the same
// Store. Threads need no registration; a thread's per-store state is released
// when the thread exits or the store is closed. At most kMaxThreads threads
// may use one Store at the same time (pmhash/limits.h); more get Status::Busy.
//
// Durability (Options::durability, docs/architecture.md, "Durability contract"):
// with kStrict, a mutating call that returns OK is durable before it returns.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "pmhash/limits.h"
#include "pmhash/options.h"
#include "pmhash/stats.h"
#include "pmhash/status.h"
#include "pmhash/transaction.h"

namespace pmhash {

// What the function of Store::read_modify_write wants done with its key.
struct Modification {
  enum class Kind : unsigned char { kKeep, kSet, kRemove };
  Kind kind = Kind::kKeep;
  std::string value;  // the new value, for kSet

  // Leave the key as it is (read_modify_write then writes nothing).
  static Modification keep() { return {}; }
  static Modification set(std::string value) { return {Kind::kSet, std::move(value)}; }
  static Modification remove() { return {Kind::kRemove, {}}; }
};

// Sees the key's current value (std::nullopt when the key is absent).
using ModifyFn = std::function<Modification(std::optional<std::string_view> current)>;

class Store {
 public:
  virtual ~Store();
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  // Creates a new pool file at `path` holding an empty index of
  // `options.engine` (empty: the default engine, Options::engine).
  // Errors: AlreadyExists when `path` exists and !options.force; Busy when
  // options.force would replace a pool that is open (nothing is changed);
  // IOError when the file cannot be created, sized or mapped, or the engine
  // cannot start its background threads (the message names the path and the
  // reason; no file is left behind); InvalidArgument for an unknown engine,
  // an engine option the engine does not take or a value outside its range
  // (Options::set), or a pool size too small for the engine or beyond 2^48
  // bytes.
  static Status create(const std::string& path, const Options& options,
                       std::unique_ptr<Store>* store);

  // Creates a store of `options.engine` in anonymous DRAM instead of a file
  // (granularity none): nothing survives the process, and flushes and fences
  // do nothing (Stats still counts the ones the engine asks for). For
  // benchmarks that measure an engine without persistence costs.
  // options.pool_size bytes are mapped; options.force is ignored.
  // Errors: InvalidArgument as for create; IOError when the mapping fails.
  static Status create_volatile(const Options& options, std::unique_ptr<Store>* store);

  // The finished engines this build offers for pool files, by name
  // (Options::engine). An engine still being built may be created by name
  // without being listed.
  static std::vector<std::string> engines();
  // The finished engines whose index lives on memory nodes
  // (Options::memnodes; create and open them with an empty path).
  // Their calls fail in ways a pool's cannot: IOError when a node cannot be
  // reached, refuses the secret (Options::memnode_secret_file) or does not
  // answer within Options::remote_timeout_ms; InvalidArgument when the node
  // list does not match the index (a node twice, missing, extra, fresh, of
  // another index or out of order: the message names the position), when
  // remote_timeout_ms exceeds half the lease stored with the index, or when
  // the nodes were created again since this Store opened them ("open the
  // index again"; nothing is written); Corruption when a node's bytes break
  // the layout; Busy when a lock stays held and its holder's lease has not
  // run out, or when a call could not finish within half the lease.
  static std::vector<std::string> remote_engines();

  // Opens an existing pool. Runs crash recovery when the pool was not closed
  // cleanly; recovery is O(threads + levels), not O(keys). The file stays
  // locked (flock) until the Store is destroyed.
  // Errors: Busy when another Store, in this process or another, has the
  // pool open; IOError when the file cannot be opened or mapped, or the
  // engine cannot start its background threads; Corruption when it is
  // not a pmhash pool, is truncated, has a bad header checksum, has
  // another layout version, or its heap or index metadata is damaged (open
  // validates what it follows; check() validates every key and value);
  // InvalidArgument when options.engine names another engine than the
  // pool's, or for an engine option of the pool's engine that it does not
  // take or whose value is outside its range. In every error case the
  // file is left byte-for-byte unchanged, except when the engine cannot
  // start: it may have run crash recovery by then, which changes no key or
  // value.
  static Status open(const std::string& path, const Options& options,
                     std::unique_ptr<Store>* store);

  // Copies the value of `key` into *value.
  // Errors: NotFound; InvalidArgument for an oversized key; Busy (dali) when
  // an open transaction holds the key's bucket lock longer than
  // the option dali.lock_timeout_ms.
  virtual Status get(std::string_view key, std::string* value) const = 0;
  // The same, reading as `options` say. ReadOptions::snapshot: without
  // locks, the latest state that is already durable, holding every write
  // acknowledged as durable before the call. dali: the state as of two
  // epochs before the read's (every such epoch is durable; with
  // Durability::kStrict it holds every acknowledged write, with kEpoch it
  // may miss writes of the last two epochs). clevel, nehash, pmeh: the
  // same as a plain get, whose every answer is already durable (their
  // headers: clevel.h P4-P7, "Durable linearizability" in the others). An
  // engine that cannot promise this returns NotSupported.
  virtual Status get(std::string_view key, std::string* value,
                     const ReadOptions& options) const = 0;

  // Adds `key` -> `value` if `key` is absent.
  // Errors: AlreadyExists (nothing changed); InvalidArgument for an
  // oversized key or value; NoSpace when the pool is full (nothing changed).
  // Every write may also return Busy under dali, as get does.
  virtual Status insert(std::string_view key, std::string_view value) = 0;

  // Replaces the value of an existing `key`.
  // Errors: NotFound (nothing changed); InvalidArgument; NoSpace.
  virtual Status update(std::string_view key, std::string_view value) = 0;

  // Inserts or replaces. Errors: InvalidArgument; NoSpace.
  virtual Status upsert(std::string_view key, std::string_view value) = 0;

  // Removes `key`. Errors: NotFound; InvalidArgument.
  virtual Status remove(std::string_view key) = 0;

  // Atomically: if the current value of `key` is `expected`, makes it
  // `desired`. std::nullopt as `expected` means "the key is absent", as
  // `desired` "remove the key". Values are compared byte for byte. The call
  // is linearizable with every other call on the key on every engine, and
  // durable on return as the store's other writes are (Durability).
  // Errors: Conflict when the key's state is not the expected one (nothing
  // changed); InvalidArgument for an oversized key or value; NoSpace; Busy
  // as for insert.
  virtual Status compare_and_swap(std::string_view key, std::optional<std::string_view> expected,
                                  std::optional<std::string_view> desired) = 0;

  // Atomically changes `key` as fn says, given its current value: reads it,
  // calls fn, and writes the result with compare_and_swap, expecting the
  // value fn saw; when another write came in between, it reads again and
  // calls fn again. So fn may run more than once (under contention) and
  // must only compute its result; the last call's result is what happened.
  // Modification::keep() writes nothing. No lock is held while fn runs.
  // Errors: those of get and compare_and_swap except NotFound and Conflict.
  Status read_modify_write(std::string_view key, const ModifyFn& fn);

  // Calls fn(key, value) for every key; stops early when fn returns false.
  // (Busy under dali as for get.)
  // Each key present for the whole iteration is visited exactly once, also
  // while the index resizes; keys inserted or removed meanwhile may or may
  // not be visited. fn runs outside any internal lock and may call back into
  // the store. Uses DRAM proportional to the number of keys visited.
  virtual Status for_each(
      const std::function<bool(std::string_view key, std::string_view value)>& fn) const = 0;

  // One step of a resumable scan (SCAN): passes fn the keys of a run of
  // whole parts of the index (buckets, segments, subtables) from position
  // `cursor` on, until at least `count` keys were passed (count 0 counts as
  // 1) or the index ends, and sets *next to the position after the last
  // part; *next == 0 when the scan is over. Start with cursor 0 and pass each
  // *next back. A cursor is a plain number: every 64-bit value is a valid
  // position (one no call returned starts mid-way), it needs no state in the
  // store, and it stays valid across resizes and a close and reopen.
  // The guarantee (Redis's SCAN): a key present from the call with cursor 0
  // until the call that set *next = 0 is passed at least once, also while
  // the index resizes; a key may be passed more than once then; keys
  // inserted or removed meanwhile may or may not be. Without concurrent
  // writes each key is passed exactly once. A scan ends after a bounded
  // number of calls unless the index keeps growing. fn runs outside any
  // internal lock; DRAM used is bounded by the parts one call visits.
  // Errors: Busy when the store is closed (and under dali as for get);
  // Corruption for damage found on the way.
  virtual Status scan(std::uint64_t cursor, std::size_t count,
                      const std::function<void(std::string_view key, std::string_view value)>& fn,
                      std::uint64_t* next) const = 0;

  // A cursor at a random place of scan's order, for sampling (RANDOMKEY):
  // a scan step from it passes the keys of a part chosen about uniformly
  // among the index's parts (0 when the store is closed).
  virtual std::uint64_t random_cursor() const = 0;

  // for_each for salvaging a damaged pool: every entry whose bytes fail
  // validation (an offset outside the pool, a length beyond its block) is
  // passed over and counted in *skipped (0 when none was), where for_each
  // would stop at the first one with Corruption. Corruption only when the
  // damage hides the rest of the index; Busy when the store is closed.
  virtual Status salvage(
      const std::function<bool(std::string_view key, std::string_view value)>& fn,
      std::uint64_t* skipped) const = 0;

  // Starts a transaction (pmhash/transaction.h).
  // Errors: NotSupported when the engine has no transactions (only dali
  // has); InvalidArgument for a lock timeout outside 1 .. 60000 ms; Busy
  // when the store is closed.
  virtual Status transaction(const TransactionOptions& options,
                             std::unique_ptr<Transaction>* txn) = 0;
  Status transaction(std::unique_ptr<Transaction>* txn) { return transaction({}, txn); }

  // Number of keys. Exact when no mutation runs concurrently.
  virtual std::uint64_t size() const = 0;

  // Returns once everything acknowledged so far is durable. With kStrict
  // that is already true; it also persists counters kept for Stats. With
  // kEpoch it waits for the current epoch and the next to end (dali: two
  // global fences, shared with every concurrent caller).
  // Errors: IOError when writing a page-granularity pool back to its file
  // failed at any time since open (EIO, ENOSPC): durability is then lost.
  virtual Status sync() = 0;

  // Write groups (group persistence). Between begin_write_group() and
  // end_write_group() on one thread, a strict write (and any answer that
  // depends on one) may return before it is durable, so that the group's
  // writes share the drains that make them durable; end_write_group()
  // returns once everything this thread wrote or answered in the group is
  // durable. Until then the caller shows none of those answers to anyone
  // (pmhash-server sends the replies of a group after its end). Calls on
  // other threads answer from durable state as always: a write of an open
  // group is made durable before any other caller's answer depends on it.
  // Groups do not nest (a second begin is ignored until the end). What an
  // engine shares is its own: dali (Durability::kStrict) waits once, at the
  // end, for the newest epoch the group wrote in, instead of once per write;
  // engines that persist in place make each write durable before it
  // returns, so a group changes nothing there; with Durability::kEpoch
  // nothing waits anyway. Measurements: docs/server.md, "Group commit".
  virtual void begin_write_group() {}
  virtual void end_write_group() {}

  // Verifies every invariant of the engine and the heap (O(keys)); returns
  // Corruption with a description of the first violation. Meant for a
  // quiescent store: concurrent writers may cause false reports.
  virtual Status check() const = 0;

  virtual Stats stats() const = 0;

  // What the store is, at no cost: stats() may walk the whole index the
  // first time after a crash (an engine that lost its saved key count
  // counts the keys on the first size()), where a front end that only
  // needs the engine's name should not wait for that.
  struct Description {
    std::string engine;
    std::string granularity;     // as Stats::granularity ("remote" on memory nodes)
    bool clean_shutdown = true;  // false: this open ran crash recovery
    std::uint64_t recovery_ns = 0;
  };
  virtual Description describe() const = 0;

  // Stops background work, makes everything durable and marks the pool as
  // cleanly shut down. Later calls on this Store return Busy. Called by the
  // destructor if needed. Errors: IOError as for sync().
  virtual Status close() = 0;

 protected:
  Store() = default;
};

}  // namespace pmhash
