// tests/bench/bench_smoke_test.cc - pmhash-bench run as a child process at
// tiny sizes: every workload for every engine and peer completes, the JSON
// and CSV hold every field with consistent counts, and bad flags give a
// one-line error and a non-zero exit. No timing is asserted.
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "pmhash/engines.h"
#include "pmhash/store.h"
#include "scratch_file.h"
#include "subprocess.h"

namespace {

using nlohmann::json;
using pmhash::testing::run_program;
using pmhash::testing::SpawnResult;

const std::vector<std::string> kWorkloads = {"load",   "a",      "b",        "c",
                                             "d",      "f",      "insert",   "read",
                                             "read-neg", "update", "delete", "mixed:40/20/20/20"};
const std::vector<std::string> kPeers = {"libcuckoo", "tbb", "std", "lmdb", "rocksdb"};

// What --engine all runs: the finished pmhash engines, then the peers.
std::vector<std::string> all_engines() {
  std::vector<std::string> engines = pmhash::Store::engines();
  engines.insert(engines.end(), kPeers.begin(), kPeers.end());
  return engines;
}

bool is_pmhash_engine(const std::string& name) {
  const std::vector<std::string> engines = pmhash::Store::engines();
  return std::find(engines.begin(), engines.end(), name) != engines.end();
}

// A fresh directory under /dev/shm for one test's pools and files.
class BenchSmoke : public ::testing::Test {
 protected:
  SpawnResult bench(std::vector<std::string> args) {
    return run_program(PMHASH_BENCH_PATH, args);
  }

  static json read_json(const std::string& path) {
    std::ifstream in(path);
    EXPECT_TRUE(in.good()) << path;
    return json::parse(in, nullptr, /*allow_exceptions=*/false);
  }

