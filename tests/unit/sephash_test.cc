// Unit tests of the sephash engine (src/engine/sephash) through the Store
// API, on memory nodes of the shm transport and of the tcp daemon: the
// operations against a model through merges and splits, threads, the
// stale-sign race, reopening, full nodes, dead nodes and bad input; scans
// across merges and splits.
#include <fcntl.h>
#include <sched.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <iostream>
#include <random>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "engine/hash.h"
#include "engine/sephash/layout.h"
#include "engine/sephash/sephash.h"
#include "engine/sephash/sephash_testing.h"
#include "memnode_daemon.h"
#include "pmhash/store.h"
#include "remote/client.h"
#include "remote/remote_testing.h"
#include "remote/memnode.h"
#include "remote/server.h"
#include "remote_engine_test.h"

namespace pmhash {
namespace {

using testing::key_of;
using testing::Model;
using testing::value_of;

class SepHashTest : public testing::RemoteEngineTest {
 protected:
  void TearDown() override {
    engine::sephash::testing::set_append_hook(nullptr);
    engine::sephash::testing::set_lock_hook(nullptr);
  }

  Options options() const override {
    Options o;
    o.engine = "sephash";
    o.memnodes = "shm:" + nodes_[0] + ",shm:" + nodes_[1];
    // Small segments, so that a few thousand keys merge and split often.
    o.set("sephash.initial_depth", 1);
    o.set("sephash.main_max_slots", 2 * engine::sephash::kCurSlots);
    o.set("sephash.max_depth", 12);
    return o;
  }

  // The bytes the memory nodes' bump words have handed out, all nodes
  // together: the space the index has taken.
  std::uint64_t bumped() const {
    std::uint64_t total = 0;
    for (const std::string& n : nodes_) {
      std::unique_ptr<remote::Client> c;
      const Status s = remote::Client::connect({"shm:" + n}, {}, &c);
      EXPECT_TRUE(s.ok()) << s.to_string();
      if (!s.ok()) return 0;
      std::uint64_t bump = 0;
      remote::Batch b;
      b.read(0, remote::kBumpOffset, &bump, 8);
      EXPECT_TRUE(c->exec_sync(b).ok());
      total += bump - remote::kFirstAllocatable;
    }
    return total;
  }
};

TEST_F(SepHashTest, OperationsFollowAModelThroughMergesAndSplits) {
  auto st = create(options());
  ASSERT_NE(st, nullptr);
  Model model;
  ASSERT_NO_FATAL_FAILURE(run_model(*st, 12000, 3000, &model));
  const Stats stats = st->stats();
  EXPECT_EQ(stats.engine, "sephash");
  EXPECT_GT(stats.property("sephash.merges"), 20u);
  EXPECT_GT(stats.property("sephash.splits"), 4u);  // splits
  EXPECT_GT(stats.property("sephash.round_trips"), 12000u);
  EXPECT_GT(stats.property("sephash.remote_bytes"), stats.property("sephash.round_trips"));
  ASSERT_NO_FATAL_FAILURE(expect_holds_here_and_reopened(std::move(st), model));
}

TEST_F(SepHashTest, SplitsAtDepthsThatReReadItemsKeepEveryKey) {
  // From depth 1 past depths 4 and 8, where the slots' hash bits run out.
  auto st = create(options());
  ASSERT_NE(st, nullptr);
  Model model;
  ASSERT_NO_FATAL_FAILURE(load(*st, 0, 20000, &model));
  EXPECT_GE(st->stats().property("sephash.splits"), 60u);
  ASSERT_NO_FATAL_FAILURE(expect_holds(*st, model));
}

TEST_F(SepHashTest, ThreeNodesKeepEverySegmentWithItsItems) {
  // Three nodes and initial depth 1: segments split into patterns whose
  // residue mod 3 is not their parent's; a split's new segment must stay
  // on the node of the items it names.
  const std::string third = dir_.str() + "/mn2";
  ASSERT_TRUE(remote::create_memnode(third, 64u << 20, false).ok());
  Options o = options();
  o.memnodes += ",shm:" + third;
  auto st = create(o);
  ASSERT_NE(st, nullptr);
  Model model;
  ASSERT_NO_FATAL_FAILURE(run_model(*st, 8000, 2500, &model));
  EXPECT_GT(st->stats().property("sephash.splits"), 4u);
  ASSERT_NO_FATAL_FAILURE(expect_holds(*st, model));
  ASSERT_TRUE(st->close().ok());
  auto again = open(o);
  ASSERT_NE(again, nullptr);
  ASSERT_NO_FATAL_FAILURE(expect_holds(*again, model));
}

TEST_F(SepHashTest, ThreadsWriteTheirOwnKeysAndShareOthers) {
  auto st = create(options());
  ASSERT_NE(st, nullptr);
  ASSERT_NO_FATAL_FAILURE(run_threads(*st));
}

TEST_F(SepHashTest, ConcurrentWritesOfOneKeyLeaveOneOfTheirValues) {
  auto st = create(options());
  ASSERT_NE(st, nullptr);
  std::vector<std::thread> threads;
  for (unsigned t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (unsigned r = 0; r < 300; ++r) {
        EXPECT_TRUE(st->upsert("shared", "t" + std::to_string(t) + "-" + std::to_string(r)).ok());
        EXPECT_TRUE(st->upsert(key_of(t * 1000 + r), "x").ok());  // forces merges
      }
    });
  }
  for (auto& th : threads) th.join();
  std::string got;
  ASSERT_TRUE(st->get("shared", &got).ok());
  // The last value of one of the threads (the newest version wins).
  bool last = false;
  for (unsigned t = 0; t < 4; ++t) last |= got == "t" + std::to_string(t) + "-299";
  EXPECT_TRUE(last) << got;
  EXPECT_TRUE(st->check().ok());
}

// A client reads the CurSeg's meta and slots; before its slot CAS, another
// client fills the same CurSeg until it merges (flipping the sign, so that
// the slot the first client saw as free reads free again under the new
// sign, or was read by the merge already). The first client's entry must
// not be lost, and it must have noticed (it appends again).
TEST_F(SepHashTest, AnAppendWithAStaleSignIsNotLost) {
  Options o = options();
  o.set("sephash.initial_depth", 1);
  auto st = create(o);
  ASSERT_NE(st, nullptr);
  // Keys of segment 0 (hash bit 0 clear) only.
  std::vector<std::string> same;
  for (unsigned i = 0; same.size() < 3 * engine::sephash::kCurSlots; ++i) {
    if ((engine::make_key(key_of(i)).h1 & 1) == 0) same.push_back(key_of(i));
  }
  const std::string victim = same.back();
  same.pop_back();
  bool fired = false;
  engine::sephash::testing::set_append_hook([&] {
    if (fired) return;
    fired = true;
    // Another thread, so another client: enough appends to the same
    // CurSeg to fill it and make it merge at least once.
    std::thread other([&] {
      const std::uint64_t merges = st->stats().property("sephash.merges");
      for (const std::string& k : same) EXPECT_TRUE(st->insert(k, "other").ok());
      EXPECT_GT(st->stats().property("sephash.merges"), merges);
    });
    other.join();
  });
  ASSERT_TRUE(st->insert(victim, "mine").ok());
  engine::sephash::testing::set_append_hook(nullptr);
  ASSERT_TRUE(fired);
  EXPECT_GE(st->stats().property("sephash.append_retries"), 1u);  // the stale append ran again
  std::string got;
  ASSERT_TRUE(st->get(victim, &got).ok());
  EXPECT_EQ(got, "mine");
  Model model;
  for (const std::string& k : same) model.emplace(k, "other");
  model.emplace(victim, "mine");
  ASSERT_NO_FATAL_FAILURE(expect_holds(*st, model));
}

