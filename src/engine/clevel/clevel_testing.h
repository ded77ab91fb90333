// engine/clevel/clevel_testing.h - clevel's test hooks and planted bugs
// (engine/planted.h; docs/architecture.md, "Test hooks"). Only tests set
// them, while no operation runs.
#pragma once

#include <functional>
#include <string_view>

#include "engine/planted.h"

namespace pmhash::engine::clevel::testing {

// Where a rehash thread stands in moving the items of one bucket
// (move_bucket; clevel.h, "rehash").
enum class MoveStep {
  // The item's slot is frozen (MOVING); its copy is not made yet.
  kFrozen,
  // The copy is durable and the source slot is moved out (MOVING alone);
  // its clearing is not durable yet.
  kMovedOut,
};
// Called by a rehash thread at each step, for each item of the bucket it
// moves, with the item's key; nullptr removes it. The thread is inside a
// read-side section and holds the rehash threads' pause lock: a test that
// parks it there must not wait for a grace period or call check() or
// close() before it lets it go.
void set_move_hook(std::function<void(MoveStep step, std::string_view key)> hook);
// Called by a writer (update, delete, compare_and_swap, an insert that
// takes its pointers back) each time it finds a slot of its item held by a
// rehash thread (frozen, or moved out) and waits for it; nullptr removes it.
void set_writer_wait_hook(std::function<void()> hook);

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
