// server/keyspace.cc - values with deadlines over the store (server/keyspace.h).
#include "server/keyspace.h"

#include <chrono>
#include <random>
#include <cstring>
#include <utility>
#include <vector>

namespace pmhash::server {
namespace {

constexpr char kMark[4] = {'\xff', '\x00', 'T', '\x01'};
constexpr std::size_t kHeader = sizeof kMark + sizeof(std::uint64_t);

bool starts_with_mark(std::string_view bytes) {
  return bytes.size() >= sizeof kMark && std::memcmp(bytes.data(), kMark, sizeof kMark) == 0;
}

std::uint64_t wall_clock_ms() {
  return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                        std::chrono::system_clock::now().time_since_epoch())
                                        .count());
}


}  // namespace

std::string encode_entry(std::string_view value, std::uint64_t deadline_ms) {
  if (deadline_ms == 0 && !starts_with_mark(value)) return std::string(value);
  std::string out;
  out.reserve(kHeader + value.size());
  out.append(kMark, sizeof kMark);
  for (unsigned i = 0; i < 8; ++i) out.push_back(static_cast<char>(deadline_ms >> (8 * i)));
  out.append(value);
  return out;
}

Decoded decode_entry(std::string_view stored) {
  if (stored.size() < kHeader || !starts_with_mark(stored)) return {stored, 0};
  std::uint64_t deadline = 0;
  for (unsigned i = 0; i < 8; ++i) {
    deadline |= std::uint64_t{static_cast<unsigned char>(stored[sizeof kMark + i])} << (8 * i);
  }
  return {stored.substr(kHeader), deadline};
}

Keyspace::Keyspace(Store* store, Clock clock) : store_(store), clock_(std::move(clock)) {}

Keyspace::~Keyspace() { stop_sweeper(); }

std::uint64_t Keyspace::now_ms() const { return clock_ ? clock_() : wall_clock_ms(); }

void Keyspace::remove_expired(std::string_view key, std::string_view stored) {
  // From exactly the bytes read: a write that came in since stays.
  if (store_->compare_and_swap(key, stored, std::nullopt).ok()) {
    expired_.fetch_add(1, std::memory_order_relaxed);
  }
}

Status Keyspace::get(std::string_view key, Entry* entry) {
  std::string stored;
  const Status s = store_->get(key, &stored);
  if (!s.ok()) return s;
  const Decoded d = decode_entry(stored);
  note_deadline(d.deadline_ms);
  if (expired(d, now_ms())) {
    remove_expired(key, stored);
    return Status::NotFound();
  }
  entry->value.assign(d.value);
  entry->deadline_ms = d.deadline_ms;
  return Status::OK();
}

Status Keyspace::set(std::string_view key, std::string_view value, std::uint64_t deadline_ms) {
  note_deadline(deadline_ms);
  return store_->upsert(key, encode_entry(value, deadline_ms));
}

Status Keyspace::modify(std::string_view key, const ModifyFn& fn) {
  bool removed_expired = false;
  const Status s = store_->read_modify_write(key, [&](std::optional<std::string_view> stored) {
    removed_expired = false;
    Entry entry;
    bool live = false;
    bool stale = false;
    if (stored) {
      const Decoded d = decode_entry(*stored);
      note_deadline(d.deadline_ms);
      stale = expired(d, now_ms());
      live = !stale;
      if (live) {
        entry.value.assign(d.value);
        entry.deadline_ms = d.deadline_ms;
      }
    }
    const Change c = fn(live ? &entry : nullptr);
    switch (c.kind) {
      case Change::Kind::kKeep:
        removed_expired = stale;
        return stale ? Modification::remove() : Modification::keep();
      case Change::Kind::kSet:
        note_deadline(c.entry.deadline_ms);
        return Modification::set(encode_entry(c.entry.value, c.entry.deadline_ms));
      case Change::Kind::kRemove:
        removed_expired = stale;
        return Modification::remove();
    }
    return Modification::keep();
  });
  if (s.ok() && removed_expired) expired_.fetch_add(1, std::memory_order_relaxed);
  return s;
}

Status KeyOps::remove(std::string_view key, bool* removed) {
  bool live = false;
  const Status s = modify(key, [&](const Entry* current) {
    live = current != nullptr;
    return live ? Change::remove() : Change::keep();
  });
  *removed = s.ok() && live;
  return s;
}

Status Keyspace::for_each(const std::function<bool(std::string_view key, const Decoded& entry)>& fn) {
  const std::uint64_t now = now_ms();
  return store_->for_each([&](std::string_view key, std::string_view stored) {
    const Decoded d = decode_entry(stored);
    if (expired(d, now)) return true;
    return fn(key, d);
  });
}

