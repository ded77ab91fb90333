// engine/clevel/descriptor.cc - what clevel is, for the registry and the front ends
// (pmhash/engines.h).
#include "pmhash/engines.h"

namespace pmhash::engine::clevel {

// registry.cc declares it.
extern const EngineDescriptor kDescriptor;
const EngineDescriptor kDescriptor = {
    .name = "clevel",
    .summary = "a lock-free multi-level table; readers never wait, a background thread rehashes and the table shrinks as keys go",
    .paper = "clevel hashing (Chen et al., USENIX ATC'20)",
    .location = Location::kPoolFile,
    .capabilities =
        {
            .strict = true,
            .epoch = false,
            .transactions = false,
            .snapshot_reads = false,
            .shrink = true,
            .background_threads = true,
        },
    // Named "clevel.<option>": Options::set takes them; the store checks them.
    .options = {},
    // Named "clevel.<counter>": the index fills them in Stats::properties.
    .properties = {},
};

}  // namespace pmhash::engine::clevel
