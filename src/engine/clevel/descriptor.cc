// engine/clevel/descriptor.cc - what clevel is, for the registry and the front ends
// (pmhash/engines.h).
#include "engine/clevel/clevel.h"
#include "engine/clevel/layout.h"
#include "engine/option_values.h"
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
namespace {

// clevel's options (clevel.h has the design they tune).
constexpr OptionSpec kOptions[] = {
    {.name = "clevel.initial_level_log2", .type = OptionType::kUnsigned, .default_value = "10",
     .min = 2, .max = 30, .scope = OptionScope::kCreate,
     .doc = "buckets of a new table's first level, as a power of two: the table starts with "
            "levels of 2^n and 2^(n-1) buckets of 8 slots"},
    {.name = "clevel.rehash_threads", .type = OptionType::kUnsigned, .default_value = "1",
     .min = 1, .max = kMaxRehashThreads, .scope = OptionScope::kOpen,
     .doc = "background threads that move items during a resize (the paper uses one)"},
    {.name = "clevel.shrink_threshold", .type = OptionType::kDouble, .default_value = "0.05",
     .min = 0, .max = 0.5, .scope = OptionScope::kOpen,
     .doc = "start a shrink when items / slots falls below this; 0 disables shrinking; "
            "below 0.5"},
    {.name = "clevel.min_level_log2", .type = OptionType::kUnsigned, .default_value = "4",
     .min = 1, .max = 30, .scope = OptionScope::kCreate,
     .doc = "a shrink never leaves the first level below 2^n buckets; at most "
            "clevel.initial_level_log2"},
    {.name = "clevel.tag_filter", .type = OptionType::kBool, .default_value = "true",
     .scope = OptionScope::kOpen,
     .doc = "keep a DRAM summary of each bucket's tags (8 bytes per 64-byte bucket) so that "
            "searches skip buckets that cannot hold the key; rebuilt in the background after "
            "open; costs one atomic OR per insert"},
};

}  // namespace

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
    .options = kOptions,
    // Named "clevel.<counter>": the index fills them in Stats::properties.
    .properties = kProperties,
};

Config Config::from(const Options& o) {
  Config c;
  c.initial_level_log2 = static_cast<unsigned>(option_unsigned(o, "clevel.initial_level_log2"));
  c.rehash_threads = static_cast<unsigned>(option_unsigned(o, "clevel.rehash_threads"));
  c.shrink_threshold = option_double(o, "clevel.shrink_threshold");
  c.min_level_log2 = static_cast<unsigned>(option_unsigned(o, "clevel.min_level_log2"));
  c.tag_filter = option_bool(o, "clevel.tag_filter");
  return c;
}

}  // namespace pmhash::engine::clevel
