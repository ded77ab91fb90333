// tests/crash/workload.h - the workload of the crash checker: a deterministic
// function of (seed, thread, index), so that whoever verifies a recovered
// pool (another process, a later run replaying a reproducer) knows exactly
// what every acknowledgement meant without being told the operations.
//
// Each thread owns its keys ("t<thread>k<index>"), so the outcome of every
// operation (changed the store or not) follows from that thread's earlier
// operations alone, and a thread's part of the store is always the state
// after some prefix of its operations. The operation mix moves through three
// phases so that a table grows, churns and empties again: with a small
// initial table it expands and, where the engine shrinks, shrinks.
//
// One in six inserts, updates and removes (outside transactions) goes
// through compare_and_swap instead (Op::kSwapIn: from absent to the value;
// Op::kSwap and Op::kSwapOut: read_modify_write to the value, or to
// removal, when the key is present), with the same effect on the model.
//
// Two more kinds of operation: sync (Store::sync, 2 % of operations: every
// operation of the thread before it is durable once it returns), and, for
// engines with transactions (WorkloadSpec::transactions), transactions of 2
// to 4 writes and reads on the thread's keys (10 %): all of them or none
// must survive a crash.
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>
#include <memory>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "pmhash/store.h"
#include "pmhash/transaction.h"

