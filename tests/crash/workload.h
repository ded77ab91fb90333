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
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <random>
#include <string>

#include "pmhash/store.h"

namespace pmhash::crashtest {

struct WorkloadSpec {
  std::uint64_t seed = 1;
  unsigned threads = 1;
  std::uint64_t ops = 1000;  // per thread
  std::uint64_t keys = 400;  // per thread
  // 0: the phases below span all `ops`; else they repeat every `period`
  // operations (long runs that crash and continue many times).
  std::uint64_t period = 0;
};

struct Op {
  enum Kind : unsigned char { kInsert, kUpdate, kUpsert, kRemove, kGet };
  Kind kind = kGet;
  std::uint64_t key = 0;  // index into the thread's keys
  std::string value;      // insert, update, upsert
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

// Operation i of thread t. Values carry the operation's identity and vary
// in length (a torn or stale value never equals an expected one); one in
// four spans several cache lines. (Long values come in two lengths only, so
// that a small pool does not run out of chunks for one slab per size class
// and thread.)
inline Op op_at(const WorkloadSpec& w, unsigned thread, std::uint64_t i) {
  std::mt19937_64 rng(w.seed * 0x9e3779b97f4a7c15ull + thread * 0x100000001b3ull + i);
  // Grow for the first 45 %, churn for 25 %, then empty.
  const std::uint64_t permille = w.period != 0 ? i % w.period * 1000 / w.period
                                : w.ops == 0     ? 0
                                                 : i * 1000 / w.ops;
  const unsigned phase = permille < 450 ? 0 : permille < 700 ? 1 : 2;
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
  if (op.kind != Op::kRemove && op.kind != Op::kGet) {
    op.value.append("v").append(std::to_string(w.seed)).append(".").append(std::to_string(thread));
    op.value.append(".").append(std::to_string(i)).append(".");
    const std::size_t pad = rng() % 4 == 0 ? 100 + 100 * (rng() % 2) : rng() % 24;
    op.value.append(pad, static_cast<char>('a' + i % 26));
  }
  return op;
}

// One thread's part of the store: key index -> value.
using ThreadModel = std::map<std::uint64_t, std::string>;

// Applies `op` to the model; returns whether the store changes (what the
// store answers OK to; the others answer NotFound or AlreadyExists).
inline bool apply_op(const Op& op, ThreadModel* m) {
  const auto it = m->find(op.key);
  switch (op.kind) {
    case Op::kInsert:
      if (it != m->end()) return false;
      m->emplace(op.key, op.value);
      return true;
    case Op::kUpdate:
      if (it == m->end()) return false;
      it->second = op.value;
      return true;
    case Op::kUpsert:
      (*m)[op.key] = op.value;
      return true;
    case Op::kRemove:
      if (it == m->end()) return false;
      m->erase(it);
      return true;
    case Op::kGet:
      return it != m->end();
  }
  return false;
}

// Runs operation `op` of thread `thread` on the store; a get's value goes
// to *got.
inline Status run_op(Store& store, unsigned thread, const Op& op, std::string* got) {
  const std::string key = key_name(thread, op.key);
  switch (op.kind) {
    case Op::kInsert: return store.insert(key, op.value);
    case Op::kUpdate: return store.update(key, op.value);
    case Op::kUpsert: return store.upsert(key, op.value);
    case Op::kRemove: return store.remove(key);
    case Op::kGet: return store.get(key, got);
  }
  return Status::InvalidArgument("unknown operation");
}

}  // namespace pmhash::crashtest
