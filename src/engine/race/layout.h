// engine/race/layout.h - the race index's bytes on the memory nodes
// (race.h has the protocol). Every word that a verb CASes is 8-byte
// aligned; multi-word structures are written with one WRITE, whose words a
// racing READ may see half old, half new (remote/transport.h).
#pragma once

#include <cstddef>
#include <cstdint>

#include "engine/remote_index.h"
#include "remote/memnode.h"

namespace pmhash::engine::race {

// ---- the index root, in node 0's index root (remote::kIndexRootOffset) ----
inline constexpr char kMagic[8] = {'P', 'M', 'H', 'R', 'A', 'C', 'E', '1'};
inline constexpr std::uint32_t kLayoutVersion = 1;

struct IndexRoot {
  remote_index::RootHeader head;  // kMagic (written last at create), kLayoutVersion, nodes
  std::uint64_t directory;        // offset on node 0 of 2^max_depth directory words
  std::uint32_t initial_depth;
  std::uint32_t max_depth;
  std::uint32_t groups;           // bucket groups per subtable
  std::uint8_t pad0[28];
  std::uint64_t global_depth;     // the deepest subtable's local depth (CAS to raise)
  std::uint8_t pad1[56];
};
static_assert(sizeof(IndexRoot) <= remote::kIndexRootSize && offsetof(IndexRoot, global_depth) == 64);
inline constexpr std::uint64_t kGlobalDepthOff =
    remote::kIndexRootOffset + offsetof(IndexRoot, global_depth);

// ---- directory word: one per suffix, all 2^max_depth kept current ----
//   63     lock: a split of this subtable runs (set by CAS on the word of
//          the subtable's own suffix only, the lowest index naming it)
//   62..56 the subtable's local depth
//   55..48 node of the subtable
//   47..0  byte offset of the subtable on that node
inline constexpr std::uint64_t kDirLock = std::uint64_t{1} << 63;
inline constexpr std::uint64_t make_dir(unsigned node, std::uint64_t off, unsigned depth) {
  return (std::uint64_t{depth} << 56) | (std::uint64_t{node} << 48) | off;
}
inline unsigned dir_depth(std::uint64_t w) { return static_cast<unsigned>((w >> 56) & 127); }
inline unsigned dir_node(std::uint64_t w) { return static_cast<unsigned>((w >> 48) & 255); }
inline std::uint64_t dir_off(std::uint64_t w) { return w & remote_index::kOffsetMask; }

// ---- subtable: `groups` bucket groups of 3 buckets of 64 bytes ----
//   group g at g * 192:  +0 main bucket 2g | +64 overflow bucket | +128 main bucket 2g+1
// The combined bucket of main bucket b is 128 contiguous bytes: main and
// overflow for an even b (+0), overflow and main for an odd b (+64); so
// one READ brings a main bucket with the overflow bucket it shares.
inline constexpr std::uint64_t kBucketBytes = 64;
inline constexpr std::uint64_t kGroupBytes = 3 * kBucketBytes;
inline constexpr std::uint64_t kCombinedBytes = 2 * kBucketBytes;
inline constexpr unsigned kSlotsPerBucket = 8;  // word 0 is the header
inline constexpr unsigned kCombinedWords = 16;  // words 0 and 8 are headers
inline std::uint64_t combined_off(unsigned bucket) {
  return (bucket / 2) * kGroupBytes + (bucket % 2) * kBucketBytes;
}

// ---- bucket header: word 0 of every bucket, equal in all of a subtable ----
//   63..56 local depth
//   55..0  suffix: the low `depth` hash bits of every key of the subtable
// Written only by the client that holds the subtable's split lock.
inline constexpr std::uint64_t make_header(unsigned depth, std::uint64_t suffix) {
  return (std::uint64_t{depth} << 56) | suffix;
}
inline unsigned header_depth(std::uint64_t h) { return static_cast<unsigned>(h >> 56); }
inline std::uint64_t header_suffix(std::uint64_t h) { return h & ((std::uint64_t{1} << 56) - 1); }

// ---- entry slot: words 1..7 of a bucket; 0 = free ----
//   63..56 fingerprint (bits 56..63 of the key's second hash)
//   55..48 KV block length in 64-byte units, 1 .. 255; 0 = longer
//   47..0  KV pointer, of which:
//     47     frozen: a split has captured the slot (no CAS of a writer can
//            match it until the split rewrites it); a frozen free slot is
//            kFrozen alone
//     46..39 node of the KV block
//     38..0  offset / 64 of the KV block on that node (up to 32 TiB)
inline constexpr unsigned kFpShift = 56;
inline constexpr unsigned kLenShift = 48;
inline constexpr std::uint64_t kFrozen = std::uint64_t{1} << 47;
inline constexpr unsigned kKvNodeShift = 39;
inline constexpr std::uint64_t kKvOffMask = (std::uint64_t{1} << 39) - 1;
inline constexpr unsigned kMaxLenUnits = 255;

inline std::uint64_t make_entry(unsigned fp, std::uint64_t units, unsigned node, std::uint64_t off) {
  return (std::uint64_t{fp} << kFpShift) |
         (std::uint64_t{units <= kMaxLenUnits ? units : 0} << kLenShift) |
         (std::uint64_t{node} << kKvNodeShift) | (off >> 6);
}
inline unsigned entry_fp(std::uint64_t e) { return static_cast<unsigned>(e >> kFpShift); }
inline unsigned entry_len(std::uint64_t e) { return static_cast<unsigned>((e >> kLenShift) & 255); }
inline bool entry_frozen(std::uint64_t e) { return (e & kFrozen) != 0; }
inline std::uint64_t entry_thawed(std::uint64_t e) { return e & ~kFrozen; }
inline unsigned entry_node(std::uint64_t e) { return static_cast<unsigned>((e >> kKvNodeShift) & 255); }
inline std::uint64_t entry_off(std::uint64_t e) { return (e & kKvOffMask) << 6; }

// ---- KV block: 64-byte aligned, immutable once a slot names it ----
//   KvHeader, then the key, then the value
struct KvHeader {
  std::uint64_t checksum;   // XXH3-64 of everything after this word (lengths, hash, key, value)
  std::uint32_t key_len;
  std::uint32_t value_len;
  std::uint64_t hash;       // the key's first hash (splits read it instead of the key)
};
static_assert(sizeof(KvHeader) == 24);

// ---- the key's hashes ----
// Subtable: the low bits of h1 (local depth of them), through the
// directory. Main buckets: (h1 >> 32) mod 2G and h2 mod 2G (the bucket
// after the first when both agree). Fingerprint: the top byte of h2.
inline unsigned key_fp(std::uint64_t h2) { return static_cast<unsigned>(h2 >> 56); }

}  // namespace pmhash::engine::race
