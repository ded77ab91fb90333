// engine/common/op_log.h - the per-thread redo record that lets nehash and
// pmeh change a slot's meta and words together (common/slot16.h), though
// they lie in different lines.
//
// One OpLog per heap thread slot, in the engine's root; written only by the
// thread that owns the heap slot, and by recovery. A record, 32 bytes:
//   op    bits 0..3   kind: kOpNone (0) | kOpSlotUpdate (1) | an engine's own
//                     kinds from 2 up (nehash's split record, nehash/layout.h)
//         kOpSlotUpdate: bits 4..47 the pool offset of the 16-byte slot
//                     (16-aligned, so its low 4 bits are the kind's);
//                     bits 48..63 zero
//   meta  kOpSlotUpdate: bits 0..15 the new meta, bits 16..63 the pool offset
//                     of that meta
//   w0, w1  kOpSlotUpdate: the slot's new words
//
// Persist order of a slot update (write_slot_update):
//   1 op = 0; meta, w0, w1 written; the record flushed
//   2 drain #1      the fields (and whatever the caller made durable-before,
//                   such as a new item or a retire entry) are on media
//   3 op = kOpSlotUpdate(slot); persist #2: the commit point
//   4 the slot's w0, w1 and its meta stored and flushed
//   5 drain #3      the slot is whole on media
//   6 op = 0; persist #4
// A crash before 3 leaves the old slot (the record is not committed); a
// crash from 3 to 6 leaves a committed record and recovery writes the new
// slot whatever part of step 4 reached media. Persist #4 keeps a committed
// record tied to the one operation in flight: without it a later update of
// the same slot, through the fast path that bypasses the log, could be
// undone by a replay of this stale record.
//
// What replay assumes: the engine's recovery has checked that the record
// names a slot and its meta in a live bucket (its own geometry) and, for a
// pointer slot, an allocated item; replay_slot_update then rewrites the
// slot and meta (idempotent: a crash during recovery replays again), and
// clear_op_logs clears the records only once the replays are durable.
#pragma once

#include <atomic>
#include <cstdint>
#include <span>

#include "engine/common/slot16.h"
#include "engine/planted.h"
#include "media/region.h"
#include "pmhash/limits.h"
#include "pool/pptr.h"

namespace pmhash::engine::common {

// One per heap thread slot. A literal, since it fixes the roots' layout.
inline constexpr unsigned kOpLogs = 256;
static_assert(kOpLogs == kMaxThreads);

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
// A slot-update op has nothing above the offset bits.
constexpr bool op_slot_well_formed(std::uint64_t op) { return (op >> 48) == 0; }
constexpr std::uint64_t log_meta(std::uint16_t meta, std::uint64_t meta_off) { return meta | (meta_off << 16); }
constexpr std::uint16_t log_meta_value(std::uint64_t w) { return static_cast<std::uint16_t>(w); }
constexpr std::uint64_t log_meta_offset(std::uint64_t w) { return w >> 16; }

// Writes `slot` and `meta` to (w0, w1, new_meta) through `log`, in the
// persist order above. `clear_bug` is the calling engine's planted bug
// (engine/planted.h) that, when active, leaves out persist #4; kNone for an
// engine without one.
void write_slot_update(media::Region& region, OpLog& log, Slot& slot, std::atomic<std::uint16_t>& meta,
                       std::uint16_t new_meta, std::uint64_t w0, std::uint64_t w1,
                       planted::Bug clear_bug = planted::kNone);

// Recovery: writes the committed record's words into `slot` and its meta
// into `meta` (checked by the caller) and flushes both; not drained.
void replay_slot_update(media::Region& region, const OpLog& log, Slot* slot,
                        std::atomic<std::uint16_t>* meta);

// Recovery: once everything the records stand for is flushed, drains it and
// clears the records (flushed, not drained: the caller drains before it
// serves or frees what they named).
void clear_op_logs(media::Region& region, std::span<OpLog* const> records);

// check(): the index of the first record that is not empty (a quiescent,
// clean index has none), or -1.
int busy_op_log(std::span<const OpLog> logs);

}  // namespace pmhash::engine::common
