// Stress tests of the nehash engine: concurrent writers on one bucket group
// and on different ones, readers and iterators while groups split and the
// main directory expands, and races of several threads on one key, each
// checked against a model.
//
// Keys are real (check() hashes every key again): to aim keys at a part of
// the hash space, candidates are hashed with the engine's hash and kept when
// their h1 has the wanted top bits. Short keys with short values are stored
// inline in their slot, longer ones as items; values switch between the two
// forms, so updates also change a slot's form, which goes through the op
// log.
//
// Each writer owns its keys, so a map of its own is an exact model of them:
// a lost insert, update or remove, or a resurrected key, is a mismatch.
// Keys raced on by several threads are checked against what any serial
// order of the successful operations can leave.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <barrier>
#include <cstdint>
#include <map>
#include <numeric>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "engine/hash.h"
#include "engine/nehash/layout.h"
#include "pmhash/store.h"
#include "scratch_file.h"
#include "stress/stress_common.h"

namespace pmhash {
namespace {

namespace nh = engine::nehash;
using stress::kScale;

// Real keys whose XXH3 h1 starts with the `bits` bits of `top`. With `mixed`,
// every fourth key is long (> 8 bytes: always an item); the others are at
// most 8 bytes (inline with a short value). The tag keeps sets apart.
class KeyFinder {
 public:
  KeyFinder(std::uint64_t top, unsigned bits) : top_(top), bits_(bits) {}
  std::vector<std::string> take(char tag, std::size_t n, bool mixed = true) {
    std::vector<std::string> out;
    while (out.size() < n) {
      const bool long_key = mixed && out.size() % 4 == 3;
      std::string k = std::string(1, tag) + (long_key ? "-a-longer-key-" : "") + std::to_string(next_++);
      if (nh::top_bits(engine::make_key(k).h1, bits_) == top_) out.push_back(std::move(k));
    }
    return out;
  }

 private:
  std::uint64_t top_;
  unsigned bits_;
  std::uint64_t next_ = 0;
};

// The value of `key` at `version` (< 10^7): short ("v<version>", at most 8
// bytes: inline with a short key) or long (always an item).
std::string value_for(std::string_view key, std::uint64_t version, bool long_form) {
  if (!long_form) return "v" + std::to_string(version);
  return "V" + std::to_string(version) + "/" + std::string(key) + std::string(8 + version % 29, '+');
}

// The version a value_for(key, ...) value carries; -1 when `v` is not one.
std::int64_t version_in(std::string_view key, std::string_view v) {
  if (v.size() < 2 || (v[0] != 'v' && v[0] != 'V')) return -1;
  std::uint64_t n = 0;
  std::size_t i = 1;
  while (i < v.size() && i < 9 && v[i] >= '0' && v[i] <= '9') {
    n = n * 10 + static_cast<unsigned>(v[i++] - '0');
  }
  if (i == 1 || value_for(key, n, v[0] == 'V') != v) return -1;
  return static_cast<std::int64_t>(n);
}

// Whether `v` is a value_for(key, ...) of a version in [low, high).
bool version_within(std::string_view key, std::string_view v, std::uint64_t low, std::uint64_t high) {
  const std::int64_t n = version_in(key, v);
  return n >= 0 && static_cast<std::uint64_t>(n) >= low && static_cast<std::uint64_t>(n) < high;
}

// One writer's keys and its exact model of them; nobody else writes them.
class OwnedKeys {
 public:
  OwnedKeys(std::vector<std::string> keys, unsigned thread) : keys_(std::move(keys)), thread_(thread) {}

  // One random operation on key i, its answer checked against the model.
  void op(Store& store, std::size_t i, std::mt19937_64& rng, stress::Mismatches& m) {
    const std::string& key = keys_[i];
    const auto it = model_.find(i);
    const bool present = it != model_.end();
    const unsigned r = static_cast<unsigned>(rng() % 100);
    const std::string value = value_for(key, ++version_, rng() % 2 == 0);
    auto fail = [&](const std::string& what, const Status& s) {
      m.report(thread_, what + " " + key + (present ? " (present)" : " (absent)") + ": " + s.to_string());
    };
    if (r < 15) {
      std::string got;
      const Status s = store.get(key, &got);
      if (present ? !s.ok() : !s.is_not_found()) fail("get", s);
      if (present && s.ok() && got != it->second) {
        fail("get saw " + got + ", not " + it->second + ", of", s);
      }
    } else if (r < 45) {
      const Status s = store.insert(key, value);
      if (present ? !s.is_already_exists() : !s.ok()) fail("insert", s);
      if (!present && s.ok()) model_[i] = value;
    } else if (r < 60) {
      const Status s = store.update(key, value);
      if (present ? !s.ok() : !s.is_not_found()) fail("update", s);
      if (present && s.ok()) it->second = value;
    } else if (r < 75) {
      const Status s = store.upsert(key, value);
      if (!s.ok()) fail("upsert", s);
      if (s.ok()) model_[i] = value;
    } else {
      const Status s = store.remove(key);
      if (present ? !s.ok() : !s.is_not_found()) fail("remove", s);
      if (s.ok()) model_.erase(i);
    }
  }

