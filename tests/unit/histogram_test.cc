// tests/unit/histogram_test.cc - the latency histogram of pmhash-bench
// (bench/histogram.h): bucket bounds, percentiles, merging.
#include "bench/histogram.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <random>

namespace pmhash::bench {
namespace {

TEST(Histogram, EveryValueFallsInABucketWhoseBoundsHoldIt) {
  std::mt19937_64 rng(7);
  auto check = [](std::uint64_t v) {
    const std::size_t i = Histogram::index(v);
    ASSERT_LT(i, Histogram::kBuckets);
    EXPECT_GE(Histogram::upper_bound(i), v) << v;
    if (i > 0) {
      EXPECT_LT(Histogram::upper_bound(i - 1), v) << v;
    }
  };
  for (std::uint64_t v = 0; v < 100'000; ++v) check(v);
  for (int i = 0; i < 100'000; ++i) check(rng() >> (24 + rng() % 40));
}

TEST(Histogram, BucketsAreNarrowerThanOnePercentOfTheirValues) {
  for (std::size_t i = Histogram::kSubBuckets; i < Histogram::kBuckets; ++i) {
    const std::uint64_t lower = Histogram::upper_bound(i - 1) + 1;
    const std::uint64_t width = Histogram::upper_bound(i) - lower + 1;
    EXPECT_LE(static_cast<double>(width), static_cast<double>(lower) / 100.0) << i;
  }
}

TEST(Histogram, PercentilesOfAUniformRangeAreWithinOneBucket) {
  Histogram h;
  for (std::uint64_t v = 1; v <= 10'000; ++v) h.record(v);
  EXPECT_EQ(h.count(), 10'000u);
  EXPECT_DOUBLE_EQ(h.mean(), 5000.5);
  EXPECT_EQ(h.max(), 10'000u);
  const struct {
    double q;
    std::uint64_t exact;
  } cases[] = {{0.5, 5000}, {0.9, 9000}, {0.99, 9900}, {0.999, 9990}, {1.0, 10'000}};
  for (const auto& c : cases) {
    const std::uint64_t p = h.percentile(c.q);
    EXPECT_GE(p, c.exact) << c.q;
    EXPECT_LE(static_cast<double>(p), c.exact * 1.01) << c.q;
  }
}

TEST(Histogram, PercentilesNeverExceedTheMaximum) {
  Histogram h;
  h.record(1'000'001);
  EXPECT_EQ(h.percentile(0.5), 1'000'001u);
  EXPECT_EQ(h.percentile(1.0), 1'000'001u);
  EXPECT_EQ(Histogram().percentile(0.5), 0u);
}

TEST(Histogram, HugeValuesShareTheLastBucketAndKeepTheExactMaximum) {
  Histogram h;
  h.record(std::uint64_t{1} << 50);
  h.record(std::uint64_t{1} << 62);
  EXPECT_EQ(Histogram::index(std::uint64_t{1} << 62), Histogram::kBuckets - 1);
  EXPECT_EQ(h.max(), std::uint64_t{1} << 62);
  EXPECT_EQ(h.buckets().size(), 1u);
  EXPECT_EQ(h.buckets().front().second, 2u);
}

TEST(Histogram, MergingEqualsRecordingEverythingInOne) {
  std::mt19937_64 rng(3);
  Histogram a, b, both;
  for (int i = 0; i < 50'000; ++i) {
    const std::uint64_t v = rng() % 1'000'000;
    (i % 3 == 0 ? a : b).record(v);
    both.record(v);
  }
  a.merge(b);
  EXPECT_EQ(a.count(), both.count());
  EXPECT_EQ(a.max(), both.max());
  EXPECT_DOUBLE_EQ(a.mean(), both.mean());
  EXPECT_EQ(a.buckets(), both.buckets());
  for (double q : {0.5, 0.9, 0.99, 0.999}) EXPECT_EQ(a.percentile(q), both.percentile(q));
}

TEST(Histogram, BucketListIsSortedAndCountsEveryValue) {
  Histogram h;
  for (std::uint64_t v : {5u, 500u, 50u, 5000u, 50u}) h.record(v);
  const auto buckets = h.buckets();
  std::uint64_t total = 0;
  for (std::size_t i = 0; i < buckets.size(); ++i) {
    total += buckets[i].second;
    if (i > 0) {
      EXPECT_LT(buckets[i - 1].first, buckets[i].first);
    }
  }
  EXPECT_EQ(total, 5u);
}

TEST(TickClock, ConvertsTicksToPlausibleNanoseconds) {
  const TickClock& clock = TickClock::get();
  const auto start = std::chrono::steady_clock::now();
  const std::uint64_t t0 = clock.ticks();
  while (std::chrono::steady_clock::now() - start < std::chrono::milliseconds(20)) {
  }
  const std::uint64_t ns = clock.to_ns(clock.ticks() - t0);
  // At least the 20 ms waited; an upper bound would depend on scheduling.
  EXPECT_GE(ns, 19'000'000u);
}

}  // namespace
}  // namespace pmhash::bench
