// server/keyspace.h - the keys of pmhash-server as Redis sees them: string
// values, each with an optional expiry deadline, kept in one store.
//
// Value format. A key without a deadline stores its value's bytes as they
// are, so a pool served by pmhash-server reads the same through `pmhash get`
// and the library. A key with a deadline stores
//
//     byte 0      4        12
//          +------+--------+------------------+
//          | mark | expiry | the value's bytes |
//          +------+--------+------------------+
//     mark:   FF 00 54 01
//     expiry: milliseconds since the Unix epoch, little-endian, u64;
//             0 means "no deadline"
//
// and a value that itself begins with the mark is stored the same way with
// expiry 0, so that every stored value decodes one way. (A stored value
// that begins with the mark but is shorter than 12 bytes was written by
// another program; it reads as it is.) The deadline is in the value, so
// the store writes both in one atomic, durable write: no crash separates a
// value from its TTL, and a TTL set and acknowledged survives a restart as
// the value does.
//
// Expiry. A key whose deadline has passed is absent to every command at
// once. It is removed lazily: a command that finds it removes it with
// compare_and_swap from exactly the bytes it read (so a concurrent rewrite
// is never lost), and the sweeper thread (start_sweeper) removes the
// others: every `sweep_interval_ms` while this process has seen a deadline
// (written or read one) since the previous sweep found none left. A pool
// whose expiring keys nobody touches after a restart keeps them until a
// command touches one of them; they are invisible meanwhile.
//
// Atomicity. Each command that reads and then writes a key (INCR, APPEND,
// SET ... GET, GETDEL, EXPIRE, ...) is one call of modify(), that is one
// Store::read_modify_write: atomic on every engine, with any number of
// clients writing the same key.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>

#include "pmhash/status.h"
#include "pmhash/store.h"
#include "pmhash/transaction.h"

namespace pmhash::server {

// A key's value as commands see it.
struct Entry {
  std::string value;
  std::uint64_t deadline_ms = 0;  // 0: none
};

// The stored bytes of a value with a deadline (0: none).
std::string encode_entry(std::string_view value, std::uint64_t deadline_ms);
// A stored value: its bytes and its deadline (0: none); `value` points into
// `stored`.
struct Decoded {
  std::string_view value;
  std::uint64_t deadline_ms = 0;
};
Decoded decode_entry(std::string_view stored);

// What modify()'s function wants done with the key.
struct Change {
  enum class Kind : unsigned char { kKeep, kSet, kRemove };
  Kind kind = Kind::kKeep;
  Entry entry;  // kSet

  static Change keep() { return {}; }
  static Change set(std::string value, std::uint64_t deadline_ms) {
    return {Kind::kSet, Entry{std::move(value), deadline_ms}};
  }
  static Change remove() { return {Kind::kRemove, {}}; }
};

// The key operations of a command: on the store directly (Keyspace), or,
// under EXEC, inside one store transaction (TxnKeys). get sees the live
// entry (NotFound when the key is absent or expired); set writes whatever
// the key held; modify is atomic: fn sees the live entry (nullptr when
// absent or expired) and says what becomes of it.
class KeyOps {
 public:
  using ModifyFn = std::function<Change(const Entry* current)>;

  virtual ~KeyOps() = default;
  virtual std::uint64_t now_ms() const = 0;
  virtual Status get(std::string_view key, Entry* entry) = 0;
  virtual Status set(std::string_view key, std::string_view value, std::uint64_t deadline_ms) = 0;
  virtual Status modify(std::string_view key, const ModifyFn& fn) = 0;

  // Removes `key` if it is live; *removed says whether it was (an expired
  // key is removed too, but does not count, as in Redis).
  Status remove(std::string_view key, bool* removed);
};

class Keyspace final : public KeyOps {
 public:
  // Milliseconds since the Unix epoch; the wall clock unless a test gives
  // another.
  using Clock = std::function<std::uint64_t()>;

  explicit Keyspace(Store* store, Clock clock = {});
  ~Keyspace();
  Keyspace(const Keyspace&) = delete;
  Keyspace& operator=(const Keyspace&) = delete;