  // Random operations over the keys with a window that slides from the
  // first keys to the last as `step` goes from 0 to `steps`: the set of
  // live keys keeps growing, so groups keep splitting.
  void op_at(Store& store, std::uint64_t step, std::uint64_t steps, std::size_t window,
             std::mt19937_64& rng, stress::Mismatches& m) {
    const std::size_t base = static_cast<std::size_t>(step * (keys_.size() - window) / steps);
    op(store, base + rng() % window, rng, m);
  }

  void add_to(std::map<std::string, std::string>* expected) const {
    for (const auto& [i, v] : model_) expected->emplace(keys_[i], v);
  }

 private:
  std::vector<std::string> keys_;
  unsigned thread_;
  std::unordered_map<std::size_t, std::string> model_;
  std::uint64_t version_ = 0;
};

class NehashStress : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = testing::scratch_path("pmhash-nehash-stress") + ".pool";
    ::unlink(path_.c_str());
  }
  void TearDown() override {
    store_.reset();
    ::unlink(path_.c_str());
  }
  void create(unsigned bucket_bits, unsigned dir_bits) {
    Options o;
    o.engine = "nehash";
    o.pool_size = 128u << 20;
    o.set("nehash.bucket_bits", bucket_bits);
    o.set("nehash.initial_dir_bits", dir_bits);
    const Status s = Store::create(path_, o, &store_);
    ASSERT_TRUE(s.ok()) << s.to_string();
  }
  void reopen() {
    ASSERT_TRUE(store_->close().ok());
    store_.reset();
    Options o;
    o.engine = "nehash";
    const Status s = Store::open(path_, o, &store_);
    ASSERT_TRUE(s.ok()) << s.to_string();
  }
  void expect_check_passes() {
    const Status s = store_->check();
    EXPECT_TRUE(s.ok()) << s.to_string();
  }
  // The store holds exactly `model` (by for_each, get and size), and
  // check() passes.
  void expect_store_is(const std::map<std::string, std::string>& model) {
    std::map<std::string, std::string> got;
    const Status s = store_->for_each([&](std::string_view k, std::string_view v) {
      if (!got.emplace(k, v).second) ADD_FAILURE() << "for_each visited " << k << " twice";
      return true;
    });
    EXPECT_TRUE(s.ok()) << s.to_string();
    int shown = 0;
    for (const auto& [k, v] : model) {
      const auto it = got.find(k);
      if (it == got.end()) {
        if (shown++ < 10) ADD_FAILURE() << k << " is missing (model: " << v << ")";
      } else if (it->second != v) {
        if (shown++ < 10) ADD_FAILURE() << k << " holds " << it->second << ", model " << v;
      }
      std::string value;
      const Status g = store_->get(k, &value);
      if ((!g.ok() || value != v) && shown++ < 10) ADD_FAILURE() << "get " << k << ": " << g.to_string();
    }
    for (const auto& [k, v] : got) {
      if (!model.contains(k) && shown++ < 10) ADD_FAILURE() << k << " -> " << v << " is not in the model";
    }
    EXPECT_EQ(got.size(), model.size());
    EXPECT_EQ(store_->size(), model.size());
    expect_check_passes();
  }

  std::string path_;
  std::unique_ptr<Store> store_;
  stress::Mismatches mismatches_;
};

