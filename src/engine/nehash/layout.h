// engine/nehash/layout.h - nehash's persistent structures and their bits.
// The design, persist order and recovery are described in nehash.h.
//
// Every word that a crash may catch half-written is one 8-byte atomic store;
// the crash model promises atomicity at 8 bytes only (a line may tear
// between its words).
#pragma once

#include <atomic>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

#include "engine/common/op_log.h"
#include "engine/common/slot16.h"
#include "pool/pool.h"
#include "pool/pptr.h"

namespace pmhash::engine::nehash {

// The shared slot format and op log (common/slot16.h, common/op_log.h).
using namespace common;

// Layout 2: a key may sit in any slot of its home bucket (nehash.h,
// "Operations"). Layout 1 kept each key in its home slot or the conflict
// bucket; open refuses a layout-1 pool by name (its root magic and its
// pool-header version) rather than reading its slots under the wrong rules.
inline constexpr std::uint64_t kRootMagic = magic_word("NEHASHR2");
inline constexpr std::uint64_t kSegmentMagic = magic_word("NEHRECS2");
inline constexpr std::uint64_t kGroupMagic = magic_word("NEHGRP02");
inline constexpr std::uint64_t kOverflowMagic = magic_word("NEHOVFL2");
inline constexpr std::uint32_t kLayoutVersion = 2;
inline constexpr std::uint64_t kRootMagicV1 = magic_word("NEHASHR1");
inline constexpr std::uint32_t kLayoutVersionV1 = 1;

// --- creation parameters (pool header engine_params) -------------------------
inline constexpr unsigned kMinBucketBits = 1;
inline constexpr unsigned kMaxBucketBits = 10;
inline constexpr unsigned kMaxInitialDirBits = 16;

struct Params {
  std::uint8_t version;           // kLayoutVersion
  std::uint8_t bucket_bits;       // b
  std::uint8_t initial_dir_bits;  // G0
};

// Directory bits the hash has room for above the bucket and slot bits
// (nehash.h, "Bit budget"): 60 - b.
constexpr unsigned max_depth(unsigned b) { return 60 - b; }

// --- slots ---------------------------------------------------------------------
// The slot (16 bytes), its 16-bit meta and the word packing are
// common/slot16.h's, bit for bit:
//   INLINE   w0 = key, zero-padded       w1 = value, zero-padded
//   pointer  w0 = pptr(item, tag 0)      w1 = h1 of the key
// A bucket holds 16 slots; their 16 metas are one BucketMeta of the group's
// bucket directory, not in the bucket.
inline constexpr unsigned kSlotsPerBucket = 16;
inline constexpr unsigned kSlotBits = 4;  // slot = h1 & 15

struct alignas(64) Bucket {
  Slot slot[kSlotsPerBucket];
};
static_assert(sizeof(Bucket) == 256);

// The 16 metas of one bucket: one entry of the bucket directory.
struct alignas(32) BucketMeta {
  std::atomic<std::uint16_t> meta[kSlotsPerBucket];
};
static_assert(sizeof(BucketMeta) == 32);

// --- bucket group (one heap block) ---------------------------------------------
//   +-----------------------+ 0
//   | GroupHeader     64 B  |
//   +-----------------------+ 64
//   | bucket directory      | (2^b + 1) BucketMeta, padded to 64 bytes;
//   |                       | entry 2^b is the conflict bucket's
//   +-----------------------+
//   | bucket 0 .. 2^b - 1   | 256 B each
//   | conflict bucket       | (bucket index 2^b)
//   +-----------------------+
struct alignas(64) GroupHeader {
  std::uint64_t magic;                  // kGroupMagic
  std::uint64_t prefix;                 // left-aligned: the top create_depth bits every h1
                                        //   in the group shares; every lower bit 0
  std::uint32_t bg_id;                  // index of its Recovery_BG entry
  std::uint8_t create_depth;            // D_Length when created (the table entry, larger
                                        //   after in-place splits, is authoritative)
  std::uint8_t bucket_bits;             // b
  std::uint16_t reserved0;
  std::atomic<std::uint64_t> overflow;  // first OverflowBlock (only at max depth), 0 if none
  std::uint64_t reserved[4];
};
static_assert(sizeof(GroupHeader) == 64);

constexpr std::size_t buckets_per_group(unsigned b) { return (std::size_t{1} << b) + 1; }
constexpr std::size_t bucket_dir_bytes(unsigned b) {
  return (sizeof(BucketMeta) * buckets_per_group(b) + 63) / 64 * 64;
}
constexpr std::size_t group_bytes(unsigned b) {
  return sizeof(GroupHeader) + bucket_dir_bytes(b) + sizeof(Bucket) * buckets_per_group(b);
}
static_assert(group_bytes(1) == 960 && group_bytes(6) == 18816 && group_bytes(10) == 295296);

inline BucketMeta* group_metas(GroupHeader* g) { return reinterpret_cast<BucketMeta*>(g + 1); }
inline Bucket* group_buckets(GroupHeader* g, unsigned b) {
  return reinterpret_cast<Bucket*>(reinterpret_cast<std::byte*>(g + 1) + bucket_dir_bytes(b));
}

// A key's home: bucket (h1 >> 4) mod 2^b, and in it the slot h1 mod 16, the
// first one an insert tries. A key lives in any slot of its home bucket (or
// the conflict bucket, or an overflow block). Neither depends on the
// directory depth, so a split keeps a key's slot index in the new group.
constexpr unsigned home_bucket(std::uint64_t h1, unsigned b) {
  return static_cast<unsigned>((h1 >> kSlotBits) & ((std::uint64_t{1} << b) - 1));
}
constexpr unsigned home_slot(std::uint64_t h1) { return static_cast<unsigned>(h1 & (kSlotsPerBucket - 1)); }

// The top `depth` bits of h1 (0 for depth 0).
constexpr std::uint64_t top_bits(std::uint64_t h1, unsigned depth) {
  return depth == 0 ? 0 : h1 >> (64 - depth);
}
// Whether h1 lies in the range of a group with this left-aligned prefix.
constexpr bool in_range(std::uint64_t h1, std::uint64_t prefix, unsigned depth) {
  return top_bits(h1, depth) == top_bits(prefix, depth);
}

// --- overflow block (only in groups at max depth) ------------------------------
// Chained from GroupHeader::overflow; never unlinked.
struct alignas(64) OverflowBlock {
  std::uint64_t magic;              // kOverflowMagic
  std::atomic<std::uint64_t> next;  // next block of the chain, 0 if last
  std::uint64_t reserved[6];
  BucketMeta meta;
  std::uint64_t pad[4];
  Bucket bucket;
};
static_assert(sizeof(OverflowBlock) == 384);

// --- Rec_BG_TABLE (paper §5) -------------------------------------------------
// Segment s: a 64-byte header, then 512 << s entries. BG_Id -> (s, i).
inline constexpr unsigned kSegments = 32;
inline constexpr unsigned kSegmentBaseLog2 = 9;

struct alignas(64) SegmentHeader {
  std::uint64_t magic;  // kSegmentMagic
  std::uint64_t index;  // s
  std::uint64_t reserved[6];
};
static_assert(sizeof(SegmentHeader) == 64);

constexpr std::uint64_t segment_entries(unsigned s) { return std::uint64_t{1} << (kSegmentBaseLog2 + s); }
constexpr std::size_t segment_bytes(unsigned s) {
  return sizeof(SegmentHeader) + sizeof(std::uint64_t) * segment_entries(s);
}
constexpr unsigned segment_of(std::uint64_t id) {
  return static_cast<unsigned>(std::bit_width((id >> kSegmentBaseLog2) + 1) - 1);
}
constexpr std::uint64_t index_in_segment(std::uint64_t id) {
  return id - (std::uint64_t{1} << kSegmentBaseLog2) * ((std::uint64_t{1} << segment_of(id)) - 1);
}
// Ids below this fit the first s segments.
constexpr std::uint64_t ids_below_segment(unsigned s) {
  return (std::uint64_t{1} << kSegmentBaseLog2) * ((std::uint64_t{1} << s) - 1);
}
static_assert(segment_of(511) == 0 && segment_of(512) == 1 && index_in_segment(512) == 0 &&
              segment_of(1535) == 1 && segment_of(1536) == 2 && index_in_segment(1536) == 0);
inline std::atomic<std::uint64_t>* segment_table(SegmentHeader* seg) {
  return reinterpret_cast<std::atomic<std::uint64_t>*>(seg + 1);
}

// Recovery_BG, one word (0: unused entry; BG_Id is the entry's index):
//   bits 0..5    D_Length    local depth of the group, 0 .. max_depth(b)
//   bits 6..47   BG_Address  pool offset of the group block (64-byte aligned)
//   bits 48..63  0
inline constexpr std::uint64_t kRecDepthMask = 63;
inline constexpr std::uint64_t kRecAddressMask = pool::kOffsetMask & ~kRecDepthMask;

constexpr std::uint64_t rec_make(std::uint64_t off, unsigned depth) { return off | depth; }
constexpr unsigned rec_depth(std::uint64_t w) { return static_cast<unsigned>(w & kRecDepthMask); }
constexpr std::uint64_t rec_offset(std::uint64_t w) { return w & kRecAddressMask; }
constexpr bool rec_well_formed(std::uint64_t w) { return (w & ~pool::kOffsetMask) == 0; }

// --- OpLog (one per heap thread slot; common/op_log.h) ----------------------
// Slot updates are common/op_log.h's records; nehash adds the split record:
//   op   bits 0..3 kOpSplit, bits 4..9 d (depth before the split),
//        bits 10..41 BG_Id of the group; meta, w0, w1 unused
inline constexpr std::uint64_t kOpSplit = 2;

constexpr std::uint64_t op_split(unsigned d, std::uint32_t bg_id) {
  return kOpSplit | (std::uint64_t{d} << 4) | (std::uint64_t{bg_id} << 10);
}
constexpr unsigned op_split_depth(std::uint64_t op) { return static_cast<unsigned>((op >> 4) & 63); }
constexpr std::uint32_t op_split_id(std::uint64_t op) { return static_cast<std::uint32_t>(op >> 10); }
constexpr bool op_split_well_formed(std::uint64_t op) { return (op >> 42) == 0; }

// --- pool root ------------------------------------------------------------------
struct Root {
  std::uint64_t magic;             // kRootMagic
  std::uint32_t layout_version;    // kLayoutVersion
  std::uint8_t bucket_bits;        // b (equal to the pool-header parameter)
  std::uint8_t initial_dir_bits;   // G0 (likewise)
  std::uint8_t reserved0[50];
  std::atomic<std::uint64_t> rec_segments[kSegments];  // segment offsets, 0: not allocated
  std::uint64_t item_count;        // valid only when count_valid == 1 (common/item_count.h)
  std::uint64_t count_valid;       // 1 from a clean close until the next open
  std::uint64_t reserved1[6];
  OpLog op_log[kOpLogs];
};
static_assert(offsetof(Root, rec_segments) == 64 && offsetof(Root, item_count) == 320 &&
              offsetof(Root, op_log) == 384 && sizeof(Root) == 8576);
static_assert(sizeof(Root) <= pool::kRootSize);

}  // namespace pmhash::engine::nehash
