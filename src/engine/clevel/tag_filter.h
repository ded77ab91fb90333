// engine/clevel/tag_filter.h - a DRAM summary of the tags in one level's
// buckets, so that a search can skip buckets without reading them (design and
// correctness argument in clevel.h, "Tag filters").
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>

#include "engine/clevel/layout.h"

namespace pmhash::engine::clevel {

// One 64-bit word per bucket: a Bloom filter (3 bits per tag) of the tags of
// every pointer its slots have held since the filter was made. Bits are only
// ever added, so the filter can be wrong only in the safe direction (a bucket
// that may hold the tag and does not).
class TagFilter {
 public:
  // `ready`: the filter already covers every slot of the level (a new, empty
  // level); otherwise a builder must add the existing slots first.
  TagFilter(const LevelHeader* level, bool ready)
      : level_(level),
        log2_(level->log2),
        ready_(ready),
        words_(std::make_unique<std::atomic<std::uint64_t>[]>(std::size_t{1} << log2_)) {}

  static std::uint64_t bits(std::uint16_t tag) {
    // Three bit positions from one multiplicative hash of the 16-bit tag.
    const std::uint64_t m = (std::uint64_t{tag} + 1) * 0x9e37'79b9'7f4a'7c15ull;
    return (std::uint64_t{1} << (m >> 58)) | (std::uint64_t{1} << ((m >> 52) & 63)) |
           (std::uint64_t{1} << ((m >> 46) & 63));
  }

  bool is_for(const LevelHeader* level) const {
    return level_ == level && log2_ == level->log2;
  }
  bool ready() const { return ready_.load(std::memory_order_acquire); }
  void set_ready() { ready_.store(true, std::memory_order_seq_cst); }

  // Called before a pointer with `tag` is stored into `bucket` (seq_cst: the
  // bits are visible before the pointer can be).
  void add(std::uint64_t bucket, std::uint16_t tag) {
    words_[bucket].fetch_or(bits(tag), std::memory_order_seq_cst);
  }
  void add_bits(std::uint64_t bucket, std::uint64_t b) {
    words_[bucket].fetch_or(b, std::memory_order_seq_cst);
  }
  bool may_hold(std::uint64_t bucket, std::uint16_t tag) const {
    const std::uint64_t b = bits(tag);
    return (words_[bucket].load(std::memory_order_seq_cst) & b) == b;
  }
  std::uint64_t buckets() const { return std::uint64_t{1} << log2_; }
  std::uint64_t bytes() const { return buckets() * sizeof(std::uint64_t); }

 private:
  const LevelHeader* level_;
  unsigned log2_;
  std::atomic<bool> ready_;
  std::unique_ptr<std::atomic<std::uint64_t>[]> words_;
};

}  // namespace pmhash::engine::clevel
