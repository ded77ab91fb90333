// tests/crash/explore_test.cc - the crash checker in CI: the crash-state
// explorer (tests/crash_explore/explore.cc) over every registered engine,
// and the proof that it catches bugs.
//
// For each engine: one- and two-threaded workloads crashed at every drain,
// every crash image recovered in a verifier process and checked against
// the oracle; at least kMinImages images. Engines that persist by epochs
// are explored with strict durability and with epoch durability, on
// cache_line and page granularity (where any dirty line, or page, may reach
// media in any order). nehash is explored with groups of two buckets under a
// one-entry main directory (the explorer's default), so that the workload
// splits groups and expands the directory: the runs must do both. pmeh
// runs with 4 KiB segments, k = 3 and k = 1, one and two threads,
// and must split segments and install deeper directories. Then the classic
// mistakes the engines declare in their <engine>_testing.h, planted one at
// a time (three into clevel, two into dali, four into nehash, four into
// pmeh): the explorer must report each, and the reproducer it saves must
// replay the violation.
//
// Durable linearizability: the shared-key workload (threads reading and
// writing common keys, taking turns inside drains; crash/oracle.h,
// SharedOracle) on clevel, dali (strict and epoch), nehash and pmeh, with
// no violation; and readers planted to answer from writes a crash can
// still take back (one per engine, and clevel's losing insert clearing its
// intent before its drain) are reported.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "crash/workload.h"
#include "pmhash/store.h"
#include "scratch_file.h"
#include "subprocess.h"

namespace pmhash::testing {
namespace {

// make test's budget: every crash point of each run, four sampled subsets of
// its dirty lines beyond the exhaustive ones (make crash-long explores at
// length).
constexpr std::uint64_t kMinImages = 10000;
constexpr const char* kSamples = "4";

const std::string kExplorer = PMHASH_CRASH_EXPLORE_PATH;

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

class CrashExplore : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    base_ = scratch_path("pmhash-explore");
    summary_ = base_ + ".summary";
    reproducers_ = base_ + "-reproducers";
    ::unlink(summary_.c_str());
  }
  void TearDown() override {
    ::unlink(summary_.c_str());
    std::system(("rm -rf '" + reproducers_ + "'").c_str());
  }

  std::string base_, summary_, reproducers_;
};

// The explorations of one engine in CI.
struct Exploration {
  const char* threads;
  const char* ops;
  const char* durability;
  const char* granularity;
  const char* keys = "150";
  std::vector<std::string> extra = {};  // engine options
  const char* every = "1";
};

std::uint64_t min_images(const std::string& engine) {
  // pmeh: two explorations of a few hundred operations each, every second
  // crash point (about 2.5 drains per operation, 4-5 images each).
  return engine == "pmeh" ? 2000 : kMinImages;
}

std::vector<Exploration> runs_of(const std::string& engine) {
  if (engine == "pmeh") {
    // One zone of 4 KiB segments: the first segment splits after about 130
    // keys (k = 3: into 8, installing a directory of depth 3; k = 1: into
    // 2), a few hundred operations in. Two owners; every second crash
    // point, so that both runs stay under a minute.
    return {{"1", "450", "strict", "cache_line", "450",
             {"--pmeh-split-bits", "3", "--pmeh-zone-bits", "0", "--pmeh-workers", "2"}, "2"},
            {"2", "250", "strict", "cache_line", "250",
             {"--pmeh-split-bits", "1", "--pmeh-zone-bits", "0", "--pmeh-workers", "2"}, "2"}};
  }
  if (engine == "nehash") {
    // More keys: a few hundred make the tiny groups split several times and
    // the directory expand.
    // Its crash points leave fewer dirty lines than clevel's (fewer images
    // each): more operations for as many images.
    return {{"1", "900", "strict", "cache_line", "300"}, {"2", "450", "strict", "cache_line", "300"}};
  }
  if (!crashtest::accepts_epoch_durability(engine)) {
    return {{"1", "700", "strict", "cache_line"}, {"2", "350", "strict", "cache_line"}};
  }
  // Strict durability costs two global fences per write: fewer operations.
  // Write groups of eight (pmhash-server's group persistence), two threads.
  return {{"1", "250", "strict", "cache_line"},
          {"2", "200", "strict", "cache_line", "150", {"--write-group", "8"}},
          {"1", "500", "epoch", "cache_line"},
          {"2", "350", "epoch", "cache_line"},
          {"2", "350", "epoch", "page"}};
}

