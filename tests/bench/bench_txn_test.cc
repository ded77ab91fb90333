// tests/bench/bench_txn_test.cc - pmhash-bench's txn workload and engine
// naming, run as a child process at tiny sizes: transactions on dali, LMDB
// and RocksDB all commit and are reported as such; engines without
// transactions are skipped with a note, not failed; an engine still in
// progress can be named; bad flag combinations give a one-line error and
// exit status 2. No timing is asserted.
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
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

class BenchTxn : public ::testing::Test {
 protected:
  SpawnResult bench(std::vector<std::string> args) {
    args.insert(args.end(), {"--pool", dir_, "--no-ceilings"});
    return run_program(PMHASH_BENCH_PATH, args);
  }

  json read_json() const {
    std::ifstream in(json_path());
    EXPECT_TRUE(in.good()) << json_path();
    return json::parse(in, nullptr, /*allow_exceptions=*/false);
  }

  std::string json_path() const { return dir_ + "/out.json"; }

  pmhash::testing::ScratchDir scratch_{"pmhash-bench-txn"};
  const std::string dir_ = scratch_.str();
};

std::string describe(const SpawnResult& r) {
  return "exit " + std::to_string(r.exit_code) + "\nstdout:\n" + r.out + "\nstderr:\n" + r.err;
}

