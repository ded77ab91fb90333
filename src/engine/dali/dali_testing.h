// engine/dali/dali_testing.h - dali's planted bugs (engine/planted.h;
// docs/architecture.md, "Test hooks"). Only tests set them.
#pragma once

#include "engine/planted.h"

namespace pmhash::engine::dali::testing {

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

inline constexpr planted::Bug kPlantedBugs[] = {kOnlyOneEpochFails, kBucketNotFenced,
                                                kAnswerBeforeDurable};

}  // namespace pmhash::engine::dali::testing
