// engine/race/layout.h - the race index's bytes on the memory nodes
// (race.h has the protocol). Every word that a verb CASes is 8-byte
// aligned; multi-word structures are written with one WRITE, whose words a
// racing READ may see half old, half new (remote/transport.h).
#pragma once

#include <cstddef>
#include <cstdint>

#include "engine/remote_common/remote_index.h"
#include "remote/memnode.h"

namespace pmhash::engine::race {

// ---- the index root, in node 0's index root (remote::kIndexRootOffset) ----
inline constexpr char kMagic[8] = {'P', 'M', 'H', 'R', 'A', 'C', 'E', '1'};
// 1: the split lock was bit 63 of the subtable's directory word.
// 2: the split lock, with a sequence number, and the split intent live in
//    a trailer after each subtable's groups; directory bit 63 is unused.
inline constexpr std::uint32_t kLayoutVersion = 2;

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
//   63     zero (check() reports a word with it set)
//   62..56 the subtable's local depth
//   55..48 node of the subtable
//   47..0  byte offset of the subtable on that node
// A split changes the words of its suffix only by CAS, from a word of
// depth <= d (the subtable split, or an ancestor whose split is not
// finished yet) to a word of depth d + 1 (race.h, "Split", steps 4 and 7).
inline constexpr std::uint64_t kDirReserved = std::uint64_t{1} << 63;
inline constexpr std::uint64_t make_dir(unsigned node, std::uint64_t off, unsigned depth) {
  return (std::uint64_t{depth} << 56) | (std::uint64_t{node} << 48) | off;
}
inline unsigned dir_depth(std::uint64_t w) { return static_cast<unsigned>((w >> 56) & 127); }
inline unsigned dir_node(std::uint64_t w) { return static_cast<unsigned>((w >> 48) & 255); }
inline std::uint64_t dir_off(std::uint64_t w) { return w & remote_index::kOffsetMask; }

// ---- subtable: `groups` bucket groups of 3 buckets of 64 bytes, then a trailer ----
//   group g at g * 192:  +0 main bucket 2g | +64 overflow bucket | +128 main bucket 2g+1
//   trailer at groups * 192: 64 bytes (below)
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

// ---- subtable trailer: the split lock and the split intent ----
//   +0   lock word (one 8-byte word, CAS):
//          63     locked: a split of this subtable runs (or its client died)
//          62..0  seq: raised by every change of the word, so that no value
//                 of it ever recurs: +1 by a lock (its seq is the lock's),
//                 +1 by a release, +kSeqTakeover by a takeover
//   +8   intent: the new subtable's directory word (depth d + 1)
//   +16  intent: the header the subtable had when it was locked (d, s)
//   +24  intent seq: the seq of the lock the intent was written under;
//        written after +8 and +16 as a WRITE of its own, so that when it
//        stands (8-byte words are never torn) the two words before it and
//        the new subtable, written before them, are whole
//   +32  zero
// A new subtable's trailer is all zero: unlocked, seq 0, no intent (no
// lock has seq 0). Written only by the lock's holder (or its taker).
inline constexpr std::uint64_t kTrailerBytes = 64;
struct Trailer {
  std::uint64_t lock;
  std::uint64_t intent_new;
  std::uint64_t intent_header;
  std::uint64_t intent_seq;
  std::uint64_t zero[4];
};
static_assert(sizeof(Trailer) == kTrailerBytes && offsetof(Trailer, intent_seq) == 24);
inline constexpr std::uint64_t kIntentOff = offsetof(Trailer, intent_new);
inline constexpr std::uint64_t kIntentSeqOff = offsetof(Trailer, intent_seq);
inline constexpr std::uint64_t kLockLocked = std::uint64_t{1} << 63;
// What a takeover adds to seq: the low 32 bits stay the lock's, so an
// intent is recognised as the lock's through any number of takeovers.
inline constexpr std::uint64_t kSeqTakeover = std::uint64_t{1} << 32;
inline constexpr bool lock_held(std::uint64_t l) { return (l & kLockLocked) != 0; }
inline constexpr std::uint64_t lock_seq(std::uint64_t l) { return l & ~kLockLocked; }
inline constexpr std::uint64_t make_lock(bool locked, std::uint64_t seq) {
  return (locked ? kLockLocked : 0) | (seq & ~kLockLocked);
}
// Whether an intent of seq `intent_seq` was written under the lock whose
// seq is now `seq` (the same lock, taken over any number of times). An
// older lock's intent differs in the low 32 bits: its release and this
// lock each added 1 (assumed: fewer than 2^31 locks of one subtable).
inline constexpr bool intent_of_lock(std::uint64_t intent_seq, std::uint64_t seq) {
  return intent_seq != 0 && intent_seq <= seq && ((seq - intent_seq) & (kSeqTakeover - 1)) == 0;
}

// ---- bucket header: word 0 of every bucket, equal in all of a subtable ----
//   63..56 local depth
//   55..0  suffix: the low `depth` hash bits of every key of the subtable
// Written only by the client that holds the subtable's split lock (or its
// taker). While a split rewrites them (its step 5) they may differ.
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
