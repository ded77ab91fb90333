// engine/sephash/layout.h - the sephash index's bytes on the memory nodes.
//
// Remote addresses (RAddr, engine/remote_common/remote_index.h) name a node and a byte
// offset in its region. Every structure below is
// written with remote verbs (remote/transport.h) and read back the same way;
// words that verbs CAS or FAA are 8-byte aligned.
#pragma once

#include <cstddef>
#include <cstdint>

#include "engine/remote_common/remote_index.h"
#include "remote/memnode.h"

namespace pmhash::engine::sephash {

using remote_index::kOffsetMask;
using remote_index::make_raddr;
using remote_index::RAddr;
using remote_index::raddr_node;
using remote_index::raddr_off;

// ---- the index root, in node 0's index root (remote::kIndexRootOffset) ----
inline constexpr char kMagic[8] = {'P', 'M', 'H', 'S', 'E', 'P', 'H', '1'};
// 2: the CurSeg header's merge sequence word, the per-node free tables.
// 3: the CurSeg header's intent record (+24..+55) and lock takeovers that
//    add kSeqTakeover to seq.
inline constexpr std::uint32_t kLayoutVersion = 3;

// The index's lock lease is not here but in every node's membership stamp
// (engine/remote_common/remote_index.h), with the generation that race shares.
struct IndexRoot {
  char magic[8];              // written last at create
  std::uint32_t layout_version;
  std::uint32_t nodes;        // memory nodes the index spans
  std::uint32_t initial_depth;
  std::uint32_t max_depth;
  std::uint32_t main_max_slots;
  std::uint32_t reserved0;
  std::uint64_t directory;    // offset on node 0 of 2^max_depth RAddr entries
  std::uint64_t free_table;   // offset, the same on every node, of that node's FreeTable
  std::uint8_t pad0[16];
  std::uint64_t global_depth; // the deepest segment's local depth (CAS to raise)
  std::uint8_t pad1[56];
  std::uint64_t version;      // FAA: the version of the next write (item order)
  std::uint8_t pad2[56];
};
static_assert(sizeof(IndexRoot) <= remote::kIndexRootSize);
inline constexpr std::uint64_t kRootOff = remote::kIndexRootOffset;
inline constexpr std::uint64_t kGlobalDepthOff = kRootOff + offsetof(IndexRoot, global_depth);
inline constexpr std::uint64_t kVersionOff = kRootOff + offsetof(IndexRoot, version);
static_assert(kGlobalDepthOff % 64 == 0 && kVersionOff % 64 == 0);

// ---- slots: one 8-byte CAS word ----
//   63..56 fingerprint (hash bits 56..63)
//   55..51 second fingerprint (hash bits 51..55)
//   50     tombstone: the item deletes its key
//   49..47 item length in 64-byte units, 1 .. 7; 0 = longer (read the header)
//   46     sign (CurSeg slots only): the slot is in use when it equals the
//          segment's sign
//   45..42 four hash bits from bit 4*floor(depth/4) on (depth = the
//          segment's local depth): what a split sorts by without reading items
//   41..0  item offset / 64 on the segment's node
// A slot whose item field is 0 names no item: it is free in the state whose
// seq has these low 22 bits in bits 63..42 (free_slot(seq); a merge writes
// it to every slot for the state it publishes; 0 is the free word of seq 0,
// a new CurSeg's). An entry is live when its sign is the segment's.
inline constexpr unsigned kFpShift = 56;
inline constexpr unsigned kFp2Shift = 51;
inline constexpr std::uint64_t kTombBit = std::uint64_t{1} << 50;
inline constexpr unsigned kLenShift = 47;
inline constexpr std::uint64_t kSignBit = std::uint64_t{1} << 46;
inline constexpr unsigned kDbitsShift = 42;
inline constexpr std::uint64_t kItemMask = (std::uint64_t{1} << 42) - 1;

inline unsigned slot_fp(std::uint64_t s) { return static_cast<unsigned>(s >> kFpShift); }
inline unsigned slot_fp2(std::uint64_t s) { return static_cast<unsigned>((s >> kFp2Shift) & 31); }
inline unsigned slot_len(std::uint64_t s) { return static_cast<unsigned>((s >> kLenShift) & 7); }
inline unsigned slot_dbits(std::uint64_t s) { return static_cast<unsigned>((s >> kDbitsShift) & 15); }
inline std::uint64_t slot_item(std::uint64_t s) { return (s & kItemMask) << 6; }
inline bool slot_tomb(std::uint64_t s) { return (s & kTombBit) != 0; }
inline std::uint64_t free_slot(std::uint64_t seq) { return (seq & ((1u << 22) - 1)) << 42; }
inline bool slot_live(std::uint64_t s, bool sign) {
  return (s & kItemMask) != 0 && ((s & kSignBit) != 0) == sign;
}
// The slot with its sign cleared: what identifies an entry.
inline std::uint64_t slot_entry(std::uint64_t s) { return s & ~kSignBit; }

inline unsigned hash_fp(std::uint64_t h) { return static_cast<unsigned>(h >> 56); }
inline unsigned hash_fp2(std::uint64_t h) { return static_cast<unsigned>((h >> 51) & 31); }
inline unsigned dbits_base(unsigned depth) { return depth & ~3u; }
inline unsigned hash_dbits(std::uint64_t h, unsigned depth) {
  return static_cast<unsigned>((h >> dbits_base(depth)) & 15);
}

// ---- CurSeg: 1 KiB, the append area of a segment ----
//   +0    meta (one word, so that sign, lock, depth and MainSeg change at once):
//           63 sign, 62 lock (a merge or split runs), 61..56 local depth,
//           55..42 MainSeg slots, 41..0 MainSeg offset / 64 (same node)
//   +8    seq: the merge sequence number. The client that takes the lock
//         adds 1 (FAA) before it reads anything of the segment; it only
//         grows. A reader's snapshot is (seq, then meta); its data counts
//         when a later READ of (meta, then seq) finds both unchanged and the
//         meta unlocked (sephash.h, "Reclamation").
//         A lock holder that is taken over (sephash.h, "Dead lock
//         holders") has its seq raised by kSeqTakeover by the client that
//         takes the lock from it: the low 32 bits (and so the low 22 bits
//         that free words carry) stay those of the lock's first holder.
//   +16   pattern: the low `depth` hash bits every key of the segment has
//   +24   intent record, written by the lock holder before anything
//         destructive, so that another client can finish its publish:
//   +24     intent seq: the seq the holder's FAA made (its lock's seq)
//   +32     old meta: the meta the holder locked, lock bit clear
//   +40     new meta: the meta its publish writes (unlocked)
//   +48     new segment: the RAddr of a split's new CurSeg (on this
//           segment's node, complete before the intent), 0 for a merge
//   +56   swap floor: the version of the last compare_and_swap made
//         under this segment's lock (0: none), written under the lock
//         before that swap's slot and copied into a split's new CurSeg.
//         An append whose item has not landed and whose version is not
//         above the floor its snapshot shows takes a new version first
//         (sephash.h, "Compare and swap").
//   +64   fingerprint bitmaps, one of 512 bits per sign: bit fp*2 + (fp2&1)
//         is set (before the slot's CAS) for every entry in a slot of that sign
//   +192  104 slots
inline constexpr std::uint64_t kCurSegBytes = 1024;
inline constexpr std::uint64_t kMetaOff = 0;
inline constexpr std::uint64_t kSeqOff = 8;
inline constexpr std::uint64_t kPatternOff = 16;
inline constexpr std::uint64_t kIntentOff = 24;
inline constexpr std::uint64_t kIntentBytes = 32;
inline constexpr std::uint64_t kSwapFloorOff = 56;
inline constexpr std::uint64_t kSeqTakeover = std::uint64_t{1} << 32;
// Whether an intent of seq `intent_seq` was written under the lock whose
// seq is now `seq` (by its first holder; takeovers since kept the low bits).
inline bool intent_of_lock(std::uint64_t intent_seq, std::uint64_t seq) {
  return intent_seq <= seq && ((seq - intent_seq) & (kSeqTakeover - 1)) == 0;
}
inline constexpr std::uint64_t kBitmapOff = 64;
inline constexpr std::uint64_t kBitmapBytes = 64;  // per sign
inline constexpr std::uint64_t kHeaderBytes = 192;
inline constexpr std::uint64_t kSlotsOff = 192;
inline constexpr unsigned kCurSlots = 104;
static_assert(kSlotsOff + kCurSlots * 8 == kCurSegBytes);
static_assert(kBitmapOff + 2 * kBitmapBytes == kHeaderBytes);
static_assert(kIntentOff + kIntentBytes <= kBitmapOff);

inline constexpr std::uint64_t kMetaSign = std::uint64_t{1} << 63;
inline constexpr std::uint64_t kMetaLock = std::uint64_t{1} << 62;
inline unsigned meta_depth(std::uint64_t m) { return static_cast<unsigned>((m >> 56) & 63); }
inline unsigned meta_main_len(std::uint64_t m) { return static_cast<unsigned>((m >> 42) & 16383); }
inline std::uint64_t meta_main_off(std::uint64_t m) { return (m & kItemMask) << 6; }
inline bool meta_sign(std::uint64_t m) { return (m & kMetaSign) != 0; }
inline std::uint64_t make_meta(bool sign, unsigned depth, unsigned main_len,
                               std::uint64_t main_off) {
  return (sign ? kMetaSign : 0) | (std::uint64_t{depth} << 56) |
         (std::uint64_t{main_len} << 42) | (main_off >> 6);
}
inline constexpr unsigned kMaxMainSlots = 16383;

inline unsigned bitmap_bit(unsigned fp, unsigned fp2) { return fp * 2 + (fp2 & 1); }

// ---- MainSeg: immutable once published ----
//   +0    257 uint16: slots with fingerprint < f start at index prefix[f]
//   +576  the slots, sorted by (fingerprint, second fingerprint); sign 0
inline constexpr std::uint64_t kPrefixBytes = 576;
inline std::uint64_t main_bytes(unsigned slots) { return kPrefixBytes + std::uint64_t{slots} * 8; }

// ---- items: 64-byte aligned, immutable once a slot names them ----
struct ItemHeader {
  std::uint64_t version;    // order of writes to one key: the larger wins
  std::uint32_t key_len;
  std::uint32_t value_len;  // 0 for a tombstone
  std::uint64_t hash;       // the key's hash (splits at depths 4k re-read it)
};
static_assert(sizeof(ItemHeader) == 24);
inline constexpr unsigned kMaxSlotLenUnits = 7;

// ---- free blocks handed back by clients: a Treiber stack per node ----
// Every node has, from create on, a FreeTable at IndexRoot::free_table:
//   +0    head: 63..42 tag (22 bits, +1 on every push and pop, so that a
//         CAS never succeeds on a head that was popped and pushed again
//         since it was read), 41..0 offset / 64 of the top FreeRecord on
//         this node (0: the stack is empty)
// A FreeRecord (kFreeRecordBytes, 64-byte aligned, on the same node) is
// immutable while on the stack:
//   +0    next: offset of the record below it (0: none)
//   +8    count: entries that follow, <= kFreeRecordEntries
//   +16   entries: 63..42 block length in 64-byte units, 41..0 offset / 64
// A client pushes a record of blocks it no longer needs when its session
// ends; another pops a whole record (and takes the record's own block too).
inline constexpr std::uint64_t kFreeTableBytes = 64;
inline constexpr std::uint64_t kFreeRecordBytes = 4096;
inline constexpr std::uint64_t kFreeRecordEntries = (kFreeRecordBytes - 16) / 8;
inline constexpr unsigned kTagShift = 42;
inline constexpr std::uint64_t free_head(std::uint64_t tag, std::uint64_t off) {
  return (tag << kTagShift) | (off >> 6);
}
inline std::uint64_t head_tag(std::uint64_t h) { return h >> kTagShift; }
inline std::uint64_t head_off(std::uint64_t h) { return (h & kItemMask) << 6; }
inline std::uint64_t free_entry(std::uint64_t units, std::uint64_t off) {
  return (units << kTagShift) | (off >> 6);
}
inline std::uint64_t entry_units(std::uint64_t e) { return e >> kTagShift; }
inline std::uint64_t entry_off(std::uint64_t e) { return (e & kItemMask) << 6; }

}  // namespace pmhash::engine::sephash
