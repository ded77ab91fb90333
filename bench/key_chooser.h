// bench/key_chooser.h - which record an operation touches, with YCSB's
// request distributions: uniform, zipfian (Gray et al., "Quickly generating
// billion-record synthetic databases", SIGMOD'94), scrambled zipfian (the
// popular records spread over the key space instead of clustered at its
// start) and latest (the most recently inserted records are the popular
// ones). Deterministic by seed; workloads draw their choices before timing
// starts, so the cost of a draw never shows in a measurement.
#pragma once

#include <cmath>
#include <cstdint>
#include <random>

namespace pmhash::bench {

// A uniform double in [0, 1) from the generator's next 53 bits.
inline double unit_interval(std::mt19937_64& rng) {
  return static_cast<double>(rng() >> 11) * 0x1.0p-53;
}

// Ranks 0..n-1, rank i drawn with probability proportional to 1/(i+1)^theta.
// The item count may grow (latest); zeta(n) is extended incrementally.
class Zipfian {
 public:
  explicit Zipfian(std::uint64_t n, double theta = 0.99)
      : theta_(theta), alpha_(1.0 / (1.0 - theta)), zeta2_(1.0 + std::pow(0.5, theta)) {
    grow(n);
  }

  std::uint64_t items() const { return n_; }

  // Extends the item count to n (never shrinks): O(n - items()).
  void grow(std::uint64_t n) {
    for (; n_ < n; ++n_) zetan_ += 1.0 / std::pow(static_cast<double>(n_ + 1), theta_);
    eta_ = (1.0 - std::pow(2.0 / static_cast<double>(n_), 1.0 - theta_)) / (1.0 - zeta2_ / zetan_);
  }

  std::uint64_t next(std::mt19937_64& rng) const {
    const double u = unit_interval(rng);
    const double uz = u * zetan_;
    if (uz < 1.0) return 0;
    if (uz < zeta2_ || n_ < 3) return n_ < 2 ? 0 : 1;
    const auto rank = static_cast<std::uint64_t>(static_cast<double>(n_) *
                                                 std::pow(eta_ * u - eta_ + 1.0, alpha_));
    return rank < n_ ? rank : n_ - 1;
  }

 private:
  double theta_;
  double alpha_;
  double zeta2_;  // zeta(2, theta)
  std::uint64_t n_ = 0;
  double zetan_ = 0;
  double eta_ = 0;
};

// 64-bit FNV-1a over the eight bytes of v: spreads zipfian ranks over the
// records.
inline std::uint64_t fnv1a64(std::uint64_t v) {
  std::uint64_t h = 0xcbf2'9ce4'8422'2325ull;
  for (int i = 0; i < 8; ++i) {
    h ^= (v >> (8 * i)) & 0xff;
    h *= 0x0000'0100'0000'01b3ull;
  }
  return h;
}

enum class Distribution { kUniform, kZipfian, kLatest };

// Record indexes for a run phase. `records` is how many exist when the phase
// starts; for kLatest, inserted() tells the chooser about new ones.
class KeyChooser {
 public:
  KeyChooser(Distribution d, std::uint64_t records, double theta = 0.99)
      : dist_(d), records_(records), zipf_(records == 0 ? 1 : records, theta) {}

  std::uint64_t records() const { return records_; }

  // Record `records()` now exists (inserts append in index order).
  void inserted() {
    ++records_;
    if (dist_ == Distribution::kLatest) zipf_.grow(records_);
  }

  std::uint64_t next(std::mt19937_64& rng) const {
    switch (dist_) {
      case Distribution::kUniform:
        return records_ == 0 ? 0 : rng() % records_;
      case Distribution::kZipfian:
        // Scrambled: rank r is record hash(r) mod n, so the hot records are
        // scattered over the key space. Ranks can collide (a record then
        // gets both shares, another none), which matters on tiny tables only.
        return records_ == 0 ? 0 : fnv1a64(zipf_.next(rng)) % records_;
      case Distribution::kLatest: {
        const std::uint64_t back = zipf_.next(rng);
        return records_ == 0 ? 0 : records_ - 1 - (back < records_ ? back : records_ - 1);
      }
    }
    return 0;
  }

 private:
  Distribution dist_;
  std::uint64_t records_;
  Zipfian zipf_;
};

}  // namespace pmhash::bench