// 1. Every key in one 8-bit prefix of the hash space, and a store that
// starts as one empty main entry with groups of two buckets: the writers
// work in the same few groups from the first insert on, and the first group
// splits, and the directory expands, under their contention. Besides their
// own keys, all writers race each round on a shared set: in even rounds to
// insert every shared key (one must win), in odd rounds to remove it (one
// must win).
TEST_F(NehashStress, WritersOnOneBucketGroupMatchTheModelThroughSplits) {
  ASSERT_NO_FATAL_FAILURE(create(/*bucket_bits=*/1, /*dir_bits=*/0));
  constexpr unsigned kThreads = 4;
  constexpr int kRounds = 5;  // the last one inserts
  const std::uint64_t ops_per_round = 500 * kScale;
  const std::uint64_t steps = kRounds * ops_per_round;
  const std::size_t window = 24;
  KeyFinder finder(/*top=*/0xA5, /*bits=*/8);
  std::vector<OwnedKeys> owned;
  for (unsigned t = 0; t < kThreads; ++t) {
    owned.emplace_back(finder.take(static_cast<char>('a' + t), window + steps / 16), t);
  }
  const std::vector<std::string> shared = finder.take('s', 16);
  // won[t][i]: thread t's insert or remove of shared[i] succeeded this round.
  std::vector<std::vector<char>> won(kThreads, std::vector<char>(shared.size(), 0));
  std::map<std::string, std::string> shared_model;
  auto shared_value = [&](std::size_t i, int round, unsigned t) {
    return value_for(shared[i], static_cast<std::uint64_t>(round) * kThreads + t, t % 2 == 1);
  };

  std::barrier sync(kThreads);
  std::vector<std::thread> threads;
  for (unsigned t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937_64 rng(100 + t);
      auto fail = [&](const std::string& what) { mismatches_.report(t, what); };
      std::vector<std::size_t> order(shared.size());
      std::iota(order.begin(), order.end(), 0);
      for (int round = 0; round < kRounds; ++round) {
        const bool inserting = round % 2 == 0;
        std::shuffle(order.begin(), order.end(), rng);
        std::size_t next_shared = 0;
        auto race_next = [&] {
          const std::size_t i = order[next_shared++];
          const std::string& key = shared[i];
          std::string got;
          if (inserting) {
            const Status s = store_->insert(key, shared_value(i, round, t));
            if (s.ok()) {
              won[t][i] = 1;
            } else if (!s.is_already_exists()) {
              fail("shared insert " + key + ": " + s.to_string());
            }
            // Inserted by someone this round, and nobody removes it before the round ends.
            const Status g = store_->get(key, &got);
            if (!g.ok() || !version_within(key, got, round * kThreads, (round + 1) * kThreads)) {
              fail("shared get " + key + " after the insert race: " + g.to_string() + " " + got);
            }
          } else {
            const Status s = store_->remove(key);
            if (s.ok()) {
              won[t][i] = 1;
            } else if (!s.is_not_found()) {
              fail("shared remove " + key + ": " + s.to_string());
            }
            if (!store_->get(key, &got).is_not_found()) fail("shared " + key + " found after its remove");
          }
        };
        sync.arrive_and_wait();
        for (std::uint64_t i = 0; i < ops_per_round; ++i) {
          if (i % (ops_per_round / shared.size()) == 0 && next_shared < shared.size()) race_next();
          owned[t].op_at(*store_, round * ops_per_round + i, steps, window, rng, mismatches_);
        }
        while (next_shared < shared.size()) race_next();
        sync.arrive_and_wait();
        if (t == 0) {
          // The others wait at the next round's barrier.
          for (std::size_t i = 0; i < shared.size(); ++i) {
            unsigned winners = 0, winner = 0;
            for (unsigned u = 0; u < kThreads; ++u) {
              if (won[u][i]) {
                ++winners;
                winner = u;
              }
              won[u][i] = 0;
            }
            if (winners != 1) {
              fail("round " + std::to_string(round) + ": " + std::to_string(winners) + " winners on " +
                   shared[i]);
            }
            std::string got;
            const Status g = store_->get(shared[i], &got);
            if (inserting) {
              shared_model[shared[i]] = shared_value(i, round, winner);
              if (!g.ok() || got != shared_model[shared[i]]) {
                fail("shared " + shared[i] + " holds " + got + ", not the winner's value");
              }
            } else {
              shared_model.erase(shared[i]);
              if (!g.is_not_found()) fail("shared " + shared[i] + " survived its remove round");
            }
          }
        }
      }
    });
  }
  for (std::thread& th : threads) th.join();
  EXPECT_EQ(mismatches_.count(), 0);

  std::map<std::string, std::string> model = shared_model;
  for (const OwnedKeys& o : owned) o.add_to(&model);
  const Stats st = store_->stats();
  EXPECT_GT(st.property("nehash.splits"), 0u);
  EXPECT_GT(st.property("nehash.full_expansions"), 0u);
  expect_store_is(model);
  ASSERT_NO_FATAL_FAILURE(reopen());
  expect_store_is(model);
}

// 2. Default geometry (64 buckets a group, 16 main entries); writer t's keys
// all have t as their top two hash bits, so no two writers ever share a
// group, and each writer's groups split as its keys grow. A group splits
// once a bucket and the conflict bucket are full (about 3/4 of its 1,040
// slots), so every scale runs the full count: with a quarter of it each
// writer's four groups would stay below a fifth full and never split.
TEST_F(NehashStress, WritersOnDifferentBucketGroupsMatchTheModel) {
  ASSERT_NO_FATAL_FAILURE(create(/*bucket_bits=*/6, /*dir_bits=*/4));
  constexpr unsigned kThreads = 4;
  const std::uint64_t steps = 16000;
  const std::size_t window = 64;
  std::vector<OwnedKeys> owned;
  for (unsigned t = 0; t < kThreads; ++t) {
    KeyFinder finder(t, 2);
    owned.emplace_back(finder.take(static_cast<char>('a' + t), window + steps / 3), t);
  }
  std::barrier sync(kThreads);
  std::vector<std::thread> threads;
  for (unsigned t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937_64 rng(200 + t);
      sync.arrive_and_wait();
      for (std::uint64_t i = 0; i < steps; ++i) {
        owned[t].op_at(*store_, i, steps, window, rng, mismatches_);
      }
    });
  }
  for (std::thread& th : threads) th.join();
  EXPECT_EQ(mismatches_.count(), 0);
  std::map<std::string, std::string> model;
  for (const OwnedKeys& o : owned) o.add_to(&model);
  EXPECT_GT(store_->stats().property("nehash.splits"), 0u);
  expect_store_is(model);
  ASSERT_NO_FATAL_FAILURE(reopen());
  expect_store_is(model);
}

