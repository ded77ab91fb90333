// tests/bench/pmeh_bench_test.cc - what pmhash-bench gained for pmeh
// (docs/design/pmeh.md §13.4): the engine listed and by name, the
// sweeps of -o pmeh.split_bits / pmeh.split_step / pmeh.opportunistic (one
// series per value, each store really made with it), the single-valued
// options, the data-movement fields of the JSON, the CSV and the table, the
// reopen's segments, and the usage errors of the new flags. Stores are
// tiny (two zones of 4 KiB segments, a few hundred keys) so that they split
// at once: a pmeh write goes through an owner thread, which on a loaded
// 2-core machine can take milliseconds.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "bench/pmhash_table.h"
#include "bench/table.h"
#include "pmhash/store.h"
#include "scratch_file.h"
#include "subprocess.h"

namespace pmhash::bench {
namespace {

using nlohmann::json;
using pmhash::testing::run_program;
using pmhash::testing::ScratchDir;
using pmhash::testing::SpawnResult;

// Every data line of a CSV file as a map from the header's names.
std::vector<std::map<std::string, std::string>> read_csv(const std::string& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << path;
  auto split = [](const std::string& line) {
    std::vector<std::string> fields;
    std::string field;
    bool quoted = false;
    for (char c : line) {
      if (c == '"') quoted = !quoted;
      else if (c == ',' && !quoted) fields.push_back(std::exchange(field, {}));
      else field += c;
    }
    fields.push_back(field);
    return fields;
  };
  std::string line;
  std::getline(in, line);
  const std::vector<std::string> header = split(line);
  std::vector<std::map<std::string, std::string>> rows;
  while (std::getline(in, line)) {
    const std::vector<std::string> fields = split(line);
    EXPECT_EQ(fields.size(), header.size()) << line;
    std::map<std::string, std::string> row;
    for (std::size_t i = 0; i < header.size() && i < fields.size(); ++i) row[header[i]] = fields[i];
    rows.push_back(std::move(row));
  }
  return rows;
}

class PmehBench : public ::testing::Test {
 protected:
  // Runs pmhash-bench on tiny pmeh stores: Z = 1, 4 KiB segments (210
  // slots each), one owner thread.
  SpawnResult bench(std::vector<std::string> args) {
    args.insert(args.end(), {"--pool", dir_, "--no-ceilings", "--key-size", "8", "--value-size", "8"});
    // An --engine list that starts with pmeh.
    if (std::any_of(args.begin(), args.end(), [](const std::string& a) { return a.starts_with("pmeh"); })) {
      for (const char* option : {"pmeh.zone_bits=1", "pmeh.segment_kib=4", "pmeh.workers=1"}) {
        const std::string name = std::string(option).substr(0, std::string(option).find('=') + 1);
        if (std::none_of(args.begin(), args.end(),
                         [&](const std::string& a) { return a.starts_with(name); })) {
          args.insert(args.end(), {"-o", option});
        }
      }
    }
    return run_program(PMHASH_BENCH_PATH, args);
  }
  static json read_json(const std::string& path) {
    std::ifstream in(path);
    EXPECT_TRUE(in.good()) << path;
    return json::parse(in, nullptr, /*allow_exceptions=*/false);
  }
  static std::string describe(const SpawnResult& r) {
    return "exit " + std::to_string(r.exit_code) + "\nstdout:\n" + r.out + "\nstderr:\n" + r.err;
  }

