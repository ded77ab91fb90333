// Stress tests: several threads of mixed operations while the table expands
// and shrinks underneath, checked against models.
//
// Each worker owns the keys k with k % threads == its index, so a
// thread-local std::unordered_map is an exact model of those keys: any lost
// insert, lost update or resurrected delete shows up as a mismatch. Shared
// keys are raced on by every thread to check that exactly one insert wins.
// A reader iterates meanwhile over keys that stay present the whole time and
// must see each of them exactly once per pass.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <barrier>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "pmhash/store.h"
#include "stress/stress_common.h"

namespace pmhash {
namespace {

using stress::key_of;
using stress::kScale;
using stress::value_of;

class ClevelStress : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = "/dev/shm/pmhash-stress-" + std::to_string(getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name() + ".pool";
    ::unlink(path_.c_str());
  }
  void TearDown() override {
    store_.reset();
    ::unlink(path_.c_str());
  }
  // A store that starts tiny (2^3 buckets), so every test resizes a lot.
  void create(std::uint64_t pool_size, double shrink_threshold = 0) {
    Options o;
    o.pool_size = pool_size;
    o.set("clevel.initial_level_log2", 3);
    o.set("clevel.min_level_log2", 2);
    o.set("clevel.shrink_threshold", shrink_threshold);
    Status created = Store::create(path_, o, &store_);
    ASSERT_TRUE(created.ok()) << created.to_string();
  }
  void reopen() {
    ASSERT_TRUE(store_->close().ok());
    store_.reset();
    Status opened = Store::open(path_, {}, &store_);
    ASSERT_TRUE(opened.ok()) << opened.to_string();
  }
  void report(unsigned thread, const std::string& what) { mismatches_.report(thread, what); }
  void expect_check_passes() {
    Status c = store_->check();
    EXPECT_TRUE(c.ok()) << c.to_string();
  }
  std::string path_;
  std::unique_ptr<Store> store_;
  stress::Mismatches mismatches_;
};

TEST_F(ClevelStress, MixedOperationsMatchPerThreadModelsDuringExpansionAndShrink) {
  create(256u << 20, /*shrink_threshold=*/0.35);  // high: shrinks and expansions interleave
  if (HasFatalFailure()) return;

  const unsigned threads = 3;
  const std::uint64_t keys_per_thread = 4000 * kScale;
  const int phases = 6;  // alternate growing and emptying phases
  const std::uint64_t stable_keys = 500;

  // Keys that stay present throughout, for the concurrent iterator.
  for (std::uint64_t s = 0; s < stable_keys; ++s) {
    ASSERT_TRUE(store_->insert("stable" + std::to_string(s), "s").ok());
  }

  std::atomic<bool> stop_reader{false};
  std::atomic<int> reader_passes{0};
  std::atomic<int> reader_errors{0};
  std::thread reader([&] {
    while (!stop_reader.load()) {
      std::unordered_set<std::string> seen;
      std::uint64_t stable_seen = 0;
      Status s = store_->for_each([&](std::string_view k, std::string_view) {
        if (!seen.insert(std::string(k)).second) reader_errors.fetch_add(1);
        if (k.starts_with("stable")) ++stable_seen;
        return true;
      });
      if (!s.ok() || stable_seen != stable_keys) reader_errors.fetch_add(1);
      reader_passes.fetch_add(1);
    }
  });

  std::barrier sync(threads);
  std::vector<std::thread> workers;
  for (unsigned t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      std::mt19937_64 rng(1234 + t);
      std::unordered_map<std::uint64_t, std::uint64_t> model;  // key -> version
      std::uint64_t version = 0;
      auto fail = [&](const std::string& what) { report(t, what); };
      for (int phase = 0; phase < phases; ++phase) {
        const bool growing = phase % 2 == 0;
        sync.arrive_and_wait();
        for (std::uint64_t i = 0; i < keys_per_thread * 2; ++i) {
          const std::uint64_t k = (rng() % keys_per_thread) * threads + t;
          const std::string key = key_of(k);
          const auto it = model.find(k);
          const bool present = it != model.end();
          const unsigned op = rng() % 100;
          std::string v;
          if (op < (growing ? 30 : 20)) {  // get
            Status s = store_->get(key, &v);
            if (present != s.ok()) fail("get " + key + ": " + s.to_string());
            if (present && s.ok() && v != value_of(k, it->second)) fail("get " + key + " stale value " + v);
          } else if (op < (growing ? 60 : 35)) {  // insert
            Status s = store_->insert(key, value_of(k, ++version));
            if (present ? !s.is_already_exists() : !s.ok()) fail("insert " + key + ": " + s.to_string());
            if (!present && s.ok()) model[k] = version;
          } else if (op < (growing ? 70 : 38)) {  // update
            Status s = store_->update(key, value_of(k, ++version));
            if (present ? !s.ok() : !s.is_not_found()) fail("update " + key + ": " + s.to_string());
            if (present && s.ok()) model[k] = version;
          } else if (op < (growing ? 80 : 40)) {  // upsert
            Status s = store_->upsert(key, value_of(k, ++version));
            if (!s.ok()) fail("upsert " + key + ": " + s.to_string());
            model[k] = version;
          } else {  // remove
            Status s = store_->remove(key);
            if (present ? !s.ok() : !s.is_not_found()) fail("remove " + key + ": " + s.to_string());
            if (s.ok()) model.erase(k);
          }
        }
      }
      sync.arrive_and_wait();
      // Final verification of this thread's keys.
      for (std::uint64_t i = 0; i < keys_per_thread; ++i) {
        const std::uint64_t k = i * threads + t;
        std::string v;
        Status s = store_->get(key_of(k), &v);
        auto it = model.find(k);
        if ((it != model.end()) != s.ok()) fail("final get " + key_of(k) + ": " + s.to_string());
        if (it != model.end() && s.ok() && v != value_of(k, it->second)) fail("final value " + key_of(k));
      }
      // Shared keys: every thread races to insert each; exactly one wins.
      sync.arrive_and_wait();
    });
  }
  for (auto& w : workers) w.join();
  stop_reader.store(true);
  reader.join();
  EXPECT_EQ(mismatches_.count(), 0);
  EXPECT_EQ(reader_errors.load(), 0);
  EXPECT_GT(reader_passes.load(), 0);
  const Stats st = store_->stats();
  EXPECT_GT(st.property("clevel.expansions"), 0u);
  EXPECT_GT(st.property("clevel.shrinks"), 0u) << "items " << st.items << " slots " << st.slots << " levels "
                            << st.property("clevel.levels") << " resizing " << st.resizing;
  expect_check_passes();
}