// 3. Keys inserted before the readers start and never touched again must
// always be found, with their value, while writers add keys fast enough to
// split groups and expand the main directory again and again; so must every
// key a writer has acknowledged.
TEST_F(NehashStress, ReadersFindEveryKeyDuringSplitsAndFullExpansions) {
  ASSERT_NO_FATAL_FAILURE(create(/*bucket_bits=*/1, /*dir_bits=*/0));
  constexpr unsigned kWriters = 2, kReaders = 2;
  const std::size_t per_writer = 2500 * kScale;
  KeyFinder finder(0, 0);
  const std::vector<std::string> stable = finder.take('s', 256);
  std::map<std::string, std::string> model;
  for (std::size_t i = 0; i < stable.size(); ++i) {
    const std::string v = value_for(stable[i], i, i % 3 == 0);
    ASSERT_TRUE(store_->insert(stable[i], v).ok());
    model[stable[i]] = v;
  }
  std::vector<std::vector<std::string>> fresh;
  for (unsigned w = 0; w < kWriters; ++w) {
    fresh.push_back(finder.take(static_cast<char>('a' + w), per_writer));
  }
  const Stats before = store_->stats();

  std::vector<std::atomic<std::size_t>> acked(kWriters);
  std::atomic<bool> done{false};
  std::atomic<std::uint64_t> reads{0};
  std::barrier start(kWriters + kReaders);
  std::vector<std::thread> threads;
  for (unsigned w = 0; w < kWriters; ++w) {
    threads.emplace_back([&, w] {
      start.arrive_and_wait();
      for (std::size_t i = 0; i < per_writer; ++i) {
        const Status s = store_->insert(fresh[w][i], value_for(fresh[w][i], i, i % 2 == 0));
        if (!s.ok()) mismatches_.report(w, "insert " + fresh[w][i] + ": " + s.to_string());
        acked[w].store(i + 1, std::memory_order_release);
      }
    });
  }
  for (unsigned r = 0; r < kReaders; ++r) {
    threads.emplace_back([&, r] {
      const unsigned me = kWriters + r;
      std::mt19937_64 rng(300 + r);
      std::string got;
      start.arrive_and_wait();
      std::uint64_t n = 0;
      while (!done.load()) {
        const std::size_t i = rng() % stable.size();
        Status s = store_->get(stable[i], &got);
        if (!s.ok() || got != model.at(stable[i])) {
          mismatches_.report(me, "stable get " + stable[i] + ": " + s.to_string() + " " + got);
        }
        const unsigned w = static_cast<unsigned>(rng() % kWriters);
        const std::size_t upto = acked[w].load(std::memory_order_acquire);
        if (upto > 0) {
          const std::size_t j = rng() % upto;
          s = store_->get(fresh[w][j], &got);
          if (!s.ok() || got != value_for(fresh[w][j], j, j % 2 == 0)) {
            mismatches_.report(me, "acknowledged " + fresh[w][j] + ": " + s.to_string() + " " + got);
          }
        }
        n += 2;
      }
      reads.fetch_add(n);
    });
  }
  for (unsigned w = 0; w < kWriters; ++w) threads[w].join();
  done.store(true);
  for (std::size_t i = kWriters; i < threads.size(); ++i) threads[i].join();
  EXPECT_EQ(mismatches_.count(), 0);
  EXPECT_GT(reads.load(), 0u);
  const Stats after = store_->stats();
  // The test covers what it says only if these happened while it ran.
  EXPECT_GT(after.property("nehash.splits"), before.property("nehash.splits"));
  EXPECT_GT(after.property("nehash.full_expansions"), before.property("nehash.full_expansions"));
  for (unsigned w = 0; w < kWriters; ++w) {
    for (std::size_t i = 0; i < per_writer; ++i) {
      model[fresh[w][i]] = value_for(fresh[w][i], i, i % 2 == 0);
    }
  }
  expect_store_is(model);
}

// 4. Several threads insert the same fresh key at once, each with its own
// value (of either form): exactly one insert succeeds, the others answer
// AlreadyExists and find the key right after, and the key holds the
// winner's value. The first round also races the creation of the first
// group; later rounds race splits.
TEST_F(NehashStress, SameKeyInsertRaceHasExactlyOneWinner) {
  ASSERT_NO_FATAL_FAILURE(create(/*bucket_bits=*/1, /*dir_bits=*/0));
  constexpr unsigned kThreads = 4;
  const std::size_t rounds = 300 * kScale;
  KeyFinder finder(0, 0);
  const std::vector<std::string> keys = finder.take('r', rounds);
  auto value = [&](std::size_t r, unsigned t) {
    return value_for(keys[r], r * kThreads + t, t % 2 == 1);
  };
  std::vector<std::vector<char>> won(kThreads, std::vector<char>(rounds, 0));
  std::barrier sync(kThreads);
  std::vector<std::thread> threads;
  for (unsigned t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::string got;
      for (std::size_t r = 0; r < rounds; ++r) {
        sync.arrive_and_wait();
        const Status s = store_->insert(keys[r], value(r, t));
        if (s.ok()) {
          won[t][r] = 1;
          continue;
        }
        if (!s.is_already_exists()) mismatches_.report(t, "insert " + keys[r] + ": " + s.to_string());
        const Status g = store_->get(keys[r], &got);
        if (!g.ok() || !version_within(keys[r], got, r * kThreads, (r + 1) * kThreads)) {
          mismatches_.report(t, "get " + keys[r] + " after AlreadyExists: " + g.to_string() + " " + got);
        }
      }
    });
  }
  for (std::thread& th : threads) th.join();
  EXPECT_EQ(mismatches_.count(), 0);
  std::map<std::string, std::string> model;
  for (std::size_t r = 0; r < rounds; ++r) {
    unsigned winners = 0, winner = 0;
    for (unsigned t = 0; t < kThreads; ++t) {
      if (won[t][r]) {
        ++winners;
        winner = t;
      }
    }
    ASSERT_EQ(winners, 1u) << keys[r];
    model[keys[r]] = value(r, winner);
  }
  EXPECT_GT(store_->stats().property("nehash.splits"), 0u);
  expect_store_is(model);
  ASSERT_NO_FATAL_FAILURE(reopen());
  expect_store_is(model);
}

