// engine/pmeh/pmeh_testing.h - pmeh's test hook and planted bugs
// (engine/planted.h; docs/architecture.md, "Test hooks"). Only tests set them.
#pragma once

#include <cstdint>
#include <functional>

#include "engine/planted.h"

namespace pmhash::engine::pmeh::testing {

// Called by every caller-side (optimistic) segment copy of for_each,
// salvage and scan (pmeh.h, "Scan") once it has found the segment covering
// x in the directory and before it loads the segment's version, with x,
// inside the copy's read section (tests complete a split there; a write
// that frees retired SplitStates would wait for the section). nullptr
// removes it. Set while no operation runs.
void set_segment_copy_hook(std::function<void(std::uint64_t x)> hook);

// get() reads a segment whose version is odd (a writer inside, its stores
// not yet drained) and answers from it.
inline constexpr planted::Bug kReadUnpersisted = planted::bit(14);
// The owner switching a zone from SHARED back to OWNED does not wait for
// the direct writers announced in the zone, so its lock-free writes can
// overlap theirs (a race, not a persist-order bug: the switch stress test
// catches it, not the crash checker).
inline constexpr planted::Bug kHandOverSkipsWait = planted::bit(20);
// A split's move batch marks its buckets moved without draining the
// children's copies first (move batch drain #1 left out).
inline constexpr planted::Bug kMovedBeforeCopyDurable = planted::bit(21);
// An insert stores its slot's meta (VALID) without draining the slot words
// first (insert's drain #1 left out).
inline constexpr planted::Bug kMetaBeforeSlotDurable = planted::bit(22);
// A zone fill sets the zone's bit in the new directory without draining
// the copied entries first (the fill's drain left out).
inline constexpr planted::Bug kZoneFilledBeforeEntriesDurable = planted::bit(23);
// A new directory's dir_array word is stored but not persisted before
// zones fill into the directory.
inline constexpr planted::Bug kDirSlotNotPersistedBeforeFill = planted::bit(24);
// Recovery ignores split records (a split found started, MOVING or
// completing is neither undone, resumed nor completed).
inline constexpr planted::Bug kSplitRecordIgnored = planted::bit(25);

inline constexpr planted::Bug kPlantedBugs[] = {
    kReadUnpersisted, kHandOverSkipsWait, kMovedBeforeCopyDurable, kMetaBeforeSlotDurable,
    kZoneFilledBeforeEntriesDurable, kDirSlotNotPersistedBeforeFill, kSplitRecordIgnored};

}  // namespace pmhash::engine::pmeh::testing
