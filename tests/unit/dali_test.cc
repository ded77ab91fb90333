// Unit tests of the dali engine: the role table of the paper's Fig. 6, the
// operations through the public Store API, epochs and durability modes, and
// recovery after a process crash (a child that exits without closing).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <thread>

#include "engine/dali/dali_testing.h"
#include "engine/dali/layout.h"
#include "engine/hash.h"
#include "pmhash/store.h"
#include "pmhash/transaction.h"
#include "pool/pool.h"

namespace pmhash {
namespace {

using engine::dali::kNoRole;
using engine::dali::next_roles;
using engine::dali::Stat;

// --- the role table ------------------------------------------------------------

// Every well-formed status word.
std::vector<Stat> all_roles(std::uint64_t ss) {
  std::vector<Stat> out;
  for (unsigned a = 0; a < 3; ++a) {
    for (unsigned c = 0; c < 3; ++c) {
      for (unsigned f : {0u, 1u, 2u, kNoRole}) {
        const Stat s{a, f, c, ss};
        if (s.well_formed()) out.push_back(s);
      }
    }
  }
  return out;
}

TEST(DaliRoles, FollowTheRowsOfFigure6) {
  const std::uint64_t e = 10;
  const Stat s{0, 1, 2, 9};  // a = 0, f = 1, c = 2
  EXPECT_EQ(next_roles(Stat{0, 1, 2, 10}, e, false, false), (Stat{0, 1, 2, 10}));  // row 1
  EXPECT_EQ(next_roles(s, e, false, false), (Stat{2, 0, 1, e}));                   // row 2
  EXPECT_EQ(next_roles(s, e, false, true), (Stat{1, 0, 2, e}));                    // row 3
  EXPECT_EQ(next_roles(Stat{0, kNoRole, 2, 9}, e, false, true), (Stat{1, 0, 2, e}));
  EXPECT_EQ(next_roles(s, e, true, true), (Stat{0, kNoRole, 2, e}));               // row 4
  const Stat old{0, 1, 2, 7};
  EXPECT_EQ(next_roles(old, e, false, false), (Stat{2, kNoRole, 0, e}));           // row 5
  EXPECT_EQ(next_roles(old, e, true, false), (Stat{0, kNoRole, 1, e}));            // row 6
  EXPECT_EQ(next_roles(old, e, true, true), (Stat{0, kNoRole, 2, e}));             // row 7
}

TEST(DaliRoles, AlwaysWellFormedAndEncodeRoundTrips) {
  for (std::uint64_t ss : {0ull, 5ull, 8ull, 9ull, 10ull}) {
    for (const Stat& s : all_roles(ss)) {
      EXPECT_EQ(Stat::decode(s.encode()), s);
      for (bool cf : {false, true}) {
        for (bool pf : {false, true}) {
          if (!pf && s.f == kNoRole) continue;  // prev_fail holds when f = ⊥
          const Stat n = next_roles(s, 10, cf, pf);
          EXPECT_TRUE(n.well_formed()) << "ss " << ss << " a" << s.a << " f" << s.f << " c" << s.c;
          EXPECT_EQ(n.ss, 10u);
        }
      }
    }
  }
}

// The pointer a prepend retargets never holds the bucket's valid head,
// neither under the old roles (for the failures the new epoch knows) nor under
// the new roles if the new epoch itself fails later (paper §3.3, rule 2).
TEST(DaliRoles, RetargetedPointerIsNeverAValidHead) {
  const std::uint64_t e = 10;
  for (std::uint64_t ss : {4ull, 8ull, 9ull, 10ull}) {
    for (const Stat& s : all_roles(ss)) {
      for (bool cf : {false, true}) {
        for (bool pf : {false, true}) {
          if (!pf && s.f == kNoRole) continue;
          if (ss == e && cf) continue;  // the current epoch has not failed
          if (ss + 1 == e && cf && !pf) continue;  // impossible (row 4 note)
          const unsigned old_head = !cf ? s.a : !pf ? s.f : s.c;
          const Stat n = next_roles(s, e, cf, pf);
          if (ss == e) {
            EXPECT_EQ(n.a, old_head);  // row 1: the active pointer moves on
            continue;
          }
          EXPECT_NE(n.a, old_head) << "ss " << ss << " cf " << cf << " pf " << pf;
          // If e fails, the valid head under the new roles is the old one.
          const bool new_prev_fail = n.f == kNoRole || cf;
          const unsigned head_if_e_fails = !new_prev_fail ? n.f : n.c;
          EXPECT_EQ(head_if_e_fails, old_head) << "ss " << ss << " cf " << cf << " pf " << pf;
        }
      }
    }
  }
}

// --- the engine -------------------------------------------------------------------

class DaliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = "/dev/shm/pmhash-dali-" + std::to_string(getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name() + ".pool";
    ::unlink(path_.c_str());
    options_.engine = "dali";
    options_.pool_size = 64u << 20;
    options_.set("dali.initial_log2", 3);
  }
  void TearDown() override {
    store_.reset();
    ::unlink(path_.c_str());
  }

  void create() {
    Status s = Store::create(path_, options_, &store_);
    ASSERT_TRUE(s.ok()) << s.to_string();
  }
  void reopen() {
    if (store_) {
      ASSERT_TRUE(store_->close().ok());
    }
    store_.reset();
    Status s = Store::open(path_, options_, &store_);
    ASSERT_TRUE(s.ok()) << s.to_string();
  }
  // Runs `body` in a child that then kills itself (SIGKILL) without closing
  // the store: a process crash. On /dev/shm everything the child stored is
  // in the file. A child whose body failed exits with a status instead.
  template <typename Fn>
  void crash_after(Fn&& body) {
    store_.reset();
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      std::unique_ptr<Store> s;
      if (!Store::open(path_, options_, &s).ok()) _exit(3);
      if (!body(*s)) _exit(4);
      ::kill(::getpid(), SIGKILL);
    }
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    ASSERT_FALSE(WIFEXITED(status)) << "the child failed with status " << WEXITSTATUS(status);
    ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << "status " << status;
  }
  void wait_swept() {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (!store_->stats().swept) {
      ASSERT_LT(std::chrono::steady_clock::now(), deadline) << "the sweep never ended";
      std::this_thread::yield();
    }
  }
  static std::string key(int i) { return "key-" + std::to_string(i); }
  static std::string value(int i, int version = 0) {
    return "value-" + std::to_string(i) + "-" + std::to_string(version) + std::string(i % 37, 'x');
  }

  std::string path_;
  Options options_;
  std::unique_ptr<Store> store_;
};

TEST_F(DaliTest, InsertGetUpdateUpsertRemoveRoundTrip) {
  for (Durability d : {Durability::kStrict, Durability::kEpoch}) {
    options_.durability = d;
    options_.force = true;
    create();
    std::string v;
    EXPECT_TRUE(store_->get("a", &v).is_not_found());
    ASSERT_TRUE(store_->insert("a", "1").ok());
    EXPECT_TRUE(store_->insert("a", "2").is_already_exists());
    ASSERT_TRUE(store_->get("a", &v).ok());
    EXPECT_EQ(v, "1");
    EXPECT_TRUE(store_->update("b", "x").is_not_found());
    ASSERT_TRUE(store_->update("a", "3").ok());
    ASSERT_TRUE(store_->get("a", &v).ok());
    EXPECT_EQ(v, "3");
    ASSERT_TRUE(store_->upsert("b", "4").ok());
    ASSERT_TRUE(store_->upsert("a", "5").ok());
    EXPECT_EQ(store_->size(), 2u);
    ASSERT_TRUE(store_->remove("a").ok());
    EXPECT_TRUE(store_->remove("a").is_not_found());
    EXPECT_TRUE(store_->get("a", &v).is_not_found());
    ASSERT_TRUE(store_->insert("a", "6").ok());  // after a delete record
    ASSERT_TRUE(store_->get("a", &v).ok());
    EXPECT_EQ(v, "6");
    EXPECT_EQ(store_->size(), 2u);
    EXPECT_TRUE(store_->check().ok()) << store_->check().to_string();
    store_.reset();
  }
}

TEST_F(DaliTest, ManyKeysSurviveReopenAndIterateOnce) {
  options_.durability = Durability::kEpoch;
  create();
  std::map<std::string, std::string> model;
  for (int i = 0; i < 3000; ++i) {
    ASSERT_TRUE(store_->insert(key(i), value(i)).ok());
    model[key(i)] = value(i);
  }
  for (int i = 0; i < 3000; i += 3) {
    ASSERT_TRUE(store_->update(key(i), value(i, 1)).ok());
    model[key(i)] = value(i, 1);
  }
  for (int i = 1; i < 3000; i += 7) {
    ASSERT_TRUE(store_->remove(key(i)).ok());
    model.erase(key(i));
  }
  reopen();
  EXPECT_EQ(store_->size(), model.size());
  std::map<std::string, std::string> seen;
  ASSERT_TRUE(store_->for_each([&](std::string_view k, std::string_view v) {
    EXPECT_TRUE(seen.emplace(std::string(k), std::string(v)).second) << "twice: " << k;
    return true;
  }).ok());
  EXPECT_EQ(seen, model);
  EXPECT_TRUE(store_->check().ok()) << store_->check().to_string();
  EXPECT_TRUE(store_->stats().failed_epochs.empty());
}

