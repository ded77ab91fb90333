// tests/bench/pmeh_bench_test.cc - what pmhash-bench gained for pmeh
// (docs/design/pmeh.md §13.4): the engine listed and by name, the
// --pmeh-split-bits / --pmeh-split-step / --pmeh-opportunistic sweeps (one
// series per value, each store really made with it), the set-once
// flags, the data-movement fields of the JSON, the CSV and the table, the
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
      if (std::find(args.begin(), args.end(), "--pmeh-zone-bits") == args.end()) {
        args.insert(args.end(), {"--pmeh-zone-bits", "1"});
      }
      if (std::find(args.begin(), args.end(), "--pmeh-segment-kib") == args.end()) {
        args.insert(args.end(), {"--pmeh-segment-kib", "4"});
      }
      if (std::find(args.begin(), args.end(), "--pmeh-workers") == args.end()) {
        args.insert(args.end(), {"--pmeh-workers", "1"});
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
  const SpawnResult r = bench({"--engine", "pmeh,clevel", "--pmeh-split-bits", "1,3",
                               "--pmeh-opportunistic", "on,off", "--pmeh-segment-kib", "4",
                               "--pmeh-workers", "2", "--workload", "load", "--threads", "2",
                               "--records", std::to_string(kRecords), "--json", json_path,
                               "--csv", csv_path});
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  const json doc = read_json(json_path);
  EXPECT_EQ(doc["config"]["pmeh_split_bits"], json({1, 3}));
  EXPECT_EQ(doc["config"]["pmeh_opportunistic"], json({"on", "off"}));
  EXPECT_EQ(doc["config"]["pmeh_segment_kib"], 4);
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
    EXPECT_EQ(name, "pmeh k=" + std::to_string(k) + (on ? " switch=on" : " switch=off"));
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
  EXPECT_EQ(series, (std::set<std::string>{"clevel", "pmeh k=1 switch=on", "pmeh k=1 switch=off",
                                           "pmeh k=3 switch=on", "pmeh k=3 switch=off"}));
  EXPECT_NE(r.out.find("pmeh.bytes_moved "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("pmeh k=3 switch=off"), std::string::npos) << r.out;
  const auto rows = read_csv(csv_path);
  ASSERT_EQ(rows.size(), 5u);
  for (const auto& row : rows) {
    if (row.at("engine") == "clevel") {
      EXPECT_EQ(row.at("properties").find("pmeh."), std::string::npos) << row.at("properties");
      EXPECT_EQ(row.at("pmeh_split_bits"), "");
      continue;
    }
    EXPECT_NE(row.at("properties").find("pmeh.bytes_moved="), std::string::npos)
        << row.at("series");
    EXPECT_NE(row.at("properties").find("pmeh.segments="), std::string::npos) << row.at("series");
    EXPECT_EQ(row.at("series"), "pmeh k=" + row.at("pmeh_split_bits") + " switch=" +
                                    row.at("pmeh_opportunistic"));
  }
}

// nehash reports the slots its splits copy too, so that the data-movement
// figure compares it with pmeh (18 bytes per slot, as pmeh counts them).
TEST_F(PmehBench, NehashLoadReportsTheSlotsItsSplitsMove) {
  const std::string json_path = dir_ + "/out.json";
  constexpr std::uint64_t kRecords = 2000;
  const SpawnResult r = bench({"--engine", "nehash", "--nehash-bucket-bits", "1",
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
  const SpawnResult r = bench({"--engine", "pmeh", "--pmeh-split-step", "0,1,16",
                               "--workload", "insert", "--records", "300", "--ops", "600",
                               "--json", json_path});
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  const json doc = read_json(json_path);
  ASSERT_EQ(doc["runs"].size(), 3u);
  std::set<unsigned> steps;
  for (const json& run : doc["runs"]) {
    const unsigned b = run["options"]["pmeh_split_step"];
    steps.insert(b);
    EXPECT_EQ(run["series"], "pmeh B=" + std::to_string(b));
    EXPECT_EQ(run["options"]["pmeh_split_bits"], Options{}.pmeh_split_bits);
    // The run phase inserted 600 new keys into a store that splits.
    const json& phase = run["run"];
    EXPECT_EQ(phase["latency_ns"]["insert"]["count"], 600) << b;
    EXPECT_GT(phase["properties"]["pmeh.bytes_moved"].get<std::uint64_t>(), 0u) << b;
  }
  EXPECT_EQ(steps, (std::set<unsigned>{0, 1, 16}));
}

// Reads go to the owners with --pmeh-delegate-reads, and are optimistic
// (never delegated) without it.
TEST_F(PmehBench, DelegateReadsSendsEveryReadToAnOwner) {
  for (const bool delegate : {false, true}) {
    const std::string json_path = dir_ + "/out.json";
    std::vector<std::string> args = {"--engine", "pmeh", "--workload", "read", "--records",
                                     "300", "--ops", "1000", "--json", json_path};
    if (delegate) args.push_back("--pmeh-delegate-reads");
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

TEST_F(PmehBench, PmehFlagsWithoutPmehOrWithBadValuesAreUsageErrors) {
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"--engine", "clevel", "--pmeh-split-bits", "2"},
        std::vector<std::string>{"--engine", "clevel", "--pmeh-split-step", "4"},
        std::vector<std::string>{"--engine", "nehash", "--pmeh-opportunistic", "off"},
        std::vector<std::string>{"--engine", "clevel", "--pmeh-delegate-reads"},
        std::vector<std::string>{"--engine", "clevel", "--pmeh-workers", "2"},
        std::vector<std::string>{"--engine", "clevel", "--pmeh-segment-kib", "8"},
        std::vector<std::string>{"--engine", "clevel", "--pmeh-zone-bits", "2"},
        std::vector<std::string>{"--engine", "pmeh", "--pmeh-zone-bits", "9"},
        std::vector<std::string>{"--engine", "pmeh", "--pmeh-split-bits", "4"},
        std::vector<std::string>{"--engine", "pmeh", "--pmeh-split-bits", "0,2"},
        std::vector<std::string>{"--engine", "pmeh", "--pmeh-split-step", "256"},
        std::vector<std::string>{"--engine", "pmeh", "--pmeh-opportunistic", "maybe"},
        std::vector<std::string>{"--engine", "pmeh", "--pmeh-segment-kib", "12"},
        std::vector<std::string>{"--engine", "pmeh", "--pmeh-workers", "0"}}) {
    std::vector<std::string> full = args;
    full.insert(full.end(), {"--workload", "load", "--records", "100"});
    const SpawnResult r = bench(full);
    EXPECT_EQ(r.exit_code, 2) << describe(r);
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << describe(r);
    EXPECT_NE(r.err.find("--pmeh-"), std::string::npos) << describe(r);
  }
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
  for (const char* flag : {"--pmeh-workers", "--pmeh-split-bits", "--pmeh-split-step",
                           "--pmeh-opportunistic", "--pmeh-delegate-reads", "--pmeh-segment-kib"}) {
    EXPECT_NE(help.out.find(flag), std::string::npos) << flag;
  }
}

// The pool the table sizes for pmeh leaves room for a split in flight in
// every zone with the largest segments and k = 3, on top of clevel's.
TEST(PmehPool, TheDefaultPoolHasRoomForSplitsInFlight) {
  TableConfig config;
  config.key_size = 8;
  config.value_size = 8;
  config.capacity_hint = 20'000'000;
  config.max_keys = 10'000'000;
  const std::uint64_t clevel = PmhashTable::default_pool_size("clevel", config);
  const std::uint64_t pmeh = PmhashTable::default_pool_size("pmeh", config);
  EXPECT_GE(pmeh, clevel + 256 * (std::uint64_t{64} << 10) * 9);
  config.pmeh_segment_kib = 4;
  config.pmeh_split_bits = 1;
  EXPECT_EQ(PmhashTable::default_pool_size("pmeh", config), clevel + 256 * (std::uint64_t{4} << 10) * 3);
}

}  // namespace
}  // namespace pmhash::bench
