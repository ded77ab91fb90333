// engine/sephash/descriptor.cc - what sephash is, for the registry and the front ends
// (pmhash/engines.h).
#include "engine/option_values.h"
#include "engine/remote_common/properties.h"
#include "engine/remote_common/remote_index.h"
#include "engine/sephash/layout.h"
#include "engine/sephash/sephash.h"
#include "pmhash/engines.h"

namespace pmhash::engine::sephash {

// Stats::properties, in this order (SepHashIndex::fill_stats): the
// counters every memory-node engine keeps, then sephash's own.
constexpr auto kProperties = remote_index::with_remote_counters<"sephash">({
    PropertySpec{"sephash.merges", "CurSeg merges into a MainSeg, since open"},
    PropertySpec{"sephash.splits", "segment splits, since open"},
    PropertySpec{"sephash.split_bytes", "bytes segment splits wrote, since open"},
    PropertySpec{"sephash.append_retries",
                 "appends made again because the segment changed under them, since open"},
    PropertySpec{"sephash.blocks_freed",
                 "blocks (items, MainSegs) merges and splits freed, since open"},
    PropertySpec{"sephash.bytes_freed", "bytes of the blocks merges and splits freed, since open"},
    PropertySpec{"sephash.blocks_reused",
                 "blocks allocations took from freed ones (this store's, or ones another client "
                 "handed back when it closed) instead of new space, since open"},
    PropertySpec{"sephash.bytes_reused", "bytes of the reused blocks, since open"},
    PropertySpec{"sephash.bytes_bumped",
                 "bytes taken from the nodes' bump words (new space), since open"},
    PropertySpec{"sephash.bytes_leaked",
                 "bytes of blocks given up because a batch failed without saying whether it ran "
                 "(a lost reply, a dead node), since open; never reused by anyone (an upper "
                 "bound: some may have reached another client). Space a bump FAA whose reply was "
                 "lost took is not counted"},
    PropertySpec{"sephash.lock_takeovers",
                 "segment locks taken over from a holder past its lease, since open"},
});

// registry.cc declares it.
extern const EngineDescriptor kDescriptor;
namespace {

// sephash's options (sephash.h has the design they tune). The memory
// nodes, the remote timeout and the injected latency are common options
// (Options::memnodes, remote_timeout_ms, remote_latency_ns).
constexpr OptionSpec kOptions[] = {
    {.name = "sephash.lock_lease_ms", .type = OptionType::kUnsigned, .default_value = "2000",
     .min = 1, .max = remote_index::kMaxLeaseMs, .scope = OptionScope::kCreate,
     .doc = "the lease of a segment's merge lock in ms, kept with the index: a client that has "
            "seen a segment locked this long takes the lock over; it also bounds how long a "
            "create with force waits for the old index's clients; must exceed twice the "
            "longest merge or split (sephash.h, \"Lease\")"},
    {.name = "sephash.initial_depth", .type = OptionType::kUnsigned, .default_value = "4",
     .min = 1, .max = 12, .scope = OptionScope::kCreate,
     .doc = "local depth of a new index's segments: 2^n segments to start with"},
    {.name = "sephash.main_max_slots", .type = OptionType::kUnsigned, .default_value = "6656",
     .min = 2 * kCurSlots, .max = kMaxMainSlots - kCurSlots, .scope = OptionScope::kCreate,
     .doc = "most slots of a segment's sorted MainSeg before it splits (64 CurSegs' worth by "
            "default)"},
    {.name = "sephash.max_depth", .type = OptionType::kUnsigned, .default_value = "16", .min = 1,
     .max = 20, .scope = OptionScope::kCreate,
     .doc = "the deepest a segment may split to; the directory has 2^n entries; at least "
            "sephash.initial_depth"},
};

}  // namespace

const EngineDescriptor kDescriptor = {
    .name = "sephash",
    .summary = "an index on memory nodes reached by one-sided verbs: many clients on many hosts share it",
    .paper = "SepHash (PVLDB'24)",
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
    // Named "sephash.<option>": Options::set takes them; the store checks them.
    .options = kOptions,
    // Named "sephash.<counter>": the index fills them in Stats::properties.
    .properties = kProperties,
    // A client's round trip may take at most half the lease.
    .lease_option = "sephash.lock_lease_ms",
};

Config Config::from(const Options& o) {
  Config c;
  c.lock_lease_ms = static_cast<unsigned>(option_unsigned(o, "sephash.lock_lease_ms"));
  c.initial_depth = static_cast<unsigned>(option_unsigned(o, "sephash.initial_depth"));
  c.main_max_slots = static_cast<unsigned>(option_unsigned(o, "sephash.main_max_slots"));
  c.max_depth = static_cast<unsigned>(option_unsigned(o, "sephash.max_depth"));
  return c;
}

}  // namespace pmhash::engine::sephash
