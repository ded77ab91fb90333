// Unit tests of the race engine (src/engine/race, the RACE-hashing
// baseline) through the Store API, on memory nodes of the shm transport
// and of the tcp daemon: the operations against a model through splits,
// threads, concurrent inserts of one key, readers during splits, reopening,
// full nodes and bad input; splitters that die or stall, taken over by
// other clients after the index's lease; scans across every split step.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <barrier>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "engine/hash.h"
#include "engine/race/race.h"
#include "engine/race/race_testing.h"
#include "pmhash/store.h"
#include "remote/memnode.h"
#include "remote_engine_test.h"

namespace pmhash {
namespace {

using engine::race::SplitStep;
using testing::key_of;
using testing::Model;
using testing::value_of;

constexpr unsigned kSplitSteps = static_cast<unsigned>(SplitStep::kDirectoryFinished) + 1;

std::string step_name(SplitStep step) {
  switch (step) {
    case SplitStep::kLocked: return "Locked";
    case SplitStep::kFrozen: return "Frozen";
    case SplitStep::kNewTableWritten: return "NewTableWritten";
    case SplitStep::kIntentWritten: return "IntentWritten";
    case SplitStep::kDirectoryUpdated: return "DirectoryUpdated";
    case SplitStep::kHeadersHalfUpdated: return "HeadersHalfUpdated";
    case SplitStep::kHeadersUpdated: return "HeadersUpdated";
    case SplitStep::kSlotsHalfRewritten: return "SlotsHalfRewritten";
    case SplitStep::kSlotsRewritten: return "SlotsRewritten";
    case SplitStep::kDirectoryFinished: return "DirectoryFinished";
  }
  return "Unknown";
}

class RaceTest : public testing::RemoteEngineTest {
 protected:
  void TearDown() override { engine::race::testing::set_split_hook(nullptr); }