// 5. Threads race inserts, updates (changing the value's form half of the
// time) and removes on a few hot keys, while a filler thread splits the
// groups they live in. Each thread logs its successful operations. A
// serial order of them exists only if, per key, successful inserts and
// removes alternate (so their counts differ by the final presence, 0 or 1)
// and the final state is what some thread's last successful operation on
// the key left: its value, or the key's absence. Every value read must be
// one a thread had started to write.
TEST_F(NehashStress, UpdateAndRemoveRacesOnOneKeyEndInASerialState) {
  ASSERT_NO_FATAL_FAILURE(create(/*bucket_bits=*/1, /*dir_bits=*/0));
  constexpr unsigned kRacers = 3;
  const std::uint64_t ops = 1500 * kScale;
  const std::size_t fillers = 1500 * kScale;
  KeyFinder finder(/*top=*/0x2C, /*bits=*/6);
  const std::vector<std::string> hot = finder.take('h', 4);
  const std::vector<std::string> filler = finder.take('f', fillers);
  enum Last { kNone, kWrite, kRemove };
  struct KeyLog {
    std::int64_t inserts = 0, removes = 0;
    Last last = kNone;
    std::string last_value;
  };
  std::vector<std::vector<KeyLog>> logs(kRacers, std::vector<KeyLog>(hot.size()));
  std::vector<std::atomic<std::uint64_t>> started(kRacers);  // newest sequence number begun
  std::barrier sync(kRacers + 1);
  std::vector<std::thread> threads;
  for (unsigned t = 0; t < kRacers; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937_64 rng(500 + t);
      auto fail = [&](const std::string& what) { mismatches_.report(t, what); };
      sync.arrive_and_wait();
      for (std::uint64_t seq = 1; seq <= ops; ++seq) {
        const std::size_t k = rng() % hot.size();
        const std::string& key = hot[k];
        KeyLog& log = logs[t][k];
        const std::string value = value_for(key, seq * kRacers + t, rng() % 2 == 0);
        started[t].store(seq, std::memory_order_release);
        const unsigned r = static_cast<unsigned>(rng() % 100);
        if (r < 30) {
          const Status s = store_->insert(key, value);
          if (s.ok()) {
            ++log.inserts;
            log.last = kWrite;
            log.last_value = value;
          } else if (!s.is_already_exists()) {
            fail("insert " + key + ": " + s.to_string());
          }
        } else if (r < 60) {
          const Status s = store_->update(key, value);
          if (s.ok()) {
            log.last = kWrite;
            log.last_value = value;
          } else if (!s.is_not_found()) {
            fail("update " + key + ": " + s.to_string());
          }
        } else if (r < 85) {
          const Status s = store_->remove(key);
          if (s.ok()) {
            ++log.removes;
            log.last = kRemove;
          } else if (!s.is_not_found()) {
            fail("remove " + key + ": " + s.to_string());
          }
        } else {
          std::string got;
          const Status s = store_->get(key, &got);
          if (s.ok()) {
            const std::int64_t v = version_in(key, got);
            const std::uint64_t writer = static_cast<std::uint64_t>(v) % kRacers;
            const bool begun = v >= 0 && static_cast<std::uint64_t>(v) / kRacers <=
                                             started[writer].load(std::memory_order_acquire);
            if (!begun) fail("get " + key + " read " + got + ", which no thread had begun to write");
          } else if (!s.is_not_found()) {
            fail("get " + key + ": " + s.to_string());
          }
        }
      }
    });
  }
  threads.emplace_back([&] {
    sync.arrive_and_wait();
    for (const std::string& key : filler) {
      const Status s = store_->insert(key, value_for(key, 1, key.size() > 8));
      if (!s.ok()) mismatches_.report(kRacers, "filler insert " + key + ": " + s.to_string());
    }
  });
  for (std::thread& th : threads) th.join();
  EXPECT_EQ(mismatches_.count(), 0);
  EXPECT_GT(store_->stats().property("nehash.splits"), 0u);

  std::map<std::string, std::string> model;
  for (const std::string& key : filler) model[key] = value_for(key, 1, key.size() > 8);
  for (std::size_t k = 0; k < hot.size(); ++k) {
    std::int64_t inserts = 0, removes = 0;
    bool some_last_remove = false, any_success = false;
    for (unsigned t = 0; t < kRacers; ++t) {
      inserts += logs[t][k].inserts;
      removes += logs[t][k].removes;
      some_last_remove |= logs[t][k].last == kRemove;
      any_success |= logs[t][k].last != kNone;
    }
    std::string got;
    const Status s = store_->get(hot[k], &got);
    ASSERT_TRUE(s.ok() || s.is_not_found()) << s.to_string();
    EXPECT_TRUE(inserts - removes == 0 || inserts - removes == 1)
        << hot[k] << ": " << inserts << " inserts, " << removes << " removes succeeded";
    EXPECT_EQ(s.ok(), inserts - removes == 1) << hot[k];
    if (s.ok()) {
      bool explained = false;
      for (unsigned t = 0; t < kRacers; ++t) {
        explained |= logs[t][k].last == kWrite && logs[t][k].last_value == got;
      }
      EXPECT_TRUE(explained) << hot[k] << " holds " << got << ", no thread's last successful write";
      model[hot[k]] = got;
    } else {
      EXPECT_TRUE(some_last_remove || !any_success)
          << hot[k] << " is absent, but no thread's last successful operation removed it";
    }
  }
  expect_store_is(model);
  ASSERT_NO_FATAL_FAILURE(reopen());
  expect_store_is(model);
}

