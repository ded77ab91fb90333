// heap/layout.h - the on-media format of the heap (design in heap/heap.h).
//
// Every structure here lives in the pool file; all offsets are absolute pool
// offsets (from the region base), never 0 for a block. The heap area
// [heap_offset, heap_offset + heap_size) holds, in this order:
//
//   heap_offset                HeapHeader, kHeaderSize bytes
//   logs_offset                ThreadLog[kMaxThreads], kLogSize bytes each
//   table_offset               uint64_t chunk table entry per chunk
//   chunks_offset              chunk_count chunks of kChunkSize bytes; the
//                              first kChunkSize-aligned offset after the table
//
// Chunk table entry (8 bytes, written with single 8-byte atomic stores):
//
//   bits 0..7    kind: kChunkFree (0), kChunkSlab, kChunkRunHead, kChunkRunBody
//   bits 8..15   slab: size class index (kSizeClasses)
//   bits 32..63  run head: run length in chunks (>= 1)
//                run body: distance from the run head in chunks (>= 1)
//
// A zeroed table is an all-free heap. A run of n chunks starting at chunk h
// is table[h] = head(n), table[h+k] = body(k) for 0 < k < n; its block starts
// at the start of chunk h and spans the n chunks.
//
// Slab chunk of class c (kSizeClasses[c]):
//
//   +-------------------------------------+---------+---------+----
//   | bitmap: words x uint64, bit b of    | block 0 | block 1 | ...
//   | word w set = block 64w+b allocated  |         |         |
//   | (padded to the block alignment)     |         |         |
//   +-------------------------------------+---------+---------+----
//   ^ chunk start                         ^ chunk start + first
//
// Bits at and beyond `blocks` are always zero. The bitmap is zeroed and made
// durable before the table entry names the chunk a slab.
//
// Size classes: 16, 32 and 48 bytes (16-byte aligned blocks), 64 to 256 in
// 64-byte steps, then four classes per power of two (320, 384, 448, 512,
// 640, ...) up to kMaxSmallSize. Every class from 64 bytes up is a multiple
// of 64 and its blocks are 64-byte aligned, as heap.h promises; that is why
// there are no 80..240-byte classes in 16-byte steps.
#pragma once

#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>

#include "heap/heap.h"
#include "pmhash/limits.h"

