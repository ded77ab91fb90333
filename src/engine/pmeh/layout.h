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

#include "pool/pool.h"
#include "pool/pptr.h"

namespace pmhash::engine::pmeh {

// An 8-character magic as the little-endian word that spells it in the pool.
constexpr std::uint64_t magic_word(const char (&s)[9]) {
  std::uint64_t w = 0;
  for (int i = 7; i >= 0; --i) w = (w << 8) | static_cast<unsigned char>(s[i]);
  return w;
}

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

// --- slots (the format of nehash's slots, §12.12) ------------------------------
// These helpers repeat nehash/layout.h's; both engines will share them from
// engine/slot16.h (docs/design/pmeh.md §12.12).
inline constexpr unsigned kSlotsPerBucket = 14;
inline constexpr std::size_t kInlineMax = 8;

// A slot's 16-bit meta, in its bucket's meta array:
//   bit 15      VALID    set last by an insert, cleared first by a remove; a
//                        slot without it is empty whatever its words hold
//                        (the slides' one-bit "insert finished" flag)
//   bit 14      INLINE   1: key and value are the slot's words; 0: w0 points
//                        to an item and w1 holds the key's h1
//   bits 13..10 key_len    INLINE only, 0..8
//   bits 9..6   value_len  INLINE only, 0..8
//   bits 5..0   fp       h2 & 63: a probe skips slots whose fp differs
inline constexpr std::uint16_t kMetaValid = 1u << 15;
inline constexpr std::uint16_t kMetaInline = 1u << 14;
inline constexpr unsigned kMetaKeyLenShift = 10;
inline constexpr unsigned kMetaValueLenShift = 6;
inline constexpr std::uint16_t kMetaLenMask = 0xF;
inline constexpr std::uint16_t kMetaFpMask = 0x3F;

constexpr std::uint16_t fingerprint(std::uint64_t h2) { return static_cast<std::uint16_t>(h2 & kMetaFpMask); }
// The pointer tag of an item slot: a second filter before the item is read.
constexpr std::uint16_t pointer_tag(std::uint64_t h2) { return static_cast<std::uint16_t>(h2 >> 48); }
constexpr bool fits_inline(std::size_t key_len, std::size_t value_len) {
  return key_len <= kInlineMax && value_len <= kInlineMax;
}
constexpr std::uint16_t meta_inline(std::size_t key_len, std::size_t value_len, std::uint16_t fp) {
  return static_cast<std::uint16_t>(kMetaValid | kMetaInline | (key_len << kMetaKeyLenShift) |
                                    (value_len << kMetaValueLenShift) | fp);
}
constexpr std::uint16_t meta_pointer(std::uint16_t fp) { return static_cast<std::uint16_t>(kMetaValid | fp); }
constexpr bool meta_valid(std::uint16_t m) { return (m & kMetaValid) != 0; }
constexpr bool meta_is_inline(std::uint16_t m) { return (m & kMetaInline) != 0; }
constexpr unsigned meta_key_len(std::uint16_t m) { return (m >> kMetaKeyLenShift) & kMetaLenMask; }
constexpr unsigned meta_value_len(std::uint16_t m) { return (m >> kMetaValueLenShift) & kMetaLenMask; }
constexpr std::uint16_t meta_fp(std::uint16_t m) { return m & kMetaFpMask; }

// Up to 8 bytes as a zero-padded word, and back.
inline std::uint64_t pack_word(std::string_view bytes) {
  std::uint64_t w = 0;
  std::memcpy(&w, bytes.data(), bytes.size());
  return w;
}
inline std::string_view unpack_word(const std::uint64_t& w, unsigned len) {
  return {reinterpret_cast<const char*>(&w), len};
}

// A slot, 16 bytes:
//   INLINE   w0 = key, zero-padded         w1 = value, zero-padded
//   pointer  w0 = pptr(item, pointer_tag)  w1 = h1 of the key
struct Slot {
  std::atomic<std::uint64_t> w0;
  std::atomic<std::uint64_t> w1;
};
static_assert(sizeof(Slot) == 16);

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
//   op   bits 0..3 kind: kOpNone | kOpSlotUpdate; bits 4..47 the slot's offset
//   meta bits 0..15 the new meta, bits 16..63 the pool offset of that meta
//   w0, w1 the slot's new words
// A record is committed once `op` is durable (its other words are drained
// before `op` is written).
inline constexpr std::uint64_t kOpKindMask = 0xF;
inline constexpr std::uint64_t kOpNone = 0;
inline constexpr std::uint64_t kOpSlotUpdate = 1;

struct OpLog {
  std::atomic<std::uint64_t> op;
  std::atomic<std::uint64_t> meta;
  std::atomic<std::uint64_t> w0;
  std::atomic<std::uint64_t> w1;
};
static_assert(sizeof(OpLog) == 32);

constexpr std::uint64_t op_kind(std::uint64_t op) { return op & kOpKindMask; }
constexpr std::uint64_t op_slot_update(std::uint64_t slot_off) { return slot_off | kOpSlotUpdate; }
constexpr std::uint64_t op_slot_offset(std::uint64_t op) { return op & pool::kOffsetMask & ~kOpKindMask; }
constexpr std::uint64_t log_meta(std::uint16_t meta, std::uint64_t meta_off) { return meta | (meta_off << 16); }
constexpr std::uint16_t log_meta_value(std::uint64_t w) { return static_cast<std::uint16_t>(w); }
constexpr std::uint64_t log_meta_offset(std::uint64_t w) { return w >> 16; }

// --- pool root (in the 12 KiB root area) ------------------------------------------
inline constexpr unsigned kOpLogs = 256;      // one per heap thread slot
inline constexpr unsigned kSplitRecords = 256;  // one per zone

struct Root {
  std::uint64_t magic;            // kRootMagic
  std::uint32_t layout_version;   // kLayoutVersion
  std::uint8_t zone_bits;         // Z (equal to the pool-header parameter)
  std::uint8_t segment_log2;      // s (likewise)
  std::uint8_t reserved0[50];
  std::atomic<std::uint64_t> dir_array[kMaxDirs];  // directory offsets by id, 0: none
  std::uint64_t item_count;       // valid only when count_valid == 1 (engine/saved_count.h)
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
