// engine/nehash/descriptor.cc - what nehash is, for the registry and the front ends
// (pmhash/engines.h).
#include <cmath>

#include "engine/nehash/layout.h"
#include "engine/nehash/nehash.h"
#include "engine/option_values.h"
#include "heap/heap.h"
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

// The workloads of the paper's evaluation (Cai et al., FITEE 2023, §6):
// reads of stored keys and inserts of new keys (which make the index grow),
// uniform keys; the paper runs them with 8-byte keys and values.
constexpr PaperWorkload kWorkloads[] = {
    {.name = "nehash-a", .doc = "the NEHASH paper's workload a", .read = 50, .insert = 50},
    {.name = "nehash-b", .doc = "the NEHASH paper's workload b", .read = 95, .insert = 5},
    {.name = "nehash-g", .doc = "the NEHASH paper's workload g", .read = 5, .insert = 95},
};

// Pool bytes per key of the bucket groups, an estimate with a margin. A key
// has one home slot, and a group splits once its single conflict bucket is
// full: by the birthday bound after about sqrt(16 x slots) keys for its
// kSlotsPerBucket x (2^b + 1) slots. Groups hold about half of that many
// keys (they split at random times), so a key costs the group's bytes over
// half of sqrt(16 x slots), about 1.7 times what loads of uniform keys use
// for every b. The heap gives a group larger than its largest small block
// whole chunks (b >= 8).
double group_bytes_per_key(unsigned b) {
  double bytes = static_cast<double>(group_bytes(b));
  constexpr auto kChunk = static_cast<double>(heap::kChunkSize);
  if (bytes > static_cast<double>(heap::kMaxSmallSize)) {
    bytes = std::ceil(bytes / kChunk) * kChunk;
  }
  const double slots = static_cast<double>(kSlotsPerBucket * buckets_per_group(b));
  const double keys = std::sqrt(16 * slots) / 2;
  return bytes / keys;
}

// EngineDescriptor::pool_bytes: what every engine needs per key (the item,
// slack), plus the groups.
std::uint64_t pool_bytes(const PoolDemand& demand, const Options& options) {
  const auto b = static_cast<unsigned>(option_unsigned(options, "nehash.bucket_bits"));
  const auto per_key = static_cast<std::uint64_t>(group_bytes_per_key(b));
  return generic_pool_bytes(demand) + demand.keys * per_key;
}

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
    .workloads = kWorkloads,
    .pool_bytes = pool_bytes,
};

Config Config::from(const Options& o) {
  Config c;
  c.bucket_bits = static_cast<unsigned>(option_unsigned(o, "nehash.bucket_bits"));
  c.initial_dir_bits = static_cast<unsigned>(option_unsigned(o, "nehash.initial_dir_bits"));
  c.split_shallow_on_open = option_bool(o, "nehash.split_shallow_on_open");
  return c;
}

}  // namespace pmhash::engine::nehash
