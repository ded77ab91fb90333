// engine/pmeh/descriptor.cc - what pmeh is, for the registry and the front ends
// (pmhash/engines.h).
#include <optional>
#include <string>

#include "engine/option_values.h"
#include "engine/pmeh/layout.h"
#include "engine/pmeh/pmeh.h"
#include "engine/pmeh/pmeh_index.h"
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
namespace {

// pmeh's options (pmeh.h has the design they tune).
constexpr OptionSpec kOptions[] = {
    {.name = "pmeh.zone_bits", .type = OptionType::kUnsigned, .default_value = "6", .min = 0,
     .max = kMaxZoneBits, .scope = OptionScope::kCreate,
     .doc = "zone bits Z: the hash space is cut into 2^Z zones by the top Z bits of the hash, "
            "each written by one owner thread"},
    {.name = "pmeh.segment_kib", .type = OptionType::kUnsigned, .default_value = "16",
     .min = 4, .max = 64, .allowed = "4,8,16,32,64", .scope = OptionScope::kCreate,
     .doc = "segment size in KiB"},
    {.name = "pmeh.workers", .type = OptionType::kUnsigned, .default_value = "0", .min = 0,
     .max = kMaxWorkers, .scope = OptionScope::kOpen,
     .doc = "owner threads that run every write; 0 = one per two hardware threads (at least "
            "one)"},
    {.name = "pmeh.split_bits", .type = OptionType::kUnsigned, .default_value = "1", .min = 1,
     .max = kMaxSplitBits, .scope = OptionScope::kOpen,
     .doc = "a full segment splits into 2^k segments"},
    {.name = "pmeh.split_step", .type = OptionType::kUnsigned, .default_value = "4", .min = 0,
     .max = 255, .scope = OptionScope::kOpen,
     .doc = "buckets a split moves per write in its zone; 0 = the whole split at once"},
    {.name = "pmeh.idle_steps", .type = OptionType::kBool, .default_value = "true",
     .scope = OptionScope::kOpen,
     .doc = "owners with nothing to do move a step of their zones' splits (off: only "
            "operations move buckets)"},
    {.name = "pmeh.opportunistic", .type = OptionType::kBool, .default_value = "true",
     .scope = OptionScope::kOpen,
     .doc = "hot zones switch to per-segment locks so that any thread writes them; off: no zone "
            "switches by itself (write mode 0 then always delegates)"},
    {.name = "pmeh.write_mode", .type = OptionType::kUnsigned, .default_value = "0", .min = 0,
     .max = kWriteDirect, .scope = OptionScope::kOpen,
     .doc = "how writes reach a zone: 0 = chosen by the store, 1 = delegated to the zone's "
            "owner, 2 = direct under per-segment locks (pmeh.h, \"Write mode\")"},
    {.name = "pmeh.delegate_reads", .type = OptionType::kBool, .default_value = "false",
     .scope = OptionScope::kOpen,
     .doc = "reads go to the zone's owner too (to measure against optimistic reads)"},
};

// EngineDescriptor::pool_bytes. Segments hold 14 slots of 18 bytes (slot
// and meta) per 256-byte bucket, about 40 % full right after a split into
// 2^k and never emptier in a load, which the generic estimate covers (about
// 45 bytes a key at 8-byte keys and values, besides the item). On top: a
// split in flight keeps its parent and its 2^k children, in each of the at
// most 2^kMaxZoneBits zones at once. An option not set counts at its
// largest (segments of 2^kMaxSegmentLog2 bytes, k = kMaxSplitBits), so
// that the pool suffices whatever a later open chooses.
std::uint64_t pool_bytes(const PoolDemand& demand, const Options& options) {
  const std::optional<std::string> kib = options.get("pmeh.segment_kib");
  const std::optional<std::string> bits = options.get("pmeh.split_bits");
  const std::uint64_t segment = kib ? option_unsigned(options, "pmeh.segment_kib") << 10
                                    : std::uint64_t{1} << kMaxSegmentLog2;
  const std::uint64_t k = bits ? option_unsigned(options, "pmeh.split_bits") : kMaxSplitBits;
  constexpr std::uint64_t kZones = std::uint64_t{1} << kMaxZoneBits;
  return generic_pool_bytes(demand) + kZones * segment * (1 + (std::uint64_t{1} << k));
}

}  // namespace

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
    .options = kOptions,
    // Named "pmeh.<counter>": the index fills them in Stats::properties.
    .properties = kProperties,
    .pool_bytes = pool_bytes,
};

Config Config::from(const Options& o) {
  Config c;
  c.zone_bits = static_cast<unsigned>(option_unsigned(o, "pmeh.zone_bits"));
  c.segment_kib = static_cast<unsigned>(option_unsigned(o, "pmeh.segment_kib"));
  c.workers = static_cast<unsigned>(option_unsigned(o, "pmeh.workers"));
  c.split_bits = static_cast<unsigned>(option_unsigned(o, "pmeh.split_bits"));
  c.split_step = static_cast<unsigned>(option_unsigned(o, "pmeh.split_step"));
  c.idle_steps = option_bool(o, "pmeh.idle_steps");
  c.opportunistic = option_bool(o, "pmeh.opportunistic");
  c.write_mode = static_cast<unsigned>(option_unsigned(o, "pmeh.write_mode"));
  c.delegate_reads = option_bool(o, "pmeh.delegate_reads");
  return c;
}

}  // namespace pmhash::engine::pmeh