  Options options() const override {
    Options o;
    o.engine = "race";
    o.memnodes = "shm:" + nodes_[0] + ",shm:" + nodes_[1];
    // Small subtables (8 groups, 168 slots), so that a few thousand keys
    // split often.
    o.set("race.initial_depth", 1);
    o.set("race.groups", 8);
    o.set("race.max_depth", 12);
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
  EXPECT_GT(stats.property("race.splits"), 4u);  // splits
  EXPECT_GT(stats.property("race.items_moved"), 0u);
  EXPECT_GT(stats.property("race.split_bytes"), stats.property("race.splits") * 8 * 192);
  EXPECT_GT(stats.property("race.round_trips"), 12000u);
  EXPECT_GT(stats.property("race.remote_bytes"), stats.property("race.round_trips"));
  ASSERT_NO_FATAL_FAILURE(expect_holds_here_and_reopened(std::move(st), model));
}

TEST_F(RaceTest, SplitsPastTheInitialDepthKeepEveryKey) {
  auto st = create(options());
  ASSERT_NE(st, nullptr);
  Model model;
  ASSERT_NO_FATAL_FAILURE(load(*st, 0, 20000, &model));
  // 20000 keys in subtables of 168 slots: at least 2^7 subtables, from 2.
  EXPECT_GE(st->stats().property("race.splits"), 126u);
  ASSERT_NO_FATAL_FAILURE(expect_holds(*st, model));
}

TEST_F(RaceTest, ThreadsWriteTheirOwnKeys) {
  auto st = create(options());
  ASSERT_NE(st, nullptr);
  ASSERT_NO_FATAL_FAILURE(run_threads(*st));
  EXPECT_GT(st->stats().property("race.splits"), 4u);
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
  EXPECT_GT(st->stats().property("race.splits"), 0u);
  const Status c = st->check();
  EXPECT_TRUE(c.ok()) << c.to_string();
}

// A split is stopped after each of its steps (the test hook runs on the
// splitting thread, with the subtable locked); meanwhile other clients
// (two threads: a pooled session with an old directory and a new one) read
// every key inserted so far. None may be missing. (With half the headers
// rewritten, a step no live split stops at, readers whose buckets straddle
// the halves see torn views until the split goes on, or a lease passes and
// they take it over: no readers there.)
TEST_F(RaceTest, ReadersDuringEachSplitStepFindEveryKey) {
  // The readers run inside the split, which must not pass half its lease
  // meanwhile, also on a slow machine under a sanitizer: a long lease.
  Options o = options();
  o.remote_timeout_ms = 15000;
  auto st = create(o);
  ASSERT_NE(st, nullptr);
  Model model;
  std::atomic<unsigned> missed{0};
  std::vector<unsigned> steps(kSplitSteps, 0);
  engine::race::testing::set_split_hook([&](SplitStep step, bool taking_over) {
    EXPECT_FALSE(taking_over);
    ++steps[static_cast<unsigned>(step)];
    if (step == SplitStep::kHeadersHalfUpdated) return false;
    std::thread a([&] { missed += misses(*st, model); });
    std::thread b([&] { missed += misses(*st, model); });
    a.join();
    b.join();
    return false;
  });
  ASSERT_NO_FATAL_FAILURE(load(*st, 0, 1200, &model));  // each key after its insert returned
  engine::race::testing::set_split_hook(nullptr);
  EXPECT_EQ(missed.load(), 0u);
  for (unsigned s = 0; s < kSplitSteps; ++s) EXPECT_GT(steps[s], 2u) << step_name(SplitStep(s));
  EXPECT_EQ(st->stats().property("race.lock_takeovers"), 0u);
  ASSERT_NO_FATAL_FAILURE(expect_holds(*st, model));
}

// Free-running: readers loop over keys loaded before they started while a
// writer inserts enough new keys to split every subtable several times.
TEST_F(RaceTest, ReadersRacingSplitsNeverMissAKey) {
  auto st = create(options());
  ASSERT_NE(st, nullptr);
  Model before;
  ASSERT_NO_FATAL_FAILURE(load(*st, 0, 1000, &before));
  const std::uint64_t splits0 = st->stats().property("race.splits");
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
  EXPECT_GT(st->stats().property("race.splits"), splits0 + 20);
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
  bad.set("race.groups", 1);
  s = Store::create("", bad, &st);
  EXPECT_TRUE(s.is_invalid_argument()) << s.to_string();
  EXPECT_NE(s.message().find("race.groups must be 2..4096, got 1"), std::string::npos) << s.to_string();
  bad = o;
  bad.set("race.max_depth", 21);
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
  o.set("race.max_depth", 10);
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

// ---- membership, generation, lease (engine/remote_common/remote_index.h) ----
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

// ---- a splitter that dies or stalls (race.h, "Dead splitters") ----
// A short lease (twice the create's remote timeout), so that a takeover
// comes soon; the margin is what a call on a taken-over subtable may take
// beyond the lease (round trips, the split's roll-forward, a slow
// sanitizer build).
class RaceSplitLockTest : public RaceTest {
 protected:
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
  static constexpr unsigned kTimeoutMs = 500, kMarginMs = 5000;
#else
  static constexpr unsigned kTimeoutMs = 150, kMarginMs = 3000;
#endif

  // The clients' remote timeout at create; the index's lease is twice it.
  virtual unsigned timeout_ms() const { return kTimeoutMs; }
  unsigned lease_ms() const { return 2 * timeout_ms(); }

  Options options() const override {
    Options o = RaceTest::options();
    o.remote_timeout_ms = timeout_ms();
    return o;
  }

  static double ms_since(std::chrono::steady_clock::time_point t) {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count();
  }

  // Inserts key_of(0, 1, ...) into `st` until the split hook stops a
  // splitter at `step` (its first holder, as if its client died there):
  // that insert returns IOError. *model gets the acknowledged inserts,
  // *unacked the stopped one's key, *next the key after it.
  static void insert_until_stopped(Store& st, SplitStep step, Model* model, std::string* unacked,
                                   unsigned* next) {
    std::atomic<bool> fired{false};
    engine::race::testing::set_split_hook([&](SplitStep at, bool taking_over) {
      return !taking_over && at == step && !fired.exchange(true);
    });
    for (unsigned i = 0; i < 20000 && unacked->empty(); ++i) {
      const Status s = st.insert(key_of(i), value_of(i, 0));
      *next = i + 1;
      if (s.ok()) {
        model->emplace(key_of(i), value_of(i, 0));
        continue;
      }
      ASSERT_TRUE(s.is_io_error()) << s.to_string();
      ASSERT_NE(s.message().find("test hook stopped a split"), std::string::npos) << s.to_string();
      *unacked = key_of(i);
    }
    engine::race::testing::set_split_hook(nullptr);
    ASSERT_TRUE(fired.load()) << "no split reached step " << step_name(step);
    ASSERT_GT(model->size(), 20u);
  }

  // A client process that inserts key_of(0, 1, ...) until it dies (_exit
  // in the split hook, nothing more written) at `step` of a split; the
  // parent learns the acknowledged inserts through a pipe.
  void kill_splitter_at(SplitStep step, Model* model_out, std::string* unacked_out,
                        unsigned* next_out) {
    auto created = create(options());
    ASSERT_NE(created, nullptr);
    ASSERT_TRUE(created->close().ok());
    created.reset();
    int fds[2];
    ASSERT_EQ(::pipe(fds), 0);
    const Options o = options();
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      ::close(fds[0]);
      std::unique_ptr<Store> mine;
      if (!Store::open("", o, &mine).ok()) ::_exit(2);
      engine::race::testing::set_split_hook([step](SplitStep at, bool taking_over) {
        if (!taking_over && at == step) ::_exit(42);  // dies here: nothing more is written
        return false;
      });
      for (std::uint32_t i = 0; i < 20000; ++i) {
        // Which insert it is about to make, then that it was acknowledged.
        const std::uint32_t msg[2] = {i, 0};
        if (::write(fds[1], msg, 4) != 4) ::_exit(4);
        if (!mine->insert(key_of(i), value_of(i, 0)).ok()) ::_exit(3);
        if (::write(fds[1], msg + 1, 4) != 4) ::_exit(4);
      }
      ::_exit(5);  // the step never came
    }
    ::close(fds[1]);
    Model model;
    std::string unacked;
    unsigned next = 0;
    for (std::uint32_t word[2]; ::read(fds[0], &word[0], 4) == 4;) {
      unacked = key_of(word[0]);
      next = word[0] + 1;
      if (::read(fds[0], &word[1], 4) != 4) break;
      model.emplace(unacked, value_of(word[0], 0));
      unacked.clear();
    }
    ::close(fds[0]);
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 42) << "status " << status;
    ASSERT_FALSE(unacked.empty());
    ASSERT_GT(model.size(), 20u);
    *model_out = std::move(model);
    *unacked_out = unacked;
    *next_out = next;
  }

