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

class Keyspace {
 public:
  // Milliseconds since the Unix epoch; the wall clock unless a test gives
  // another.
  using Clock = std::function<std::uint64_t()>;

  explicit Keyspace(Store* store, Clock clock = {});
  ~Keyspace();
  Keyspace(const Keyspace&) = delete;
  Keyspace& operator=(const Keyspace&) = delete;

  std::uint64_t now_ms() const;
  Store& store() { return *store_; }

  // The live entry of `key`; NotFound when it is absent or expired (an
  // expired one is removed on the way).
  Status get(std::string_view key, Entry* entry);

  // Sets `key` whatever it held (SET without options): one store write.
  Status set(std::string_view key, std::string_view value, std::uint64_t deadline_ms);

  // Atomically: fn sees the live entry (nullptr when the key is absent or
  // expired) and says what becomes of it. fn may run more than once (under
  // contention; Store::read_modify_write) and must only compute its
  // result. An expired entry is removed even when fn keeps it.
  Status modify(std::string_view key, const std::function<Change(const Entry* current)>& fn);

  // Removes `key` if it is live; *removed says whether it was (an expired
  // key is removed too, but does not count, as in Redis).
  Status remove(std::string_view key, bool* removed);

  // Calls fn(key, entry) for every live key (Store::for_each).
  Status for_each(const std::function<bool(std::string_view key, const Decoded& entry)>& fn);

  // Removes every expired key; *removed counts them.
  Status sweep(std::uint64_t* removed);

  // The sweeper thread (see the file's comment); stop_sweeper() joins it.
  void start_sweeper(std::uint64_t sweep_interval_ms);
  void stop_sweeper();

  // Keys removed because they expired (INFO's expired_keys).
  std::uint64_t expired_keys() const { return expired_.load(std::memory_order_relaxed); }

 private:
  bool expired(const Decoded& d, std::uint64_t now) const {
    return d.deadline_ms != 0 && d.deadline_ms <= now;
  }
  void note_deadline(std::uint64_t deadline_ms) {
    if (deadline_ms != 0) deadlines_seen_.store(true, std::memory_order_relaxed);
  }
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

}  // namespace pmhash::server
