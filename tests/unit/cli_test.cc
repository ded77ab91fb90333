// tests/unit/cli_test.cc - the `pmhash` tool, run as a child process.
//
// Each test runs the built binary (PMHASH_CLI_PATH) with posix_spawn, its
// stdout and stderr going to memory files, and asserts on the exit code and
// on both outputs. Pools live under /dev/shm with the test's pid and name in
// the file name and are removed when the test ends.
#include <fcntl.h>
#include <spawn.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "pmhash/engines.h"
#include "pmhash/store.h"
#include "remote/memnode.h"
#include "subprocess.h"

namespace {

using Result = pmhash::testing::SpawnResult;

// Runs `pmhash args...` and waits for it.
Result run_cli(const std::vector<std::string>& args) {
  return pmhash::testing::run_program(PMHASH_CLI_PATH, args);
}

std::string describe(const std::vector<std::string>& args, const Result& r) {
  std::string cmd = "pmhash";
  for (const std::string& a : args) cmd += " '" + a + "'";
  return cmd + "\n  exit " + std::to_string(r.exit_code) + "\n  stdout: " + r.out +
         "\n  stderr: " + r.err;
}

std::string file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  std::string bytes(static_cast<std::size_t>(std::max<std::streamoff>(in.tellg(), 0)), '\0');
  in.seekg(0);
  in.read(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  EXPECT_TRUE(in.good()) << "cannot read " << path;
  return bytes;
}

void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << bytes;
  ASSERT_TRUE(out.good()) << path;
}

std::vector<std::string> sorted_lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  std::sort(lines.begin(), lines.end());
  return lines;
}

bool is_one_line(const std::string& text) {
  return !text.empty() && text.back() == '\n' &&
         std::count(text.begin(), text.end(), '\n') == 1;
}

class CliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string name = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    prefix_ = "/dev/shm/pmhash-cli-test-" + std::to_string(getpid()) + "-" + name;
    pool_ = path("pool");
  }

  void TearDown() override {
    for (const std::string& p : paths_) unlink(p.c_str());
  }

  // A file name of this test, removed when it ends.
  std::string path(const std::string& suffix) {
    paths_.push_back(prefix_ + "." + suffix);
    unlink(paths_.back().c_str());
    return paths_.back();
  }

  // Runs the tool and expects exit 0 and nothing on stderr.
  std::string ok(const std::vector<std::string>& args) {
    const Result r = run_cli(args);
    EXPECT_EQ(r.exit_code, 0) << describe(args, r);
    EXPECT_EQ(r.err, "") << describe(args, r);
    return r.out;
  }

  void create_pool(const std::string& pool) { ok({"create", pool, "--size", "16M"}); }

  nlohmann::json info_json(const std::string& pool) {
    const std::string out = ok({"info", pool, "--json"});
    nlohmann::json j = nlohmann::json::parse(out, nullptr, /*allow_exceptions=*/false);
    EXPECT_FALSE(j.is_discarded()) << "not JSON: " << out;
    return j;
  }

  std::string prefix_;
  std::string pool_;
  std::vector<std::string> paths_;
};

TEST_F(CliTest, CreatePutGetDelScanRoundTrip) {
  create_pool(pool_);
  ok({"put", pool_, "alpha", "1"});
  ok({"put", pool_, "beta", "two words"});
  ok({"put", pool_, "gamma", "3"});
  EXPECT_EQ(ok({"get", pool_, "alpha"}), "1\n");
  EXPECT_EQ(ok({"get", pool_, "beta"}), "two words\n");

  ok({"put", pool_, "alpha", "replaced"});  // put is an upsert
  EXPECT_EQ(ok({"get", pool_, "alpha"}), "replaced\n");

  ok({"del", pool_, "gamma"});
  EXPECT_EQ(run_cli({"get", pool_, "gamma"}).exit_code, 1);

  EXPECT_EQ(sorted_lines(ok({"scan", pool_})),
            (std::vector<std::string>{"alpha\treplaced", "beta\ttwo words"}));
}