TEST_P(CrashExplore, EveryCrashImageRecoversToAPromisedState) {
  for (const Exploration& run : runs_of(GetParam())) {
    std::vector<std::string> args = {"--engine", GetParam(), "--seed", "1", "--threads", run.threads, "--ops",
                                     run.ops, "--keys", run.keys, "--durability", run.durability, "--granularity",
                                     run.granularity, "--samples", kSamples, "--every", run.every, "--summary", summary_,
                                     "--reproducers", reproducers_};
    args.insert(args.end(), run.extra.begin(), run.extra.end());
    const SpawnResult r = run_program(kExplorer, args);
    ASSERT_EQ(r.exit_code, 0) << "threads " << run.threads << " " << run.durability << " " << run.granularity
                              << "\n" << describe(r);
    EXPECT_NE(r.out.find(" 0 violations"), std::string::npos) << describe(r);
  }
  EXPECT_GE(sum_field(summary_, "images"), min_images(GetParam())) << "explore more: raise --ops";
  EXPECT_GT(sum_field(summary_, "recovery_images"), 0u) << "no recovery was crashed";
  EXPECT_EQ(sum_field(summary_, "violations"), 0u);
  if (GetParam() == "nehash") {
    EXPECT_GT(sum_field(summary_, "nehash.splits"), 0u) << "no group split was crashed";
    EXPECT_GT(sum_field(summary_, "nehash.full_expansions"), 0u) << "no full expansion was crashed";
  }
  if (GetParam() == "pmeh") {
    // Each run splits a segment and installs a deeper directory (the old
    // one is retired once its zone filled into the new: a run ends with one
    // live directory, so "pmeh.directories" says nothing here).
    EXPECT_GE(sum_field(summary_, "pmeh.splits"), 2u) << "no segment split was crashed";
    EXPECT_GE(sum_field(summary_, "pmeh.directory_installs"), 2u) << "no directory install was crashed";
  }
}

INSTANTIATE_TEST_SUITE_P(Engines, CrashExplore, ::testing::ValuesIn(Store::engines()),
                         [](const auto& info) { return info.param; });

// --- durable linearizability: the shared-key workload -------------------------

// One shared-key exploration: threads on common keys taking turns inside
// drains, every crash image checked against every answer a call gave
// (crash/oracle.h, SharedOracle).
struct SharedRun {
  const char* engine;
  const char* durability;
  const char* ops = "100";
  const char* every = "1";
  std::vector<std::string> extra = {};  // engine options
};

class SharedKeyCrashExplore : public CrashExplore {};

// Runs the explorer on the shared-key workload; the summary goes to
// `summary`.
SpawnResult explore_shared(const SharedRun& run, const std::string& summary, const std::string& reproducers,
                           const std::vector<std::string>& more = {}) {
  std::vector<std::string> args = {"--engine", run.engine, "--durability", run.durability, "--shared-keys",
                                   "--seed", "1", "--threads", "2", "--ops", run.ops, "--keys", "8",
                                   "--samples", "2", "--every", run.every, "--summary", summary,
                                   "--reproducers", reproducers};
  args.insert(args.end(), run.extra.begin(), run.extra.end());
  args.insert(args.end(), more.begin(), more.end());
  return run_program(kExplorer, args);
}

TEST_P(SharedKeyCrashExplore, EveryCrashImageAgreesWithEveryAnswerGiven) {
  std::vector<SharedRun> runs;
  const std::string engine = GetParam();
  if (engine == "clevel") runs = {{"clevel", "strict"}};
  if (engine == "dali") runs = {{"dali", "strict"}, {"dali", "epoch"}};
  if (engine == "nehash") runs = {{"nehash", "strict"}};
  if (engine == "pmeh") runs = {{"pmeh", "strict", "100", "1", {"--pmeh-zone-bits", "0"}}};
  ASSERT_FALSE(runs.empty());
  for (const SharedRun& run : runs) {
    const SpawnResult r = explore_shared(run, summary_, reproducers_, {"--stop-after", "1"});
    ASSERT_EQ(r.exit_code, 0) << run.engine << " " << run.durability << "\n" << describe(r);
    EXPECT_NE(r.out.find(" 0 violations"), std::string::npos) << describe(r);
  }
  EXPECT_EQ(sum_field(summary_, "violations"), 0u);
  EXPECT_GE(sum_field(summary_, "images"), 500u) << "explore more: raise --ops";
  // The turns changed hands inside drains (else no read met a write
  // before its drain).
  EXPECT_GT(sum_field(summary_, "turn_passes") + sum_field(summary_, "guest_reads"), 50u);
}

INSTANTIATE_TEST_SUITE_P(PoolEngines, SharedKeyCrashExplore, ::testing::Values("clevel", "dali", "nehash", "pmeh"),
                         [](const auto& info) { return std::string(info.param); });

// --- the checker catches planted bugs ----------------------------------------

struct Bug {
  const char* engine;
  const char* name;
  const char* durability;
  const char* keys = "150";
  const char* ops = "700";
  std::vector<std::string> extra = {};  // engine options
  // Seeds tried in turn until one run reports the bug (a run's thread
  // interleaving also depends on how the machine schedules a stalled turn).
  std::vector<std::string> seeds = {"1"};
};

// pmeh's split and directory bugs show once the first segment splits: one
// zone, 400 keys and a long growth phase (the first split comes about 210
// operations in).
const std::vector<std::string> kPmehOneZone = {"--pmeh-zone-bits", "0"};

// The shared-key workload (two threads taking turns inside drains): what a
// reader answering from an unpersisted write needs to be seen. A reader's
// bug shows at the crash point right after the turn changed hands inside a
// drain, which the explorer explores whatever --every says: only those.
const std::vector<std::string> kSharedReads = {"--shared-keys", "--threads", "2", "--samples", "2",
                                               "--every", "1000000"};
