// Stress test of dali's scan (dali.h, "Scan"): scanners run whole scans,
// a few buckets per call, while writers grow the table by splits, remove
// and re-insert their own keys, rewrite the stable keys' values in place
// and by new records (which garbage collection then unlinks), and
// transactions rewrite pairs of stable keys, with epochs ending every
// millisecond. Every key present for a whole scan (the stable ones) must be
// passed by it, with one of the values it ever had; no key may be passed
// twice by one scan (the reads of a scan cover disjoint ranges of
// positions, SC5).
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <barrier>
#include <random>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "pmhash/store.h"
#include "pmhash/transaction.h"
#include "stress/stress_common.h"

namespace pmhash {
namespace {

using stress::kScale;

// Stable keys s<i>, with values "s<i>:<version>"; writers' keys w<t>-<i>.
std::string stable_key(std::uint64_t i) { return "s" + std::to_string(i); }
std::string stable_value(std::uint64_t i, std::uint64_t version) {
  return stable_key(i) + ":" + std::to_string(version);
}

class DaliScanStress : public ::testing::TestWithParam<Durability> {
 protected:
  void SetUp() override {
    path_ = "/dev/shm/pmhash-dali-scan-stress-" + std::to_string(getpid()) + "-" +
            std::to_string(static_cast<int>(GetParam())) + ".pool";
    ::unlink(path_.c_str());
  }
  void TearDown() override {
    store_.reset();
    ::unlink(path_.c_str());
  }

  std::string path_;
  std::unique_ptr<Store> store_;
  stress::Mismatches mismatches_;
};

TEST_P(DaliScanStress, ScansPassEveryStableKeyOnceWhileTheTableGrowsAndChanges) {
  Options o;
  o.engine = "dali";
  o.pool_size = 256u << 20;
  o.durability = GetParam();
  o.epoch_ms = 1;
  // Tiny table (4 buckets, 4 lock stripes): splits and stripe collisions
  // all the time.
  o.set("dali.initial_log2", 2);
  o.set("dali.lock_timeout_ms", 60000);
  ASSERT_TRUE(Store::create(path_, o, &store_).ok());
  const std::uint64_t kStable = 300;
  for (std::uint64_t i = 0; i < kStable; ++i) {
    ASSERT_TRUE(store_->insert(stable_key(i), stable_value(i, 0)).ok());
  }
  constexpr unsigned kWriters = 2;
  constexpr unsigned kScanners = 2;
  const int ops = (GetParam() == Durability::kStrict ? 3000 : 15000) * kScale;
  std::atomic<bool> done{false};
  std::atomic<int> scans{0};
  std::barrier start(kWriters + kScanners + 1);
  std::vector<std::thread> threads;
  for (unsigned w = 0; w < kWriters; ++w) {
    threads.emplace_back([&, w] {
      std::mt19937_64 rng(w + 7);
      start.arrive_and_wait();
      std::vector<std::string> mine;  // present keys of this writer
      for (int i = 0; i < ops; ++i) {
        const unsigned r = static_cast<unsigned>(rng() % 100);
        if (r < 55 || mine.empty()) {  // grow
          const std::string k = "w" + std::to_string(w) + "-" + std::to_string(i);
          const Status s = store_->insert(k, "v" + k);
          if (!s.ok()) mismatches_.report(w, "insert " + k + ": " + s.to_string());
          mine.push_back(k);
        } else if (r < 75) {  // remove one of its own
          const std::size_t j = rng() % mine.size();
          const Status s = store_->remove(mine[j]);
          if (!s.ok()) mismatches_.report(w, "remove " + mine[j] + ": " + s.to_string());
          mine[j] = mine.back();
          mine.pop_back();
        } else {  // rewrite a stable key: in place within an epoch, else a new record
          const std::uint64_t k = rng() % kStable;
          const Status s = store_->update(stable_key(k), stable_value(k, rng() % 1000));
          if (!s.ok()) mismatches_.report(w, "update " + stable_key(k) + ": " + s.to_string());
        }
      }
    });
  }
  // Transactions rewrite pairs of stable keys until the writers are done.
  threads.emplace_back([&] {
    std::mt19937_64 rng(3);
    start.arrive_and_wait();
    while (!done.load()) {
      std::unique_ptr<Transaction> txn;
      if (!store_->transaction(&txn).ok()) {
        mismatches_.report(9, "transaction");
        return;
      }
      const std::uint64_t a = rng() % kStable;
      const std::uint64_t b = rng() % kStable;
      Status s = txn->update(stable_key(a), stable_value(a, 1000 + rng() % 1000));
      if (s.ok()) s = txn->update(stable_key(b), stable_value(b, 1000 + rng() % 1000));
      if (s.ok()) s = txn->commit();
      // A lock wait longer than the timeout aborts (no deadlock is possible
      // with one transaction thread; any other error is one).
      if (!s.ok() && !s.is_aborted()) mismatches_.report(9, "transaction: " + s.to_string());
    }
  });
  for (unsigned sc = 0; sc < kScanners; ++sc) {
    threads.emplace_back([&, sc] {
      std::mt19937_64 rng(sc + 11);
      start.arrive_and_wait();
      while (!done.load()) {
        std::vector<int> seen(kStable, 0);
        std::unordered_map<std::string, int> times;
        std::uint64_t cursor = 0;
        bool ok = true;
        do {
          const std::size_t count = 1 + rng() % 40;
          std::uint64_t next = 0;
          const Status s = store_->scan(
              cursor, count,
              [&](std::string_view k, std::string_view v) {
                const std::string key(k);
                if (++times[key] == 2) mismatches_.report(100 + sc, "one scan passed " + key + " twice");
                if (key[0] != 's') return;
                const std::uint64_t i = std::stoull(key.substr(1));
                if (i >= kStable || v.substr(0, key.size() + 1) != key + ":") {
                  mismatches_.report(100 + sc, "stable key " + key + " with value " + std::string(v));
                  return;
                }
                ++seen[i];
              },
              &next);
          if (!s.ok()) {
            mismatches_.report(100 + sc, "scan: " + s.to_string());
            ok = false;
            break;
          }
          if (next != 0 && next <= cursor) {
            mismatches_.report(100 + sc, "a scan call went back");
            ok = false;
            break;
          }
          cursor = next;
        } while (cursor != 0);
        if (!ok) return;
        for (std::uint64_t i = 0; i < kStable; ++i) {
          if (seen[i] != 1) {
            mismatches_.report(100 + sc, "a scan passed " + stable_key(i) + " " + std::to_string(seen[i]) +
                                             " times");
          }
        }
        scans.fetch_add(1);
      }
    });
  }
  for (unsigned w = 0; w < kWriters; ++w) threads[w].join();
  done.store(true);
  for (std::size_t i = kWriters; i < threads.size(); ++i) threads[i].join();
  EXPECT_EQ(mismatches_.count(), 0);
  EXPECT_GE(scans.load(), 2) << "too few whole scans overlapped the writers";
  EXPECT_GT(store_->stats().property("dali.splits"), 100u) << "the table did not grow under the scans";
  EXPECT_TRUE(store_->check().ok()) << store_->check().to_string();
}

INSTANTIATE_TEST_SUITE_P(Durability, DaliScanStress,
                         ::testing::Values(Durability::kEpoch, Durability::kStrict),
                         [](const ::testing::TestParamInfo<Durability>& info) {
                           return std::string(info.param == Durability::kStrict ? "Strict" : "Epoch");
                         });

}  // namespace
}  // namespace pmhash