  pmhash::testing::ScratchDir scratch_{"pmhash-bench-smoke"};
  const std::string dir_ = scratch_.str();
};

std::string joined(const std::vector<std::string>& items) {
  std::string out;
  for (const std::string& s : items) out += (out.empty() ? "" : ",") + s;
  return out;
}

std::string describe(const SpawnResult& r) {
  return "exit " + std::to_string(r.exit_code) + "\nstdout:\n" + r.out + "\nstderr:\n" + r.err;
}

void expect_latency(const json& lat, std::uint64_t count, const std::string& where) {
  ASSERT_TRUE(lat.is_object()) << where;
  EXPECT_EQ(lat["count"].get<std::uint64_t>(), count) << where;
  const auto p50 = lat["p50"].get<std::uint64_t>();
  const auto p99 = lat["p99"].get<std::uint64_t>();
  const auto p999 = lat["p999"].get<std::uint64_t>();
  const auto max = lat["max"].get<std::uint64_t>();
  EXPECT_LE(p50, lat["p90"].get<std::uint64_t>()) << where;
  EXPECT_LE(lat["p90"].get<std::uint64_t>(), p99) << where;
  EXPECT_LE(p99, p999) << where;
  EXPECT_LE(p999, max) << where;
  std::uint64_t total = 0;
  std::uint64_t previous = 0;
  for (const json& bucket : lat["histogram"]) {
    EXPECT_GE(bucket[0].get<std::uint64_t>(), previous) << where;
    previous = bucket[0].get<std::uint64_t>();
    total += bucket[1].get<std::uint64_t>();
  }
  EXPECT_EQ(total, count) << where;
}

void expect_phase(const json& phase, std::uint64_t ops, const std::string& where) {
  ASSERT_TRUE(phase.is_object()) << where;
  EXPECT_EQ(phase["ops"].get<std::uint64_t>(), ops) << where;
  EXPECT_GT(phase["seconds"].get<double>(), 0) << where;
  EXPECT_GT(phase["ops_per_s"].get<double>(), 0) << where;
  const json& o = phase["outcomes"];
  EXPECT_EQ(o["ok"].get<std::uint64_t>() + o["not_found"].get<std::uint64_t>() +
                o["already_exists"].get<std::uint64_t>(),
            ops)
      << where;
  double mix = 0;
  for (const char* t : {"read", "update", "insert", "delete", "rmw"}) mix += phase["mix"][t].get<double>();
  EXPECT_NEAR(mix, 1.0, 1e-9) << where;
  expect_latency(phase["latency_ns"]["all"], ops, where + " all");
  std::uint64_t by_type = 0;
  for (const auto& [type, lat] : phase["latency_ns"].items()) {
    if (type != "all") by_type += lat["count"].get<std::uint64_t>();
  }
  EXPECT_EQ(by_type, ops) << where;
  EXPECT_DOUBLE_EQ(phase["timeseries"]["interval_s"].get<double>(), 0.1) << where;
  EXPECT_FALSE(phase["timeseries"]["ops_per_s"].empty()) << where;
  EXPECT_TRUE(phase["load_factor"].is_array()) << where;
  for (const char* field : {"ceiling_ops_per_s", "ceiling_fraction", "flushes_per_op",
                            "fences_per_op", "bytes_per_key", "bytes_kind", "properties",
                            "durable_every_ms",
                            "quiesce_s", "stream_exhausted"}) {
    EXPECT_TRUE(phase.contains(field)) << where << " lacks " << field;
  }
  EXPECT_GT(phase["ceiling_fraction"].get<double>(), 0) << where;
}

TEST_F(BenchSmoke, EveryWorkloadRunsForEveryEngineAndPeer) {
  constexpr std::uint64_t kRecords = 1500;
  constexpr std::uint64_t kOps = 2000;
  const std::string json_path = dir_ + "/out.json";
  const std::string csv_path = dir_ + "/out.csv";
  const SpawnResult r = bench({"--engine", "all", "--workload", joined(kWorkloads), "--records",
                               std::to_string(kRecords), "--ops", std::to_string(kOps),
                               "--threads", "2", "--pool", dir_, "--ceiling-region-mib", "16",
                               "--ceiling-seconds", "0.02", "--json", json_path, "--csv",
                               csv_path});
  ASSERT_EQ(r.exit_code, 0) << describe(r);

  const json doc = read_json(json_path);
  ASSERT_TRUE(doc.is_object());
  EXPECT_EQ(doc["format"], "pmhash-bench/1");
  EXPECT_NE(doc["command"].get<std::string>().find("--engine all"), std::string::npos);
  EXPECT_FALSE(doc["git_revision"].get<std::string>().empty());
  for (const char* field : {"hostname", "cpu_model", "cores", "memory_bytes", "kernel", "os"}) {
    EXPECT_TRUE(doc["machine"].contains(field)) << field;
  }
  EXPECT_EQ(doc["config"]["records"].get<std::uint64_t>(), kRecords);
  ASSERT_EQ(doc["ceilings"].size(), 1u);
  for (const char* field : {"dependent_reads_per_s", "independent_reads_per_s", "persists_per_s",
                            "seq_read_bytes_per_s", "seq_write_bytes_per_s"}) {
    EXPECT_GT(doc["ceilings"][0][field].get<double>(), 0) << field;
  }

  const std::vector<std::string> engines = all_engines();
  ASSERT_EQ(doc["runs"].size(), kWorkloads.size() * engines.size());
  std::map<std::string, std::set<std::string>> seen;  // workload -> engines
  for (const json& run : doc["runs"]) {
    const std::string engine = run["engine"];
    const std::string workload = run["workload"];
    const std::string where = engine + " " + workload;
    seen[workload].insert(engine);
    EXPECT_EQ(run["threads"].get<unsigned>(), 2u) << where;
    EXPECT_EQ(run["kind"], is_pmhash_engine(engine) ? "pmhash" : "peer") << where;
    EXPECT_FALSE(run["durability"].get<std::string>().empty()) << where;
    expect_phase(run["load"], kRecords, where + " load");
    EXPECT_EQ(run["load"]["outcomes"]["ok"].get<std::uint64_t>(), kRecords) << where;
    if (is_pmhash_engine(engine)) {
      EXPECT_GT(run["load"]["flushes_per_op"].get<double>(), 0) << where;
      EXPECT_EQ(run["load"]["bytes_kind"], "pool") << where;
    }
    if (workload == "load") {
      EXPECT_TRUE(run["run"].is_null()) << where;
      continue;
    }
    const std::uint64_t ops = workload == "delete" ? kRecords : kOps;
    expect_phase(run["run"], ops, where + " run");
    const json& outcomes = run["run"]["outcomes"];
    if (workload == "read-neg") {
      EXPECT_EQ(outcomes["not_found"].get<std::uint64_t>(), ops) << where;
    }
    if (workload == "insert" || workload == "delete" || workload == "c" || workload == "a") {
      EXPECT_EQ(outcomes["ok"].get<std::uint64_t>(), ops) << where;
    }
  }
  for (const std::string& w : kWorkloads) {
    EXPECT_EQ(seen[w].size(), engines.size()) << w;
  }

  std::ifstream csv(csv_path);
  std::size_t lines = 0;
  for (std::string line; std::getline(csv, line);) ++lines;
  EXPECT_EQ(lines, 1 + doc["runs"].size());
  EXPECT_NE(r.out.find("== workload mixed:40/20/20/20"), std::string::npos) << r.out;
}

// Epoch durability reports the interval between durability points it
// achieved: never shorter than the one asked for (the epoch worker and the
// peers' syncer wait that long between two), and null in strict mode.
TEST_F(BenchSmoke, EpochRunsReportTheDurabilityIntervalAchieved) {
  const std::string json_path = dir_ + "/out.json";
  const SpawnResult r = bench({"--engine", "dali,lmdb,clevel:strict", "--durability", "epoch",
                               "--epoch-ms", "20", "--workload", "a", "--records", "2000",
                               "--duration", "0.5", "--threads", "1", "--pool", dir_,
                               "--no-ceilings", "--json", json_path});
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  const json doc = read_json(json_path);
  ASSERT_EQ(doc["runs"].size(), 3u);
  for (const json& run : doc["runs"]) {
    const std::string engine = run["engine"];
    const json& every = run["run"]["durable_every_ms"];
    if (engine == "clevel") {
      EXPECT_TRUE(every.is_null()) << engine;
      continue;
    }
    ASSERT_TRUE(every.is_number()) << engine;
    EXPECT_GE(every.get<double>(), 19.0) << engine;
    EXPECT_LT(every.get<double>(), 500.0) << engine;
  }
  EXPECT_NE(r.out.find("durable every"), std::string::npos) << r.out;
}

TEST_F(BenchSmoke, LoadOfAResizingIndexRecordsTheLoadFactorEveryTenThousandInserts) {
  const std::string json_path = dir_ + "/out.json";
  const SpawnResult r =
      bench({"--engine", "clevel,libcuckoo", "--workload", "load", "--records", "50000",
             "--threads", "1", "--pool", dir_, "--no-ceilings", "--json", json_path});
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  const json doc = read_json(json_path);
  ASSERT_EQ(doc["runs"].size(), 2u);
  for (const json& run : doc["runs"]) {
    const json& lf = run["load"]["load_factor"];
    ASSERT_GE(lf.size(), 4u) << run["engine"];
    // The k-th point is taken once at least k x 10,000 inserts are done.
    std::uint64_t previous = 0;
    for (std::size_t k = 0; k < lf.size(); ++k) {
      const json& point = lf[k];
      const auto inserts = point[0].get<std::uint64_t>();
      EXPECT_GE(inserts, (k + 1) * 10'000) << run["engine"];
      EXPECT_GT(inserts, previous) << run["engine"];
      previous = inserts;
      EXPECT_GT(point[1].get<double>(), 0) << run["engine"];
      EXPECT_LE(point[1].get<double>(), 1) << run["engine"];
    }
    EXPECT_TRUE(run["load"]["ceiling_fraction"].is_null());
  }
  ASSERT_EQ(doc["runs"][0]["engine"], "clevel");
  EXPECT_GT(doc["runs"][0]["load"]["properties"]["clevel.expansions"].get<std::uint64_t>(), 0u);
}

TEST_F(BenchSmoke, DurationBoundsTheRunPhaseInsteadOfACount) {
  const std::string json_path = dir_ + "/out.json";
  const SpawnResult r = bench({"--engine", "clevel", "--workload", "c", "--records", "1000",
                               "--ops", "1000", "--duration", "0.2", "--pool", dir_,
                               "--no-ceilings", "--json", json_path});
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  const json run = read_json(json_path)["runs"][0]["run"];
  // The stream of 1,000 reads is replayed until the time is up.
  EXPECT_GT(run["ops"].get<std::uint64_t>(), 0u);
  EXPECT_FALSE(run["stream_exhausted"].get<bool>());
  EXPECT_EQ(run["latency_ns"]["all"]["count"], run["ops"]);
}

TEST_F(BenchSmoke, EpochDurabilityIsStatedPerTable) {
  const std::string json_path = dir_ + "/out.json";
  const SpawnResult r = bench({"--engine", "clevel,lmdb,rocksdb", "--workload", "a", "--records",
                               "500", "--ops", "500", "--durability", "epoch", "--pool", dir_,
                               "--no-ceilings", "--json", json_path});
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  const json doc = read_json(json_path);
  for (const json& run : doc["runs"]) {
    const std::string text = run["durability"];
    if (run["engine"] == "clevel") {
      EXPECT_EQ(text.rfind("strict", 0), 0u) << text;  // no epoch mode: runs strict, says so
    } else {
      EXPECT_EQ(text.rfind("epoch", 0), 0u) << text;
    }
  }
}

TEST_F(BenchSmoke, LimitsMeasuresTheCeilingsOfEachThreadCount) {
  const std::string json_path = dir_ + "/out.json";
  const SpawnResult r = bench({"--limits", "--threads", "1,2", "--pool", dir_,
                               "--ceiling-region-mib", "16", "--ceiling-seconds", "0.02",
                               "--json", json_path});
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  const json doc = read_json(json_path);
  ASSERT_EQ(doc["ceilings"].size(), 2u);
  EXPECT_EQ(doc["ceilings"][0]["threads"], 1);
  EXPECT_EQ(doc["ceilings"][1]["threads"], 2);
  EXPECT_TRUE(doc["runs"].empty());
  // Nothing but the ceilings' own file was created, and it is gone.
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir_),
                          std::filesystem::directory_iterator()),
            1);  // out.json
}

