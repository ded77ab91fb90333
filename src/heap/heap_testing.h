// heap/heap_testing.h - hooks for the heap's own tests; not for engines.
#pragma once

#include <memory>

#include "heap/heap.h"
#include "pmhash/status.h"

namespace pmhash::heap::testing {

// Destroys `heap` the way a crash would: nothing is drained, freed, released
// or written to the pool. Its logs keep their intents and retired entries,
// the slabs their bits, for the next Heap::open and recover() to find.
// No thread may use the heap concurrently or afterwards.
void abandon(std::unique_ptr<Heap> heap);

// Checks the volatile state against the pool: used_bytes() and free_bytes()
// against the bitmaps and the chunk table, and the free-chunk set against the
// table. Quiescent heaps only. Corruption naming the first mismatch.
Status check_accounting(const Heap& heap);

}  // namespace pmhash::heap::testing
