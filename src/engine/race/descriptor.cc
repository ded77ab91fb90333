// engine/race/descriptor.cc - what race is, for the registry and the front ends
// (pmhash/engines.h).
#include "engine/remote_common/properties.h"
#include "pmhash/engines.h"

namespace pmhash::engine::race {

// Stats::properties, in this order (RaceIndex::fill_stats): the counters
// every memory-node engine keeps, then race's own.
constexpr auto kProperties = remote_index::with_remote_counters<"race">({
    PropertySpec{"race.splits", "subtable splits, since open"},
    PropertySpec{"race.items_moved", "slots subtable splits moved to the new subtable, since open"},
    PropertySpec{"race.split_bytes",
                 "bytes subtable splits wrote, since open: the new subtable, the intent, the old "
                 "subtable's headers and slots, directory words"},
    PropertySpec{"race.read_retries",
                 "reads done again, since open: views a split tore, waits for a thaw, strays taken "
                 "back, KV blocks read again after a bad checksum"},
    PropertySpec{"race.lock_takeovers",
                 "subtable split locks taken over from a holder past its lease, since open"},
});

// registry.cc declares it.
extern const EngineDescriptor kDescriptor;
const EngineDescriptor kDescriptor = {
    .name = "race",
    .summary = "the RACE-hashing baseline of sephash, on the same memory nodes",
    .paper = "RACE hashing (Zuo et al., USENIX ATC'21)",
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
    // Named "race.<option>": Options::set takes them; the store checks them.
    .options = {},
    // Named "race.<counter>": the index fills them in Stats::properties.
    .properties = kProperties,
};

}  // namespace pmhash::engine::race
