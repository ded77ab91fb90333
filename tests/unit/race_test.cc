// Unit tests of the race engine (src/engine/race, the RACE-hashing
// baseline) through the Store API, on memory nodes of the shm transport
// and of the tcp daemon: the operations against a model through splits,
// threads, concurrent inserts of one key, readers during splits, reopening,
// full nodes and bad input.
#include <atomic>
#include <barrier>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "engine/race/race.h"
#include "pmhash/store.h"
#include "remote/memnode.h"
#include "remote_engine_test.h"

namespace pmhash {
namespace {

using engine::race::SplitStep;
using testing::key_of;
using testing::Model;
using testing::value_of;

class RaceTest : public testing::RemoteEngineTest {
 protected:
  void TearDown() override { engine::race::set_split_hook_for_testing(nullptr); }

  Options options() const override {
    Options o;
    o.engine = "race";
    o.memnodes = "shm:" + nodes_[0] + ",shm:" + nodes_[1];
    // Small subtables (8 groups, 168 slots), so that a few thousand keys
    // split often.
    o.race_initial_depth = 1;
    o.race_groups = 8;
    o.race_max_depth = 12;
    return o;
  }

  // Every key of `model` has its value in `st`: the number that do not.
  static unsigned misses(Store& st, const Model& model) {
    unsigned missed = 0;
    for (const auto& [k, v] : model) {
      std::string got;
      if (!st.get(k, &got).ok() || got != v) ++missed;
    }
    return missed;
  }
};

TEST_F(RaceTest, OperationsFollowAModelThroughSplits) {
  auto st = create(options());
  ASSERT_NE(st, nullptr);
  Model model;
  ASSERT_NO_FATAL_FAILURE(run_model(*st, 12000, 3000, &model));
  const Stats stats = st->stats();
  EXPECT_EQ(stats.engine, "race");
  EXPECT_GT(stats.expansions, 4u);  // splits
  EXPECT_GT(stats.items_moved, 0u);
  EXPECT_GT(stats.bytes_moved, stats.expansions * 8 * 192);
  EXPECT_GT(stats.round_trips, 12000u);
  EXPECT_GT(stats.remote_bytes, stats.round_trips);
  ASSERT_NO_FATAL_FAILURE(expect_holds_here_and_reopened(std::move(st), model));
}

TEST_F(RaceTest, SplitsPastTheInitialDepthKeepEveryKey) {
  auto st = create(options());
  ASSERT_NE(st, nullptr);
  Model model;
  ASSERT_NO_FATAL_FAILURE(load(*st, 0, 20000, &model));
  // 20000 keys in subtables of 168 slots: at least 2^7 subtables, from 2.
  EXPECT_GE(st->stats().expansions, 126u);
  ASSERT_NO_FATAL_FAILURE(expect_holds(*st, model));
}

TEST_F(RaceTest, ThreadsWriteTheirOwnKeys) {
  auto st = create(options());
  ASSERT_NE(st, nullptr);
  ASSERT_NO_FATAL_FAILURE(run_threads(*st));
  EXPECT_GT(st->stats().expansions, 4u);
}

// Four clients insert the same absent key at once, round after round:
// exactly one insert returns OK, the others AlreadyExists, and the key
// then holds the winner's value (race.h, "Concurrent inserts of one key";
// no other key is written during a round, the case race.h proves).
TEST_F(RaceTest, ConcurrentInsertsOfOneKeyExactlyOneSucceeds) {
  auto st = create(options());
  ASSERT_NE(st, nullptr);
  constexpr unsigned kThreads = 4, kRounds = 300;
  std::vector<std::vector<Status>> results(kRounds, std::vector<Status>(kThreads));
  std::barrier start(kThreads);
  std::vector<std::thread> threads;
  for (unsigned t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (unsigned r = 0; r < kRounds; ++r) {
        start.arrive_and_wait();
        results[r][t] = st->insert("same-" + std::to_string(r), "t" + std::to_string(t));
        // Keys of their own too, between the rounds, so that the rounds run
        // through splits.
        start.arrive_and_wait();
        for (unsigned k = 0; k < 4; ++k) {
          EXPECT_TRUE(st->insert(key_of(t * 10000 + r * 4 + k), "x").ok());
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  for (unsigned r = 0; r < kRounds; ++r) {
    unsigned ok = 0, exists = 0, winner = 0;
    for (unsigned t = 0; t < kThreads; ++t) {
      if (results[r][t].ok()) {
        ++ok;
        winner = t;
      } else if (results[r][t].is_already_exists()) {
        ++exists;
      }
    }
    ASSERT_EQ(ok, 1u) << "round " << r;
    ASSERT_EQ(exists, kThreads - 1) << "round " << r;
    std::string got;
    ASSERT_TRUE(st->get("same-" + std::to_string(r), &got).ok());
    EXPECT_EQ(got, "t" + std::to_string(winner)) << "round " << r;
  }
  EXPECT_GT(st->stats().expansions, 0u);
  const Status c = st->check();
  EXPECT_TRUE(c.ok()) << c.to_string();
}

// A split is stopped after each of its steps (the test hook runs on the
// splitting thread, with the subtable locked); meanwhile other clients
// (two threads: a pooled session with an old directory and a new one) read
// every key inserted so far. None may be missing.
TEST_F(RaceTest, ReadersDuringEachSplitStepFindEveryKey) {
  auto st = create(options());
  ASSERT_NE(st, nullptr);
  Model model;
  std::atomic<unsigned> missed{0};
  std::vector<unsigned> steps(4, 0);
  engine::race::set_split_hook_for_testing([&](SplitStep step) {
    ++steps[static_cast<unsigned>(step)];
    std::thread a([&] { missed += misses(*st, model); });
    std::thread b([&] { missed += misses(*st, model); });
    a.join();
    b.join();
  });
  ASSERT_NO_FATAL_FAILURE(load(*st, 0, 1200, &model));  // each key after its insert returned
  engine::race::set_split_hook_for_testing(nullptr);
  EXPECT_EQ(missed.load(), 0u);
  for (unsigned s = 0; s < 4; ++s) EXPECT_GT(steps[s], 2u) << "step " << s;
  ASSERT_NO_FATAL_FAILURE(expect_holds(*st, model));
}

// Free-running: readers loop over keys loaded before they started while a
// writer inserts enough new keys to split every subtable several times.
TEST_F(RaceTest, ReadersRacingSplitsNeverMissAKey) {
  auto st = create(options());
  ASSERT_NE(st, nullptr);
  Model before;
  ASSERT_NO_FATAL_FAILURE(load(*st, 0, 1000, &before));
  const std::uint64_t splits0 = st->stats().expansions;
  std::atomic<bool> done{false};
  std::atomic<unsigned> missed{0}, passes{0};
  std::vector<std::thread> readers;
  for (int r = 0; r < 2; ++r) {
    readers.emplace_back([&] {
      while (!done.load()) {
        missed += misses(*st, before);
        ++passes;
      }
    });
  }
  Model after = before;
  for (unsigned i = 1000; i < 8000; ++i) {
    const Status s = st->insert(key_of(i), value_of(i, 0));
    EXPECT_TRUE(s.ok()) << s.to_string();
    after.emplace(key_of(i), value_of(i, 0));
  }
  done = true;
  for (auto& th : readers) th.join();
  EXPECT_EQ(missed.load(), 0u);
  EXPECT_GT(passes.load(), 0u);
  EXPECT_GT(st->stats().expansions, splits0 + 20);
  ASSERT_NO_FATAL_FAILURE(expect_holds(*st, after));
}

TEST_F(RaceTest, BadInputIsRefusedWithAClearError) {
  const Options o = options();
  ASSERT_NO_FATAL_FAILURE(expect_refuses_bad_input(o, "race"));
  std::unique_ptr<Store> st;
  // An engine of pool files on memory nodes: the message names those that run there.
  Options file = o;
  file.engine = "clevel";
  Status s = Store::create("", file, &st);
  EXPECT_TRUE(s.is_invalid_argument()) << s.to_string();
  EXPECT_NE(s.message().find("sephash, race"), std::string::npos) << s.to_string();
  // Options out of range.
  Options bad = o;
  bad.race_groups = 1;
  s = Store::create("", bad, &st);
  EXPECT_TRUE(s.is_invalid_argument()) << s.to_string();
  EXPECT_NE(s.message().find("race bucket groups"), std::string::npos) << s.to_string();
  bad = o;
  bad.race_max_depth = 21;
  EXPECT_TRUE(Store::create("", bad, &st).is_invalid_argument());
  // The race index on the nodes is no sephash index, and a sephash create
  // does not wipe it.
  Options seph = o;
  seph.engine = "sephash";
  s = Store::create("", seph, &st);
  EXPECT_TRUE(s.is_already_exists()) << s.to_string();
  s = Store::open("", seph, &st);
  EXPECT_TRUE(s.is_invalid_argument()) << s.to_string();
  st = open(o);
  ASSERT_NE(st, nullptr);
  std::string got;
  ASSERT_TRUE(st->get("k", &got).ok());
  EXPECT_EQ(got, "v");
}

TEST_F(RaceTest, AFullNodeGivesNoSpaceAndKeepsWhatIsStored) {
  const std::string small = dir_.str() + "/small";
  ASSERT_TRUE(remote::create_memnode(small, 4u << 20, false).ok());
  Options o = options();
  o.memnodes = "shm:" + small;
  o.race_max_depth = 10;
  expect_full_node_keeps_data(o, small);
}

// Over tcp: a killed node fails calls with IOError, never a hang; restarted
// from its pool file it serves every completed write.
TEST_F(RaceTest, ADeadNodeFailsCallsAndARestartedOneServesThem) {
  expect_dead_node_fails_calls_and_restart_serves_them();
}

class RaceProcessTest : public RaceTest {};

TEST_F(RaceProcessTest, ProcessesOnTwoShmNodes) { run_processes(options(), 2500); }

TEST_F(RaceProcessTest, ProcessesOnTwoTcpNodesOverLoopback) { run_processes_on_tcp(500); }

// ---- membership, generation, lease (engine/remote_index.h) ----
TEST_F(RaceTest, WrongNodeListsAreRefusedAtAttachAndChangeNothing) {
  expect_wrong_node_lists_refused();
}

TEST_F(RaceTest, WrongNodeListsAreRefusedAtAttachOverTcp) {
  expect_wrong_node_lists_refused_over_tcp();
}

TEST_F(RaceTest, AForcedCreateFailsTheOldClientsCallsAndKeepsTheNewIndex) {
  Options o = options();
  o.remote_timeout_ms = 200;  // a lease of 400 ms, which the forced create waits out
  expect_forced_create_fences_old_clients(o);
}

TEST_F(RaceTest, ConcurrentCreatesOnFreshNodesHaveOneWinner) {
  expect_concurrent_creates_have_one_winner();
}

// Race keeps a lease of twice its create's timeout: opens may not take a
// timeout above half of it.
TEST_F(RaceTest, ATimeoutAboveHalfTheStoredLeaseIsRefused) {
  Options o = options();
  o.remote_timeout_ms = 300;
  expect_timeout_above_half_the_lease_refused(o, 600);
}

}  // namespace
}  // namespace pmhash