TEST_F(DaliTest, UpdatesWithinOneEpochRewriteTheRecordInPlace) {
  options_.durability = Durability::kEpoch;
  options_.epoch_ms = 60000;  // no epoch ends unless asked
  create();
  ASSERT_TRUE(store_->insert("k", std::string(100, 'a')).ok());
  const std::uint64_t used = store_->stats().heap_used;
  for (int i = 0; i < 100; ++i) {
    ASSERT_TRUE(store_->update("k", std::string(100 - i % 50, static_cast<char>('b' + i % 20))).ok());
  }
  EXPECT_EQ(store_->stats().heap_used, used) << "an update in the same epoch allocated";
  // In a later epoch an update prepends a new record.
  ASSERT_TRUE(store_->sync().ok());
  ASSERT_TRUE(store_->update("k", "new").ok());
  EXPECT_GT(store_->stats().heap_used, used);
  std::string v;
  ASSERT_TRUE(store_->get("k", &v).ok());
  EXPECT_EQ(v, "new");
}

TEST_F(DaliTest, SyncMakesTheCurrentEpochDurable) {
  options_.durability = Durability::kEpoch;
  options_.epoch_ms = 60000;
  create();
  const std::uint64_t e = store_->stats().epoch;
  ASSERT_TRUE(store_->insert("a", "1").ok());
  EXPECT_LT(store_->stats().durable_epoch, e);
  ASSERT_TRUE(store_->sync().ok());
  EXPECT_GE(store_->stats().durable_epoch, e);
  EXPECT_GE(store_->stats().epoch, e + 2);
}

TEST_F(DaliTest, EpochsAdvanceOnTheirOwn) {
  options_.durability = Durability::kEpoch;
  options_.epoch_ms = 1;
  create();
  const Stats before = store_->stats();
  const std::uint64_t e = before.epoch;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (store_->stats().epoch < e + 4) {
    ASSERT_LT(std::chrono::steady_clock::now(), deadline) << "the epoch worker is stuck";
    std::this_thread::yield();
  }
  // e+4 is published by the advance of e+3, after the fences of e+1 and
  // e+2, which came after `before` was taken (the fence of an epoch comes
  // after the next one is published).
  EXPECT_GE(store_->stats().property("dali.epoch_fences"), before.property("dali.epoch_fences") + 2);
}

TEST_F(DaliTest, CrashLosesExactlyTheUnsyncedEpochs) {
  options_.durability = Durability::kEpoch;
  options_.epoch_ms = 60000;
  create();
  ASSERT_TRUE(store_->close().ok());
  crash_after([&](Store& s) {
    for (int i = 0; i < 200; ++i) {
      if (!s.insert(key(i), value(i)).ok()) return false;
    }
    if (!s.sync().ok()) return false;
    // Written to the file, but in an epoch the crash fails.
    for (int i = 200; i < 400; ++i) {
      if (!s.insert(key(i), value(i)).ok()) return false;
    }
    for (int i = 0; i < 50; ++i) {
      if (!s.update(key(i), value(i, 1)).ok()) return false;
    }
    for (int i = 50; i < 60; ++i) {
      if (!s.remove(key(i)).ok()) return false;
    }
    return true;
  });
  reopen();
  const Stats st = store_->stats();
  EXPECT_FALSE(st.clean_shutdown);
  EXPECT_EQ(st.failed_epochs.size(), 2u);
  std::string v;
  for (int i = 0; i < 200; ++i) {
    ASSERT_TRUE(store_->get(key(i), &v).ok()) << key(i);
    EXPECT_EQ(v, value(i)) << "an update of a failed epoch is visible";
  }
  for (int i = 200; i < 400; ++i) {
    EXPECT_TRUE(store_->get(key(i), &v).is_not_found()) << "a record of a failed epoch: " << key(i);
  }
  EXPECT_EQ(store_->size(), 200u);
  // The store goes on: new writes bypass the failed records (paper Fig. 7c).
  for (int i = 0; i < 400; ++i) ASSERT_TRUE(store_->upsert(key(i), value(i, 2)).ok());
  for (int i = 0; i < 400; ++i) {
    ASSERT_TRUE(store_->get(key(i), &v).ok());
    EXPECT_EQ(v, value(i, 2));
  }
  wait_swept();
  EXPECT_TRUE(store_->check().ok()) << store_->check().to_string();
}

TEST_F(DaliTest, SweepReturnsTheBlocksOfFailedEpochs) {
  options_.durability = Durability::kEpoch;
  options_.epoch_ms = 60000;
  options_.set("dali.initial_log2", 10);  // no growth: segments stay allocated
  create();
  for (int i = 0; i < 100; ++i) ASSERT_TRUE(store_->insert(key(i), value(i)).ok());
  ASSERT_TRUE(store_->close().ok());
  store_.reset();
  {
    std::unique_ptr<Store> s;
    ASSERT_TRUE(Store::open(path_, options_, &s).ok());
    const std::uint64_t before = s->stats().heap_used;
    s.reset();
    crash_after([&](Store& st) {
      for (int i = 100; i < 1100; ++i) {
        if (!st.insert(key(i), std::string(500, 'v')).ok()) return false;
      }
      return true;
    });
    reopen();
    wait_swept();
    EXPECT_EQ(store_->stats().heap_used, before) << "blocks of the failed epochs leaked";
  }
  EXPECT_TRUE(store_->check().ok()) << store_->check().to_string();
  EXPECT_EQ(store_->size(), 100u);
}

TEST_F(DaliTest, StrictCallsAreDurableWhenTheyReturn) {
  options_.durability = Durability::kStrict;
  options_.epoch_ms = 60000;  // a strict call must not wait for the interval
  create();
  ASSERT_TRUE(store_->close().ok());
  const auto start = std::chrono::steady_clock::now();
  crash_after([&](Store& s) {
    for (int i = 0; i < 100; ++i) {
      if (!s.insert(key(i), value(i)).ok()) return false;
    }
    return s.remove(key(7)).ok();
  });
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(50));
  reopen();
  std::string v;
  for (int i = 0; i < 100; ++i) {
    EXPECT_EQ(store_->get(key(i), &v).ok(), i != 7) << key(i);
  }
  EXPECT_TRUE(store_->check().ok()) << store_->check().to_string();
}

// Write groups (dali.h, "Write groups"): a strict write inside a group
// returns before its epoch is durable, the group's end waits for it once,
// and another thread that reads a write of the open group waits for its
// epoch first (G2). No epoch ends but those the calls end themselves.
TEST_F(DaliTest, AWriteGroupWaitsOnceAtItsEndAndOthersReadOnlyDurableWrites) {
  options_.durability = Durability::kStrict;
  options_.epoch_ms = 60000;
  create();
  const std::uint64_t e = store_->stats().epoch;
  store_->begin_write_group();
  for (int i = 0; i < 16; ++i) ASSERT_TRUE(store_->upsert(key(i), value(i)).ok());
  EXPECT_LT(store_->stats().durable_epoch, e) << "a write in a group waited for its epoch";
  std::thread reader([&] {
    std::string v;
    EXPECT_TRUE(store_->get(key(3), &v).ok());
    EXPECT_EQ(v, value(3));
    EXPECT_GE(store_->stats().durable_epoch, e) << "read a write of the open group before it was durable";
  });
  reader.join();
  for (int i = 16; i < 32; ++i) ASSERT_TRUE(store_->upsert(key(i), value(i)).ok());
  const std::uint64_t last = store_->stats().epoch;
  store_->end_write_group();
  EXPECT_GE(store_->stats().durable_epoch, last) << "the group ended before its writes were durable";
}

// What the group's end promises survives a crash right after it: every
// write of the groups that ended is there after the reopen.
TEST_F(DaliTest, WritesOfAnEndedWriteGroupSurviveACrash) {
  options_.durability = Durability::kStrict;
  options_.epoch_ms = 60000;
  create();
  ASSERT_TRUE(store_->close().ok());
  crash_after([&](Store& s) {
    for (int g = 0; g < 10; ++g) {
      s.begin_write_group();
      for (int i = g * 10; i < g * 10 + 10; ++i) {
        if (!s.upsert(key(i), value(i)).ok()) return false;
      }
      s.end_write_group();
    }
    return true;
  });
  reopen();
  std::string v;
  for (int i = 0; i < 100; ++i) {
    ASSERT_TRUE(store_->get(key(i), &v).ok()) << key(i);
    EXPECT_EQ(v, value(i));
  }
  EXPECT_TRUE(store_->check().ok());
}

// The planted bug: a group that ends without its wait. The first test's
// last check is what catches it.
TEST_F(DaliTest, PlantedWriteGroupEndingEarlyLeavesItsWritesNotDurable) {
  options_.durability = Durability::kStrict;
  options_.epoch_ms = 60000;
  create();
  engine::planted::bugs.store(engine::dali::testing::kWriteGroupEndsEarly);
  const std::uint64_t e = store_->stats().epoch;
  store_->begin_write_group();
  for (int i = 0; i < 16; ++i) ASSERT_TRUE(store_->upsert(key(i), value(i)).ok());
  store_->end_write_group();
  const std::uint64_t durable = store_->stats().durable_epoch;
  engine::planted::bugs.store(engine::planted::kNone);
  EXPECT_LT(durable, e);
}

