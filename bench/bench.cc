// bench/bench.cc - pmhash-bench: YCSB workloads and the papers' micro-
// benchmarks, for every pmhash engine and every peer, side by side.
//
//   pmhash-bench --engine ENGINE,libcuckoo,lmdb --workload load,a,b,c
//                --records 1000000 --threads 1,2 --json results.json
//   pmhash-bench --limits --threads 1,2        (this machine's ceilings)
//
// For every workload (ycsb.h), every thread count and every engine, in that
// nesting order so that the engines compared in one row group run next to
// each other, the driver creates a fresh table (a pool file under --pool, or
// the peer's own files beside it), runs the load phase (records 0..N-1,
// timed on its own as YCSB does) and then the run phase (--ops operations,
// or --duration seconds) from streams generated before any timing, and
// destroys the table. Each phase reports throughput, latency percentiles,
// a 100 ms throughput series, load factor during the load, bytes per key,
// flushes and fences per operation and items moved per resize (phase.h,
// report.h). Every operation's outcome is checked; pmhash stores are also
// checked (Store::check) after each phase unless --no-check. Any
// discrepancy stops the program with exit status 1; a bad flag gives a
// one-line error and exit status 2.
//
// Before the runs, the driver measures this machine's ceilings on the same
// kind of region as the pool (ceilings.h), once per thread count, so that each
// result is also shown as a fraction of what the hardware allows.
//
// Engines. --engine takes peers, the finished pmhash engines
// (Store::engines()), and any other name Store::create accepts, such as an
// engine still in progress (asked by creating a small store in DRAM). A
// name may carry its own durability, NAME:strict or NAME:epoch, overriding
// --durability for that engine, so that one run can compare an engine in
// both modes.
//
// Engine options. -o NAME=VALUE (repeatable) sets an engine option
// (Options::set; `pmhash engines` lists them) for every store of that
// engine. VALUE may be a comma list of two or more values: a sweep, one
// store per value, each its own series named by the option and the value
// ("ENGINE split_bits=2"); several sweeps of one engine combine. A name of
// no engine, an option the engine does not have or a value out of range is
// a usage error, and so is an option of an engine not in --engine. A pmhash
// row gets a second line: the engine's properties that are not zero in the
// phase, by name (also in the JSON and the CSV).
//
// Open time. --reopen, after the load phase of each pmhash store, copies
// the quiescent open pool (a crash image), closes the store, opens it again
// and opens the copy (pmhash_table.h); each open's Stats::open_ns, the keys,
// the heap bytes per key and the engine's properties go to the table, the
// JSON and the CSV. The run phase then runs on the reopened store.
//
// Sequence. --sequence makes one store per engine and thread count instead
// of one per workload: the load phase, then the run phase of every
// --workload in the order given, each on what the phases before it left
// (as the native peers' drivers measure: load, read, negative read, update,
// delete). Each phase is one row (its name in the first column) and one
// RunResult with sequence_step 0 (the load), 1, 2, ...; flushes, fences,
// bytes per key and the load factor are the store's after that phase. The
// store is sized for the inserts of all phases together. Stores are checked
// after every phase, with the number of keys the phases so far leave.
//
// Presets. --preset NAME stands for a set of flags (preset.h); peers-8b is
// the shape of the native peers' runs. Explicit flags win over the preset's.
//
// The txn workload (ycsb.h) runs only on tables with transactions
// (Table::transactions_supported); any other engine is skipped for it, with
// a row saying why in the table and an entry in the JSON's "skipped".
#include <malloc.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "ceilings.h"
#include "microbench.h"
#include "phase.h"
#include "pmhash/engines.h"
#include "pmhash/options.h"
#include "preset.h"
#include "pmhash/store.h"
#include "pmhash_table.h"
#include "remote_bench.h"
#include "report.h"
#include "table.h"
#include "workload.h"
#include "ycsb.h"

namespace pmhash::bench {
namespace {

// The engines a run without --engine measures: the default engine of a
// pool file (the registry's), and the volatile peer it is set against.
std::vector<std::string> default_engines() {
  return {std::string(default_engine(Location::kPoolFile)->name), "libcuckoo"};
}

struct Config {
  std::vector<std::string> engines = default_engines();
  std::vector<std::string> workloads = {"load", "a", "b", "c"};
  std::uint64_t records = 1'000'000;
  std::optional<std::uint64_t> ops;  // default: records
  std::optional<double> duration_s;
  std::vector<unsigned> threads = {1};
  std::optional<std::string> distribution;  // default: each workload's own
  double zipf = 0.99;
  std::size_t key_size = 16;
  std::size_t value_size = 16;
  std::string pool = "/dev/shm";
  std::string granularity = "cache_line";
  std::string durability = "strict";
  unsigned epoch_ms = 10;
  // Epoch durability compared at equal loss: a peer syncs every window, a
  // pmhash epoch engine (which may lose its epoch and the one before) ends
  // an epoch every half window.
  std::optional<unsigned> loss_window_ms;
  unsigned lock_timeout_ms = 100;
  std::uint64_t seed = 1;
  std::string json_path;
  std::string csv_path;
  bool limits_only = false;
  bool ceilings = true;
  double ceiling_seconds = 0.25;
  std::uint64_t ceiling_region_mib = 1024;
  bool check = true;
  unsigned quiesce_timeout_s = 60;
  // -o NAME=VALUE[,VALUE...], in the order given (see "Engine options").
  std::vector<std::string> engine_options;
  bool reopen = false;
  bool list_engines = false;
  // One store per engine and thread count: the load, then every workload's
  // run phase in the order given (see "Sequence" at the head of the file).
  bool sequence = false;
  std::string preset;  // only for --help: presets are expanded before parsing
  // The flags of the micro workload and of the memory-node engines' runs.
  MicroFlags micro;
  RemoteFlags remote;
};

// Where the files of one run go: the pool file, and the peers' directories.
struct Paths {
  std::string dir;
  std::string pool_file;
};

Paths resolve_paths(const std::string& pool) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::is_directory(pool, ec)) {
    return {pool, pool + "/pmhash-bench-" + std::to_string(::getpid()) + ".pool"};
  }
  const fs::path parent = fs::path(pool).parent_path().empty() ? fs::path(".")
                                                               : fs::path(pool).parent_path();
  if (!fs::is_directory(parent, ec)) {
    throw Failure("--pool " + pool + ": directory " + parent.string() + " does not exist");
  }
  return {parent.string(), pool};
}

