// engine/dali/layout.h - Dalí's persistent structures and every bit of them.
// The design, the epoch protocol and recovery are described in dali.h.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

#include "pool/pool.h"

namespace pmhash::engine::dali {

inline constexpr std::uint64_t kRootMagic = 0x3252'494c'4144'4c44ull;     // "DLDALIR2"
inline constexpr std::uint64_t kSegmentMagic = 0x3147'4553'494c'4144ull;  // "DALISEG1"
// The table never holds more than 2^kMaxLevel buckets.
inline constexpr unsigned kMaxLevel = 36;
// Segment 0 holds the initial 2^L0 buckets, segment j >= 1 the 2^(L0+j-1)
// buckets [2^(L0+j-1), 2^(L0+j)): one per doubling.
inline constexpr unsigned kMaxSegments = kMaxLevel + 1;
// Failed epochs the root can hold (two per crash). See dali.h, "Failure list".
inline constexpr unsigned kFailureListCapacity = 1000;
// Bucket locks: 2^min(L0, kMaxStripeLog2).
inline constexpr unsigned kMaxStripeLog2 = 16;

// --- status indicator <a, f, c, ss> (paper Fig. 2) ---------------------------
//   bits 1..0    a   index (0..2) of the active pointer
//   bits 3..2    f   index of the in-flight pointer, or kNoRole (paper: ⊥)
//   bits 5..4    c   index of the committed pointer
//   bits 63..6   ss  epoch of the bucket's most recent update (58 bits)
// Written with one 8-byte store; it and the pointers may reach media in any
// order (dali.h, "Why any order is safe").
inline constexpr unsigned kNoRole = 3;

struct Stat {
  unsigned a = 0;
  unsigned f = kNoRole;
  unsigned c = 1;
  std::uint64_t ss = 0;

  static Stat decode(std::uint64_t w) {
    return Stat{static_cast<unsigned>(w & 3), static_cast<unsigned>((w >> 2) & 3),
                static_cast<unsigned>((w >> 4) & 3), w >> 6};
  }
  std::uint64_t encode() const {
    return (ss << 6) | (std::uint64_t{c} << 4) | (std::uint64_t{f} << 2) | a;
  }
  // The pointer index that holds no role while f is ⊥.
  unsigned spare() const { return 3 - a - c; }
  // Roles a decoded word may legally hold: a and c distinct pointers, f
  // distinct from both or ⊥.
  bool well_formed() const {
    return a < 3 && c < 3 && a != c && (f == kNoRole || (f != a && f != c));
  }
  bool operator==(const Stat&) const = default;
};

// The roles after an update in epoch e (paper Fig. 6), for a bucket whose
// status is `s`; curr_fail: s.ss failed; prev_fail: s.ss-1 failed or f = ⊥.
// The pointer the update retargets is the new `a`.
inline Stat next_roles(Stat s, std::uint64_t e, bool curr_fail, bool prev_fail) {
  if (s.ss == e) return s;                                       // row 1
  if (s.ss + 1 == e) {
    if (!curr_fail && !prev_fail) return Stat{s.c, s.a, s.f, e};  // row 2
    if (!curr_fail) return Stat{s.spare(), s.a, s.c, e};          // row 3: a := the f pointer
    // Row 4. Its "c := c" assumes prev_fail, which always holds there:
    // ss = e-1 failed means the crash came in e-1, so e-2 failed too.
    return Stat{s.a, kNoRole, s.c, e};
  }
  if (!curr_fail) return Stat{s.c, kNoRole, s.a, e};              // row 5
  if (!prev_fail) return Stat{s.a, kNoRole, s.f, e};              // row 6
  return Stat{s.a, kNoRole, s.c, e};                              // row 7
}

// --- bucket (paper Fig. 2-3) -------------------------------------------------
// 32 bytes, two per cache line: the status indicator and three list
// pointers (record offsets, 0 = none). The bucket's mutex is in DRAM (a
// stripe lock, dali.h), so that locking never dirties a line of the pool.
// The root's table shape is kept in a Bucket too, its "pointers" holding
// shapes instead of record offsets (dali.h, "Growth").
struct Bucket {
  std::atomic<std::uint64_t> status;  // Stat, encoded
  std::atomic<std::uint64_t> ptr[3];
};
static_assert(sizeof(Bucket) == 32);

// --- table shape (linear hashing) -------------------------------------------
//   bits 63..56  level L    (L0 <= L <= kMaxLevel)
//   bits 55..0   split p    (0 <= p < 2^L)
// The table has 2^L + p buckets; a key with hash h lives in bucket
// h mod 2^L, or h mod 2^(L+1) when h mod 2^L < p (already split).
struct Shape {
  unsigned level = 0;
  std::uint64_t split = 0;

