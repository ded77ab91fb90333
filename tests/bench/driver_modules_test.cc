// tests/bench/driver_modules_test.cc - the runs pmhash-bench hands to its
// modules: the micro workload (bench/microbench.h) and the engines that
// live on memory nodes (bench/remote_bench.h). Each writes the
// pmhash-bench/1 document with one run per table, thread count and
// repetition (or per engine, transport, client count and workload), every
// phase counting the operations it was given; bad combinations are one-line
// usage errors. No timing is asserted.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "pmhash/store.h"
#include "scratch_file.h"
#include "subprocess.h"

namespace {

using nlohmann::json;
using pmhash::testing::run_program;
using pmhash::testing::SpawnResult;

class DriverModules : public ::testing::Test {
 protected:
  SpawnResult bench(const std::vector<std::string>& args) {
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

  static bool one_line(const std::string& text) {
    return !text.empty() && text.find('\n') == text.size() - 1;
  }

  pmhash::testing::ScratchDir scratch_{"pmhash-bench-modules"};
  const std::string dir_ = scratch_.str();
};

TEST_F(DriverModules, MicroWorkloadWritesEveryPhaseOfEveryTableThreadAndRepetition) {
  constexpr std::uint64_t kRecords = 3000;
  const std::string engine = pmhash::Store::engines().front();
  const std::string json_path = dir_ + "/micro.json";
  const SpawnResult r = bench({"--workload", "micro", "--engine", engine + ",libcuckoo",
                               "--records", std::to_string(kRecords), "--threads", "1,2",
                               "--repeat", "2", "--pool", dir_, "--json", json_path});
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  EXPECT_NE(r.out.find("all checks passed"), std::string::npos) << r.out;

  const json doc = read_json(json_path);
  ASSERT_TRUE(doc.is_object());
  EXPECT_EQ(doc["format"], "pmhash-bench/1");
  EXPECT_EQ(doc["config"]["workloads"], json::array({"micro"}));
  ASSERT_EQ(doc["runs"].size(), 2u * 2u * 2u);  // tables x thread counts x repetitions
  unsigned pmhash_runs = 0;
  for (const json& run : doc["runs"]) {
    const bool is_pmhash = run["engine"] == engine;
    pmhash_runs += is_pmhash ? 1 : 0;
    EXPECT_EQ(run["kind"], is_pmhash ? "pmhash" : "peer");
    EXPECT_EQ(run["workload"], "micro");
    ASSERT_EQ(run["phases"].size(), 5u);
    for (const json& phase : run["phases"]) {
      EXPECT_EQ(phase["ops"].get<std::uint64_t>(), kRecords) << phase["name"];
      EXPECT_GT(phase["ops_per_s"].get<double>(), 0) << phase["name"];
      EXPECT_EQ(phase["flushes_per_op"].is_null(), !is_pmhash) << phase["name"];
    }
    if (is_pmhash) {
      EXPECT_EQ(run["after_insert"]["items"].get<std::uint64_t>(), kRecords);
    } else {
      EXPECT_TRUE(run["after_insert"].is_null());
    }
  }
  EXPECT_EQ(pmhash_runs, 4u);
}

// -o reaches the micro workload's stores as it reaches every store; a
// sweep is one series per value (two sweeps: per combination), each
// compared with a libcuckoo run that starts with as many slots as its
// store, one libcuckoo run per distinct start in a repetition.
TEST_F(DriverModules, MicroWorkloadSweepsEngineOptionsAsSeries) {
  const std::string json_path = dir_ + "/micro-sweep.json";
  const SpawnResult r =
      bench({"--workload", "micro", "--engine", "clevel,libcuckoo", "--records", "2000",
             "--threads", "1", "--repeat", "1", "-o", "clevel.initial_level_log2=4,5", "-o",
             "clevel.tag_filter=true,false", "--pool", dir_, "--json", json_path});
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  const json doc = read_json(json_path);
  ASSERT_TRUE(doc.is_object());
  std::map<std::string, std::uint64_t> pmhash_slots;  // series -> initial slots
  std::set<std::uint64_t> cuckoo_slots;
  for (const json& run : doc["runs"]) {
    if (run["kind"] == "peer") {
      EXPECT_EQ(run["series"], "libcuckoo");
      EXPECT_TRUE(cuckoo_slots.insert(run["initial_slots"].get<std::uint64_t>()).second)
          << "two libcuckoo runs with one start in a repetition";
      continue;
    }
    const std::string series = run["series"].get<std::string>();
    const auto log2 = run["options"]["clevel_initial_level_log2"].get<unsigned>();
    const bool filter = run["options"]["clevel_tag_filter"].get<bool>();
    EXPECT_EQ(series, "clevel initial_level_log2=" + std::to_string(log2) +
                          " tag_filter=" + (filter ? "true" : "false"));
    pmhash_slots[series] = run["initial_slots"].get<std::uint64_t>();
  }
  ASSERT_EQ(pmhash_slots.size(), 4u);
  EXPECT_EQ(cuckoo_slots.size(), 2u);
  for (const auto& [series, slots] : pmhash_slots) {
    EXPECT_EQ(cuckoo_slots.count(slots), 1u) << series;
  }
  EXPECT_LT(pmhash_slots["clevel initial_level_log2=4 tag_filter=true"],
            pmhash_slots["clevel initial_level_log2=5 tag_filter=true"]);
  EXPECT_EQ(doc["config"]["engine_options"],
            json::array({"clevel.initial_level_log2=4,5", "clevel.tag_filter=true,false"}));
}

TEST_F(DriverModules, MicroWorkloadEngineOptionErrorsAreOneLineUsageErrors) {
  for (const char* option :
       {"clevel.initial_level_log2=99", "clevel.no_such=1", "nosuch.x=1", "nehash.bucket_bits=6",
        "clevel.tag_filter"}) {
    const SpawnResult r = bench({"--workload", "micro", "--engine", "clevel,libcuckoo", "-o",
                                 option, "--records", "100", "--pool", dir_});
    EXPECT_EQ(r.exit_code, 2) << option << "\n" << describe(r);
    EXPECT_TRUE(one_line(r.err)) << option << "\n" << describe(r);
  }
}

TEST_F(DriverModules, MicroWorkloadRunsAloneWithOnePmhashEngine) {
  const std::string engine = pmhash::Store::engines().front();
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"--workload", "micro,a", "--engine", engine},
        std::vector<std::string>{"--workload", "micro", "--engine", "libcuckoo"},
        std::vector<std::string>{"--workload", "micro", "--engine", engine + "," + engine}}) {
    const SpawnResult r = bench(args);
    EXPECT_EQ(r.exit_code, 2) << describe(r);
    EXPECT_TRUE(one_line(r.err)) << describe(r);
  }
}

