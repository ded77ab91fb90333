// engine/nehash/nehash_testing.h - nehash's test hooks and planted bugs
// (docs/architecture.md, "Test hooks"). Process-wide; set while no
// operation runs.
#pragma once

#include <cstdint>
#include <functional>

#include "engine/planted.h"

namespace pmhash::engine::nehash::testing {

// Replaces the clock of the expansion-rate algorithm (nanoseconds, §2.6);
// nullptr restores std::chrono::steady_clock.
using ClockFn = std::int64_t (*)();
void set_clock(ClockFn fn);

// Replaces the main-node bound (Directory::max_main_bits); 0 restores the
// default. For tests that drive a group to overflow blocks.
void set_max_main_bits(unsigned bits);

// Called at step 9 of every split, after the directory action, while the
// group is still SPLITTING (tests park a split there); nullptr removes it.
void set_split_hook(std::function<void()> hook);

// The split steps a test can park at besides step 9 (set_split_hook).
enum class SplitStep {
  kCopied,         // after step 8: committed, g1 holds the upper half but
                   // nothing names it; g still covers both halves
  kBucketCleaned,  // step 10, after each bucket whose stale slots it cleared
};
// Called at those steps of every split (the group still SPLITTING);
// nullptr removes it.
void set_split_step_hook(std::function<void(SplitStep)> hook);

// Called by every range copy of for_each, salvage and scan (nehash.h,
// "Scan") after its first load of the group's depth and before it reads a
// slot, with the position x the range is copied from, inside the copy's
// read guard (tests run a split to its end there); nullptr removes it.
void set_range_copy_hook(std::function<void(std::uint64_t x)> hook);

// Planted bugs (engine/planted.h); only tests set them.
// An insert stores its slot's meta (VALID) without draining the slot words
// first (insert's drain #1 left out).
inline constexpr planted::Bug kMetaBeforeSlotDurable = planted::bit(5);
// A split stores the table entries without draining the new group and the
// split record first (split drain #1 left out).
inline constexpr planted::Bug kTableBeforeGroupDurable = planted::bit(6);
// Recovery ignores kSplit records (a half-done split is neither finished
// nor undone).
inline constexpr planted::Bug kSplitNotFinished = planted::bit(7);
// A slot update's op-log record is cleared without persisting the clear,
// so a later write of the slot can be undone by a replay.
inline constexpr planted::Bug kOpLogClearNotPersisted = planted::bit(8);
// get() reads a slot without waiting for its writer's lock (whose holder
// has not drained yet), and answers NotFound without checking that no
// writer of the key was in flight.
inline constexpr planted::Bug kReadUnpersisted = planted::bit(13);

inline constexpr planted::Bug kPlantedBugs[] = {kMetaBeforeSlotDurable, kTableBeforeGroupDurable,
                                                kSplitNotFinished, kOpLogClearNotPersisted,
                                                kReadUnpersisted};

}  // namespace pmhash::engine::nehash::testing