TEST_F(ClevelStress, ConcurrentInsertsOfOneKeyHaveExactlyOneWinner) {
  create(128u << 20);
  if (HasFatalFailure()) return;
  const unsigned threads = 3;
  const int keys = 3000 * kScale;
  std::vector<std::vector<char>> won(threads, std::vector<char>(keys, 0));
  std::barrier sync(threads);
  std::vector<std::thread> workers;
  for (unsigned t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      sync.arrive_and_wait();
      for (int k = 0; k < keys; ++k) {
        Status s = store_->insert("shared" + std::to_string(k), std::to_string(t));
        if (s.ok()) {
          won[t][k] = 1;
        } else if (!s.is_already_exists()) {
          ADD_FAILURE() << s.to_string();
        }
      }
    });
  }
  for (auto& w : workers) w.join();
  for (int k = 0; k < keys; ++k) {
    int winners = 0;
    unsigned winner = 0;
    for (unsigned t = 0; t < threads; ++t) {
      if (won[t][k]) {
        ++winners;
        winner = t;
      }
    }
    ASSERT_EQ(winners, 1) << "key " << k;
    std::string v;
    ASSERT_TRUE(store_->get("shared" + std::to_string(k), &v).ok());
    ASSERT_EQ(v, std::to_string(winner)) << "key " << k;
  }
  EXPECT_EQ(store_->size(), static_cast<std::uint64_t>(keys));
  expect_check_passes();
}

TEST_F(ClevelStress, ConcurrentUpdatesOfOneKeyLoseNone) {
  create(128u << 20);
  if (HasFatalFailure()) return;
  // Each thread appends to its own counter key, and all hammer a hot key;
  // the hot key ends with one of the last values written, never an older one.
  const unsigned threads = 3;
  const int rounds = 3000 * kScale;
  ASSERT_TRUE(store_->insert("hot", "start").ok());
  std::barrier sync(threads);
  std::vector<std::thread> workers;
  std::vector<std::string> last(threads);
  for (unsigned t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      sync.arrive_and_wait();
      for (int r = 0; r < rounds; ++r) {
        last[t] = std::to_string(t) + "/" + std::to_string(r);
        ASSERT_TRUE(store_->update("hot", last[t]).ok());
        // Grow the table meanwhile so updates race with rehashing.
        ASSERT_TRUE(store_->insert("fill" + std::to_string(t) + "-" + std::to_string(r), "f").ok());
      }
    });
  }
  for (auto& w : workers) w.join();
  std::string v;
  ASSERT_TRUE(store_->get("hot", &v).ok());
  bool is_a_last_value = false;
  for (const auto& l : last) is_a_last_value |= v == l;
  EXPECT_TRUE(is_a_last_value) << v;
  expect_check_passes();
}

