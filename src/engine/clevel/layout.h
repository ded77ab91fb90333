// engine/clevel/layout.h - clevel's persistent structures and their bits.
// The design, persist order and recovery are described in clevel.h.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "engine/item.h"
#include "pool/pool.h"
#include "pool/pptr.h"

namespace pmhash::engine::clevel {

// "CLEVELR2": slots may carry kPending and items the REMOVED kind, which
// a binary that knows only "CLEVELR1" would misread (an offset off by 2, a
// kind it frees without unlinking). Open accepts an R1 pool (it holds
// neither) and rewrites its magic to R2 before it serves anything.
inline constexpr std::uint64_t kRootMagic = 0x3252'4c45'5645'4c43ull;    // "CLEVELR2"
inline constexpr std::uint64_t kRootMagicV1 = 0x3152'4c45'5645'4c43ull;  // "CLEVELR1"
inline constexpr unsigned kSlotsPerBucket = 8;
inline constexpr unsigned kRingSize = 64;          // levels[] entries
inline constexpr unsigned kMaxLevels = 32;         // live levels at once
inline constexpr unsigned kMaxRehashThreads = 16;
inline constexpr unsigned kMaxLevelLog2 = 40;

// --- slot -------------------------------------------------------------------
// A rehash thread sets MOVING while it copies the slot's item elsewhere; it is
// the only writer of a slot while the bit is set. When the copy is durable it
// empties the slot in two steps: MOVING alone ("moved out": empty to
// searches, waited for by writers) until that is durable, then 0. Item
// offsets are 16-byte aligned, so bits 3..0 are free for flags.
inline constexpr std::uint64_t kMoving = 1;
// PENDING ("not yet durable", link-and-persist; clevel.h "Durable
// linearizability"): a writer stores a pointer that makes a change visible
// (an insert's slot, an update's replacement) with this bit, drains, then
// clears it by CAS. A reader that meets the bit makes the change durable
// itself before it answers from it. Copies a rehash thread makes keep it.
inline constexpr std::uint64_t kPending = 2;
inline constexpr std::uint64_t kSlotFlags = 15;  // bits 3..0; bits 3..2 unused

inline std::uint64_t slot_offset(std::uint64_t v) { return pool::pptr_offset(v) & ~kSlotFlags; }
// No item: empty (0) or moved out (kMoving alone).
inline bool slot_empty(std::uint64_t v) { return slot_offset(v) == 0; }
inline std::uint16_t key_tag(std::uint64_t h1) { return static_cast<std::uint16_t>(h1 >> 48); }

struct alignas(64) Bucket {
  std::atomic<std::uint64_t> slot[kSlotsPerBucket];
};
static_assert(sizeof(Bucket) == 64);

// --- level ------------------------------------------------------------------
// The first word of a level has kind kNotItem in its low bits, which no item
// state has, so recovery never mistakes a level for an item.
inline constexpr std::uint64_t kLevelMagic = 0x4c45'5645'4c30'3007ull;

struct alignas(64) LevelHeader {
  std::uint64_t magic;   // kLevelMagic
  std::uint32_t log2;    // 2^log2 buckets
  std::uint16_t id;      // level id (context), ring index = id mod 64
  std::uint16_t reserved0;
  std::uint64_t reserved[6];
};
static_assert(sizeof(LevelHeader) == 64);

inline std::size_t level_bytes(unsigned log2) {
  return sizeof(LevelHeader) + (sizeof(Bucket) << log2);
}
inline Bucket* level_buckets(LevelHeader* l) { return reinterpret_cast<Bucket*>(l + 1); }

// --- context ----------------------------------------------------------------
inline constexpr std::uint64_t kCtxResizing = std::uint64_t{1} << 32;
inline constexpr std::uint64_t kCtxShrinking = std::uint64_t{1} << 33;
inline constexpr std::uint64_t kCtxDirty = std::uint64_t{1} << 34;
inline constexpr unsigned kCtxVersionShift = 35;

struct Ctx {
  std::uint64_t w = 0;  // never carries kCtxDirty

  std::uint16_t first() const { return static_cast<std::uint16_t>(w); }
  std::uint16_t last() const { return static_cast<std::uint16_t>(w >> 16); }
  bool resizing() const { return (w & kCtxResizing) != 0; }
  bool shrinking() const { return (w & kCtxShrinking) != 0; }
  unsigned levels() const { return static_cast<std::uint16_t>(first() - last()) + 1u; }
  // The level rehash threads are emptying (meaningful while resizing).
  std::uint16_t drain_level() const { return shrinking() ? first() : last(); }
  bool contains(std::uint16_t id) const {
    return static_cast<std::uint16_t>(id - last()) <= static_cast<std::uint16_t>(first() - last());
  }
  Ctx next(std::uint16_t first_id, std::uint16_t last_id, bool resizing, bool shrinking) const {
    const std::uint64_t version = (w >> kCtxVersionShift) + 1;
    return Ctx{(version << kCtxVersionShift) | (resizing ? kCtxResizing : 0) |
               (shrinking ? kCtxShrinking : 0) | (std::uint64_t{last_id} << 16) | first_id};
  }
  bool operator==(const Ctx&) const = default;
};

// --- item state (engine/item.h ItemHeader::state) ----------------------------
//   2..0   kind
//   63..3  open generation (Pool::generation) in which the kind was written
enum Kind : std::uint64_t {
  kTentative = 0,  // published by an insert still racing; invisible
  kLive = 1,       // visible
  kOwned = 2,      // visible; a writer of that generation replaces/removes it
  kLoser = 3,      // lost an insert race; invisible, being unpublished
  kRemoved = 4,    // deleted by its owner; invisible, being unlinked
  kNotItem = 7,    // never an item state (level headers)
};

inline std::uint64_t make_state(std::uint64_t generation, Kind kind) {
  return (generation << 3) | kind;
}
inline Kind state_kind(std::uint64_t s) { return static_cast<Kind>(s & 7); }
inline std::uint64_t state_generation(std::uint64_t s) { return s >> 3; }
inline bool state_visible(std::uint64_t s) {
  return state_kind(s) == kLive || state_kind(s) == kOwned;
}

// --- root -------------------------------------------------------------------
struct alignas(64) Progress {
  std::atomic<std::uint64_t> level_id;  // level being emptied, + 1 (0: none)
  std::atomic<std::uint64_t> next;      // next bucket this thread will move
  std::uint64_t reserved[6];
};

struct Root {
  std::uint64_t magic;          // kRootMagic
  std::uint32_t initial_log2;   // creation parameter
  std::uint32_t min_log2;       // creation parameter
  std::uint64_t reserved0[6];
  alignas(64) std::atomic<std::uint64_t> context;
  // Scan epoch (clevel.h, "Scan"): bumped, and persisted, when a shrink's
  // rehash round starts (odd: items may move down) and before it ends (even:
  // they may move up again). Zero in pools made before it existed; recovery
  // makes it even unless a shrink is in progress.
  std::atomic<std::uint64_t> scan_epoch;
  std::uint64_t reserved1[6];
  alignas(64) std::atomic<std::uint64_t> levels[kRingSize];
  Progress progress[kMaxRehashThreads];
  alignas(64) std::uint64_t item_count;  // valid when count_valid == 1
  std::uint64_t count_valid;             // 1 from clean close until next open
};
static_assert(sizeof(Root) <= pool::kRootSize);

}  // namespace pmhash::engine::clevel