// Updates, upserts, removes and inserts over a fixed set of keys, round
// after round, against a model: merges free the items they drop and the
// MainSegs they replace, and the writes reuse them, so the space the nodes
// hand out stops growing once the index is warm.
TEST_F(SepHashTest, SpaceStopsGrowingUnderUpdatesOfAFixedKeySet) {
  auto st = create(options());
  ASSERT_NE(st, nullptr);
  constexpr unsigned kKeys = 1500, kRounds = 10;
  Model model;
  std::mt19937 rng(11);
  std::uint64_t after_round3 = 0, written_after_round3 = 0;
  for (unsigned round = 1; round <= kRounds; ++round) {
    for (unsigned step = 0; step < 2 * kKeys; ++step) {
      const unsigned i = rng() % kKeys;
      const std::string k = key_of(i);
      const std::string v = value_of(i, round);
      const bool present = model.count(k) != 0;
      const unsigned op = rng() % 8;
      if (op == 0) {
        const Status s = st->remove(k);
        ASSERT_EQ(s.is_not_found(), !present) << s.to_string();
        model.erase(k);
      } else if (op == 1 || !present) {
        const Status s = st->insert(k, v);
        ASSERT_EQ(s.is_already_exists(), present) << s.to_string();
        model.emplace(k, v);
      } else if (op < 5) {
        ASSERT_TRUE(st->update(k, v).ok());
        model[k] = v;
      } else {
        ASSERT_TRUE(st->upsert(k, v).ok());
        model[k] = v;
      }
      if (round > 3) written_after_round3 += 24 + k.size() + v.size();
    }
    if (round == 3) after_round3 = bumped();
  }
  const std::uint64_t after_last = bumped();
  const Stats stats = st->stats();
  EXPECT_GT(stats.property("sephash.merges"), 100u);
  EXPECT_GT(stats.property("sephash.blocks_freed"), 10u * kKeys);
  EXPECT_GT(stats.property("sephash.blocks_reused"), 10u * kKeys);
  EXPECT_EQ(stats.property("sephash.bytes_bumped"), after_last);  // one store did all the allocating
  // Rounds 4 to 10 wrote `written_after_round3` bytes of items (more in
  // 64-byte units) and a MainSeg per merge. Without reuse the nodes would
  // have grown by at least that much; with it, they may grow only by
  // blocks of sizes the free blocks do not have yet (a MainSeg of a larger
  // size class, a chunk for items of a new length): allow one 64 KiB chunk
  // per node and round.
  std::cout << "[ bump ] after round 3: " << after_round3 << " bytes, after round " << kRounds
            << ": " << after_last << " bytes; items written since round 3: "
            << written_after_round3 << " bytes\n";
  EXPECT_LE(after_last, after_round3 + nodes_.size() * (kRounds - 3) * 64 * 1024);
  EXPECT_LT(after_last - after_round3, written_after_round3 / 10);
  ASSERT_NO_FATAL_FAILURE(expect_holds(*st, model));
}

// Writers update a small set of keys (so that its segments merge, free and
// reuse blocks all the time) while readers get them: a reader must only
// ever see a value some writer wrote for that key, whole, and never
// NotFound for a key nobody removes. A reader that read a block after a
// merge freed and reused it must notice (its check fails) and read again.
TEST_F(SepHashTest, ReadersSeeOnlyWrittenValuesWhileBlocksAreReused) {
  auto st = create(options());
  ASSERT_NE(st, nullptr);
  constexpr unsigned kKeys = 48, kWriters = 2, kReaders = 2, kWrites = 3000;
  // Keys [0, kKeys) are never removed; [kKeys, 2 kKeys) are removed and
  // inserted again by writer 0.
  auto value = [](unsigned key, unsigned writer, unsigned n) {
    // Lengths vary, so that blocks of one length are reused for items of
    // keys and values that differ.
    return "k" + std::to_string(key) + "-w" + std::to_string(writer) + "-" + std::to_string(n) +
           "-" + std::string((n * 37 + key) % 200, 'a' + static_cast<char>(key % 26)) + ".";
  };
  // A value is whole when it parses and its padding is as the writer made it.
  auto whole = [&](const std::string& v, unsigned key, const std::atomic<unsigned>* started) {
    unsigned k = 0, w = 0, n = 0;
    int used = 0;
    if (std::sscanf(v.c_str(), "k%u-w%u-%u-%n", &k, &w, &n, &used) != 3) return false;
    if (k != key || w >= kWriters || n > started[w].load()) return false;
    return v == value(key, w, n);
  };
  for (unsigned k = 0; k < 2 * kKeys; ++k) ASSERT_TRUE(st->insert(key_of(k), value(k, 0, 0)).ok());
  std::atomic<unsigned> started[kWriters] = {};
  std::atomic<bool> done{false};
  std::atomic<std::uint64_t> reads{0}, bad{0};
  std::vector<std::thread> threads;
  for (unsigned w = 0; w < kWriters; ++w) {
    threads.emplace_back([&, w] {
      std::mt19937 rng(w);
      for (unsigned n = 1; n <= kWrites; ++n) {
        started[w].store(n);
        const unsigned k = rng() % kKeys;
        EXPECT_TRUE(st->upsert(key_of(k), value(k, w, n)).ok());
        if (w == 0) {
          const unsigned r = kKeys + rng() % kKeys;
          if (rng() % 2 == 0) {
            const Status s = st->remove(key_of(r));
            EXPECT_TRUE(s.ok() || s.is_not_found()) << s.to_string();
          } else {
            EXPECT_TRUE(st->upsert(key_of(r), value(r, w, n)).ok());
          }
        }
      }
    });
  }
  for (unsigned r = 0; r < kReaders; ++r) {
    threads.emplace_back([&, r] {
      std::mt19937 rng(100 + r);
      while (!done.load()) {
        const unsigned k = rng() % (2 * kKeys);
        std::string got;
        const Status s = st->get(key_of(k), &got);
        reads.fetch_add(1);
        if (s.is_not_found() && k >= kKeys) continue;
        if (!s.ok() || !whole(got, k, started)) {
          bad.fetch_add(1);
          ADD_FAILURE() << key_of(k) << ": " << s.to_string() << " '" << got << "'";
        }
      }
    });
  }
  for (unsigned w = 0; w < kWriters; ++w) threads[w].join();
  done.store(true);
  for (unsigned r = 0; r < kReaders; ++r) threads[kWriters + r].join();
  EXPECT_EQ(bad.load(), 0u);
  EXPECT_GT(reads.load(), 1000u);
  const Stats stats = st->stats();
  EXPECT_GT(stats.property("sephash.merges"), 20u);
  EXPECT_GT(stats.property("sephash.blocks_reused"), 1000u);
  for (unsigned k = 0; k < kKeys; ++k) {
    std::string got;
    ASSERT_TRUE(st->get(key_of(k), &got).ok());
    EXPECT_TRUE(whole(got, k, started)) << got;
  }
  EXPECT_TRUE(st->check().ok());
}

// A client that closes hands its free blocks to the nodes' stacks; a new
// client takes them before it takes new space, so a workload that fits in
// them does not grow the nodes at all.
TEST_F(SepHashTest, CloseHandsBlocksBackAndANewClientReusesThem) {
  Model model;
  std::uint64_t handed = 0;  // blocks the first client freed and had not reused
  {
    auto st = create(options());
    ASSERT_NE(st, nullptr);
    for (unsigned round = 0; round < 6; ++round) {
      for (unsigned i = 0; i < 1000; ++i) {
        ASSERT_TRUE(st->upsert(key_of(i), value_of(i, round)).ok());
        model[key_of(i)] = value_of(i, round);
      }
    }
    const Stats stats = st->stats();
    handed = stats.property("sephash.blocks_freed") - stats.property("sephash.blocks_reused");
    EXPECT_GT(handed, 200u);
    ASSERT_TRUE(st->close().ok());
  }
  const std::uint64_t before = bumped();
  auto again = open(options());
  ASSERT_NE(again, nullptr);
  // Half as many writes as there are handed-back blocks, of the same sizes
  // as the first client's.
  const unsigned writes = static_cast<unsigned>(handed / 2);
  for (unsigned i = 0; i < writes; ++i) {
    ASSERT_TRUE(again->upsert(key_of(i), value_of(i, 6)).ok());
    model[key_of(i)] = value_of(i, 6);
  }
  const Stats stats = again->stats();
  EXPECT_GE(stats.property("sephash.blocks_reused"), writes);
  EXPECT_EQ(stats.property("sephash.bytes_bumped"), 0u);
  EXPECT_EQ(bumped(), before);
  ASSERT_NO_FATAL_FAILURE(expect_holds(*again, model));
}