// Two threads write at once, so that a write often returns because the
// other thread's advances made its epoch durable (helping, group commit):
// every write a thread was told is done survives a crash at any moment
// after. The child records each acknowledgement in memory it shares with
// the parent and is killed while both threads still write.
TEST_F(DaliTest, ConcurrentStrictWritesAreDurableWhenEitherThreadEndsTheirEpoch) {
  options_.durability = Durability::kStrict;
  options_.epoch_ms = 60000;  // only the writers end epochs
  create();
  ASSERT_TRUE(store_->close().ok());
  constexpr int kThreads = 2;
  constexpr int kWrites = 3000;  // per thread; the kill comes after half
  void* shared = ::mmap(nullptr, sizeof(std::atomic<int>) * kThreads, PROT_READ | PROT_WRITE,
                        MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(shared, MAP_FAILED);
  auto* acked = new (shared) std::atomic<int>[kThreads]();
  // Thread t writes key(t*kWrites + i), first inserts, then from i = kWrites/2
  // on updates of the first half (version 1), so that both new records and
  // rewrites of records of earlier epochs are acknowledged.
  auto key_of = [&](int t, int i) { return key(t * kWrites + (i < kWrites / 2 ? i : i - kWrites / 2)); };
  crash_after([&](Store& s) {
    std::atomic<bool> failed{false};
    std::vector<std::thread> writers;
    for (int t = 0; t < kThreads; ++t) {
      writers.emplace_back([&, t] {
        for (int i = 0; i < kWrites && !failed; ++i) {
          const int id = t * kWrites + (i < kWrites / 2 ? i : i - kWrites / 2);
          const Status st = i < kWrites / 2 ? s.insert(key_of(t, i), value(id))
                                             : s.update(key_of(t, i), value(id, 1));
          if (!st.ok()) {
            failed = true;
            return;
          }
          acked[t].store(i + 1, std::memory_order_release);
        }
      });
    }
    for (int t = 0; t < kThreads; ++t) {
      while (acked[t].load(std::memory_order_acquire) < kWrites * 3 / 4 && !failed) {
        std::this_thread::yield();
      }
    }
    if (failed) {
      for (auto& w : writers) w.join();
      return false;
    }
    // The crash, here, while both threads still write (so never joined).
    ::kill(::getpid(), SIGKILL);
    return true;
  });
  reopen();
  std::string v;
  for (int t = 0; t < kThreads; ++t) {
    const int n = acked[t].load(std::memory_order_acquire);
    EXPECT_GE(n, kWrites * 3 / 4);
    for (int i = 0; i < kWrites / 2; ++i) {
      const int id = t * kWrites + i;
      const Status s = store_->get(key(id), &v);
      if (i >= n) {  // not acknowledged: there or not
        if (s.ok()) {
          EXPECT_TRUE(v == value(id) || v == value(id, 1)) << key(id) << ": " << v;
        }
        continue;
      }
      ASSERT_TRUE(s.ok()) << "thread " << t << ": acknowledged insert of " << key(id)
                          << " lost: " << s.to_string();
      if (i + kWrites / 2 < n) {
        EXPECT_EQ(v, value(id, 1)) << "thread " << t << ": acknowledged update of " << key(id) << " lost";
      } else {
        EXPECT_TRUE(v == value(id) || v == value(id, 1)) << key(id) << ": " << v;
      }
    }
  }
  EXPECT_TRUE(store_->check().ok()) << store_->check().to_string();
  ::munmap(shared, sizeof(std::atomic<int>) * kThreads);
}

TEST_F(DaliTest, RepeatedCrashesKeepTheFailureListSortedAndTheDataIntact) {
  options_.durability = Durability::kEpoch;
  options_.epoch_ms = 60000;
  create();
  ASSERT_TRUE(store_->close().ok());
  for (int round = 0; round < 5; ++round) {
    crash_after([&](Store& s) {
      if (!s.upsert(key(round), value(round)).ok() || !s.sync().ok()) return false;
      // The sweep of the last crash ends with two fences of its own; after
      // it no epoch ends (60 s) and the next write is lost for sure.
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
      while (!s.stats().swept) {
        if (std::chrono::steady_clock::now() > deadline) return false;
        std::this_thread::yield();
      }
      return s.upsert(key(round + 100), value(round)).ok();  // lost
    });
  }
  reopen();
  const std::vector<std::uint64_t> failed = store_->stats().failed_epochs;
  EXPECT_GE(failed.size(), 6u);
  EXPECT_TRUE(std::is_sorted(failed.begin(), failed.end()));
  std::string v;
  for (int round = 0; round < 5; ++round) {
    EXPECT_TRUE(store_->get(key(round), &v).ok()) << round;
    EXPECT_TRUE(store_->get(key(round + 100), &v).is_not_found()) << round;
  }
}

TEST_F(DaliTest, GarbageCollectionKeepsUpdatedKeysInBoundedSpace) {
  options_.durability = Durability::kEpoch;
  options_.epoch_ms = 60000;
  create();
  for (int k = 0; k < 10; ++k) ASSERT_TRUE(store_->insert(key(k), value(k)).ok());
  std::uint64_t peak_after_warmup = 0;
  for (int round = 0; round < 300; ++round) {
    // A new epoch per round: every update prepends a new version.
    ASSERT_TRUE(store_->sync().ok());
    for (int k = 0; k < 10; ++k) ASSERT_TRUE(store_->update(key(k), value(k, round)).ok());
    if (round == 20) peak_after_warmup = store_->stats().heap_used;
  }
  // Without collection 300 versions of 10 records would be held.
  EXPECT_LE(store_->stats().heap_used, peak_after_warmup * 2);
  std::string v;
  for (int k = 0; k < 10; ++k) {
    ASSERT_TRUE(store_->get(key(k), &v).ok());
    EXPECT_EQ(v, value(k, 299));
  }
  EXPECT_TRUE(store_->check().ok()) << store_->check().to_string();
  reopen();
  EXPECT_TRUE(store_->check().ok()) << store_->check().to_string();
  for (int k = 0; k < 10; ++k) {
    ASSERT_TRUE(store_->get(key(k), &v).ok());
    EXPECT_EQ(v, value(k, 299));
  }
}

TEST_F(DaliTest, CollectionPassesOverAStripeATransactionHoldsAndCollectsItOnceFree) {
  // Buckets are collected in batches, each stripe under a lock taken with
  // try_lock: one that an open transaction holds is skipped, its records
  // untouched, and collected by later writes once the lock is free.
  options_.durability = Durability::kEpoch;
  options_.epoch_ms = 60000;
  options_.set("dali.lock_timeout_ms", 5);
  create();
  constexpr int kKeys = 64;  // over 8 stripes (2^3 buckets at first)
  for (int k = 0; k < kKeys; ++k) ASSERT_TRUE(store_->insert(key(k), value(k)).ok());
  for (int round = 0; round < 10; ++round) {
    ASSERT_TRUE(store_->sync().ok());
    for (int k = 0; k < kKeys; ++k) ASSERT_TRUE(store_->update(key(k), value(k, round)).ok());
  }
  // Queues key 0's bucket (a new version with older ones behind it, the
  // first of its stripe in a new epoch); the writes below fill the queue
  // while the transaction holds that stripe.
  ASSERT_TRUE(store_->sync().ok());
  ASSERT_TRUE(store_->update(key(0), value(0, 10)).ok());
  const std::uint64_t used_before = store_->stats().heap_used;
  std::unique_ptr<Transaction> txn;
  ASSERT_TRUE(store_->transaction({.lock_timeout_ms = 5}, &txn).ok());
  std::string v;
  ASSERT_TRUE(txn->get(key(0), &v).ok());  // locks key 0's stripe until commit
  EXPECT_EQ(v, value(0, 10));
  std::vector<bool> blocked(kKeys, false);
  for (int round = 11; round < 60; ++round) {
    ASSERT_TRUE(store_->sync().ok());
    for (int k = 0; k < kKeys; ++k) {
      if (blocked[k]) continue;
      const Status s = store_->update(key(k), value(k, round));
      if (round == 11 && s.is_busy()) {
        blocked[k] = true;  // key 0's stripe: held by the transaction
        continue;
      }
      ASSERT_TRUE(s.ok()) << key(k) << ": " << s.to_string();
    }
  }
  ASSERT_TRUE(blocked[0]);
  ASSERT_LT(std::count(blocked.begin(), blocked.end(), true), kKeys);
  // The held stripe's lists were left alone: the transaction still reads
  // what it read, and so does everyone else.
  ASSERT_TRUE(txn->get(key(0), &v).ok());
  EXPECT_EQ(v, value(0, 10));
  ASSERT_TRUE(store_->get(key(0), &v).ok());
  EXPECT_EQ(v, value(0, 10));
  ASSERT_TRUE(txn->commit().ok());
  // The other keys' old versions were collected meanwhile: 50 more versions
  // of most keys did not pile up.
  EXPECT_LE(store_->stats().heap_used, used_before * 2);
  for (int round = 60; round < 80; ++round) {
    ASSERT_TRUE(store_->sync().ok());
    for (int k = 0; k < kKeys; ++k) ASSERT_TRUE(store_->update(key(k), value(k, round)).ok());
  }
  EXPECT_LE(store_->stats().heap_used, used_before * 2);
  for (int k = 0; k < kKeys; ++k) {
    ASSERT_TRUE(store_->get(key(k), &v).ok());
    EXPECT_EQ(v, value(k, 79));
  }
  EXPECT_TRUE(store_->check().ok()) << store_->check().to_string();
  reopen();
  EXPECT_TRUE(store_->check().ok()) << store_->check().to_string();
}

TEST_F(DaliTest, RemovedKeysStayRemovedAfterCollectionAndCrash) {
  options_.durability = Durability::kEpoch;
  options_.epoch_ms = 60000;
  create();
  for (int k = 0; k < 200; ++k) ASSERT_TRUE(store_->insert(key(k), value(k)).ok());
  ASSERT_TRUE(store_->sync().ok());
  for (int k = 0; k < 200; k += 2) ASSERT_TRUE(store_->remove(key(k)).ok());
  for (int round = 0; round < 5; ++round) {
    ASSERT_TRUE(store_->sync().ok());
    for (int k = 1; k < 200; k += 2) ASSERT_TRUE(store_->update(key(k), value(k, round)).ok());
  }
  ASSERT_TRUE(store_->sync().ok());
  ASSERT_TRUE(store_->close().ok());
  crash_after([&](Store& s) {
    // Updates in an epoch the crash fails; collection runs meanwhile.
    for (int round = 5; round < 9; ++round) {
      for (int k = 1; k < 200; k += 2) {
        if (!s.update(key(k), value(k, round)).ok()) return false;
      }
    }
    return true;
  });
  reopen();
  std::string v;
  for (int k = 0; k < 200; ++k) {
    if (k % 2 == 0) {
      EXPECT_TRUE(store_->get(key(k), &v).is_not_found()) << key(k);
    } else {
      ASSERT_TRUE(store_->get(key(k), &v).ok()) << key(k);
      EXPECT_EQ(v, value(k, 4));
    }
  }
  wait_swept();
  EXPECT_TRUE(store_->check().ok()) << store_->check().to_string();
}

// --- growth ---------------------------------------------------------------------

TEST(DaliShape, LinearHashingAddressesAndSplitOrder) {
  using engine::dali::Shape;
  Shape sh{3, 0};
  EXPECT_EQ(sh.buckets(), 8u);
  EXPECT_EQ(sh.bucket_of(13), 5u);
  sh = sh.next();  // bucket 0 split into 0 and 8
  EXPECT_EQ(sh, (Shape{3, 1}));
  EXPECT_EQ(sh.buckets(), 9u);
  EXPECT_EQ(sh.bucket_of(8), 8u);
  EXPECT_EQ(sh.bucket_of(16), 0u);
  EXPECT_EQ(sh.bucket_of(13), 5u);
  for (int i = 0; i < 7; ++i) sh = sh.next();
  EXPECT_EQ(sh, (Shape{4, 0}));  // a round ends: every bucket split once
  EXPECT_EQ(sh.bucket_of(13), 13u);
  EXPECT_EQ(Shape::decode(sh.encode()), sh);
  EXPECT_EQ(Shape::decode(Shape{36, 12345}.encode()), (Shape{36, 12345}));
}

TEST_F(DaliTest, TheTableGrowsOnlineAndKeepsEveryKey) {
  options_.durability = Durability::kEpoch;
  options_.set("dali.initial_log2", 2);
  create();
  std::map<std::string, std::string> model;
  for (int i = 0; i < 20000; ++i) {
    ASSERT_TRUE(store_->insert(key(i), value(i)).ok()) << i;
    model[key(i)] = value(i);
    if (i % 3 == 0 && i > 0) {
      ASSERT_TRUE(store_->update(key(i / 2), value(i / 2, 1)).ok());
      model[key(i / 2)] = value(i / 2, 1);
    }
  }
  const Stats st = store_->stats();
  EXPECT_GE(st.slots, 20000u / 2 / 2) << "the table did not grow";
  EXPECT_GT(st.property("dali.splits"), 1000u);
  EXPECT_LE(st.load_factor, 2.5);
  std::string v;
  for (const auto& [k, want] : model) {
    ASSERT_TRUE(store_->get(k, &v).ok()) << k;
    ASSERT_EQ(v, want) << k;
  }
  EXPECT_TRUE(store_->check().ok()) << store_->check().to_string();
  reopen();
  EXPECT_EQ(store_->stats().slots, st.slots);
  std::map<std::string, std::string> seen;
  ASSERT_TRUE(store_->for_each([&](std::string_view k, std::string_view val) {
    EXPECT_TRUE(seen.emplace(std::string(k), std::string(val)).second) << "twice: " << k;
    return true;
  }).ok());
  EXPECT_EQ(seen, model);
  EXPECT_TRUE(store_->check().ok()) << store_->check().to_string();
}

TEST_F(DaliTest, ACrashDuringGrowthKeepsTheSyncedKeysAndAConsistentTable) {
  options_.durability = Durability::kEpoch;
  options_.epoch_ms = 60000;
  options_.set("dali.initial_log2", 2);
  create();
  ASSERT_TRUE(store_->close().ok());
  crash_after([&](Store& s) {
    for (int i = 0; i < 3000; ++i) {
      if (!s.insert(key(i), value(i)).ok()) return false;
    }
    if (!s.sync().ok()) return false;
    // Splits of an epoch the crash fails: the shape and bucket writes of
    // each may or may not have reached the file; recovery must not care.
    for (int i = 3000; i < 6000; ++i) {
      if (!s.insert(key(i), value(i)).ok()) return false;
    }
    return true;
  });
  reopen();
  std::string v;
  for (int i = 0; i < 3000; ++i) {
    ASSERT_TRUE(store_->get(key(i), &v).ok()) << key(i);
    EXPECT_EQ(v, value(i));
  }
  for (int i = 3000; i < 6000; ++i) EXPECT_TRUE(store_->get(key(i), &v).is_not_found()) << key(i);
  EXPECT_EQ(store_->size(), 3000u);
  wait_swept();
  EXPECT_TRUE(store_->check().ok()) << store_->check().to_string();
  // It grows on from the recovered shape.
  for (int i = 3000; i < 8000; ++i) ASSERT_TRUE(store_->insert(key(i), value(i, 2)).ok()) << i;
  EXPECT_TRUE(store_->check().ok()) << store_->check().to_string();
}

// --- scan (dali.h, "Scan") -----------------------------------------------------------

// A key's scan position: its hash with the bit order reversed (SC1).
std::uint64_t position_of(const std::string& k) { return engine::reverse_bits(engine::make_key(k).h1); }

// Runs scan calls from `cursor` until the scan ends, counting each key
// passed in *seen; `values` (when given) holds the value each key must come
// with. False when a call failed or the scan did not end in `max_calls`.
bool scan_to_end(const Store& s, std::uint64_t cursor, std::size_t count, std::map<std::string, int>* seen,
                 const std::map<std::string, std::string>* values = nullptr, int max_calls = 1000000) {
  for (int c = 0; c < max_calls; ++c) {
    std::uint64_t next = 0;
    const Status st = s.scan(
        cursor, count,
        [&](std::string_view k, std::string_view v) {
          ++(*seen)[std::string(k)];
          if (values == nullptr) return;
          const auto it = values->find(std::string(k));
          if (it != values->end()) {
            EXPECT_EQ(v, it->second) << "key " << k;
          }
        },
        &next);
    EXPECT_TRUE(st.ok()) << st.to_string();
    if (!st.ok()) return false;
    if (next == 0) return true;
    EXPECT_GT(next, cursor) << "a scan call went back";
    cursor = next;
  }
  return false;
}

// The bucket the next split splits, and its range of positions (SC1).
struct NextSplit {
  unsigned level = 0;
  std::uint64_t bucket = 0;
  std::uint64_t first = 0;  // its lowest position
  std::uint64_t span = 0;   // 2^(64 - level)
};
NextSplit next_split(const Store& s) {
  const Stats st = s.stats();
  NextSplit n;
  n.level = static_cast<unsigned>(st.property("dali.level"));
  n.bucket = st.slots - (std::uint64_t{1} << n.level);
  n.first = engine::reverse_bits(n.bucket);
  n.span = std::uint64_t{1} << (64 - n.level);
  return n;
}

// Inserts keys grow-<*next>, grow-<*next + 1>, ... until one split
// happened (their values are grow_value_of the key).
std::string grow_value_of(const std::string& k) { return "value of " + k; }
void insert_until_a_split(Store& s, int* next, std::map<std::string, std::string>* model) {
  const std::uint64_t slots = s.stats().slots;
  for (int tries = 0; s.stats().slots == slots; ++tries) {
    ASSERT_LT(tries, 100000) << "no split";
    const std::string k = "grow-" + std::to_string((*next)++);
    ASSERT_TRUE(s.insert(k, grow_value_of(k)).ok()) << k;
    if (model != nullptr) (*model)[k] = grow_value_of(k);
  }
  ASSERT_EQ(s.stats().slots, slots + 1);
}

// Every split parked (split hook) while a scan call runs, one call per
// split, so the table grows by a bucket between any two calls of the scan:
// each key present throughout is passed, and no key twice (SC5).
TEST_F(DaliTest, ScanCallsBetweenSplitsPassEveryKeyExactlyOnce) {
  options_.durability = Durability::kEpoch;
  options_.set("dali.initial_log2", 2);
  create();
  constexpr int kStable = 500;
  std::map<std::string, std::string> stable;
  for (int i = 0; i < kStable; ++i) {
    ASSERT_TRUE(store_->insert(key(i), value(i)).ok());
    stable[key(i)] = value(i);
  }
  std::map<std::string, int> seen;
  std::uint64_t cursor = 0;
  bool ended = false;
  int calls = 0;
  int splits_of_scanned = 0;  // splits of a bucket the scan has (partly) passed already
  engine::dali::testing::set_split_hook([&](std::uint64_t src, unsigned) {
    if (ended) return;
    if (engine::reverse_bits(src) < cursor) ++splits_of_scanned;
    std::uint64_t next = 0;
    const Status s = store_->scan(
        cursor, 1,
        [&](std::string_view k, std::string_view v) {
          ++seen[std::string(k)];
          const auto it = stable.find(std::string(k));
          if (it != stable.end()) {
            EXPECT_EQ(v, it->second);
          }
        },
        &next);
    ASSERT_TRUE(s.ok()) << s.to_string();
    ++calls;
    cursor = next;
    ended = next == 0;
  });
  int i = kStable;
  for (; !ended && i < 200000; ++i) ASSERT_TRUE(store_->insert(key(i), value(i)).ok()) << i;
  engine::dali::testing::set_split_hook(nullptr);
  ASSERT_TRUE(ended) << "the scan did not end in " << calls << " calls";
  EXPECT_GT(calls, 100);
  EXPECT_GT(splits_of_scanned, 10) << "the splits never came behind the cursor";
  for (const auto& [k, v] : stable) EXPECT_EQ(seen[k], 1) << k;
  for (const auto& [k, n] : seen) EXPECT_EQ(n, 1) << "passed twice: " << k;
  EXPECT_TRUE(store_->check().ok()) << store_->check().to_string();
}

// A cursor inside the range of the bucket the next split splits: before
// the split, after it (the cursor then lies inside one of the halves, or on
// their border), and after a reopen, a scan from it passes exactly the keys
// at positions >= the cursor, once each (SC2, SC3).
TEST_F(DaliTest, ACursorInsideABucketThatSplitSinceStartsAtItsPosition) {
  options_.durability = Durability::kEpoch;
  options_.set("dali.initial_log2", 2);
  create();
  std::map<std::string, std::string> model;
  int next = 0;
  for (; next < 3000; ++next) {
    ASSERT_TRUE(store_->insert(key(next), value(next)).ok());
    model[key(next)] = value(next);
  }
  const NextSplit b = next_split(*store_);
  const std::uint64_t cursors[] = {b.first + b.span / 4 + 12345, b.first + b.span / 2,
                                   b.first + b.span / 2 + b.span / 8 + 3, b.first + b.span - 1,
                                   b.first + 1};
  auto check_from = [&](const char* when) {
    for (std::uint64_t c : cursors) {
      for (std::size_t count : {std::size_t{1}, std::size_t{5}, std::size_t{1} << 20}) {
        std::map<std::string, int> seen;
        ASSERT_TRUE(scan_to_end(*store_, c, count, &seen, &model)) << when;
        std::size_t want = 0;
        for (const auto& [k, v] : model) {
          if (position_of(k) < c) {
            EXPECT_EQ(seen.count(k), 0u) << when << ": " << k << " lies before cursor " << c;
          } else {
            ++want;
            EXPECT_EQ(seen[k], 1) << when << ", cursor " << c << ", count " << count << ": " << k;
          }
        }
        EXPECT_EQ(seen.size(), want) << when;
      }
    }
  };
  check_from("before the split");
  // Some of the model's keys lie in the bucket, each side of its border.
  int lower = 0, upper = 0;
  for (const auto& [k, v] : model) {
    const std::uint64_t pos = position_of(k);
    if (pos >= b.first && pos - b.first < b.span) ++(pos - b.first < b.span / 2 ? lower : upper);
  }
  EXPECT_GT(lower, 0);
  EXPECT_GT(upper, 0);
  insert_until_a_split(*store_, &next, &model);
  const NextSplit after = next_split(*store_);
  EXPECT_TRUE(after.bucket == b.bucket + 1 || after.level == b.level + 1) << "split another bucket";
  check_from("after the split");
  reopen();
  check_from("after a reopen");
}

// The scan hook splits the very bucket a scan has just chosen, before it
// reads it: the scan must choose again (the shape it chose by is stale) and
// then read the lower half, and the upper half next. Reading the new list
// with the old range would leave out the keys that moved to the new bucket.
TEST_F(DaliTest, ABucketThatSplitsBetweenChoosingAndReadingIsChosenAgain) {
  for (std::size_t count : {std::size_t{1}, std::size_t{1} << 20}) {
    SCOPED_TRACE("count " + std::to_string(count));
    options_.durability = Durability::kEpoch;
    options_.set("dali.initial_log2", 2);
    create();
    std::map<std::string, std::string> stable;
    int next = 0;
    for (; next < 2000; ++next) {
      ASSERT_TRUE(store_->insert(key(next), value(next)).ok());
      stable[key(next)] = value(next);
    }
    const NextSplit b = next_split(*store_);
    bool split = false;
    std::vector<unsigned> depths_after;  // the depths p was chosen with after its split
    engine::dali::testing::set_scan_hook([&](std::uint64_t bucket, unsigned depth) {
      if (bucket != b.bucket) return;
      if (split) {
        depths_after.push_back(depth);
        return;
      }
      EXPECT_EQ(depth, b.level);
      split = true;
      insert_until_a_split(*store_, &next, nullptr);
    });
    std::map<std::string, int> seen;
    const bool ended = scan_to_end(*store_, 0, count, &seen, &stable);
    engine::dali::testing::set_scan_hook(nullptr);
    ASSERT_TRUE(ended);
    ASSERT_TRUE(split) << "the scan never chose bucket " << b.bucket;
    int missed = 0;
    for (const auto& [k, v] : stable) missed += seen[k] == 0;
    EXPECT_EQ(missed, 0) << "stable keys the scan did not pass";
    for (const auto& [k, v] : stable) EXPECT_LE(seen[k], 1) << "passed twice: " << k;
    ASSERT_FALSE(depths_after.empty()) << "the scan did not choose the bucket again";
    EXPECT_EQ(depths_after.back(), b.level + 1);
    store_.reset();
    ::unlink(path_.c_str());
  }
}

// A scan passes what get() would: the last committed values, never a
// write an open transaction holds, and it does not wait for the
// transaction's locks; after the commit, all of its writes (SC6).
TEST_F(DaliTest, AScanPassesCommittedValuesOnlyAndDoesNotWaitForATransaction) {
  options_.durability = Durability::kEpoch;
  options_.set("dali.lock_timeout_ms", 60000);
  create();
  for (int i = 0; i < 100; ++i) ASSERT_TRUE(store_->insert(key(i), value(i)).ok());
  std::unique_ptr<Transaction> txn;
  ASSERT_TRUE(store_->transaction(&txn).ok());
  ASSERT_TRUE(txn->update(key(1), value(1, 1)).ok());
  ASSERT_TRUE(txn->remove(key(2)).ok());
  ASSERT_TRUE(txn->insert("new", "in the transaction").ok());
  auto scan_all = [&] {
    std::map<std::string, std::string> got;
    std::uint64_t cursor = 0;
    do {
      const Status s = store_->scan(
          cursor, 7, [&](std::string_view k, std::string_view v) { got[std::string(k)] = std::string(v); },
          &cursor);
      EXPECT_TRUE(s.ok()) << s.to_string();
      if (!s.ok()) break;
    } while (cursor != 0);
    return got;
  };
  const auto t0 = std::chrono::steady_clock::now();
  std::map<std::string, std::string> before = scan_all();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(30)) << "waited for the locks";
  EXPECT_EQ(before.size(), 100u);
  EXPECT_EQ(before[key(1)], value(1));
  EXPECT_EQ(before[key(2)], value(2));
  EXPECT_EQ(before.count("new"), 0u);
  ASSERT_TRUE(txn->commit().ok());
  std::map<std::string, std::string> after = scan_all();
  EXPECT_EQ(after.size(), 100u);
  EXPECT_EQ(after[key(1)], value(1, 1));
  EXPECT_EQ(after.count(key(2)), 0u);
  EXPECT_EQ(after["new"], "in the transaction");
}