namespace pmhash::crashtest {

struct WorkloadSpec {
  std::uint64_t seed = 1;
  unsigned threads = 1;
  std::uint64_t ops = 1000;  // per thread
  std::uint64_t keys = 400;  // per thread
  // 0: the phases below span all `ops`; else they repeat every `period`
  // operations (long runs that crash and continue many times).
  std::uint64_t period = 0;
  // The engine has transactions: some operations are transactions.
  bool transactions = false;
};

struct Op {
  enum Kind : unsigned char {
    kInsert, kUpdate, kUpsert, kRemove, kGet, kSync, kTxn,
    // Single-key writes through Store::compare_and_swap: insert (expecting
    // absence), update and remove (read_modify_write, from whatever value
    // the key has; nothing when it is absent).
    kSwapIn, kSwap, kSwapOut,
  };
  Kind kind = kGet;
  std::uint64_t key = 0;  // index into the thread's keys
  std::string value;      // insert, update, upsert
  std::vector<Op> steps;  // kTxn: its operations, in order
};

inline std::string key_name(unsigned thread, std::uint64_t key) {
  std::string name = "t";
  name.append(std::to_string(thread)).append("k").append(std::to_string(key));
  return name;
}

// Parses "t<thread>k<key>"; nullopt for any other key.
inline std::optional<std::pair<unsigned, std::uint64_t>> parse_key(const std::string& name) {
  if (name.size() < 4 || name[0] != 't') return std::nullopt;
  const std::size_t k = name.find('k', 1);
  if (k == std::string::npos || k == 1 || k + 1 == name.size()) return std::nullopt;
  for (std::size_t i = 1; i < name.size(); ++i) {
    if (i != k && (name[i] < '0' || name[i] > '9')) return std::nullopt;
  }
  const auto thread = std::stoull(name.substr(1, k - 1));
  const auto key = std::stoull(name.substr(k + 1));
  if (key_name(static_cast<unsigned>(thread), key) != name) return std::nullopt;  // no leading zeros
  return std::make_pair(static_cast<unsigned>(thread), key);
}

namespace detail {

// A value of at most 8 bytes naming operation i (and the step `salt` of a
// transaction): '#' and i * 8 + salt in base 62, zero-padded to `len` bytes
// (5 to 8), so that short values come in several lengths. Engines that keep
// short pairs inside the slot (nehash) change a slot's form when a value
// crosses 8 bytes and its length otherwise. "" when the number needs more
// than 7 digits.
inline std::string short_value(std::uint64_t i, unsigned salt, std::size_t len) {
  static constexpr char kDigits[] = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
  std::uint64_t n = i * 8 + salt;
  std::string digits;
  do {
    digits.insert(digits.begin(), kDigits[n % 62]);
    n /= 62;
  } while (n != 0);
  if (digits.size() > 7) return "";
  if (digits.size() + 1 < len) digits.insert(0, len - 1 - digits.size(), '0');
  return "#" + digits;
}

// A write or read of the phase's mix; `salt` tells apart the steps of one
// transaction.
inline Op simple_op(const WorkloadSpec& w, unsigned thread, std::uint64_t i, unsigned phase,
                    std::mt19937_64& rng, unsigned salt) {
  static constexpr unsigned kShares[3][4] = {
      // insert, update, upsert, remove (the rest: get)
      {70, 10, 10, 5},
      {30, 20, 20, 25},
      {5, 10, 5, 75},
  };
  const unsigned r = static_cast<unsigned>(rng() % 100);
  const unsigned* s = kShares[phase];
  Op op;
  op.kind = r < s[0] ? Op::kInsert
          : r < s[0] + s[1] ? Op::kUpdate
          : r < s[0] + s[1] + s[2] ? Op::kUpsert
          : r < s[0] + s[1] + s[2] + s[3] ? Op::kRemove
          : Op::kGet;
  op.key = w.keys == 0 ? 0 : rng() % w.keys;
  // Outside transactions, one write in six of these kinds is a swap.
  if (salt == 0 && rng() % 6 == 0) {
    op.kind = op.kind == Op::kInsert   ? Op::kSwapIn
            : op.kind == Op::kUpdate   ? Op::kSwap
            : op.kind == Op::kRemove   ? Op::kSwapOut
                                       : op.kind;
  }
  if (op.kind != Op::kRemove && op.kind != Op::kSwapOut && op.kind != Op::kGet) {
    const std::size_t pad = rng() % 4 == 0 ? 100 + 100 * (rng() % 2) : rng() % 24;
    if (pad < 4) op.value = short_value(i, salt, 5 + pad);
    if (op.value.empty()) {
      op.value.append("v").append(std::to_string(w.seed)).append(".").append(std::to_string(thread));
      op.value.append(".").append(std::to_string(i)).append(".");
      if (salt != 0) op.value.append("s").append(std::to_string(salt)).append(".");
      op.value.append(pad, static_cast<char>('a' + i % 26));
    }
  }
  return op;
}

}  // namespace detail

// Operation i of thread t. Values carry the operation's identity and vary
// in length (a torn or stale value never equals an expected one); one in
// four spans several cache lines, one in eight is at most 8 bytes. (Long
// values come in two lengths only, so that a small pool does not run out of
// chunks for one slab per size class and thread.)
inline Op op_at(const WorkloadSpec& w, unsigned thread, std::uint64_t i) {
  std::mt19937_64 rng(w.seed * 0x9e3779b97f4a7c15ull + thread * 0x100000001b3ull + i);
  // Grow for the first 45 %, churn for 25 %, then empty.
  const std::uint64_t permille = w.period != 0 ? i % w.period * 1000 / w.period
                                : w.ops == 0     ? 0
                                                 : i * 1000 / w.ops;
  const unsigned phase = permille < 450 ? 0 : permille < 700 ? 1 : 2;
  const unsigned r = static_cast<unsigned>(rng() % 100);
  if (r < 2) {
    Op sync;
    sync.kind = Op::kSync;
    return sync;
  }
  if (w.transactions && r < 12) {
    Op txn;
    txn.kind = Op::kTxn;
    const unsigned n = 2 + static_cast<unsigned>(rng() % 3);
    for (unsigned k = 0; k < n; ++k) txn.steps.push_back(detail::simple_op(w, thread, i, phase, rng, k + 1));
    return txn;
  }
  return detail::simple_op(w, thread, i, phase, rng, 0);
}

// One thread's part of the store: key index -> value.
using ThreadModel = std::map<std::uint64_t, std::string>;

// Applies `op` to the model; returns whether the store changes (what the
// store answers OK to; the others answer NotFound, AlreadyExists or, for a
// swap, Conflict). A transaction applies its steps in order and always
// commits.
inline bool apply_op(const Op& op, ThreadModel* m) {
  const auto it = m->find(op.key);
  switch (op.kind) {
    case Op::kInsert:
    case Op::kSwapIn:
      if (it != m->end()) return false;
      m->emplace(op.key, op.value);
      return true;
    case Op::kUpdate:
    case Op::kSwap:
      if (it == m->end()) return false;
      it->second = op.value;
      return true;
    case Op::kUpsert:
      (*m)[op.key] = op.value;
      return true;
    case Op::kRemove:
    case Op::kSwapOut:
      if (it == m->end()) return false;
      m->erase(it);
      return true;
    case Op::kGet:
      return it != m->end();
    case Op::kSync:
      return true;
    case Op::kTxn:
      for (const Op& step : op.steps) apply_op(step, m);
      return true;
  }
  return false;
}

namespace detail {

// read_modify_write that changes a present key (to `value`, or removes it
// when `value` is nullopt) and leaves an absent one alone, answering
// NotFound for it as update and remove do.
inline Status swap_present(Store& store, const std::string& key, std::optional<std::string_view> value) {
  bool present = false;
  const Status s = store.read_modify_write(key, [&](std::optional<std::string_view> current) {
    present = current.has_value();
    if (!present) return Modification::keep();
    return value ? Modification::set(std::string(*value)) : Modification::remove();
  });
  if (s.ok() && !present) return Status::NotFound();
  return s;
}

inline Status run_simple(Store& store, const std::string& key, const Op& op, std::string* got) {
  switch (op.kind) {
    case Op::kInsert: return store.insert(key, op.value);
    case Op::kUpdate: return store.update(key, op.value);
    case Op::kUpsert: return store.upsert(key, op.value);
    case Op::kRemove: return store.remove(key);
    case Op::kGet: return store.get(key, got);
    case Op::kSwapIn: return store.compare_and_swap(key, std::nullopt, std::string_view(op.value));
    case Op::kSwap: return swap_present(store, key, std::string_view(op.value));
    case Op::kSwapOut: return swap_present(store, key, std::nullopt);
    default: return Status::InvalidArgument("not a single-key operation");
  }
}

inline Status run_step(Transaction& txn, const std::string& key, const Op& op, std::string* got) {
  switch (op.kind) {
    case Op::kInsert: return txn.insert(key, op.value);
    case Op::kUpdate: return txn.update(key, op.value);
    case Op::kUpsert: return txn.upsert(key, op.value);
    case Op::kRemove: return txn.remove(key);
    case Op::kGet: return txn.get(key, got);
    default: return Status::InvalidArgument("not a transaction step");
  }
}

}  // namespace detail

// Runs operation `op` of thread `thread` on the store. A get's value goes to
// *got; a transaction's steps' answers and values go to *steps and
// *step_values (when given), and an aborted transaction (a lock wait timed
// out: other threads' keys share its lock stripes) is run again.
inline Status run_op(Store& store, unsigned thread, const Op& op, std::string* got,
                     std::vector<Status>* steps = nullptr,
                     std::vector<std::string>* step_values = nullptr) {
  if (op.kind == Op::kSync) return store.sync();
  if (op.kind != Op::kTxn) return detail::run_simple(store, key_name(thread, op.key), op, got);
  for (;;) {
    std::unique_ptr<Transaction> txn;
    if (Status s = store.transaction(&txn); !s.ok()) return s;
    std::vector<Status> answers;
    std::vector<std::string> values;
    Status s;
    for (const Op& step : op.steps) {
      std::string value;
      s = detail::run_step(*txn, key_name(thread, step.key), step, &value);
      if (s.is_aborted()) break;
      answers.push_back(s);
      values.push_back(value);
    }
    if (!s.is_aborted()) s = txn->commit();
    if (s.is_aborted()) continue;
    if (steps != nullptr) *steps = std::move(answers);
    if (step_values != nullptr) *step_values = std::move(values);
    return s;
  }
}

// Runs `op` and checks every answer against the model of the thread's keys,
// which it advances; "" when all agree, else what differs.
inline std::string run_checked(Store& store, unsigned thread, const Op& op, ThreadModel* model) {
  auto expect = [&](const Op& o, const Status& s, const std::string& got) -> std::string {
    const auto it = model->find(o.key);
    const std::string before = it == model->end() ? std::string() : it->second;
    const bool changes = apply_op(o, model);
    const bool ok = changes ? s.ok() : (s.is_not_found() || s.is_already_exists() || s.is_conflict());
    if (!ok) {
      return key_name(thread, o.key) + " answered " + s.to_string() + ", expected " +
             (changes ? "OK" : "NotFound, AlreadyExists or Conflict");
    }
    if (o.kind == Op::kGet && s.ok() && got != before) {
      return "get(" + key_name(thread, o.key) + ") returned a wrong value";
    }
    return "";
  };
  std::string got;
  std::vector<Status> steps;
  std::vector<std::string> values;
  const Status s = run_op(store, thread, op, &got, &steps, &values);
  if (op.kind == Op::kSync) return s.ok() ? "" : "sync answered " + s.to_string();
  if (op.kind != Op::kTxn) return expect(op, s, got);
  if (!s.ok()) return "a transaction's commit answered " + s.to_string();
  if (steps.size() != op.steps.size()) return "a transaction ran only part of its steps";
  for (std::size_t k = 0; k < steps.size(); ++k) {
    if (std::string e = expect(op.steps[k], steps[k], values[k]); !e.empty()) {
      return "in a transaction, " + e;
    }
  }
  return "";
}

// ---------------------------------------------------------------------------
// The shared-key workload: every thread works on one common set of keys
// ("s<index>", WorkloadSpec::keys of them in all), so that a thread reads,
// overwrites and removes what the others wrote. Every write writes a value
// of its own (it names the thread and the operation), so the value a read
// returns names the write it saw. No transactions (a thread's calls are
// single-key operations and syncs); a get reads with ReadOptions::snapshot
// one time in four. What each call answered is recorded by the runner
// (crash/oracle.h, Call), since it depends on the interleaving; the oracle
// there checks a recovered store against those answers.
// ---------------------------------------------------------------------------

inline std::string shared_key_name(std::uint64_t key) { return "s" + std::to_string(key); }

// Parses "s<index>"; nullopt for any other key.
inline std::optional<std::uint64_t> parse_shared_key(const std::string& name) {
  if (name.size() < 2 || name[0] != 's') return std::nullopt;
  for (std::size_t i = 1; i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9') return std::nullopt;
  }
  if (name.size() > 20) return std::nullopt;
  const std::uint64_t key = std::stoull(name.substr(1));
  if (shared_key_name(key) != name) return std::nullopt;  // no leading zeros
  return key;
}

// Operation i of thread t in the shared-key workload. The phases of op_at
// (grow, churn, empty) with more reads, so that threads often read a key
// another thread has just written. Op::key indexes the shared keys; a get
// with Op::value "snapshot" reads with ReadOptions::snapshot. Values: one in
// eight of at most 8 bytes, one in four spanning cache lines, all unique to
// (seed, thread, i).
inline Op shared_op_at(const WorkloadSpec& w, unsigned thread, std::uint64_t i) {
  std::mt19937_64 rng(w.seed * 0xc2b2ae3d27d4eb4full + thread * 0x100000001b3ull + i * 0x9e3779b1ull + 7);
  const std::uint64_t permille = w.period != 0 ? i % w.period * 1000 / w.period
                                : w.ops == 0     ? 0
                                                 : i * 1000 / w.ops;
  const unsigned phase = permille < 450 ? 0 : permille < 700 ? 1 : 2;
  static constexpr unsigned kShares[3][4] = {
      // insert, update, upsert, remove (the rest, 30 %: get)
      {45, 10, 10, 5},
      {20, 15, 15, 20},
      {5, 10, 5, 50},
  };
  Op op;
  const unsigned r = static_cast<unsigned>(rng() % 100);
  if (r < 2) {
    op.kind = Op::kSync;
    return op;
  }
  const unsigned* s = kShares[phase];
  const unsigned k = static_cast<unsigned>(rng() % 100);
  op.kind = k < s[0] ? Op::kInsert
          : k < s[0] + s[1] ? Op::kUpdate
          : k < s[0] + s[1] + s[2] ? Op::kUpsert
          : k < s[0] + s[1] + s[2] + s[3] ? Op::kRemove
          : Op::kGet;
  op.key = w.keys == 0 ? 0 : rng() % w.keys;
  if (op.kind == Op::kGet) {
    if (rng() % 4 == 0) op.value = "snapshot";
    return op;
  }
  if (op.kind == Op::kRemove) return op;
  const std::size_t pad = rng() % 4 == 0 ? 100 + 100 * (rng() % 2) : rng() % 24;
  // A short value: '#' and (i * 16 + thread) in base 62 (threads <= 16).
  if (pad < 4) op.value = detail::short_value(i * 16 + thread, 0, 5 + pad);
  if (op.value.empty()) {
    op.value.append("w").append(std::to_string(w.seed)).append(".").append(std::to_string(thread));
    op.value.append(".").append(std::to_string(i)).append(".");
    op.value.append(pad, static_cast<char>('a' + i % 26));
  }
  return op;
}

inline bool is_snapshot_get(const Op& op) { return op.kind == Op::kGet && op.value == "snapshot"; }

// The engine accepts Durability::kEpoch (it persists by epochs).
inline bool accepts_epoch_durability(const std::string& engine) {
  Options o;
  o.engine = engine;
  o.durability = Durability::kEpoch;
  o.pool_size = 16u << 20;
  std::unique_ptr<Store> store;
  return Store::create_volatile(o, &store).ok();
}

// The engine of `store` has transactions (Store::transaction works).
inline bool has_transactions(Store& store) {
  std::unique_ptr<Transaction> txn;
  return store.transaction(&txn).ok();
}

}  // namespace pmhash::crashtest