// 6. for_each's contract: each key present for the whole iteration is
// visited exactly once, also while the index resizes. Writers insert fresh
// keys (splitting groups) and remove some of them again, never inserting a
// key twice; the iterator must see every stable key exactly once per pass,
// any other key at most once, and every value whole.
TEST_F(NehashStress, ForEachVisitsEveryStableKeyExactlyOnceDuringSplits) {
  ASSERT_NO_FATAL_FAILURE(create(/*bucket_bits=*/1, /*dir_bits=*/0));
  constexpr unsigned kWriters = 2;
  const std::size_t per_writer = 2000 * kScale;
  const std::size_t lag = 16;  // a writer removes the key it inserted `lag` keys ago, every other time
  const int min_passes = 3;
  KeyFinder finder(0, 0);
  const std::vector<std::string> stable = finder.take('s', 200);
  std::unordered_map<std::string, std::string> value_of;  // of every key the test writes
  for (std::size_t i = 0; i < stable.size(); ++i) {
    value_of[stable[i]] = value_for(stable[i], i, i % 3 == 0);
  }
  std::vector<std::vector<std::string>> fresh;
  for (unsigned w = 0; w < kWriters; ++w) {
    fresh.push_back(finder.take(static_cast<char>('a' + w), per_writer));
    for (std::size_t i = 0; i < per_writer; ++i) {
      value_of[fresh[w][i]] = value_for(fresh[w][i], i, i % 2 == 0);
    }
  }
  for (const std::string& k : stable) ASSERT_TRUE(store_->insert(k, value_of.at(k)).ok());
  auto removed = [&](std::size_t i) { return i + lag < per_writer && i % 2 == 0; };

  std::atomic<bool> writers_done{false};
  std::atomic<int> passes{0}, passes_with_splits{0};
  std::barrier start(kWriters + 1);
  std::vector<std::thread> threads;
  for (unsigned w = 0; w < kWriters; ++w) {
    threads.emplace_back([&, w] {
      start.arrive_and_wait();
      for (std::size_t i = 0; i < per_writer; ++i) {
        Status s = store_->insert(fresh[w][i], value_of.at(fresh[w][i]));
        if (!s.ok()) mismatches_.report(w, "insert " + fresh[w][i] + ": " + s.to_string());
        if (i >= lag && removed(i - lag)) {
          s = store_->remove(fresh[w][i - lag]);
          if (!s.ok()) mismatches_.report(w, "remove " + fresh[w][i - lag] + ": " + s.to_string());
        }
      }
    });
  }
  threads.emplace_back([&] {
    start.arrive_and_wait();
    while (!writers_done.load() || passes.load() < min_passes) {
      std::unordered_map<std::string, int> seen;
      const std::uint64_t splits_before = store_->stats().property("nehash.splits");
      const Status s = store_->for_each([&](std::string_view k, std::string_view v) {
        const std::string key(k);
        const auto it = value_of.find(key);
        if (it == value_of.end() || it->second != v) {
          mismatches_.report(kWriters, "for_each saw " + key + " -> " + std::string(v));
        }
        if (++seen[key] == 2) mismatches_.report(kWriters, "for_each saw " + key + " twice in one pass");
        return true;
      });
      if (!s.ok()) mismatches_.report(kWriters, "for_each: " + s.to_string());
      for (const std::string& k : stable) {
        const auto it = seen.find(k);
        if (it == seen.end()) mismatches_.report(kWriters, "for_each missed stable " + k);
      }
      if (store_->stats().property("nehash.splits") != splits_before) passes_with_splits.fetch_add(1);
      passes.fetch_add(1);
    }
  });
  for (unsigned w = 0; w < kWriters; ++w) threads[w].join();
  writers_done.store(true);
  threads.back().join();
  EXPECT_EQ(mismatches_.count(), 0);
  EXPECT_GE(passes.load(), min_passes);
  EXPECT_GT(passes_with_splits.load(), 0) << "no pass ran while a group split";
  std::map<std::string, std::string> model;
  for (const std::string& k : stable) model[k] = value_of.at(k);
  for (unsigned w = 0; w < kWriters; ++w) {
    for (std::size_t i = 0; i < per_writer; ++i) {
      if (!removed(i)) model[fresh[w][i]] = value_of.at(fresh[w][i]);
    }
  }
  expect_store_is(model);
}