// Strict: a scan that meets a write still in flight passes it only once
// its epoch is durable, as get() answers (D2, SC6).
TEST_F(DaliTest, StrictScansPassAWriteInFlightOnlyOnceItIsDurable) {
  options_.durability = Durability::kStrict;
  options_.epoch_ms = 60000;
  create();
  for (int i = 0; i < 10; ++i) {
    const std::uint64_t before = store_->stats().epoch;  // the write runs in it or later
    std::thread writer([&] { EXPECT_TRUE(store_->insert(key(i), value(i)).ok()); });
    std::uint64_t durable = 0;
    bool passed = false;
    while (!passed) {
      std::uint64_t next = 0;
      const Status s = store_->scan(
          0, std::size_t{1} << 20,
          [&](std::string_view k, std::string_view v) {
            if (k != key(i)) return;
            passed = true;
            durable = store_->stats().durable_epoch;
            EXPECT_EQ(v, value(i));
          },
          &next);
      ASSERT_TRUE(s.ok()) << s.to_string();
      EXPECT_EQ(next, 0u);
      if (!passed) std::this_thread::yield();
    }
    writer.join();
    EXPECT_GE(durable, before) << "the scan passed a write of epoch >= " << before
                               << " while only " << durable << " was durable";
  }
}

// --- snapshot reads -----------------------------------------------------------------

