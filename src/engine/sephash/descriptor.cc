// engine/sephash/descriptor.cc - what sephash is, for the registry and the front ends
// (pmhash/engines.h).
#include "engine/remote_common/properties.h"
#include "pmhash/engines.h"

namespace pmhash::engine::sephash {

// Stats::properties, in this order (SepHashIndex::fill_stats): the
// counters every memory-node engine keeps, then sephash's own.
constexpr auto kProperties = remote_index::with_remote_counters<"sephash">({
    PropertySpec{"sephash.merges", "CurSeg merges into a MainSeg, since open"},
    PropertySpec{"sephash.splits", "segment splits, since open"},
    PropertySpec{"sephash.split_bytes", "bytes segment splits wrote, since open"},
    PropertySpec{"sephash.append_retries",
                 "appends made again because the segment changed under them, since open"},
    PropertySpec{"sephash.blocks_freed",
                 "blocks (items, MainSegs) merges and splits freed, since open"},
    PropertySpec{"sephash.bytes_freed", "bytes of the blocks merges and splits freed, since open"},
    PropertySpec{"sephash.blocks_reused",
                 "blocks allocations took from freed ones (this store's, or ones another client "
                 "handed back when it closed) instead of new space, since open"},
    PropertySpec{"sephash.bytes_reused", "bytes of the reused blocks, since open"},
    PropertySpec{"sephash.bytes_bumped",
                 "bytes taken from the nodes' bump words (new space), since open"},
    PropertySpec{"sephash.bytes_leaked",
                 "bytes of blocks given up because a batch failed without saying whether it ran "
                 "(a lost reply, a dead node), since open; never reused by anyone (an upper "
                 "bound: some may have reached another client). Space a bump FAA whose reply was "
                 "lost took is not counted"},
    PropertySpec{"sephash.lock_takeovers",
                 "segment locks taken over from a holder past its lease, since open"},
});

// registry.cc declares it.
extern const EngineDescriptor kDescriptor;
const EngineDescriptor kDescriptor = {
    .name = "sephash",
    .summary = "an index on memory nodes reached by one-sided verbs: many clients on many hosts share it",
    .paper = "SepHash (PVLDB'24)",
    .location = Location::kMemoryNodes,
    .capabilities =
        {
            .strict = true,
            .epoch = false,
            .transactions = false,
            .snapshot_reads = false,
            .shrink = false,
            .background_threads = false,
        },
    // Named "sephash.<option>": Options::set takes them; the store checks them.
    .options = {},
    // Named "sephash.<counter>": the index fills them in Stats::properties.
    .properties = kProperties,
};

}  // namespace pmhash::engine::sephash
