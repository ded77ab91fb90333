// engine/clevel/clevel_scan.cc - the resumable scan (Index::scan); the
// order, the cursor's bits and why no key is missed are in clevel.h, "Scan".
#include <algorithm>
#include <chrono>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "engine/clevel/clevel_index.h"
#include "sync/rcu.h"

namespace pmhash::engine::clevel {
namespace {

// Cursor bits (clevel.h, "Scan"):
//   63..48  the scan epoch's low 16 bits when the cursor was handed out
//   47..42  level field: log2 of the level's bucket count, plus one
//           (0: before every level; 42..63: past every level)
//   41..0   bucket index in that level (a level has at most 2^40 buckets)
constexpr unsigned kEpochShift = 48;
constexpr std::uint64_t kEpochMask = 0xffff;
constexpr unsigned kLevelShift = 42;
constexpr std::uint64_t kLevelFieldMask = 63;
constexpr std::uint64_t kBucketMask = (std::uint64_t{1} << kLevelShift) - 1;
// The level field of the cursor a call returns when the epoch changed under
// it: past every level, so that the cursor is never 0.
constexpr std::uint64_t kPastEveryLevel = 63;
static_assert(kMaxLevelLog2 + 1 < kPastEveryLevel);
static_assert((std::uint64_t{1} << kMaxLevelLog2) <= kBucketMask);

// How long one call may wait for rehash rounds (scan_wait): in all, and
// without seeing the round progress.
constexpr auto kWaitBudget = std::chrono::seconds(5);
constexpr auto kStallLimit = std::chrono::milliseconds(200);

}  // namespace

// A position in scan order: a level by its log2 (-1: before every level, 64:
// past every level) and a bucket in it.
struct ClevelIndex::ScanPos {
  int log2 = -1;
  std::uint64_t bucket = 0;
};

struct ClevelIndex::ScanWait {
  std::chrono::steady_clock::time_point deadline =
      std::chrono::steady_clock::now() + kWaitBudget;
  bool spent = false;
};

bool ClevelIndex::scan_resolve(Ctx c, bool up, ScanPos* pos, LevelHeader** l,
                               std::uint16_t* id) const {
  // The live level whose log2 is the nearest to pos->log2 at or after it in
  // scan order (up: ascending log2, down: descending), or strictly after it
  // once pos->bucket is past that level's end.
  for (;;) {
    bool found = false;
    int best = 0;
    for (unsigned i = 0; i < c.levels(); ++i) {
      const auto lid = static_cast<std::uint16_t>(c.last() + i);
      LevelHeader* h = level(lid);
      const int log2 = static_cast<int>(std::min<std::uint32_t>(h->log2, kMaxLevelLog2));
      const bool eligible = up ? log2 >= pos->log2 : log2 <= pos->log2;
      if (!eligible) continue;
      if (!found || (up ? log2 < best : log2 > best)) {
        found = true;
        best = log2;
        *l = h;
        *id = lid;
      }
    }
    if (!found) return false;
    if (best != pos->log2) {
      pos->log2 = best;
      pos->bucket = 0;
    }
    if (pos->bucket < (std::uint64_t{1} << best)) return true;
    // Past this level's last bucket: the next level in scan order.
    pos->log2 = up ? best + 1 : best - 1;
    pos->bucket = 0;
  }
}

bool ClevelIndex::scan_wait(Ctx until_changed, ScanWait* w) const {
  if (w->spent) return false;
  const auto progress = [this] {
    std::uint64_t sum = 0;
    for (const Progress& p : root_->progress) sum += p.next.load(std::memory_order_relaxed);
    return sum;
  };
  std::uint64_t seen = progress();
  auto moved_at = std::chrono::steady_clock::now();
  for (;;) {
    std::this_thread::sleep_for(std::chrono::microseconds(200));
    if (Ctx{root_->context.load(std::memory_order_acquire) & ~kCtxDirty} != until_changed) {
      return true;
    }
    const auto now = std::chrono::steady_clock::now();
    if (const std::uint64_t p = progress(); p != seen) {
      seen = p;
      moved_at = now;
    }
    // A round that stopped (a parked or starved rehash thread, no room to
    // move into) is not waited for: the scan goes on, correct but perhaps
    // passing some keys twice.
    if (now >= w->deadline || now - moved_at >= kStallLimit) {
      w->spent = true;
      return false;
    }
  }
}

Status ClevelIndex::scan(std::uint64_t cursor, std::size_t count, const ScanFn& fn,
                         std::uint64_t* next) {
  *next = 0;
  count = std::max<std::size_t>(count, 1);
  ScanWait wait;
  // A shrink in progress moves items down: let it finish first, so that a
  // scan without concurrent writes meets no epoch change (and no restart).
  for (;;) {
    Ctx c;
    {
      rcu::ReadGuard guard;
      c = load_ctx();
    }
    if (!c.shrinking() || !scan_wait(c, &wait)) break;
  }
  const std::uint64_t epoch = root_->scan_epoch.load(std::memory_order_seq_cst);
  const bool up = (epoch & 1) == 0;
  ScanPos pos;
  if (cursor != 0 && (cursor >> kEpochShift) == (epoch & kEpochMask)) {
    pos.log2 = static_cast<int>((cursor >> kLevelShift) & kLevelFieldMask) - 1;
    pos.bucket = cursor & kBucketMask;
  } else {
    // The start, or a cursor of another epoch: the whole order again.
    pos.log2 = up ? -1 : 64;
  }
  std::size_t passed = 0;
  bool ended = false;
  std::vector<std::pair<std::string, std::string>> batch;
  while (passed < count && !ended) {
    batch.clear();
    Ctx waiting{};
    bool must_wait = false;
    {
      rcu::ReadGuard guard;
      const Ctx c = load_ctx();
      LevelHeader* l = nullptr;
      std::uint16_t id = 0;
      if (!scan_resolve(c, up, &pos, &l, &id)) {
        ended = true;
      } else if (c.resizing() && id == c.drain_level() && !wait.spent) {
        // The level a round is emptying: what we pass here now would come
        // again where it is moved to. Wait for the round first (bounded).
        must_wait = true;
        waiting = c;
      } else {
        for (auto& s : level_buckets(l)[pos.bucket].slot) {
          const std::uint64_t v = s.load(std::memory_order_acquire);
          if (slot_empty(v)) continue;  // empty, or moved out
          const auto* item = checked_item(view_, slot_offset(v), /*in_block=*/true);
          if (item == nullptr) {
            return damaged_item(slot_offset(v), "level " + std::to_string(id) + " bucket " +
                                                    std::to_string(pos.bucket));
          }
          if (!state_visible(item->state.load(std::memory_order_acquire))) continue;
          batch.emplace_back(std::string(item_key(item)), std::string(item_value(item)));
        }
        ++pos.bucket;
      }
    }
    if (must_wait) {
      scan_wait(waiting, &wait);
      continue;
    }
    // Outside the read-side section: fn may call back into the store.
    for (const auto& [k, v] : batch) fn(k, v);
    passed += batch.size();
  }
  // An epoch change during the call: items may have moved against the order
  // this call followed. The cursor keeps the old epoch, so the next call
  // starts the scan over in the new order.
  if (root_->scan_epoch.load(std::memory_order_seq_cst) != epoch) {
    *next = ((epoch & kEpochMask) << kEpochShift) | (kPastEveryLevel << kLevelShift);
    return Status::OK();
  }
  if (ended) return Status::OK();
  *next = ((epoch & kEpochMask) << kEpochShift) |
          (static_cast<std::uint64_t>(pos.log2 + 1) << kLevelShift) | pos.bucket;
  return Status::OK();
}

// A bucket drawn uniformly among the live levels' buckets (a level weighs
// its bucket count), as a cursor of the current epoch.
std::uint64_t ClevelIndex::random_cursor(std::uint64_t random) {
  const std::uint64_t epoch = root_->scan_epoch.load(std::memory_order_seq_cst);
  rcu::ReadGuard guard;
  const Ctx c = load_ctx();
  std::uint64_t total = 0;
  for (unsigned i = 0; i < c.levels(); ++i) {
    const auto log2 = std::min<std::uint32_t>(level(static_cast<std::uint16_t>(c.last() + i))->log2,
                                              kMaxLevelLog2);
    total += std::uint64_t{1} << log2;
  }
  // random * total / 2^64: uniform in [0, total).
  std::uint64_t r = static_cast<std::uint64_t>((static_cast<unsigned __int128>(random) * total) >> 64);
  for (unsigned i = 0; i < c.levels(); ++i) {
    const auto log2 = std::min<std::uint32_t>(level(static_cast<std::uint16_t>(c.last() + i))->log2,
                                              kMaxLevelLog2);
    const std::uint64_t buckets = std::uint64_t{1} << log2;
    if (r < buckets) {
      return ((epoch & kEpochMask) << kEpochShift) |
             (static_cast<std::uint64_t>(log2 + 1) << kLevelShift) | r;
    }
    r -= buckets;
  }
  return 0;  // no live level (not reached): the start
}

}  // namespace pmhash::engine::clevel
