// engine/planted.h - test-only switches that plant classic crash-consistency
// mistakes in the engines (and in the memory node's verb executor, which
// the engines on memory nodes stand on), so that the crash checker
// (tests/crash) can show it catches each one. Nothing outside tests sets them; with no bug planted
// each switch costs one relaxed load on a path that already persists.
#pragma once

#include <atomic>

namespace pmhash::engine::planted {

enum Bug : unsigned {
  kNone = 0,
  // An insert publishes its slot before the item it points to is durable
  // (the fence between writing the item and the slot CAS is left out).
  kSlotBeforeItemDurable = 1u << 0,
  // A new level's ring entry is flushed but not fenced before the context
  // swap that names the level.
  kNoFenceBeforeContextSwap = 1u << 1,
  // The rehash progress index is advanced but never persisted, so recovery
  // looks for half-moved slots in the wrong bucket.
  kProgressNotPersisted = 1u << 2,
  // dali: recovery adds only the counter's epoch F to the failure list, not
  // F-1, whose global fence may not have finished.
  kDaliOnlyOneEpochFails = 1u << 3,
  // dali: an update does not record its bucket's line for the epoch's
  // fence (cache_line granularity), so the fence may leave it behind.
  kDaliBucketNotFenced = 1u << 4,
  // nehash: an insert stores its slot's meta (VALID) without draining the
  // slot words first (insert's drain #1 left out).
  kNehashMetaBeforeSlotDurable = 1u << 5,
  // nehash: a split stores the table entries without draining the new group
  // and the split record first (split drain #1 left out).
  kNehashTableBeforeGroupDurable = 1u << 6,
  // nehash: recovery ignores kSplit records (a half-done split is neither
  // finished nor undone).
  kNehashSplitNotFinished = 1u << 7,
  // nehash: a slot update's op-log record is cleared without persisting the
  // clear, so a later write of the slot can be undone by a replay.
  kNehashOpLogClearNotPersisted = 1u << 8,
  // clevel: a reader (get, insert's duplicate check, update's and remove's
  // search) answers from a slot marked PENDING, or past an item marked
  // REMOVED, without flushing and draining what it depends on first.
  kClevelReadUnpersisted = 1u << 9,
  // clevel: an insert that lost its race (or was killed) clears its intent
  // without draining the retire entry and the unpublished slots first.
  kClevelLoserClearBeforeDrain = 1u << 10,
  // (bit 11: reserved for clevel)
  // dali (strict): get() and an AlreadyExists/NotFound answer do not wait
  // for the epoch of the record they saw, so they may answer from an epoch
  // a crash then fails.
  kDaliAnswerBeforeDurable = 1u << 12,
  // nehash: get() reads a slot without waiting for its writer's lock (whose
  // holder has not drained yet), and answers NotFound without checking that
  // no writer of the key was in flight.
  kNehashReadUnpersisted = 1u << 13,
  // pmeh: get() reads a segment whose version is odd (a writer inside, its
  // stores not yet drained) and answers from it.
  kPmehReadUnpersisted = 1u << 14,
  // pmeh: the owner switching a zone from SHARED back to OWNED does not
  // wait for the direct writers announced in the zone, so its lock-free
  // writes can overlap theirs (a race, not a persist-order bug: the switch
  // stress test catches it, not the crash checker).
  kPmehHandOverSkipsWait = 1u << 20,
  // pmeh: a split's move batch marks its buckets moved without draining
  // the children's copies first (move batch drain #1 left out).
  kPmehMovedBeforeCopyDurable = 1u << 21,
  // pmeh: an insert stores its slot's meta (VALID) without draining the
  // slot words first (insert's drain #1 left out).
  kPmehMetaBeforeSlotDurable = 1u << 22,
  // pmeh: a zone fill sets the zone's bit in the new directory without
  // draining the copied entries first (the fill's drain left out).
  kPmehZoneFilledBeforeEntriesDurable = 1u << 23,
  // pmeh: a new directory's dir_array word is stored but not persisted
  // before zones fill into the directory.
  kPmehDirSlotNotPersistedBeforeFill = 1u << 24,
  // pmeh: recovery ignores split records (a split found started,
  // MOVING or completing is neither undone, resumed nor completed).
  kPmehSplitRecordIgnored = 1u << 25,
  // memory node (remote/verbs.cc): execute() fences once at the end of a
  // batch instead of before every writing verb that follows another, so a
  // node that loses power mid-batch may keep a later write without an
  // earlier one.
  kMemnodeOneFencePerBatch = 1u << 26,
  // sephash: a merge's publish batch writes the new meta first, before the
  // new MainSeg, the intent and the slots it publishes.
  kSephashMetaBeforeMainSegDurable = 1u << 27,
  // race: an insert or update CASes its slot before it writes the KV block
  // the slot names (the block's WRITE moved behind the CAS).
  kRaceSlotBeforeKvDurable = 1u << 28,
  // race: a split writes its intent (seq included) before the new subtable
  // the intent names, so a taker may roll forward onto a partial one.
  kRaceIntentBeforeNewTable = 1u << 29,
};

// The planted bugs (a mask of Bug), process-wide.
inline std::atomic<unsigned> bugs{kNone};

inline bool active(Bug b) { return (bugs.load(std::memory_order_relaxed) & b) != 0; }

}  // namespace pmhash::engine::planted
