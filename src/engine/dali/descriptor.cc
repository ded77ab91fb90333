// engine/dali/descriptor.cc - what dali is, for the registry and the front ends
// (pmhash/engines.h).
#include "pmhash/engines.h"

namespace pmhash::engine::dali {

// registry.cc declares it.
extern const EngineDescriptor kDescriptor;
const EngineDescriptor kDescriptor = {
    .name = "dali",
    .summary = "buckets of prepend-only lists persisted by epochs: no flush inside an operation, multi-key transactions",
    .paper = "Dali (Nawab et al., DISC'17)",
    .location = Location::kPoolFile,
    .capabilities =
        {
            .strict = true,
            .epoch = true,
            .transactions = true,
            .snapshot_reads = true,
            .shrink = false,
            .background_threads = true,
        },
    // Named "dali.<option>": Options::set takes them; the store checks them.
    .options = {},
    // Named "dali.<counter>": the index fills them in Stats::properties.
    .properties = {},
};

}  // namespace pmhash::engine::dali
