// tests/crash/persistence_sim.h - a model of the persistence domain behind a
// media::Region, for crash-consistency tests.
//
// The program runs on a real mapping (the *visible* image: what loads see).
// The simulator keeps a second copy, the *durable* image: what has certainly
// reached media. It learns about persistence through the Region's observer
// hook (every flush and drain, after the real primitive ran) and moves bytes
// from the visible to the durable image by the rules of the granularity:
//
//   cache_line  flush(p, n) marks the 64-byte lines of [p, p+n) as pending
//               for the calling thread; that thread's next drain() copies
//               the lines' current visible contents to the durable image.
//               (A store made after the flush but before the drain is
//               copied too: the line is written back at some point before
//               the fence completes, possibly after the store.)
//   page        the same as cache_line. A page-granularity Region maps its
//               file privately and writes back with pwrite (flush) and
//               fdatasync (drain): a flushed range reaches the file at the
//               latest at the drain, and after a power failure a page being
//               written back may be torn at its sectors, which the line
//               model (any subset of lines, torn at 8 bytes) covers. (A
//               line never flushed cannot reach media there at all; the
//               model lets it, which only adds crash states to check.)
//   byte        every store is durable once a fence orders it: drain()
//               copies the whole visible image.
//
// Crash semantics. At a crash, any *unit* (line, or 8-byte word for byte
// granularity) whose visible contents differ from its durable contents
// may or may not have reached media, in any combination; and because stores
// are atomic only at 8 bytes, a cache line may have been written back in
// part: any subset of its 8-byte words. crash_image() builds the media
// contents for one such choice: the durable image, plus the units chosen as
// written, plus the chosen words of torn lines. (With byte granularity the
// stores since the last fence really reach media in the order they became
// visible, an order the simulator cannot see; the explorer therefore only
// tries nothing and everything there.)
//
// Crash points. Every drain() is a crash point: just before the drain takes
// effect, the simulator calls the hook set with set_crash_point_hook(), which
// may inspect the state (dirty_units(), crash_image()) and build images to
// recover. The hook runs with the simulator's lock held, so other threads'
// flushes and drains wait for it; their plain stores do not (multi-threaded
// exploration must quiesce writers itself).
//
// Turns. Two more hooks, set_pre_drain_hook() and set_pre_flush_hook(), run
// at the start of every drain (before the crash point) and every flush,
// without the lock: a scheduler may park the thread there and let other
// threads run first, so that they see what the drain is about to make
// durable (a read of a write that a crash at this drain would lose).
//
// Only file-backed regions (granularity byte, cache_line or page) can be
// simulated; an anonymous region has nothing to persist.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "media/region.h"

namespace pmhash::testing {

// One crash: which dirty units reached media whole, and which cache lines
// reached it in part (bit i of the mask: word i of the line was written).
struct CrashChoice {
  std::vector<std::uint64_t> written;                       // unit offsets
  std::vector<std::pair<std::uint64_t, std::uint8_t>> torn;  // line offset, word mask

  // "written 0x40,0x1c0 torn 0x80/0x0f": names the choice in a reproducer.
  std::string describe() const;
};

class PersistenceSim final : public media::Region::Observer {
 public:
  static constexpr std::size_t kWordSize = 8;

  using Hook = std::function<void(const PersistenceSim&)>;

  // Starts with the durable image equal to the region's current contents
  // (call it right after the pool was created or opened and made durable),
  // and installs itself as the region's observer.
  explicit PersistenceSim(media::Region& region)
      : region_(region),
        granularity_(region.granularity()),
        unit_(unit_of(region.granularity())),
        durable_(region.base(), region.base() + region.size()) {
    region_.set_observer(this);
  }

  ~PersistenceSim() override {
    if (attached_) region_.set_observer(nullptr);
  }

  // For a region that is gone (its store closed): the destructor must not
  // touch it. Call only once nothing flushes or drains the region any more.
  void forget_region() { attached_ = false; }

  PersistenceSim(const PersistenceSim&) = delete;
  PersistenceSim& operator=(const PersistenceSim&) = delete;

  // Bytes per unit of persistence: 64 (cache_line), 4096 (page), 8 (byte).
  std::size_t unit() const { return unit_; }
  media::Granularity granularity() const { return granularity_; }

  void set_crash_point_hook(Hook hook) {
    std::lock_guard<std::mutex> lock(mu_);
    hook_ = std::move(hook);
  }

  // Runs at the start of every drain, in the draining thread, before the
  // crash point and without the simulator's lock (it may block). Set it at
  // most once (engine threads may drain meanwhile: it is published with one
  // atomic store) and keep what it uses alive while the region is watched.
  void set_pre_drain_hook(std::function<void()> hook) { publish(&pre_drain_store_, &pre_drain_, std::move(hook)); }
  // The same at the start of every flush (a scheduler may switch threads
  // there too: between a store that publishes and its drain).
  void set_pre_flush_hook(std::function<void()> hook) { publish(&pre_flush_store_, &pre_flush_, std::move(hook)); }

