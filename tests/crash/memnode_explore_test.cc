// tests/crash/memnode_explore_test.cc - memory nodes under the crash
// checker in CI: the memory-node explorer
// (tests/crash_explore/memnode_explore.cc) over every engine on memory
// nodes, and the proof that it catches bugs.
//
// For each engine: a two-threaded workload on two nodes (sephash: every
// second fence of each node a crash point; race: every fence), and a longer
// one-threaded one (sephash: long enough to split both segments, every
// sixth crash point; race: every second); each crash image attached by a new client in a verifier process
// and checked against the oracle. sephash's runs must merge and split, and
// race's must split (subtables of 2 groups): a crash during a merge or
// split is recovered by a lock takeover (sephash.h "Dead lock holders",
// race.h "Dead splitters"). Then the planted bugs (the memory node's in
// engine/planted.h, the engines' in their <engine>_testing.h), one at a
// time: the explorer must report each, and the reproducer it
// saves must replay the violation.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "pmhash/store.h"
#include "scratch_file.h"
#include "subprocess.h"

namespace pmhash::testing {
namespace {

const std::string kExplorer = PMHASH_MEMNODE_CRASH_EXPLORE_PATH;

std::string describe(const SpawnResult& r) { return "stdout:\n" + r.out + "\nstderr:\n" + r.err; }

// Sums a field over the summary lines the explorer appended.
std::uint64_t sum_field(const std::string& summary_path, const std::string& field) {
  std::ifstream in(summary_path);
  std::string line;
  std::uint64_t total = 0;
  const std::string key = "\"" + field + "\":";
  while (std::getline(in, line)) {
    const std::size_t at = line.find(key);
    if (at != std::string::npos) total += std::stoull(line.substr(at + key.size()));
  }
  return total;
}

struct Exploration {
  const char* threads;
  const char* ops;
  const char* keys;
  const char* every;
  // The verifier's lease and remote timeout: recovery of an image taken
  // inside a split (or merge) waits a lease before it takes the lock over.
  const char* lease_ms = "50";
  const char* timeout_ms = "25";
};

std::vector<Exploration> runs_of(const std::string& engine) {
  if (engine == "sephash") {
    // Two CurSegs of 104 slots, MainSegs that split past 208 slots: the
    // two-thread run merges, the one-thread run (a few hundred live keys)
    // splits both segments.
    // Every second (sixth) crash point: make test's budget.
    return {{"2", "300", "150", "2"}, {"1", "2000", "800", "6"}};
  }
  // race, on subtables of 2 groups (42 slots): each run splits a few times,
  // and most of its crash points fall inside a split; a short lease
  // keeps their recovery quick.
  return {{"2", "300", "150", "1", "10", "5"}, {"1", "400", "150", "2", "10", "5"}};
}

class MemnodeCrashExplore : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    const std::string base = scratch_path("pmhash-mnexplore");
    summary_ = base + ".summary";
    reproducers_ = base + "-reproducers";
    ::unlink(summary_.c_str());
  }
  void TearDown() override {
    ::unlink(summary_.c_str());
    std::system(("rm -rf '" + reproducers_ + "'").c_str());
  }
  std::string summary_, reproducers_;
};

TEST_P(MemnodeCrashExplore, EveryCrashOfANodeRecoversToAPromisedState) {
  for (const Exploration& run : runs_of(GetParam())) {
    const SpawnResult r = run_program(
        kExplorer, {"--engine", GetParam(), "--nodes", "2", "--seed", "1", "--threads", run.threads, "--ops", run.ops,
                    "--keys", run.keys, "--every", run.every, "--race-groups", "2", "--lease-ms", run.lease_ms,
                    "--timeout-ms", run.timeout_ms, "--summary", summary_, "--reproducers", reproducers_});
    ASSERT_EQ(r.exit_code, 0) << "threads " << run.threads << "\n" << describe(r);
    EXPECT_NE(r.out.find(" 0 violations"), std::string::npos) << describe(r);
  }
  EXPECT_EQ(sum_field(summary_, "violations"), 0u);
  EXPECT_GE(sum_field(summary_, "images"), 4000u) << "explore more: raise --ops";
  if (GetParam() == "sephash") {
    EXPECT_GE(sum_field(summary_, "merges"), 4u) << "too few merges were crashed";
    EXPECT_GE(sum_field(summary_, "splits"), 1u) << "no split was crashed";
  } else {
    EXPECT_GE(sum_field(summary_, "splits"), 3u) << "too few race splits were crashed";
  }
}

INSTANTIATE_TEST_SUITE_P(RemoteEngines, MemnodeCrashExplore, ::testing::ValuesIn(Store::remote_engines()),
                         [](const auto& info) { return info.param; });

// --- the checker catches planted bugs ----------------------------------------

struct Bug {
  const char* engine;
  const char* name;
};

void PrintTo(const Bug& bug, std::ostream* os) { *os << bug.engine << " " << bug.name; }

class MemnodePlantedBug : public ::testing::TestWithParam<Bug> {
 protected:
  void SetUp() override { reproducers_ = scratch_path("pmhash-mnplanted") + "-reproducers"; }
  void TearDown() override { std::system(("rm -rf '" + reproducers_ + "'").c_str()); }
  std::string reproducers_;
};

TEST_P(MemnodePlantedBug, IsReportedWithAReproducerThatReplaysIt) {
  const Bug& bug = GetParam();
  const SpawnResult r = run_program(
      kExplorer, {"--engine", bug.engine, "--nodes", "2", "--seed", "1", "--threads", "1", "--ops", "400", "--keys",
                  "150", "--plant", bug.name, "--stop-after", "1", "--max-reports", "1", "--reproducers",
                  reproducers_});
  ASSERT_EQ(r.exit_code, 1) << "the explorer missed the planted bug\n" << describe(r);
  ASSERT_NE(r.out.find(std::string("VIOLATION engine ") + bug.engine + " nodes 2 seed 1"), std::string::npos)
      << describe(r);
  EXPECT_NE(r.out.find("crash point "), std::string::npos) << describe(r);
  EXPECT_NE(r.out.find("dropped "), std::string::npos) << describe(r);

  // "replay: <explorer> --replay <file>": the one-line command replays it.
  const std::size_t at = r.out.find("--replay ");
  ASSERT_NE(at, std::string::npos) << describe(r);
  const std::size_t end = r.out.find('\n', at);
  const std::string file = r.out.substr(at + 9, end - at - 9);
  const SpawnResult replay = run_program(kExplorer, {"--replay", file});
  EXPECT_EQ(replay.exit_code, 1) << describe(replay);
  EXPECT_NE(replay.out.find("VIOLATION"), std::string::npos) << describe(replay);
}

INSTANTIATE_TEST_SUITE_P(EveryRemoteEngine, MemnodePlantedBug,
                         ::testing::Values(Bug{"sephash", "sephash-meta-before-mainseg"},
                                           Bug{"race", "race-slot-before-kv"},
                                           // A split's intent durable before the new subtable it names.
                                           Bug{"race", "race-intent-before-new-table"},
                                           // The executor of old: sephash's publish batches
                                           // (race's batches each publish at most at their end).
                                           Bug{"sephash", "memnode-one-fence"}),
                         [](const auto& info) {
                           std::string name = std::string(info.param.engine) + "_" + info.param.name;
                           for (char& c : name) {
                             if (c == '-') c = '_';
                           }
                           return name;
                         });

}  // namespace
}  // namespace pmhash::testing