// --preset peers-8b at a tiny size (explicit --records and --pool win over
// the preset's): one store per engine, the load and then read, read-neg,
// update, insert and delete on it, one run each with its sequence step; each
// phase's outcomes are the ones the phases before it make certain, and the
// store's keys, flushes and fences are reported per phase.
TEST_F(BenchSmoke, PresetPeers8bRunsEveryPhaseOnOneStore) {
  constexpr std::uint64_t kRecords = 3000;
  const std::string json_path = dir_ + "/out.json";
  const std::string csv_path = dir_ + "/out.csv";
  const SpawnResult r = bench({"--preset", "peers-8b", "--records", std::to_string(kRecords),
                               "--pool", dir_, "--no-ceilings", "--json", json_path, "--csv",
                               csv_path});
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  const json doc = read_json(json_path);
  EXPECT_EQ(doc["config"]["records"].get<std::uint64_t>(), kRecords);
  EXPECT_EQ(doc["config"]["key_size"].get<std::uint64_t>(), 8u);
  EXPECT_EQ(doc["config"]["value_size"].get<std::uint64_t>(), 8u);
  const std::vector<std::string> phases = {"load", "read", "read-neg", "update", "insert", "delete"};
  // Every finished pool engine in each durability it offers, in the
  // registry's order (dali in both).
  const std::vector<std::string> engines = pmhash::engine_modes(pmhash::Location::kPoolFile);
  EXPECT_EQ(std::count(engines.begin(), engines.end(), "dali:epoch"), 1);
  EXPECT_EQ(doc["config"]["engines"].get<std::vector<std::string>>(), engines);
  ASSERT_EQ(doc["runs"].size(), engines.size() * phases.size());
  for (std::size_t e = 0; e < engines.size(); ++e) {
    const json& load = doc["runs"][e * phases.size()]["load"];
    for (std::size_t p = 0; p < phases.size(); ++p) {
      const json& run = doc["runs"][e * phases.size() + p];
      const std::string where = engines[e] + " " + phases[p];
      EXPECT_EQ(run["workload"], phases[p]) << where;
      EXPECT_EQ(run["sequence_step"].get<unsigned>(), p) << where;
      EXPECT_EQ(run["threads"].get<unsigned>(), 2u) << where;
      // One load per store, repeated in every run of it.
      EXPECT_EQ(run["load"]["seconds"], load["seconds"]) << where;
      if (p == 0) {
        EXPECT_TRUE(run["run"].is_null()) << where;
        continue;
      }
      const json& m = run["run"];
      ASSERT_TRUE(m.is_object()) << where;
      EXPECT_EQ(m["ops"].get<std::uint64_t>(), kRecords) << where;
      const json& outcomes = m["outcomes"];
      EXPECT_EQ(outcomes[phases[p] == "read-neg" ? "not_found" : "ok"].get<std::uint64_t>(),
                kRecords)
          << where;
      EXPECT_TRUE(m["flushes_per_op"].is_number()) << where;
      EXPECT_TRUE(m["fences_per_op"].is_number()) << where;
      EXPECT_TRUE(m["bytes_per_key"].is_number() || phases[p] == "delete") << where;
      const bool strict = engines[e].ends_with(":strict");
      if (strict && (phases[p] == "update" || phases[p] == "insert")) {
        EXPECT_GT(m["flushes_per_op"].get<double>(), 0) << where;
      }
    }
  }
  std::ifstream csv(csv_path);
  std::size_t lines = 0;
  for (std::string line; std::getline(csv, line);) ++lines;
  EXPECT_EQ(lines, 1 + doc["runs"].size());
  EXPECT_NE(r.out.find("-- pmeh:strict t=2"), std::string::npos) << r.out;
}