  // Drains seen so far (each one a crash point), counting the one whose
  // hook is running. Callable from the hook.
  std::uint64_t crash_points() const { return crash_points_.load(std::memory_order_relaxed); }

  void on_flush(std::uint64_t off, std::size_t n) override {
    if (n == 0) return;
    if (const auto* hook = pre_flush_.load(std::memory_order_acquire)) (*hook)();
    std::lock_guard<std::mutex> lock(mu_);
    switch (granularity_) {
      case media::Granularity::kCacheLine:
      case media::Granularity::kPage: {
        auto& pending = pending_[std::this_thread::get_id()];
        for (std::uint64_t line = align_down(off, unit_); line < off + n; line += unit_) {
          pending.insert(line);
        }
        break;
      }
      case media::Granularity::kByte:
      case media::Granularity::kNone:
        break;
    }
  }

  void on_drain() override {
    if (const auto* hook = pre_drain_.load(std::memory_order_acquire)) (*hook)();
    std::lock_guard<std::mutex> lock(mu_);
    crash_points_.fetch_add(1, std::memory_order_relaxed);
    if (hook_) hook_(*this);
    switch (granularity_) {
      case media::Granularity::kCacheLine:
      case media::Granularity::kPage: {
        auto it = pending_.find(std::this_thread::get_id());
        if (it == pending_.end()) break;
        for (std::uint64_t line : it->second) make_durable(line, unit_);
        pending_.erase(it);
        break;
      }
      case media::Granularity::kByte:
        make_durable(0, durable_.size());
        break;
      case media::Granularity::kNone:
        break;
    }
  }

  // --- inspection: from the hook, or while no thread uses the region -------

  // Offsets of the units whose visible bytes differ from their durable bytes
  // (among those that start below `end`: a caller that knows nothing was
  // ever stored above it saves the scan).
  std::vector<std::uint64_t> dirty_units(std::uint64_t end = ~std::uint64_t{0}) const {
    std::vector<std::uint64_t> out;
    const std::byte* visible = region_.base();
    for (std::uint64_t off = 0; off < std::min<std::uint64_t>(end, durable_.size()); off += unit_) {
      const std::size_t n = std::min<std::size_t>(unit_, durable_.size() - off);
      if (std::memcmp(visible + off, durable_.data() + off, n) != 0) out.push_back(off);
    }
    return out;
  }

  // Bit i set: word i of the cache line at `line` differs (cache_line, page).
  std::uint8_t dirty_words(std::uint64_t line) const {
    std::uint8_t mask = 0;
    for (unsigned w = 0; w < media::kCacheLineSize / kWordSize; ++w) {
      const std::uint64_t off = line + w * kWordSize;
      if (off + kWordSize > durable_.size()) break;
      if (std::memcmp(region_.base() + off, durable_.data() + off, kWordSize) != 0) {
        mask = static_cast<std::uint8_t>(mask | (1u << w));
      }
    }
    return mask;
  }

  const std::vector<std::byte>& durable() const { return durable_; }

  // The media contents after a crash with this choice. Units and lines must
  // be unit-aligned offsets inside the region; torn lines only exist with
  // cache_line and page granularity.
  std::vector<std::byte> crash_image(const CrashChoice& choice) const {
    std::vector<std::byte> image;
    crash_image_into(choice, &image);
    return image;
  }

  // The same into *image, reusing its storage; with `end`, only the first
  // `end` bytes of it (the choice's units must lie below).
  void crash_image_into(const CrashChoice& choice, std::vector<std::byte>* out,
                        std::uint64_t end = ~std::uint64_t{0}) const {
    std::vector<std::byte>& image = *out;
    image.resize(std::min<std::uint64_t>(end, durable_.size()));
    std::memcpy(image.data(), durable_.data(), image.size());
    const std::byte* visible = region_.base();
    for (std::uint64_t off : choice.written) {
      check_unit(off, image.size());
      const std::size_t n = std::min<std::size_t>(unit_, image.size() - off);
      std::memcpy(image.data() + off, visible + off, n);
    }
    for (const auto& [line, mask] : choice.torn) {
      if (granularity_ != media::Granularity::kCacheLine && granularity_ != media::Granularity::kPage) {
        throw std::invalid_argument("torn lines exist only with cache_line and page granularity");
      }
      check_unit(line, image.size());
      for (unsigned w = 0; w < media::kCacheLineSize / kWordSize; ++w) {
        if ((mask & (1u << w)) == 0) continue;
        const std::uint64_t off = line + w * kWordSize;
        if (off + kWordSize > image.size()) {
          throw std::out_of_range("torn word at " + std::to_string(off) + " lies beyond the image");
        }
        std::memcpy(image.data() + off, visible + off, kWordSize);
      }
    }
  }

