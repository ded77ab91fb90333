// bench/histogram.h - latency histograms and the clock that feeds them.
//
// Histogram: log-bucketed with linear sub-buckets, the scheme of HdrHistogram.
// Values (nanoseconds) below 2^kSubBits = 128 have a bucket each; above, every
// power-of-two range [2^e, 2^(e+1)) is split into 128 equal buckets, so a
// bucket is never wider than 1/128 (< 0.8 %) of the values it holds. Values
// beyond 2^kMaxExponent ns (18 minutes) share the last bucket; the exact
// maximum and the exact sum (for the mean) are kept beside the buckets.
//
// Each worker thread records into histograms of its own (no sharing, no
// atomics); the driver merges them when the phase is over. A percentile is
// reported as the upper bound of the bucket holding it (never above the
// recorded maximum), so it overstates by less than one bucket width, as
// HdrHistogram's "highest equivalent value" does.
//
// Clock: one rdtsc per operation. A worker reads the time-stamp counter once
// before its first operation and once after each; the difference between
// consecutive readings is the operation's latency (loop overhead included,
// about 15 ns). The counter's rate is calibrated against steady_clock once
// per process. On a processor without an invariant TSC the clock falls back
// to steady_clock (about 30 ns per reading on the development machine).
#pragma once

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <chrono>
#include <cstdint>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#if defined(__x86_64__)
#include <x86intrin.h>
#endif

namespace pmhash::bench {

class Histogram {
 public:
  static constexpr unsigned kSubBits = 7;
  static constexpr std::uint64_t kSubBuckets = std::uint64_t{1} << kSubBits;
  static constexpr unsigned kMaxExponent = 40;
  static constexpr std::size_t kBuckets = kSubBuckets * (kMaxExponent - kSubBits + 2);

  void record(std::uint64_t ns) {
    ++counts_[index(ns)];
    ++count_;
    sum_ += ns;
    max_ = std::max(max_, ns);
  }

  void merge(const Histogram& other) {
    for (std::size_t i = 0; i < kBuckets; ++i) counts_[i] += other.counts_[i];
    count_ += other.count_;
    sum_ += other.sum_;
    max_ = std::max(max_, other.max_);
  }

  std::uint64_t count() const { return count_; }
  std::uint64_t max() const { return max_; }
  double mean() const { return count_ == 0 ? 0 : static_cast<double>(sum_) / count_; }

  // The smallest bucket bound b such that at least q * count() values are
  // <= b (q in [0, 1]); 0 for an empty histogram.
  std::uint64_t percentile(double q) const {
    if (count_ == 0) return 0;
    const double rank = std::ceil(std::clamp(q, 0.0, 1.0) * static_cast<double>(count_));
    const std::uint64_t target =
        std::clamp<std::uint64_t>(static_cast<std::uint64_t>(rank), 1, count_);
    std::uint64_t seen = 0;
    for (std::size_t i = 0; i < kBuckets; ++i) {
      seen += counts_[i];
      if (seen >= target) return std::min(upper_bound(i), max_);
    }
    return max_;
  }

  // Non-empty buckets as (upper bound in ns, count), in increasing order.
  std::vector<std::pair<std::uint64_t, std::uint64_t>> buckets() const {
    std::vector<std::pair<std::uint64_t, std::uint64_t>> out;
    for (std::size_t i = 0; i < kBuckets; ++i) {
      if (counts_[i] != 0) out.emplace_back(std::min(upper_bound(i), max_), counts_[i]);
    }
    return out;
  }

  // Bucket of a value; values from kSubBuckets on share a bucket with the
  // values that agree with them in their top kSubBits + 1 bits.
  static std::size_t index(std::uint64_t ns) {
    if (ns < kSubBuckets) return static_cast<std::size_t>(ns);
    const unsigned e = static_cast<unsigned>(std::bit_width(ns)) - 1;
    if (e > kMaxExponent) return kBuckets - 1;
    const unsigned shift = e - kSubBits;
    const std::uint64_t mantissa = ns >> shift;  // in [kSubBuckets, 2 * kSubBuckets)
    return static_cast<std::size_t>(kSubBuckets * (e - kSubBits + 1) + (mantissa - kSubBuckets));
  }

  // Largest value held by bucket i.
  static std::uint64_t upper_bound(std::size_t i) {
    if (i < kSubBuckets) return i;
    const std::uint64_t group = i / kSubBuckets;  // >= 1
    const unsigned shift = static_cast<unsigned>(group - 1);
    const std::uint64_t mantissa = kSubBuckets + i % kSubBuckets;
    return ((mantissa + 1) << shift) - 1;
  }

 private:
  std::array<std::uint64_t, kBuckets> counts_{};
  std::uint64_t count_ = 0;
  std::uint64_t sum_ = 0;
  std::uint64_t max_ = 0;
};

// Timestamps for latency measurement: ticks() is cheap, to_ns converts.
class TickClock {
 public:
  // Calibrates once per process (about 20 ms, spent busy-waiting).
  static const TickClock& get() {
    static const TickClock clock;
    return clock;
  }

  std::uint64_t ticks() const {
#if defined(__x86_64__)
    if (tsc_) return __rdtsc();
#endif
    return static_cast<std::uint64_t>(
        std::chrono::steady_clock::now().time_since_epoch().count());
  }

  std::uint64_t to_ns(std::uint64_t delta_ticks) const {
    return static_cast<std::uint64_t>(static_cast<double>(delta_ticks) * ns_per_tick_);
  }

  bool uses_tsc() const { return tsc_; }

 private:
  TickClock() {
#if defined(__x86_64__)
    tsc_ = invariant_tsc();
#endif
    if (!tsc_) {
      ns_per_tick_ = 1e9 * std::chrono::steady_clock::period::num /
                     std::chrono::steady_clock::period::den;
      return;
    }
    using clock = std::chrono::steady_clock;
    const auto start = clock::now();
    const std::uint64_t t0 = ticks();
    auto now = start;
    while (now - start < std::chrono::milliseconds(20)) now = clock::now();
    const std::uint64_t t1 = ticks();
    ns_per_tick_ = std::chrono::duration<double, std::nano>(now - start).count() /
                   static_cast<double>(t1 - t0);
  }

  // The TSC ticks at a constant rate in every power state.
  static bool invariant_tsc() {
    std::ifstream cpuinfo("/proc/cpuinfo");
    std::string word;
    bool constant = false;
    bool nonstop = false;
    while (cpuinfo >> word) {
      if (word == "constant_tsc") constant = true;
      if (word == "nonstop_tsc") nonstop = true;
      if (constant && nonstop) return true;
    }
    return false;
  }

  bool tsc_ = false;
  double ns_per_tick_ = 1;
};

}  // namespace pmhash::bench