// --- validation ---------------------------------------------------------------

std::vector<WorkloadSpec> parse_workloads(const Config& config) {
  std::vector<WorkloadSpec> specs;
  for (const std::string& name : config.workloads) {
    std::string error;
    std::optional<WorkloadSpec> spec = parse_workload(name, &error);
    if (!spec) throw Failure("--workload: " + error);
    if (config.distribution && !spec->distribution_fixed) {
      spec->distribution = *parse_distribution(*config.distribution);
    }
    specs.push_back(std::move(*spec));
  }
  return specs;
}

std::vector<std::string> all_engines() {
  std::vector<std::string> names = Store::engines();
  for (const std::string& p : peer_names()) names.push_back(p);
  return names;
}

bool contains(const std::vector<std::string>& names, const std::string& name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

// One --engine entry: a table, and the durability it runs with when the
// entry names one (NAME:strict, NAME:epoch); else --durability's.
struct EngineSpec {
  std::string name;
  bool pmhash = false;  // a pmhash engine, not a peer
  std::optional<Durability> durability;
  // The engine options of its stores (-o), by full name, in the order given.
  std::vector<std::pair<std::string, std::string>> options;
  // Those of them that a sweep chose: they name the series.
  std::vector<std::pair<std::string, std::string>> swept;

  // The series in tables and figures: the name, and the swept values, each
  // as the option's name after the engine's ("split_bits=2").
  std::string series() const {
    std::string text = name;
    for (const auto& [option, value] : swept) {
      text += " " + option.substr(option.find('.') + 1) + "=" + value;
    }
    return text;
  }
  // Distinct for every table the driver makes.
  std::string label() const {
    std::string text = series();
    if (durability) text += *durability == Durability::kEpoch ? ":epoch" : ":strict";
    return text;
  }
};

EngineSpec make_spec(const std::string& name, bool pmhash, std::optional<Durability> durability) {
  EngineSpec spec;
  spec.name = name;
  spec.pmhash = pmhash;
  spec.durability = durability;
  return spec;
}

// Whether Store::create accepts `name` (an engine not in Store::engines(),
// such as one still in progress): creates and closes a small store in DRAM.
// Throws Failure for an unknown name or a store that cannot be made.
void probe_pmhash_engine(const std::string& name, const std::string& known) {
  Options options;
  options.engine = name;
  options.pool_size = std::uint64_t{64} << 20;
  std::unique_ptr<Store> store;
  const Status s = Store::create_volatile(options, &store);
  if (s.is_invalid_argument()) {
    throw Failure("--engine: unknown engine '" + name + "' (engines: " + known +
                  "; or pmhash, peers, all; pmhash says: " + s.message() + ")");
  }
  if (!s.ok()) {
    throw Failure("--engine " + name + ": cannot create a " + name + " store in DRAM: " +
                  s.to_string());
  }
  store->close();
}

// One -o: the option's full name and its values (two or more: a sweep).
struct EngineOption {
  std::string name;
  std::vector<std::string> values;
};

// Splits and checks every -o against the descriptors; Failure (a usage
// error) for a malformed one, a name of no engine or option, or a value out
// of range.
std::vector<EngineOption> parse_engine_options(const std::vector<std::string>& given) {
  std::vector<EngineOption> out;
  for (const std::string& text : given) {
    const std::size_t eq = text.find('=');
    if (eq == std::string::npos || eq == 0) {
      throw Failure("-o " + text + ": not NAME=VALUE[,VALUE...] (pmhash engines lists the names)");
    }
    EngineOption option{text.substr(0, eq), {}};
    std::string_view rest = std::string_view(text).substr(eq + 1);
    while (true) {
      const std::size_t comma = rest.find(',');
      option.values.emplace_back(rest.substr(0, comma));
      if (comma == std::string_view::npos) break;
      rest.remove_prefix(comma + 1);
    }
    for (const std::string& v : option.values) {
      if (Status s = check_option(option.name, v); !s.ok()) throw Failure("-o: " + s.message());
    }
    out.push_back(std::move(option));
  }
  return out;
}

// Gives every entry of --engine the -o options of its engine: a single
// value to each of its stores, a sweep as one entry per value (several
// sweeps: one per combination). An option of an engine not in --engine is a
// usage error.
std::vector<EngineSpec> apply_engine_options(const Config& config,
                                             std::vector<EngineSpec> engines) {
  const std::vector<EngineOption> options = parse_engine_options(config.engine_options);
  for (const EngineOption& o : options) {
    const std::string engine(option_engine(o.name)->name);
    const bool present = std::any_of(engines.begin(), engines.end(),
                                     [&](const EngineSpec& e) { return e.name == engine; });
    if (!present) {
      throw Failure("-o " + o.name + ": no " + engine + " engine in --engine (add " + engine + ")");
    }
  }
  for (const EngineOption& o : options) {
    const std::string_view engine = option_engine(o.name)->name;
    std::vector<EngineSpec> out;
    for (const EngineSpec& e : engines) {
      if (e.name != engine) {
        out.push_back(e);
        continue;
      }
      for (const std::string& v : o.values) {
        EngineSpec variant = e;
        variant.options.emplace_back(o.name, v);
        if (o.values.size() > 1) variant.swept.emplace_back(o.name, v);
        const bool seen = std::any_of(out.begin(), out.end(), [&](const EngineSpec& u) {
          return u.label() == variant.label();
        });
        if (!seen) out.push_back(variant);
      }
    }
    engines = std::move(out);
  }
  return engines;
}

std::vector<EngineSpec> resolve_engines(const std::vector<std::string>& requested) {
  const std::vector<std::string> finished = Store::engines();
  const std::vector<std::string> known = all_engines();
  std::string known_list;
  for (const std::string& k : known) known_list += (known_list.empty() ? "" : ", ") + k;
  std::vector<EngineSpec> out;
  for (const std::string& entry : requested) {
    const std::size_t colon = entry.find(':');
    const std::string name = entry.substr(0, colon);
    std::optional<Durability> durability;
    if (colon != std::string::npos) {
      const std::string mode = entry.substr(colon + 1);
      if (mode != "strict" && mode != "epoch") {
        throw Failure("--engine " + entry + ": the durability after ':' must be strict or epoch");
      }
      durability = mode == "epoch" ? Durability::kEpoch : Durability::kStrict;
    }
    if (name == "all" || name == "pmhash" || name == "peers") {
      if (name != "peers") {
        for (const std::string& e : finished) out.push_back(make_spec(e, true, durability));
      }
      if (name != "pmhash") {
        for (const std::string& p : peer_names()) out.push_back(make_spec(p, false, durability));
      }
      continue;
    }
    if (contains(peer_names(), name)) {
      out.push_back(make_spec(name, false, durability));
      continue;
    }
    if (!contains(finished, name)) probe_pmhash_engine(name, known_list);
    out.push_back(make_spec(name, true, durability));
  }
  std::vector<EngineSpec> unique;
  for (const EngineSpec& e : out) {
    const bool seen = std::any_of(unique.begin(), unique.end(),
                                  [&](const EngineSpec& u) { return u.label() == e.label(); });
    if (!seen) unique.push_back(e);
  }
  return unique;
}

// --sequence runs every workload's run phase on the same store, so each
// phase must find what the ones before it left: at most one workload
// inserts (a second would insert the same new records again), a workload
// that deletes comes last (later ones read or update loaded records), and
// neither "load" (the load is the sequence's first phase) nor "txn" (a
// store made for transactions) belongs in it.
void validate_sequence(const Config& config) {
  unsigned inserting = 0;
  for (std::size_t i = 0; i < config.workloads.size(); ++i) {
    const std::string& name = config.workloads[i];
    std::string error;
    const std::optional<WorkloadSpec> spec = parse_workload(name, &error);
    if (!spec) throw Failure("--workload: " + error);
    if (!spec->run_phase || spec->mix.has(OpType::kTxn)) {
      throw Failure("--sequence: workload " + name +
                    " cannot be part of a sequence (the load is its first phase; txn needs a "
                    "store of its own): leave it out or drop --sequence");
    }
    if (spec->mix.has(OpType::kInsert) && ++inserting > 1) {
      throw Failure("--sequence: workload " + name +
                    " is the second that inserts new records; only one may (the records it "
                    "would insert already exist)");
    }
    if (spec->mix.has(OpType::kDelete) && i + 1 != config.workloads.size()) {
      throw Failure("--sequence: workload " + name +
                    " deletes records the workloads after it use; put it last");
    }
  }
}

void validate(const Config& config) {
  if (config.records == 0) throw Failure("--records must be at least 1");
  if (config.records > UINT32_MAX) {
    throw Failure("--records must be at most " + std::to_string(UINT32_MAX));
  }
  if (config.ops && *config.ops == 0) throw Failure("--ops must be at least 1");
  if (config.duration_s && !(*config.duration_s > 0)) {
    throw Failure("--duration must be a positive number of seconds");
  }
  if (!(config.zipf > 0 && config.zipf < 1)) {
    throw Failure("--zipf must be strictly between 0 and 1 (YCSB uses 0.99)");
  }
  if (config.key_size < kMinBinaryKeySize || config.key_size > kMaxKeySize) {
    throw Failure("--key-size must be between " + std::to_string(kMinBinaryKeySize) + " and " +
                  std::to_string(kMaxKeySize) + " bytes (8 to 10: binary keys)");
  }
  if (config.reopen && config.granularity == "none") {
    throw Failure("--reopen needs a pool file: not with --granularity none (a DRAM store)");
  }
  if (config.value_size > kMaxValueSize) {
    throw Failure("--value-size must be at most " + std::to_string(kMaxValueSize) + " bytes");
  }
  for (unsigned t : config.threads) {
    if (t == 0 || t > 256) throw Failure("--threads: each count must be between 1 and 256");
  }
  if (config.distribution && !parse_distribution(*config.distribution)) {
    throw Failure("--distribution must be zipfian, uniform or latest");
  }
  if (config.sequence) validate_sequence(config);
  if (contains(config.workloads, "txn") && config.records < kTxnKeys) {
    throw Failure("--workload txn: each transaction touches " + std::to_string(kTxnKeys) +
                  " distinct records; --records must be at least " + std::to_string(kTxnKeys));
  }
}

// --- runs ---------------------------------------------------------------------

// Bytes the process has allocated with malloc (all arenas, mmapped chunks
// included).
std::uint64_t malloc_in_use() {
  const struct mallinfo2 m = ::mallinfo2();
  return m.uordblks + m.hblkhd;
}

// The slots a new store of the default pool engine has with default
// options (Stats::slots of one made in DRAM, then closed): what the DRAM
// peers that can start presized start with (TableConfig::initial_slots), as
// small as the pmhash store a run without --engine sets them against, so
// that both measure their own growth. The same number for every run of a
// build, whatever --engine lists, so that a peer's results compare across
// runs. Asked before any measurement: the store's allocations are never
// counted as a peer's bytes.
std::uint64_t peer_initial_slots() {
  Options options;
  options.engine = std::string(default_engine(Location::kPoolFile)->name);
  options.pool_size = std::uint64_t{64} << 20;
  std::unique_ptr<Store> store;
  if (const Status s = Store::create_volatile(options, &store); !s.ok()) {
    throw Failure("cannot make a " + options.engine +
                  " store in DRAM to size the peers by: " + s.to_string());
  }
  const std::uint64_t slots = store->stats().slots;
  store->close();
  return slots;
}

class Driver {
 public:
  Driver(Config config, std::vector<EngineSpec> engines, std::vector<WorkloadSpec> specs)
      : config_(std::move(config)),
        engines_(std::move(engines)),
        specs_(std::move(specs)),
        paths_(resolve_paths(config_.pool)),
        space_(config_.key_size, config_.value_size, config_.seed) {
    const bool peers = std::any_of(engines_.begin(), engines_.end(),
                                   [](const EngineSpec& e) { return !e.pmhash; });
    if (peers) peer_initial_slots_ = peer_initial_slots();
  }

  void measure_ceilings() {
    for (unsigned threads : config_.threads) {
      CeilingConfig c;
      c.dir = paths_.dir;
      c.granularity = config_.granularity;
      c.threads = threads;
      c.region_bytes = config_.ceiling_region_mib << 20;
      c.seconds_per_test = config_.ceiling_seconds;
      ceilings_.push_back(measure_ceilings_or_fail(c));
    }
    print_ceilings(std::cout, ceilings_);
  }

  void run_all() {
    if (config_.sequence) {
      run_sequences();
      return;
    }
    LoadKeys load_keys(space_, config_.records);
    for (const WorkloadSpec& spec : specs_) {
      print_workload_header(std::cout, spec, describe_params(spec));
      print_row_header(std::cout);
      for (unsigned threads : config_.threads) {
        StreamParams params;
        params.records = config_.records;
        params.ops = config_.ops.value_or(config_.records);
        params.threads = threads;
        params.distribution = spec.distribution;
        params.zipf = config_.zipf;
        params.seed = config_.seed;
        const std::vector<OpStream> streams = generate_streams(spec, space_, params);
        for (const EngineSpec& engine : engines_) {
          std::optional<RunResult> r = run_one(engine, threads, spec, load_keys, streams);
          if (r) {
            runs_.push_back(std::move(*r));
            print_row(std::cout, runs_.back());
          } else {
            print_skipped_row(std::cout, skipped_.back());
          }
          std::cout.flush();
        }
      }
      print_legend(spec);
    }
  }

  // --sequence: per thread count and engine, one store: the load, then the
  // run phase of every workload in order. One row (and one RunResult) per
  // phase, the load's first; every row of the store carries the same load.
  void run_sequences() {
    LoadKeys load_keys(space_, config_.records);
    std::string names = "load";
    for (const WorkloadSpec& spec : specs_) names += ", " + spec.name;
    WorkloadSpec load_spec;
    std::string error;
    load_spec = *parse_workload("load", &error);
    print_workload_header(std::cout, load_spec,
                          "one store per engine: " + names + "\n   " + describe_params(specs_.front()));
    for (unsigned threads : config_.threads) {
      std::vector<std::vector<OpStream>> streams;
      for (const WorkloadSpec& spec : specs_) {
        StreamParams params;
        params.records = config_.records;
        params.ops = config_.ops.value_or(config_.records);
        params.threads = threads;
        params.distribution = spec.distribution;
        params.zipf = config_.zipf;
        params.seed = config_.seed;
        streams.push_back(generate_streams(spec, space_, params));
      }
      for (const EngineSpec& engine : engines_) {
        print_sequence_header(std::cout, engine.label() + " t=" + std::to_string(threads));
        run_sequence(engine, threads, load_spec, load_keys, streams);
      }
    }
    print_legend(load_spec);
  }

  void run_sequence(const EngineSpec& engine, unsigned threads, const WorkloadSpec& load_spec,
                    const LoadKeys& load_keys, const std::vector<std::vector<OpStream>>& streams) {
    const std::string label = engine.label() + " t=" + std::to_string(threads);
    const std::uint64_t dram_before = malloc_in_use();
    std::unique_ptr<Table> table = make_table(engine, threads, false, run_inserts(specs_));
    RunResult base = describe(engine, *table, threads);
    const auto timeout = std::chrono::seconds(config_.quiesce_timeout_s);

    load_phase(*table, load_keys, threads, timeout, dram_before, label, &base);
    RunResult first = base;
    first.workload = load_spec;
    first.distribution = load_spec.distribution;
    first.sequence_step = 0;
    runs_.push_back(std::move(first));
    print_row(std::cout, runs_.back(), "load");
    std::cout.flush();
    base.reopen.reset();

    std::uint64_t expected = config_.records;  // keys in the store; 0: unknown
    for (std::size_t i = 0; i < specs_.size(); ++i) {
      const WorkloadSpec& spec = specs_[i];
      PhaseWork run;
      run.streams = &streams[i];
      run.space = &space_;
      run.negative_reads = spec.negative_reads;
      run.progress_label = label + " " + spec.name;
      if (config_.duration_s) run.duration = std::chrono::duration<double>(*config_.duration_s);
      run.replay = !spec.mix.has(OpType::kInsert) && !spec.mix.has(OpType::kDelete);
      RunResult r = base;
      r.workload = spec;
      r.distribution = spec.distribution;
      r.sequence_step = static_cast<unsigned>(i + 1);
      r.run = run_phase(*table, run, threads, timeout);
      r.dram_after_run = dram_used(*table, dram_before);
      expected = expected == 0 ? 0 : expected_items_after(spec, *r.run, expected);
      verify(*table, *r.run, expected, label + " " + spec.name);
      runs_.push_back(std::move(r));
      print_row(std::cout, runs_.back(), spec.name);
      std::cout.flush();
    }
  }

  void write_outputs(const std::string& command) const {
    if (!config_.json_path.empty()) write_json(command);
    if (!config_.csv_path.empty()) {
      std::ofstream out(config_.csv_path);
      write_csv(out, runs_);
      out.close();
      if (!out) throw Failure("cannot write " + config_.csv_path);
    }
  }

 private:
  static Ceilings measure_ceilings_or_fail(const CeilingConfig& c) {
    try {
      return bench::measure_ceilings(c);
    } catch (const std::exception& e) {
      throw Failure(std::string(e.what()) + " (skip the ceilings with --no-ceilings)");
    }
  }

  std::string describe_params(const WorkloadSpec& spec) const {
    std::ostringstream s;
    s << config_.records << " records";
    if (spec.run_phase) {
      if (config_.duration_s) {
        s << ", " << *config_.duration_s << " s";
      } else {
        s << ", " << run_ops(spec, config_.records, config_.ops.value_or(config_.records)) << " ops";
      }
      if (!spec.distribution_fixed) {
        s << ", " << distribution_name(spec.distribution);
        if (spec.distribution != Distribution::kUniform) s << " " << config_.zipf;
      }
    }
    s << "; keys " << config_.key_size << " B, values " << config_.value_size << " B; "
      << config_.granularity << " in " << paths_.dir << "; durability " << config_.durability;
    if (config_.durability == "epoch" ||
        std::any_of(engines_.begin(), engines_.end(), [](const EngineSpec& e) {
          return e.durability == Durability::kEpoch;
        })) {
      if (config_.loss_window_ms) {
        s << ", loss window " << *config_.loss_window_ms << " ms (peers sync every "
          << *config_.loss_window_ms << " ms, pmhash epochs of " << *config_.loss_window_ms / 2 << " ms)";
      } else {
        s << ", epochs " << config_.epoch_ms << " ms";
      }
    }
    if (spec.mix.has(OpType::kTxn)) {
      s << "; run M/s counts transactions; lock timeout " << config_.lock_timeout_ms << " ms";
    }
    return s.str();
  }

  void print_legend(const WorkloadSpec& spec) const {
    std::set<std::string> seen;
    std::cout << "   durability:";
    for (const RunResult& r : runs_) {
      if (r.workload.name != spec.name || !seen.insert(r.engine + r.durability).second) continue;
      std::cout << "\n     " << r.engine << ": " << r.durability;
    }
    std::cout << "\n";
  }

  // Inserts the run phases of `workloads` make, at most (the run phase of
  // each, one after another on the same store).
  double run_inserts(const std::vector<WorkloadSpec>& workloads) const {
    double inserts = 0;
    for (const WorkloadSpec& w : workloads) {
      if (w.run_phase) {
        inserts += w.mix[OpType::kInsert] * static_cast<double>(config_.ops.value_or(config_.records));
      }
    }
    return inserts;
  }

  std::unique_ptr<Table> make_table(const EngineSpec& spec, unsigned threads,
                                    const WorkloadSpec& workload) const {
    return make_table(spec, threads, workload.mix.has(OpType::kTxn), run_inserts({workload}));
  }

  std::unique_ptr<Table> make_table(const EngineSpec& spec, unsigned threads, bool transactions,
                                    double inserts) const {
    const std::string& engine = spec.name;
    TableConfig tc;
    tc.pool_path = paths_.pool_file;
    tc.files_dir = paths_.dir + "/pmhash-bench-" + std::to_string(::getpid()) + "-" + engine;
    tc.granularity = config_.granularity;
    tc.durability = spec.durability.value_or(
        config_.durability == "epoch" ? Durability::kEpoch : Durability::kStrict);
    tc.epoch_interval = std::chrono::milliseconds(config_.epoch_ms);
    if (config_.loss_window_ms) {
      const unsigned window = *config_.loss_window_ms;
      tc.epoch_interval = std::chrono::milliseconds(spec.pmhash ? std::max(1u, window / 2) : window);
    }
    tc.transactions = transactions;
    tc.lock_timeout_ms = config_.lock_timeout_ms;
    tc.capacity_hint = config_.records + config_.ops.value_or(config_.records);
    tc.max_keys = config_.records;
    if (inserts > 0) tc.max_keys += static_cast<std::uint64_t>(std::ceil(inserts * 1.05)) + 1000;
    tc.key_size = config_.key_size;
    tc.value_size = config_.value_size;
    tc.threads = threads;
    tc.initial_slots = peer_initial_slots_;
    tc.engine_options = spec.options;
    try {
      if (spec.pmhash) return std::make_unique<PmhashTable>(engine, tc);
      return make_peer(engine, tc);
    } catch (const Failure&) {
      throw;
    } catch (const std::exception& e) {
      throw Failure(e.what());
    }
  }

  // The load phase into `r`: records inserted, DRAM used after it, the table
  // verified, and (--reopen) the store closed and opened again.
  void load_phase(Table& table, const LoadKeys& load_keys, unsigned threads,
                  std::chrono::seconds timeout, std::uint64_t dram_before, const std::string& label,
                  RunResult* r) {
    PhaseWork load;
    load.load = &load_keys;
    load.space = &space_;
    load.progress_label = label + " load";
    r->load = run_phase(table, load, threads, timeout);
    r->dram_after_load = dram_used(table, dram_before);
    verify(table, r->load, config_.records, label + " load");
    if (config_.reopen) {
      if (auto* store = dynamic_cast<PmhashTable*>(&table)) r->reopen = reopen(*store, label);
    }
  }

  // A result row's description of the table it measures: engine, series,
  // the engine options it reports, kind, durability, threads, ceilings.
  RunResult describe(const EngineSpec& engine, Table& table, unsigned threads) const {
    RunResult r;
    r.engine = engine.name;
    r.series = engine.series();
    if (auto* store = dynamic_cast<PmhashTable*>(&table)) {
      // Every option of the engine, as the store ran with it.
      if (const EngineDescriptor* d = find_engine(engine.name)) {
        for (const OptionSpec& o : d->options) {
          r.options.emplace_back(std::string(o.name), store->options().value(o.name));
        }
      }
    }
    r.kind = table.kind();
    r.durability = table.durability();
    r.threads = threads;
    r.ceilings = ceilings_for(threads);
    return r;
  }

  std::optional<Ceilings> ceilings_for(unsigned threads) const {
    for (const Ceilings& c : ceilings_) {
      if (c.threads == threads) return c;
    }
    return std::nullopt;
  }

  void verify(Table& table, const PhaseOutcome& phase, std::uint64_t expected_items,
              const std::string& what) const {
    if (phase.unexpected != 0) {
      throw Failure(what + ": " + std::to_string(phase.unexpected) + " of " +
                    std::to_string(phase.ops) + " operations had an unexpected outcome; first: " +
                    phase.first_unexpected);
    }
    auto* store = dynamic_cast<PmhashTable*>(&table);
    if (store == nullptr) return;
    const TableStats st = table.stats();
    if (st.items && expected_items != 0 && *st.items != expected_items) {
      throw Failure(what + ": the store holds " + std::to_string(*st.items) + " keys, expected " +
                    std::to_string(expected_items));
    }
    if (config_.check) {
      const Status s = store->check();
      if (!s.ok()) throw Failure(what + ": check failed: " + s.to_string());
    }
  }

  // One run; nullopt (and an entry in skipped_) when the table cannot run
  // the workload: the txn workload on a table without transactions.
  std::optional<RunResult> run_one(const EngineSpec& engine, unsigned threads,
                                   const WorkloadSpec& spec, const LoadKeys& load_keys,
                                   const std::vector<OpStream>& streams) {
    const std::string label = engine.label() + " t=" + std::to_string(threads) + " " + spec.name;
    const std::uint64_t dram_before = malloc_in_use();
    const bool transactions = spec.mix.has(OpType::kTxn);
    std::unique_ptr<Table> table = make_table(engine, threads, spec);
    if (transactions) {
      if (const Status s = table->transactions_supported(); !s.ok()) {
        skipped_.push_back({engine.name, table->kind(), threads, spec.name, s.message()});
        return std::nullopt;
      }
    }
    RunResult r = describe(engine, *table, threads);
    r.workload = spec;
    r.distribution = spec.distribution;
    const auto timeout = std::chrono::seconds(config_.quiesce_timeout_s);

    load_phase(*table, load_keys, threads, timeout, dram_before, label, &r);

    if (spec.run_phase) {
      PhaseWork run;
      run.streams = &streams;
      run.space = &space_;
      run.negative_reads = spec.negative_reads;
      run.progress_label = label + " run";
      if (config_.duration_s) run.duration = std::chrono::duration<double>(*config_.duration_s);
      run.replay = !spec.mix.has(OpType::kInsert) && !spec.mix.has(OpType::kDelete);
      r.run = run_phase(*table, run, threads, timeout);
      r.dram_after_run = dram_used(*table, dram_before);
      verify(*table, *r.run, expected_items_after_run(spec, *r.run), label + " run");
    }
    return r;
  }

  // The clean and the crash reopen of a loaded store; each must hold every
  // loaded key (a crash image of a strict store loses nothing acknowledged).
  ReopenOutcome reopen(PmhashTable& store, const std::string& label) const {
    ReopenOutcome out;
    try {
      out = store.reopen(config_.check);
    } catch (const std::exception& e) {
      throw Failure(label + " reopen: " + e.what());
    }
    if (out.clean.items != config_.records) {
      throw Failure(label + " reopen: the cleanly closed store holds " +
                    std::to_string(out.clean.items) + " keys after the open, expected " +
                    std::to_string(config_.records));
    }
    if (out.crash && store.strict() && out.crash->items != config_.records) {
      throw Failure(label + " reopen: the crash image holds " + std::to_string(out.crash->items) +
                    " keys after recovery, expected " + std::to_string(config_.records));
    }
    return out;
  }

  // Keys expected in a pmhash store after the run phase, 0 when it depends
  // on the interleaving (mixed inserts and deletes).
  std::uint64_t expected_items_after_run(const WorkloadSpec& spec, const PhaseOutcome& run) const {
    return expected_items_after(spec, run, config_.records);
  }

  // The same for a run phase on a store that held `before` keys.
  static std::uint64_t expected_items_after(const WorkloadSpec& spec, const PhaseOutcome& run,
                                            std::uint64_t before) {
    const bool inserts = spec.mix.has(OpType::kInsert);
    const bool deletes = spec.mix.has(OpType::kDelete);
    if (inserts && deletes) return 0;
    const std::uint64_t changed =
        run.by_type[static_cast<int>(inserts ? OpType::kInsert : OpType::kDelete)].count();
    if (inserts) return before + changed;
    if (deletes) {
      const std::uint64_t removed = spec.distinct_deletes ? changed : run.ok;
      return removed >= before ? 0 : before - removed;
    }
    return before;
  }

  static std::optional<std::uint64_t> dram_used(const Table& table, std::uint64_t before) {
    if (table.stats().bytes) return std::nullopt;
    const std::uint64_t now = malloc_in_use();
    return now > before ? now - before : 0;
  }

  void write_json(const std::string& command) const {
    nlohmann::json doc;
    doc["format"] = "pmhash-bench/1";
    doc["command"] = command;
    doc["git_revision"] = revision_;
    doc["started_at"] = started_at_;
    doc["machine"] = machine_json();
    nlohmann::json workloads = nlohmann::json::array();
    for (const WorkloadSpec& s : specs_) workloads.push_back(s.name);
    doc["config"] = {
        {"workloads", workloads},
        {"records", config_.records},
        {"ops", config_.ops.value_or(config_.records)},
        {"duration_s", config_.duration_s ? nlohmann::json(*config_.duration_s) : nlohmann::json(nullptr)},
        {"distribution", config_.distribution ? nlohmann::json(*config_.distribution) : nlohmann::json(nullptr)},
        {"zipf", config_.zipf},
        {"key_size", config_.key_size},
        {"value_size", config_.value_size},
        {"pool_dir", paths_.dir},
        {"granularity", config_.granularity},
        {"durability", config_.durability},
        {"epoch_ms", config_.epoch_ms},
        {"loss_window_ms", config_.loss_window_ms ? nlohmann::json(*config_.loss_window_ms) : nlohmann::json()},
        {"lock_timeout_ms", config_.lock_timeout_ms},
        {"seed", config_.seed},
        {"threads", config_.threads},
        {"engines", engine_labels()},
        {"engine_options", config_.engine_options},
        {"reopen", config_.reopen},
        {"check", config_.check}};
    doc["ceilings"] = nlohmann::json::array();
    for (const Ceilings& c : ceilings_) doc["ceilings"].push_back(ceilings_json(c));
    doc["runs"] = nlohmann::json::array();
    for (const RunResult& r : runs_) doc["runs"].push_back(run_json(r));
    doc["skipped"] = nlohmann::json::array();
    for (const SkippedRun& s : skipped_) doc["skipped"].push_back(skipped_json(s));
    std::ofstream out(config_.json_path);
    out << doc.dump() << "\n";  // compact: histograms make indented output 4x larger
    out.close();
    if (!out) throw Failure("cannot write " + config_.json_path);
  }

  std::vector<std::string> engine_labels() const {
    std::vector<std::string> labels;
    for (const EngineSpec& e : engines_) labels.push_back(e.label());
    return labels;
  }

  Config config_;
  std::vector<EngineSpec> engines_;
  std::vector<WorkloadSpec> specs_;
  Paths paths_;
  KeySpace space_;
  std::vector<Ceilings> ceilings_;
  std::vector<RunResult> runs_;
  std::vector<SkippedRun> skipped_;
  std::uint64_t peer_initial_slots_ = 0;  // TableConfig::initial_slots
  std::string started_at_ = utc_now();
  // Taken when the run starts: the tree the binary was built from, not
  // whatever was edited while it ran.
  std::string revision_ = git_revision();
};

std::string shell_quote(const std::string& arg) {
  if (!arg.empty() && arg.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                            "0123456789-_./:=,+") == std::string::npos) {
    return arg;
  }
  std::string out = "'";
  for (char c : arg) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

void add_options(CLI::App& app, Config& config) {
  app.add_option("--engine", config.engines,
                 "engines and peers, comma-separated; pmhash = every finished pmhash engine, "
                 "peers = every peer, all = both (pmhash engines: " +
                     [] {
                       std::string s;
                       for (const auto& e : Store::engines()) s += (s.empty() ? "" : ", ") + e;
                       return s;
                     }() +
                     ", or any other engine Store::create accepts, such as one in progress, by "
                     "name; peers: libcuckoo, tbb, std, lmdb, rocksdb); NAME:strict or NAME:epoch "
                     "overrides --durability for one")
      ->delimiter(',')
      ->capture_default_str();
  app.add_option("--workload", config.workloads,
                 "load, a, b, c, d, f, insert, read, read-neg, update, delete, mixed:R/I/U/D, "
                 "txn (transactions of 3 reads + 1 update), micro, and the workloads of the "
                 "engines' papers (" + paper_workloads_help() + "); comma-separated")
      ->delimiter(',')
      ->capture_default_str();
  app.add_option("--records", config.records, "records inserted by the load phase")
      ->capture_default_str();
  app.add_option("--ops", config.ops, "operations of the run phase (default: --records)");
  app.add_option("--duration", config.duration_s,
                 "seconds of run phase instead of a count (streams of --ops operations, "
                 "replayed when the workload neither inserts nor deletes)");
  app.add_option("--threads", config.threads, "thread counts to sweep, comma-separated")
      ->delimiter(',')
      ->capture_default_str();
  app.add_option("--distribution", config.distribution,
                 "zipfian, uniform or latest (default: the workload's own)");
  app.add_option("--zipf", config.zipf, "zipfian constant, in (0, 1)")->capture_default_str();
  app.add_option("--key-size", config.key_size,
                 "bytes per key, at least 8; 8 to 10: binary keys (8 bytes of a scrambled record "
                 "number), from 11: printable")
      ->capture_default_str();
  app.add_option("--value-size", config.value_size, "bytes per value")->capture_default_str();
  app.add_option("--pool", config.pool,
                 "pool file, or a directory for it; the peers' files go in the same directory")
      ->capture_default_str();
  app.add_option("--granularity", config.granularity,
                 "byte, cache_line, page (a file, PMEM2_FORCE_GRANULARITY) or none (DRAM)")
      ->check(CLI::IsMember({"byte", "cache_line", "page", "none"}))
      ->capture_default_str();
  app.add_option("--durability", config.durability,
                 "strict (durable on return) or epoch (durable when the epoch is)")
      ->check(CLI::IsMember({"strict", "epoch"}))
      ->capture_default_str();
  app.add_option("--epoch-ms", config.epoch_ms, "epoch interval of epoch durability, ms")
      ->check(CLI::Range(1u, 60'000u))
      ->capture_default_str();
  app.add_option("--loss-window-ms", config.loss_window_ms,
                 "epoch durability at equal loss: peers sync every N ms, pmhash epoch engines end an "
                 "epoch every N/2 ms (they may lose two epochs); overrides --epoch-ms")
      ->check(CLI::Range(2u, 60'000u));
  app.add_option("--lock-timeout-ms", config.lock_timeout_ms,
                 "txn workload: longest wait of a transaction for one lock before it aborts "
                 "and is retried (pmhash engines, rocksdb)")
      ->check(CLI::Range(1u, 60'000u))
      ->capture_default_str();
  app.add_option("--seed", config.seed, "seed of keys and operation streams")
      ->capture_default_str();
  app.add_option("--json", config.json_path, "write the results as JSON (plot with bench/plot)");
  app.add_option("--csv", config.csv_path, "write one CSV line per run");
  app.add_flag("--limits", config.limits_only, "only measure this machine's ceilings");
  app.add_flag("--list-engines", config.list_engines,
               "print the finished pmhash engines (Store::engines()), one per line, and exit");
  app.add_flag("!--no-ceilings", config.ceilings, "do not measure the ceilings first");
  app.add_option("--ceiling-seconds", config.ceiling_seconds, "duration of each ceiling test")
      ->check(CLI::Range(0.01, 60.0))
      ->capture_default_str();
  app.add_option("--ceiling-region-mib", config.ceiling_region_mib,
                 "size of the region the ceilings are measured on, MiB")
      ->check(CLI::Range(16, 1 << 20))
      ->capture_default_str();
  app.add_flag("!--no-check", config.check, "skip Store::check() after each phase");
  app.add_option("-o,--option", config.engine_options,
                 "an engine option NAME=VALUE, repeatable; VALUE may be a comma list of two or "
                 "more values, a sweep with one series per value (pmhash engines lists the "
                 "options)")
      ->type_name("NAME=VALUE[,VALUE...]")
      ->allow_extra_args(false);
  app.add_option("--preset", config.preset,
                 "a named set of flags, expanded where it stands; flags given explicitly win "
                 "(bench/preset.h). peers-8b: the native peers' shape (every finished pool "
                 "engine in each durability it offers; 8-byte keys and values; 4M records "
                 "loaded by 2 threads, "
                 "then on the same store 4M uniform reads, negative reads, updates, inserts of "
                 "new keys and the delete of every loaded record; /dev/shm, cache_line)");
  app.add_flag("--sequence", config.sequence,
               "one store per engine and thread count: the load, then every workload's run "
               "phase in the order given, one row each (at most one workload inserting, a "
               "deleting one last; not load or txn)");
  app.add_flag("--reopen", config.reopen,
               "after the load phase, close each pmhash store and open it again, and open a crash "
               "image of it (a copy of the quiescent open pool); reports each open's time "
               "(Stats::open_ns), keys, heap bytes per key and the engine's properties");
  app.add_option("--quiesce-timeout", config.quiesce_timeout_s,
                 "seconds to wait for a resize to finish after a phase")
      ->capture_default_str();
  add_micro_options(app, &config.micro);
  add_remote_options(app, &config.remote);
}

// The micro workload (microbench.h): the common flags that apply to it.
std::optional<MicroConfig> micro_config(const Config& config, const std::string& command) {
  if (std::find(config.workloads.begin(), config.workloads.end(), "micro") == config.workloads.end()) {
    return std::nullopt;
  }
  if (config.workloads.size() != 1) throw Failure("--workload micro runs alone");
  MicroConfig m;
  m.libcuckoo = false;
  m.engine.clear();
  for (const std::string& e : config.engines) {
    if (e == "libcuckoo") {
      m.libcuckoo = true;
    } else if (m.engine.empty()) {
      m.engine = e;
    } else {
      throw Failure("--workload micro measures one pmhash engine (and libcuckoo): --engine " + e);
    }
  }
  if (m.engine.empty()) throw Failure("--workload micro needs a pmhash engine in --engine");
  std::string known;
  for (const std::string& e : Store::engines()) known += (known.empty() ? "" : ", ") + e;
  probe_pmhash_engine(m.engine, known);
  if (config.granularity == "none") throw Failure("--workload micro needs a pool: --granularity");
  m.threads = config.threads;
  m.records = config.records;
  m.key_size = config.key_size;
  m.value_size = config.value_size;
  m.pool_dir = resolve_paths(config.pool).dir;
  m.pool_size = config.micro.pool_size;
  m.granularity = config.granularity;
  // -o as for every workload: each sweep value a series of its own.
  const std::vector<EngineSpec> series =
      apply_engine_options(config, {make_spec(m.engine, true, std::nullopt)});
  for (const EngineSpec& e : series) m.series.push_back(MicroSeries{e.series(), e.options});
  m.engine_options = config.engine_options;
  m.seed = config.seed;
  m.check = config.check;
  m.repeat = config.micro.repeat;
  m.json_path = config.json_path;
  m.csv_path = config.csv_path;
  m.command = command;
  return m;
}

// The memory-node engines' runs (remote_bench.h), when --engine names one.
std::optional<RemoteConfig> remote_config(const Config& config, const std::string& command) {
  if (std::none_of(config.engines.begin(), config.engines.end(), is_remote_engine)) {
    return std::nullopt;
  }
  // -o is checked as for every run (a usage error, before any node is made);
  // these runs take one value per option.
  for (const EngineOption& o : parse_engine_options(config.engine_options)) {
    if (o.values.size() > 1) {
      throw Failure("-o " + o.name +
                    ": runs on memory nodes take one value per option, not a sweep");
    }
    const std::string engine(option_engine(o.name)->name);
    if (std::none_of(config.engines.begin(), config.engines.end(),
                     [&](const std::string& e) { return e == engine; })) {
      throw Failure("-o " + o.name + ": no " + engine + " engine in --engine (add " + engine + ")");
    }
  }
  RemoteConfig r;
  r.flags = config.remote;
  r.engines = config.engines;
  r.clients = config.threads;
  r.workloads = config.workloads;
  r.records = config.records;
  r.ops = config.ops.value_or(0);
  r.key_size = config.key_size;
  r.value_size = config.value_size;
  r.dir = resolve_paths(config.pool).dir;
  r.seed = config.seed;
  r.csv_path = config.csv_path;
  r.json_path = config.json_path;
  r.command = command;
  r.engine_options = config.engine_options;
  return r;
}

int run(int argc, char** argv) {
  CLI::App app{"pmhash-bench: YCSB and micro-benchmarks, pmhash engines against peers"};
  Config config;
  add_options(app, config);
  // Presets are expanded before parsing (preset.h).
  std::vector<std::string> args;
  try {
    args = expand_presets(std::vector<std::string>(argv + 1, argv + argc));
  } catch (const Failure& e) {
    std::cerr << "pmhash-bench: " << e.what() << "\n";
    return 2;
  }
  std::vector<char*> expanded{argv[0]};
  for (std::string& a : args) expanded.push_back(a.data());
  try {
    app.parse(static_cast<int>(expanded.size()), expanded.data());
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::string what = e.what();
    std::replace(what.begin(), what.end(), '\n', ' ');
    std::cerr << "pmhash-bench: " << what << " (see --help)\n";
    return 2;
  }

  if (config.list_engines) {
    for (const std::string& e : Store::engines()) std::cout << e << "\n";
    return 0;
  }

  std::string command;
  for (int i = 0; i < argc; ++i) command += (i == 0 ? "" : " ") + shell_quote(argv[i]);

  // The micro workload and the memory-node engines run in their own modules.
  std::optional<MicroConfig> micro;
  std::optional<RemoteConfig> remote;
  try {
    remote = remote_config(config, command);
    if (!remote) micro = micro_config(config, command);
  } catch (const Failure& e) {
    std::cerr << "pmhash-bench: " << e.what() << "\n";
    return 2;
  }
  if (remote) return run_remote(*remote);
  if (micro) return run_micro(*micro);

  std::vector<EngineSpec> engines;
  std::vector<WorkloadSpec> specs;
  try {
    validate(config);
    engines = apply_engine_options(config, resolve_engines(config.engines));
    specs = parse_workloads(config);
    resolve_paths(config.pool);
  } catch (const Failure& e) {
    std::cerr << "pmhash-bench: " << e.what() << "\n";
    return 2;
  }
  if (config.granularity != "none") ::setenv("PMEM2_FORCE_GRANULARITY", config.granularity.c_str(), 1);

  try {
    Driver driver(config, engines, specs);
    if (config.ceilings || config.limits_only) driver.measure_ceilings();
    if (!config.limits_only) driver.run_all();
    driver.write_outputs(command);
  } catch (const std::exception& e) {
    std::cerr << "pmhash-bench: " << e.what() << "\n";
    return 1;
  }
  return 0;
}

}  // namespace
}  // namespace pmhash::bench

int main(int argc, char** argv) { return pmhash::bench::run(argc, argv); }