  // After a splitter stopped at some step with the subtable locked,
  // leaving the insert of `unacked` unanswered: check() as the next call
  // (of `st`, another client) waits about a lease, takes the split over
  // (finishing it when `forward`, the hook seeing the taker's steps; else
  // undoing it, which has no steps) and passes. Then every acknowledged
  // key reads back, the unanswered one is absent, and the index keeps
  // working through thousands more inserts and more splits, also after a
  // reopen.
  void expect_recovers(std::unique_ptr<Store> st, Model model, const std::string& unacked,
                       unsigned next, bool forward) {
    std::atomic<unsigned> taker_steps{0};
    engine::race::testing::set_split_hook([&](SplitStep, bool taking_over) {
      if (taking_over) ++taker_steps;
      return false;
    });
    const auto t0 = std::chrono::steady_clock::now();
    const Status c = st->check();
    const double waited = ms_since(t0);
    engine::race::testing::set_split_hook(nullptr);
    ASSERT_TRUE(c.ok()) << c.to_string();
    EXPECT_GE(waited, lease_ms() * 0.9) << "check() did not wait for the lease";
    EXPECT_LT(waited, lease_ms() + kMarginMs);
    EXPECT_EQ(st->stats().property("race.lock_takeovers"), 1u);
    if (forward) {
      EXPECT_GT(taker_steps.load(), 0u) << "the split was undone, not finished";
    } else {
      EXPECT_EQ(taker_steps.load(), 0u) << "the split was finished, not undone";
    }
    std::string got;
    const Status g = st->get(unacked, &got);
    EXPECT_TRUE(g.is_not_found()) << g.to_string();  // its entry was never placed
    ASSERT_NO_FATAL_FAILURE(expect_holds(*st, model));
    const std::uint64_t splits = st->stats().property("race.splits");
    ASSERT_NO_FATAL_FAILURE(load(*st, next, next + 3000, &model));
    EXPECT_GT(st->stats().property("race.splits"), splits + 4);
    ASSERT_TRUE(st->insert(unacked, "later").ok());
    model[unacked] = "later";
    ASSERT_NO_FATAL_FAILURE(expect_holds_here_and_reopened(std::move(st), model));
  }