namespace pmhash::heap::layout {

// "PMHHEAP1" read as a little-endian uint64.
inline constexpr std::uint64_t kHeapMagic = 0x3150414548484d50ull;
inline constexpr std::uint32_t kHeapVersion = 1;
inline constexpr std::uint64_t kHeaderSize = 4096;
inline constexpr std::uint64_t kLogSize = 1024;
inline constexpr std::size_t kEntrySize = 8;  // one chunk table entry
inline constexpr unsigned kMinChunks = 4;

// Immutable after format(); open() checks every field against the layout
// recomputed from the heap's offset and size.
struct HeapHeader {
  std::uint64_t magic;           // kHeapMagic; written last by format()
  std::uint32_t version;         // kHeapVersion
  std::uint32_t header_size;     // sizeof(HeapHeader)
  std::uint64_t heap_offset;     // start of the heap area in the pool
  std::uint64_t heap_size;       // bytes of the heap area
  std::uint64_t chunk_size;      // kChunkSize
  std::uint64_t chunk_count;     // chunks in the chunk area
  std::uint64_t max_small_size;  // kMaxSmallSize
  std::uint32_t log_count;       // kMaxThreads
  std::uint32_t log_size;        // kLogSize
  std::uint64_t logs_offset;     // absolute offset of ThreadLog[0]
  std::uint64_t table_offset;    // absolute offset of the chunk table
  std::uint64_t chunks_offset;   // absolute offset of chunk 0
};
static_assert(sizeof(HeapHeader) <= kHeaderSize);

// One per thread slot. Written by the slot's owner thread only (and by
// recovery); every field is an 8-byte word written with atomic stores.
struct ThreadLog {
  std::uint64_t alloc_intent[kIntentSlots];       // block being published, or 0
  std::uint64_t retired_count;                    // entries used in retired[]
  std::uint64_t retired[kRetireLogCapacity];      // unlinked blocks, not yet freed
};
static_assert(sizeof(ThreadLog) == kLogSize);

// ---------------------------------------------------------------------------
// Chunk table entries.

enum ChunkKind : std::uint8_t {
  kChunkFree = 0,
  kChunkSlab = 1,
  kChunkRunHead = 2,
  kChunkRunBody = 3,
};

inline constexpr unsigned kKindShift = 0;   // 8 bits
inline constexpr unsigned kClassShift = 8;  // 8 bits
inline constexpr unsigned kLengthShift = 32;  // 32 bits

constexpr std::uint64_t slab_entry(unsigned cls) {
  return (std::uint64_t{kChunkSlab} << kKindShift) | (std::uint64_t{cls} << kClassShift);
}
constexpr std::uint64_t head_entry(std::uint64_t length) {
  return (std::uint64_t{kChunkRunHead} << kKindShift) | (length << kLengthShift);
}
constexpr std::uint64_t body_entry(std::uint64_t distance) {
  return (std::uint64_t{kChunkRunBody} << kKindShift) | (distance << kLengthShift);
}
constexpr unsigned entry_kind(std::uint64_t e) { return (e >> kKindShift) & 0xff; }
constexpr unsigned entry_class(std::uint64_t e) { return (e >> kClassShift) & 0xff; }
constexpr std::uint64_t entry_length(std::uint64_t e) { return e >> kLengthShift; }
// Bits that must be zero in a valid entry (between the class and the length).
inline constexpr std::uint64_t kEntryReservedMask = 0xffff0000ull;

// ---------------------------------------------------------------------------
// Size classes.

struct SizeClass {
  std::uint32_t size = 0;    // block stride = usable size, bytes
  std::uint32_t blocks = 0;  // blocks per slab chunk
  std::uint32_t words = 0;   // bitmap words
  std::uint32_t first = 0;   // offset of block 0 from the chunk start
};

inline constexpr unsigned kClassCount = 39;

constexpr SizeClass make_class(std::uint32_t size) {
  const std::uint32_t align = size >= 64 ? 64 : 16;
  auto header = [&](std::uint32_t blocks) {
    const std::uint32_t words = (blocks + 63) / 64;
    return (words * 8 + align - 1) / align * align;
  };
  std::uint32_t blocks = static_cast<std::uint32_t>(kChunkSize / size);
  while (header(blocks) + std::uint64_t{blocks} * size > kChunkSize) --blocks;
  return SizeClass{size, blocks, (blocks + 63) / 64, header(blocks)};
}

constexpr std::array<SizeClass, kClassCount> make_classes() {
  std::array<SizeClass, kClassCount> c{};
  unsigned i = 0;
  for (std::uint32_t s : {16u, 32u, 48u, 64u, 128u, 192u, 256u}) c[i++] = make_class(s);
  for (std::uint32_t p = 256; p < kMaxSmallSize; p *= 2) {
    for (std::uint32_t k = 1; k <= 4; ++k) c[i++] = make_class(p + k * (p / 4));
  }
  return c;
}

inline constexpr std::array<SizeClass, kClassCount> kSizeClasses = make_classes();
static_assert(kSizeClasses[kClassCount - 1].size == kMaxSmallSize);

// The smallest class whose blocks hold n bytes, 0 < n <= kMaxSmallSize.
constexpr unsigned class_index(std::size_t n) {
  if (n <= 48) return static_cast<unsigned>((n - 1) / 16);
  if (n <= 256) return static_cast<unsigned>(3 + (n - 1) / 64);
  const std::size_t p = std::bit_floor(n - 1);  // n in (p, 2p]
  const std::size_t step = p / 4;
  const auto k = static_cast<unsigned>((n - p + step - 1) / step);  // 1..4
  return 7 + 4 * static_cast<unsigned>(std::countr_zero(p) - 8) + (k - 1);
}

// ---------------------------------------------------------------------------
// Where everything is, computed from the heap area alone.

struct Layout {
  std::uint64_t logs_offset = 0;
  std::uint64_t table_offset = 0;
  std::uint64_t chunks_offset = 0;
  std::uint64_t chunk_count = 0;
};

constexpr Layout compute_layout(std::uint64_t off, std::uint64_t size) {
  Layout l;
  l.logs_offset = off + kHeaderSize;
  l.table_offset = l.logs_offset + std::uint64_t{kMaxThreads} * kLogSize;
  const std::uint64_t end = off + size;
  auto chunks_at = [&](std::uint64_t n) {
    return (l.table_offset + n * kEntrySize + kChunkSize - 1) / kChunkSize * kChunkSize;
  };
  std::uint64_t n = size / kChunkSize;
  while (n > 0 && chunks_at(n) + n * kChunkSize > end) --n;
  l.chunk_count = n;
  l.chunks_offset = chunks_at(n);
  return l;
}

}  // namespace pmhash::heap::layout