TEST_F(DaliTest, SnapshotReadsSeeTheDurableStateOnly) {
  options_.durability = Durability::kEpoch;
  options_.epoch_ms = 60000;
  create();
  ASSERT_TRUE(store_->insert("a", "old").ok());
  ASSERT_TRUE(store_->sync().ok());
  ASSERT_TRUE(store_->update("a", "new").ok());
  ASSERT_TRUE(store_->insert("b", "fresh").ok());
  std::string v;
  const ReadOptions snapshot{.snapshot = true};
  ASSERT_TRUE(store_->get("a", &v, snapshot).ok());
  EXPECT_EQ(v, "old") << "a snapshot read saw a write that is not durable";
  EXPECT_TRUE(store_->get("b", &v, snapshot).is_not_found());
  ASSERT_TRUE(store_->get("a", &v).ok());  // the locking read sees the newest
  EXPECT_EQ(v, "new");
  ASSERT_TRUE(store_->sync().ok());
  ASSERT_TRUE(store_->get("a", &v, snapshot).ok());
  EXPECT_EQ(v, "new");
  ASSERT_TRUE(store_->get("b", &v, snapshot).ok());
  EXPECT_EQ(v, "fresh");
  ASSERT_TRUE(store_->remove("b").ok());
  ASSERT_TRUE(store_->get("b", &v, snapshot).ok()) << "a snapshot read saw a remove that is not durable";
}

