// engine/clevel/clevel_testing.h - clevel's planted bugs (engine/planted.h;
// docs/architecture.md, "Test hooks"). Only tests set them.
#pragma once

#include "engine/planted.h"

namespace pmhash::engine::clevel::testing {

// An insert publishes its slot before the item it points to is durable
// (the fence between writing the item and the slot CAS is left out).
inline constexpr planted::Bug kSlotBeforeItemDurable = planted::bit(0);
// A new level's ring entry is flushed but not fenced before the context
// swap that names the level.
inline constexpr planted::Bug kNoFenceBeforeContextSwap = planted::bit(1);
// The rehash progress index is advanced but never persisted, so recovery
// looks for half-moved slots in the wrong bucket.
inline constexpr planted::Bug kProgressNotPersisted = planted::bit(2);
// A reader (get, insert's duplicate check, update's and remove's search)
// answers from a slot marked PENDING, or past an item marked REMOVED,
// without flushing and draining what it depends on first.
inline constexpr planted::Bug kReadUnpersisted = planted::bit(9);
// An insert that lost its race (or was killed) clears its intent without
// draining the retire entry and the unpublished slots first.
inline constexpr planted::Bug kLoserClearBeforeDrain = planted::bit(10);
// (bit 11: reserved for clevel)

inline constexpr planted::Bug kPlantedBugs[] = {kSlotBeforeItemDurable, kNoFenceBeforeContextSwap,
                                                kProgressNotPersisted, kReadUnpersisted,
                                                kLoserClearBeforeDrain};

}  // namespace pmhash::engine::clevel::testing
