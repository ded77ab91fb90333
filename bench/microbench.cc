// bench/microbench.cc - pmhash-bench's micro workload (microbench.h):
// throughput of one shared table under T threads, pmhash against a volatile
// yardstick (libcuckoo).
//
// For every thread count T of --threads, and for each table (a pmhash store
// of --engine in a fresh pool file in --pool's directory; libcuckoo's
// cuckoohash_map in DRAM), five phases run back to back on the same table,
// each timed on its own with T threads started together (workload.h):
//
//   insert           the N records, thread t inserting the t-th slice
//   search (found)   all N keys, in a shuffled order; each value is compared
//   search (absent)  N keys that were never inserted
//   update           all N keys, shuffled, to a second value
//   delete           all N keys, shuffled
//
// The pmhash store starts as small as its engine options make it (a new
// store's Stats::slots), and libcuckoo with the same number of slots, so
// the insert phase includes resizing in both. Keys and values are generated
// before any timing.
//
// Engine options (-o) apply to every pmhash store; a sweep makes one series
// per value, each measured in every repetition, each against the libcuckoo
// run of the same repetition that started with as many slots (one
// libcuckoo run serves every series of a repetition that starts alike).
//
// Nothing is measured blindly: every operation's outcome is checked against
// the expected one (OK on insert, update and delete, the right value on a
// positive search, NotFound on a negative one), and between phases, untimed,
// the table's size is compared with the expected count, updated values are
// sampled, and (unless --no-check) Store::check() verifies the pmhash
// invariants. Any discrepancy stops the program with exit status 1.
//
// The machine may be shared and noisy, so --repeat R (default 3) runs the
// pmhash/libcuckoo pair R times back to back per thread count; the report
// gives each side's median throughput and the median and range of the
// per-repetition ratios (each ratio from two runs made next to each other).
//
// After each mutating pmhash phase the program waits, untimed, until no
// resize is in progress (reported as "resize tail"), then takes the deltas of
// Stats::flushes and Stats::fences: the persistence cost per operation,
// including the work of background rehash threads.
#include <libcuckoo/cuckoohash_map.hh>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "microbench.h"
#include "pmhash/engines.h"
#include "pmhash/options.h"
#include "pmhash/status.h"
#include "pmhash/store.h"
#include "report.h"
#include "workload.h"

namespace pmhash::bench {
namespace {

using Config = MicroConfig;

// Time allowed for a resize to finish after a phase before the table is
// declared stuck.
constexpr std::chrono::seconds kResizeTimeout{60};

constexpr const char* kPhaseNames[] = {"insert", "search (found)", "search (absent)", "update",
                                       "delete"};
constexpr std::size_t kPhases = std::size(kPhaseNames);
enum Phase : std::size_t { kInsert, kFound, kAbsent, kUpdate, kDelete };

// One phase's measurement; the persistence fields are pmhash only.
struct PhaseRecord {
  PhaseResult result;
  std::optional<double> flushes_per_op;
  std::optional<double> fences_per_op;
  double resize_tail_seconds = 0;
};

// Shape of a pmhash table after the insert phase.
struct Shape {
  std::uint64_t items = 0;
  std::uint64_t slots = 0;
  double load_factor = 0;
  unsigned levels = 0;
  std::uint64_t expansions = 0;
  std::uint64_t items_moved = 0;
};

struct RunRecord {
  std::string table;  // "pmhash" or "libcuckoo"
  std::string series;  // MicroSeries::name, or "libcuckoo"
  // pmhash: every option of the engine and its value, by full name.
  std::vector<std::pair<std::string, std::string>> options;
  std::uint64_t pool_size = 0;  // pmhash: bytes of its pool file
  std::uint64_t initial_slots = 0;  // the table's slots before the first insert
  unsigned threads = 0;
  unsigned repetition = 0;
  PhaseRecord phases[kPhases];
  std::optional<Shape> shape;
  std::string granularity;
};

std::string show(std::string_view key) { return "'" + std::string(key) + "'"; }

// Bytes of a pool for the records: --pool-size, else the engine's estimate
// (EngineDescriptor::pool_bytes, or the generic one) with the series'
// options, at least 1 GiB.
std::uint64_t pool_size_of(const Config& config, const Options& options) {
  if (config.pool_size != 0) return config.pool_size;
  const PoolDemand demand{config.records, config.key_size, config.value_size};
  const EngineDescriptor* engine = find_engine(config.engine);
  const std::uint64_t bytes = engine != nullptr && engine->pool_bytes != nullptr
                                  ? engine->pool_bytes(demand, options)
                                  : generic_pool_bytes(demand);
  return std::max<std::uint64_t>(std::uint64_t{1} << 30, bytes);
}

// --- the tables -------------------------------------------------------------
//
// Each adapter performs one operation and reports an unexpected outcome to
// the worker's tally; begin_phase/end_phase bracket a timed phase.

class PmhashTable {
 public:
  PmhashTable(const Config& config, const MicroSeries& series, unsigned threads) {
    path_ = config.pool_dir + "/pmhash-bench-micro-" + std::to_string(::getpid()) + "-t" +
            std::to_string(threads) + ".pool";
    Options options;
    options.engine = config.engine;
    options.force = true;
    for (const auto& [name, value] : series.options) options.set(name, value);
    options.pool_size = pool_size_of(config, options);
    pool_size_ = options.pool_size;
    const Status s = Store::create(path_, options, &store_);
    if (!s.ok()) {
      throw Failure("cannot create pool " + path_ + ": " + s.to_string() +
                    " (choose another directory with --pool or a size with --pool-size)");
    }
  }

