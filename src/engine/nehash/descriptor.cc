// engine/nehash/descriptor.cc - what nehash is, for the registry and the front ends
// (pmhash/engines.h).
#include "pmhash/engines.h"

namespace pmhash::engine::nehash {

// registry.cc declares it.
extern const EngineDescriptor kDescriptor;
const EngineDescriptor kDescriptor = {
    .name = "nehash",
    .summary = "extendible hashing with a two-level directory; open time independent of the key count",
    .paper = "NEHASH (FITEE'23)",
    .location = Location::kPoolFile,
    .capabilities =
        {
            .strict = true,
            .epoch = false,
            .transactions = false,
            .snapshot_reads = false,
            .shrink = false,
            .background_threads = false,
        },
    // Named "nehash.<option>": Options::set takes them; the store checks them.
    .options = {},
    // Named "nehash.<counter>": the index fills them in Stats::properties.
    .properties = {},
};

}  // namespace pmhash::engine::nehash
