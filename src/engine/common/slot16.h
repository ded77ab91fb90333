// engine/common/slot16.h - the 16-byte slot with a 16-bit meta that nehash
// and pmeh share: its meta bits, its two words, and the packing of up to 8
// bytes into a word.
//
// Each engine places slots and metas in its own buckets (nehash keeps a
// bucket's 16 metas in the group's bucket directory, pmeh keeps 14 in the
// first line of the bucket); their layout.h draw that. What is here is the
// same, bit for bit, in both pools.
//
// A slot's 16-bit meta:
//   bit 15      VALID      set last by an insert, cleared first by a remove; a
//                          slot without it is empty whatever its words hold
//   bit 14      INLINE     1: key and value are the slot's words; 0: w0 points
//                          to an item and w1 holds the key's h1
//   bits 13..10 key_len    INLINE only, 0..8
//   bits 9..6   value_len  INLINE only, 0..8
//   bits 5..0   fp         h2 & 63: a scan skips slots whose fp differs
//
// A slot, 16 bytes:
//   INLINE   w0 = key, zero-padded       w1 = value, zero-padded
//   pointer  w0 = pptr(item, tag)        w1 = h1 of the key
// (the tag is the engine's: nehash writes 0, pmeh a filter from h2).
//
// The meta and the words are in different lines, and a crash may keep any
// subset of the 8-byte stores to them; each engine's persist order (its
// main header) says which combinations a crash can leave and how recovery
// reads them. A change of both meta and words goes through the op log
// (common/op_log.h).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include "engine/item.h"
#include "heap/heap.h"
#include "media/region.h"
#include "pool/pptr.h"

namespace pmhash::engine::common {

// An 8-character magic as the little-endian word that spells it in the pool.
constexpr std::uint64_t magic_word(const char (&s)[9]) {
  std::uint64_t w = 0;
  for (int i = 7; i >= 0; --i) w = (w << 8) | static_cast<unsigned char>(s[i]);
  return w;
}

inline constexpr std::size_t kInlineMax = 8;

inline constexpr std::uint16_t kMetaValid = 1u << 15;
inline constexpr std::uint16_t kMetaInline = 1u << 14;
inline constexpr unsigned kMetaKeyLenShift = 10;
inline constexpr unsigned kMetaValueLenShift = 6;
inline constexpr std::uint16_t kMetaLenMask = 0xF;
inline constexpr std::uint16_t kMetaFpMask = 0x3F;

constexpr std::uint16_t fingerprint(std::uint64_t h2) { return static_cast<std::uint16_t>(h2 & kMetaFpMask); }
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

// Whether the VALID slot (meta m, words w0 and w1) holds the value
// `value`, byte for byte: an inline slot's w1, or the value of the item w0
// names, read through `view` (checked: a pointer outside the heap holds no
// value, and check() reports it). The caller holds the slot still (its
// lock, or the owner of its segment), so the item cannot be freed meanwhile.
inline bool slot_value_is(const heap::PoolView& view, std::uint16_t m, std::uint64_t w0,
                          std::uint64_t w1, std::string_view value) {
  if (meta_is_inline(m)) {
    return meta_value_len(m) == value.size() && unpack_word(w1, meta_value_len(m)) == value;
  }
  const ItemHeader* item = checked_item(view, pool::pptr_offset(w0));
  return item != nullptr && item_value(item) == value;
}

struct Slot {
  std::atomic<std::uint64_t> w0;
  std::atomic<std::uint64_t> w1;
};
static_assert(sizeof(Slot) == 16);

// The tag of a pointer slot's w0: 0 (nehash), or the top 16 bits of the
// key's h2 (pmeh: a second filter before the item is read).
enum class SlotTag { kZero, kFromH2 };
constexpr std::uint16_t pointer_tag(std::uint64_t h2) { return static_cast<std::uint16_t>(h2 >> 48); }

// What check() learns from a VALID slot.
struct SlotContent {
  std::string key;
  std::uint64_t h1 = 0;
  std::uint64_t h2 = 0;
  std::uint64_t item = 0;  // the item's pool offset; 0 for an inline slot
};
// check(), on a quiescent index: reads the VALID slot (meta m, words w0 and
// w1) into *out. Returns "" when the slot is well formed: an inline slot's
// lengths are at most 8 and its words zero past them; a pointer slot has no
// other meta bits than VALID and fp, the tag `tag` asks for, and names an
// allocated block that holds a whole item too large to be inline, whose
// state word and hash are the slot's h1. Otherwise returns what is wrong, as
// words that follow the slot's name. The item's offset is every pointer
// slot's own; the caller checks that no other slot names it, and the
// engine's own rules (range, fingerprint, bucket).
std::string check_slot(const heap::Heap& heap, const media::Region& region, std::uint16_t m,
                       std::uint64_t w0, std::uint64_t w1, SlotTag tag, SlotContent* out);

}  // namespace pmhash::engine::common