  ~PmhashTable() {
    store_.reset();
    std::error_code ignored;
    std::filesystem::remove(path_, ignored);
  }

  PmhashTable(const PmhashTable&) = delete;
  PmhashTable& operator=(const PmhashTable&) = delete;

  void insert(std::string_view key, std::string_view value, Tally& tally) {
    const Status s = store_->insert(key, value);
    if (!s.ok()) tally.fail("insert " + show(key) + ": " + s.to_string());
  }

  void get_present(std::string_view key, std::string_view expected, std::string& buffer,
                   Tally& tally) const {
    const Status s = store_->get(key, &buffer);
    if (!s.ok()) {
      tally.fail("get " + show(key) + " (present): " + s.to_string());
    } else if (buffer != expected) {
      tally.fail("get " + show(key) + " returned " + show(buffer) + ", expected " + show(expected));
    }
  }

  void get_absent(std::string_view key, std::string& buffer, Tally& tally) const {
    const Status s = store_->get(key, &buffer);
    if (!s.is_not_found()) {
      tally.fail("get " + show(key) + " (never inserted): " +
                 (s.ok() ? "found value " + show(buffer) : s.to_string()));
    }
  }

  void update(std::string_view key, std::string_view value, Tally& tally) {
    const Status s = store_->update(key, value);
    if (!s.ok()) tally.fail("update " + show(key) + ": " + s.to_string());
  }

  void remove(std::string_view key, Tally& tally) {
    const Status s = store_->remove(key);
    if (!s.ok()) tally.fail("remove " + show(key) + ": " + s.to_string());
  }

  std::uint64_t size() const { return store_->size(); }

  void begin_phase() { before_ = store_->stats(); }

