// store/store_testing.h - test-only access to what a Store hides: the mapped
// region of its pool, so that the crash simulator (tests/crash) can observe
// every flush and fence the engine issues, and the epoch operations run in,
// so that the crash checker knows which acknowledged operations an epoch
// engine has promised. Not part of the public API.
#pragma once

#include "media/region.h"
#include "pmhash/store.h"

namespace pmhash::store::testing {

// The region of an open store's pool (file-backed or anonymous).
media::Region& region(Store& store);

// The epoch operations of an epoch engine run in now; 0 for engines
// that persist every write before it returns. Cheap (one atomic load).
std::uint64_t epoch(const Store& store);

}  // namespace pmhash::store::testing
