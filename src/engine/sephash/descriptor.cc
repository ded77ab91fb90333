// engine/sephash/descriptor.cc - what sephash is, for the registry and the front ends
// (pmhash/engines.h).
#include "pmhash/engines.h"

namespace pmhash::engine::sephash {

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
    .properties = {},
};

}  // namespace pmhash::engine::sephash