  ScratchDir scratch_{"pmhash-pmeh-bench"};
  const std::string dir_ = scratch_.str();
};

// A load into small segments splits: the load phase reports the bytes and
// slots its splits moved (18 bytes per slot: the slot and its meta), per
// inserted key, the splits and the segments; every store of the sweep has
// its k and switch, with the set-once flags applied to all.
TEST_F(PmehBench, SplitBitsAndSwitchSweepsMakeOneSeriesEachAndReportDataMovement) {
  const std::string json_path = dir_ + "/out.json";
  const std::string csv_path = dir_ + "/out.csv";
  constexpr std::uint64_t kRecords = 700;
  const SpawnResult r = bench({"--engine", "pmeh,clevel", "-o", "pmeh.split_bits=1,3",
                               "-o", "pmeh.opportunistic=on,off", "-o", "pmeh.segment_kib=4",
                               "-o", "pmeh.workers=2", "--workload", "load", "--threads", "2",
                               "--records", std::to_string(kRecords), "--json", json_path,
                               "--csv", csv_path});
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  const json doc = read_json(json_path);
  const json& given = doc["config"]["engine_options"];
  EXPECT_NE(std::find(given.begin(), given.end(), "pmeh.split_bits=1,3"), given.end()) << given;
  EXPECT_NE(std::find(given.begin(), given.end(), "pmeh.opportunistic=on,off"), given.end()) << given;
  EXPECT_NE(std::find(given.begin(), given.end(), "pmeh.segment_kib=4"), given.end()) << given;
  ASSERT_EQ(doc["runs"].size(), 5u);
  std::set<std::string> series;
  for (const json& run : doc["runs"]) {
    const std::string name = run["series"];
    series.insert(name);
    const json& load = run["load"];
    if (run["engine"] == "clevel") {
      EXPECT_EQ(name, "clevel");
      for (const auto& [field, value] : load["properties"].items()) {
        EXPECT_EQ(field.rfind("clevel.", 0), 0u) << field;
      }
      continue;
    }
    const json& o = run["options"];
    const unsigned k = o["pmeh_split_bits"];
    const bool on = o["pmeh_opportunistic"];
    EXPECT_EQ(name, "pmeh split_bits=" + std::to_string(k) +
                        (on ? " opportunistic=on" : " opportunistic=off"));
    EXPECT_EQ(o["pmeh_segment_kib"], 4) << name;
    EXPECT_EQ(o["pmeh_workers"], 2) << name;
    EXPECT_EQ(o["pmeh_delegate_reads"], false) << name;
    const json& p = load["properties"];
    const auto bytes = p["pmeh.bytes_moved"].get<std::uint64_t>();
    const auto items = p["pmeh.items_moved"].get<std::uint64_t>();
    EXPECT_GT(p["pmeh.splits"].get<std::uint64_t>(), 0u) << name;
    EXPECT_GT(items, 0u) << name;
    EXPECT_EQ(bytes, 18 * items) << name;
    // A slot moves at most once per split level a key goes through: far
    // fewer than 20 times per key at this size.
    EXPECT_LT(items, 10 * kRecords) << name;
    const auto segments = p["pmeh.segments"].get<std::uint64_t>();
    EXPECT_GT(segments, 2u) << name;  // more than the two it was created with
    EXPECT_EQ(load["slots"].get<std::uint64_t>() % segments, 0u) << name;
    // With the switch off every write goes through an owner thread.
    if (!on) {
      EXPECT_GE(p["pmeh.delegated_ops"].get<std::uint64_t>(), kRecords) << name;
      EXPECT_EQ(p["pmeh.zone_switches"].get<std::uint64_t>(), 0u) << name;
      EXPECT_EQ(p["pmeh.direct_ops"].get<std::uint64_t>(), 0u) << name;
    }
    // Every write ran once, on an owner or directly.
    EXPECT_GE(p["pmeh.delegated_ops"].get<std::uint64_t>() + p["pmeh.direct_ops"].get<std::uint64_t>(),
              kRecords) << name;
    EXPECT_TRUE(p.contains("pmeh.eager_split_completions")) << name;
  }
  EXPECT_EQ(series, (std::set<std::string>{"clevel", "pmeh split_bits=1 opportunistic=on",
                                           "pmeh split_bits=1 opportunistic=off",
                                           "pmeh split_bits=3 opportunistic=on",
                                           "pmeh split_bits=3 opportunistic=off"}));
  EXPECT_NE(r.out.find("pmeh.bytes_moved "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("pmeh split_bits=3 opportunistic=off"), std::string::npos) << r.out;
  const auto rows = read_csv(csv_path);
  ASSERT_EQ(rows.size(), 5u);
  for (const auto& row : rows) {
    if (row.at("engine") == "clevel") {
      EXPECT_EQ(row.at("properties").find("pmeh."), std::string::npos) << row.at("properties");
      EXPECT_EQ(row.at("options").find("pmeh."), std::string::npos) << row.at("options");
      continue;
    }
    EXPECT_NE(row.at("properties").find("pmeh.bytes_moved="), std::string::npos)
        << row.at("series");
    EXPECT_NE(row.at("properties").find("pmeh.segments="), std::string::npos) << row.at("series");
    const std::string& options = row.at("options");
    const std::size_t k = options.find("pmeh.split_bits=");
    const std::size_t on = options.find("pmeh.opportunistic=");
    ASSERT_NE(k, std::string::npos) << options;
    ASSERT_NE(on, std::string::npos) << options;
    // The values as given: "-o pmeh.opportunistic=on,off".
    const std::string value = options.substr(on + 19, options.find(' ', on) - (on + 19));
    EXPECT_EQ(row.at("series"),
              "pmeh split_bits=" + options.substr(k + 16, 1) + " opportunistic=" + value);
  }
}

// nehash reports the slots its splits copy too, so that the data-movement
// figure compares it with pmeh (18 bytes per slot, as pmeh counts them).
TEST_F(PmehBench, NehashLoadReportsTheSlotsItsSplitsMove) {
  const std::string json_path = dir_ + "/out.json";
  constexpr std::uint64_t kRecords = 2000;
  const SpawnResult r = bench({"--engine", "nehash", "-o", "nehash.bucket_bits=1",
                               "--workload", "load", "--threads", "1", "--records",
                               std::to_string(kRecords), "--json", json_path});
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  const json doc = read_json(json_path);
  ASSERT_EQ(doc["runs"].size(), 1u);
  const json& load = doc["runs"][0]["load"];
  const auto items = load["properties"]["nehash.items_moved"].get<std::uint64_t>();
  EXPECT_GT(load["properties"]["nehash.splits"].get<std::uint64_t>(), 0u);
  EXPECT_GT(items, 0u);
  // A split copies the upper half of one group: each key moves at most once
  // per depth it goes through, far fewer than 20 times at this size.
  EXPECT_LT(items, 20 * kRecords);
  EXPECT_EQ(load["properties"]["nehash.bytes_moved"].get<std::uint64_t>(), 18 * items);
  EXPECT_FALSE(load["properties"].contains("pmeh.segments")) << "segments are pmeh's";
}

// The split-step sweep (§13.4, gradual split latency): each B its store.
TEST_F(PmehBench, SplitStepSweepCreatesEachStoreWithItsStep) {
  const std::string json_path = dir_ + "/out.json";
  const SpawnResult r = bench({"--engine", "pmeh", "-o", "pmeh.split_step=0,1,16",
                               "--workload", "insert", "--records", "300", "--ops", "600",
                               "--json", json_path});
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  const json doc = read_json(json_path);
  ASSERT_EQ(doc["runs"].size(), 3u);
  std::set<unsigned> steps;
  for (const json& run : doc["runs"]) {
    const unsigned b = run["options"]["pmeh_split_step"];
    steps.insert(b);
    EXPECT_EQ(run["series"], "pmeh split_step=" + std::to_string(b));
    EXPECT_EQ(run["options"]["pmeh_split_bits"], std::stoul(Options{}.value("pmeh.split_bits")));
    // The run phase inserted 600 new keys into a store that splits.
    const json& phase = run["run"];
    EXPECT_EQ(phase["latency_ns"]["insert"]["count"], 600) << b;
    EXPECT_GT(phase["properties"]["pmeh.bytes_moved"].get<std::uint64_t>(), 0u) << b;
  }
  EXPECT_EQ(steps, (std::set<unsigned>{0, 1, 16}));
}

// Reads go to the owners with -o pmeh.delegate_reads=true, and are optimistic
// (never delegated) without it.
TEST_F(PmehBench, DelegateReadsSendsEveryReadToAnOwner) {
  for (const bool delegate : {false, true}) {
    const std::string json_path = dir_ + "/out.json";
    std::vector<std::string> args = {"--engine", "pmeh", "--workload", "read", "--records",
                                     "300", "--ops", "1000", "--json", json_path};
    if (delegate) args.insert(args.end(), {"-o", "pmeh.delegate_reads=true"});
    const SpawnResult r = bench(args);
    ASSERT_EQ(r.exit_code, 0) << describe(r);
    const json doc = read_json(json_path);
    ASSERT_EQ(doc["runs"].size(), 1u);
    const json& run = doc["runs"][0];
    EXPECT_EQ(run["options"]["pmeh_delegate_reads"], delegate);
    EXPECT_EQ(run["series"], "pmeh");
    const auto delegated = run["run"]["properties"]["pmeh.delegated_ops"].get<std::uint64_t>();
    if (delegate) {
      EXPECT_GE(delegated, 1000u);
    } else {
      EXPECT_EQ(delegated, 0u);
    }
  }
}

// --reopen reports pmeh's segments after the clean and the crash open.
TEST_F(PmehBench, ReopenReportsTheSegmentsOfBothOpens) {
  const std::string json_path = dir_ + "/out.json";
  const std::string csv_path = dir_ + "/out.csv";
  constexpr std::uint64_t kRecords = 600;
  const SpawnResult r = bench({"--engine", "pmeh", "--reopen",
                               "--workload", "load", "--records", std::to_string(kRecords),
                               "--json", json_path, "--csv", csv_path});
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  const json doc = read_json(json_path);
  ASSERT_EQ(doc["runs"].size(), 1u);
  const json& run = doc["runs"][0];
  const json& reopen = run["reopen"];
  ASSERT_TRUE(reopen.is_object());
  const json& segments = run["load"]["properties"]["pmeh.segments"];
  EXPECT_EQ(reopen["clean"]["properties"]["pmeh.segments"], segments);
  EXPECT_GT(reopen["clean"]["properties"]["pmeh.segments"].get<std::uint64_t>(), 2u);
  ASSERT_TRUE(reopen["crash"].is_object());
  EXPECT_EQ(reopen["crash"]["properties"]["pmeh.segments"], segments);
  EXPECT_EQ(reopen["crash"]["items"], kRecords);
  EXPECT_GT(reopen["crash"]["open_ns"].get<std::uint64_t>(), 0u);
  const auto rows = read_csv(csv_path);
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].at("reopen_items"), std::to_string(kRecords));
  EXPECT_NE(r.out.find(", pmeh.segments " + std::to_string(segments.get<std::uint64_t>()) + ","),
            std::string::npos)
      << r.out;
}

TEST_F(PmehBench, PmehOptionsWithoutPmehOrWithBadValuesAreUsageErrors) {
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"--engine", "clevel", "-o", "pmeh.split_bits=2"},
        std::vector<std::string>{"--engine", "clevel", "-o", "pmeh.split_step=4"},
        std::vector<std::string>{"--engine", "nehash", "-o", "pmeh.opportunistic=off"},
        std::vector<std::string>{"--engine", "clevel", "-o", "pmeh.delegate_reads=true"},
        std::vector<std::string>{"--engine", "clevel", "-o", "pmeh.workers=2"},
        std::vector<std::string>{"--engine", "clevel", "-o", "pmeh.segment_kib=8"},
        std::vector<std::string>{"--engine", "clevel", "-o", "pmeh.zone_bits=2"},
        std::vector<std::string>{"--engine", "pmeh", "-o", "pmeh.zone_bits=9"},
        std::vector<std::string>{"--engine", "pmeh", "-o", "pmeh.split_bits=4"},
        std::vector<std::string>{"--engine", "pmeh", "-o", "pmeh.split_bits=0,2"},
        std::vector<std::string>{"--engine", "pmeh", "-o", "pmeh.split_step=256"},
        std::vector<std::string>{"--engine", "pmeh", "-o", "pmeh.opportunistic=maybe"},
        std::vector<std::string>{"--engine", "pmeh", "-o", "pmeh.segment_kib=12"},
        std::vector<std::string>{"--engine", "pmeh", "-o", "pmeh.workers=65"},
        std::vector<std::string>{"--engine", "pmeh", "-o", "pmeh.zone_bit=2"},
        std::vector<std::string>{"--engine", "pmeh", "-o", "pmeh.zone_bits"}}) {
    std::vector<std::string> full = args;
    full.insert(full.end(), {"--workload", "load", "--records", "100"});
    const SpawnResult r = bench(full);
    EXPECT_EQ(r.exit_code, 2) << describe(r);
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << describe(r);
    EXPECT_NE(r.err.find("pmeh."), std::string::npos) << describe(r);
  }
  // An unknown option names the engine's options; a name of no engine, the engines.
  const SpawnResult typo = bench({"--engine", "pmeh", "-o", "pmeh.zone_bit=2", "--workload", "load"});
  EXPECT_NE(typo.err.find("its options: pmeh.zone_bits, "), std::string::npos) << describe(typo);
  const SpawnResult none = bench({"--engine", "clevel", "-o", "nosuch.x=2", "--workload", "load"});
  EXPECT_EQ(none.exit_code, 2) << describe(none);
  EXPECT_NE(none.err.find("names no engine"), std::string::npos) << describe(none);
}