// After open the tag filters are rebuilt by a background thread while
// writers already add to them: no search may miss a key meanwhile or after.
TEST_F(ClevelStress, WritersRaceTheTagFilterRebuildAfterReopen) {
  create(256u << 20);
  if (HasFatalFailure()) return;
  const unsigned threads = 2;
  const int old_keys = 20000 * kScale;
  for (int i = 0; i < old_keys; ++i) ASSERT_TRUE(store_->insert("old" + std::to_string(i), "o").ok());
  reopen();
  if (HasFatalFailure()) return;
  std::barrier sync(threads);
  std::vector<std::thread> workers;
  for (unsigned t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      auto fail = [&](const std::string& what) { report(t, what); };
      sync.arrive_and_wait();
      std::string v;
      for (int i = 0; i < old_keys; ++i) {
        const std::string fresh = "new" + std::to_string(t) + "-" + std::to_string(i);
        if (!store_->insert(fresh, "n").ok()) fail("insert " + fresh);
        if (!store_->get(fresh, &v).ok()) fail("get " + fresh + " right after its insert");
        const std::string old = "old" + std::to_string(i);
        if (i % threads == t) {  // each old key has one owner, who removes it
          if (!store_->get(old, &v).ok()) fail("get " + old + " before its remove");
          if (!store_->remove(old).ok()) fail("remove " + old);
          if (!store_->get(old, &v).is_not_found()) fail("get " + old + " after its remove");
        }
        if (!store_->get("absent" + std::to_string(i), &v).is_not_found()) fail("absent key found");
      }
    });
  }
  for (auto& w : workers) w.join();
  EXPECT_EQ(mismatches_.count(), 0);
  std::string v;
  for (int i = 0; i < old_keys; ++i) {
    ASSERT_TRUE(store_->get("old" + std::to_string(i), &v).is_not_found()) << i;
    for (unsigned t = 0; t < threads; ++t) {
      ASSERT_TRUE(store_->get("new" + std::to_string(t) + "-" + std::to_string(i), &v).ok()) << i;
    }
  }
  EXPECT_EQ(store_->size(), static_cast<std::uint64_t>(threads) * old_keys);
  expect_check_passes();
}

// Deletes shed tag-filter bits while inserts add theirs into the same
// buckets: a filter word recomputed from its slots must never lose the tag
// of a pointer that is stored or about to be. Keys that stay present are
// read the whole time, in a table small enough that every bucket churns.
TEST_F(ClevelStress, FilterSheddingNeverHidesAPresentKey) {
  create(128u << 20);
  if (HasFatalFailure()) return;
  const int stay = 300;
  const int churn = 2000 * kScale;
  for (int i = 0; i < stay; ++i) ASSERT_TRUE(store_->insert("stay" + std::to_string(i), "s").ok());
  std::atomic<bool> done{false};
  std::vector<std::thread> workers;
  for (unsigned t = 0; t < 2; ++t) {
    workers.emplace_back([&, t] {
      for (int round = 0; round < 4; ++round) {
        for (int i = 0; i < churn; ++i) {
          const std::string k = "churn" + std::to_string(t) + "-" + std::to_string(i);
          if (!store_->insert(k, "c").ok()) report(t, "insert " + k);
          std::string v;
          if (!store_->get(k, &v).ok()) report(t, k + " missed right after its insert");
          // Deleted a few inserts later: the buckets hold a changing mix.
          if (i >= 8) {
            const std::string old = "churn" + std::to_string(t) + "-" + std::to_string(i - 8);
            if (!store_->remove(old).ok()) report(t, "remove " + old);
          }
        }
        for (int i = churn - 8; i < churn; ++i) {
          const std::string old = "churn" + std::to_string(t) + "-" + std::to_string(i);
          if (!store_->remove(old).ok()) report(t, "remove " + old);
        }
      }
    });
  }
  std::thread reader([&] {
    std::string v;
    while (!done.load()) {
      for (int i = 0; i < stay; ++i) {
        if (!store_->get("stay" + std::to_string(i), &v).ok()) report(2, "stay" + std::to_string(i) + " missed");
      }
    }
  });
  for (auto& w : workers) w.join();
  done.store(true);
  reader.join();
  EXPECT_EQ(mismatches_.count(), 0);
  EXPECT_EQ(store_->size(), static_cast<std::uint64_t>(stay));
  EXPECT_GT(store_->stats().property("clevel.filter_rejections"), 0u);
  expect_check_passes();
}