TEST_F(DriverModules, MemoryNodeEnginesRunWithClientProcesses) {
  const std::vector<std::string> remote = pmhash::Store::remote_engines();
  ASSERT_FALSE(remote.empty());
  constexpr std::uint64_t kRecords = 2000;
  const std::string json_path = dir_ + "/remote.json";
  const std::string csv_path = dir_ + "/remote.csv";
  const SpawnResult r = bench({"--engine", remote.front(), "--transport", "shm", "--threads", "1,2",
                               "--workload", "insert,read", "--records", std::to_string(kRecords),
                               "--key-size", "8", "--value-size", "8", "--node-size", "64M",
                               "--pool", dir_, "--json", json_path, "--csv", csv_path});
  ASSERT_EQ(r.exit_code, 0) << describe(r);

  const json doc = read_json(json_path);
  ASSERT_TRUE(doc.is_object());
  EXPECT_EQ(doc["format"], "pmhash-bench/1");
  ASSERT_EQ(doc["runs"].size(), 4u);  // client counts x workloads
  for (const json& run : doc["runs"]) {
    EXPECT_EQ(run["engine"], remote.front());
    EXPECT_EQ(run["kind"], "memnode");
    EXPECT_EQ(run["transport"], "shm");
    const bool insert = run["workload"] == "insert";
    const json& phase = insert ? run["load"] : run["run"];
    ASSERT_TRUE(phase.is_object()) << run;
    EXPECT_TRUE((insert ? run["run"] : run["load"]).is_null()) << run;
    EXPECT_EQ(phase["ops"].get<std::uint64_t>(), kRecords) << run;
    EXPECT_GT(phase["round_trips_per_op"].get<double>(), 0) << run;
  }
  std::ifstream csv(csv_path);
  std::string header;
  std::getline(csv, header);
  EXPECT_EQ(header.rfind("engine,transport,latency_ns,clients,workload,ops,mops,", 0), 0u) << header;
}

TEST_F(DriverModules, MemoryNodeEnginesRefuseOtherEnginesAndWorkloads) {
  const std::string remote = pmhash::Store::remote_engines().front();
  const std::string local = pmhash::Store::engines().front();
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"--engine", remote + "," + local, "--workload", "insert"},
        std::vector<std::string>{"--engine", remote, "--workload", "txn"},
        std::vector<std::string>{"--engine", remote, "--workload", "insert", "--key-size", "4"},
        // Engine options: checked before any node is made, one value each.
        std::vector<std::string>{"--engine", remote, "--workload", "insert", "-o",
                                 remote + ".no_such=1"},
        std::vector<std::string>{"--engine", remote, "--workload", "insert", "-o", "nosuch.x=1"},
        std::vector<std::string>{"--engine", remote, "--workload", "insert", "-o",
                                 local + ".x=1"}}) {
    const SpawnResult r = bench(args);
    EXPECT_EQ(r.exit_code, 2) << describe(r);
    EXPECT_TRUE(one_line(r.err)) << describe(r);
  }
}

}  // namespace
