// Stress tests of compare_and_swap on the engines on memory nodes
// (sephash.h "Compare and swap", race.h "Compare and swap"), with small
// structures and a thread that keeps inserting, so that segments merge
// and split (sephash) or subtables split (race) all along; run under TSan
// too (smaller).
//
// Swaps race the engines' other writes where each engine is weakest:
// sephash's appends decide presence from a snapshot and land later, with
// a version taken earlier; race's swaps from absence go the insert's way
// and its removals free slots. So the locks below are taken by swaps from
// absence and released by plain removes, and the counters they guard are
// read and upserted plainly: a swap that wins while a lock is held, or a
// write ordered before a swap it should follow, loses an increment.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "pmhash/store.h"
#include "remote/memnode.h"
#include "scratch_file.h"
#include "stress/stress_common.h"

namespace pmhash {
namespace {

using stress::kScale;

class MemnodeSwapStress : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    Options o;
    o.engine = GetParam();
    std::string list;
    for (int n = 0; n < 2; ++n) {
      const std::string node = dir_.str() + "/mn" + std::to_string(n);
      const Status s = remote::create_memnode(node, 256u << 20, false);
      ASSERT_TRUE(s.ok()) << s.to_string();
      list += (n == 0 ? "shm:" : ",shm:") + node;
    }
    o.memnodes = list;
    // Small structures: a few thousand keys resize many times.
    if (GetParam() == "sephash") {
      o.set("sephash.initial_depth", 1);
      o.set("sephash.main_max_slots", 208);  // the least: a split every two merges
      o.set("sephash.max_depth", 12);
    } else if (GetParam() == "race") {
      o.set("race.initial_depth", 1);
      o.set("race.groups", 4);
      o.set("race.max_depth", 14);
    }
    const Status s = Store::create("", o, &store_);
    ASSERT_TRUE(s.ok()) << s.to_string();
  }
  void TearDown() override {
    if (store_) {
      EXPECT_TRUE(store_->close().ok());
    }
  }

  // Inserts fill-0 .. fill-(kFill-1), then sets *done: the index resizes
  // meanwhile (the workers go on until it is done).
  static constexpr unsigned kFill = 2500 * kScale;
  std::thread filler(std::atomic<bool>* done, stress::Mismatches* bad) {
    return std::thread([this, done, bad] {
      for (unsigned i = 0; i < kFill && bad->count() == 0; ++i) {
        const Status s = store_->insert("fill-" + std::to_string(i), "a value of the fill");
        if (!s.ok()) bad->report(99, "fill " + std::to_string(i) + ": " + s.to_string());
      }
      done->store(true);
    });
  }

  // Splits the index made since create (each engine's counter): the
  // workers must have raced some.
  std::uint64_t splits() const { return store_->stats().property(GetParam() + ".splits"); }

  testing::ScratchDir dir_{"pmhash-swap-stress"};
  std::unique_ptr<Store> store_;
};

