// engine/nehash/descriptor.cc - what nehash is, for the registry and the front ends
// (pmhash/engines.h).
#include "engine/nehash/layout.h"
#include "engine/nehash/nehash.h"
#include "engine/option_values.h"
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
namespace {

// nehash's options (nehash.h has the design they tune).
constexpr OptionSpec kOptions[] = {
    {.name = "nehash.bucket_bits", .type = OptionType::kUnsigned, .default_value = "6",
     .min = kMinBucketBits, .max = kMaxBucketBits, .scope = OptionScope::kCreate,
     .doc = "bucket-directory bits b: a bucket group holds 2^b buckets of 16 slots and one "
            "conflict bucket"},
    {.name = "nehash.initial_dir_bits", .type = OptionType::kUnsigned, .default_value = "4",
     .min = 0, .max = kMaxInitialDirBits, .scope = OptionScope::kCreate,
     .doc = "main-directory bits of a new index: the directory starts with 2^n entries and "
            "never has fewer after an open"},
    {.name = "nehash.split_shallow_on_open", .type = OptionType::kBool, .default_value = "false",
     .scope = OptionScope::kOpen,
     .doc = "after open, a background thread splits every group the rebuild attached to several "
            "main entries until each entry has its own group (the paper's Step 6); the store "
            "serves meanwhile and close stops it after the split in progress; each split costs "
            "a group of 2^b * 256 bytes"},
};

}  // namespace

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
    .options = kOptions,
    // Named "nehash.<counter>": the index fills them in Stats::properties.
    .properties = kProperties,
};

Config Config::from(const Options& o) {
  Config c;
  c.bucket_bits = static_cast<unsigned>(option_unsigned(o, "nehash.bucket_bits"));
  c.initial_dir_bits = static_cast<unsigned>(option_unsigned(o, "nehash.initial_dir_bits"));
  c.split_shallow_on_open = option_bool(o, "nehash.split_shallow_on_open");
  return c;
}

}  // namespace pmhash::engine::nehash
