// tests/crash/kill_ops.h - the operations a kill-test child runs: a
// deterministic function of (seed, index), shared by the child and the
// parent that replays what each acknowledgement means.
#pragma once

#include <cstdint>
#include <random>
#include <string>

namespace pmhash::killtest {

inline constexpr std::uint64_t kKeys = 3000;

struct Op {
  enum Kind { kInsert, kUpdate, kUpsert, kRemove } kind;
  std::uint64_t key;
  std::string value;
};

// Operation i of a child run: a key, and what to do with it. Values vary in
// length (torn values would show) and carry the operation's identity.
inline Op op_at(std::uint64_t seed, std::uint64_t i) {
  std::mt19937_64 rng(seed * 1000003 + i);
  Op op;
  const unsigned phase = static_cast<unsigned>((seed / 7) % 3);  // grow, churn, empty
  const unsigned r = rng() % 100;
  const unsigned insert_share = phase == 0 ? 60 : phase == 1 ? 30 : 10;
  op.kind = r < insert_share ? Op::kInsert
          : r < insert_share + 15 ? Op::kUpdate
          : r < insert_share + 30 ? Op::kUpsert
          : Op::kRemove;
  op.key = rng() % kKeys;
  // Appended piece by piece: GCC 12 warns falsely (-Wrestrict) on chained
  // operator+ of std::string at -O3.
  op.value.append("s").append(std::to_string(seed)).append("i").append(std::to_string(i));
  op.value.append(rng() % 200, 'v');
  return op;
}

inline std::string key_name(std::uint64_t k) { return "key" + std::to_string(k); }

}  // namespace pmhash::killtest
