// engine/pmeh/layout.h - pmeh's persistent structures and their bits.
// The design, persist order and recovery are in pmeh.h and, at length, in
// docs/design/pmeh.md (section numbers "§n" below refer to it).
//
// Every word that a crash may catch half-written is one 8-byte atomic store;
// the crash model promises atomicity at 8 bytes only (a line may tear
// between its words).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

#include "engine/common/op_log.h"
#include "engine/common/slot16.h"
#include "pool/pool.h"
#include "pool/pptr.h"

namespace pmhash::engine::pmeh {

// The shared slot format and op log (common/slot16.h, common/op_log.h).
using namespace common;

inline constexpr std::uint64_t kRootMagic = magic_word("PMEHROOT");
inline constexpr std::uint64_t kDirMagic = magic_word("PMEHDIR1");
inline constexpr std::uint64_t kSegmentMagic = magic_word("PMEHSEG1");
inline constexpr std::uint32_t kLayoutVersion = 1;

// --- creation parameters (pool header engine_params) -------------------------
inline constexpr unsigned kMaxZoneBits = 8;      // Z: at most 256 zones (§12.19)
inline constexpr unsigned kMinSegmentLog2 = 12;  // 4 KiB
inline constexpr unsigned kMaxSegmentLog2 = 16;  // 64 KiB (heap::kMaxSmallSize)
inline constexpr unsigned kMaxDepth = 28;        // deepest directory and segment (§1.2)
inline constexpr unsigned kMaxDirs = 64;         // dir_array entries
inline constexpr unsigned kMaxSplitBits = 3;     // k: at most an 8-split

struct Params {
  std::uint8_t version;       // 1
  std::uint8_t zone_bits;     // Z
  std::uint8_t segment_log2;  // s
};

// --- slots (§12.12) -----------------------------------------------------------
// The slot (16 bytes), its 16-bit meta and the word packing are
// common/slot16.h's, bit for bit (the same as nehash's):
//   INLINE   w0 = key, zero-padded         w1 = value, zero-padded
//   pointer  w0 = pptr(item, pointer_tag)  w1 = h1 of the key
// (the tag, the top 16 bits of h2, is a second filter before the item is
// read: SlotTag::kFromH2).
// A bucket holds 14 slots and, in its first line, their 14 metas.
inline constexpr unsigned kSlotsPerBucket = 14;

// A bucket, 256 B (an Optane XPLine): line 0 holds the metas and slots 0..1.
struct alignas(64) Bucket {
  std::atomic<std::uint16_t> meta[kSlotsPerBucket];
  std::uint32_t reserved;  // 0
  Slot slot[kSlotsPerBucket];
};
static_assert(sizeof(Bucket) == 256 && offsetof(Bucket, slot) == 32);

// --- segment (one heap block of exactly 2^s bytes) ------------------------------
//   line 0  immutable after creation: magic, prefix, depth, nb
//   line 1  children[8]: the split's children, written only by a split of it
//   line 2  split word and moved[4] (§5)
//   line 3  reserved
// Split word: bit 0 MOVING (the split's start is committed), bits 1..2 k.
inline constexpr std::uint64_t kSegMoving = 1;
constexpr std::uint64_t seg_split_word(unsigned k) { return kSegMoving | (std::uint64_t{k} << 1); }
constexpr unsigned seg_split_k(std::uint64_t w) { return static_cast<unsigned>((w >> 1) & 3); }

struct alignas(64) SegmentHeader {
  std::uint64_t magic;   // kSegmentMagic
  std::uint64_t prefix;  // left-aligned: the top `depth` bits of every h1 in it; lower bits 0
  std::uint8_t depth;    // L, Z .. kMaxDepth
  std::uint8_t nb;       // buckets, 2^s / 256 - 1
  std::uint8_t reserved0[6];
  std::uint64_t reserved1[5];
  std::atomic<std::uint64_t> children[8];  // line 1
  std::atomic<std::uint64_t> split;        // line 2
  std::atomic<std::uint64_t> moved[4];     //   bit j: bucket j moved to the children
  std::uint64_t reserved2[3];
  std::uint64_t reserved3[8];              // line 3
};
static_assert(sizeof(SegmentHeader) == 256 && offsetof(SegmentHeader, children) == 64 &&
              offsetof(SegmentHeader, split) == 128);

constexpr unsigned buckets_per_segment(unsigned s) { return (1u << s) / 256 - 1; }
inline Bucket* segment_buckets(SegmentHeader* h) { return reinterpret_cast<Bucket*>(h + 1); }

// A key's home bucket (multiply-shift: nb need not be a power of two); its
// window is {home, (home + 1) mod nb}. Neither depends on the depth.
constexpr unsigned home_bucket(std::uint64_t h1, unsigned nb) {
  return static_cast<unsigned>(((h1 & 0xffffffffu) * nb) >> 32);
}
// The top `depth` bits of h1 (0 for depth 0).
constexpr std::uint64_t top_bits(std::uint64_t h1, unsigned depth) {
  return depth == 0 ? 0 : h1 >> (64 - depth);
}
constexpr bool in_range(std::uint64_t h1, std::uint64_t prefix, unsigned depth) {
  return top_bits(h1, depth) == top_bits(prefix, depth);
}

// --- directory (one heap block per directory) ------------------------------------
// The header, then 2^G entries: entry i is the pool offset of the segment
// covering the h1 whose top G bits are i (0: not filled). A zone's entries
// are authoritative only once its bit in zone_filled is set (§6).
struct alignas(64) DirHeader {
  std::uint64_t magic;  // kDirMagic
  std::uint32_t id;     // its dir_array index
  std::uint8_t depth;   // G
  std::uint8_t zone_bits;  // Z
  std::uint8_t reserved0[2];
  std::uint64_t reserved1[6];
  std::atomic<std::uint64_t> zone_filled[4];  // bit z: zone z lives in this directory
  std::uint64_t reserved2[20];
};
static_assert(sizeof(DirHeader) == 256 && offsetof(DirHeader, zone_filled) == 64);

constexpr std::size_t dir_bytes(unsigned g) { return sizeof(DirHeader) + (std::size_t{8} << g); }
inline std::atomic<std::uint64_t>* dir_entries(DirHeader* h) {
  return reinterpret_cast<std::atomic<std::uint64_t>*>(h + 1);
}

// --- split record (Root::split[z], one word per zone, §1.5) -----------------------
//   0: no split in flight; else bits 6..47 the splitting segment's offset,
//   bit 0 COMPLETING (the directory entries are being re-pointed).
inline constexpr std::uint64_t kSplitCompleting = 1;
inline constexpr std::uint64_t kSplitOffsetMask = pool::kOffsetMask & ~std::uint64_t{63};

// --- OpLog (one per heap thread slot, only for update (c), §4.5) ---------------
// common/op_log.h's records; pmeh writes only slot updates.

// --- pool root (in the 12 KiB root area) ------------------------------------------
inline constexpr unsigned kSplitRecords = 256;  // one per zone

struct Root {
  std::uint64_t magic;            // kRootMagic
  std::uint32_t layout_version;   // kLayoutVersion
  std::uint8_t zone_bits;         // Z (equal to the pool-header parameter)
  std::uint8_t segment_log2;      // s (likewise)
  std::uint8_t reserved0[50];
  std::atomic<std::uint64_t> dir_array[kMaxDirs];  // directory offsets by id, 0: none
  std::uint64_t item_count;       // valid only when count_valid == 1 (common/item_count.h)
  std::uint64_t count_valid;      // 1 from a clean close until the next open
  std::uint64_t reserved1[6];
  std::atomic<std::uint64_t> split[kSplitRecords];  // split records, by zone
  OpLog op_log[kOpLogs];
};
static_assert(offsetof(Root, dir_array) == 64 && offsetof(Root, item_count) == 576 &&
              offsetof(Root, split) == 640 && offsetof(Root, op_log) == 2688 &&
              sizeof(Root) == 10880);
static_assert(sizeof(Root) <= pool::kRootSize);

}  // namespace pmhash::engine::pmeh
