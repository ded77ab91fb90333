// store/store_testing.h - test-only access to what a Store hides: the mapped
// region of its pool, so that the crash simulator (tests/crash) can observe
// every flush and fence the engine issues. Not part of the public API.
#pragma once

#include "media/region.h"
#include "pmhash/store.h"

namespace pmhash::store_testing {

// The region of an open store's pool (file-backed or anonymous).
media::Region& region(Store& store);

}  // namespace pmhash::store_testing
