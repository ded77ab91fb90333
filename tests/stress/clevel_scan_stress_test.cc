// Stress test of clevel's scan (clevel.h, "Scan"): scanners run whole scans,
// call by call with varying counts, while writers grow the table and empty
// it again, so that expansions and shrinks (and their epoch changes) happen
// under the scans. Every key present the whole time must be passed by every
// scan, with its value; once the writers stop, a scan passes each key
// exactly once.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <random>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "pmhash/store.h"
#include "stress/stress_common.h"

namespace pmhash {
namespace {

using stress::key_of;
using stress::kScale;
using stress::value_of;

constexpr std::uint64_t kStableBase = 1'000'000'000;  // stable keys: kStableBase + i

TEST(ClevelScanStress, ScansPassEveryStableKeyWhileTheTableGrowsAndShrinks) {
  const std::string path = "/dev/shm/pmhash-scan-stress-" + std::to_string(getpid()) + ".pool";
  ::unlink(path.c_str());
  std::unique_ptr<Store> store;
  Options o;
  o.pool_size = 256u << 20;
  o.set("clevel.initial_level_log2", 3);  // tiny: many resizes
  o.set("clevel.min_level_log2", 2);
  o.set("clevel.shrink_threshold", 0.35);  // high: shrinks between the growths
  Status created = Store::create(path, o, &store);
  ASSERT_TRUE(created.ok()) << created.to_string();

  const std::uint64_t stable = 400;
  for (std::uint64_t i = 0; i < stable; ++i) {
    ASSERT_TRUE(store->insert(key_of(kStableBase + i), value_of(kStableBase + i, 0)).ok());
  }

  const unsigned writers = 2;
  const unsigned scanners = 2;
  const std::uint64_t keys_per_writer = 3000 * kScale;
  const int phases = 4;  // grow, empty, grow, empty
  stress::Mismatches mismatches;
  std::atomic<unsigned> writers_done{0};
  std::atomic<std::uint64_t> full_scans{0};

  std::vector<std::thread> threads;
  for (unsigned w = 0; w < writers; ++w) {
    threads.emplace_back([&, w] {
      for (int phase = 0; phase < phases; ++phase) {
        for (std::uint64_t i = 0; i < keys_per_writer; ++i) {
          const std::uint64_t k = i * writers + w;
          const Status s = phase % 2 == 0 ? store->insert(key_of(k), value_of(k, 0))
                                          : store->remove(key_of(k));
          if (!s.ok()) mismatches.report(w, "write of " + key_of(k) + ": " + s.to_string());
        }
      }
      writers_done.fetch_add(1);
    });
  }
  for (unsigned t = 0; t < scanners; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937_64 rng(7 + t);
      const unsigned me = writers + t;
      do {
        std::unordered_map<std::string, int> seen;
        std::uint64_t cursor = 0;
        std::uint64_t calls = 0;
        for (;;) {
          std::uint64_t next = 0;
          const std::size_t count = 1 + rng() % 64;
          const Status s = store->scan(
              cursor, count,
              [&](std::string_view k, std::string_view v) {
                const std::string key(k);
                ++seen[key];
                if (key.size() > 1 && std::stoull(key.substr(1)) >= kStableBase &&
                    v != value_of(std::stoull(key.substr(1)), 0)) {
                  mismatches.report(me, "stable key " + key + " passed with a wrong value");
                }
              },
              &next);
          if (!s.ok()) {
            mismatches.report(me, "scan: " + s.to_string());
            return;
          }
          ++calls;
          if (next == 0) break;
          cursor = next;
          if (calls > 10'000'000) {
            mismatches.report(me, "a scan did not end");
            return;
          }
        }
        for (std::uint64_t i = 0; i < stable; ++i) {
          if (seen.count(key_of(kStableBase + i)) == 0) {
            mismatches.report(me, "scan " + std::to_string(full_scans.load()) +
                                      " missed stable key " + key_of(kStableBase + i));
          }
        }
        full_scans.fetch_add(1);
      } while (writers_done.load() < writers);
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(mismatches.count(), 0);
  EXPECT_GE(full_scans.load(), scanners);
  const Stats st = store->stats();
  EXPECT_GT(st.property("clevel.expansions"), 0u);
  EXPECT_GT(st.property("clevel.shrinks"), 0u) << "no shrink ran under the scans";

  // No more writes: each key exactly once (a round still running is waited for).
  std::unordered_map<std::string, int> seen;
  std::uint64_t cursor = 0;
  do {
    std::uint64_t next = 0;
    ASSERT_TRUE(store->scan(cursor, 100, [&](std::string_view k, std::string_view) {
                  ++seen[std::string(k)];
                }, &next).ok());
    cursor = next;
  } while (cursor != 0);
  EXPECT_EQ(seen.size(), store->size());
  for (const auto& [k, n] : seen) EXPECT_EQ(n, 1) << k;
  Status c = store->check();
  EXPECT_TRUE(c.ok()) << c.to_string();
  ASSERT_TRUE(store->close().ok());
  store.reset();
  ::unlink(path.c_str());
}

}  // namespace
}  // namespace pmhash