  void end_phase(PhaseRecord& record) {
    const auto start = std::chrono::steady_clock::now();
    Stats now = store_->stats();
    while (now.resizing) {
      if (std::chrono::steady_clock::now() - start > kResizeTimeout) {
        throw Failure(record.result.name + ": the resize started during the phase is still running " +
                      std::to_string(kResizeTimeout.count()) + " s after the phase ended");
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      now = store_->stats();
    }
    record.resize_tail_seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const auto ops = static_cast<double>(record.result.ops);
    record.flushes_per_op = static_cast<double>(now.flushes - before_.flushes) / ops;
    record.fences_per_op = static_cast<double>(now.fences - before_.fences) / ops;
  }

  void verify(const std::string& when, bool full_check) const {
    if (!full_check) return;
    const Status s = store_->check();
    expect(s.ok(), "pmhash check() " + when + ": " + s.to_string());
  }

  Stats stats() const { return store_->stats(); }
  std::uint64_t pool_size() const { return pool_size_; }

  void close() {
    const Status s = store_->close();
    expect(s.ok(), "pmhash close(): " + s.to_string());
  }

 private:
  std::string path_;
  std::uint64_t pool_size_ = 0;
  std::unique_ptr<Store> store_;
  Stats before_;
};

// libcuckoo keyed by std::string, looked up by std::string_view without a
// temporary string: the hash and equality accept both.
struct StringViewHash {
  std::size_t operator()(std::string_view s) const noexcept {
    return std::hash<std::string_view>{}(s);
  }
};
using CuckooMap =
    libcuckoo::cuckoohash_map<std::string, std::string, StringViewHash, std::equal_to<>>;

class CuckooTable {
 public:
  explicit CuckooTable(std::size_t initial_slots) : map_(initial_slots) {}

  void insert(std::string_view key, std::string_view value, Tally& tally) {
    if (!map_.insert(key, value)) tally.fail("insert " + show(key) + ": already present");
  }

  void get_present(std::string_view key, std::string_view expected, std::string& buffer,
                   Tally& tally) const {
    if (!map_.find(key, buffer)) {
      tally.fail("find " + show(key) + " (present): not found");
    } else if (buffer != expected) {
      tally.fail("find " + show(key) + " returned " + show(buffer) + ", expected " + show(expected));
    }
  }

  void get_absent(std::string_view key, std::string& buffer, Tally& tally) const {
    if (map_.find(key, buffer)) {
      tally.fail("find " + show(key) + " (never inserted): found value " + show(buffer));
    }
  }

  void update(std::string_view key, std::string_view value, Tally& tally) {
    if (!map_.update(key, value)) tally.fail("update " + show(key) + ": not found");
  }

  void remove(std::string_view key, Tally& tally) {
    if (!map_.erase(key)) tally.fail("erase " + show(key) + ": not found");
  }

  std::uint64_t size() const { return map_.size(); }
  void begin_phase() {}
  void end_phase(PhaseRecord&) {}
  void verify(const std::string&, bool) const {}

