// engine/clevel/descriptor.cc - what clevel is, for the registry and the front ends
// (pmhash/engines.h).
#include "pmhash/engines.h"

namespace pmhash::engine::clevel {

// Stats::properties, in this order (ClevelIndex::fill_stats).
constexpr PropertySpec kProperties[] = {
    {"clevel.levels", "levels in the level list now (two, three while a resize runs)",
     PropertyKind::kNow},
    {"clevel.expansions", "resizes that added a larger level, since open"},
    {"clevel.shrinks", "resizes that added a smaller level, since open"},
    {"clevel.items_moved", "items resizes moved out of the level being emptied, since open"},
    {"clevel.filter_rejections",
     "bucket searches a tag filter spared, since open (approximate: striped, relaxed counts)"},
};

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
    .properties = kProperties,
};

}  // namespace pmhash::engine::clevel