TEST_F(BenchTxn, TransactionsOnDaliLmdbAndRocksdbAllCommitAndAreReported) {
  constexpr std::uint64_t kRecords = 2000;
  constexpr std::uint64_t kTxns = 2000;
  const SpawnResult r =
      bench({"--engine", "dali:epoch,dali:strict,lmdb,rocksdb", "--workload", "txn", "--records",
             std::to_string(kRecords), "--ops", std::to_string(kTxns), "--threads", "2",
             "--json", json_path()});
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  const json doc = read_json();
  EXPECT_EQ(doc["config"]["engines"],
            json({"dali:epoch", "dali:strict", "lmdb", "rocksdb"}));
  EXPECT_TRUE(doc["skipped"].empty()) << doc["skipped"];
  ASSERT_EQ(doc["runs"].size(), 4u);
  std::set<std::string> modes;
  for (const json& run : doc["runs"]) {
    const std::string where = run["engine"].get<std::string>() + " " +
                              run["durability_mode"].get<std::string>();
    modes.insert(where);
    EXPECT_EQ(run["workload"], "txn") << where;
    EXPECT_EQ(run["load"]["outcomes"]["ok"].get<std::uint64_t>(), kRecords) << where;
    const json& phase = run["run"];
    ASSERT_TRUE(phase.is_object()) << where;
    EXPECT_EQ(phase["ops"].get<std::uint64_t>(), kTxns) << where;
    EXPECT_DOUBLE_EQ(phase["mix"]["txn"].get<double>(), 1.0) << where;
    EXPECT_EQ(phase["outcomes"]["ok"].get<std::uint64_t>(), kTxns) << where;
    EXPECT_EQ(phase["outcomes"]["not_found"].get<std::uint64_t>(), 0u) << where;
    EXPECT_EQ(phase["latency_ns"]["txn"]["count"].get<std::uint64_t>(), kTxns) << where;
    EXPECT_EQ(phase["latency_ns"]["all"]["count"].get<std::uint64_t>(), kTxns) << where;
    const json& txn = phase["transactions"];
    ASSERT_TRUE(txn.is_object()) << where;
    EXPECT_EQ(txn["committed"].get<std::uint64_t>(), kTxns) << where;
    EXPECT_EQ(txn["reads_per_txn"].get<unsigned>(), 3u) << where;
    EXPECT_EQ(txn["writes_per_txn"].get<unsigned>(), 1u) << where;
    ASSERT_TRUE(txn["aborts"].is_number_unsigned()) << where;
    ASSERT_TRUE(txn["retried"].is_number_unsigned()) << where;
    EXPECT_LE(txn["retried"].get<std::uint64_t>(), txn["aborts"].get<std::uint64_t>()) << where;
    if (run["engine"] == "lmdb") {
      EXPECT_EQ(txn["aborts"].get<std::uint64_t>(), 0u) << where;  // one writer at a time
    }
    // The load phase is not a transaction phase.
    EXPECT_TRUE(run["load"]["transactions"].is_null()) << where;
  }
  EXPECT_EQ(modes, (std::set<std::string>{"dali epoch", "dali strict", "lmdb strict",
                                          "rocksdb strict"}));
  EXPECT_NE(r.out.find("== workload txn"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("aborts"), std::string::npos) << r.out;
}

TEST_F(BenchTxn, EnginesWithoutTransactionsAreSkippedWithANote) {
  const SpawnResult r = bench({"--engine", "clevel,libcuckoo,lmdb", "--workload", "txn,c",
                               "--records", "500", "--ops", "500", "--threads", "1",
                               "--json", json_path()});
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  const json doc = read_json();
  std::set<std::string> skipped;
  for (const json& s : doc["skipped"]) {
    EXPECT_EQ(s["workload"], "txn");
    EXPECT_EQ(s["threads"], 1);
    EXPECT_FALSE(s["reason"].get<std::string>().empty());
    skipped.insert(s["engine"]);
  }
  EXPECT_EQ(skipped, (std::set<std::string>{"clevel", "libcuckoo"}));
  // txn: lmdb only; c: all three.
  std::multiset<std::string> runs;
  for (const json& run : doc["runs"]) runs.insert(run["workload"].get<std::string>());
  EXPECT_EQ(runs.count("txn"), 1u);
  EXPECT_EQ(runs.count("c"), 3u);
  EXPECT_NE(r.out.find("clevel         1  skipped: "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("libcuckoo      1  skipped: "), std::string::npos) << r.out;
}

// "pmhash" and "all" mean the finished engines only; any other engine
// Store::create accepts is taken by name.
TEST_F(BenchTxn, PmhashMeansTheListedEnginesAndOthersCanBeNamed) {
  const SpawnResult r = bench({"--engine", "pmhash,dali", "--workload", "load", "--records",
                               "300", "--json", json_path()});
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  std::vector<std::string> expected = pmhash::Store::engines();
  if (std::find(expected.begin(), expected.end(), "dali") == expected.end()) {
    expected.push_back("dali");
  }
  const json doc = read_json();
  std::vector<std::string> ran;
  for (const json& run : doc["runs"]) ran.push_back(run["engine"]);
  EXPECT_EQ(ran, expected);
}

TEST_F(BenchTxn, BadCombinationsGiveOneLineErrorsAndExitTwo) {
  const std::vector<std::vector<std::string>> cases = {
      {"--workload", "txn", "--records", "3"},   // fewer records than keys per transaction
      {"--engine", "dali:sometimes"},            // durability must be strict or epoch
      {"--engine", "nosuch:epoch"},              // unknown engine with a durability
      {"--engine", "nosuch"},
      {"--workload", "txn", "--lock-timeout-ms", "0"},
  };
  for (const auto& args : cases) {
    const SpawnResult r = bench(args);
    const std::string what = args[0] + " " + args[1] + (args.size() > 2 ? " " + args[2] : "");
    EXPECT_EQ(r.exit_code, 2) << what << "\n" << describe(r);
    EXPECT_TRUE(r.out.empty()) << what << "\n" << describe(r);
    ASSERT_FALSE(r.err.empty()) << what;
    EXPECT_EQ(r.err.find('\n'), r.err.size() - 1) << what << ": not one line: " << r.err;
    EXPECT_EQ(r.err.rfind("pmhash-bench: ", 0), 0u) << r.err;
  }
  EXPECT_TRUE(std::filesystem::is_empty(dir_));
}

}  // namespace