Status Keyspace::scan(std::uint64_t cursor, std::size_t count,
                      const std::function<void(std::string_view key, const Decoded& entry)>& fn,
                      std::uint64_t* next) {
  const std::uint64_t now = now_ms();
  return store_->scan(
      cursor, count,
      [&](std::string_view key, std::string_view stored) {
        const Decoded d = decode_entry(stored);
        if (!expired(d, now)) fn(key, d);
      },
      next);
}

Status Keyspace::random_key(std::string* key) {
  if (store_->size() == 0) return Status::NotFound();
  std::uint64_t cursor = store_->random_cursor();
  // From the random position to the end, then from the start round to it:
  // a whole scan at most, so a keyspace of expired keys ends too.
  bool wrapped = false;
  for (;;) {
    std::vector<std::string> live;
    std::uint64_t next = 0;
    const Status s = scan(cursor, 1, [&](std::string_view k, const Decoded&) { live.emplace_back(k); },
                          &next);
    if (!s.ok()) return s;
    if (!live.empty()) {
      thread_local std::mt19937_64 rng{std::random_device{}()};
      *key = std::move(live[rng() % live.size()]);
      return Status::OK();
    }
    if (next == 0) {
      if (wrapped) return Status::NotFound();
      wrapped = true;
    }
    cursor = next;
  }
}

Status Keyspace::sweep(std::uint64_t* removed) {
  *removed = 0;
  bool pending = false;
  std::uint64_t cursor = 0;
  do {
    const std::uint64_t now = now_ms();
    std::vector<std::pair<std::string, std::string>> doomed;
    const Status s = store_->scan(
        cursor, kSweepStep,
        [&](std::string_view key, std::string_view stored) {
          const Decoded d = decode_entry(stored);
          if (expired(d, now)) {
            doomed.emplace_back(key, stored);
          } else if (d.deadline_ms != 0) {
            pending = true;
          }
        },
        &cursor);
    if (!s.ok()) return s;
    for (const auto& [key, stored] : doomed) {
      // From exactly the bytes read: a write that came in since stays.
      if (store_->compare_and_swap(key, stored, std::nullopt).ok()) {
        expired_.fetch_add(1, std::memory_order_relaxed);
        ++*removed;
      }
    }
  } while (cursor != 0);
  // Keys that will expire later: the next sweep looks again.
  if (pending) deadlines_seen_.store(true, std::memory_order_relaxed);
  return Status::OK();
}

void Keyspace::start_sweeper(std::uint64_t sweep_interval_ms) {
  sweeper_ = std::thread([this, sweep_interval_ms] {
    std::unique_lock lock(sweeper_mu_);
    for (;;) {
      sweeper_cv_.wait_for(lock, std::chrono::milliseconds(sweep_interval_ms),
                           [&] { return sweeper_stop_; });
      if (sweeper_stop_) return;
      if (!deadlines_seen_.exchange(false, std::memory_order_relaxed)) continue;
      lock.unlock();
      std::uint64_t removed = 0;
      (void)sweep(&removed);  // a store that is closing answers Busy: the loop ends next
      lock.lock();
    }
  });
}

void Keyspace::stop_sweeper() {
  {
    std::lock_guard lock(sweeper_mu_);
    sweeper_stop_ = true;
  }
  sweeper_cv_.notify_all();
  if (sweeper_.joinable()) sweeper_.join();
}

Status TxnKeys::read(std::string_view key, Entry* entry, bool* live) {
  *live = false;
  std::string stored;
  Status s = txn_.get(key, &stored);
  if (s.is_not_found()) return Status::OK();
  if (!s.ok()) return s;
  const Decoded d = decode_entry(stored);
  keyspace_.note_deadline(d.deadline_ms);
  if (keyspace_.expired(d, now_ms())) {
    // Locked since the get: nothing else can have rewritten it.
    s = txn_.remove(key);
    if (!s.ok()) return s;
    ++expired_removed_;
    return Status::OK();
  }
  entry->value.assign(d.value);
  entry->deadline_ms = d.deadline_ms;
  *live = true;
  return Status::OK();
}

Status TxnKeys::get(std::string_view key, Entry* entry) {
  bool live = false;
  const Status s = read(key, entry, &live);
  if (!s.ok()) return s;
  return live ? Status::OK() : Status::NotFound();
}

Status TxnKeys::set(std::string_view key, std::string_view value, std::uint64_t deadline_ms) {
  keyspace_.note_deadline(deadline_ms);
  return txn_.upsert(key, encode_entry(value, deadline_ms));
}

Status TxnKeys::modify(std::string_view key, const ModifyFn& fn) {
  Entry entry;
  bool live = false;
  if (Status s = read(key, &entry, &live); !s.ok()) return s;
  const Change c = fn(live ? &entry : nullptr);
  switch (c.kind) {
    case Change::Kind::kKeep:
      return Status::OK();
    case Change::Kind::kSet:
      return set(key, c.entry.value, c.entry.deadline_ms);
    case Change::Kind::kRemove:
      return live ? txn_.remove(key) : Status::OK();
  }
  return Status::OK();
}

}  // namespace pmhash::server