TEST_F(DaliTest, SnapshotReadsUnderStrictDurabilitySeeEveryAcknowledgedWrite) {
  options_.durability = Durability::kStrict;
  create();
  std::string v;
  for (int i = 0; i < 20; ++i) {
    ASSERT_TRUE(store_->upsert("k", value(i)).ok());
    ASSERT_TRUE(store_->get("k", &v, ReadOptions{.snapshot = true}).ok());
    EXPECT_EQ(v, value(i));
  }
}

// --- durable linearizability (strict) ---------------------------------------------

// A strict get() that sees another thread's write in flight answers only
// once the write's epoch is durable: when it returns the value, the store
// says that epoch survives any crash. (The epoch interval is a minute, so
// only the writers' own waits move the counter.)
TEST_F(DaliTest, StrictReadsOfAWriteInFlightAnswerOnlyOnceItIsDurable) {
  options_.durability = Durability::kStrict;
  options_.epoch_ms = 60000;
  create();
  for (int i = 0; i < 20; ++i) {
    const std::uint64_t before = store_->stats().epoch;  // the write runs in it or later
    std::thread writer([&] { EXPECT_TRUE(store_->insert(key(i), value(i)).ok()); });
    std::string v;
    Status s;
    while ((s = store_->get(key(i), &v)).is_not_found()) std::this_thread::yield();
    const std::uint64_t durable = store_->stats().durable_epoch;
    writer.join();
    ASSERT_TRUE(s.ok()) << s.to_string();
    EXPECT_EQ(v, value(i));
    EXPECT_GE(durable, before) << "get answered from epoch >= " << before
                               << " while only " << durable << " was durable";
  }
}

// The same for the answers of writes: an insert that loses to another
// thread's insert in flight says AlreadyExists only once that one is
// durable (and one that wins returns durable anyway).
TEST_F(DaliTest, StrictAlreadyExistsAnswersOnlyOnceTheWinnerIsDurable) {
  options_.durability = Durability::kStrict;
  options_.epoch_ms = 60000;
  create();
  for (int i = 0; i < 20; ++i) {
    const std::uint64_t before = store_->stats().epoch;
    std::thread writer([&] {
      const Status s = store_->insert(key(i), value(i, 1));
      EXPECT_TRUE(s.ok() || s.is_already_exists()) << s.to_string();
    });
    const Status s = store_->insert(key(i), value(i, 2));
    const std::uint64_t durable = store_->stats().durable_epoch;
    writer.join();
    ASSERT_TRUE(s.ok() || s.is_already_exists()) << s.to_string();
    EXPECT_GE(durable, before) << s.to_string() << " returned while only epoch " << durable
                               << " was durable";
  }
  // A remove of a key another thread is removing: NotFound only once the
  // winner's "absent" record is durable.
  for (int i = 0; i < 20; ++i) {
    const std::uint64_t before = store_->stats().epoch;
    std::thread remover([&] {
      const Status s = store_->remove(key(i));
      EXPECT_TRUE(s.ok() || s.is_not_found()) << s.to_string();
    });
    const Status s = store_->remove(key(i));
    const std::uint64_t durable = store_->stats().durable_epoch;
    remover.join();
    ASSERT_TRUE(s.ok() || s.is_not_found()) << s.to_string();
    EXPECT_GE(durable, before) << s.to_string() << " returned while only epoch " << durable
                               << " was durable";
  }
}

// --- compare_and_swap ---------------------------------------------------------------

// compare_and_swap's answers under strict durability are those of a write:
// a Conflict with another thread's swap in flight comes only once the
// winner's record is durable, like AlreadyExists above (and the winner
// returns durable anyway). Both threads race from absent to a value, then
// from the value to absent.
TEST_F(DaliTest, StrictConflictsAnswerOnlyOnceTheValueTheySawIsDurable) {
  options_.durability = Durability::kStrict;
  options_.epoch_ms = 60000;  // only the callers end epochs
  create();
  using Opt = std::optional<std::string_view>;
  for (int i = 0; i < 20; ++i) {
    const std::string mine = value(i, 1);
    const std::string theirs = value(i, 2);
    for (const bool to_absent : {false, true}) {
      // From absent to two different values; then from the winner's value
      // (read before the race) to absent.
      std::string current;
      if (to_absent) {
        ASSERT_TRUE(store_->get(key(i), &current).ok());
      }
      const Opt expected = to_absent ? Opt(current) : std::nullopt;
      const std::uint64_t before = store_->stats().epoch;
      std::thread other([&] {
        const Status s = store_->compare_and_swap(key(i), expected,
                                                  to_absent ? std::nullopt : Opt(theirs));
        EXPECT_TRUE(s.ok() || s.is_conflict()) << s.to_string();
      });
      const Status s =
          store_->compare_and_swap(key(i), expected, to_absent ? std::nullopt : Opt(mine));
      const std::uint64_t durable = store_->stats().durable_epoch;
      other.join();
      ASSERT_TRUE(s.ok() || s.is_conflict()) << s.to_string();
      EXPECT_GE(durable, before) << s.to_string() << " returned while only epoch " << durable
                                 << " was durable";
    }
    EXPECT_TRUE(store_->get(key(i), nullptr).is_not_found()) << key(i);
  }
  EXPECT_EQ(store_->size(), 0u);
}

// A swap waits for a transaction that holds its key's lock, and compares
// against what the transaction committed, never against the state before.
TEST_F(DaliTest, ASwapWaitsForTheTransactionHoldingItsKeyAndSeesItsCommit) {
  options_.durability = Durability::kEpoch;
  options_.set("dali.lock_timeout_ms", 60000);
  create();
  ASSERT_TRUE(store_->insert("k", "before").ok());
  std::unique_ptr<Transaction> txn;
  ASSERT_TRUE(store_->transaction(&txn).ok());
  ASSERT_TRUE(txn->update("k", "committed").ok());  // holds the stripe now
  Status from_committed, from_before;
  std::thread a([&] {
    from_committed = store_->compare_and_swap("k", std::string_view("committed"),
                                              std::string_view("swapped"));
  });
  std::thread b([&] {
    from_before = store_->compare_and_swap("k", std::string_view("before"), std::nullopt);
  });
  ASSERT_TRUE(txn->commit().ok());
  a.join();
  b.join();
  EXPECT_TRUE(from_committed.ok()) << from_committed.to_string();
  EXPECT_TRUE(from_before.is_conflict()) << from_before.to_string();
  std::string v;
  ASSERT_TRUE(store_->get("k", &v).ok());
  EXPECT_EQ(v, "swapped");
  EXPECT_EQ(store_->size(), 1u);
}

// Swaps race the growth of the table at the one point the split hook stops
// it: the split has chosen its bucket and not locked it yet. The hook swaps
// every counter of that bucket (records of the current epoch, which the
// split copies, keeping their version), and after the split the swaps go on
// from the values the copies carry, rewriting them in place (same epoch).
// All of it runs in one epoch, which a crash either loses whole (counters
// back at "0", the table at its old shape) or, after a sync, keeps whole.
TEST_F(DaliTest, SwapsOfABucketAboutToSplitAreCarriedOverAndACrashKeepsAllOrNone) {
  options_.durability = Durability::kEpoch;
  options_.epoch_ms = 60000;  // one epoch for the whole child
  options_.set("dali.initial_log2", 2);
  create();
  constexpr int kCounters = 64;
  constexpr int kRemoved = 8;  // counters the child finally removes
  const auto counter = [](int c) { return "counter-" + std::to_string(c); };
  for (int c = 0; c < kCounters; ++c) ASSERT_TRUE(store_->insert(counter(c), "0").ok());
  const std::uint64_t slots_before = store_->stats().slots;
  ASSERT_TRUE(store_->close().ok());
  using Opt = std::optional<std::string_view>;
  // The child: false (a failed child) when a swap answers wrongly.
  const auto swap_through_splits = [&](Store& s, bool sync) {
    std::vector<std::string> current(kCounters, "0");
    int swapped = 0;
    int splits = 0;
    bool ok = true;
    engine::dali::testing::set_split_hook([&](std::uint64_t src, unsigned level) {
      ++splits;
      const std::uint64_t mask = (std::uint64_t{1} << level) - 1;
      for (int c = 0; c < kCounters; ++c) {
        if ((engine::make_key(counter(c)).h1 & mask) != src) continue;
        const std::string next = current[c] + "s";
        ok = ok && s.compare_and_swap(counter(c), Opt(next), Opt("x")).is_conflict();
        ok = ok && s.compare_and_swap(counter(c), Opt(current[c]), Opt(next)).ok();
        current[c] = next;
        ++swapped;
      }
    });
    int inserted = 0;
    for (; inserted < 20000 && ok && swapped < 32; ++inserted) {
      ok = s.insert(key(inserted), value(inserted)).ok();
    }
    engine::dali::testing::set_split_hook(nullptr);
    if (!ok || swapped < 32 || splits < 2) return false;
    for (int c = 0; c < kCounters; ++c) {
      const std::string fin = "final-" + std::to_string(c);
      if (!s.compare_and_swap(counter(c), Opt(current[c]), Opt(fin)).ok()) return false;
      if (c < kRemoved && !s.compare_and_swap(counter(c), Opt(fin), std::nullopt).ok()) return false;
    }
    // From absent to absent: nothing to write.
    if (!s.compare_and_swap(counter(0), std::nullopt, std::nullopt).ok()) return false;
    if (s.size() != static_cast<std::uint64_t>(kCounters - kRemoved + inserted)) return false;
    return !sync || s.sync().ok();
  };
  crash_after([&](Store& s) { return swap_through_splits(s, /*sync=*/false); });
  reopen();
  std::string v;
  for (int c = 0; c < kCounters; ++c) {
    ASSERT_TRUE(store_->get(counter(c), &v).ok()) << counter(c);
    EXPECT_EQ(v, "0") << counter(c);
  }
  EXPECT_TRUE(store_->get(key(0), &v).is_not_found());
  EXPECT_EQ(store_->size(), static_cast<std::uint64_t>(kCounters));
  EXPECT_EQ(store_->stats().slots, slots_before) << "the lost splits' shape survived";
  wait_swept();
  EXPECT_TRUE(store_->check().ok()) << store_->check().to_string();
  crash_after([&](Store& s) { return swap_through_splits(s, /*sync=*/true); });
  reopen();
  for (int c = 0; c < kCounters; ++c) {
    const Status s = store_->get(counter(c), &v);
    if (c < kRemoved) {
      EXPECT_TRUE(s.is_not_found()) << counter(c) << ": " << s.to_string();
    } else {
      ASSERT_TRUE(s.ok()) << counter(c) << ": " << s.to_string();
      EXPECT_EQ(v, "final-" + std::to_string(c));
    }
  }
  int inserted = 0;
  while (store_->get(key(inserted), &v).ok()) ++inserted;
  EXPECT_GT(inserted, 0);
  EXPECT_EQ(store_->size(), static_cast<std::uint64_t>(kCounters - kRemoved + inserted));
  EXPECT_GT(store_->stats().slots, slots_before);
  wait_swept();
  EXPECT_TRUE(store_->check().ok()) << store_->check().to_string();
}