// An index on memory nodes: --memnodes instead of POOL for every command;
// create makes sephash unless --engine says otherwise, and the other
// commands take whatever engine the nodes hold.
TEST_F(CliTest, MemoryNodeIndexesTakeMemnodesInsteadOfAPool) {
  const std::string n0 = path("mn0"), n1 = path("mn1");
  for (const std::string& n : {n0, n1}) {
    ASSERT_TRUE(pmhash::remote::create_memnode(n, 64u << 20, false).ok()) << n;
  }
  const std::string nodes = "shm:" + n0 + ",shm:" + n1;
  ok({"create", "--memnodes", nodes});
  ok({"put", "--memnodes", nodes, "alpha", "1"});
  ok({"put", "--memnodes=" + nodes, "beta", "2"});
  ok({"put", "--memnodes", nodes, "gamma", "3"});
  EXPECT_EQ(ok({"get", "--memnodes", nodes, "beta"}), "2\n");
  ok({"del", "--memnodes", nodes, "gamma"});
  EXPECT_EQ(run_cli({"get", "--memnodes", nodes, "gamma"}).exit_code, 1);
  EXPECT_EQ(sorted_lines(ok({"scan", "--memnodes", nodes})),
            (std::vector<std::string>{"alpha\t1", "beta\t2"}));
  EXPECT_EQ(ok({"check", "--memnodes", nodes}), "ok\n");
  nlohmann::json j = nlohmann::json::parse(ok({"info", "--memnodes", nodes, "--json"}));
  EXPECT_EQ(j["engine"], "sephash");
  EXPECT_EQ(j["items"], 2);
  EXPECT_TRUE(j["properties"].contains("sephash.round_trips")) << j.dump();

  // Refused, with one line naming what is wrong; the index stays.
  const std::vector<std::vector<std::string>> refused = {
      {"create", "--memnodes", nodes, "--engine", "race"},  // an index is there
      {"create", "--memnodes", nodes, "--engine", "clevel"},  // a pool-file engine
      {"get", "--memnodes", nodes, "alpha", "--engine", "race"},  // not what the nodes hold
  };
  for (const auto& args : refused) {
    const Result r = run_cli(args);
    EXPECT_EQ(r.exit_code, 1) << describe(args, r);
    EXPECT_TRUE(is_one_line(r.err)) << describe(args, r);
  }
  const Result both = run_cli({"get", pool_, "alpha", "--memnodes", nodes});
  EXPECT_EQ(both.exit_code, 2) << describe({"get"}, both);
  EXPECT_NE(both.err.find("give no POOL"), std::string::npos) << both.err;
  EXPECT_EQ(ok({"get", "--memnodes", nodes, "alpha"}), "1\n");

  // --force replaces it with another engine's, which later commands find.
  ok({"create", "--memnodes", nodes, "--engine", "race", "--force"});
  ok({"put", "--memnodes", nodes, "delta", "4"});
  j = nlohmann::json::parse(ok({"info", "--memnodes", nodes, "--json"}));
  EXPECT_EQ(j["engine"], "race");
  EXPECT_EQ(j["items"], 1);
  EXPECT_EQ(run_cli({"get", "--memnodes", nodes, "alpha"}).exit_code, 1);
}

// A wrong node list (a node twice, swapped order, a fresh node) is
// refused by every command in one line naming the position; a create with
// --force while a client of the old index is open: that client's next
// calls fail, saying the nodes were created again, and the new index is
// what the tool made.
TEST_F(CliTest, MemoryNodeListsAreCheckedAndAForcedCreateStopsOldClients) {
  const std::string n0 = path("mn0"), n1 = path("mn1"), fresh = path("fresh");
  for (const std::string& n : {n0, n1, fresh}) {
    ASSERT_TRUE(pmhash::remote::create_memnode(n, 64u << 20, false).ok()) << n;
  }
  const std::string nodes = "shm:" + n0 + ",shm:" + n1;
  ok({"create", "--memnodes", nodes});
  ok({"put", "--memnodes", nodes, "alpha", "1"});
  struct Wrong {
    std::string list, says;
  };
  const std::vector<Wrong> wrong = {
      {"shm:" + n0 + ",shm:" + n0, "positions 0 and 1"},
      {"shm:" + n1 + ",shm:" + n0, "(position 0)"},
      {"shm:" + n0 + ",shm:" + fresh, "(position 1)"},
  };
  for (const Wrong& w : wrong) {
    for (const auto& args : {std::vector<std::string>{"get", "--memnodes", w.list, "alpha"},
                             std::vector<std::string>{"put", "--memnodes", w.list, "beta", "2"}}) {
      const Result r = run_cli(args);
      EXPECT_EQ(r.exit_code, 1) << describe(args, r);
      EXPECT_TRUE(is_one_line(r.err)) << describe(args, r);
      EXPECT_NE(r.err.find(w.says), std::string::npos) << describe(args, r);
    }
  }
  EXPECT_EQ(ok({"get", "--memnodes", nodes, "alpha"}), "1\n");

  pmhash::Options o;
  o.engine.clear();
  o.memnodes = nodes;
  std::unique_ptr<pmhash::Store> old;
  ASSERT_TRUE(pmhash::Store::open("", o, &old).ok());
  std::string v;
  ASSERT_TRUE(old->get("alpha", &v).ok());
  ok({"create", "--memnodes", nodes, "--engine", "race", "--force"});
  ok({"put", "--memnodes", nodes, "beta", "2"});
  for (const pmhash::Status& s : {old->get("alpha", &v), old->upsert("gamma", "3")}) {
    EXPECT_TRUE(s.is_invalid_argument()) << s.to_string();
    EXPECT_NE(s.message().find("created again"), std::string::npos) << s.to_string();
  }
  old.reset();
  EXPECT_EQ(sorted_lines(ok({"scan", "--memnodes", nodes})), (std::vector<std::string>{"beta\t2"}));
  EXPECT_EQ(ok({"check", "--memnodes", nodes}), "ok\n");
}

TEST_F(CliTest, KeysStartingWithDashAreTakenAfterDoubleDash) {
  create_pool(pool_);
  ok({"put", pool_, "--", "-k", "-v"});
  EXPECT_EQ(ok({"get", pool_, "--", "-k"}), "-v\n");
}