// A client that frees more than it allocates (here: it removes thousands
// of keys, and its merges free their items) hands its surplus to the nodes'
// stacks while it runs, where another client open at the same time finds it.
TEST_F(SepHashTest, AClientThatFreesMoreThanItWritesSharesTheSurplus) {
  auto a = create(options());
  ASSERT_NE(a, nullptr);
  // More than 2 x kKeepFreeBlocks (sephash.cc) blocks per node end up freed.
  constexpr unsigned kKeys = 16000;
  for (unsigned i = 0; i < kKeys; ++i) ASSERT_TRUE(a->insert(key_of(i), "v").ok());
  for (unsigned i = 0; i < kKeys; ++i) ASSERT_TRUE(a->remove(key_of(i)).ok());
  const Stats sa = a->stats();
  EXPECT_GT(sa.property("sephash.blocks_freed") - sa.property("sephash.blocks_reused"), 8000u);
  // The nodes' stacks (layout.h, FreeTable) hold records now, a still open.
  auto stacked = [&] {
    engine::sephash::IndexRoot root{};
    std::unique_ptr<remote::Client> c;
    EXPECT_TRUE(remote::Client::connect({"shm:" + nodes_[0], "shm:" + nodes_[1]}, {}, &c).ok());
    remote::Batch b;
    b.read(0, engine::sephash::kRootOff, &root, sizeof(root));
    EXPECT_TRUE(c->exec_sync(b).ok());
    std::uint64_t head[2] = {};
    b.clear();
    for (unsigned n = 0; n < 2; ++n) b.read(n, root.free_table, &head[n], 8);
    EXPECT_TRUE(c->exec_sync(b).ok());
    return (engine::sephash::head_off(head[0]) != 0) + (engine::sephash::head_off(head[1]) != 0);
  };
  EXPECT_GE(stacked(), 1u);
  auto b = open(options());
  ASSERT_NE(b, nullptr);
  Model model;
  for (unsigned i = 0; i < 300; ++i) {
    ASSERT_TRUE(b->insert(key_of(i), "w").ok());
    model[key_of(i)] = "w";
  }
  EXPECT_GT(b->stats().property("sephash.blocks_reused"), 0u);
  ASSERT_NO_FATAL_FAILURE(expect_holds(*b, model));
}

TEST_F(SepHashTest, BadInputIsRefusedWithAClearError) {
  expect_refuses_bad_input(options(), "sephash");
}

// ---- membership, generation, lease (engine/remote_common/remote_index.h) ----
TEST_F(SepHashTest, WrongNodeListsAreRefusedAtAttachAndChangeNothing) {
  expect_wrong_node_lists_refused();
}

TEST_F(SepHashTest, AForcedCreateFailsTheOldClientsCallsAndKeepsTheNewIndex) {
  Options o = options();
  o.set("sephash.lock_lease_ms", 400);  // the forced create waits it out
  expect_forced_create_fences_old_clients(o);
}

TEST_F(SepHashTest, ConcurrentCreatesOnFreshNodesHaveOneWinner) {
  expect_concurrent_creates_have_one_winner();
}

// The lock lease bounds the remote timeout (a batch must execute within
// lease/2): above it, create is refused before it claims anything, and
// open after it read the stored lease.
TEST_F(SepHashTest, ATimeoutAboveHalfTheStoredLeaseIsRefused) {
  Options o = options();
  o.set("sephash.lock_lease_ms", 1000);
  Options slow = o;
  slow.remote_timeout_ms = 501;
  std::unique_ptr<Store> st;
  const Status s = Store::create("", slow, &st);
  EXPECT_TRUE(s.is_invalid_argument()) << s.to_string();
  EXPECT_NE(s.message().find("501 ms"), std::string::npos) << s.to_string();
  EXPECT_NE(s.message().find("1000 ms"), std::string::npos) << s.to_string();
  const Status fresh = Store::open("", options(), &st);
  EXPECT_NE(fresh.message().find("holds no sephash index"), std::string::npos)
      << "the refused create claimed the nodes: " << fresh.to_string();
  expect_timeout_above_half_the_lease_refused(o, 1000);
}

TEST_F(SepHashTest, AFullNodeGivesNoSpaceAndKeepsWhatIsStored) {
  const std::string small = dir_.str() + "/small";
  ASSERT_TRUE(remote::create_memnode(small, 4u << 20, false).ok());
  Options o = options();
  o.memnodes = "shm:" + small;
  o.set("sephash.max_depth", 8);
  expect_full_node_keeps_data(o, small);
}

// ---- a lock holder that dies or stalls (sephash.h, "Dead lock holders") ----
// A short lease, so that a takeover comes soon; the margin is what a call
// on a taken-over segment may take beyond the lease (round trips, a
// split's roll-forward, a slow sanitizer build).
class SepHashLockTest : public SepHashTest {
 protected:
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
  // Sanitized builds run merges several times slower: a merge must stay
  // well within lease/2, or its holder stops and its call gives Busy.
  static constexpr unsigned kLeaseMs = 1000, kMarginMs = 5000;
#else
  static constexpr unsigned kLeaseMs = 300, kMarginMs = 3000;
#endif
  using LockStep = engine::sephash::LockStep;

  void TearDown() override {
    engine::sephash::testing::set_lock_hook(nullptr);
    SepHashTest::TearDown();
  }

  // The lease the index is created with (kept with it). The clients take
  // half of it as their remote timeout.
  virtual unsigned lease_ms() const { return kLeaseMs; }

  Options options() const override {
    Options o = SepHashTest::options();
    o.set("sephash.lock_lease_ms", lease_ms());
    return o;
  }

  static double ms_since(std::chrono::steady_clock::time_point t) {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count();
  }

  // After a lock holder stopped at some step, leaving `unacked` (the key
  // whose insert made it merge) with no answer: another client's call on
  // that segment waits about a lease, takes the lock over and succeeds;
  // every acknowledged write reads back, for_each and check() agree with
  // the model, and the index keeps working (more merges and splits),
  // also after a reopen.
  void expect_recovers(std::unique_ptr<Store> st, Model model, const std::string& unacked,
                       unsigned next) {
    // for_each reads every segment, the locked one too.
    const auto t0 = std::chrono::steady_clock::now();
    std::size_t seen = 0;
    const Status s = st->for_each([&](std::string_view, std::string_view) {
      ++seen;
      return true;
    });
    const double waited = ms_since(t0);
    ASSERT_TRUE(s.ok()) << s.to_string();
    EXPECT_EQ(seen, model.size());
    EXPECT_GE(waited, lease_ms() * 0.9) << "the call did not wait for the lease";
    EXPECT_LT(waited, lease_ms() + kMarginMs);
    std::string got;
    const Status g = st->get(unacked, &got);
    EXPECT_TRUE(g.is_not_found()) << g.to_string();  // its entry was never placed
    EXPECT_EQ(st->stats().property("sephash.lock_takeovers"), 1u);
    ASSERT_NO_FATAL_FAILURE(expect_holds(*st, model));
    ASSERT_NO_FATAL_FAILURE(load(*st, next, next + 3000, &model));
    ASSERT_TRUE(st->insert(unacked, "later").ok());
    model[unacked] = "later";
    ASSERT_NO_FATAL_FAILURE(expect_holds_here_and_reopened(std::move(st), model));
  }

  // A client process that inserts key_of(0, 1, ...) until its lock hook
  // kills it (_exit, no further write) at `step` of a merge or split; the
  // parent learns the acknowledged inserts through a pipe, then checks
  // that another client recovers the segment (expect_recovers).
  void die_at(LockStep step) {
    Killed k;
    ASSERT_NO_FATAL_FAILURE(kill_and_open(step, &k));
    ASSERT_NO_FATAL_FAILURE(expect_recovers(std::move(k.st), std::move(k.model), k.unacked, k.next));
  }

  // What kill_holder_at left, and a store opened on it afterwards.
  struct Killed {
    Model model;
    std::string unacked;
    std::uint32_t next = 0;
    std::unique_ptr<Store> st;
  };
  void kill_and_open(LockStep step, Killed* k) {
    ASSERT_NO_FATAL_FAILURE(kill_holder_at(step, &k->model, &k->unacked, &k->next));
    k->st = open(options());
    ASSERT_NE(k->st, nullptr);
  }