 private:
  static std::size_t unit_of(media::Granularity g) {
    switch (g) {
      case media::Granularity::kCacheLine:
      case media::Granularity::kPage: return media::kCacheLineSize;
      case media::Granularity::kByte: return kWordSize;
      case media::Granularity::kNone: break;
    }
    throw std::invalid_argument("an anonymous region (granularity none) has no persistence to simulate");
  }

  static std::uint64_t align_down(std::uint64_t off, std::size_t unit) { return off / unit * unit; }

  // A unit-aligned offset below `end` (the image's size).
  void check_unit(std::uint64_t off, std::uint64_t end) const {
    if (off % unit_ != 0 || off >= end) {
      throw std::out_of_range("offset " + std::to_string(off) + " is not a unit of the region");
    }
  }

  static void publish(std::unique_ptr<std::function<void()>>* store, std::atomic<const std::function<void()>*>* slot,
                      std::function<void()> hook) {
    if (*store) throw std::logic_error("a pre-drain or pre-flush hook is set at most once");
    *store = std::make_unique<std::function<void()>>(std::move(hook));
    slot->store(store->get(), std::memory_order_release);
  }

  void make_durable(std::uint64_t off, std::size_t n) {
    if (off >= durable_.size()) return;
    n = std::min<std::size_t>(n, durable_.size() - off);
    std::memcpy(durable_.data() + off, region_.base() + off, n);
  }

  media::Region& region_;
  const media::Granularity granularity_;
  const std::size_t unit_;
  mutable std::mutex mu_;
  std::vector<std::byte> durable_;
  std::map<std::thread::id, std::set<std::uint64_t>> pending_;  // cache_line
  Hook hook_;
  std::unique_ptr<std::function<void()>> pre_drain_store_, pre_flush_store_;
  std::atomic<const std::function<void()>*> pre_drain_{nullptr}, pre_flush_{nullptr};
  std::atomic<std::uint64_t> crash_points_{0};
  bool attached_ = true;
};

// The crash choices to try at one crash point with these dirty units:
// every subset when there are at most `exhaustive_limit` of them. Otherwise
// the two extremes (nothing written, everything written); then, when there
// are at most `singles_limit`, each unit written alone and each unit left
// out alone (between them they catch every "A reached media, B did not"
// ordering mistake whatever the other lines do); then `samples` random
// subsets. With cache_line and page granularity each random choice also tears one of
// the lines it leaves out, in a random part of its dirty words.
inline std::vector<CrashChoice> crash_choices(const PersistenceSim& sim,
                                              const std::vector<std::uint64_t>& dirty,
                                              std::size_t exhaustive_limit, std::size_t samples,
                                              std::mt19937_64& rng, std::size_t singles_limit = 0) {
  std::vector<CrashChoice> out;
  if (dirty.size() <= exhaustive_limit) {
    for (std::uint64_t subset = 0; subset < (std::uint64_t{1} << dirty.size()); ++subset) {
      CrashChoice c;
      for (std::size_t i = 0; i < dirty.size(); ++i) {
        if (subset & (std::uint64_t{1} << i)) c.written.push_back(dirty[i]);
      }
      out.push_back(std::move(c));
    }
    return out;
  }
  out.push_back({});
  out.push_back({dirty, {}});
  if (dirty.size() <= singles_limit) {
    for (std::size_t i = 0; i < dirty.size(); ++i) {
      out.push_back({{dirty[i]}, {}});
      CrashChoice all_but;
      for (std::size_t j = 0; j < dirty.size(); ++j) {
        if (j != i) all_but.written.push_back(dirty[j]);
      }
      out.push_back(std::move(all_but));
    }
  }
  const bool tear = sim.granularity() != media::Granularity::kByte;
  for (std::size_t s = 0; s < samples; ++s) {
    CrashChoice c;
    std::vector<std::uint64_t> left_out;
    for (std::uint64_t unit : dirty) (rng() & 1 ? c.written : left_out).push_back(unit);
    if (tear && !left_out.empty()) {
      const std::uint64_t line = left_out[rng() % left_out.size()];
      const auto mask = static_cast<std::uint8_t>(sim.dirty_words(line) & rng());
      if (mask != 0) c.torn.emplace_back(line, mask);
    }
    out.push_back(std::move(c));
  }
  return out;
}

inline std::string CrashChoice::describe() const {
  auto hex = [](std::uint64_t v) {
    char buf[32];
    std::snprintf(buf, sizeof(buf), "0x%llx", static_cast<unsigned long long>(v));
    return std::string(buf);
  };
  std::string out = "written";
  if (written.empty()) out += " -";
  for (std::size_t i = 0; i < written.size(); ++i) out += (i == 0 ? " " : ",") + hex(written[i]);
  if (!torn.empty()) {
    out += " torn";
    for (std::size_t i = 0; i < torn.size(); ++i) {
      out += (i == 0 ? " " : ",") + hex(torn[i].first) + "/" + hex(torn[i].second);
    }
  }
  return out;
}

}  // namespace pmhash::testing