TEST_F(CliTest, GetAndDelOfAbsentKeyExitOneWithNotFound) {
  create_pool(pool_);
  ok({"put", pool_, "present", "x"});
  for (const char* cmd : {"get", "del"}) {
    const std::vector<std::string> args = {cmd, pool_, "absent"};
    const Result r = run_cli(args);
    EXPECT_EQ(r.exit_code, 1) << describe(args, r);
    EXPECT_NE(r.err.find("not found"), std::string::npos) << describe(args, r);
    EXPECT_TRUE(is_one_line(r.err)) << describe(args, r);
    EXPECT_EQ(r.out, "") << describe(args, r);
  }
  EXPECT_EQ(ok({"get", pool_, "present"}), "x\n");
}

TEST_F(CliTest, CreateRefusesExistingFileWithoutForce) {
  const std::string junk = "not a pool, and must stay exactly like this\n";
  write_file(pool_, junk);
  const std::vector<std::string> args = {"create", pool_, "--size", "16M"};
  const Result r = run_cli(args);
  EXPECT_NE(r.exit_code, 0) << describe(args, r);
  EXPECT_TRUE(is_one_line(r.err)) << describe(args, r);
  EXPECT_NE(r.err.find(pool_), std::string::npos) << describe(args, r);
  EXPECT_EQ(file_bytes(pool_), junk);
}

// Another process (this test) has the pool open: the tool says so in one
// line naming the pool, exits non-zero, and changes no byte of it.
TEST_F(CliTest, APoolInUseIsRefusedAndLeftUnchanged) {
  create_pool(pool_);
  ok({"put", pool_, "k", "v"});
  std::unique_ptr<pmhash::Store> holder;
  ASSERT_TRUE(pmhash::Store::open(pool_, {}, &holder).ok());
  const std::string before = file_bytes(pool_);
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"put", pool_, "k2", "v2"}, {"get", pool_, "k"}, {"info", pool_},
        {"create", pool_, "--size", "16M", "--force"}}) {
    const Result r = run_cli(args);
    EXPECT_NE(r.exit_code, 0) << describe(args, r);
    EXPECT_TRUE(is_one_line(r.err)) << describe(args, r);
    EXPECT_NE(r.err.find(pool_), std::string::npos) << describe(args, r);
    EXPECT_NE(r.err.find("in use"), std::string::npos) << describe(args, r);
  }
  EXPECT_TRUE(file_bytes(pool_) == before) << "a refused command changed the pool";
  std::string v;
  EXPECT_TRUE(holder->get("k", &v).ok());
  EXPECT_EQ(v, "v");
  holder.reset();
  EXPECT_EQ(ok({"get", pool_, "k"}), "v\n");
}

TEST_F(CliTest, CreateWithForceReplacesFile) {
  write_file(pool_, "old bytes");
  ok({"create", pool_, "--size", "16M", "--force"});
  EXPECT_NE(file_bytes(pool_).substr(0, 9), "old bytes");
  const nlohmann::json j = info_json(pool_);
  EXPECT_EQ(j.value("items", std::uint64_t{99}), 0u);
  ok({"put", pool_, "k", "v"});
  EXPECT_EQ(ok({"get", pool_, "k"}), "v\n");
}

TEST_F(CliTest, CreateSizeAcceptsSuffixes) {
  const std::string k_pool = path("k.pool");
  const std::string m_pool = path("m.pool");
  const std::string plain_pool = path("plain.pool");
  ok({"create", k_pool, "--size", "65536K"});
  ok({"create", m_pool, "--size", "32m"});
  ok({"create", plain_pool, "--size", "50331648"});
  EXPECT_EQ(info_json(k_pool).value("pool_size", std::uint64_t{0}), 64u << 20);
  EXPECT_EQ(info_json(m_pool).value("pool_size", std::uint64_t{0}), 32u << 20);
  EXPECT_EQ(info_json(plain_pool).value("pool_size", std::uint64_t{0}), 48u << 20);
}

TEST_F(CliTest, InfoJsonReportsEngineAndItems) {
  create_pool(pool_);
  for (int i = 0; i < 7; ++i) ok({"put", pool_, "key" + std::to_string(i), "v"});
  ok({"del", pool_, "key3"});
  const nlohmann::json j = info_json(pool_);
  EXPECT_EQ(j.value("engine", ""), "clevel");
  EXPECT_EQ(j.value("items", std::uint64_t{0}), 6u);
  EXPECT_EQ(j.value("pool_size", std::uint64_t{0}), 16u << 20);
  EXPECT_TRUE(j.value("clean_shutdown", false));
  EXPECT_GE(j.value("slots", std::uint64_t{0}), 6u);
  EXPECT_GT(j.value("dram_bytes", std::uint64_t{0}), 0u);  // clevel's tag filters
  for (const char* field : {"granularity", "heap_used", "heap_free", "load_factor", "resizing",
                            "recovery_ns", "flushes", "fences"}) {
    EXPECT_TRUE(j.contains(field)) << field;
  }
  // clevel's properties, by name, in its descriptor's order; no epoch
  // fields (clevel keeps no epochs).
  // (Parsed again keeping the members' order.)
  const auto ordered = nlohmann::ordered_json::parse(ok({"info", pool_, "--json"}));
  ASSERT_TRUE(ordered.contains("properties")) << ordered.dump();
  std::vector<std::string> names;
  for (const auto& [name, value] : ordered["properties"].items()) {
    names.push_back(name);
    EXPECT_TRUE(value.is_number_unsigned()) << name;
  }
  std::vector<std::string> declared;
  for (const pmhash::PropertySpec& p : pmhash::find_engine("clevel")->properties) declared.emplace_back(p.name);
  EXPECT_EQ(names, declared);
  EXPECT_EQ(j["properties"].value("clevel.levels", std::uint64_t{0}), 2u);
  EXPECT_FALSE(j.contains("epoch")) << j.dump();

  const std::string text = ok({"info", pool_});
  EXPECT_NE(text.find("clevel"), std::string::npos) << text;
  EXPECT_NE(text.find("clean shutdown"), std::string::npos) << text;
  EXPECT_NE(text.find("clevel.levels:"), std::string::npos) << text;
}

