// engine/dali/dali_testing.h - dali's test hooks and planted bugs
// (engine/planted.h; docs/architecture.md, "Test hooks"). Only tests set
// them; the hooks are process-wide and set while no operation runs.
#pragma once

#include <cstdint>
#include <functional>

#include "engine/planted.h"

namespace pmhash::engine::dali::testing {

// Called by every split once it has chosen the bucket it splits, `src`, of
// the table 2^level + src buckets (the keys whose hash has src as its low
// `level` bits), and made sure the segment of the new bucket exists: in the
// splitting thread, before it locks the stripe and enters an epoch, so the
// hook may write keys of src itself (and wait for durability), which the
// split must then carry over. It must not add keys (a write that adds one
// may start a split, and splits do not nest). nullptr removes it.
void set_split_hook(std::function<void(std::uint64_t src, unsigned level)> hook);

// Called by every scan once it has chosen, from the shape it read, the
// bucket it reads next (its index, and `depth`: the number of low hash bits
// that select it), before it reads the bucket's list: in the scanning
// thread, outside any epoch and holding no lock, so the hook may write keys
// and split buckets, the chosen one too (the scan must then choose again).
// It runs again at each such retry. nullptr removes it.
void set_scan_hook(std::function<void(std::uint64_t bucket, unsigned depth)> hook);

// Recovery adds only the counter's epoch F to the failure list, not F-1,
// whose global fence may not have finished.
inline constexpr planted::Bug kOnlyOneEpochFails = planted::bit(3);
// An update does not record its bucket's line for the epoch's fence
// (cache_line granularity), so the fence may leave it behind.
inline constexpr planted::Bug kBucketNotFenced = planted::bit(4);
// (strict) get() and an AlreadyExists/NotFound answer do not wait for the
// epoch of the record they saw, so they may answer from an epoch a crash
// then fails.
inline constexpr planted::Bug kAnswerBeforeDurable = planted::bit(12);

// (strict) A write group's end does not wait for the epochs its writes
// deferred to it, so a server replies before they are durable.
inline constexpr planted::Bug kWriteGroupEndsEarly = planted::bit(30);

inline constexpr planted::Bug kPlantedBugs[] = {kOnlyOneEpochFails, kBucketNotFenced,
                                                kAnswerBeforeDurable, kWriteGroupEndsEarly};

}  // namespace pmhash::engine::dali::testing
