// engine/nehash/descriptor.cc - what nehash is, for the registry and the front ends
// (pmhash/engines.h).
#include "pmhash/engines.h"

namespace pmhash::engine::nehash {

// Stats::properties, in this order (NehashIndex::fill_stats).
constexpr PropertySpec kProperties[] = {
    {"nehash.groups", "bucket groups now", PropertyKind::kNow},
    {"nehash.depth", "deepest directory level in use now (1 to 3)", PropertyKind::kNow},
    {"nehash.splits", "group splits, since open"},
    {"nehash.one_time_nodes", "one-time expansion nodes installed, since open"},
    {"nehash.two_time_nodes",
     "two-time expansion nodes installed (Rule 1 and Rule 2 together), since open"},
    {"nehash.rule1_nodes", "two-time expansion nodes of four entries (Rule 1), since open"},
    {"nehash.rule2_nodes", "two-time expansion nodes of two entries (Rule 2), since open"},
    {"nehash.full_expansions", "full main-directory expansions, since open"},
    {"nehash.items_moved", "slots group splits moved, since open (items stay put)"},
    {"nehash.bytes_moved",
     "bytes group splits copied, since open: a 16-byte slot and its 2-byte meta per moved slot"},
};

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
    .properties = kProperties,
};

}  // namespace pmhash::engine::nehash
