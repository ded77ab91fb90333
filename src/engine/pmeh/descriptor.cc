// engine/pmeh/descriptor.cc - what pmeh is, for the registry and the front ends
// (pmhash/engines.h).
#include "pmhash/engines.h"

namespace pmhash::engine::pmeh {

// registry.cc declares it.
extern const EngineDescriptor kDescriptor;
const EngineDescriptor kDescriptor = {
    .name = "pmeh",
    .summary = "extendible hashing with zones written by owner threads or, when hot, directly under segment locks",
    .paper = "PMEH (ICPP'21)",
    .location = Location::kPoolFile,
    .capabilities =
        {
            .strict = true,
            .epoch = false,
            .transactions = false,
            .snapshot_reads = false,
            .shrink = false,
            .background_threads = true,
        },
    // Named "pmeh.<option>": Options::set takes them; the store checks them.
    .options = {},
    // Named "pmeh.<counter>": the index fills them in Stats::properties.
    .properties = {},
};

}  // namespace pmhash::engine::pmeh
