// engine/race/descriptor.cc - what race is, for the registry and the front ends
// (pmhash/engines.h).
#include "engine/option_values.h"
#include "engine/race/race.h"
#include "engine/remote_common/properties.h"
#include "pmhash/engines.h"

namespace pmhash::engine::race {

// Stats::properties, in this order (RaceIndex::fill_stats): the counters
// every memory-node engine keeps, then race's own.
constexpr auto kProperties = remote_index::with_remote_counters<"race">({
    PropertySpec{"race.splits", "subtable splits, since open"},
    PropertySpec{"race.items_moved", "slots subtable splits moved to the new subtable, since open"},
    PropertySpec{"race.split_bytes",
                 "bytes subtable splits wrote, since open: the new subtable, the intent, the old "
                 "subtable's headers and slots, directory words"},
    PropertySpec{"race.read_retries",
                 "reads done again, since open: views a split tore, waits for a thaw, strays taken "
                 "back, KV blocks read again after a bad checksum"},
    PropertySpec{"race.lock_takeovers",
                 "subtable split locks taken over from a holder past its lease, since open"},
});

// registry.cc declares it.
extern const EngineDescriptor kDescriptor;
namespace {

// race's options. It shares the memory nodes, the remote timeout and the
// injected latency with sephash as common options (Options::memnodes,
// remote_timeout_ms, remote_latency_ns); its lease is twice the remote
// timeout of its create (race.h, "Lease").
constexpr OptionSpec kOptions[] = {
    {.name = "race.initial_depth", .type = OptionType::kUnsigned, .default_value = "4", .min = 1,
     .max = 12, .scope = OptionScope::kCreate,
     .doc = "local depth of a new index's subtables: 2^n subtables to start with"},
    {.name = "race.max_depth", .type = OptionType::kUnsigned, .default_value = "16", .min = 1,
     .max = kMaxDepth, .scope = OptionScope::kCreate,
     .doc = "the deepest a subtable may split to; the directory has 2^n entries; at least "
            "race.initial_depth"},
    {.name = "race.groups", .type = OptionType::kUnsigned, .default_value = "256",
     .min = kMinGroups, .max = kMaxGroups, .scope = OptionScope::kCreate,
     .doc = "bucket groups (3 buckets of 64 bytes, 21 entry slots) per subtable: 256 is 48 KiB "
            "and 5376 slots"},
};

}  // namespace

const EngineDescriptor kDescriptor = {
    .name = "race",
    .summary = "the RACE-hashing baseline of sephash, on the same memory nodes",
    .paper = "RACE hashing (Zuo et al., USENIX ATC'21)",
    .location = Location::kMemoryNodes,
    .capabilities =
        {
            .strict = true,
            .epoch = false,
            .transactions = false,
            .snapshot_reads = false,
            .shrink = false,
            .background_threads = false,
        },
    // Named "race.<option>": Options::set takes them; the store checks them.
    .options = kOptions,
    // Named "race.<counter>": the index fills them in Stats::properties.
    .properties = kProperties,
};

Config Config::from(const Options& o) {
  Config c;
  c.initial_depth = static_cast<unsigned>(option_unsigned(o, "race.initial_depth"));
  c.max_depth = static_cast<unsigned>(option_unsigned(o, "race.max_depth"));
  c.groups = static_cast<unsigned>(option_unsigned(o, "race.groups"));
  return c;
}

}  // namespace pmhash::engine::race