TEST_F(CliTest, DaliPoolsTakeEpochDurabilityAndInfoShowsTheEpochs) {
  ok({"create", pool_, "--engine", "dali", "--size", "16M", "--durability", "epoch", "--epoch-ms", "5"});
  ok({"put", pool_, "a", "1", "--durability", "epoch", "--epoch-ms", "2"});
  ok({"put", pool_, "b", "2"});  // strict
  EXPECT_EQ(ok({"get", pool_, "a", "--durability", "epoch"}), "1\n");
  EXPECT_EQ(ok({"check", pool_}), "ok\n");
  const nlohmann::json j = info_json(pool_);
  EXPECT_EQ(j.value("engine", ""), "dali");
  EXPECT_EQ(j.value("items", std::uint64_t{0}), 2u);
  // Each command closed the pool cleanly: epochs went on, none failed.
  EXPECT_GT(j.value("epoch", std::uint64_t{0}), 2u);
  EXPECT_GE(j.value("durable_epoch", std::uint64_t{0}) + 2, j.value("epoch", std::uint64_t{0}));
  ASSERT_TRUE(j.contains("failed_epochs"));
  EXPECT_TRUE(j["failed_epochs"].empty());
  EXPECT_TRUE(j.value("swept", false));
  const std::string text = ok({"info", pool_});
  EXPECT_NE(text.find("epoch:"), std::string::npos) << text;
  EXPECT_NE(text.find("failed:"), std::string::npos) << text;
  EXPECT_NE(text.find("none"), std::string::npos) << text;
}

TEST_F(CliTest, NehashPoolsTakeTheirCreationOptionsAndInfoShowsGroupsAndOpenTime) {
  ok({"create", pool_, "--engine", "nehash", "--size", "16M", "-o", "nehash.bucket_bits=2",
      "--option", "nehash.initial_dir_bits=3"});
  ok({"load", pool_, "--records", "2000"});
  EXPECT_EQ(ok({"check", pool_}), "ok\n");
  const nlohmann::json j = info_json(pool_);
  EXPECT_EQ(j.value("engine", ""), "nehash");
  EXPECT_EQ(j.value("items", std::uint64_t{0}), 2000u);
  // A group of b = 2 has 4 buckets and a conflict bucket of 16 slots: 80
  // slots, so 2000 keys need at least 25 groups. (b = 6, the default,
  // would give 1040 slots per group.)
  const std::uint64_t groups = j["properties"].value("nehash.groups", std::uint64_t{0});
  EXPECT_GE(groups, 25u);
  EXPECT_EQ(j.value("slots", std::uint64_t{0}), groups * 80);
  EXPECT_GT(j.value("open_ns", std::uint64_t{0}), 0u);
  const std::string text = ok({"info", pool_});
  EXPECT_NE(text.find("nehash.groups:"), std::string::npos) << text;
  EXPECT_NE(text.find("open:"), std::string::npos) << text;
}

TEST_F(CliTest, NehashOptionsForAnotherEngineOrOutOfRangeAreUsageErrors) {
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"create", pool_, "--engine", "clevel", "-o", "nehash.bucket_bits=4"},
        std::vector<std::string>{"create", pool_, "-o", "nehash.initial_dir_bits=2"},
        std::vector<std::string>{"create", pool_, "--engine", "nehash", "-o", "nehash.bucket_bits=11"},
        std::vector<std::string>{"create", pool_, "--engine", "nehash", "-o", "nehash.bucket_bits=0"},
        std::vector<std::string>{"create", pool_, "--engine", "nehash", "-o", "nehash.initial_dir_bits=17"}}) {
    const Result r = run_cli(args);
    EXPECT_EQ(r.exit_code, 2) << describe(args, r);
    EXPECT_TRUE(is_one_line(r.err)) << describe(args, r);
    EXPECT_NE(r.err.find("nehash."), std::string::npos) << describe(args, r);
    EXPECT_NE(::access(pool_.c_str(), F_OK), 0) << "a refused create left a file";
  }
}