 private:
  CuckooMap map_;
};

// --- the phases -------------------------------------------------------------

template <typename Table>
PhaseRecord timed(Table& table, Phase phase, unsigned threads, std::uint64_t ops,
                  const std::function<void(std::uint64_t, std::uint64_t, Tally&)>& body) {
  table.begin_phase();
  PhaseRecord record;
  record.result = run_phase(kPhaseNames[phase], threads, ops, body);
  table.end_phase(record);
  return record;
}

template <typename Table>
void expect_size(const Table& table, std::uint64_t expected, const std::string& when) {
  const std::uint64_t size = table.size();
  expect(size == expected, "size() " + when + " is " + std::to_string(size) + ", expected " +
                               std::to_string(expected));
}

template <typename Table>
void run_phases(Table& table, const Dataset& data, unsigned threads, bool full_check,
                RunRecord& run, const std::function<void()>& after_insert) {
  const std::uint64_t n = data.records();

  run.phases[kInsert] = timed(table, kInsert, threads, n, [&](auto begin, auto end, Tally& t) {
    for (auto i = begin; i < end; ++i) table.insert(data.key(i), data.value(i, 0), t);
  });
  expect_size(table, n, "after the insert phase");
  table.verify("after the insert phase", full_check);
  after_insert();

  run.phases[kFound] = timed(table, kFound, threads, n, [&](auto begin, auto end, Tally& t) {
    std::string buffer;
    for (auto j = begin; j < end; ++j) {
      const std::uint64_t i = data.shuffled(j);
      table.get_present(data.key(i), data.value(i, 0), buffer, t);
    }
  });

  run.phases[kAbsent] = timed(table, kAbsent, threads, n, [&](auto begin, auto end, Tally& t) {
    std::string buffer;
    for (auto j = begin; j < end; ++j) table.get_absent(data.absent_key(j), buffer, t);
  });

  run.phases[kUpdate] = timed(table, kUpdate, threads, n, [&](auto begin, auto end, Tally& t) {
    for (auto j = begin; j < end; ++j) {
      const std::uint64_t i = data.shuffled(j);
      table.update(data.key(i), data.value(i, 1), t);
    }
  });
  expect_size(table, n, "after the update phase");
  // Untimed: every 16th record must now hold its updated value.
  constexpr std::uint64_t kSampleStride = 16;
  run_phase("update sample", threads, n / kSampleStride, [&](auto begin, auto end, Tally& t) {
    std::string buffer;
    for (auto j = begin; j < end; ++j) {
      const std::uint64_t i = j * kSampleStride;
      table.get_present(data.key(i), data.value(i, 1), buffer, t);
    }
  });
  table.verify("after the update phase", full_check);

  run.phases[kDelete] = timed(table, kDelete, threads, n, [&](auto begin, auto end, Tally& t) {
    for (auto j = begin; j < end; ++j) table.remove(data.key(data.shuffled(j)), t);
  });
  expect_size(table, 0, "after the delete phase");
  table.verify("after the delete phase", full_check);
}

RunRecord run_pmhash(const Config& config, const MicroSeries& series, const Dataset& data,
                     unsigned threads) {
  RunRecord run;
  run.table = "pmhash";
  run.series = series.name;
  run.threads = threads;
  // Every option of the engine, with the value the store was made with,
  // as the table driver reports them.
  Options set;
  for (const auto& [name, value] : series.options) set.set(name, value);
  if (const EngineDescriptor* engine = find_engine(config.engine)) {
    for (const OptionSpec& o : engine->options) {
      run.options.emplace_back(std::string(o.name), set.value(o.name));
    }
  }
  PmhashTable table(config, series, threads);
  const Stats created = table.stats();
  run.granularity = created.granularity;
  run.initial_slots = created.slots;
  run.pool_size = table.pool_size();
  run_phases(table, data, threads, config.check, run, [&] {
    const Stats s = table.stats();
    const std::string engine = s.engine + ".";
    run.shape = Shape{s.items, s.slots, s.load_factor,
                      static_cast<unsigned>(s.property(engine + "levels")),
                      s.property(engine + "expansions"), s.property(engine + "items_moved")};
  });
  table.close();
  return run;
}

// `slots`: the initial slots of the pmhash store it is compared with.
RunRecord run_libcuckoo(const Config& config, const Dataset& data, unsigned threads,
                        std::uint64_t slots) {
  RunRecord run;
  run.table = "libcuckoo";
  run.series = "libcuckoo";
  run.threads = threads;
  run.initial_slots = slots;
  CuckooTable table(static_cast<std::size_t>(slots));
  run_phases(table, data, threads, config.check, run, [] {});
  return run;
}

// --- reporting --------------------------------------------------------------

std::string fixed(double x, int decimals = 2) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, x);
  return buf;
}

std::string pad(const std::string& s, std::size_t width, bool left = false) {
  if (s.size() >= width) return s;
  const std::string fill(width - s.size(), ' ');
  return left ? s + fill : fill + s;
}

struct Pair {
  const RunRecord* pmhash = nullptr;
  const RunRecord* cuckoo = nullptr;
};

// The repetitions of one thread count.
struct Group {
  unsigned threads = 0;
  std::vector<Pair> reps;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n == 0 ? 0 : n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

// The report of one series.
void print_report(const Config& config, const std::string& series,
                  const std::vector<Group>& groups) {
  const std::string granularity = groups.empty() ? "" : groups.front().reps.front().pmhash->granularity;
  const std::size_t reps = groups.empty() ? 0 : groups.front().reps.size();
  std::cout << "\npmhash-bench, workload micro: " << config.records << " records, key " << config.key_size
            << " B, value " << config.value_size << " B, engine " << series << ", pool in "
            << config.pool_dir << ", granularity " << granularity << ", seed " << config.seed
            << "\n\nthroughput, Mops/s, median of " << reps
            << (reps == 1 ? " run" : " runs") << " (ratio = pmhash / libcuckoo, median and range "
            << "of the per-run ratios)\n\n";

  constexpr std::size_t kName = 16, kCell = 10, kRatio = 7, kRange = 12, kGap = 3;
  std::string head1 = pad("", kName, true), head2 = pad("operation", kName, true);
  for (const Group& g : groups) {
    const std::string label =
        std::to_string(g.threads) + (g.threads == 1 ? " thread" : " threads");
    head1 += std::string(kGap, ' ') + pad(label, 2 * kCell + kRatio + kRange, true);
    head2 += std::string(kGap, ' ') + pad("pmhash", kCell) + pad("libcuckoo", kCell) +
             pad("ratio", kRatio) + pad("range", kRange);
  }
  std::cout << head1 << "\n" << head2 << "\n";
  for (std::size_t ph = 0; ph < kPhases; ++ph) {
    std::string line = pad(kPhaseNames[ph], kName, true);
    for (const Group& g : groups) {
      std::vector<double> mine, theirs, ratios;
      for (const Pair& p : g.reps) {
        mine.push_back(p.pmhash->phases[ph].result.mops());
        if (p.cuckoo == nullptr) continue;
        theirs.push_back(p.cuckoo->phases[ph].result.mops());
        if (theirs.back() > 0) ratios.push_back(mine.back() / theirs.back());
      }
      line += std::string(kGap, ' ') + pad(fixed(median(mine)), kCell);
      if (ratios.empty()) {
        line += pad("-", kCell) + pad("-", kRatio) + pad("-", kRange);
        continue;
      }
      const auto [lo, hi] = std::minmax_element(ratios.begin(), ratios.end());
      line += pad(fixed(median(theirs)), kCell) + pad(fixed(median(ratios)), kRatio) +
              pad(fixed(*lo) + "-" + fixed(*hi), kRange);
    }
    std::cout << line << "\n";
  }

  // Persistence counts and the table's shape hardly vary between runs: the
  // first run of each thread count stands for all.
  std::vector<Pair> pairs;
  for (const Group& g : groups) pairs.push_back(g.reps.front());
  std::cout << "\npmhash persistence per operation (incl. background rehash)\n\n"
            << pad("threads", 8, true) << pad("operation", kName, true) << pad("flushes/op", 12)
            << pad("fences/op", 12) << pad("resize tail ms", 16) << "\n";
  for (const Pair& p : pairs) {
    for (Phase ph : {kInsert, kUpdate, kDelete}) {
      const PhaseRecord& r = p.pmhash->phases[ph];
      std::cout << pad(std::to_string(p.pmhash->threads), 8, true)
                << pad(kPhaseNames[ph], kName, true) << pad(fixed(r.flushes_per_op.value_or(0)), 12)
                << pad(fixed(r.fences_per_op.value_or(0)), 12)
                << pad(fixed(r.resize_tail_seconds * 1e3, 1), 16) << "\n";
    }
  }

  std::cout << "\npmhash table after the insert phase\n\n"
            << pad("threads", 8, true) << pad("keys", 12) << pad("slots", 12)
            << pad("load factor", 13) << pad("levels", 8) << pad("expansions", 12)
            << pad("items moved", 13) << "\n";
  for (const Pair& p : pairs) {
    const Shape& s = *p.pmhash->shape;
    std::cout << pad(std::to_string(p.pmhash->threads), 8, true) << pad(std::to_string(s.items), 12)
              << pad(std::to_string(s.slots), 12) << pad(fixed(s.load_factor, 3), 13)
              << pad(std::to_string(s.levels), 8) << pad(std::to_string(s.expansions), 12)
              << pad(std::to_string(s.items_moved), 13) << "\n";
  }
}

nlohmann::json to_json(const Config& config, const RunRecord& run) {
  const bool pmhash = run.table == "pmhash";
  nlohmann::json phases = nlohmann::json::array();
  for (std::size_t ph = 0; ph < kPhases; ++ph) {
    const PhaseRecord& r = run.phases[ph];
    nlohmann::json j = {{"name", kPhaseNames[ph]},
                        {"ops", r.result.ops},
                        {"seconds", r.result.seconds},
                        {"ops_per_s", r.result.mops() * 1e6},
                        {"flushes_per_op", nullptr},
                        {"fences_per_op", nullptr},
                        {"resize_tail_s", nullptr}};
    if (r.flushes_per_op) {
      j["flushes_per_op"] = *r.flushes_per_op;
      j["fences_per_op"] = *r.fences_per_op;
      j["resize_tail_s"] = r.resize_tail_seconds;
    }
    phases.push_back(j);
  }
  nlohmann::json out = {{"engine", pmhash ? config.engine : run.table},
                        {"series", run.series},
                        {"options", pmhash ? options_json(run.options) : nlohmann::json()},
                        {"kind", pmhash ? "pmhash" : "peer"},
                        {"durability", pmhash ? "strict" : "none"},
                        {"threads", run.threads},
                        {"workload", "micro"},
                        {"repetition", run.repetition},
                        {"initial_slots", run.initial_slots},
                        {"pool_size", pmhash ? nlohmann::json(run.pool_size) : nlohmann::json()},
                        {"granularity", pmhash ? nlohmann::json(run.granularity) : nlohmann::json()},
                        {"load", nullptr},
                        {"run", nullptr},
                        {"phases", phases},
                        {"after_insert", nullptr}};
  if (run.shape) {
    out["after_insert"] = {{"items", run.shape->items},
                           {"slots", run.shape->slots},
                           {"load_factor", run.shape->load_factor},
                           {"levels", run.shape->levels},
                           {"expansions", run.shape->expansions},
                           {"items_moved", run.shape->items_moved}};
  }
  return out;
}

// The pmhash-bench/1 document (report.h), with the runs of microbench.h.
void write_json(const Config& config, const std::deque<RunRecord>& runs) {
  std::vector<std::string> engines = {config.engine};
  if (config.libcuckoo) engines.emplace_back("libcuckoo");
  nlohmann::json doc;
  doc["format"] = "pmhash-bench/1";
  doc["command"] = config.command;
  doc["git_revision"] = git_revision();
  doc["started_at"] = utc_now();
  doc["machine"] = machine_json();
  doc["config"] = {{"workloads", {"micro"}},
                   {"records", config.records},
                   {"key_size", config.key_size},
                   {"value_size", config.value_size},
                   {"engines", engines},
                   {"threads", config.threads},
                   {"pool_dir", config.pool_dir},
                   {"pool_size", config.pool_size},
                   {"granularity", config.granularity},
                   {"engine_options", config.engine_options},
                   {"seed", config.seed},
                   {"repeat", config.repeat},
                   {"check", config.check}};
  doc["ceilings"] = nlohmann::json::array();
  doc["runs"] = nlohmann::json::array();
  for (const RunRecord& run : runs) doc["runs"].push_back(to_json(config, run));
  doc["skipped"] = nlohmann::json::array();
  std::ofstream out(config.json_path);
  out << doc.dump() << "\n";
  out.close();
  expect(static_cast<bool>(out), "cannot write " + config.json_path);
}

// One line per run and phase.
void write_csv(const Config& config, const std::deque<RunRecord>& runs) {
  std::ofstream out(config.csv_path);
  out << "engine,series,threads,workload,repetition,phase,ops,seconds,ops_per_s,flushes_per_op,"
         "fences_per_op\n";
  for (const RunRecord& run : runs) {
    const std::string engine = run.table == "pmhash" ? config.engine : run.table;
    for (std::size_t ph = 0; ph < kPhases; ++ph) {
      const PhaseRecord& r = run.phases[ph];
      out << engine << "," << run.series << "," << run.threads << ",micro," << run.repetition
          << "," << kPhaseNames[ph]
          << "," << r.result.ops << "," << r.result.seconds << "," << r.result.mops() * 1e6 << ","
          << (r.flushes_per_op ? std::to_string(*r.flushes_per_op) : "") << ","
          << (r.fences_per_op ? std::to_string(*r.fences_per_op) : "") << "\n";
    }
  }
  out.close();
  expect(static_cast<bool>(out), "cannot write " + config.csv_path);
}

int run(const Config& config) {
  if (config.granularity != "auto") {
    // libpmem2 reads this when the pool is mapped (docs/persistence.md).
    ::setenv("PMEM2_FORCE_GRANULARITY", config.granularity.c_str(), 1);
  }
  std::cerr << "generating " << 2 * config.records << " keys and " << 2 * config.records
            << " values\n";
  const Dataset data(config.records, config.key_size, config.value_size, config.seed, true);

  // RunRecords stay where they are: Pairs point into the deque.
  std::deque<RunRecord> runs;
  // Per series, per thread count, the repetitions.
  std::vector<std::vector<Group>> by_series(config.series.size());
  for (unsigned threads : config.threads) {
    for (std::vector<Group>& groups : by_series) groups.push_back(Group{threads, {}});
    for (unsigned r = 0; r < config.repeat; ++r) {
      const std::string of = config.repeat > 1 ? " (run " + std::to_string(r + 1) + " of " +
                                                     std::to_string(config.repeat) + ")"
                                               : "";
      std::vector<const RunRecord*> cuckoos;  // this repetition's
      for (std::size_t i = 0; i < config.series.size(); ++i) {
        const MicroSeries& series = config.series[i];
        std::cerr << "pmhash " << series.name << ", " << threads << " thread(s)" << of << "\n";
        runs.push_back(run_pmhash(config, series, data, threads));
        runs.back().repetition = r;
        Pair pair{&runs.back(), nullptr};
        if (config.libcuckoo) {
          const std::uint64_t slots = pair.pmhash->initial_slots;
          const auto same = std::find_if(cuckoos.begin(), cuckoos.end(), [&](const RunRecord* c) {
            return c->initial_slots == slots;
          });
          if (same != cuckoos.end()) {
            pair.cuckoo = *same;
          } else {
            std::cerr << "libcuckoo, " << threads << " thread(s), " << slots << " slots" << of
                      << "\n";
            runs.push_back(run_libcuckoo(config, data, threads, slots));
            runs.back().repetition = r;
            pair.cuckoo = &runs.back();
            cuckoos.push_back(pair.cuckoo);
          }
        }
        by_series[i].back().reps.push_back(pair);
      }
    }
  }
  for (std::size_t i = 0; i < config.series.size(); ++i) {
    print_report(config, config.series[i].name, by_series[i]);
  }
  std::cout << "\nall checks passed: every operation had the expected outcome\n";
  if (!config.json_path.empty()) write_json(config, runs);
  if (!config.csv_path.empty()) write_csv(config, runs);
  return 0;
}

}  // namespace

void add_micro_options(CLI::App& app, MicroFlags* flags) {
  app.add_option("--repeat", flags->repeat,
                 "micro: runs per thread count (pmhash then libcuckoo each time); the report "
                 "gives medians")
      ->check(CLI::Range(1u, 100u))
      ->capture_default_str();
  app.add_option("--pool-size", flags->pool_size,
                 "micro: pool file size in bytes (default: max(1 GiB, the engine's estimate for "
                 "the records))");
}

int run_micro(MicroConfig config) {
  if (config.engine.empty()) config.engine = std::string(default_engine(Location::kPoolFile)->name);
  if (config.series.empty()) config.series.push_back(MicroSeries{config.engine, {}});
  try {
    return run(config);
  } catch (const Failure& e) {
    std::cerr << "pmhash-bench: micro: FAILED: " << e.what() << "\n";
    return 1;
  }
}

}  // namespace pmhash::bench