// Without --engine the driver measures the registry's default pool engine
// against the volatile peer; its help lists the workloads the engines
// contribute, from the registry.
TEST_F(BenchSmoke, DefaultsAndHelpComeFromTheRegistry) {
  const std::string json_path = dir_ + "/defaults.json";
  const SpawnResult r = bench({"--workload", "load", "--records", "500", "--pool", dir_,
                               "--no-ceilings", "--json", json_path});
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  const json doc = read_json(json_path);
  const std::vector<std::string> expected = {
      std::string(pmhash::default_engine(pmhash::Location::kPoolFile)->name), "libcuckoo"};
  EXPECT_EQ(doc["config"]["engines"].get<std::vector<std::string>>(), expected);

  const SpawnResult help = bench({"--help"});
  ASSERT_EQ(help.exit_code, 0) << describe(help);
  ASSERT_FALSE(pmhash::paper_workloads().empty());
  for (const pmhash::PaperWorkload* w : pmhash::paper_workloads()) {
    EXPECT_NE(help.out.find(std::string(w->name) + ": "), std::string::npos) << w->name;
    EXPECT_NE(help.out.find(std::string(w->doc)), std::string::npos) << w->name;
  }
}

// A paper workload runs under its own name, with the description its
// engine's descriptor gives, on an engine that is not its own too.
TEST_F(BenchSmoke, PaperWorkloadsRunUnderTheirNames) {
  const pmhash::PaperWorkload* w = pmhash::paper_workloads().front();
  const std::string engine = pmhash::Store::engines().front();
  const std::string json_path = dir_ + "/paper.json";
  const SpawnResult r = bench({"--engine", engine, "--workload", std::string(w->name),
                               "--records", "2000", "--key-size", "8", "--value-size", "8",
                               "--pool", dir_, "--no-ceilings", "--json", json_path});
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  EXPECT_NE(r.out.find("== workload " + std::string(w->name) + ": "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(std::string(w->doc)), std::string::npos) << r.out;
  const json doc = read_json(json_path);
  ASSERT_EQ(doc["runs"].size(), 1u);
  EXPECT_EQ(doc["runs"][0]["workload"], std::string(w->name));
  EXPECT_EQ(doc["runs"][0]["run"]["ops"].get<std::uint64_t>(), 2000u);
}

TEST_F(BenchSmoke, BadFlagsGiveOneLineErrorsAndANonZeroExit) {
  const std::vector<std::vector<std::string>> cases = {
      {"--engine", "nosuch"},
      {"--workload", "z"},
      {"--workload", "mixed:50/50/10/0"},
      {"--records", "0"},
      {"--zipf", "1.5"},
      {"--zipf", "0"},
      {"--key-size", "70000"},
      {"--key-size", "4"},
      {"--threads", "0"},
      {"--ops", "0"},
      {"--granularity", "huge"},
      {"--durability", "sometimes"},
      {"--distribution", "normal"},
      {"--records", "many"},
      {"--no-such-flag"},
      {"--preset", "nosuch"},
      {"--sequence", "--workload", "delete,read"},
      {"--sequence", "--workload", "insert,nehash-a"},
      {"--sequence", "--workload", "load,read"},
      {"--sequence", "--workload", "txn"},
  };
  for (const auto& args : cases) {
    std::vector<std::string> full = args;
    full.insert(full.end(), {"--pool", dir_, "--no-ceilings"});
    const SpawnResult r = bench(full);
    const std::string what = args.front() + (args.size() > 1 ? " " + args[1] : "");
    EXPECT_EQ(r.exit_code, 2) << what << "\n" << describe(r);
    EXPECT_TRUE(r.out.empty()) << what << "\n" << describe(r);
    ASSERT_FALSE(r.err.empty()) << what;
    EXPECT_EQ(r.err.find('\n'), r.err.size() - 1) << what << ": not one line: " << r.err;
    EXPECT_EQ(r.err.rfind("pmhash-bench: ", 0), 0u) << r.err;
  }
  // Nothing was created for any of them.
  EXPECT_TRUE(std::filesystem::is_empty(dir_));
}

}  // namespace
