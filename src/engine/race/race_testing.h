// engine/race/race_testing.h - race's test hooks and planted bugs
// (docs/architecture.md, "Test hooks"). Process-wide; set while no client
// runs.
#pragma once

#include <functional>

#include "engine/planted.h"
#include "engine/race/race.h"

namespace pmhash::engine::race::testing {

// hook(step, taking_over) runs at each step of a split (SplitStep, race.h),
// by its first holder (taking_over false) or by a client that took the
// split over ("Dead splitters"; from kDirectoryUpdated on). When it returns
// true the holder stops there as if it died: it writes nothing more, leaves
// the lock, and its call returns IOError. With a hook set, steps (3) and
// (I) always run as two batches, and (5) and (6) each as two, so that every
// step falls between batches (a holder killed mid-batch leaves a prefix of
// it). nullptr removes it.
void set_split_hook(std::function<bool(SplitStep, bool)> hook);

// Planted bugs (engine/planted.h); only tests set them.
// An insert or update CASes its slot before it writes the KV block the
// slot names (the block's WRITE moved behind the CAS).
inline constexpr planted::Bug kSlotBeforeKvDurable = planted::bit(28);
// A split writes its intent (seq included) before the new subtable the
// intent names, so a taker may roll forward onto a partial one.
inline constexpr planted::Bug kIntentBeforeNewTable = planted::bit(29);

inline constexpr planted::Bug kPlantedBugs[] = {kSlotBeforeKvDurable, kIntentBeforeNewTable};

}  // namespace pmhash::engine::race::testing