  static Shape decode(std::uint64_t w) { return Shape{static_cast<unsigned>(w >> 56), w & ((std::uint64_t{1} << 56) - 1)}; }
  std::uint64_t encode() const { return (std::uint64_t{level} << 56) | split; }
  std::uint64_t buckets() const { return (std::uint64_t{1} << level) + split; }
  std::uint64_t bucket_of(std::uint64_t h) const {
    const std::uint64_t b = h & ((std::uint64_t{1} << level) - 1);
    return b < split ? h & ((std::uint64_t{2} << level) - 1) : b;
  }
  // The shape after splitting bucket `split`.
  Shape next() const {
    return split + 1 == (std::uint64_t{1} << level) ? Shape{level + 1, 0} : Shape{level, split + 1};
  }
  bool operator==(const Shape&) const = default;
};

// --- segment ------------------------------------------------------------------
// One heap block: a header line, then its buckets.
struct alignas(64) SegmentHeader {
  std::uint64_t magic;    // kSegmentMagic
  std::uint64_t index;    // j
  std::uint64_t buckets;  // 2^L0 for j = 0, else 2^(L0+j-1)
  std::uint64_t reserved[5];
};
static_assert(sizeof(SegmentHeader) == 64);

inline std::size_t segment_bytes(std::uint64_t buckets) {
  return sizeof(SegmentHeader) + sizeof(Bucket) * buckets;
}
inline std::uint64_t segment_buckets(unsigned initial_log2, unsigned j) {
  return std::uint64_t{1} << (j == 0 ? initial_log2 : initial_log2 + j - 1);
}
inline Bucket* segment_buckets_of(SegmentHeader* s) { return reinterpret_cast<Bucket*>(s + 1); }

// --- record -------------------------------------------------------------------
//   0        8                 16        24         28           32       32+key_len
//   +--------+-----------------+---------+----------+------------+--------+---------+
//   | next   | written | absent| version | key_len  | value_len  | key    | value   |
//   +--------+-----------------+---------+----------+------------+--------+---------+
// `next`: the record linked before this one (0: end of the list); only
//   garbage collection redirects it, to unlink obsolete records.
// `meta`: bit 0 set = "not present" (a delete, paper §2); bits 63..1 the
//   epoch the record was written in: the fence of that epoch makes it
//   durable.
// `version`: the epoch of the write the record carries. Equal to the written
//   epoch, except in the copies a bucket split makes, which keep the version
//   they copy (snapshot readers need it; dali.h, "Growth").
// A record whose version is the current epoch may be rewritten in place
// (paper §3.4): its value, value_len and the absent bit. Nothing else of a
// record ever changes.
struct RecordHeader {
  std::atomic<std::uint64_t> next;
  std::atomic<std::uint64_t> meta;
  std::uint64_t version;
  std::uint32_t key_len;
  std::atomic<std::uint32_t> value_len;  // rewritten in place (see above)
};
static_assert(sizeof(RecordHeader) == 32);

inline constexpr std::uint64_t kAbsent = 1;
inline std::uint64_t record_meta(std::uint64_t written, bool absent) {
  return (written << 1) | (absent ? kAbsent : 0);
}
inline std::uint64_t record_written(const RecordHeader* r) {
  return r->meta.load(std::memory_order_relaxed) >> 1;
}
// Acquire, as every load of an optimistic reader (dali.h, "Locks").
inline bool record_absent(const RecordHeader* r) {
  return (r->meta.load(std::memory_order_acquire) & kAbsent) != 0;
}
inline std::size_t record_size(std::size_t key_len, std::size_t value_len) {
  return sizeof(RecordHeader) + key_len + value_len;
}
inline std::string_view record_key(const RecordHeader* r) {
  return {reinterpret_cast<const char*>(r + 1), r->key_len};
}
inline std::uint32_t record_value_len(const RecordHeader* r) {
  return r->value_len.load(std::memory_order_acquire);
}
// The value of a record nobody rewrites meanwhile (the caller holds the
// stripe's lock, or the record's version is older than the current epoch).
inline std::string_view record_value(const RecordHeader* r) {
  return {reinterpret_cast<const char*>(r + 1) + r->key_len, record_value_len(r)};
}

// Copies the bytes at `src`, which an in-place rewrite may change meanwhile,
// with atomic loads: the race is defined, and the reader's sequence check
// discards a torn copy. Acquire loads and release stores (store_racy, the
// writer's side) keep them inside the sequence check without fences.
inline void load_racy(char* dst, const char* src, std::size_t n) {
  std::size_t i = 0;
  auto byte = [](const char* p) { return std::atomic_ref<char>(*const_cast<char*>(p)).load(std::memory_order_acquire); };
  for (; i < n && reinterpret_cast<std::uintptr_t>(src + i) % 8 != 0; ++i) dst[i] = byte(src + i);
  for (; i + 8 <= n; i += 8) {
    const std::uint64_t w = std::atomic_ref<std::uint64_t>(*reinterpret_cast<std::uint64_t*>(const_cast<char*>(src + i)))
                                .load(std::memory_order_acquire);
    std::memcpy(dst + i, &w, 8);
  }
  for (; i < n; ++i) dst[i] = byte(src + i);
}
inline void store_racy(char* dst, const char* src, std::size_t n) {
  std::size_t i = 0;
  auto byte = [](char* p, char v) { std::atomic_ref<char>(*p).store(v, std::memory_order_release); };
  for (; i < n && reinterpret_cast<std::uintptr_t>(dst + i) % 8 != 0; ++i) byte(dst + i, src[i]);
  for (; i + 8 <= n; i += 8) {
    std::uint64_t w;
    std::memcpy(&w, src + i, 8);
    std::atomic_ref<std::uint64_t>(*reinterpret_cast<std::uint64_t*>(dst + i)).store(w, std::memory_order_release);
  }
  for (; i < n; ++i) byte(dst + i, src[i]);
}

// --- root ---------------------------------------------------------------------
// Each group of fields that changes at its own time has its own line.
struct Root {
  std::uint64_t magic;          // kRootMagic
  std::uint32_t initial_log2;   // L0, a creation parameter
  std::uint32_t stripe_log2;    // bucket locks: 2^min(L0, kMaxStripeLog2)
  std::uint64_t reserved0[6];
  // The global epoch counter (paper §3.1). Persisted before any operation
  // runs in the epoch it names.
  alignas(64) std::atomic<std::uint64_t> epoch;
  std::uint64_t reserved1[7];
  // The table shape, versioned like a bucket: status <a, f, c, ss> and three
  // encoded Shapes (dali.h, "Growth").
  alignas(64) Bucket shape;
  std::uint64_t reserved2[4];
  // Saved by a clean close (valid while count_valid == 1; cleared at open).
  alignas(64) std::uint64_t item_count;
  std::uint64_t count_valid;
  std::uint64_t reserved3[6];
  // 1 from a crash until the sweep that reclaims its leaked blocks has
  // ended (dali.h, Recovery 2); an open that finds it set sweeps.
  alignas(64) std::uint64_t sweep_pending;
  std::uint64_t reserved5[7];
  // Segment j's block offset, or 0. Persisted before any split uses it.
  alignas(64) std::atomic<std::uint64_t> segments[kMaxSegments];
  // The persistent failure list (paper §3.1): `failed_count` entries, in
  // increasing order. Entries are durable before the count that covers them.
  alignas(64) std::uint64_t failed_count;
  std::uint64_t reserved4[7];
  alignas(64) std::uint64_t failed[kFailureListCapacity];
};
static_assert(sizeof(Root) <= pool::kRootSize);

}  // namespace pmhash::engine::dali
