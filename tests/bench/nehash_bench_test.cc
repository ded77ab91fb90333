// tests/bench/nehash_bench_test.cc - what pmhash-bench gained for the NEHASH
// paper's evaluation: 8-byte binary keys (distinct, uniformly spread, and
// stored and read back by every engine and peer), the workloads nehash-a/b/g,
// a sweep of -o nehash.bucket_bits (each series' store really has its b),
// the --reopen phase (open times, keys, groups) and the usage errors of the
// new flags.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "bench/pmhash_table.h"
#include "bench/table.h"
#include "bench/ycsb.h"
#include "pmhash/engines.h"
#include "pmhash/store.h"
#include "scratch_file.h"
#include "subprocess.h"

namespace pmhash::bench {
namespace {

using nlohmann::json;
using pmhash::testing::run_program;
using pmhash::testing::ScratchDir;
using pmhash::testing::SpawnResult;

// --- 8-byte keys ----------------------------------------------------------------

TEST(BinaryKeys, EightByteKeysAreDistinctAcrossLoadedRunAndAbsentRecords) {
  const KeySpace space(8, 8, 7);
  std::set<std::string> seen;
  constexpr std::uint64_t kRecords = 200'000;
  for (std::uint64_t r = 0; r < kRecords; ++r) {
    const std::string key = space.key(r);
    ASSERT_EQ(key.size(), 8u);
    EXPECT_TRUE(seen.insert(key).second) << "record " << r;
  }
  // The never-inserted keys of negative reads start at kNegativeBase.
  for (std::uint64_t j = 0; j < 10'000; ++j) {
    EXPECT_TRUE(seen.insert(space.key(KeySpace::kNegativeBase + j)).second) << j;
  }
}

TEST(BinaryKeys, AKeyDecodesToItsRecordsScrambledNumber) {
  constexpr std::uint64_t kSeed = 3;
  const KeySpace space(8, 8, kSeed);
  for (const std::uint64_t r : std::vector<std::uint64_t>{0, 1, 2, 12345, (std::uint64_t{1} << 32) + 5, KeySpace::kNegativeBase}) {
    EXPECT_EQ(decode_binary_key(space.key(r)), mix(r ^ mix(kSeed))) << r;
  }
  // Sizes 9 and 10 carry the same 8 bytes, then filler.
  const KeySpace ten(10, 8, kSeed);
  EXPECT_EQ(ten.key(99).substr(0, 8), space.key(99));
  // 11 bytes and more stay printable text.
  const std::string text = KeySpace(11, 8, kSeed).key(99);
  for (char c : text) EXPECT_TRUE(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.');
}

TEST(BinaryKeys, EveryByteOfTheKeysIsSpreadUniformly) {
  const KeySpace space(8, 8, 1);
  constexpr std::uint64_t kRecords = 256 * 1024;  // 1024 expected per byte value
  std::array<std::array<unsigned, 256>, 8> counts{};
  for (std::uint64_t r = 0; r < kRecords; ++r) {
    const std::string key = space.key(r);
    for (std::size_t i = 0; i < 8; ++i) ++counts[i][static_cast<unsigned char>(key[i])];
  }
  for (std::size_t i = 0; i < 8; ++i) {
    double chi2 = 0;
    for (unsigned v = 0; v < 256; ++v) {
      const double d = counts[i][v] - 1024.0;
      chi2 += d * d / 1024.0;
    }
    // 255 degrees of freedom: mean 255, standard deviation ~22.6; 400 is
    // beyond six deviations.
    EXPECT_LT(chi2, 400.0) << "byte " << i;
  }
}

TEST(BinaryKeys, KeysShorterThanEightBytesAreRefused) {
  EXPECT_THROW(KeySpace(7, 8, 1), Failure);
}

TEST(BinaryKeys, PrintableKeyShowsBinaryKeysInHex) {
  EXPECT_EQ(printable_key("abc_09"), "abc_09");
  EXPECT_EQ(printable_key(std::string("\x01\xff\x00z", 4)), "0x01ff007a");
}

// Every engine and peer stores 8-byte binary keys with 8-byte values and
// reads back exactly what it was given; absent keys are not found.
void round_trip(Table& table, const std::string& what) {
  const KeySpace space(8, 8, 11);
  constexpr std::uint64_t kKeys = 3000;
  for (std::uint64_t r = 0; r < kKeys; ++r) {
    ASSERT_TRUE(table.insert(space.key(r), space.value(r)).ok()) << what << " record " << r;
  }
  std::string value;
  for (std::uint64_t r = 0; r < kKeys; ++r) {
    ASSERT_TRUE(table.get(space.key(r), &value).ok()) << what << " record " << r;
    EXPECT_EQ(value, space.value(r)) << what << " record " << r;
  }
  for (std::uint64_t j = 0; j < 500; ++j) {
    EXPECT_TRUE(table.get(space.key(KeySpace::kNegativeBase + j), &value).is_not_found()) << what;
  }
  for (std::uint64_t r = 0; r < kKeys; r += 3) {
    ASSERT_TRUE(table.update(space.key(r), space.value(r + 1)).ok()) << what << " record " << r;
  }
  for (std::uint64_t r = 0; r < kKeys; ++r) {
    ASSERT_TRUE(table.get(space.key(r), &value).ok()) << what << " record " << r;
    EXPECT_EQ(value, space.value(r % 3 == 0 ? r + 1 : r)) << what << " record " << r;
  }
  EXPECT_TRUE(table.insert(space.key(5), space.value(0)).is_already_exists()) << what;
}

TEST(BinaryKeys, EveryEngineAndPeerReadsBackWhatItStored) {
  ScratchDir scratch("pmhash-binary-keys");
  std::vector<std::string> engines = Store::engines();
  if (std::find(engines.begin(), engines.end(), "nehash") == engines.end()) {
    engines.push_back("nehash");
  }
  for (const std::string& engine : engines) {
    TableConfig config;
    config.granularity = "none";  // DRAM: the engine's code without persistence
    config.key_size = 8;
    config.value_size = 8;
    config.capacity_hint = 10'000;
    PmhashTable table(engine, config);
    round_trip(table, engine);
    EXPECT_TRUE(table.check().ok()) << engine << ": " << table.check().to_string();
  }
  for (const std::string& peer : peer_names()) {
    TableConfig config;
    config.files_dir = scratch.str() + "/" + peer;
    config.key_size = 8;
    config.value_size = 8;
    config.capacity_hint = 10'000;
    std::unique_ptr<Table> table = make_peer(peer, config);
    round_trip(*table, peer);
  }
}

// A nehash store of large groups holds a million keys in the pool the
// table sizes by default (b = 8 needs about 1.2 KB of pool per key: its
// groups are 256 KiB heap runs that split at a few hundred keys; a pool
// sized for clevel ran out at 0.9M keys).
TEST(NehashPool, TheDefaultPoolHoldsAMillionKeysWithEightBucketBits) {
  TableConfig config;
  config.granularity = "none";
  config.key_size = 8;
  config.value_size = 8;
  config.capacity_hint = 1'000'000;
  config.max_keys = 1'000'000;
  config.engine_options = {{"nehash.bucket_bits", "8"}};
  PmhashTable table("nehash", config);
  const KeySpace space(8, 8, 5);
  for (std::uint64_t r = 0; r < 1'000'000; ++r) {
    const Status s = table.insert(space.key(r), space.value(r));
    ASSERT_TRUE(s.ok()) << "record " << r << ": " << s.to_string();
  }
  EXPECT_EQ(table.stats().items, 1'000'000u);
}

// --- the nehash workloads ---------------------------------------------------------

TEST(NehashWorkloads, AreThePapersMixesOfReadsAndNewInsertsWithUniformKeys) {
  const std::map<std::string, double> reads = {
      {"nehash-a", 0.5}, {"nehash-b", 0.95}, {"nehash-g", 0.05}};
  for (const auto& [name, read] : reads) {
    std::string error;
    const std::optional<WorkloadSpec> spec = parse_workload(name, &error);
    ASSERT_TRUE(spec) << name << ": " << error;
    EXPECT_DOUBLE_EQ(spec->mix[OpType::kRead], read) << name;
    EXPECT_NEAR(spec->mix[OpType::kInsert], 1 - read, 1e-12) << name;
    EXPECT_FALSE(spec->mix.has(OpType::kUpdate)) << name;
    EXPECT_EQ(spec->distribution, Distribution::kUniform) << name;
    EXPECT_NE(spec->description.find("NEHASH"), std::string::npos) << spec->description;
  }
}

TEST(NehashWorkloads, EveryInsertIsOfANewRecord) {
  const KeySpace space(8, 8, 1);
  std::string error;
  const WorkloadSpec spec = *parse_workload("nehash-g", &error);
  StreamParams p;
  p.records = 1000;
  p.ops = 20'000;
  p.threads = 2;
  const std::vector<OpStream> streams = generate_streams(spec, space, p);
  std::set<std::string> loaded;
  for (std::uint64_t r = 0; r < p.records; ++r) loaded.insert(space.key(r));
  std::set<std::string> inserted;
  std::uint64_t inserts = 0;
  for (const OpStream& s : streams) {
    for (std::size_t i = 0; i < s.size(); ++i) {
      if (static_cast<OpType>(s.ops[i] & OpStream::kTypeMask) != OpType::kInsert) continue;
      ++inserts;
      const std::string key(s.keys.data() + i * 8, 8);
      EXPECT_TRUE((s.ops[i] & OpStream::kMustSucceed) != 0);
      EXPECT_EQ(loaded.count(key), 0u);
      EXPECT_TRUE(inserted.insert(key).second);
    }
  }
  // 95% inserts, within sampling error (sd ~31).
  EXPECT_NEAR(static_cast<double>(inserts), 19'000.0, 200.0);
}

// --- pmhash-bench as a program ----------------------------------------------------

class NehashBench : public ::testing::Test {
 protected:
  SpawnResult bench(std::vector<std::string> args) {
    args.insert(args.end(), {"--pool", dir_, "--no-ceilings"});
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

  ScratchDir scratch_{"pmhash-nehash-bench"};
  const std::string dir_ = scratch_.str();
};

TEST_F(NehashBench, ThePapersWorkloadsRunWithEightByteKeysOnEveryEngineAndPeer) {
  const std::string json_path = dir_ + "/out.json";
  constexpr std::uint64_t kRecords = 2000;
  const SpawnResult r = bench({"--engine", "all,nehash", "--workload", "nehash-a,nehash-b,nehash-g",
                               "--records", std::to_string(kRecords), "--ops", "3000",
                               "--threads", "2", "--key-size", "8", "--value-size", "8",
                               "--json", json_path});
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  const json doc = read_json(json_path);
  EXPECT_EQ(doc["config"]["key_size"], 8);
  const std::vector<std::string> finished = Store::engines();
  std::set<std::string> names(finished.begin(), finished.end());
  names.insert("nehash");  // once, finished or not
  const std::size_t tables = names.size() + peer_names().size();
  ASSERT_EQ(doc["runs"].size(), 3 * tables);
  for (const json& run : doc["runs"]) {
    const std::string where = run["series"].get<std::string>() + " " + run["workload"].get<std::string>();
    const json& phase = run["run"];
    const double inserts = phase["mix"]["insert"].get<double>();
    const auto inserted = phase["latency_ns"].contains("insert")
                              ? phase["latency_ns"]["insert"]["count"].get<std::uint64_t>()
                              : 0;
    // Every insert is of a new key and succeeded (the tool fails otherwise);
    // pmhash stores then hold the loaded keys plus the inserted ones.
    EXPECT_GT(inserted, 0u) << where;
    EXPECT_NEAR(static_cast<double>(inserted) / 3000, inserts, 0.05) << where;
    if (run["kind"] == "pmhash") {
      EXPECT_FALSE(run["run"]["slots"].is_null()) << where;
    }
  }
  EXPECT_NE(r.out.find("the NEHASH paper's workload g"), std::string::npos) << r.out;
}

TEST_F(NehashBench, TheBucketBitsSweepCreatesEachStoreWithItsBits) {
  const std::string json_path = dir_ + "/out.json";
  const std::string csv_path = dir_ + "/out.csv";
  constexpr std::uint64_t kRecords = 20'000;
  const SpawnResult r = bench({"--engine", "nehash,clevel", "-o", "nehash.bucket_bits=1,4,8",
                               "-o", "nehash.initial_dir_bits=2", "--workload", "read", "--records",
                               std::to_string(kRecords), "--ops", "5000", "--key-size", "8",
                               "--value-size", "8", "--json", json_path, "--csv", csv_path});
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  const json doc = read_json(json_path);
  ASSERT_EQ(doc["runs"].size(), 4u);
  std::map<unsigned, std::uint64_t> groups_by_bits;
  for (const json& run : doc["runs"]) {
    const std::string series = run["series"];
    if (run["engine"] == "clevel") {
      EXPECT_EQ(series, "clevel");
      // Its own options, with their defaults; none of nehash's.
      EXPECT_FALSE(run["options"].contains("nehash_bucket_bits")) << run["options"];
      for (const OptionSpec& o : find_engine("clevel")->options) {
        std::string key(o.name);
        std::replace(key.begin(), key.end(), '.', '_');
        EXPECT_TRUE(run["options"].contains(key)) << key << " " << run["options"];
      }
      EXPECT_FALSE(run["load"]["properties"].contains("nehash.groups"));
      continue;
    }
    const unsigned b = run["options"]["nehash_bucket_bits"];
    EXPECT_EQ(series, "nehash bucket_bits=" + std::to_string(b));
    EXPECT_EQ(run["options"]["nehash_initial_dir_bits"], 2);
    // The store's capacity per group says its b: 2^b buckets and a conflict
    // bucket, 16 slots each.
    const auto groups = run["load"]["properties"]["nehash.groups"].get<std::uint64_t>();
    const auto slots = run["load"]["slots"].get<std::uint64_t>();
    ASSERT_GT(groups, 0u) << series;
    EXPECT_EQ(slots, groups * ((std::uint64_t{1} << b) + 1) * 16) << series;
    EXPECT_GE(slots, kRecords) << series;
    groups_by_bits[b] = groups;
  }
  ASSERT_EQ(groups_by_bits.size(), 3u);
  EXPECT_GT(groups_by_bits[1], groups_by_bits[4]);
  EXPECT_GT(groups_by_bits[4], groups_by_bits[8]);
  EXPECT_NE(r.out.find("nehash bucket_bits=8"), std::string::npos) << r.out;
  std::ifstream csv(csv_path);
  std::string header;
  std::getline(csv, header);
  EXPECT_NE(header.find(",options"), std::string::npos) << header;
}

// The CSV's field `name` of every data line.
std::vector<std::string> csv_column(const std::string& path, const std::string& name) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  std::vector<std::string> header;
  std::stringstream hs(line);
  for (std::string f; std::getline(hs, f, ',');) header.push_back(f);
  const auto col = std::find(header.begin(), header.end(), name) - header.begin();
  std::vector<std::string> out;
  while (std::getline(in, line)) {
    // The durability texts hold no quotes but may hold commas in quotes.
    std::vector<std::string> fields;
    std::string field;
    bool quoted = false;
    for (char c : line) {
      if (c == '"') quoted = !quoted;
      else if (c == ',' && !quoted) fields.push_back(std::exchange(field, {}));
      else field += c;
    }
    fields.push_back(field);
    out.push_back(static_cast<std::size_t>(col) < fields.size() ? fields[col] : "");
  }
  return out;
}

TEST_F(NehashBench, ReopenReportsTheOpenTimeKeysAndGroupsOfACleanAndACrashOpen) {
  const std::string json_path = dir_ + "/out.json";
  const std::string csv_path = dir_ + "/out.csv";
  constexpr std::uint64_t kRecords = 30'000;
  const SpawnResult r = bench({"--engine", "nehash,clevel,dali", "--reopen", "--workload",
                               "load,nehash-g", "--records", std::to_string(kRecords), "--ops",
                               "2000", "--key-size", "8", "--value-size", "8", "--json",
                               json_path, "--csv", csv_path});
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  const json doc = read_json(json_path);
  EXPECT_EQ(doc["config"]["reopen"], true);
  ASSERT_EQ(doc["runs"].size(), 6u);
  for (const json& run : doc["runs"]) {
    const std::string engine = run["engine"];
    const std::string where = engine + " " + run["workload"].get<std::string>();
    const json& reopen = run["reopen"];
    ASSERT_TRUE(reopen.is_object()) << where;
    const json& clean = reopen["clean"];
    EXPECT_GT(clean["open_ns"].get<std::uint64_t>(), 0u) << where;
    EXPECT_TRUE(clean["clean_shutdown"].get<bool>()) << where;
    EXPECT_EQ(clean["recovery_ns"].get<std::uint64_t>(), 0u) << where;
    EXPECT_EQ(clean["items"].get<std::uint64_t>(), kRecords) << where;
    EXPECT_GT(clean["bytes_per_key"].get<double>(), 16.0) << where;
    if (engine == "nehash") {
      EXPECT_EQ(clean["properties"]["nehash.groups"], run["load"]["properties"]["nehash.groups"])
          << where;
      EXPECT_GT(clean["properties"]["nehash.groups"].get<std::uint64_t>(), 0u) << where;
    } else {
      EXPECT_FALSE(clean["properties"].contains("nehash.groups")) << where;
    }
    if (engine == "dali") {
      // Its epoch thread writes the pool: no copy is a crash image.
      EXPECT_TRUE(reopen["crash"].is_null()) << where;
      EXPECT_FALSE(reopen["crash_skipped"].get<std::string>().empty()) << where;
      continue;
    }
    const json& crash = reopen["crash"];
    ASSERT_TRUE(crash.is_object()) << where;
    EXPECT_FALSE(crash["clean_shutdown"].get<bool>()) << where;
    EXPECT_GT(crash["open_ns"].get<std::uint64_t>(), 0u) << where;
    EXPECT_GT(crash["recovery_ns"].get<std::uint64_t>(), 0u) << where;
    EXPECT_EQ(crash["items"].get<std::uint64_t>(), kRecords) << where;
    EXPECT_EQ(crash["properties"].value("nehash.groups", std::uint64_t{0}),
              clean["properties"].value("nehash.groups", std::uint64_t{0}))
        << where;
    EXPECT_GT(reopen["image_bytes"].get<std::uint64_t>(), 0u) << where;
    // The run phase ran on the reopened store: its inserts all landed.
    if (run["workload"] == "nehash-g") {
      EXPECT_EQ(run["run"]["outcomes"]["ok"].get<std::uint64_t>(), 2000u) << where;
    }
  }
  const std::vector<std::string> open_ns = csv_column(csv_path, "clean_open_ns");
  const std::vector<std::string> items = csv_column(csv_path, "reopen_items");
  ASSERT_EQ(open_ns.size(), 6u);
  for (std::size_t i = 0; i < open_ns.size(); ++i) {
    EXPECT_GT(std::stoull(open_ns[i]), 0u) << i;
    EXPECT_EQ(items[i], std::to_string(kRecords)) << i;
  }
  EXPECT_NE(r.out.find("reopen: clean open"), std::string::npos) << r.out;
  // The crash images are gone.
  for (const auto& entry : std::filesystem::directory_iterator(dir_)) {
    EXPECT_NE(entry.path().extension(), ".crash") << entry.path();
  }
}

TEST_F(NehashBench, ListEnginesPrintsTheFinishedEngines) {
  const SpawnResult r = run_program(PMHASH_BENCH_PATH, {"--list-engines"});
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  std::string expected;
  for (const std::string& e : Store::engines()) expected += e + "\n";
  EXPECT_EQ(r.out, expected);
}

TEST_F(NehashBench, BadNehashAndReopenFlagsAreOneLineUsageErrors) {
  const std::vector<std::vector<std::string>> cases = {
      {"--engine", "nehash", "-o", "nehash.bucket_bits=0"},
      {"--engine", "nehash", "-o", "nehash.bucket_bits=11"},
      {"--engine", "nehash", "-o", "nehash.bucket_bits=4,x"},
      {"--engine", "nehash", "-o", "nehash.initial_dir_bits=17"},
      {"--engine", "clevel", "-o", "nehash.bucket_bits=4"},
      {"--engine", "clevel,lmdb", "-o", "nehash.initial_dir_bits=3"},
      {"--engine", "nehash", "--reopen", "--granularity", "none"},
      {"--engine", "nehash", "--key-size", "7"},
  };
  for (const auto& args : cases) {
    std::string what;
    for (const std::string& a : args) what += a + " ";
    const SpawnResult r = bench(args);
    EXPECT_EQ(r.exit_code, 2) << what << "\n" << describe(r);
    EXPECT_TRUE(r.out.empty()) << what << "\n" << describe(r);
    ASSERT_FALSE(r.err.empty()) << what;
    EXPECT_EQ(r.err.find('\n'), r.err.size() - 1) << what << ": not one line: " << r.err;
    EXPECT_EQ(r.err.rfind("pmhash-bench: ", 0), 0u) << r.err;
  }
  const SpawnResult without = bench({"--engine", "clevel", "-o", "nehash.bucket_bits=4"});
  EXPECT_NE(without.err.find("no nehash engine"), std::string::npos) << without.err;
  EXPECT_TRUE(std::filesystem::is_empty(dir_));
}

}  // namespace
}  // namespace pmhash::bench