// pmeh is a finished engine: listed, accepted by name and part of "pmhash".
TEST_F(PmehBench, PmehIsListedAndAcceptedByName) {
  const SpawnResult list = run_program(PMHASH_BENCH_PATH, {"--list-engines"});
  ASSERT_EQ(list.exit_code, 0) << describe(list);
  EXPECT_NE(list.out.find("pmeh\n"), std::string::npos) << list.out;
  const SpawnResult r = bench({"--engine", "pmeh", "--workload", "load", "--records", "100"});
  EXPECT_EQ(r.exit_code, 0) << describe(r);
  const SpawnResult help = run_program(PMHASH_BENCH_PATH, {"--help"});
  ASSERT_EQ(help.exit_code, 0) << describe(help);
  EXPECT_NE(help.out.find("pmeh"), std::string::npos) << help.out;
  EXPECT_EQ(help.out.find("(in progress)"), std::string::npos) << help.out;
  EXPECT_NE(help.out.find("NAME=VALUE"), std::string::npos) << help.out;
}

// The pool the table sizes for pmeh leaves room for a split in flight in
// every zone, with the largest segments and k = 3 when the options leave
// them open, on top of the generic estimate for the keys it holds at most.
TEST(PmehPool, TheDefaultPoolHasRoomForSplitsInFlight) {
  TableConfig config;
  config.key_size = 8;
  config.value_size = 8;
  config.capacity_hint = 20'000'000;
  config.max_keys = 10'000'000;
  const std::uint64_t generic = generic_pool_bytes(PoolDemand{10'000'000, 8, 8});
  const std::uint64_t pmeh = PmhashTable::default_pool_size("pmeh", config);
  EXPECT_EQ(pmeh, generic + 256 * (std::uint64_t{64} << 10) * 9);
  config.engine_options = {{"pmeh.segment_kib", "4"}, {"pmeh.split_bits", "1"}};
  EXPECT_EQ(PmhashTable::default_pool_size("pmeh", config),
            generic + 256 * (std::uint64_t{4} << 10) * 3);
  // An engine without an estimate of its own gets the generic one, for
  // every key the run names.
  EXPECT_EQ(PmhashTable::default_pool_size("clevel", config),
            generic_pool_bytes(PoolDemand{20'000'000, 8, 8}));
}

}  // namespace
}  // namespace pmhash::bench