// 7. Updates that change a slot's form (inline pair <-> item pointer, or the
// inline value's length) go through the op log and rewrite the meta and
// both words. Each key has one writer, which publishes the version it
// begins and the version it finished; a reader must see a whole value of a
// version between the one finished before its read and the one begun after
// it (a single-register linearizability check), while a filler splits the
// keys' groups.
TEST_F(NehashStress, FormChangingUpdatesAreReadWholeWhileGroupsSplit) {
  ASSERT_NO_FATAL_FAILURE(create(/*bucket_bits=*/1, /*dir_bits=*/0));
  constexpr unsigned kWriters = 2;
  constexpr std::size_t kKeys = 12;  // per writer, all short: both forms possible
  const std::uint64_t updates = 2000 * kScale;
  const std::size_t fillers = 1500 * kScale;
  KeyFinder finder(/*top=*/0x13, /*bits=*/6);
  std::vector<std::string> keys = finder.take('u', kWriters * kKeys, /*mixed=*/false);
  const std::vector<std::string> filler = finder.take('f', fillers);
  for (const std::string& k : keys) ASSERT_TRUE(store_->insert(k, value_for(k, 0, false)).ok());
  std::vector<std::atomic<std::uint64_t>> begun(keys.size()), finished(keys.size());
  std::atomic<bool> done{false};
  std::atomic<std::uint64_t> reads{0};
  std::barrier start(kWriters + 2);
  std::vector<std::thread> threads;
  for (unsigned w = 0; w < kWriters; ++w) {
    threads.emplace_back([&, w] {
      std::mt19937_64 rng(700 + w);
      start.arrive_and_wait();
      for (std::uint64_t n = 0; n < updates; ++n) {
        const std::size_t k = w * kKeys + rng() % kKeys;
        const std::uint64_t v = finished[k].load(std::memory_order_relaxed) + 1;
        begun[k].store(v, std::memory_order_release);
        // Odd versions long, even ones short: every update changes the form.
        const Status s = store_->update(keys[k], value_for(keys[k], v, v % 2 == 1));
        if (!s.ok()) mismatches_.report(w, "update " + keys[k] + ": " + s.to_string());
        finished[k].store(v, std::memory_order_release);
      }
    });
  }
  threads.emplace_back([&] {
    std::mt19937_64 rng(799);
    std::string got;
    std::uint64_t n = 0;
    start.arrive_and_wait();
    while (!done.load()) {
      const std::size_t k = rng() % keys.size();
      const std::uint64_t low = finished[k].load(std::memory_order_acquire);
      const Status s = store_->get(keys[k], &got);
      const std::uint64_t high = begun[k].load(std::memory_order_acquire);
      const std::int64_t v = s.ok() ? version_in(keys[k], got) : -1;
      if (v < 0 || static_cast<std::uint64_t>(v) < low || static_cast<std::uint64_t>(v) > high) {
        mismatches_.report(kWriters, "get " + keys[k] + ": " + s.to_string() + " " + got + ", versions " +
                                         std::to_string(low) + " .. " + std::to_string(high));
      }
      ++n;
    }
    reads.fetch_add(n);
  });
  threads.emplace_back([&] {
    start.arrive_and_wait();
    for (const std::string& key : filler) {
      const Status s = store_->insert(key, value_for(key, 1, key.size() > 8));
      if (!s.ok()) mismatches_.report(kWriters + 1, "filler insert " + key + ": " + s.to_string());
    }
  });
  for (unsigned w = 0; w < kWriters; ++w) threads[w].join();
  threads.back().join();  // the filler
  done.store(true);
  threads[kWriters].join();
  EXPECT_EQ(mismatches_.count(), 0);
  EXPECT_GT(reads.load(), 0u);
  EXPECT_GT(store_->stats().property("nehash.splits"), 0u);
  std::map<std::string, std::string> model;
  for (std::size_t k = 0; k < keys.size(); ++k) {
    const std::uint64_t v = finished[k].load();
    model[keys[k]] = value_for(keys[k], v, v % 2 == 1);
  }
  for (const std::string& key : filler) model[key] = value_for(key, 1, key.size() > 8);
  expect_store_is(model);
  ASSERT_NO_FATAL_FAILURE(reopen());
  expect_store_is(model);
}