  std::uint64_t now_ms() const override;
  Store& store() { return *store_; }

  // An expired entry found is removed on the way.
  Status get(std::string_view key, Entry* entry) override;

  // One store write (SET without options).
  Status set(std::string_view key, std::string_view value, std::uint64_t deadline_ms) override;

  // One Store::read_modify_write: fn may run more than once (under
  // contention) and must only compute its result. An expired entry is
  // removed even when fn keeps it.
  Status modify(std::string_view key, const ModifyFn& fn) override;

  // Calls fn(key, entry) for every live key (Store::for_each).
  Status for_each(const std::function<bool(std::string_view key, const Decoded& entry)>& fn);

  // One step of a scan (Store::scan, with its cursor and guarantee): fn
  // sees the live keys among those the step passes.
  Status scan(std::uint64_t cursor, std::size_t count,
              const std::function<void(std::string_view key, const Decoded& entry)>& fn,
              std::uint64_t* next);

  // A live key chosen at random (RANDOMKEY): the first live key of a scan
  // step from a random cursor, picked at random among those the step
  // passed; NotFound when a whole scan finds none. Keys are not all equally
  // likely (those after a sparse stretch of the index come more often),
  // as with Redis.
  Status random_key(std::string* key);

  // Removes every expired key, a scan step of kSweepStep keys at a time
  // (DRAM bounded by a step); *removed counts them.
  Status sweep(std::uint64_t* removed);
  static constexpr std::size_t kSweepStep = 1024;

  // The sweeper thread (see the file's comment); stop_sweeper() joins it.
  void start_sweeper(std::uint64_t sweep_interval_ms);
  void stop_sweeper();

  // Keys removed because they expired (INFO's expired_keys).
  std::uint64_t expired_keys() const { return expired_.load(std::memory_order_relaxed); }
  // Counts keys a committed transaction removed because they expired, and
  // deadlines it saw or wrote (TxnKeys).
  void note_expired(std::uint64_t n) { expired_.fetch_add(n, std::memory_order_relaxed); }
  void note_deadline(std::uint64_t deadline_ms) {
    if (deadline_ms != 0) deadlines_seen_.store(true, std::memory_order_relaxed);
  }
  bool expired(const Decoded& d, std::uint64_t now) const {
    return d.deadline_ms != 0 && d.deadline_ms <= now;
  }

 private:
  // Removes `key` if it still holds exactly `stored`.
  void remove_expired(std::string_view key, std::string_view stored);

  Store* store_;
  Clock clock_;
  std::atomic<std::uint64_t> expired_{0};
  std::atomic<bool> deadlines_seen_{false};

  std::mutex sweeper_mu_;
  std::condition_variable sweeper_cv_;
  bool sweeper_stop_ = false;
  std::thread sweeper_;
};

// KeyOps inside a store transaction (EXEC). Every key read or written
// stays locked until the transaction ends (pmhash/transaction.h: strict
// two-phase locking), so get-then-write is atomic without compare_and_swap,
// and the writes apply at commit, all or none, also across a crash. An
// expired entry found is removed in the transaction. Errors are the
// transaction's: Aborted means a lock wait timed out and the whole
// transaction must run again.
class TxnKeys final : public KeyOps {
 public:
  TxnKeys(Keyspace& keyspace, Transaction& txn) : keyspace_(keyspace), txn_(txn) {}

  std::uint64_t now_ms() const override { return keyspace_.now_ms(); }
  Status get(std::string_view key, Entry* entry) override;
  Status set(std::string_view key, std::string_view value, std::uint64_t deadline_ms) override;
  Status modify(std::string_view key, const ModifyFn& fn) override;

  // Expired keys this transaction removed, for Keyspace::note_expired
  // once it committed.
  std::uint64_t expired_removed() const { return expired_removed_; }

 private:
  // The key's live entry read in the transaction; *stale when it held an
  // expired one (removed in the transaction).
  Status read(std::string_view key, Entry* entry, bool* live);

  Keyspace& keyspace_;
  Transaction& txn_;
  std::uint64_t expired_removed_ = 0;
};

}  // namespace pmhash::server
