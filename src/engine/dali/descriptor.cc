// engine/dali/descriptor.cc - what dali is, for the registry and the front ends
// (pmhash/engines.h).
#include "pmhash/engines.h"

namespace pmhash::engine::dali {

// Stats::properties, in this order (DaliIndex::fill_stats).
constexpr PropertySpec kProperties[] = {
    {"dali.level", "the table's level: it has 2^level + (buckets split this round) buckets",
     PropertyKind::kNow},
    {"dali.splits", "buckets split (linear-hashing growth), since open"},
    {"dali.records_copied", "records bucket splits copied into the two new lists, since open"},
    {"dali.epoch_fences", "global fences that closed an epoch, since open"},
};

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
    .properties = kProperties,
};

}  // namespace pmhash::engine::dali
