// engine/common/item_count.h - an engine's item count: striped in DRAM while
// the store runs, saved in the root by a clean close.
//
// In DRAM: one 64-byte stripe per heap thread slot, each written only by the
// thread that holds the slot, plus a base. size() is the base plus every
// stripe: exact whenever no write is in flight, O(threads) to read, and no
// write moves a shared line between cores. A stripe may carry an engine's
// own per-thread counters (`Extra`) in the same line.
//
// The base is known after a clean close (the saved count) or once counted
// after a crash (recount: the items found, less the stripes' sum when the
// counting began, since writes may run meanwhile). While it is unknown,
// size() counts first, and close saves nothing.
//
// On media: two words of the engine's root, the count and a flag that
// vouches for it. The flag is 1 from a clean close until the next open,
// which clears it before the store serves anything.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>

#include "media/region.h"
#include "pmhash/limits.h"

namespace pmhash::engine::common {

struct NoExtra {};

template <class Extra = NoExtra>
class ItemCount {
 public:
  static constexpr unsigned kStripes = kMaxThreads;  // one per heap thread slot

  // `known`: whether a base of 0 is the count (a new, empty index).
  explicit ItemCount(bool known = false) : stripes_(new Stripe[kStripes]), known_(known) {}

  // A change by the thread holding heap slot `t`.
  void add(unsigned t, std::int64_t delta) {
    stripes_[t].v.fetch_add(delta, std::memory_order_relaxed);
  }
  // The same, when stripe `t` has no other writer at all (no read-modify-
  // write needed; readers see either value).
  void add_owned(unsigned t, std::int64_t delta) {
    auto& v = stripes_[t].v;
    v.store(v.load(std::memory_order_relaxed) + delta, std::memory_order_relaxed);
  }
  Extra& extra(unsigned t) { return stripes_[t].extra; }
  const Extra& extra(unsigned t) const { return stripes_[t].extra; }
  template <class Fn>
  void for_each_extra(Fn&& fn) const {
    for (unsigned t = 0; t < kStripes; ++t) fn(stripes_[t].extra);
  }

  // The stripes' sum: every change since the base was set.
  std::int64_t changes() const {
    std::int64_t n = 0;
    for (unsigned t = 0; t < kStripes; ++t) n += stripes_[t].v.load();
    return n;
  }
  // Base plus changes (the base need not be known; see total_or_count).
  std::uint64_t total() const {
    std::int64_t n = base_.load(std::memory_order_relaxed);
    for (unsigned t = 0; t < kStripes; ++t) n += stripes_[t].v.load(std::memory_order_relaxed);
    return n < 0 ? 0 : static_cast<std::uint64_t>(n);
  }
  // total(), after counting once with `count` (the items in the index,
  // int64) if the base is unknown. Concurrent callers count once.
  template <class CountFn>
  std::uint64_t total_or_count(CountFn&& count) const {
    if (!known()) {
      std::lock_guard lock(recount_mutex_);
      if (!known_.load()) {
        const std::int64_t before = changes();
        const std::int64_t n = count();
        set_base(n - before);
      }
    }
    return total();
  }

  bool known() const { return known_.load(std::memory_order_acquire); }
  // Sets the base and whether it is the true count.
  void set_base(std::int64_t base, bool known = true) const {
    base_.store(base);
    known_.store(known, std::memory_order_release);
  }

  // At open: the count a clean close saved, if any (then it is the base);
  // from then on the flag is 0 on media.
  std::optional<std::uint64_t> take_saved(media::Region& region, std::uint64_t& count,
                                          std::uint64_t& valid) {
    std::optional<std::uint64_t> saved;
    if (valid == 1) saved = count;
    if (valid != 0) {
      valid = 0;
      // Invalid on media before any write is served: else a crash in this
      // session would reopen with the old count taken for true.
      region.persist(&valid, sizeof(std::uint64_t));
    }
    if (saved) set_base(static_cast<std::int64_t>(*saved));
    return saved;
  }

  // At a clean close, with no write in flight: saves the count if it is
  // known (close never counts).
  void save(media::Region& region, std::uint64_t& count, std::uint64_t& valid) const {
    if (!known()) return;
    count = total();
    // The count is durable before the flag that vouches for it: the two words
    // may share a line, but a line may reach media in part (found by the crash
    // checker: a torn line with the flag and not the count).
    region.persist(&count, sizeof(std::uint64_t));
    valid = 1;
    // Both are durable before the store marks the pool clean (Store::close).
    region.persist(&valid, sizeof(std::uint64_t));
  }

 private:
  struct alignas(64) Stripe {
    std::atomic<std::int64_t> v{0};
    [[no_unique_address]] Extra extra;
  };
  std::unique_ptr<Stripe[]> stripes_;
  mutable std::atomic<std::int64_t> base_{0};
  mutable std::atomic<bool> known_;
  mutable std::mutex recount_mutex_;
};

}  // namespace pmhash::engine::common