// 8. compare_and_swap against splits and plain writes: three threads
// increment four counters through read_modify_write, whose values switch
// between the inline form and an item every third increment (so a swap
// also changes a slot's form, through the op log); on four flags, two
// threads flip presence by read_modify_write (a swap that inserts or
// removes) and a third by plain insert and remove; a filler inserts keys of
// the same prefix, so every group the counters and flags live in splits,
// with them in its conflict bucket or moving to the new group. No
// increment is lost, each flag is present exactly when its successful flips
// are odd, and the store equals the model before and after a reopen.
TEST_F(NehashStress, SwapIncrementsAndFlipsThroughSplitsMatchTheModel) {
  ASSERT_NO_FATAL_FAILURE(create(/*bucket_bits=*/1, /*dir_bits=*/0));
  constexpr unsigned kIncrementers = 3;
  constexpr unsigned kFlippers = 3;  // the last one with plain insert and remove
  const std::uint64_t increments = 400 * kScale;
  const std::uint64_t flips = 400 * kScale;
  const std::size_t fillers = 1500 * kScale;
  KeyFinder finder(/*top=*/0x13, /*bits=*/6);
  const std::vector<std::string> counters = finder.take('c', 4);
  const std::vector<std::string> flags = finder.take('g', 4);
  const std::vector<std::string> filler = finder.take('x', fillers);
  const auto encode = [](std::uint64_t n) {
    return n % 3 == 2 ? "N" + std::to_string(n) + "/" + std::string(10 + n % 7, '#') : std::to_string(n);
  };
  const auto decode = [](std::string_view v) -> std::int64_t {
    const std::size_t from = !v.empty() && v[0] == 'N' ? 1 : 0;
    std::int64_t n = 0;
    std::size_t i = from;
    for (; i < v.size() && v[i] >= '0' && v[i] <= '9'; ++i) n = n * 10 + (v[i] - '0');
    return i == from ? -1 : n;
  };
  std::vector<std::vector<std::int64_t>> flipped(kFlippers, std::vector<std::int64_t>(flags.size()));
  std::barrier sync(kIncrementers + kFlippers + 1);
  std::vector<std::thread> threads;
  for (unsigned t = 0; t < kIncrementers; ++t) {
    threads.emplace_back([&, t] {
      sync.arrive_and_wait();
      for (std::uint64_t i = 0; i < increments; ++i) {
        const std::string& key = counters[(t + i) % counters.size()];
        const Status s = store_->read_modify_write(key, [&](std::optional<std::string_view> cur) {
          const std::int64_t n = cur ? decode(*cur) : 0;
          if (n < 0) mismatches_.report(t, key + " holds " + std::string(*cur) + ", no counter value");
          return Modification::set(encode(static_cast<std::uint64_t>(n) + 1));
        });
        if (!s.ok()) mismatches_.report(t, "increment " + key + ": " + s.to_string());
      }
    });
  }
  for (unsigned t = 0; t < kFlippers; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937_64 rng(800 + t);
      sync.arrive_and_wait();
      for (std::uint64_t i = 0; i < flips; ++i) {
        const std::size_t k = rng() % flags.size();
        const std::string& key = flags[k];
        const std::string on = "on" + std::to_string(t);
        if (t + 1 < kFlippers) {
          const Status s = store_->read_modify_write(key, [&](std::optional<std::string_view> cur) {
            return cur ? Modification::remove() : Modification::set(on);
          });
          if (!s.ok()) mismatches_.report(t, "flip " + key + ": " + s.to_string());
          ++flipped[t][k];
          continue;
        }
        const Status s = rng() % 2 == 0 ? store_->insert(key, on) : store_->remove(key);
        if (s.ok()) {
          ++flipped[t][k];
        } else if (!s.is_already_exists() && !s.is_not_found()) {
          mismatches_.report(t, "plain flip " + key + ": " + s.to_string());
        }
      }
    });
  }
  threads.emplace_back([&] {
    sync.arrive_and_wait();
    for (const std::string& key : filler) {
      const Status s = store_->insert(key, value_for(key, 1, key.size() > 8));
      if (!s.ok()) mismatches_.report(kIncrementers + kFlippers, "filler insert " + key + ": " + s.to_string());
    }
  });
  for (std::thread& th : threads) th.join();
  EXPECT_EQ(mismatches_.count(), 0);
  EXPECT_GT(store_->stats().property("nehash.splits"), 0u);

  std::map<std::string, std::string> model;
  for (const std::string& key : filler) model[key] = value_for(key, 1, key.size() > 8);
  std::uint64_t total = 0;
  for (const std::string& key : counters) {
    std::string got;
    const Status s = store_->get(key, &got);
    ASSERT_TRUE(s.ok()) << key << ": " << s.to_string();
    ASSERT_GE(decode(got), 0) << key << " holds " << got;
    total += static_cast<std::uint64_t>(decode(got));
    EXPECT_EQ(got, encode(static_cast<std::uint64_t>(decode(got)))) << key;
    model[key] = got;
  }
  EXPECT_EQ(total, kIncrementers * increments);
  for (std::size_t k = 0; k < flags.size(); ++k) {
    std::int64_t n = 0;
    for (unsigned t = 0; t < kFlippers; ++t) n += flipped[t][k];
    std::string got;
    const Status s = store_->get(flags[k], &got);
    ASSERT_TRUE(s.ok() || s.is_not_found()) << s.to_string();
    EXPECT_EQ(s.ok(), n % 2 == 1) << flags[k] << " after " << n << " successful flips";
    if (s.ok()) model[flags[k]] = got;
  }
  expect_store_is(model);
  ASSERT_NO_FATAL_FAILURE(reopen());
  expect_store_is(model);
}

}  // namespace
}  // namespace pmhash