// -o is checked against the descriptors when it is parsed: a name of no
// engine, an option the engine lacks or a value out of range is one line,
// exit 2, naming what is valid; nothing is created.
TEST_F(CliTest, EngineOptionErrorsNameTheValidOnesAndExitTwo) {
  const pmhash::EngineDescriptor& first = *pmhash::all_engines().front();
  ASSERT_FALSE(first.options.empty());
  const pmhash::OptionSpec& option = first.options.front();
  std::string engines;
  for (const pmhash::EngineDescriptor* e : pmhash::all_engines()) {
    engines += (engines.empty() ? "" : ", ") + std::string(e->name);
  }
  struct Case {
    std::vector<std::string> args;
    std::string says;
  };
  const std::string typo = std::string(option.name) + "x";
  const std::string too_big = std::string(option.name) + "=" + std::to_string(static_cast<std::uint64_t>(option.max) + 1);
  for (const Case& c :
       {Case{{"create", pool_, "--engine", std::string(first.name), "-o", typo + "=1"},
             std::string(first.name) + " has no option '" + typo + "'; its options: " + std::string(option.name)},
        Case{{"create", pool_, "-o", "nosuchengine.x=1"}, "engines: " + engines},
        Case{{"create", pool_, "-o", std::string(option.name)}, "NAME=VALUE"},
        Case{{"create", pool_, "--engine", std::string(first.name), "-o", too_big},
             std::string(option.name) + " must be " + pmhash::option_range(option)},
        Case{{"get", pool_, "k", "-o", typo + "=1"}, "its options: "}}) {
    const Result r = run_cli(c.args);
    EXPECT_EQ(r.exit_code, 2) << describe(c.args, r);
    EXPECT_TRUE(is_one_line(r.err)) << describe(c.args, r);
    EXPECT_NE(r.err.find(c.says), std::string::npos) << c.says << "\n" << describe(c.args, r);
    EXPECT_NE(::access(pool_.c_str(), F_OK), 0) << "a refused command left a file";
  }
}

// `pmhash engines` prints what the registry holds: every engine with its
// summary, location, options (with their defaults and ranges) and
// properties.
TEST_F(CliTest, EnginesListsEveryEngineWithItsOptions) {
  const std::string out = ok({"engines"});
  for (const pmhash::EngineDescriptor* e : pmhash::all_engines()) {
    const std::size_t at = out.find(std::string(e->name) + (e->in_progress ? " (in progress)" : "") + ": " + std::string(e->summary));
    ASSERT_NE(at, std::string::npos) << e->name << "\n" << out;
    for (const pmhash::OptionSpec& o : e->options) {
      const std::string line = std::string(o.name) + " (" + std::string(pmhash::option_type_name(o.type)) +
                               ", default " + std::string(o.default_value) + ", " + pmhash::option_range(o);
      EXPECT_NE(out.find(line, at), std::string::npos) << line << "\n" << out;
      EXPECT_NE(out.find(std::string(o.doc), at), std::string::npos) << o.name;
    }
    for (const pmhash::PropertySpec& p : e->properties) {
      EXPECT_NE(out.find(std::string(p.name), at), std::string::npos) << p.name;
    }
  }
  for (const pmhash::EngineDescriptor* e : pmhash::finished_engines()) {
    EXPECT_NE(out.find(std::string(e->name) + ": "), std::string::npos) << e->name;
  }
}

// `engines --names|--modes LOCATION` is what scripts iterate over: the
// finished engines of the location, one per line, each in every durability
// its capabilities name; an unknown location is a usage error.
TEST_F(CliTest, EnginesNamesAndModesListTheFinishedEnginesOfALocation) {
  const std::pair<std::string, pmhash::Location> locations[] = {{"pool", pmhash::Location::kPoolFile},
                                                                 {"memnodes", pmhash::Location::kMemoryNodes}};
  for (const auto& [word, location] : locations) {
    std::string names;
    std::string modes;
    for (const pmhash::EngineDescriptor* e : pmhash::finished_engines()) {
      if (e->location != location) continue;
      names += std::string(e->name) + "\n";
      if (e->capabilities.strict) modes += std::string(e->name) + ":strict\n";
      if (e->capabilities.epoch) modes += std::string(e->name) + ":epoch\n";
    }
    EXPECT_FALSE(names.empty()) << word;
    EXPECT_EQ(ok({"engines", "--names", word}), names);
    EXPECT_EQ(ok({"engines", "--modes", word}), modes);
  }
  const std::vector<std::string> args = {"engines", "--modes", "tape"};
  const Result r = run_cli(args);
  EXPECT_EQ(r.exit_code, 2) << describe(args, r);
}

