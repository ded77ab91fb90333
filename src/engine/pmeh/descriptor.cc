// engine/pmeh/descriptor.cc - what pmeh is, for the registry and the front ends
// (pmhash/engines.h).
#include "pmhash/engines.h"

namespace pmhash::engine::pmeh {

// Stats::properties, in this order (PmehIndex::fill_stats).
constexpr PropertySpec kProperties[] = {
    {"pmeh.directories", "directories installed now (each twice the size of the one before)",
     PropertyKind::kNow},
    {"pmeh.directory_installs", "directories installed, since open"},
    {"pmeh.segments", "live segments now", PropertyKind::kNow},
    {"pmeh.splits", "segment splits, since open"},
    {"pmeh.items_moved", "slots segment splits moved, since open (items stay put)"},
    {"pmeh.bytes_moved",
     "bytes segment splits copied, since open: a 16-byte slot and its 2-byte meta per moved slot"},
    {"pmeh.delegated_ops", "operations a zone's owner thread ran on a caller's behalf, since open"},
    {"pmeh.read_retries", "optimistic reads that failed validation and ran again, since open"},
    {"pmeh.eager_split_completions",
     "splits completed early because another split was needed first (a second split in the "
     "zone, a child's window full), since open"},
    {"pmeh.zone_switches", "zone mode switches, OWNED to SHARED or back, since open"},
    {"pmeh.shared_zones", "zones in SHARED mode now", PropertyKind::kNow},
    {"pmeh.direct_ops", "writes callers ran themselves in SHARED zones, since open"},
};

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
    .properties = kProperties,
};

}  // namespace pmhash::engine::pmeh
