// tests/unit/memnode_execute_test.cc - the order in which a memory node's
// batch becomes durable (remote/transport.h, "Durability"; remote/verbs.cc,
// execute): at every fence the lines not yet durable are those of one
// writing verb, so a power loss at any instant keeps a prefix of the
// batch's writes (the last one possibly torn); one fence per writing verb
// where lines reach media in any order, one per batch on byte granularity,
// none for verbs that store nothing. The crash simulator
// (tests/crash/persistence_sim.h) watches a region and is asked at each
// fence.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "crash/persistence_sim.h"
#include "engine/planted.h"
#include "media/region.h"
#include "remote/transport.h"
#include "scratch_file.h"

namespace pmhash::testing {
namespace {

using media::Region;
using remote::Op;
using remote::Verb;

constexpr std::size_t kFileSize = 64 * 1024;

class MemnodeExecuteTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = scratch_path("pmhash-execute");
    create_zero_file(path_, kFileSize);
  }
  void TearDown() override {
    engine::planted::bugs.store(engine::planted::kNone);
    region_.reset();
    ::unlink(path_.c_str());
  }

  Region& map(const char* granularity) {
    granularity_.force(granularity);
    EXPECT_TRUE(Region::map_file(path_, 0, &region_).ok());
    return *region_;
  }

  std::uint64_t word(std::uint64_t off) const {
    std::uint64_t v = 0;
    std::memcpy(&v, region_->at(off), 8);
    return v;
  }

  // A batch with reads and with verbs that store nothing between four
  // writing verbs: a WRITE over three lines with ragged ends, a CAS that
  // matches, a one-word WRITE, an FAA of 3.
  struct Batch {
    std::vector<std::byte> out = std::vector<std::byte>(100, std::byte{0x5a});
    std::uint64_t small = 0x1122334455667788;
    std::vector<std::byte> in = std::vector<std::byte>(16);
    std::vector<Op> ops;
    // The lines each writing verb stores to, in verb order.
    std::vector<std::set<std::uint64_t>> lines = {{960, 1024, 1088}, {2048}, {3072}, {2240}};
    Batch() {
      ops.push_back({Verb::kWrite, 100, 1000, out.data()});
      ops.push_back({Verb::kRead, 16, 4096, in.data()});
      ops.push_back({Verb::kCas, 8, 2048, nullptr, 0, 5});     // 0 -> 5: stores
      ops.push_back({Verb::kCas, 8, 2112, nullptr, 9, 1});     // the word is 0: fails
      ops.push_back({Verb::kFaa, 8, 2176, nullptr, 0});        // adds nothing
      ops.push_back({Verb::kWrite, 8, 3072, &small});
      ops.push_back({Verb::kCas, 8, 2048, nullptr, 5, 5});     // matches, changes nothing
      ops.push_back({Verb::kFaa, 8, 2240, nullptr, 3});
    }
  };

  std::string path_;
  GranularityGuard granularity_;
  std::unique_ptr<Region> region_;
};

// Runs `ops` on `region` watched by a crash simulator; the dirty lines it
// saw at each fence, in order.
std::vector<std::set<std::uint64_t>> fences_of(Region& region, std::vector<Op>& ops) {
  PersistenceSim sim(region);
  std::vector<std::set<std::uint64_t>> seen;
  sim.set_crash_point_hook([&](const PersistenceSim& s) {
    const std::vector<std::uint64_t> dirty = s.dirty_units();
    seen.emplace_back(dirty.begin(), dirty.end());
  });
  remote::execute(region, ops);
  EXPECT_TRUE(sim.dirty_units().empty()) << "a completed batch left lines that are not durable";
  sim.set_crash_point_hook(nullptr);
  return seen;
}

TEST_F(MemnodeExecuteTest, AtEveryFenceOnlyOneWritingVerbIsNotYetDurable) {
  for (const char* g : {"cache_line", "page"}) {
    SCOPED_TRACE(g);
    Region& r = map(g);
    Batch b;
    const auto seen = fences_of(r, b.ops);
    // One fence per writing verb, each with exactly that verb's lines
    // pending: every earlier verb is durable, no later one has stored.
    EXPECT_EQ(seen, b.lines);
    EXPECT_EQ(word(2048), 5u);
    EXPECT_EQ(word(2240), 3u);
    EXPECT_EQ(word(3072), b.small);
    EXPECT_EQ(b.ops[2].result, 0u);  // a CAS that matched: the old word
    EXPECT_EQ(b.ops[3].result, 0u);  // one that failed: the word it found
    EXPECT_EQ(word(2112), 0u);
    EXPECT_EQ(b.ops[6].result, 5u);
    EXPECT_EQ(b.ops[7].result, 0u);
    region_.reset();
    create_zero_file(path_, kFileSize);
  }
}

TEST_F(MemnodeExecuteTest, OnByteGranularityABatchIsOneFence) {
  Region& r = map("byte");
  Batch b;
  const auto seen = fences_of(r, b.ops);
  ASSERT_EQ(seen.size(), 1u);  // stores persist in the order they become visible
  EXPECT_EQ(word(2048), 5u);
  EXPECT_EQ(word(2240), 3u);
}

TEST_F(MemnodeExecuteTest, VerbsThatStoreNothingCostNoFence) {
  Region& r = map("cache_line");
  std::uint64_t got = 0;
  std::vector<Op> ops = {{Verb::kRead, 8, 512, &got},
                         {Verb::kCas, 8, 2048, nullptr, 9, 1},
                         {Verb::kFaa, 8, 2048, nullptr, 0},
                         {Verb::kWrite, 0, 4096, &got}};
  const auto seen = fences_of(r, ops);
  EXPECT_TRUE(seen.empty());
  EXPECT_EQ(word(2048), 0u);
  EXPECT_EQ(ops[1].result, 0u);
}

// The executor of old (one fence at the end of the batch, kept as a planted
// bug for the crash explorer): at its one fence every verb's lines are
// pending together, so a crash there may keep a later write without an
// earlier one.
TEST_F(MemnodeExecuteTest, TheSingleFenceOfOldLeavesEveryVerbPendingAtOnce) {
  Region& r = map("cache_line");
  engine::planted::bugs.store(engine::planted::kMemnodeOneFencePerBatch);
  Batch b;
  const auto seen = fences_of(r, b.ops);
  std::set<std::uint64_t> all;
  for (const auto& l : b.lines) all.insert(l.begin(), l.end());
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0], all);
}

}  // namespace
}  // namespace pmhash::testing