// Workers take one of a few locks by a swap from absence to their name,
// increment the counter it guards by a plain get and upsert, and release
// it by a plain remove. Exactly one holder at a time, so no increment is
// lost; a swap that finds the lock held conflicts.
TEST_P(MemnodeSwapStress, LocksTakenBySwapsAndReleasedByRemovesExcludeEachOther) {
  constexpr unsigned kWorkers = 3, kLocks = 2;
  const unsigned rounds = 150 * kScale;
  std::atomic<bool> filled{false};
  stress::Mismatches bad;
  std::thread fill = filler(&filled, &bad);
  std::vector<std::thread> workers;
  std::vector<unsigned> done(kWorkers, 0);
  for (unsigned w = 0; w < kWorkers; ++w) {
    workers.emplace_back([&, w] {
      const std::string me = "worker-" + std::to_string(w);
      for (unsigned& r = done[w]; (r < rounds || !filled.load()) && bad.count() == 0; ++r) {
        const unsigned l = (w + r) % kLocks;
        const std::string lock = "lock-" + std::to_string(l);
        const std::string counter = "guarded-" + std::to_string(l);
        for (;;) {
          const Status s = store_->compare_and_swap(lock, std::nullopt, std::string_view(me));
          if (s.ok()) break;
          if (!s.is_conflict()) return bad.report(w, lock + ": " + s.to_string());
          std::this_thread::yield();
        }
        std::string held;
        if (Status s = store_->get(lock, &held); !s.ok() || held != me) {
          return bad.report(w, lock + " taken, then held by '" + held + "': " + s.to_string());
        }
        std::string v;
        const Status g = store_->get(counter, &v);
        if (!g.ok() && !g.is_not_found()) return bad.report(w, counter + ": " + g.to_string());
        const std::uint64_t n = g.ok() ? std::stoull(v) : 0;
        if (Status s = store_->upsert(counter, std::to_string(n + 1)); !s.ok()) {
          return bad.report(w, counter + ": " + s.to_string());
        }
        if (Status s = store_->remove(lock); !s.ok()) {
          return bad.report(w, lock + " released: " + s.to_string());
        }
      }
    });
  }
  for (std::thread& t : workers) t.join();
  fill.join();
  ASSERT_EQ(bad.count(), 0);
  std::uint64_t total = 0, rounds_done = 0;
  for (unsigned d : done) rounds_done += d;
  for (unsigned l = 0; l < kLocks; ++l) {
    std::string v;
    ASSERT_TRUE(store_->get("guarded-" + std::to_string(l), &v).ok());
    total += std::stoull(v);
    EXPECT_TRUE(store_->get("lock-" + std::to_string(l), &v).is_not_found());
  }
  EXPECT_EQ(total, rounds_done);
  EXPECT_GT(splits(), 4u);
  EXPECT_EQ(store_->size(), kLocks + kFill);  // the guarded counters, the fill
  const Status c = store_->check();
  EXPECT_TRUE(c.ok()) << c.to_string();
}

// Workers add 1 to a few shared counters by read_modify_write; a counter
// that reaches a multiple of 7 is removed by the worker that got it there
// (a swap to absence), which keeps the count, and the next increment
// inserts it again (a swap from absence). No count is lost or doubled.
TEST_P(MemnodeSwapStress, CountersIncrementedRemovedAndInsertedAgainLoseNothing) {
  constexpr unsigned kWorkers = 3, kCounters = 3;
  const unsigned rounds = 300 * kScale;
  std::atomic<bool> filled{false};
  stress::Mismatches bad;
  std::thread fill = filler(&filled, &bad);
  std::vector<std::thread> workers;
  std::vector<std::uint64_t> kept(kWorkers, 0);
  std::vector<unsigned> done(kWorkers, 0);
  for (unsigned w = 0; w < kWorkers; ++w) {
    workers.emplace_back([&, w] {
      for (unsigned& r = done[w]; (r < rounds || !filled.load()) && bad.count() == 0; ++r) {
        const std::string key = "counter-" + std::to_string((w + r) % kCounters);
        std::uint64_t reached = 0;
        Status s = store_->read_modify_write(key, [&](std::optional<std::string_view> cur) {
          reached = (cur ? std::stoull(std::string(*cur)) : 0) + 1;
          return Modification::set(std::to_string(reached));
        });
        if (!s.ok()) return bad.report(w, key + ": " + s.to_string());
        if (reached % 7 != 0) continue;
        const std::string seen = std::to_string(reached);
        s = store_->compare_and_swap(key, std::string_view(seen), std::nullopt);
        if (s.ok()) {
          kept[w] += reached;
        } else if (!s.is_conflict()) {
          return bad.report(w, key + ": " + s.to_string());
        }
      }
    });
  }
  for (std::thread& t : workers) t.join();
  fill.join();
  ASSERT_EQ(bad.count(), 0);
  std::uint64_t total = 0, rounds_done = 0;
  for (std::uint64_t k : kept) total += k;
  for (unsigned d : done) rounds_done += d;
  unsigned present = 0;
  for (unsigned c = 0; c < kCounters; ++c) {
    std::string v;
    const Status s = store_->get("counter-" + std::to_string(c), &v);
    ASSERT_TRUE(s.ok() || s.is_not_found()) << s.to_string();
    if (s.ok()) {
      total += std::stoull(v);
      ++present;
    }
  }
  EXPECT_EQ(total, rounds_done);
  EXPECT_GT(splits(), 4u);
  EXPECT_EQ(store_->size(), present + kFill);
  const Status c = store_->check();
  EXPECT_TRUE(c.ok()) << c.to_string();
}

INSTANTIATE_TEST_SUITE_P(RemoteEngines, MemnodeSwapStress,
                         ::testing::ValuesIn(Store::remote_engines()),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

}  // namespace
}  // namespace pmhash