  // A client process killed at `step` of a split; then another client
  // recovers (expect_recovers).
  void die_at(SplitStep step) {
    Model model;
    std::string unacked;
    unsigned next = 0;
    ASSERT_NO_FATAL_FAILURE(kill_splitter_at(step, &model, &unacked, &next));
    auto st = open(options());
    ASSERT_NE(st, nullptr);
    ASSERT_NO_FATAL_FAILURE(expect_recovers(std::move(st), std::move(model), unacked, next,
                                            step >= SplitStep::kIntentWritten));
  }
};

// The splitter stops (as if its client died) after each step of its
// split, and another client, attached afterwards, recovers: undone before
// the intent stands, finished from then on.
class RaceStoppedSplitTest : public RaceSplitLockTest,
                             public ::testing::WithParamInterface<SplitStep> {};

TEST_P(RaceStoppedSplitTest, AnotherClientTakesTheSplitOverAndEveryKeyReadsBack) {
  const SplitStep step = GetParam();
  auto st = create(options());
  ASSERT_NE(st, nullptr);
  Model model;
  std::string unacked;
  unsigned next = 0;
  ASSERT_NO_FATAL_FAILURE(insert_until_stopped(*st, step, &model, &unacked, &next));
  ASSERT_TRUE(st->close().ok());  // the splitter's client is gone
  st.reset();
  auto other = open(options());
  ASSERT_NE(other, nullptr);
  ASSERT_NO_FATAL_FAILURE(expect_recovers(std::move(other), std::move(model), unacked, next,
                                          step >= SplitStep::kIntentWritten));
}

INSTANTIATE_TEST_SUITE_P(
    EveryStep, RaceStoppedSplitTest,
    ::testing::Values(SplitStep::kLocked, SplitStep::kFrozen, SplitStep::kNewTableWritten,
                      SplitStep::kIntentWritten, SplitStep::kDirectoryUpdated,
                      SplitStep::kHeadersHalfUpdated, SplitStep::kHeadersUpdated,
                      SplitStep::kSlotsHalfRewritten, SplitStep::kSlotsRewritten,
                      SplitStep::kDirectoryFinished),
    [](const auto& info) { return step_name(info.param); });

// Killed client processes (_exit in the hook): check() as the first call
// of another client finishes or undoes the split before it reads anything.
TEST_F(RaceSplitLockTest, ASplitterKilledWithItsSlotsFrozenIsUndone) { die_at(SplitStep::kFrozen); }
TEST_F(RaceSplitLockTest, ASplitterKilledAfterItsIntentIsFinished) {
  die_at(SplitStep::kIntentWritten);
}
TEST_F(RaceSplitLockTest, ASplitterKilledWithItsHeadersTornIsFinished) {
  die_at(SplitStep::kHeadersHalfUpdated);
}
TEST_F(RaceSplitLockTest, ASplitterKilledWithHalfItsSlotsRewrittenIsFinished) {
  die_at(SplitStep::kSlotsHalfRewritten);
}

// A taker that itself stops (with half the headers rewritten) is taken
// over by the next: the intent is recognised through two takeovers.
TEST_F(RaceSplitLockTest, ATakerThatStopsMidwayIsTakenOverByTheNext) {
  auto st = create(options());
  ASSERT_NE(st, nullptr);
  Model model;
  std::string unacked;
  unsigned next = 0;
  ASSERT_NO_FATAL_FAILURE(insert_until_stopped(*st, SplitStep::kIntentWritten, &model, &unacked, &next));
  std::atomic<bool> fired{false};
  engine::race::testing::set_split_hook([&](SplitStep at, bool taking_over) {
    return taking_over && at == SplitStep::kHeadersHalfUpdated && !fired.exchange(true);
  });
  const Status first = st->check();
  EXPECT_TRUE(first.is_io_error()) << first.to_string();  // the first taker stopped
  EXPECT_TRUE(fired.load());
  const Status second = st->check();
  engine::race::testing::set_split_hook(nullptr);
  ASSERT_TRUE(second.ok()) << second.to_string();
  EXPECT_EQ(st->stats().property("race.lock_takeovers"), 2u);
  ASSERT_NO_FATAL_FAILURE(load(*st, next, next + 2000, &model));
  ASSERT_NO_FATAL_FAILURE(expect_holds_here_and_reopened(std::move(st), model));
}

// Four threads of one client read every acknowledged key and insert keys
// of their own while a stopped split holds a subtable: they all wait on
// it, exactly one takes it over, and every call succeeds.
TEST_F(RaceSplitLockTest, ManyWaitersOnAStoppedSplitTakeItOverOnce) {
  auto st = create(options());
  ASSERT_NE(st, nullptr);
  Model model;
  std::string unacked;
  unsigned next = 0;
  ASSERT_NO_FATAL_FAILURE(
      insert_until_stopped(*st, SplitStep::kSlotsHalfRewritten, &model, &unacked, &next));
  constexpr unsigned kThreads = 4, kEach = 400;
  std::vector<std::thread> threads;
  std::atomic<unsigned> wrong{0};
  for (unsigned t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (const auto& [k, v] : model) {
        std::string got;
        if (!st->get(k, &got).ok() || got != v) ++wrong;
      }
      for (unsigned i = 0; i < kEach; ++i) {
        const unsigned key = next + t * kEach + i;
        if (!st->insert(key_of(key), value_of(key, 0)).ok()) ++wrong;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(wrong.load(), 0u);
  EXPECT_EQ(st->stats().property("race.lock_takeovers"), 1u);
  for (unsigned i = next; i < next + kThreads * kEach; ++i) model.emplace(key_of(i), value_of(i, 0));
  ASSERT_NO_FATAL_FAILURE(expect_holds_here_and_reopened(std::move(st), model));
}

// A splitter that is only slow: its hook sleeps past lease/2 (the sleep is
// the thing under test, not a way to order threads). It must stop without
// writing (its call returns Busy naming the lease), and a later call
// takes the split over: undone before the intent, finished after.
class RaceSlowSplitterTest : public RaceSplitLockTest,
                             public ::testing::WithParamInterface<SplitStep> {};

TEST_P(RaceSlowSplitterTest, ASplitterPastHalfItsLeaseStopsAndIsTakenOver) {
  const SplitStep step = GetParam();
  auto st = create(options());
  ASSERT_NE(st, nullptr);
  std::atomic<bool> slept{false};
  std::atomic<unsigned> later{0};  // steps the slow splitter reached after its sleep
  engine::race::testing::set_split_hook([&](SplitStep at, bool taking_over) {
    if (taking_over) return false;
    if (slept) {
      ++later;
    } else if (at == step) {
      slept = true;
      std::this_thread::sleep_for(std::chrono::milliseconds(lease_ms() * 6 / 10));
    }
    return false;
  });
  Model model;
  std::string unacked;
  unsigned next = 0;
  for (unsigned i = 0; i < 20000 && unacked.empty(); ++i) {
    const Status s = st->insert(key_of(i), value_of(i, 0));
    next = i + 1;
    if (s.ok()) {
      model.emplace(key_of(i), value_of(i, 0));
      continue;
    }
    ASSERT_TRUE(s.is_busy()) << s.to_string();
    EXPECT_NE(s.message().find("half its lease (" + std::to_string(lease_ms()) + " ms)"),
              std::string::npos)
        << s.to_string();
    unacked = key_of(i);
  }
  engine::race::testing::set_split_hook(nullptr);
  ASSERT_TRUE(slept.load());
  ASSERT_FALSE(unacked.empty()) << "the slow splitter did not stop";
  EXPECT_EQ(later.load(), 0u) << "the slow splitter went on after half its lease";
  ASSERT_NO_FATAL_FAILURE(expect_recovers(std::move(st), std::move(model), unacked, next,
                                          step >= SplitStep::kIntentWritten));
}

INSTANTIATE_TEST_SUITE_P(Steps, RaceSlowSplitterTest,
                         ::testing::Values(SplitStep::kLocked, SplitStep::kFrozen,
                                           SplitStep::kIntentWritten, SplitStep::kHeadersUpdated),
                         [](const auto& info) { return step_name(info.param); });

// A splitter that sleeps past a whole lease (the sleep is what is tested)
// while another thread writes: that thread finds the subtable frozen,
// takes the split over after a lease, finishes it and writes on (splitting
// further). The sleeper, once awake, must write nothing (it is past
// lease/2: no later step of its split runs) and give Busy; had it gone
// on, it would rewrite headers and directory words of a subtable that has
// moved on.
TEST_F(RaceSplitLockTest, ASplitterThatWakesAfterATakeoverWritesNothing) {
  auto st = create(options());
  ASSERT_NE(st, nullptr);
  const std::thread::id sleeper = std::this_thread::get_id();
  std::atomic<bool> in_hook{false}, woke{false}, holder_done{false};
  std::atomic<unsigned> fired{0}, later{0};
  engine::race::testing::set_split_hook([&](SplitStep at, bool taking_over) {
    if (taking_over || std::this_thread::get_id() != sleeper) return false;
    if (woke) {
      ++later;
    } else if (at == SplitStep::kIntentWritten && fired.fetch_add(1) == 0) {
      in_hook = true;
      in_hook.notify_all();
      std::this_thread::sleep_for(std::chrono::milliseconds(lease_ms() * 3 / 2));
      woke = true;
    }
    return false;
  });
  Model other;
  std::atomic<unsigned> wrong{0};
  std::thread writer([&] {
    in_hook.wait(false);
    for (unsigned i = 100000; i < 120000 && !holder_done; ++i) {
      const Status s = st->insert(key_of(i), value_of(i, 0));
      if (s.ok()) {
        other.emplace(key_of(i), value_of(i, 0));
      } else {
        ADD_FAILURE() << s.to_string();
        ++wrong;
      }
    }
  });
  Model model;
  Status busy;
  for (unsigned i = 0; i < 20000 && busy.ok(); ++i) {
    busy = st->insert(key_of(i), value_of(i, 0));
    if (busy.ok()) model.emplace(key_of(i), value_of(i, 0));
  }
  holder_done = true;
  in_hook = true;  // (should the hook never have run)
  in_hook.notify_all();
  writer.join();
  engine::race::testing::set_split_hook(nullptr);
  EXPECT_EQ(wrong.load(), 0u);
  EXPECT_GT(other.size(), 0u);
  EXPECT_EQ(st->stats().property("race.lock_takeovers"), 1u);
  EXPECT_EQ(later.load(), 0u) << "the sleeper went on after the takeover";
  ASSERT_TRUE(busy.is_busy()) << busy.to_string();
  EXPECT_NE(busy.message().find("half its lease"), std::string::npos) << busy.to_string();
  model.insert(other.begin(), other.end());
  ASSERT_NO_FATAL_FAILURE(expect_holds_here_and_reopened(std::move(st), model));
}

// The same deaths over tcp: the killed client's last batch went to the
// memory-node daemons as requests (it ran whole before the client died).
class RaceSplitLockTcpTest : public RaceSplitLockTest {
 protected:
  // A lease long enough that half of it (a holder's window) covers the
  // round trips of a split to the daemons on a loaded machine.
  unsigned timeout_ms() const override { return std::max(kTimeoutMs, 500u); }
  void SetUp() override {
    RaceSplitLockTest::SetUp();
    for (const std::string& n : nodes_) {
      daemons_.push_back(std::make_unique<testing::Daemon>(n, 0));
      ASSERT_NE(daemons_.back()->port(), 0);
    }
  }
  Options options() const override {
    Options o = RaceSplitLockTest::options();
    o.memnodes = "tcp:127.0.0.1:" + std::to_string(daemons_[0]->port()) + ",tcp:127.0.0.1:" +
                 std::to_string(daemons_[1]->port());
    return o;
  }
  std::vector<std::unique_ptr<testing::Daemon>> daemons_;
};

TEST_F(RaceSplitLockTcpTest, ASplitterKilledWithHalfItsSlotsRewrittenIsFinished) {
  die_at(SplitStep::kSlotsHalfRewritten);
}

// ---- compare_and_swap (race.h, "Compare and swap") ----
// Swaps every key of the model (every `every`-th from `phase` on) twice:
// from a value it does not hold (Conflict, nothing changed) and from the
// one it holds (OK); the model follows. The number of swaps that did not
// answer as the model says.
static unsigned swap_all(Store& st, Model* model, unsigned every = 1, unsigned phase = 0) {
  unsigned wrong = 0, i = 0;
  for (auto& [k, v] : *model) {
    if (i++ % every != phase) continue;
    const std::string next = v + "+";
    if (!st.compare_and_swap(k, std::string_view("not " + v), std::string_view(next)).is_conflict()) {
      ++wrong;
    }
    if (st.compare_and_swap(k, std::string_view(v), std::string_view(next)).ok()) {
      v = next;
    } else {
      ++wrong;
    }
  }
  return wrong;
}

// A client swaps every key while another client's split of one subtable
// holds its lock, before it freezes the slots and after it thaws them
// (writers are not held there, so the swaps land in the split's view):
// each swap answers as the model says, and the split carries every
// swapped entry to the key's subtable.
TEST_F(RaceTest, SwapsDuringASplitLandWhereTheSplitCarriesThem) {
  auto st = create(options());
  ASSERT_NE(st, nullptr);
  Model model;
  ASSERT_NO_FATAL_FAILURE(load(*st, 0, 300, &model));
  unsigned at_lock = 0, at_thaw = 0;
  std::atomic<unsigned> wrong{0};
  engine::race::testing::set_split_hook([&](SplitStep step, bool taking_over) {
    if (taking_over || (step != SplitStep::kLocked && step != SplitStep::kDirectoryFinished)) {
      return false;
    }
    if (step == SplitStep::kLocked && at_lock++ % 4 != 0) return false;
    if (step == SplitStep::kDirectoryFinished && at_thaw++ % 4 != 0) return false;
    // The splitter is this (the loading) thread: another client swaps a
    // sample of the keys (few enough that the split stays within half its
    // lease under a sanitizer).
    const unsigned phase = (at_lock + at_thaw) % 16;
    std::thread t([&] { wrong += swap_all(*st, &model, 16, phase); });
    t.join();
    return false;
  });
  ASSERT_NO_FATAL_FAILURE(load(*st, 300, 3000, &model));
  engine::race::testing::set_split_hook(nullptr);
  EXPECT_EQ(wrong.load(), 0u);
  EXPECT_GT(at_lock, 2u);
  EXPECT_GT(at_thaw, 2u);
  ASSERT_NO_FATAL_FAILURE(expect_holds(*st, model));
  EXPECT_EQ(st->size(), model.size());
  const Status c = st->check();
  EXPECT_TRUE(c.ok()) << c.to_string();
}

// Threads swap one key from absence at once, round after round, while
// each also removes keys of its own (freeing slots between the others'
// reads, what lets two plain inserts of one key both succeed, race.h
// section 4): exactly one swap per round succeeds, its value stands, and
// the others conflict.
TEST_F(RaceTest, ConcurrentSwapsFromAbsenceExactlyOneSucceeds) {
  auto st = create(options());
  ASSERT_NE(st, nullptr);
  constexpr unsigned kThreads = 4, kRounds = 300;
  std::vector<std::vector<Status>> results(kRounds, std::vector<Status>(kThreads));
  std::barrier start(kThreads);
  std::vector<std::thread> threads;
  for (unsigned t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (unsigned r = 0; r < kRounds; ++r) {
        // One key to remove and one to keep (the subtables split).
        const std::string own = key_of(t * 10000 + r);
        EXPECT_TRUE(st->insert(own, "x").ok());
        EXPECT_TRUE(st->insert(key_of(t * 10000 + 5000 + r), "kept").ok());
        start.arrive_and_wait();
        if (r % 2 == 1) {
          EXPECT_TRUE(st->remove(own).ok());
        }
        results[r][t] = st->compare_and_swap("same-" + std::to_string(r), std::nullopt,
                                             std::string_view("t" + std::to_string(t)));
        if (r % 2 == 0) {
          EXPECT_TRUE(st->remove(own).ok());
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  for (unsigned r = 0; r < kRounds; ++r) {
    unsigned ok = 0, conflicts = 0, winner = 0;
    for (unsigned t = 0; t < kThreads; ++t) {
      if (results[r][t].ok()) {
        ++ok;
        winner = t;
      } else if (results[r][t].is_conflict()) {
        ++conflicts;
      }
    }
    ASSERT_EQ(ok, 1u) << "round " << r;
    ASSERT_EQ(conflicts, kThreads - 1) << "round " << r;
    std::string got;
    ASSERT_TRUE(st->get("same-" + std::to_string(r), &got).ok());
    EXPECT_EQ(got, "t" + std::to_string(winner)) << "round " << r;
  }
  EXPECT_GT(st->stats().property("race.splits"), 0u);
  EXPECT_EQ(st->size(), kRounds + kThreads * kRounds);
  const Status c = st->check();
  EXPECT_TRUE(c.ok()) << c.to_string();
}

// A splitter stops with every slot of its subtable frozen (as if its
// client died there). Swaps of every key then wait for the thaw, take the
// split over after the lease (undone: no intent), and answer as the model
// says; so do swaps to absence and back.
TEST_F(RaceSplitLockTest, SwapsOfAFrozenSubtableTakeTheDeadSplitOverAndLand) {
  auto st = create(options());
  ASSERT_NE(st, nullptr);
  Model model;
  std::string unacked;
  unsigned next = 0;
  ASSERT_NO_FATAL_FAILURE(insert_until_stopped(*st, SplitStep::kFrozen, &model, &unacked, &next));
  EXPECT_EQ(swap_all(*st, &model), 0u);
  EXPECT_EQ(st->stats().property("race.lock_takeovers"), 1u);
  // The stopped insert never placed its entry: absent, as a swap expects.
  EXPECT_TRUE(st->compare_and_swap(unacked, std::string_view("x"), std::nullopt).is_conflict());
  ASSERT_TRUE(st->compare_and_swap(unacked, std::nullopt, std::string_view("later")).ok());
  model[unacked] = "later";
  unsigned removed = 0;
  for (auto it = model.begin(); it != model.end();) {
    if (removed++ % 3 != 0) {
      ++it;
      continue;
    }
    ASSERT_TRUE(st->compare_and_swap(it->first, std::string_view(it->second), std::nullopt).ok());
    it = model.erase(it);
  }
  ASSERT_NO_FATAL_FAILURE(expect_holds(*st, model));
  EXPECT_EQ(st->size(), model.size());
  const Status c = st->check();
  EXPECT_TRUE(c.ok()) << c.to_string();
}

// ---- scan (race.h, "Scan") ----
// A split is parked after each of its steps (the hook runs on the
// splitting thread, the subtable locked). Meanwhile another client scans
// the whole index (no write runs then: each key passed exactly once, also
// from the split subtable, whose range its old headers or its new ones
// say), and this client makes one call of a long scan, so that that scan's
// calls fall between all the steps of many splits: every key present
// when it began is passed. (Half the headers rewritten: every scan reads
// that subtable whole and would wait on its torn headers; not parked.)
TEST_F(RaceTest, ScanCallsAcrossEachSplitStepPassEveryKey) {
  Options o = options();
  o.remote_timeout_ms = 15000;  // scans inside the split, on a slow machine
  auto st = create(o);
  ASSERT_NE(st, nullptr);
  auto other = open(o);
  ASSERT_NE(other, nullptr);
  Model model;
  ScanAcross across;
  unsigned whole_misses = 0, whole_scans = 0;
  std::vector<unsigned> steps(kSplitSteps, 0);
  engine::race::testing::set_split_hook([&](SplitStep step, bool taking_over) {
    EXPECT_FALSE(taking_over);
    if (step == SplitStep::kHeadersHalfUpdated) return false;
    ++steps[static_cast<unsigned>(step)];
    std::thread t([&] {
      Passes passes;
      full_scan(*other, 5 + whole_scans % 50, &passes);
      whole_misses += missed(model, passes, /*at_least=*/false);
      for (const auto& [k, n] : passes) whole_misses += model.count(k) == 0;
      ++whole_scans;
      across.step(*st, model);
    });
    t.join();
    return false;
  });
  ASSERT_NO_FATAL_FAILURE(load(*st, 0, 1500, &model));
  engine::race::testing::set_split_hook(nullptr);
  EXPECT_EQ(whole_misses, 0u);
  EXPECT_EQ(across.misses, 0u);
  EXPECT_GT(across.ended, 2u);
  for (unsigned s = 0; s < kSplitSteps; ++s) {
    if (SplitStep(s) != SplitStep::kHeadersHalfUpdated) {
      EXPECT_GT(steps[s], 2u) << step_name(SplitStep(s));
    }
  }
  EXPECT_EQ(st->stats().property("race.lock_takeovers"), 0u);
}

// A scan from a cursor inside a subtable's range, with inserts between
// its calls that split the subtables ahead of it: from the cursor on, each
// key loaded before is passed exactly once, none below it.
TEST_F(RaceTest, AScanFromInsideASubtableThatSplitsPassesWhatFollows) {
  auto st = create(options());
  ASSERT_NE(st, nullptr);
  Model model;
  ASSERT_NO_FATAL_FAILURE(load(*st, 0, 600, &model));
  const std::uint64_t splits = st->stats().property("race.splits");
  const auto position = [](const std::string& k) {
    return engine::reverse_bits(engine::make_key(k).h1);
  };
  ASSERT_NO_FATAL_FAILURE(
      expect_scan_from_inside_a_part(*st, model, 10000, 60, 0x1555555555555555ull, position));
  ASSERT_NO_FATAL_FAILURE(
      expect_scan_from_inside_a_part(*st, model, 100000, 60, 0x9999999999999999ull, position));
  EXPECT_GT(st->stats().property("race.splits"), splits + 4);
}

// Two clients: one scans (whole scans, one after another) while the other
// inserts enough to split every subtable several times and removes other
// keys: every key present throughout is passed by every scan.
TEST_F(RaceTest, AClientScansWhileAnotherSplits) {
  auto st = create(options());
  ASSERT_NE(st, nullptr);
  auto scanner = open(options());
  ASSERT_NE(scanner, nullptr);
  Model stable, doomed;
  ASSERT_NO_FATAL_FAILURE(load(*st, 0, 800, &stable));
  ASSERT_NO_FATAL_FAILURE(load(*st, 800, 1600, &doomed));
  std::atomic<bool> done{false};
  std::thread writer([&] {
    for (unsigned i = 1600, gone = 800; i < 9000; ++i) {
      EXPECT_TRUE(st->insert(key_of(i), value_of(i, 0)).ok());
      if (i % 9 == 0 && gone < 1600) {
        EXPECT_TRUE(st->remove(key_of(gone++)).ok());
      }
    }
    done = true;
  });
  unsigned scans = 0, misses = 0;
  do {
    Passes passes;
    full_scan(*scanner, 1 + scans * 7 % 40, &passes);
    misses += missed(stable, passes, /*at_least=*/true);
    ++scans;
  } while (!done.load() || scans < 2);
  writer.join();
  EXPECT_EQ(misses, 0u);
  EXPECT_GT(scans, 1u);
}

}  // namespace
}  // namespace pmhash