// pmeh's writers write directly (write mode 2): a write delegated to an
// owner thread drains in the owner, where the explorer's turns cannot hand
// the reader a turn, and on a loaded machine whole runs met no such read.
const std::vector<std::string> kSharedReadsPmeh = {"--shared-keys", "--threads", "2", "--samples", "2",
                                                   "--every", "1000000", "--pmeh-zone-bits", "0",
                                                   "--pmeh-write-mode", "2"};
// Two inserts of one key racing (few keys), every crash point.
const std::vector<std::string> kSharedRaces = {"--shared-keys", "--threads", "2", "--samples", "2"};

class PlantedBug : public ::testing::TestWithParam<Bug> {
 protected:
  void SetUp() override { reproducers_ = scratch_path("pmhash-planted") + "-reproducers"; }
  void TearDown() override { std::system(("rm -rf '" + reproducers_ + "'").c_str()); }
  std::string reproducers_;
};

TEST_P(PlantedBug, IsReportedWithAReproducerThatReplaysIt) {
  const Bug& bug = GetParam();
  SpawnResult r;
  std::string seed;
  for (const std::string& s : bug.seeds) {
    seed = s;
    std::vector<std::string> args = {"--engine", bug.engine, "--seed", seed, "--threads", "1", "--ops", bug.ops,
                                     "--keys", bug.keys, "--durability", bug.durability, "--plant", bug.name,
                                     "--stop-after", "1", "--max-reports", "1", "--reproducers",
                                     reproducers_};
    args.insert(args.end(), bug.extra.begin(), bug.extra.end());
    r = run_program(kExplorer, args);
    if (r.exit_code == 1) break;
  }
  ASSERT_EQ(r.exit_code, 1) << "the explorer missed the planted bug with every seed\n" << describe(r);
  ASSERT_NE(r.out.find(std::string("VIOLATION engine ") + bug.engine + " seed " + seed + " "),
            std::string::npos)
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

INSTANTIATE_TEST_SUITE_P(EveryEngine, PlantedBug,
                         ::testing::Values(Bug{"clevel", "slot-before-item", "strict"},
                                           Bug{"clevel", "no-fence-before-context-swap", "strict"},
                                           Bug{"clevel", "progress-not-persisted", "strict"},
                                           Bug{"dali", "dali-only-one-epoch-fails", "epoch"},
                                           Bug{"dali", "dali-bucket-not-fenced", "epoch"},
                                           Bug{"dali", "dali-write-group-ends-early", "strict", "150", "200",
                                               {"--write-group", "8"}},
                                           Bug{"nehash", "nehash-meta-before-slot-durable", "strict"},
                                           Bug{"nehash", "nehash-table-before-group-durable", "strict"},
                                           Bug{"nehash", "nehash-split-not-finished", "strict"},
                                           // Fewer keys: a key written again soon after a slot
                                           // update of it shows the stale record early.
                                           Bug{"nehash", "nehash-op-log-clear-not-persisted", "strict", "40"},
                                           Bug{"pmeh", "pmeh-meta-before-slot-durable", "strict"},
                                           Bug{"pmeh", "pmeh-zone-filled-before-entries-durable", "strict", "400",
                                               "1000", kPmehOneZone},
                                           Bug{"pmeh", "pmeh-dir-slot-not-persisted-before-fill", "strict", "400",
                                               "1000", kPmehOneZone},
                                           Bug{"pmeh", "pmeh-split-record-ignored", "strict", "400", "1000",
                                               kPmehOneZone},
                                           // Readers that answer from what a crash can take back:
                                           // two threads on few shared keys.
                                           Bug{"clevel", "clevel-read-unpersisted", "strict", "8", "300",
                                               kSharedReads},
                                           // One key, seed 2: the race whose loser's cleared intent
                                           // reaches media without its slot clear comes about 90
                                           // calls in (with four keys and seed 1 most runs met none).
                                           // One run in six missed it on a loaded machine (a turn
                                           // stalled on an inserter's spin and ran anyway); seeds
                                           // 1, 4 and 6 also reach it (2, 1 and 4 all missed once
                                           // with a build running beside; 3 and 5 missed then).
                                           Bug{"clevel", "clevel-loser-clear-before-drain", "strict", "1", "200",
                                               kSharedRaces, {"2", "1", "4", "6"}},
                                           // One key: every get that runs while a write is in
                                           // flight reads the key it writes (with eight keys, one
                                           // get in eight did, and the runs that met none missed).
                                           Bug{"dali", "dali-answer-before-durable", "strict", "1", "200",
                                               kSharedReads},
                                           Bug{"nehash", "nehash-read-unpersisted", "strict", "1", "200",
                                               kSharedReads},
                                           Bug{"pmeh", "pmeh-read-unpersisted", "strict", "1", "200",
                                               kSharedReadsPmeh}),
                         [](const auto& info) {
                           std::string name = info.param.name;
                           for (char& c : name) {
                             if (c == '-') c = '_';
                           }
                           return name;
                         });

}  // namespace
}  // namespace pmhash::testing