// pmeh's creation options shape the pool, its run-time options are taken
// by every command, and info shows its segments, directories and splits.
TEST_F(CliTest, PmehPoolsTakeTheirOptionsAndInfoShowsSegmentsDirectoriesAndSplits) {
  ok({"create", pool_, "--engine", "pmeh", "--size", "64M", "-o", "pmeh.zone_bits=1",
      "-o", "pmeh.segment_kib=4", "-o", "pmeh.workers=1", "-o", "pmeh.split_bits=1"});
  ok({"load", pool_, "--records", "4000", "-o", "pmeh.workers=2", "-o", "pmeh.split_bits=2",
      "-o", "pmeh.split_step=0"});
  ok({"put", pool_, "k", "v", "--engine", "pmeh", "-o", "pmeh.split_step=1"});
  EXPECT_EQ(ok({"get", pool_, "k", "-o", "pmeh.workers=1"}), "v\n");
  EXPECT_EQ(ok({"check", pool_}), "ok\n");
  const nlohmann::json small = info_json(pool_);
  EXPECT_EQ(small.value("engine", ""), "pmeh");
  EXPECT_EQ(small.value("items", std::uint64_t{0}), 4001u);
  // Two zones start with two segments; 4001 keys in 4 KiB segments need
  // splits, so there are more, each with the same number of slots.
  const std::uint64_t segments = small["properties"].value("pmeh.segments", std::uint64_t{0});
  const std::uint64_t slots = small.value("slots", std::uint64_t{0});
  EXPECT_GT(segments, 2u);
  ASSERT_GT(segments, 0u);
  EXPECT_EQ(slots % segments, 0u) << slots << " slots in " << segments << " segments";
  EXPECT_GE(slots, 4001u);
  EXPECT_GE(small["properties"].value("pmeh.directories", std::uint64_t{0}), 1u);
  for (const char* field : {"pmeh.directory_installs", "pmeh.items_moved", "pmeh.bytes_moved",
                            "pmeh.delegated_ops", "pmeh.read_retries"}) {
    EXPECT_TRUE(small["properties"].contains(field)) << field << "\n" << small.dump();
  }
  EXPECT_TRUE(small.contains("open_ns")) << small.dump();
  const std::string text = ok({"info", pool_});
  for (const char* row : {"pmeh.segments:", "pmeh.directories:", "pmeh.splits:", "resizing:",
                          "pmeh.bytes_moved:", "pmeh.delegated_ops:", "pmeh.read_retries:"}) {
    EXPECT_NE(text.find(row), std::string::npos) << row << "\n" << text;
  }
  // The same keys in 16 KiB segments (the default): four times the bytes,
  // at least four times the slots per segment (one header per segment).
  const std::string large = path("large");
  ok({"create", large, "--engine", "pmeh", "--size", "64M", "-o", "pmeh.zone_bits=1"});
  ok({"load", large, "--records", "4000"});
  const nlohmann::json big = info_json(large);
  const std::uint64_t big_segments = big["properties"].value("pmeh.segments", std::uint64_t{0});
  ASSERT_GT(big_segments, 0u);
  EXPECT_GE(big.value("slots", std::uint64_t{0}) / big_segments, 4 * (slots / segments));
  // Other engines' pools have no pmeh properties.
  create_pool(path("clevel"));
  const nlohmann::json clevel = info_json(paths_.back());
  EXPECT_FALSE(clevel["properties"].contains("pmeh.segments")) << clevel.dump();
}

TEST_F(CliTest, PmehOptionsForAnotherEngineOrOutOfRangeAreUsageErrors) {
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"create", pool_, "--engine", "clevel", "-o", "pmeh.zone_bits=2"},
        std::vector<std::string>{"create", pool_, "-o", "pmeh.segment_kib=8"},
        std::vector<std::string>{"create", pool_, "--engine", "nehash", "-o", "pmeh.workers=2"},
        std::vector<std::string>{"create", pool_, "--engine", "pmeh", "-o", "pmeh.zone_bits=9"},
        std::vector<std::string>{"create", pool_, "--engine", "pmeh", "-o", "pmeh.segment_kib=12"},
        std::vector<std::string>{"create", pool_, "--engine", "pmeh", "-o", "pmeh.segment_kib=x"},
        std::vector<std::string>{"create", pool_, "--engine", "pmeh", "-o", "pmeh.workers=65"},
        std::vector<std::string>{"create", pool_, "--engine", "pmeh", "-o", "pmeh.split_bits=0"},
        std::vector<std::string>{"create", pool_, "--engine", "pmeh", "-o", "pmeh.split_bits=4"},
        std::vector<std::string>{"create", pool_, "--engine", "pmeh", "-o", "pmeh.split_step=256"}}) {
    const Result r = run_cli(args);
    EXPECT_EQ(r.exit_code, 2) << describe(args, r);
    EXPECT_TRUE(is_one_line(r.err)) << describe(args, r);
    EXPECT_NE(r.err.find("pmeh."), std::string::npos) << describe(args, r);
    EXPECT_NE(::access(pool_.c_str(), F_OK), 0) << "a refused create left a file";
  }
  // Run-time options on a pool of another engine: refused, named, and the
  // pool is left as it was.
  create_pool(pool_);  // clevel
  ok({"put", pool_, "k", "v"});
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"put", pool_, "k", "w", "-o", "pmeh.split_step=2"},
        std::vector<std::string>{"put", pool_, "k", "w", "--engine", "clevel", "-o", "pmeh.workers=1"},
        std::vector<std::string>{"load", pool_, "--records", "10", "-o", "pmeh.split_bits=1"}}) {
    const Result r = run_cli(args);
    EXPECT_EQ(r.exit_code, 2) << describe(args, r);
    EXPECT_TRUE(is_one_line(r.err)) << describe(args, r);
    EXPECT_NE(r.err.find("pmeh only, not clevel"), std::string::npos) << describe(args, r);
  }
  EXPECT_EQ(ok({"get", pool_, "k"}), "v\n");
  EXPECT_EQ(info_json(pool_).value("items", std::uint64_t{0}), 1u);
}