// A transaction whose commit meets a full pool makes room and commits: the
// garbage is in the stripes it holds, which make_room collects under the
// transaction's own locks (it used to wait the lock timeout on each, then
// skip it, and the commit failed with NoSpace).
TEST_F(DaliTest, ACommitThatMeetsAFullPoolCollectsItsOwnStripesAndSucceeds) {
  options_.durability = Durability::kEpoch;
  options_.epoch_ms = 60000;  // no collection until make_room moves the epochs
  options_.pool_size = 4u << 20;
  options_.set("dali.initial_log2", 1);  // two stripes: the transaction holds both
  options_.set("dali.lock_timeout_ms", 1000);
  create();
  int n = 0;
  Status s;
  while ((s = store_->insert(key(n), std::string(200, 'v'))).ok()) ++n;
  ASSERT_TRUE(s.is_no_space()) << s.to_string();
  // Garbage: 200 records superseded by "absent" ones (which fit the reserve).
  for (int k = 0; k < 200; ++k) ASSERT_TRUE(store_->remove(key(k)).ok()) << k;
  std::unique_ptr<Transaction> txn;
  ASSERT_TRUE(store_->transaction(TransactionOptions{}, &txn).ok());
  std::string v;
  for (int k = 200; k < 232; ++k) ASSERT_TRUE(txn->get(key(k), &v).ok()) << k;  // both stripes
  ASSERT_TRUE(txn->insert("new", std::string(200, 'n')).ok());
  s = txn->commit();
  ASSERT_TRUE(s.ok()) << s.to_string();
  ASSERT_TRUE(store_->get("new", &v).ok());
  EXPECT_EQ(v, std::string(200, 'n'));
  EXPECT_TRUE(store_->check().ok()) << store_->check().to_string();
}

TEST_F(DaliTest, ReadOnlyTransactionsKeepTheirSnapshotWhileOthersWriteAndCollect) {
  options_.durability = Durability::kEpoch;
  options_.epoch_ms = 60000;
  create();
  for (int k = 0; k < 50; ++k) ASSERT_TRUE(store_->insert(key(k), value(k, 0)).ok());
  ASSERT_TRUE(store_->sync().ok());
  std::unique_ptr<Transaction> ro;
  ASSERT_TRUE(store_->transaction({.read_only = true}, &ro).ok());
  // Many epochs of updates, removes and collection: the snapshot stays.
  for (int round = 1; round <= 10; ++round) {
    for (int k = 0; k < 50; ++k) {
      if (k % 10 == 0 && round == 1) {
        ASSERT_TRUE(store_->remove(key(k)).ok());
      } else if (k % 10 != 0) {
        ASSERT_TRUE(store_->update(key(k), value(k, round)).ok());
      }
    }
    ASSERT_TRUE(store_->sync().ok());
  }
  std::string v;
  for (int k = 0; k < 50; ++k) {
    ASSERT_TRUE(ro->get(key(k), &v).ok()) << key(k);
    EXPECT_EQ(v, value(k, 0)) << key(k);
  }
  EXPECT_TRUE(ro->insert("x", "y").is_invalid_argument());
  ASSERT_TRUE(ro->commit().ok());
  // Released: collection now drops the old versions.
  for (int k = 0; k < 50; ++k) {
    ASSERT_EQ(store_->get(key(k), &v).ok(), k % 10 != 0) << key(k);
  }
  EXPECT_TRUE(store_->check().ok()) << store_->check().to_string();
}

// --- transactions --------------------------------------------------------------------

TEST_F(DaliTest, ATransactionSeesItsOwnWritesAndAppliesThemAtCommit) {
  options_.durability = Durability::kEpoch;
  create();
  ASSERT_TRUE(store_->insert("a", "1").ok());
  ASSERT_TRUE(store_->insert("b", "2").ok());
  std::unique_ptr<Transaction> txn;
  ASSERT_TRUE(store_->transaction(&txn).ok());
  std::string v;
  ASSERT_TRUE(txn->get("a", &v).ok());
  EXPECT_EQ(v, "1");
  ASSERT_TRUE(txn->update("a", "10").ok());
  EXPECT_TRUE(txn->insert("b", "x").is_already_exists());
  ASSERT_TRUE(txn->remove("b").ok());
  EXPECT_TRUE(txn->remove("b").is_not_found());
  EXPECT_TRUE(txn->update("c", "x").is_not_found());
  ASSERT_TRUE(txn->insert("c", "3").ok());
  ASSERT_TRUE(txn->upsert("c", "30").ok());
  ASSERT_TRUE(txn->get("a", &v).ok());
  EXPECT_EQ(v, "10");
  EXPECT_TRUE(txn->get("b", &v).is_not_found());
  ASSERT_TRUE(txn->get("c", &v).ok());
  EXPECT_EQ(v, "30");
  ASSERT_TRUE(txn->commit().ok());
  EXPECT_TRUE(txn->commit().is_invalid_argument());
  ASSERT_TRUE(store_->get("a", &v).ok());
  EXPECT_EQ(v, "10");
  EXPECT_TRUE(store_->get("b", &v).is_not_found());
  ASSERT_TRUE(store_->get("c", &v).ok());
  EXPECT_EQ(v, "30");
  EXPECT_EQ(store_->size(), 2u);
  EXPECT_TRUE(store_->check().ok()) << store_->check().to_string();
}

TEST_F(DaliTest, AnAbortedTransactionChangesNothing) {
  options_.durability = Durability::kEpoch;
  create();
  ASSERT_TRUE(store_->insert("a", "1").ok());
  {
    std::unique_ptr<Transaction> txn;
    ASSERT_TRUE(store_->transaction(&txn).ok());
    ASSERT_TRUE(txn->update("a", "2").ok());
    ASSERT_TRUE(txn->insert("b", "2").ok());
    txn->abort();
    EXPECT_TRUE(txn->commit().is_aborted());
    EXPECT_TRUE(txn->get("a", nullptr).is_aborted());
  }
  {
    std::unique_ptr<Transaction> txn;  // destroyed without commit: aborted
    ASSERT_TRUE(store_->transaction(&txn).ok());
    ASSERT_TRUE(txn->remove("a").ok());
  }
  std::string v;
  ASSERT_TRUE(store_->get("a", &v).ok());  // and its lock was released
  EXPECT_EQ(v, "1");
  EXPECT_TRUE(store_->get("b", &v).is_not_found());
  EXPECT_EQ(store_->size(), 1u);
}

TEST_F(DaliTest, ATransactionCommittedOrAbortedMayOutliveItsStore) {
  // transaction.h: once committed or aborted, destroying a transaction
  // touches nothing of the store's (ASan catches a use after free).
  options_.durability = Durability::kEpoch;
  create();
  std::unique_ptr<Transaction> committed, aborted;
  ASSERT_TRUE(store_->transaction(&committed).ok());
  ASSERT_TRUE(committed->insert("a", "1").ok());
  ASSERT_TRUE(committed->commit().ok());
  ASSERT_TRUE(store_->transaction(&aborted).ok());
  ASSERT_TRUE(aborted->insert("b", "2").ok());
  aborted->abort();
  aborted->abort();  // a second abort does nothing
  EXPECT_TRUE(aborted->commit().is_aborted());
  reopen();  // the first store is destroyed here
  std::string v;
  ASSERT_TRUE(store_->get("a", &v).ok());
  EXPECT_EQ(v, "1");
  EXPECT_TRUE(store_->get("b", &v).is_not_found());
  committed.reset();
  aborted.reset();
  EXPECT_EQ(store_->size(), 1u);
}