  // The client process of die_at: *model gets its acknowledged inserts,
  // *unacked the key whose insert was in flight when it died, *next the
  // first key it never tried.
  void kill_holder_at(LockStep step, Model* model_out, std::string* unacked_out,
                      std::uint32_t* next_out) {
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
      engine::sephash::testing::set_lock_hook([step](LockStep at) {
        if (at == step) ::_exit(42);  // dies here: nothing more is written
        return false;
      });
      for (std::uint32_t i = 0; i < 20000; ++i) {
        // Tell the parent which insert it is about to make, then that it
        // was acknowledged.
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
    std::uint32_t next = 0;
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
    ASSERT_GT(model.size(), 100u);
    *model_out = std::move(model);
    *unacked_out = unacked;
    *next_out = next;
  }

  // After a holder died at `step`: four threads of one store read every
  // acknowledged key and insert keys of their own at once; they all wait
  // on the dead lock, exactly one takes it over, and all succeed.
  void die_at_with_many_waiters(LockStep step) {
    Killed killed;
    ASSERT_NO_FATAL_FAILURE(kill_and_open(step, &killed));
    Model& model = killed.model;
    const std::uint32_t next = killed.next;
    std::unique_ptr<Store>& st = killed.st;
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
    EXPECT_EQ(st->stats().property("sephash.lock_takeovers"), 1u);
    for (unsigned i = next; i < next + kThreads * kEach; ++i) model.emplace(key_of(i), value_of(i, 0));
    ASSERT_NO_FATAL_FAILURE(expect_holds_here_and_reopened(std::move(st), model));
  }
};

// Before anything is read (seq not raised): a taker undoes the lock.
TEST_F(SepHashLockTest, AHolderKilledRightAfterLockingIsUndone) { die_at(LockStep::kLocked); }
// Slots and MainSeg read, nothing written: undone.
TEST_F(SepHashLockTest, AHolderKilledAfterReadingIsUndone) { die_at(LockStep::kRead); }
// The new MainSeg allocated, not written: undone (its block leaks).
TEST_F(SepHashLockTest, AHolderKilledBeforeItsPublishIsUndone) { die_at(LockStep::kMergePublish); }
// MainSeg and intent written: finished by the taker.
TEST_F(SepHashLockTest, AHolderKilledAfterItsIntentIsFinished) { die_at(LockStep::kMergeIntent); }
// Slots already rewritten (the entries live only in the new MainSeg), no
// meta: finished.
TEST_F(SepHashLockTest, AHolderKilledWithItsSlotsClearedIsFinished) { die_at(LockStep::kMergeSlots); }
TEST_F(SepHashLockTest, ASplitterKilledBeforeItsFirstBatchIsUndone) { die_at(LockStep::kSplitFirst); }
TEST_F(SepHashLockTest, ASplitterKilledAfterItsIntentIsFinished) { die_at(LockStep::kSplitIntent); }
TEST_F(SepHashLockTest, ASplitterKilledAfterItsDirectoryIsFinished) {
  die_at(LockStep::kSplitDirectory);
}
TEST_F(SepHashLockTest, ASplitterKilledAfterTheGlobalDepthIsFinished) {
  die_at(LockStep::kSplitDepth);
}
TEST_F(SepHashLockTest, ASplitterKilledWithItsSlotsClearedIsFinished) {
  die_at(LockStep::kSplitSlots);
}

TEST_F(SepHashLockTest, ManyWaitersOnAKilledMergerTakeItOverOnce) {
  die_at_with_many_waiters(LockStep::kMergeSlots);
}
TEST_F(SepHashLockTest, ManyWaitersOnAKilledSplitterTakeItOverOnce) {
  die_at_with_many_waiters(LockStep::kSplitDirectory);
}

// check() as the first call after a splitter died with its intent
// written and no directory entry: it finishes the split before it reads
// the directory, and finds the index sound.
TEST_F(SepHashLockTest, CheckAfterAKilledSplitterFinishesItFirst) {
  Model model;
  std::string unacked;
  std::uint32_t next = 0;
  ASSERT_NO_FATAL_FAILURE(kill_holder_at(LockStep::kSplitIntent, &model, &unacked, &next));
  auto st = open(options());
  ASSERT_NE(st, nullptr);
  const Status c = st->check();
  EXPECT_TRUE(c.ok()) << c.to_string();
  EXPECT_EQ(st->stats().property("sephash.lock_takeovers"), 1u);
  ASSERT_NO_FATAL_FAILURE(expect_holds(*st, model));
}

TEST_F(SepHashLockTest, ALeaseOutOfRangeIsRefused) {
  Options o = options();
  o.set("sephash.lock_lease_ms", 0);
  std::unique_ptr<Store> st;
  const Status s = Store::create("", o, &st);
  EXPECT_TRUE(s.is_invalid_argument()) << s.to_string();
  EXPECT_NE(s.message().find("sephash.lock_lease_ms must be 1..600000, got 0"), std::string::npos)
      << s.to_string();
}

// The lease is chosen at create and kept with the index: a client that
// opens it giving another lease (here ten minutes) uses the stored one; an
// out-of-range lease is refused at open as at create. Its slow holder (the
// sleep is what is tested) gives up after half the stored lease, naming
// it, and a later call takes the lock over after about the stored lease;
// with the option's lease, neither would happen within the test.
TEST_F(SepHashLockTest, AnOpenUsesTheLeaseStoredAtCreateNotItsOption) {
  {
    auto created = create(options());
    ASSERT_NE(created, nullptr);
    ASSERT_TRUE(created->close().ok());
  }
  Options other = options();
  other.set("sephash.lock_lease_ms", 0);
  std::unique_ptr<Store> refused;
  const Status zero = Store::open("", other, &refused);
  EXPECT_TRUE(zero.is_invalid_argument()) << zero.to_string();
  other.set("sephash.lock_lease_ms", 600000);
  auto st = open(other);
  ASSERT_NE(st, nullptr);
  std::atomic<bool> slept{false};
  engine::sephash::testing::set_lock_hook([&](LockStep at) {
    if (at == LockStep::kRead && !slept.exchange(true)) {
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
    EXPECT_NE(s.message().find("half its lock lease (" + std::to_string(lease_ms()) + " ms)"),
              std::string::npos)
        << s.to_string();
    unacked = key_of(i);
  }
  ASSERT_TRUE(slept);
  ASSERT_FALSE(unacked.empty()) << "the slow holder did not give up at half the stored lease";
  engine::sephash::testing::set_lock_hook(nullptr);
  ASSERT_NO_FATAL_FAILURE(expect_recovers(std::move(st), std::move(model), unacked, next));
}

// A holder that sleeps past a whole lease (the sleep is what is tested)
// while another thread writes: that thread takes the lock over, merges on,
// and the holder, once awake, must write nothing (it is past lease/2) and
// give Busy; had it published, the other thread's writes would be lost.
TEST_F(SepHashLockTest, AHolderThatWakesAfterATakeoverWritesNothing) {
  auto st = create(options());
  ASSERT_NE(st, nullptr);
  std::atomic<bool> in_hook{false}, holder_done{false};
  std::atomic<unsigned> fired{0};
  engine::sephash::testing::set_lock_hook([&](LockStep at) {
    if (at == LockStep::kRead && fired.fetch_add(1) == 0) {
      in_hook = true;
      in_hook.notify_all();
      std::this_thread::sleep_for(std::chrono::milliseconds(kLeaseMs * 3 / 2));
    }
    return false;
  });
  Model other;
  std::atomic<unsigned> wrong{0};
  std::thread writer([&] {
    in_hook.wait(false);
    for (unsigned i = 100000; i < 120000 && !holder_done; ++i) {
      if (st->insert(key_of(i), value_of(i, 0)).ok()) {
        other.emplace(key_of(i), value_of(i, 0));
      } else {
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
  engine::sephash::testing::set_lock_hook(nullptr);
  EXPECT_EQ(wrong.load(), 0u);
  EXPECT_GT(other.size(), 0u);
  EXPECT_EQ(st->stats().property("sephash.lock_takeovers"), 1u);
  model.insert(other.begin(), other.end());
  ASSERT_NO_FATAL_FAILURE(expect_holds(*st, model));
  ASSERT_TRUE(busy.is_busy()) << busy.to_string();
  EXPECT_NE(busy.message().find("half its lock lease"), std::string::npos) << busy.to_string();
  ASSERT_NO_FATAL_FAILURE(expect_holds_here_and_reopened(std::move(st), model));
}

// The same over tcp: the killed client's last batch went to the
// memory-node daemons as requests (it ran whole before the client died).
// ---- compare_and_swap (sephash.h, "Compare and swap") ----
// Swaps every key of the model twice: from a value it does not hold
// (Conflict, nothing changed) and from the one it holds (OK); the model
// follows. The number of swaps that did not answer as the model says.
unsigned swap_all(Store& st, Model* model) {
  unsigned wrong = 0;
  for (auto& [k, v] : *model) {
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

// A merger or splitter dies holding a segment's lock (before its intent:
// undone; after: finished). Swaps of every key then wait for the lease,
// one takes the lock over, and all answer as the model says; merges and
// splits go on, and a reopened client reads the swapped values.
TEST_F(SepHashLockTest, SwapsWaitOutAKilledMergerAndLand) {
  Killed k;
  ASSERT_NO_FATAL_FAILURE(kill_and_open(LockStep::kRead, &k));
  EXPECT_EQ(swap_all(*k.st, &k.model), 0u);
  EXPECT_EQ(k.st->stats().property("sephash.lock_takeovers"), 1u);
  ASSERT_NO_FATAL_FAILURE(load(*k.st, k.next, k.next + 2000, &k.model));
  EXPECT_EQ(swap_all(*k.st, &k.model), 0u);
  ASSERT_NO_FATAL_FAILURE(expect_holds_here_and_reopened(std::move(k.st), k.model));
}

TEST_F(SepHashLockTest, SwapsWaitOutAKilledSplitterAndLand) {
  Killed k;
  ASSERT_NO_FATAL_FAILURE(kill_and_open(LockStep::kSplitDirectory, &k));
  EXPECT_EQ(swap_all(*k.st, &k.model), 0u);
  EXPECT_EQ(k.st->stats().property("sephash.lock_takeovers"), 1u);
  ASSERT_NO_FATAL_FAILURE(load(*k.st, k.next, k.next + 2000, &k.model));
  EXPECT_EQ(swap_all(*k.st, &k.model), 0u);
  ASSERT_NO_FATAL_FAILURE(expect_holds_here_and_reopened(std::move(k.st), k.model));
}

// A swap stops (as if its client died) at each of its steps under the
// lock, its slot not written: the key keeps its value; the next call on
// the segment waits a lease and takes the lock over (a roll-back, which is
// the swap's own unlock); the segment's appends, merges, splits and swaps
// go on; the index checks out and reopens.
class SepHashStoppedSwapTest : public SepHashLockTest,
                               public ::testing::WithParamInterface<engine::sephash::LockStep> {};

TEST_P(SepHashStoppedSwapTest, TheKeyKeepsItsValueAndTheSegmentIsTakenOver) {
  auto st = create(options());
  ASSERT_NE(st, nullptr);
  Model model;
  ASSERT_NO_FATAL_FAILURE(load(*st, 0, 600, &model));
  const std::string key = key_of(17);
  std::atomic<bool> fired{false};
  const LockStep step = GetParam();
  engine::sephash::testing::set_lock_hook(
      [&](LockStep at) { return at == step && !fired.exchange(true); });
  const Status s = st->compare_and_swap(key, std::string_view(model[key]), std::string_view("new"));
  engine::sephash::testing::set_lock_hook(nullptr);
  ASSERT_TRUE(fired.load());
  ASSERT_TRUE(s.is_io_error()) << s.to_string();
  const auto t0 = std::chrono::steady_clock::now();
  std::string got;
  ASSERT_TRUE(st->get(key, &got).ok());
  const double waited = ms_since(t0);
  EXPECT_EQ(got, model[key]);
  EXPECT_GE(waited, lease_ms() * 0.9) << "the call did not wait for the lease";
  EXPECT_LT(waited, lease_ms() + kMarginMs);
  EXPECT_EQ(st->stats().property("sephash.lock_takeovers"), 1u);
  EXPECT_EQ(swap_all(*st, &model), 0u);
  ASSERT_NO_FATAL_FAILURE(load(*st, 600, 3000, &model));
  EXPECT_EQ(swap_all(*st, &model), 0u);
  EXPECT_EQ(st->size(), model.size());
  ASSERT_NO_FATAL_FAILURE(expect_holds_here_and_reopened(std::move(st), model));
}

INSTANTIATE_TEST_SUITE_P(Steps, SepHashStoppedSwapTest,
                         ::testing::Values(engine::sephash::LockStep::kSwapLocked,
                                           engine::sephash::LockStep::kSwapFenced,
                                           engine::sephash::LockStep::kSwapItem));

// An upsert has taken its version and read its snapshot when another
// client swaps the same key (its lock fences the slot the upsert chose).
// The upsert, which began before the swap and returns after it, must
// order after it: its entry lands after the swap's, with a version above
// the swap floor, and the key ends with the upsert's value. (With the
// version of its first pass, the upsert's entry would be shadowed by the
// swap's, which never compared with it.)
TEST_F(SepHashTest, AnAppendBegunBeforeASwapOfItsKeyAndEndedAfterOrdersAfterIt) {
  auto st = create(options());
  ASSERT_NE(st, nullptr);
  for (const bool upsert : {true, false}) {
    ASSERT_TRUE(st->upsert("k", "old").ok());
    bool fired = false;
    Status swapped;
    engine::sephash::testing::set_append_hook([&] {
      if (fired) return;
      fired = true;
      std::thread other([&] {  // another client
        swapped = st->compare_and_swap("k", std::string_view("old"), std::string_view("swapped"));
      });
      other.join();
    });
    const Status s = upsert ? st->upsert("k", "mine") : st->update("k", "mine");
    engine::sephash::testing::set_append_hook(nullptr);
    ASSERT_TRUE(fired);
    ASSERT_TRUE(s.ok()) << s.to_string();
    ASSERT_TRUE(swapped.ok()) << swapped.to_string();
    std::string got;
    ASSERT_TRUE(st->get("k", &got).ok());
    EXPECT_EQ(got, "mine");
  }
  EXPECT_TRUE(st->check().ok());
}

class SepHashLockTcpTest : public SepHashLockTest {
 protected:
  // A lease long enough that half of it (the clients' remote timeout)
  // covers a round trip to a daemon on a loaded machine.
  unsigned lease_ms() const override { return std::max(kLeaseMs, 1000u); }
  void SetUp() override {
    SepHashLockTest::SetUp();
    for (const std::string& n : nodes_) {
      daemons_.push_back(std::make_unique<testing::Daemon>(n, 0));
      ASSERT_NE(daemons_.back()->port(), 0);
    }
  }
  Options options() const override {
    Options o = SepHashLockTest::options();
    o.memnodes = "tcp:127.0.0.1:" + std::to_string(daemons_[0]->port()) + ",tcp:127.0.0.1:" +
                 std::to_string(daemons_[1]->port());
    return o;
  }
  std::vector<std::unique_ptr<testing::Daemon>> daemons_;
};

TEST_F(SepHashLockTcpTest, AHolderKilledWithItsSlotsClearedIsFinished) {
  die_at(LockStep::kMergeSlots);
}
TEST_F(SepHashLockTcpTest, ASplitterKilledAfterItsDirectoryIsFinished) {
  die_at(LockStep::kSplitDirectory);
}

// A holder that is only slow: its hook sleeps past lease/2 (the sleep is
// the thing under test, not a way to order threads). It must give up
// without writing (its call returns Busy), and a later call takes the lock
// over: undone when the holder stalled before its intent, finished after.
class SepHashSlowHolderTest : public SepHashLockTest,
                              public ::testing::WithParamInterface<engine::sephash::LockStep> {};

TEST_P(SepHashSlowHolderTest, AHolderPastHalfItsLeaseStopsAndIsTakenOver) {
  const LockStep step = GetParam();
  auto st = create(options());
  ASSERT_NE(st, nullptr);
  std::atomic<bool> slept{false};
  engine::sephash::testing::set_lock_hook([&](LockStep at) {
    if (at == step && !slept.exchange(true)) {
      std::this_thread::sleep_for(std::chrono::milliseconds(kLeaseMs * 6 / 10));
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
    EXPECT_NE(s.message().find("half its lock lease"), std::string::npos) << s.to_string();
    unacked = key_of(i);
  }
  ASSERT_TRUE(slept);
  ASSERT_FALSE(unacked.empty()) << "the slow holder did not give up";
  engine::sephash::testing::set_lock_hook(nullptr);
  ASSERT_NO_FATAL_FAILURE(expect_recovers(std::move(st), std::move(model), unacked, next));
}

INSTANTIATE_TEST_SUITE_P(Steps, SepHashSlowHolderTest,
                         ::testing::Values(engine::sephash::LockStep::kRead,
                                           engine::sephash::LockStep::kMergeIntent,
                                           engine::sephash::LockStep::kSplitIntent,
                                           engine::sephash::LockStep::kSplitDepth),
                         [](const auto& info) {
                           switch (info.param) {
                             case engine::sephash::LockStep::kRead: return std::string("Read");
                             case engine::sephash::LockStep::kMergeIntent: return std::string("MergeIntent");
                             case engine::sephash::LockStep::kSplitIntent: return std::string("SplitIntent");
                             default: return std::string("SplitDepth");
                           }
                         });

class SepHashTcpTest : public SepHashTest {};

TEST_F(SepHashTcpTest, WrongNodeListsAreRefusedAtAttachOverTcp) {
  expect_wrong_node_lists_refused_over_tcp();
}

// Over tcp, one node is a daemon: killed, calls fail with IOError within
// the timeout (no hang); restarted from its pool file, every completed
// write is there.
TEST_F(SepHashTcpTest, ADeadNodeFailsCallsAndARestartedOneServesThem) {
  expect_dead_node_fails_calls_and_restart_serves_them();
}

// Several client processes on the same memory nodes against their models
// (RemoteEngineTest::run_processes).
class SepHashProcessTest : public SepHashTest {};

TEST_F(SepHashProcessTest, ProcessesOnTwoShmNodes) { run_processes(options(), 2500); }

TEST_F(SepHashProcessTest, ProcessesOnTwoTcpNodesOverLoopback) { run_processes_on_tcp(500); }

// Memory nodes and clients on different hosts, as far as the network can
// tell: the test makes two network namespaces joined by a veth pair, runs
// both memory-node daemons in one and the client processes in the other,
// then checks the nodes' pool files directly (shm) against the models.
class SepHashNetnsTest : public SepHashProcessTest {
 protected:
  void TearDown() override {
    for (const std::string& ns : made_) (void)std::system(("ip netns del " + ns + " 2>/dev/null").c_str());
    SepHashProcessTest::TearDown();
  }
  static bool sh(const std::string& cmd) { return std::system((cmd + " >/dev/null 2>&1").c_str()) == 0; }
  // Runs `body` in a child process that has joined namespace `ns`; its
  // exit status (0: success).
  template <class Body>
  static pid_t in_netns(const std::string& ns, Body body) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      const int fd = ::open(("/var/run/netns/" + ns).c_str(), O_RDONLY);
      if (fd < 0 || ::setns(fd, CLONE_NEWNET) != 0) ::_exit(3);
      ::close(fd);
      ::_exit(body());
    }
    return pid;
  }
  std::vector<std::string> made_;
};

TEST_F(SepHashNetnsTest, ClientsInOneNamespaceAndNodesInAnother) {
  const std::string tag = std::to_string(::getpid());
  const std::string srv = "pmhash-mn-" + tag, cli = "pmhash-cl-" + tag;
  ASSERT_TRUE(sh("ip netns add " + srv)) << "ip netns add (iproute2, root)";
  made_.push_back(srv);
  ASSERT_TRUE(sh("ip netns add " + cli));
  made_.push_back(cli);
  const std::string va = "pmv" + tag.substr(tag.size() > 6 ? tag.size() - 6 : 0) + "a";
  const std::string vb = va.substr(0, va.size() - 1) + "b";
  ASSERT_TRUE(sh("ip link add " + va + " netns " + srv + " type veth peer name " + vb + " netns " + cli));
  ASSERT_TRUE(sh("ip -n " + srv + " addr add 10.77.0.1/24 dev " + va));
  ASSERT_TRUE(sh("ip -n " + cli + " addr add 10.77.0.2/24 dev " + vb));
  for (const std::string& ns : {srv, cli}) ASSERT_TRUE(sh("ip -n " + ns + " link set lo up"));
  ASSERT_TRUE(sh("ip -n " + srv + " link set " + va + " up"));
  ASSERT_TRUE(sh("ip -n " + cli + " link set " + vb + " up"));

  // Nodes reachable beyond loopback need a secret, which the clients share.
  const std::string secret = nodes_[0] + ".secret";
  {
    std::ofstream(secret, std::ios::binary) << std::string(32, 's') << tag;
    ASSERT_EQ(::chmod(secret.c_str(), 0600), 0);
  }
  // The daemons, in the node namespace; each reports its port on a pipe.
  std::vector<pid_t> daemons;
  std::vector<std::uint16_t> ports;
  for (const std::string& pool : nodes_) {
    int fds[2];
    ASSERT_EQ(::pipe(fds), 0);
    daemons.push_back(in_netns(srv, [&] {
      ::close(fds[0]);
      std::unique_ptr<remote::Server> server;
      remote::ServerOptions so;
      so.listen = "10.77.0.1:0";
      so.secret_file = secret;
      const Status s = remote::Server::start(pool, so, &server);
      const std::uint16_t port = s.ok() ? server->port() : 0;
      [[maybe_unused]] const ssize_t n = ::write(fds[1], &port, sizeof(port));
      ::close(fds[1]);
      return s.ok() && server->run().ok() ? 0 : 1;
    }));
    ::close(fds[1]);
    std::uint16_t port = 0;
    EXPECT_EQ(::read(fds[0], &port, sizeof(port)), static_cast<ssize_t>(sizeof(port)));
    ::close(fds[0]);
    ASSERT_NE(port, 0);
    ports.push_back(port);
  }
  Options o = options();
  o.memnodes = "tcp:10.77.0.1:" + std::to_string(ports[0]) + ",tcp:10.77.0.1:" +
               std::to_string(ports[1]);
  o.memnode_secret_file = secret;
  // Not reachable from here (another namespace): a clear error, no hang.
  {
    Options quick = o;
    quick.remote_timeout_ms = 300;
    std::unique_ptr<Store> st;
    const Status s = Store::create("", quick, &st);
    EXPECT_TRUE(s.is_io_error()) << s.to_string();
  }
  constexpr unsigned kSteps = 500;
  const pid_t creator = in_netns(cli, [&] {
    std::unique_ptr<Store> st;
    return Store::create("", o, &st).ok() && st->close().ok() ? 0 : 1;
  });
  int status = 0;
  ASSERT_EQ(::waitpid(creator, &status, 0), creator);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status;
  std::vector<pid_t> clients;
  for (unsigned p = 0; p < kProcs; ++p) {
    clients.push_back(in_netns(cli, [&, p] {
      std::unique_ptr<Store> mine;
      if (!Store::open("", o, &mine).ok()) return 2;
      Model model;
      return run_ops(p, kSteps, &model, mine.get()) && mine->close().ok() ? 0 : 1;
    }));
  }
  for (pid_t pid : clients) {
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status;
  }
  for (pid_t pid : daemons) {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
  }
  // The nodes' pool files hold the index: read it through shm.
  auto st = open(options());
  ASSERT_NE(st, nullptr);
  ASSERT_NO_FATAL_FAILURE(expect_holds(*st, all_models(kSteps)));
}

// ---- the bitmap bit of an append (sephash.h, "Append") ----
// An append's first round trip CASes the key's bitmap word from the word
// its session last saw; the bit counts only when that CAS matched on the
// snapshot's sign. These tests watch what one client thread sends for an
// append to segment 0 (node 0), and read the node before each slot CAS
// is posted (shm verbs run when posted): the bitmap of the entry's sign
// must have the entry's bit by then, whatever the speculation did.
class AppendWatch {
 public:
  struct BitmapCas {
    std::uint64_t at;        // offset in the CurSeg
    std::uint64_t expected;  // the word the CAS expects
    std::uint64_t desired;
    unsigned batch;          // 1 for the first sub-batch that touched the segment
    bool with_snapshot;      // in the sub-batch that READs the segment's header
  };

  explicit AppendWatch(const std::string& node_path) {
    const Status s = remote::Client::connect({"shm:" + node_path}, {}, &checker_);
    EXPECT_TRUE(s.ok()) << s.to_string();
  }
  ~AppendWatch() { remote::testing::set_fate_hook(nullptr); }

  // Watches the calling thread's sub-batches to node 0 from now on.
  // `at_speculation`, if given, runs once on this thread just before the
  // first sub-batch that CASes a bitmap word next to the snapshot's READ
  // is posted: what another client does then, the speculation meets.
  void start(std::function<void()> at_speculation = {}) {
    thread_ = std::this_thread::get_id();
    at_speculation_ = std::move(at_speculation);
    remote::testing::set_fate_hook([this](unsigned node, std::span<const remote::Op> ops) {
      if (node == 0 && std::this_thread::get_id() == thread_ && !checking_) see(ops);
      return remote::Fate::kDeliver;
    });
  }
  void stop() { remote::testing::set_fate_hook(nullptr); }

  // The word of the CurSeg at offset `at` now.
  std::uint64_t word(std::uint64_t at) {
    std::uint64_t w = 0;
    remote::Batch b;
    b.read(0, seg_ + at, &w, 8);
    checking_ = true;
    const Status s = checker_->exec_sync(b);
    checking_ = false;
    EXPECT_TRUE(s.ok()) << s.to_string();
    return w;
  }

  std::vector<BitmapCas> bitmap_cases;
  std::vector<bool> bit_set_at_slot_cas;  // one per slot CAS naming an item
  unsigned batches = 0;                   // sub-batches that touched the segment

 private:
  void see(std::span<const remote::Op> ops) {
    using namespace engine::sephash;
    bool snapshot = false;
    for (const remote::Op& op : ops) {
      if (op.verb == remote::Verb::kRead && op.len == kHeaderBytes) {
        seg_ = op.off;
        snapshot = true;
      }
    }
    if (seg_ == 0) return;
    bool touches = false;
    for (const remote::Op& op : ops) touches |= op.off >= seg_ && op.off < seg_ + kCurSegBytes;
    if (!touches) return;
    ++batches;
    bool speculates = false;
    for (const remote::Op& op : ops) {
      if (op.verb != remote::Verb::kCas) continue;
      const std::uint64_t at = op.off - seg_;
      if (op.off >= seg_ && at >= kBitmapOff && at < kSlotsOff) {
        bitmap_cases.push_back({at, op.arg0, op.arg1, batches, snapshot});
        speculates |= snapshot;
      }
    }
    if (speculates && at_speculation_) {
      std::function<void()> f = std::move(at_speculation_);
      at_speculation_ = nullptr;
      f();
    }
    for (const remote::Op& op : ops) {
      if (op.verb != remote::Verb::kCas || op.off < seg_ + kSlotsOff ||
          op.off >= seg_ + kCurSegBytes || (op.arg1 & kItemMask) == 0) {
        continue;
      }
      const std::uint64_t entry = op.arg1;
      const bool sign = (entry & kSignBit) != 0;
      const unsigned bit = bitmap_bit(slot_fp(entry), slot_fp2(entry));
      const std::uint64_t w = word(kBitmapOff + (sign ? kBitmapBytes : 0) + (bit / 64) * 8);
      bit_set_at_slot_cas.push_back(((w >> (bit % 64)) & 1) != 0);
    }
  }

  std::unique_ptr<remote::Client> checker_;
  std::thread::id thread_;
  std::function<void()> at_speculation_;
  bool checking_ = false;  // the checker's own sub-batches are not watched
  std::uint64_t seg_ = 0;  // the CurSeg the last snapshot READ named
};

// A key's bitmap bit (layout.h), and keys of segment 0 (hash bit 0 clear,
// with options()'s initial depth 1: on node 0).
unsigned bit_of(const std::string& key) {
  const std::uint64_t h = engine::make_key(key).h1;
  return engine::sephash::bitmap_bit(engine::sephash::hash_fp(h), engine::sephash::hash_fp2(h));
}
bool in_segment_0(const std::string& key) { return (engine::make_key(key).h1 & 1) == 0; }
// The first key of segment 0 from key_of(*next) on that `fits`; *next moves past it.
std::string next_key(unsigned* next, const std::function<bool(const std::string&)>& fits) {
  for (;; ++*next) {
    const std::string k = key_of(*next);
    if (in_segment_0(k) && fits(k)) {
      ++*next;
      return k;
    }
  }
}
std::uint64_t bitmap_at(bool sign, unsigned bit) {
  using namespace engine::sephash;
  return kBitmapOff + (sign ? kBitmapBytes : 0) + (bit / 64) * 8;
}

// A session that saw the segment's bitmap word as it is sets the key's bit
// in the first round trip, next to the snapshot: the append takes two
// round trips to the segment, the bit set before the slot CAS.
TEST_F(SepHashTest, AnAppendWithACurrentBitmapWordSetsItsBitInItsFirstRoundTrip) {
  auto st = create(options());
  ASSERT_NE(st, nullptr);
  unsigned next = 0;
  const std::string first = next_key(&next, [](const std::string&) { return true; });
  const std::string key =
      next_key(&next, [&](const std::string& k) { return bit_of(k) / 64 != bit_of(first) / 64; });
  ASSERT_TRUE(st->insert(first, "1").ok());  // this session now knows the header
  AppendWatch watch(nodes_[0]);
  watch.start();
  ASSERT_TRUE(st->insert(key, "2").ok());
  watch.stop();
  // The property: the entry's bit was set when its slot CAS was posted.
  ASSERT_EQ(watch.bit_set_at_slot_cas.size(), 1u);
  EXPECT_TRUE(watch.bit_set_at_slot_cas[0]);
  const unsigned bit = bit_of(key);
  ASSERT_EQ(watch.bitmap_cases.size(), 1u);
  const AppendWatch::BitmapCas& c = watch.bitmap_cases[0];
  EXPECT_TRUE(c.with_snapshot);
  EXPECT_EQ(c.at, bitmap_at(true, bit));  // a new CurSeg's sign is 1
  EXPECT_EQ(c.desired, c.expected | (std::uint64_t{1} << (bit % 64)));
  EXPECT_EQ(watch.batches, 2u);  // the snapshot with the bit, then the slot
  std::string got;
  ASSERT_TRUE(st->get(key, &got).ok());
  EXPECT_EQ(got, "2");
  EXPECT_TRUE(st->check().ok());
}

// Another client sets another bit of the same bitmap word between what
// this session saw and its speculative CAS: the CAS fails, and the append
// sets its bit in a round trip of its own before the slot CAS.
TEST_F(SepHashTest, AnAppendWhoseSpeculativeBitmapCasFailedSetsTheBitBeforeItsSlotCas) {
  auto st = create(options());
  ASSERT_NE(st, nullptr);
  unsigned next = 0;
  const std::string first = next_key(&next, [](const std::string&) { return true; });
  const unsigned word = (bit_of(first) / 64 + 1) % 8;
  const std::string key = next_key(&next, [&](const std::string& k) { return bit_of(k) / 64 == word; });
  const std::string other = next_key(&next, [&](const std::string& k) {
    return bit_of(k) / 64 == word && bit_of(k) != bit_of(key);
  });
  ASSERT_TRUE(st->insert(first, "1").ok());
  AppendWatch watch(nodes_[0]);
  watch.start([&] {
    // Another thread, so another session (this thread's is in use).
    std::thread t([&] { EXPECT_TRUE(st->insert(other, "3").ok()); });
    t.join();
  });
  ASSERT_TRUE(st->insert(key, "2").ok());
  watch.stop();
  const std::uint64_t mine = std::uint64_t{1} << (bit_of(key) % 64);
  const std::uint64_t theirs = std::uint64_t{1} << (bit_of(other) % 64);
  ASSERT_EQ(watch.bit_set_at_slot_cas.size(), 1u);
  EXPECT_TRUE(watch.bit_set_at_slot_cas[0]);
  ASSERT_EQ(watch.bitmap_cases.size(), 2u);
  const AppendWatch::BitmapCas& spec = watch.bitmap_cases[0];
  const AppendWatch::BitmapCas& own = watch.bitmap_cases[1];
  EXPECT_TRUE(spec.with_snapshot);
  EXPECT_EQ(spec.expected & theirs, 0u);  // stale: it failed
  EXPECT_FALSE(own.with_snapshot);        // a round trip of its own
  EXPECT_EQ(own.at, spec.at);
  EXPECT_EQ(own.expected & (theirs | mine), theirs);
  EXPECT_EQ(own.desired, own.expected | mine);
  EXPECT_EQ(watch.word(spec.at) & (mine | theirs), mine | theirs);
  ASSERT_NO_FATAL_FAILURE(expect_holds(*st, Model{{first, "1"}, {key, "2"}, {other, "3"}}));
}

// Another client merges the segment between what this session saw and
// its speculative CAS: the sign flipped, and the CAS, made on the old
// sign's bitmap whose word has not changed, matches there. That bit is
// in no state the append can land in; the append sets its bit in the new
// sign's bitmap before its slot CAS. (An upsert: an insert would first
// load the new MainSeg's prefix table and take a new snapshot, whose
// speculation is made on the new sign.)
TEST_F(SepHashTest, AnAppendWhoseSpeculationHitTheOldSignSetsTheBitOfTheNewState) {
  auto st = create(options());
  ASSERT_NE(st, nullptr);
  unsigned next = 0;
  const std::string first = next_key(&next, [](const std::string&) { return true; });
  const unsigned word = (bit_of(first) / 64 + 1) % 8;
  const std::string key = next_key(&next, [&](const std::string& k) { return bit_of(k) / 64 == word; });
  // Enough keys to fill the CurSeg and merge it once (not twice, which
  // would flip the sign back), none of them in the key's bitmap word.
  std::vector<std::string> fill;
  while (fill.size() < engine::sephash::kCurSlots + engine::sephash::kCurSlots / 2) {
    fill.push_back(next_key(&next, [&](const std::string& k) { return bit_of(k) / 64 != word; }));
  }
  ASSERT_TRUE(st->insert(first, "1").ok());
  const std::uint64_t merges = st->stats().property("sephash.merges");
  AppendWatch watch(nodes_[0]);
  watch.start([&] {
    std::thread t([&] {
      for (const std::string& k : fill) EXPECT_TRUE(st->insert(k, "f").ok());
    });
    t.join();
  });
  ASSERT_TRUE(st->upsert(key, "2").ok());
  watch.stop();
  EXPECT_EQ(st->stats().property("sephash.merges"), merges + 1);
  ASSERT_EQ(watch.bit_set_at_slot_cas.size(), 1u);
  EXPECT_TRUE(watch.bit_set_at_slot_cas[0]);
  const unsigned bit = bit_of(key);
  const std::uint64_t mine = std::uint64_t{1} << (bit % 64);
  ASSERT_EQ(watch.bitmap_cases.size(), 2u);
  const AppendWatch::BitmapCas& spec = watch.bitmap_cases[0];
  const AppendWatch::BitmapCas& own = watch.bitmap_cases[1];
  EXPECT_TRUE(spec.with_snapshot);
  EXPECT_EQ(spec.at, bitmap_at(true, bit));  // the sign this session saw
  EXPECT_EQ(own.at, bitmap_at(false, bit));  // the merge's sign
  EXPECT_FALSE(own.with_snapshot);           // in a round trip of its own
  EXPECT_NE(watch.word(spec.at) & mine, 0u);  // the speculative CAS matched there
  Model model{{first, "1"}, {key, "2"}};
  for (const std::string& k : fill) model.emplace(k, "f");
  ASSERT_NO_FATAL_FAILURE(expect_holds(*st, model));
}

// ---- scan (sephash.h, "Scan") ----
// Every merge and split is parked at each of its steps (the hook runs on
// the writing thread, the segment locked) while another client makes one
// call of a long scan: a call that does not touch the locked segment ends
// while parked; one that does waits for the lock (readers wait on merges)
// and reads the segment once it is published, so the parks stay short
// (20 ms, far within half the lease) and a call still waiting is left to
// finish across the next steps. The writer inserts new keys and updates
// old ones, so merges drop superseded versions and move entries from the
// CurSeg into the MainSeg: every key present when a scan began is passed.
TEST_F(SepHashTest, ScanCallsAcrossEachMergeAndSplitStepPassEveryKey) {
  using engine::sephash::LockStep;
  Options o = options();
  o.set("sephash.lock_lease_ms", 20000);
  o.remote_timeout_ms = 10000;
  auto st = create(o);
  ASSERT_NE(st, nullptr);
  auto other = open(o);
  ASSERT_NE(other, nullptr);
  Model model;
  ScanAcross across;
  std::atomic<bool> busy{false};
  std::thread scanner;
  std::vector<unsigned> parked(static_cast<unsigned>(LockStep::kSwapItem) + 1, 0);
  unsigned ended_while_parked = 0;
  engine::sephash::testing::set_lock_hook([&](LockStep step) {
    if (step >= LockStep::kSwapLocked) return false;
    ++parked[static_cast<unsigned>(step)];
    if (busy.load(std::memory_order_acquire)) return false;  // the last call still waits
    if (scanner.joinable()) scanner.join();
    Model start = across.running ? Model{} : model;
    busy.store(true);
    scanner = std::thread([&, start = std::move(start)] {
      across.step(*other, start);
      busy.store(false, std::memory_order_release);
    });
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(20);
    while (busy.load(std::memory_order_acquire) && std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    if (!busy.load(std::memory_order_acquire)) ++ended_while_parked;
    return false;
  });
  ASSERT_NO_FATAL_FAILURE(load(*st, 0, 1200, &model));
  for (unsigned i = 1200; i < 2400; ++i) {
    ASSERT_TRUE(st->insert(key_of(i), value_of(i, 0)).ok());
    model.emplace(key_of(i), value_of(i, 0));
    const unsigned old = i - 1200;
    ASSERT_TRUE(st->update(key_of(old), value_of(old, 1)).ok());
    model[key_of(old)] = value_of(old, 1);
  }
  engine::sephash::testing::set_lock_hook(nullptr);
  if (scanner.joinable()) scanner.join();
  while (across.running) across.step(*other, model);  // the last scan, to its end
  EXPECT_EQ(across.misses, 0u);
  // How many scans end across the steps depends on the machine's speed
  // (calls that meet a locked segment wait for it); at least one must.
  EXPECT_GE(across.ended, 1u);
  EXPECT_GE(ended_while_parked, 1u);
  for (LockStep step : {LockStep::kLocked, LockStep::kRead, LockStep::kMergePublish,
                        LockStep::kMergeIntent, LockStep::kMergeSlots, LockStep::kSplitFirst,
                        LockStep::kSplitIntent, LockStep::kSplitDirectory, LockStep::kSplitSlots}) {
    EXPECT_GT(parked[static_cast<unsigned>(step)], 2u) << static_cast<unsigned>(step);
  }
  // Without writes, a whole scan passes each key exactly once.
  Passes passes;
  full_scan(*other, 9, &passes);
  EXPECT_EQ(missed(model, passes, /*at_least=*/false), 0u);
  EXPECT_EQ(passes.size(), model.size());
}

// A scan from a cursor inside a segment's range, with inserts between its
// calls that merge and split the segments ahead of it: from the cursor on,
// each key loaded before is passed exactly once, none below it.
TEST_F(SepHashTest, AScanFromInsideASegmentThatMergesAndSplitsPassesWhatFollows) {
  auto st = create(options());
  ASSERT_NE(st, nullptr);
  Model model;
  ASSERT_NO_FATAL_FAILURE(load(*st, 0, 600, &model));
  const std::uint64_t splits = st->stats().property("sephash.splits");
  const auto position = [](const std::string& k) {
    return engine::reverse_bits(engine::make_key(k).h1);
  };
  ASSERT_NO_FATAL_FAILURE(
      expect_scan_from_inside_a_part(*st, model, 10000, 60, 0x1555555555555555ull, position));
  ASSERT_NO_FATAL_FAILURE(
      expect_scan_from_inside_a_part(*st, model, 100000, 60, 0x9999999999999999ull, position));
  EXPECT_GT(st->stats().property("sephash.splits"), splits + 2);
}

// Two clients: one scans (whole scans, one after another) while the other
// inserts enough to merge and split every segment several times, updates
// the stable keys and removes others: every stable key is passed by every
// scan.
TEST_F(SepHashTest, AClientScansWhileAnotherMergesAndSplits) {
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
      EXPECT_TRUE(st->update(key_of(i % 800), value_of(i % 800, i)).ok());
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