TEST_F(CliTest, EpochDurabilityOnAnEngineWithoutEpochsIsRefusedAndSaysWhy) {
  create_pool(pool_);  // clevel
  const std::vector<std::string> args = {"put", pool_, "k", "v", "--durability", "epoch"};
  const Result r = run_cli(args);
  EXPECT_EQ(r.exit_code, 1) << describe(args, r);
  EXPECT_TRUE(is_one_line(r.err)) << describe(args, r);
  EXPECT_NE(r.err.find("strict"), std::string::npos) << describe(args, r);
  EXPECT_EQ(run_cli({"get", pool_, "k"}).exit_code, 1);  // nothing was written
}

TEST_F(CliTest, LoadInsertsRecordsAndCheckPasses) {
  create_pool(pool_);
  const std::vector<std::string> args = {"load", pool_, "--records", "20000", "--threads", "2"};
  const Result r = run_cli(args);
  ASSERT_EQ(r.exit_code, 0) << describe(args, r);
  EXPECT_EQ(r.err, "") << "stderr is no terminal: no progress bar expected";
  EXPECT_NE(r.out.find("records:     20000\n"), std::string::npos) << r.out;
  for (const char* field : {"seconds:", "Mops/s:", "load factor:"}) {
    EXPECT_NE(r.out.find(field), std::string::npos) << r.out;
  }

  EXPECT_EQ(info_json(pool_).value("items", std::uint64_t{0}), 20000u);
  EXPECT_EQ(ok({"check", pool_}), "ok\n");
}

TEST_F(CliTest, LoadRecordsAreReproducibleFromSeed) {
  const std::string a = path("a.pool");
  const std::string b = path("b.pool");
  const std::string c = path("c.pool");
  for (const std::string& pool : {a, b, c}) create_pool(pool);
  ok({"load", a, "--records", "500", "--seed", "7", "--key-size", "24", "--value-size", "30"});
  ok({"load", b, "--records", "500", "--seed", "7", "--key-size", "24", "--value-size", "30",
      "--threads", "3"});
  ok({"load", c, "--records", "500", "--seed", "8", "--key-size", "24", "--value-size", "30"});

  const std::vector<std::string> scan_a = sorted_lines(ok({"scan", a}));
  ASSERT_EQ(scan_a.size(), 500u);
  EXPECT_EQ(sorted_lines(ok({"scan", b})), scan_a) << "same seed, other thread count";
  EXPECT_NE(sorted_lines(ok({"scan", c})), scan_a) << "another seed";
  for (const std::string& line : scan_a) {
    EXPECT_EQ(line.size(), 24u + 1 + 30) << line;
    EXPECT_EQ(line[24], '\t') << line;
  }
}

TEST_F(CliTest, LoadKeysAreDistinctEvenWhenShort) {
  // 20000 keys among the 10^5 five-byte ones: cutting random 64-bit numbers
  // to five digits would collide about 2000 times.
  create_pool(pool_);
  ok({"load", pool_, "--records", "20000", "--key-size", "5", "--threads", "2"});
  EXPECT_EQ(info_json(pool_).value("items", std::uint64_t{0}), 20000u);
  std::set<std::string> keys;
  for (const std::string& line : sorted_lines(ok({"scan", pool_}))) {
    keys.insert(line.substr(0, line.find('\t')));
  }
  EXPECT_EQ(keys.size(), 20000u);
}

TEST_F(CliTest, LoadOfAnAlreadyLoadedSeedFailsAndSaysWhy) {
  create_pool(pool_);
  ok({"load", pool_, "--records", "100"});
  const std::vector<std::string> args = {"load", pool_, "--records", "100"};
  const Result r = run_cli(args);
  EXPECT_EQ(r.exit_code, 1) << describe(args, r);
  EXPECT_TRUE(is_one_line(r.err)) << describe(args, r);
  EXPECT_NE(r.err.find("--seed"), std::string::npos) << describe(args, r);
  EXPECT_EQ(info_json(pool_).value("items", std::uint64_t{0}), 100u);
}