// Shrinks and expansions in quick succession: an expansion that starts just
// after a shrink dropped the level with the same id must not take that
// level's ring entry, which is cleared only after a grace period (it once
// did, and inserts then landed in the pool header).
TEST_F(ClevelStress, ExpansionsRightAfterShrinksKeepEveryKey) {
  create(128u << 20, /*shrink_threshold=*/0.3);
  if (HasFatalFailure()) return;
  const unsigned threads = 2;
  const int cycles = 60 * kScale;
  const int batch = 400;
  std::vector<std::thread> workers;
  for (unsigned t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      auto fail = [&](const std::string& what) { report(t, what); };
      std::string v;
      for (int cycle = 0; cycle < cycles; ++cycle) {
        auto name = [&](int i) { return std::to_string(t) + "/" + std::to_string(cycle) + "/" + std::to_string(i); };
        for (int i = 0; i < batch; ++i) {
          if (Status s = store_->insert(name(i), "v"); !s.ok()) fail("insert " + name(i) + ": " + s.to_string());
        }
        for (int i = 0; i < batch; ++i) {
          if (Status s = store_->remove(name(i)); !s.ok()) fail("remove " + name(i) + ": " + s.to_string());
        }
      }
    });
  }
  for (auto& w : workers) w.join();
  EXPECT_EQ(mismatches_.count(), 0);
  EXPECT_GT(store_->stats().property("clevel.shrinks"), 0u);
  EXPECT_EQ(store_->size(), 0u);
  expect_check_passes();
}


// Counters that wrap: read_modify_write increments each of a few keys from
// absent (0) up to kWrap - 1 and then removes it, so every key is inserted
// (a swap from absent), updated and removed (a swap to absent) again and
// again by racing threads, while a filler grows and empties the table so
// that expansions and shrinks move the counters' slots underneath. The
// inserting swaps race each other in the same-key race, and the removing
// one races them and the movers. Every increment shows: the final values
// plus kWrap per removal the threads made add up to every increment.
TEST_F(ClevelStress, WrappingCountersSwappedDuringExpansionsAndShrinksLoseNothing) {
  create(128u << 20, /*shrink_threshold=*/0.3);
  if (HasFatalFailure()) return;
  constexpr unsigned kThreads = 3;
  constexpr unsigned kCounters = 3;
  constexpr std::uint64_t kWrap = 5;
  const int increments = 1500 * kScale;
  const int cycles = 12 * kScale;
  const int batch = 400;
  std::atomic<bool> filling{true};
  std::vector<std::uint64_t> removals(kThreads, 0);
  std::vector<std::uint64_t> done(kThreads, 0);
  std::vector<std::thread> workers;
  for (unsigned t = 0; t < kThreads; ++t) {
    workers.emplace_back([&, t] {
      // At least `increments` each, and on while the filler resizes.
      for (int i = 0; i < increments || filling.load(); ++i) {
        const std::string key = "counter" + std::to_string((t + i) % kCounters);
        bool removed = false;  // what the last call of fn decided
        const Status s = store_->read_modify_write(key, [&](std::optional<std::string_view> cur) {
          const std::uint64_t next = (cur ? std::stoull(std::string(*cur)) : 0) + 1;
          removed = next == kWrap;
          return removed ? Modification::remove() : Modification::set(std::to_string(next));
        });
        if (!s.ok()) {
          report(t, key + ": " + s.to_string());
          return;
        }
        removals[t] += removed ? 1 : 0;
        ++done[t];
      }
    });
  }
  workers.emplace_back([&] {
    for (int cycle = 0; cycle < cycles; ++cycle) {
      auto name = [&](int i) { return "fill" + std::to_string(cycle) + "/" + std::to_string(i); };
      for (int i = 0; i < batch; ++i) {
        if (Status s = store_->insert(name(i), "v"); !s.ok()) report(kThreads, "insert " + name(i) + ": " + s.to_string());
      }
      for (int i = 0; i < batch; ++i) {
        if (Status s = store_->remove(name(i)); !s.ok()) report(kThreads, "remove " + name(i) + ": " + s.to_string());
      }
    }
    filling.store(false);
  });
  for (auto& w : workers) w.join();
  EXPECT_EQ(mismatches_.count(), 0);
  std::uint64_t total = 0;
  std::uint64_t counted = 0;
  std::uint64_t present = 0;
  for (unsigned t = 0; t < kThreads; ++t) {
    total += done[t];
    counted += kWrap * removals[t];
  }
  for (unsigned c = 0; c < kCounters; ++c) {
    std::string v;
    const Status s = store_->get("counter" + std::to_string(c), &v);
    ASSERT_TRUE(s.ok() || s.is_not_found()) << s.to_string();
    if (s.ok()) {
      counted += std::stoull(v);
      ++present;
    }
  }
  EXPECT_EQ(counted, total);
  EXPECT_EQ(store_->size(), present);
  const Stats st = store_->stats();
  EXPECT_GT(st.property("clevel.expansions"), 0u);
  EXPECT_GT(st.property("clevel.shrinks"), 0u);
  expect_check_passes();
}

}  // namespace
}  // namespace pmhash
