// pmhash/engines.h - what each engine is: its descriptor.
//
// Every engine declares one EngineDescriptor in its own folder
// (src/engine/<name>/descriptor.cc); the registry (src/engine/registry.cc)
// is the only list of them. Front ends - the CLI, the benchmarks, the
// server - learn everything they print or accept about an engine from here:
// its name, what it is, where its index lives, what it can do, the options
// it takes (Options::set), the properties its Stats carry, and what a
// benchmark needs to know of it (how large a pool to give it, the workloads
// of its paper).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "pmhash/options.h"
#include "pmhash/status.h"

namespace pmhash {

// Where an engine keeps its index.
enum class Location : unsigned char {
  kPoolFile,     // a pool file (Store::create / Store::open with a path)
  kMemoryNodes,  // memory nodes (Options::memnodes, an empty path)
};

// What an engine can do. Front ends and the store decide from these, never
// from an engine's name.
struct Capabilities {
  bool strict = true;            // Durability::kStrict
  bool epoch = false;            // Durability::kEpoch
  bool transactions = false;     // Store::begin
  bool snapshot_reads = false;   // ReadOptions::snapshot reads an older durable state
  bool shrink = false;           // the index gives space back as keys go
  bool background_threads = false;  // the index runs threads of its own
};

enum class OptionType : unsigned char {
  kUnsigned,  // a decimal integer in [min, max]
  kBool,      // true/false, on/off, 1/0, yes/no
  kDouble,    // a decimal number in [min, max]
};

// When an option takes effect.
enum class OptionScope : unsigned char {
  kCreate,  // chosen at create and kept with the index; an open uses the kept value
  kOpen,    // chosen by every create and open
};

// One engine option, named "<engine>.<option>" (e.g. "pmeh.zone_bits").
struct OptionSpec {
  std::string_view name;
  OptionType type = OptionType::kUnsigned;
  std::string_view default_value;  // as text, e.g. "6", "true", "0.05"
  double min = 0;                  // numbers: the inclusive range
  double max = 0;
  // Numbers: when not empty, the only values accepted besides the range
  // check, comma-separated ("4,8,16,32,64").
  std::string_view allowed = {};
  OptionScope scope = OptionScope::kOpen;
  std::string_view doc;
};

// What a property's value is, so that a front end can tell a phase's
// share of it (after - before) from the index's shape after it.
enum class PropertyKind : unsigned char {
  kSinceOpen,  // counts events since the store was opened (splits, retries)
  kNow,        // the index's shape when stats() ran (levels, segments)
};

// One named counter an engine reports in Stats::properties, named
// "<engine>.<counter>" (e.g. "nehash.splits").
struct PropertySpec {
  std::string_view name;
  std::string_view doc;
  PropertyKind kind = PropertyKind::kSinceOpen;
};

// How a workload picks the keys of its operations (YCSB's key choosers).
enum class KeyChoice : unsigned char {
  kUniform,  // every stored key equally likely
  kZipfian,  // a few keys take most operations (YCSB's scrambled zipfian)
  kLatest,   // the keys inserted last are the likeliest
};

// A workload an engine contributes to the benchmark (pmhash-bench
// --workload NAME): the operation mix its paper evaluates, so that results
// can be set beside the paper's. The benchmark finds it by name through
// paper_workloads(); nothing else knows it.
struct PaperWorkload {
  std::string_view name;  // "<engine>-<x>", unique among all engines
  std::string_view doc;   // where it comes from, e.g. "the XYZ paper's workload a"
  // Percentages of the run phase's operations, summing to 100: reads and
  // updates of stored keys, inserts of new keys, deletes of stored keys.
  unsigned read = 0;
  unsigned update = 0;
  unsigned insert = 0;
  unsigned remove = 0;
  KeyChoice keys = KeyChoice::kUniform;
};

// What a pool is sized for: the most keys its index holds at once, and
// their sizes in bytes.
struct PoolDemand {
  std::uint64_t keys = 0;
  std::uint64_t key_size = 0;
  std::uint64_t value_size = 0;
};

struct EngineDescriptor {
  std::string_view name;
  std::string_view summary;  // one line: what the engine is
  std::string_view paper;    // the design it implements
  Location location = Location::kPoolFile;
  Capabilities capabilities;
  std::span<const OptionSpec> options;
  std::span<const PropertySpec> properties;
  // The workloads of the engine's paper, if the benchmark offers them.
  std::span<const PaperWorkload> workloads = {};
  // Pool engines whose index needs more room than generic_pool_bytes()
  // allows (large buckets, splits that hold two copies): the bytes of a
  // pool that holds `demand` with the engine options of `options` (those
  // not set take their defaults), without running out. nullptr: the
  // generic estimate fits.
  std::uint64_t (*pool_bytes)(const PoolDemand& demand, const Options& options) = nullptr;
  // Memory-node engines that keep a lock lease as one of their options:
  // its name. Its value is in milliseconds and must be at least twice
  // Options::remote_timeout_ms, so a front end that raises the timeout
  // raises this option with it. Empty: the engine has no such option (its
  // lease follows the timeout by itself).
  std::string_view lease_option = {};
  // An engine still being built: it can be created and opened by name,
  // but finished_engines() leaves it out.
  bool in_progress = false;
};

// Every engine of this build, in the registry's order.
std::span<const EngineDescriptor* const> all_engines();
// The finished engines (not in_progress), in the registry's order.
std::vector<const EngineDescriptor*> finished_engines();
// nullptr when no engine has this name.
const EngineDescriptor* find_engine(std::string_view name);
// The first finished engine of a location: what a create that names no
// engine makes.
const EngineDescriptor* default_engine(Location location);
// Every way to run the finished engines of a location, for front ends that
// run "all of them": "NAME:strict" and "NAME:epoch" for each durability the
// engine offers (Capabilities), in the registry's order.
std::vector<std::string> engine_modes(Location location);
// Every workload the engines contribute (EngineDescriptor::workloads), in
// the registry's order.
std::vector<const PaperWorkload*> paper_workloads();
// nullptr when no engine contributes a workload of this name.
const PaperWorkload* find_paper_workload(std::string_view name);

// The bytes of a pool that holds `demand` for an engine without an estimate
// of its own (EngineDescriptor::pool_bytes): per key, 200 bytes plus twice
// the key and the value, which covers the item, an index of fixed-size
// slots at its emptiest (a load factor near 1/2 right after it grew) and
// the heap's rounding and slack. Engines with their own estimate add to it.
std::uint64_t generic_pool_bytes(const PoolDemand& demand);

// An option of an engine by its full name; nullptr when it has none.
const OptionSpec* find_option(const EngineDescriptor& engine, std::string_view name);

// The engine an option's name starts with ("pmeh" of "pmeh.zone_bits");
// nullptr when the part before the first dot names no engine.
const EngineDescriptor* option_engine(std::string_view name);

// Checks one engine option, name=value, against the descriptors, as a front
// end does when it parses `-o NAME=VALUE` before it knows the engine:
// InvalidArgument, in one line, when the name's prefix is no engine (naming
// the engines), the engine has no such option (naming its options), or the
// value is not of the option's type or outside its range. The store checks
// the options of the engine it creates or opens the same way.
Status check_option(std::string_view name, std::string_view value);

// The values an option takes, as its errors and `pmhash engines` print
// them: "0..8", "4, 8, 16, 32, 64", "true or false".
std::string option_range(const OptionSpec& option);
// "unsigned", "bool" or "double".
std::string_view option_type_name(OptionType type);

}  // namespace pmhash