TEST_F(DaliTest, ADeadlockIsBrokenByTheLockTimeout) {
  options_.durability = Durability::kEpoch;
  options_.set("dali.initial_log2", 10);
  create();
  ASSERT_TRUE(store_->insert("x", "0").ok());
  ASSERT_TRUE(store_->insert("y", "0").ok());
  std::unique_ptr<Transaction> t1, t2;
  ASSERT_TRUE(store_->transaction({.lock_timeout_ms = 50}, &t1).ok());
  ASSERT_TRUE(store_->transaction({.lock_timeout_ms = 50}, &t2).ok());
  ASSERT_TRUE(t1->update("x", "1").ok());
  ASSERT_TRUE(t2->update("y", "2").ok());
  Status s1, s2;
  std::thread a([&] { s1 = t1->update("y", "1"); });
  std::thread b([&] { s2 = t2->update("x", "2"); });
  a.join();
  b.join();
  // At least one waited out its timeout and aborted (releasing its locks);
  // if one got through, it commits.
  EXPECT_TRUE(s1.is_aborted() || s2.is_aborted()) << s1.to_string() << " / " << s2.to_string();
  const Status c1 = t1->commit();
  const Status c2 = t2->commit();
  EXPECT_EQ(c1.ok(), s1.ok());
  EXPECT_EQ(c2.ok(), s2.ok());
  std::string x, y;
  ASSERT_TRUE(store_->get("x", &x).ok());
  ASSERT_TRUE(store_->get("y", &y).ok());
  // Serializable: t1 wrote both, or t2 did, or neither.
  const std::string want = c1.ok() ? "1" : c2.ok() ? "2" : "0";
  EXPECT_FALSE(c1.ok() && c2.ok());
  EXPECT_EQ(x, want);
  EXPECT_EQ(y, want);
}

// Blind writes lock at commit, in stripe order: two transactions that
// upsert the same two keys in opposite orders (two MSETs) both commit,
// where locking at each write made one wait out its timeout and abort.
TEST_F(DaliTest, TransactionsOfBlindWritesInOppositeOrdersBothCommit) {
  options_.durability = Durability::kEpoch;
  options_.set("dali.initial_log2", 10);
  create();
  // Two keys of different stripes (their hashes differ in the lowest bit,
  // which every stripe count of two or more tells apart).
  std::string y = "y";
  for (int i = 0; ((engine::make_key("x").h1 ^ engine::make_key(y).h1) & 1) == 0; ++i) y = "y" + std::to_string(i);
  for (int round = 0; round < 20; ++round) {
    std::unique_ptr<Transaction> t1, t2;
    ASSERT_TRUE(store_->transaction({.lock_timeout_ms = 2000}, &t1).ok());
    ASSERT_TRUE(store_->transaction({.lock_timeout_ms = 2000}, &t2).ok());
    ASSERT_TRUE(t1->upsert("x", "1").ok());
    ASSERT_TRUE(t2->upsert(y, "2").ok());
    ASSERT_TRUE(t1->upsert(y, "1").ok());
    ASSERT_TRUE(t2->upsert("x", "2").ok());
    Status c1, c2;
    std::thread a([&] { c1 = t1->commit(); });
    std::thread b([&] { c2 = t2->commit(); });
    a.join();
    b.join();
    ASSERT_TRUE(c1.ok()) << c1.to_string();
    ASSERT_TRUE(c2.ok()) << c2.to_string();
    // Serializable: the later commit wrote both keys.
    std::string vx, vy;
    ASSERT_TRUE(store_->get("x", &vx).ok());
    ASSERT_TRUE(store_->get(y, &vy).ok());
    EXPECT_EQ(vx, vy) << "round " << round;
  }
  // A blind write's key read back in its transaction is locked from then on.
  std::unique_ptr<Transaction> t;
  ASSERT_TRUE(store_->transaction({.lock_timeout_ms = 30}, &t).ok());
  ASSERT_TRUE(t->upsert("x", "3").ok());
  EXPECT_TRUE(store_->update("x", "4").ok()) << "a blind write holds no lock before commit";
  std::string v;
  ASSERT_TRUE(t->get("x", &v).ok());
  EXPECT_EQ(v, "3");
  EXPECT_TRUE(store_->update("x", "5").is_busy());
  ASSERT_TRUE(t->commit().ok());
  ASSERT_TRUE(store_->get("x", &v).ok());
  EXPECT_EQ(v, "3");
}

TEST_F(DaliTest, AStoreWriteWaitingForATransactionsLockTimesOutWithBusy) {
  options_.durability = Durability::kEpoch;
  options_.set("dali.lock_timeout_ms", 30);
  create();
  ASSERT_TRUE(store_->insert("k", "1").ok());
  std::unique_ptr<Transaction> txn;
  ASSERT_TRUE(store_->transaction(&txn).ok());
  std::string v;
  ASSERT_TRUE(txn->get("k", &v).ok());
  ASSERT_TRUE(txn->update("k", "3").ok());
  EXPECT_TRUE(store_->update("k", "2").is_busy());
  EXPECT_TRUE(store_->remove("k").is_busy());
  // Reads take no lock: they see the newest committed value, not the
  // transaction's buffered write.
  ASSERT_TRUE(store_->get("k", &v).ok());
  EXPECT_EQ(v, "1");
  ASSERT_TRUE(store_->get("k", &v, ReadOptions{.snapshot = true}).ok());
  EXPECT_EQ(v, "1");
  ASSERT_TRUE(txn->commit().ok());
  ASSERT_TRUE(store_->get("k", &v).ok());
  EXPECT_EQ(v, "3");
  EXPECT_TRUE(store_->update("k", "2").ok());
}

TEST_F(DaliTest, TransactionsSurviveACrashWholeOrNotAtAll) {
  options_.durability = Durability::kEpoch;
  options_.epoch_ms = 60000;
  create();
  for (int k = 0; k < 100; ++k) ASSERT_TRUE(store_->insert(key(k), "0").ok());
  ASSERT_TRUE(store_->close().ok());
  crash_after([&](Store& s) {
    // Committed and synced: must survive.
    for (int t = 0; t < 10; ++t) {
      std::unique_ptr<Transaction> txn;
      if (!s.transaction(&txn).ok()) return false;
      for (int k = t * 10; k < t * 10 + 10; ++k) {
        if (!txn->update(key(k), "1").ok()) return false;
      }
      if (!txn->commit().ok()) return false;
    }
    if (!s.sync().ok()) return false;
    // Committed in an epoch the crash fails: all lost together.
    std::unique_ptr<Transaction> txn;
    if (!s.transaction(&txn).ok()) return false;
    for (int k = 0; k < 100; ++k) {
      if (!txn->update(key(k), "2").ok()) return false;
    }
    return txn->commit().ok();
  });
  reopen();
  std::string v;
  int ones = 0, twos = 0;
  for (int k = 0; k < 100; ++k) {
    ASSERT_TRUE(store_->get(key(k), &v).ok());
    ones += v == "1";
    twos += v == "2";
  }
  EXPECT_TRUE(ones == 100 || twos == 100) << ones << " ones, " << twos << " twos: a torn transaction";
}

TEST_F(DaliTest, EnginesWithoutTransactionsSaySo) {
  Options o = options_;
  o.engine = "clevel";
  ASSERT_TRUE(Store::create(path_, o, &store_).ok());
  std::unique_ptr<Transaction> txn;
  const Status s = store_->transaction(&txn);
  EXPECT_EQ(s.code(), Status::Code::kNotSupported) << s.to_string();
  EXPECT_NE(s.message().find("dali"), std::string::npos) << s.to_string();
  EXPECT_TRUE(store_->transaction({.lock_timeout_ms = 0}, &txn).is_invalid_argument());
}

// --- a full pool ------------------------------------------------------------------------

TEST_F(DaliTest, RemovesSucceedInAFullPoolAndTheirRoomIsUsedAgain) {
  options_.durability = Durability::kEpoch;
  options_.pool_size = 4u << 20;
  create();
  int n = 0;
  Status s;
  while ((s = store_->insert(key(n), std::string(200, 'v'))).ok()) ++n;
  ASSERT_TRUE(s.is_no_space()) << s.to_string();
  ASSERT_GT(n, 1000);
  for (int k = 0; k < n; k += 2) {
    s = store_->remove(key(k));
    ASSERT_TRUE(s.ok()) << "remove " << k << " of " << n << " in a full pool: " << s.to_string();
  }
  for (int k = 0; k < n / 2; k += 2) {
    s = store_->insert(key(k), std::string(200, 'w'));
    ASSERT_TRUE(s.ok()) << "insert " << k << " after the removes: " << s.to_string();
  }
  std::string v;
  for (int k = 0; k < n; ++k) {
    const bool present = k % 2 == 1 || k < n / 2;  // kept, or removed and inserted again
    ASSERT_EQ(store_->get(key(k), &v).ok(), present) << key(k);
  }
  EXPECT_TRUE(store_->check().ok()) << store_->check().to_string();
}

TEST_F(DaliTest, RefusesBadOptions) {
  Options o = options_;
  o.epoch_ms = 0;
  EXPECT_TRUE(Store::create(path_, o, &store_).is_invalid_argument());
  o = options_;
  o.set("dali.lock_timeout_ms", 60001);
  EXPECT_TRUE(Store::create(path_, o, &store_).is_invalid_argument());
  o = options_;
  o.set("dali.initial_log2", 0);
  EXPECT_TRUE(Store::create(path_, o, &store_).is_invalid_argument());
  o = options_;
  o.set("dali.initial_log2", 31);
  EXPECT_TRUE(Store::create(path_, o, &store_).is_invalid_argument());
  EXPECT_NE(::access(path_.c_str(), F_OK), 0) << "a refused create left a file";
}

}  // namespace
}  // namespace pmhash
