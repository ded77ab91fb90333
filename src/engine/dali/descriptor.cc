// engine/dali/descriptor.cc - what dali is, for the registry and the front ends
// (pmhash/engines.h).
#include "engine/dali/dali.h"
#include "engine/option_values.h"
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
namespace {

// dali's options (dali.h has the design they tune). The epoch length is a
// common option (Options::epoch_ms).
constexpr OptionSpec kOptions[] = {
    {.name = "dali.initial_log2", .type = OptionType::kUnsigned, .default_value = "12", .min = 1,
     .max = 30, .scope = OptionScope::kCreate,
     .doc = "buckets of a new table (32 bytes each), as a power of two; the table grows one "
            "bucket split at a time (linear hashing) and never below this; also the number of "
            "bucket locks (at most 2^16)"},
    {.name = "dali.lock_timeout_ms", .type = OptionType::kUnsigned, .default_value = "1000",
     .min = 1, .max = 60000, .scope = OptionScope::kOpen,
     .doc = "longest wait of a single get, insert, update, upsert, remove or for_each for a "
            "bucket lock an open transaction holds, before it returns Busy"},
};

}  // namespace

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
    .options = kOptions,
    // Named "dali.<counter>": the index fills them in Stats::properties.
    .properties = kProperties,
};

Config Config::from(const Options& o) {
  Config c;
  c.initial_log2 = static_cast<unsigned>(option_unsigned(o, "dali.initial_log2"));
  c.lock_timeout_ms = static_cast<unsigned>(option_unsigned(o, "dali.lock_timeout_ms"));
  return c;
}

}  // namespace pmhash::engine::dali
