// Stress test of Store::scan on pmeh (pmeh.h, "Scan"): scanners run whole
// scans, in calls of random sizes, from cursor 0 and from random cursors,
// while writers insert and remove keys that split segments (gradually, with
// writes delegated to the owners; at once, with direct writes) and grow the
// directories under them. Every stable key (present for the
// whole test) must be passed exactly once by each scan that covers it:
// once, not merely at least once, since positions are hashes and the
// ranges a scan copies are disjoint. Each key passed must exist in the test
// with the value it was given, and no other key may be passed twice.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <barrier>
#include <cstdint>
#include <random>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "engine/hash.h"
#include "pmhash/store.h"
#include "scratch_file.h"
#include "stress/stress_common.h"

namespace pmhash {
namespace {

using stress::kScale;

// Short keys with short values are inline pairs; every third key has a
// value long enough for an item.
std::string value_for(const std::string& key, std::size_t i) {
  return i % 3 == 0 ? key + "/a value long enough for an item" : "v" + std::to_string(i % 997);
}

// The parameter is pmeh.write_mode: 1 delegates every write (gradual
// splits, a few buckets per write), 2 writes directly (SHARED zones: a
// split moves whole right after the write that started it).
class PmehScanStress : public ::testing::TestWithParam<unsigned> {
 protected:
  void SetUp() override {
    path_ = testing::scratch_path("pmhash-pmeh-scan-stress") + ".pool";
    ::unlink(path_.c_str());
    Options o;
    o.engine = "pmeh";
    o.pool_size = 256u << 20;
    // Small segments in four zones, two-way splits of two buckets a step:
    // many splits, each in flight for many writes, and directory growth.
    o.set("pmeh.workers", 1);
    o.set("pmeh.zone_bits", 2);
    o.set("pmeh.segment_kib", 4);
    o.set("pmeh.split_bits", 1);
    o.set("pmeh.split_step", 2);
    o.set("pmeh.write_mode", GetParam());
    const Status s = Store::create(path_, o, &store_);
    ASSERT_TRUE(s.ok()) << s.to_string();
  }
  void TearDown() override {
    store_.reset();
    ::unlink(path_.c_str());
  }

  std::string path_;
  std::unique_ptr<Store> store_;
  stress::Mismatches mismatches_;
};

TEST_P(PmehScanStress, ScansPassEveryStableKeyOnceWhileSegmentsSplitAndDirectoriesGrow) {
  constexpr unsigned kWriters = 2;
  const std::size_t stable_n = 400;
  const std::size_t per_writer = 1000 * kScale;
  const std::size_t lag = 8;  // a writer removes the key it inserted `lag` keys ago, every other time
  const int min_scans = 4;
  std::unordered_map<std::string, std::string> value_of;  // every key the test writes
  std::vector<std::string> stable;
  for (std::size_t i = 0; i < stable_n; ++i) {
    stable.push_back("s" + std::to_string(i));
    value_of[stable.back()] = value_for(stable.back(), i);
  }
  std::vector<std::vector<std::string>> fresh(kWriters);
  for (unsigned w = 0; w < kWriters; ++w) {
    for (std::size_t i = 0; i < per_writer; ++i) {
      fresh[w].push_back(std::string(1, static_cast<char>('a' + w)) + std::to_string(i));
      value_of[fresh[w].back()] = value_for(fresh[w].back(), i);
    }
  }
  for (const std::string& k : stable) ASSERT_TRUE(store_->insert(k, value_of.at(k)).ok());
  std::vector<std::uint64_t> stable_h1;
  for (const std::string& k : stable) stable_h1.push_back(engine::make_key(k).h1);

  std::atomic<bool> writers_done{false};
  std::atomic<int> scans{0}, scans_with_splits{0};
  std::barrier start(kWriters + 2);
  std::vector<std::thread> threads;
  for (unsigned w = 0; w < kWriters; ++w) {
    threads.emplace_back([&, w] {
      start.arrive_and_wait();
      for (std::size_t i = 0; i < per_writer; ++i) {
        Status s = store_->insert(fresh[w][i], value_of.at(fresh[w][i]));
        if (!s.ok()) mismatches_.report(w, "insert " + fresh[w][i] + ": " + s.to_string());
        if (i >= lag && (i - lag) % 2 == 0) {
          s = store_->remove(fresh[w][i - lag]);
          if (!s.ok()) mismatches_.report(w, "remove " + fresh[w][i - lag] + ": " + s.to_string());
        }
      }
    });
  }
  // Scanner t: t == 0 scans from cursor 0; t == 1 from random cursors.
  for (unsigned t = 0; t < 2; ++t) {
    threads.emplace_back([&, t] {
      const unsigned me = kWriters + t;
      std::mt19937_64 rng(101 + t);
      start.arrive_and_wait();
      while (!writers_done.load() || scans.load() < min_scans) {
        const std::uint64_t from = t == 0 ? 0 : rng();
        const std::size_t count = 1 + rng() % 64;
        const std::uint64_t splits_before = store_->stats().property("pmeh.splits");
        std::unordered_map<std::string, int> seen;
        std::uint64_t cursor = from;
        for (std::uint64_t calls = 0;; ++calls) {
          if (calls > 1000000) {
            mismatches_.report(me, "a scan did not end");
            break;
          }
          std::uint64_t next = 0;
          const Status s = store_->scan(
              cursor, count,
              [&](std::string_view k, std::string_view v) {
                const std::string key(k);
                const auto it = value_of.find(key);
                if (it == value_of.end() || it->second != v) {
                  mismatches_.report(me, "scan passed " + key + " -> " + std::string(v));
                }
                if (++seen[key] == 2) mismatches_.report(me, "scan passed " + key + " twice");
              },
              &next);
          if (!s.ok()) {
            mismatches_.report(me, "scan: " + s.to_string());
            break;
          }
          if (next == 0) break;
          if (next <= cursor) mismatches_.report(me, "the cursor went back");
          cursor = next;
        }
        for (std::size_t i = 0; i < stable.size(); ++i) {
          const bool covered = stable_h1[i] >= from;
          const bool passed = seen.contains(stable[i]);
          if (covered != passed) {
            mismatches_.report(me, "a scan from " + std::to_string(from) + " (count " +
                                       std::to_string(count) + ") " +
                                       (covered ? "missed stable " : "passed, below its start, ") +
                                       stable[i]);
          }
        }
        if (store_->stats().property("pmeh.splits") != splits_before) scans_with_splits.fetch_add(1);
        scans.fetch_add(1);
      }
    });
  }
  for (unsigned w = 0; w < kWriters; ++w) threads[w].join();
  writers_done.store(true);
  for (unsigned t = kWriters; t < threads.size(); ++t) threads[t].join();
  EXPECT_EQ(mismatches_.count(), 0);
  EXPECT_GE(scans.load(), min_scans);
  EXPECT_GT(scans_with_splits.load(), 0) << "no scan ran while a split completed";
  const Status c = store_->check();
  EXPECT_TRUE(c.ok()) << c.to_string();
}

INSTANTIATE_TEST_SUITE_P(WriteMode, PmehScanStress, ::testing::Values(1u, 2u),
                         [](const auto& info) {
                           return std::string(info.param == 1 ? "Delegated" : "Direct");
                         });

}  // namespace
}  // namespace pmhash
