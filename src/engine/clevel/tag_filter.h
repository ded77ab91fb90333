// engine/clevel/tag_filter.h - a DRAM summary of the tags in one level's
// buckets, so that a search can skip buckets without reading them (design and
// correctness argument in clevel.h, "Tag filters").
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <thread>

#include "engine/clevel/layout.h"

namespace pmhash::engine::clevel {

// One 64-bit word per bucket:
//   63..10  a Bloom filter (3 of these 54 bits per tag) of the tags of the
//           pointers in the bucket's slots, and possibly of a few that left
//   9       LOCK: a remover is recomputing the word (shed())
//   8..0    ADDERS: writers between begin_add() and end_add() (at most one
//           per heap thread, fewer than 512)
// Bits are added before a pointer is stored and shed after one is cleared,
// so the filter errs only in the safe direction (a bucket that may hold the
// tag and does not). Shedding argument: clevel.h, "Tag filters".
class TagFilter {
 public:
  static constexpr std::uint64_t kAdderMask = 0x1ff;
  static constexpr std::uint64_t kLock = std::uint64_t{1} << 9;
  static constexpr unsigned kFirstBit = 10;

  // `ready`: the filter already covers every slot of the level (a new, empty
  // level); otherwise a builder must add the existing slots first.
  TagFilter(const LevelHeader* level, bool ready)
      : level_(level),
        log2_(level->log2),
        ready_(ready),
        words_(std::make_unique<std::atomic<std::uint64_t>[]>(std::size_t{1} << log2_)) {}

  static std::uint64_t bits(std::uint16_t tag) {
    // Three bit positions in 63..10 from one multiplicative hash of the tag.
    const std::uint64_t m = (std::uint64_t{tag} + 1) * 0x9e37'79b9'7f4a'7c15ull;
    constexpr unsigned n = 64 - kFirstBit;
    return (std::uint64_t{1} << (kFirstBit + (m >> 48) % n)) |
           (std::uint64_t{1} << (kFirstBit + ((m >> 32) & 0xffff) % n)) |
           (std::uint64_t{1} << (kFirstBit + ((m >> 16) & 0xffff) % n));
  }

  bool is_for(const LevelHeader* level) const {
    return level_ == level && log2_ == level->log2;
  }
  bool ready() const { return ready_.load(std::memory_order_acquire); }
  void set_ready() { ready_.store(true, std::memory_order_seq_cst); }

  // Called before a pointer with `tag` is stored into `bucket` by CAS from
  // an empty slot; end_add() after that CAS, whether it succeeded or not.
  // Waits while a remover holds LOCK (a few loads of one bucket). seq_cst:
  // the bits are visible before the pointer can be.
  void begin_add(std::uint64_t bucket, std::uint16_t tag) {
    auto& w = words_[bucket];
    const std::uint64_t b = bits(tag);
    std::uint64_t v = w.load(std::memory_order_relaxed);
    for (;;) {
      if (v & kLock) {
        std::this_thread::yield();
        v = w.load(std::memory_order_relaxed);
        continue;
      }
      if (w.compare_exchange_weak(v, (v | b) + 1, std::memory_order_seq_cst)) return;
    }
  }
  void end_add(std::uint64_t bucket) { words_[bucket].fetch_sub(1, std::memory_order_seq_cst); }

  // The builder's bits for slots that existed before the filter (build_filters).
  void add_bits(std::uint64_t bucket, std::uint64_t b) {
    words_[bucket].fetch_or(b, std::memory_order_seq_cst);
  }

  // After a slot of `bucket` (whose slots are `b`) was cleared: recompute the
  // word from the slots. Skipped (the word keeps its extra bits) while an
  // adder is in flight or another remover recomputes it.
  void shed(std::uint64_t bucket, const Bucket& b) {
    auto& w = words_[bucket];
    std::uint64_t v = w.load(std::memory_order_seq_cst);
    if ((v & (kAdderMask | kLock)) != 0) return;
    if (!w.compare_exchange_strong(v, v | kLock, std::memory_order_seq_cst)) return;
    // No adder is between begin_add and end_add, and none can start until
    // we unlock: nothing but this bucket's own pointers can gain a tag here.
    std::uint64_t fresh = 0;
    for (const auto& s : b.slot) {
      const std::uint64_t sv = s.load(std::memory_order_seq_cst);
      if (!slot_empty(sv)) fresh |= bits(pool::pptr_tag(sv));
    }
    w.store(fresh, std::memory_order_seq_cst);
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
