// engine/race/descriptor.cc - what race is, for the registry and the front ends
// (pmhash/engines.h).
#include "pmhash/engines.h"

namespace pmhash::engine::race {

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
    .properties = {},
};

}  // namespace pmhash::engine::race
