// engine/sephash/sephash_testing.h - sephash's test hooks and planted bugs
// (docs/architecture.md, "Test hooks"). Process-wide; set while no client
// runs. nullptr removes a hook.
#pragma once

#include <cstdint>
#include <functional>

#include "engine/planted.h"
#include "engine/sephash/sephash.h"

namespace pmhash::engine::sephash::testing {

// Called in an append between its first round trip (meta and slots read)
// and its second (the slot CAS), on the appending thread.
void set_append_hook(std::function<void()> hook);

// Called at each LockStep (sephash.h) of a merge or split, on the holder's
// thread. A hook that returns true makes the holder stop at that step as if
// it died there (it writes nothing more and leaves the lock; its call
// returns IOError). With a hook set, the merge's publish runs as three
// batches and the split's last as two, so that kMergeIntent, kMergeSlots
// and kSplitSlots fall between batches (a holder killed mid-batch leaves a
// prefix of it applied).
void set_lock_hook(std::function<bool(LockStep)> hook);

// Called, on the client's thread, for every block any client of the
// process takes or frees (BlockUse, sephash.h; its node, offset and length
// in bytes; a block is freed with the length it was taken with). Blocks
// that go on or come off a stack as a record's entries are free all along;
// blocks given up (leaked) are never freed.
void set_block_hook(
    std::function<void(BlockUse, unsigned node, std::uint64_t off, std::uint64_t bytes)> hook);

// Planted bugs (engine/planted.h); only tests set them.
// A merge's publish batch writes the new meta first, before the new
// MainSeg, the intent and the slots it publishes.
inline constexpr planted::Bug kMetaBeforeMainSegDurable = planted::bit(27);

inline constexpr planted::Bug kPlantedBugs[] = {kMetaBeforeMainSegDurable};

}  // namespace pmhash::engine::sephash::testing