TEST_F(CliTest, UsageErrorsPrintOneLineAndExitTwo) {
  const std::string pool = pool_;
  const std::vector<std::vector<std::string>> cases = {
      {},
      {"frobnicate", pool},
      {"--bogus"},
      {"get"},
      {"get", pool},
      {"get", pool, "k", "extra"},
      {"put", pool, "k"},
      {"scan", pool, "--nope"},
      {"load", pool},
      {"load", pool, "--records", "abc"},
      {"load", pool, "--records"},
      {"load", pool, "--records", "-5"},
      {"load", pool, "--records", "10", "--threads", "0"},
      {"load", pool, "--records", "10", "--threads", "99999999999999999999999"},
      {"load", pool, "--records", "101", "--key-size", "2"},
      {"load", pool, "--records", "10", "--key-size", "0"},
      {"create", pool, "--size", "1X"},
      {"create", pool, "--size", "0"},
      {"create", pool, "--size", "99999999999T"},
      {"create", pool, "--size", ""},
      {"create", pool, "--durability", "eventually"},
      {"create", pool, "--engine", "dali", "--epoch-ms", "0"},
      {"create", pool, "--engine", "dali", "--epoch-ms", "60001"},
      {"put", pool, "k", "v", "--epoch-ms", "x"},
  };
  for (const std::vector<std::string>& args : cases) {
    const Result r = run_cli(args);
    EXPECT_EQ(r.exit_code, 2) << describe(args, r);
    EXPECT_TRUE(is_one_line(r.err)) << describe(args, r);
    EXPECT_EQ(r.err.rfind("pmhash: ", 0), 0u) << describe(args, r);
    EXPECT_EQ(r.out, "") << describe(args, r);
  }
  EXPECT_NE(access(pool.c_str(), F_OK), 0) << "a usage error created " << pool;
}

TEST_F(CliTest, UsageErrorNamesTheBadValue) {
  const std::vector<std::string> args = {"load", pool_, "--records", "abc"};
  const Result r = run_cli(args);
  EXPECT_NE(r.err.find("--records"), std::string::npos) << describe(args, r);
  EXPECT_NE(r.err.find("'abc'"), std::string::npos) << describe(args, r);
}

TEST_F(CliTest, HelpGoesToStdoutAndExitsZero) {
  const Result r = run_cli({"--help"});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.err, "");
  for (const char* cmd : {"create", "put", "get", "del", "scan", "load", "info", "check"}) {
    EXPECT_NE(r.out.find(cmd), std::string::npos) << cmd;
  }
  const Result load = run_cli({"load", "--help"});
  EXPECT_EQ(load.exit_code, 0);
  EXPECT_NE(load.out.find("--records"), std::string::npos) << load.out;
  // create's help names every engine it can create.
  const Result create = run_cli({"create", "--help"});
  EXPECT_EQ(create.exit_code, 0);
  for (const std::string& engine : pmhash::Store::engines()) {
    EXPECT_NE(create.out.find(engine), std::string::npos) << engine << "\n" << create.out;
  }
  EXPECT_EQ(create.out.find("(in progress)"), std::string::npos) << create.out;
  EXPECT_NE(create.out.find("NAME=VALUE"), std::string::npos) << create.out;
}

TEST_F(CliTest, OpenOfNonPoolFileFailsAndLeavesItUnchanged) {
  std::string junk(8192, '\0');
  for (std::size_t i = 0; i < junk.size(); ++i) junk[i] = static_cast<char>(i * 131 % 251);
  const std::string short_file = path("short");
  write_file(pool_, junk);
  write_file(short_file, "tiny");
  for (const std::string& file : {pool_, short_file}) {
    for (const std::vector<std::string>& args :
         std::vector<std::vector<std::string>>{{"get", file, "k"},
                                               {"put", file, "k", "v"},
                                               {"info", file, "--json"},
                                               {"check", file},
                                               {"load", file, "--records", "10"}}) {
      const Result r = run_cli(args);
      EXPECT_NE(r.exit_code, 0) << describe(args, r);
      EXPECT_NE(r.exit_code, 2) << "not a usage error: " << describe(args, r);
      EXPECT_LT(r.exit_code, 128) << "killed by a signal: " << describe(args, r);
      EXPECT_TRUE(is_one_line(r.err)) << describe(args, r);
      EXPECT_NE(r.err.find(file), std::string::npos) << describe(args, r);
      EXPECT_EQ(r.out, "") << describe(args, r);
    }
  }
  EXPECT_EQ(file_bytes(pool_), junk);
  EXPECT_EQ(file_bytes(short_file), "tiny");
}

TEST_F(CliTest, OpenOfMissingFileNamesItAndCreatesNothing) {
  const std::vector<std::string> args = {"get", pool_, "k"};
  const Result r = run_cli(args);
  EXPECT_EQ(r.exit_code, 1) << describe(args, r);
  EXPECT_TRUE(is_one_line(r.err)) << describe(args, r);
  EXPECT_NE(r.err.find(pool_), std::string::npos) << describe(args, r);
  EXPECT_NE(access(pool_.c_str(), F_OK), 0);
}

TEST_F(CliTest, OpenWithAnotherEngineIsRefusedAndLeavesPoolUnchanged) {
  create_pool(pool_);
  ok({"put", pool_, "k", "v"});
  const std::string before = file_bytes(pool_);
  const std::vector<std::string> args = {"get", pool_, "k", "--engine", "no-such-engine"};
  const Result r = run_cli(args);
  EXPECT_EQ(r.exit_code, 1) << describe(args, r);
  EXPECT_TRUE(is_one_line(r.err)) << describe(args, r);
  EXPECT_EQ(file_bytes(pool_), before);
  EXPECT_EQ(ok({"get", pool_, "k", "--engine", "clevel"}), "v\n");
}

}  // namespace
