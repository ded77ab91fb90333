// Tests of the benchmark's request distributions (bench/key_chooser.h):
// deterministic by seed, in range, and with the frequencies the formulas
// promise, computed here independently from the definition p(i) ~ 1/(i+1)^theta.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <vector>

#include "bench/key_chooser.h"

namespace pmhash::bench {
namespace {

constexpr int kDraws = 1'000'000;

// Exact zipfian probabilities of ranks 0..n-1.
std::vector<double> zipf_probabilities(std::uint64_t n, double theta) {
  std::vector<double> p(n);
  double sum = 0;
  for (std::uint64_t i = 0; i < n; ++i) sum += p[i] = 1.0 / std::pow(static_cast<double>(i + 1), theta);
  for (double& x : p) x /= sum;
  return p;
}

std::vector<std::uint64_t> draw_counts(const KeyChooser& c, std::uint64_t n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::uint64_t> counts(n);
  for (int i = 0; i < kDraws; ++i) {
    const std::uint64_t k = c.next(rng);
    EXPECT_LT(k, n);
    if (k < n) ++counts[k];
  }
  return counts;
}

TEST(KeyChooser, SameSeedSameSequenceOtherSeedAnother) {
  for (Distribution d : {Distribution::kUniform, Distribution::kZipfian, Distribution::kLatest}) {
    const KeyChooser c(d, 100000);
    std::mt19937_64 a(7), b(7), other(8);
    int differ = 0;
    for (int i = 0; i < 1000; ++i) {
      const std::uint64_t x = c.next(a);
      ASSERT_EQ(x, c.next(b));
      differ += x != c.next(other);
    }
    EXPECT_GT(differ, 500);
  }
}

TEST(KeyChooser, ZipfianRanksFollowTheirProbabilities) {
  const std::uint64_t n = 1000;
  const double theta = 0.99;
  const Zipfian z(n, theta);
  std::mt19937_64 rng(1);
  std::vector<std::uint64_t> counts(n);
  for (int i = 0; i < kDraws; ++i) {
    const std::uint64_t r = z.next(rng);
    ASSERT_LT(r, n);
    ++counts[r];
  }
  const std::vector<double> p = zipf_probabilities(n, theta);
  // Ranks 0 and 1 are exact in Gray's method; the rest is an approximation
  // whose head and tail masses must still be right.
  EXPECT_NEAR(counts[0] / double(kDraws), p[0], 0.03 * p[0]);
  EXPECT_NEAR(counts[1] / double(kDraws), p[1], 0.03 * p[1]);
  double top10 = 0, want10 = 0, top100 = 0, want100 = 0;
  for (int i = 0; i < 100; ++i) {
    if (i < 10) top10 += counts[i], want10 += p[i];
    top100 += counts[i];
    want100 += p[i];
  }
  EXPECT_NEAR(top10 / kDraws, want10, 0.05 * want10);
  EXPECT_NEAR(top100 / kDraws, want100, 0.05 * want100);
  // Monotone in expectation: rank 0 beats rank 10 beats rank 500.
  EXPECT_GT(counts[0], counts[10]);
  EXPECT_GT(counts[10], counts[500]);
}

TEST(KeyChooser, ScrambledZipfianSpreadsTheHotRecords) {
  const std::uint64_t n = 1000;
  const std::vector<std::uint64_t> counts = draw_counts(KeyChooser(Distribution::kZipfian, n), n, 2);
  std::vector<std::uint64_t> sorted = counts;
  std::sort(sorted.rbegin(), sorted.rend());
  // The hottest record gets at least rank 0's share (more if ranks collide
  // under the hash), and it is not simply record 0.
  const std::vector<double> p = zipf_probabilities(n, 0.99);
  EXPECT_GE(sorted[0] / double(kDraws), 0.97 * p[0]);
  const auto hottest = std::max_element(counts.begin(), counts.end()) - counts.begin();
  EXPECT_NE(hottest, 0);
  // The ten hottest records are scattered, not ten neighbours.
  std::vector<std::uint64_t> hot_ids(n);
  for (std::uint64_t i = 0; i < n; ++i) hot_ids[i] = i;
  std::sort(hot_ids.begin(), hot_ids.end(), [&](auto a, auto b) { return counts[a] > counts[b]; });
  const auto [lo, hi] = std::minmax_element(hot_ids.begin(), hot_ids.begin() + 10);
  EXPECT_GT(*hi - *lo, n / 4);
}

TEST(KeyChooser, LatestFavoursTheNewestRecordsAndFollowsInserts) {
  const std::uint64_t n = 1000;
  KeyChooser c(Distribution::kLatest, n);
  std::vector<std::uint64_t> counts = draw_counts(c, n, 3);
  const std::vector<double> p = zipf_probabilities(n, 0.99);
  EXPECT_NEAR(counts[n - 1] / double(kDraws), p[0], 0.03 * p[0]);
  EXPECT_GT(counts[n - 1], counts[n - 2]);
  EXPECT_GT(counts[n - 2], counts[n / 2]);
  // After 500 inserts the newest record is the hottest one.
  for (int i = 0; i < 500; ++i) c.inserted();
  ASSERT_EQ(c.records(), n + 500);
  counts = draw_counts(c, n + 500, 4);
  const std::vector<double> q = zipf_probabilities(n + 500, 0.99);
  EXPECT_NEAR(counts[n + 499] / double(kDraws), q[0], 0.03 * q[0]);
  EXPECT_EQ(std::max_element(counts.begin(), counts.end()) - counts.begin(), n + 499);
}

TEST(KeyChooser, UniformCoversEveryRecordEvenly) {
  const std::uint64_t n = 100;
  const std::vector<std::uint64_t> counts = draw_counts(KeyChooser(Distribution::kUniform, n), n, 5);
  const double expected = double(kDraws) / n;
  for (std::uint64_t i = 0; i < n; ++i) EXPECT_NEAR(counts[i], expected, 0.05 * expected) << i;
}

TEST(KeyChooser, TinyTablesStayInRange) {
  for (Distribution d : {Distribution::kUniform, Distribution::kZipfian, Distribution::kLatest}) {
    for (std::uint64_t n : {1, 2, 3}) {
      const KeyChooser c(d, n);
      std::mt19937_64 rng(6);
      std::map<std::uint64_t, int> seen;
      for (int i = 0; i < 10000; ++i) ++seen[c.next(rng)];
      EXPECT_LT(seen.rbegin()->first, n);
      // Scrambling hashes ranks onto records, and on a tiny table ranks
      // collide (3 records: ranks 1 and 2 both land on record 0), as in YCSB.
      if (d != Distribution::kZipfian) {
        EXPECT_EQ(seen.size(), n) << "every record is chosen";
      }
    }
  }
}

}  // namespace
}  // namespace pmhash::bench
