// Unit tests of the pmeh engine (src/engine/pmeh/pmeh.h,
// docs/design/pmeh.md §13.1): slots, delegation to owner threads,
// optimistic reads, iteration, clean and unclean reopen, multi-split,
// directory growth and the lazy per-zone fill, check().
#include <dirent.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <chrono>
#include <deque>
#include <functional>
#include <random>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "crash/persistence_sim.h"
#include "engine/hash.h"
#include "engine/index.h"
#include "engine/pmeh/layout.h"
#include "engine/pmeh/pmeh_index.h"
#include "engine/pmeh/pmeh_testing.h"
#include "engine/planted.h"
#include "heap/heap.h"
#include "pool/pool.h"
#include "pmhash/store.h"
#include "scratch_file.h"

namespace pmhash {
namespace {

namespace pm = engine::pmeh;

// Threads of this process whose name starts with "pmeh-owner".
unsigned owner_threads() {
  unsigned n = 0;
  for (const auto& e : std::filesystem::directory_iterator("/proc/self/task")) {
    std::ifstream in(e.path() / "comm");
    std::string name;
    std::getline(in, name);
    if (name.rfind("pmeh-owner", 0) == 0) ++n;
  }
  return n;
}

class PmehStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = testing::scratch_path("pmhash-pmeh") + ".pool";
    ::unlink(path_.c_str());
    options_.engine = "pmeh";
    options_.pool_size = 64u << 20;
    options_.set("pmeh.zone_bits", 4);
    options_.set("pmeh.segment_kib", 16);
    options_.set("pmeh.workers", 2);
  }
  void TearDown() override {
    store_.reset();
    ::unlink(path_.c_str());
    ::unlink((path_ + ".copy").c_str());
  }
  void create() {
    const Status s = Store::create(path_, options_, &store_);
    ASSERT_TRUE(s.ok()) << s.to_string();
  }
  void reopen(const Options& o) {
    ASSERT_TRUE(store_->close().ok());
    store_.reset();
    const Status s = Store::open(path_, o, &store_);
    ASSERT_TRUE(s.ok()) << s.to_string();
  }
  void reopen() {
    Options o = options_;
    o.engine.clear();
    reopen(o);
  }
  static std::string key(int i) { return "key-" + std::to_string(i); }
  // Inline (<= 8 bytes) for i % 3 == 0, an item otherwise.
  static std::string value(int i) {
    return i % 3 == 0 ? "v" + std::to_string(i % 1000) : std::string(10 + i % 40, 'a' + i % 26);
  }
  void expect_check() {
    const Status s = store_->check();
    EXPECT_TRUE(s.ok()) << s.to_string();
  }
  std::string get(const std::string& k) {
    std::string v;
    const Status s = store_->get(k, &v);
    return s.ok() ? v : "<" + s.to_string() + ">";
  }

  std::string path_;
  Options options_;
  std::unique_ptr<Store> store_;
};

TEST_F(PmehStoreTest, EngineIsListedAndCreatedByName) {
  const auto engines = Store::engines();
  EXPECT_NE(std::find(engines.begin(), engines.end(), "pmeh"), engines.end());
  create();
  const Stats st = store_->stats();
  EXPECT_EQ(st.engine, "pmeh");
  EXPECT_EQ(st.property("pmeh.segments"), 16u) << "one segment per zone at create";
  EXPECT_EQ(st.property("pmeh.directories"), 1u) << "one directory";
  EXPECT_EQ(st.slots, 16u * pm::buckets_per_segment(14) * pm::kSlotsPerBucket);
  expect_check();
}

TEST_F(PmehStoreTest, BadOptionsAreRefusedWithClearErrors) {
  std::unique_ptr<Store> s;
  auto refused = [&](const Options& o, const std::string& words) {
    const Status st = Store::create(path_, o, &s);
    EXPECT_TRUE(st.is_invalid_argument()) << st.to_string();
    EXPECT_NE(st.message().find(words), std::string::npos) << st.message();
  };
  Options o = options_;
  o.set("pmeh.zone_bits", 9);
  refused(o, "pmeh.zone_bits must be 0..8");
  o = options_;
  o.set("pmeh.segment_kib", 12);
  refused(o, "pmeh.segment_kib must be one of 4, 8, 16, 32, 64");
  o = options_;
  o.set("pmeh.segment_kib", 128);
  refused(o, "pmeh.segment_kib must be one of 4, 8, 16, 32, 64");
  o = options_;
  o.set("pmeh.workers", 65);
  refused(o, "pmeh.workers must be 0..64");
  o = options_;
  o.set("pmeh.split_bits", 0);
  refused(o, "pmeh.split_bits must be 1..3");
  o = options_;
  o.set("pmeh.split_bits", 4);
  refused(o, "pmeh.split_bits must be 1..3");
  o = options_;
  o.set("pmeh.split_step", 256);
  refused(o, "pmeh.split_step must be 0..255");
  o = options_;
  o.set("pmeh.write_mode", 3);
  refused(o, "pmeh.write_mode must be 0..2");
  o = options_;
  o.durability = Durability::kEpoch;
  refused(o, "durability strict");
  EXPECT_NE(::access(path_.c_str(), F_OK), 0) << "no file left behind";
}

TEST_F(PmehStoreTest, InsertGetAndRemoveInlineAndPointerPairs) {
  create();
  ASSERT_TRUE(store_->insert("k", "v").ok());                        // inline
  ASSERT_TRUE(store_->insert("a-long-key", "a-long-value").ok());    // item
  ASSERT_TRUE(store_->insert("12345678", "87654321").ok());          // inline, 8 + 8
  ASSERT_TRUE(store_->insert("", "").ok());                          // inline, empty
  EXPECT_TRUE(store_->insert("k", "w").is_already_exists());
  EXPECT_TRUE(store_->insert("a-long-key", "x").is_already_exists());
  EXPECT_EQ(get("k"), "v");
  EXPECT_EQ(get("a-long-key"), "a-long-value");
  EXPECT_EQ(get("12345678"), "87654321");
  EXPECT_EQ(get(""), "");
  EXPECT_EQ(get("missing"), "<" + Status::NotFound().to_string() + ">");
  EXPECT_EQ(store_->size(), 4u);
  expect_check();
  ASSERT_TRUE(store_->remove("k").ok());
  ASSERT_TRUE(store_->remove("a-long-key").ok());
  EXPECT_TRUE(store_->remove("k").is_not_found());
  EXPECT_TRUE(store_->remove("a-long-key").is_not_found());
  std::string v;
  EXPECT_TRUE(store_->get("a-long-key", &v).is_not_found());
  EXPECT_EQ(store_->size(), 2u);
  expect_check();  // the removed item is freed, not leaked
  ASSERT_TRUE(store_->insert("k", "again").ok());
  EXPECT_EQ(get("k"), "again");
  expect_check();
}

TEST_F(PmehStoreTest, UpdateEveryFormKeepsTheKeyAndFreesOldItems) {
  create();
  ASSERT_TRUE(store_->insert("key", "1234").ok());
  ASSERT_TRUE(store_->update("key", "abcd").ok());  // (a) inline, same length
  EXPECT_EQ(get("key"), "abcd");
  ASSERT_TRUE(store_->update("key", "ab").ok());  // (c) inline, other length
  EXPECT_EQ(get("key"), "ab");
  ASSERT_TRUE(store_->update("key", "a value longer than eight").ok());  // (c) to pointer
  EXPECT_EQ(get("key"), "a value longer than eight");
  ASSERT_TRUE(store_->update("key", "another long value").ok());  // (b) pointer to pointer
  EXPECT_EQ(get("key"), "another long value");
  ASSERT_TRUE(store_->update("key", "short").ok());  // (c) back inline
  EXPECT_EQ(get("key"), "short");
  EXPECT_TRUE(store_->update("nokey", "x").is_not_found());
  EXPECT_EQ(store_->size(), 1u);
  expect_check();  // every replaced item freed; op logs empty
}

TEST_F(PmehStoreTest, UpsertInsertsThenUpdates) {
  create();
  ASSERT_TRUE(store_->upsert("u", "1").ok());
  EXPECT_EQ(get("u"), "1");
  ASSERT_TRUE(store_->upsert("u", "a value that needs an item").ok());
  EXPECT_EQ(get("u"), "a value that needs an item");
  ASSERT_TRUE(store_->upsert("a key that needs an item", "v").ok());
  ASSERT_TRUE(store_->upsert("a key that needs an item", "w").ok());
  EXPECT_EQ(get("a key that needs an item"), "w");
  EXPECT_EQ(store_->size(), 2u);
  expect_check();
}

TEST_F(PmehStoreTest, ManyKeysWithUpdatesRemovesAndReopen) {
  create();
  const int n = 3000;
  for (int i = 0; i < n; ++i) ASSERT_TRUE(store_->insert(key(i), value(i)).ok()) << i;
  for (int i = 0; i < n; i += 2) ASSERT_TRUE(store_->update(key(i), value(i + 1)).ok()) << i;
  for (int i = 0; i < n; i += 5) ASSERT_TRUE(store_->remove(key(i)).ok()) << i;
  expect_check();
  auto expected = [&](int i) { return i % 2 == 0 ? value(i + 1) : value(i); };
  reopen();
  EXPECT_TRUE(store_->stats().clean_shutdown);
  EXPECT_EQ(store_->size(), static_cast<std::uint64_t>(n - n / 5));
  for (int i = 0; i < n; ++i) {
    std::string v;
    const Status s = store_->get(key(i), &v);
    if (i % 5 == 0) {
      EXPECT_TRUE(s.is_not_found()) << i;
    } else {
      ASSERT_TRUE(s.ok()) << i << ": " << s.to_string();
      EXPECT_EQ(v, expected(i)) << i;
    }
  }
  expect_check();
}

TEST_F(PmehStoreTest, OpenWithOtherWorkerCountKeepsEveryKey) {
  create();
  for (int i = 0; i < 500; ++i) ASSERT_TRUE(store_->insert(key(i), value(i)).ok());
  Options o = options_;
  o.engine.clear();
  o.set("pmeh.workers", 1);
  reopen(o);
  EXPECT_EQ(owner_threads(), 1u);
  for (int i = 0; i < 500; ++i) ASSERT_EQ(get(key(i)), value(i)) << i;
  o.set("pmeh.workers", 3);
  reopen(o);
  EXPECT_EQ(owner_threads(), 3u);
  for (int i = 500; i < 1000; ++i) ASSERT_TRUE(store_->insert(key(i), value(i)).ok());
  for (int i = 0; i < 1000; ++i) ASSERT_EQ(get(key(i)), value(i)) << i;
  expect_check();
}

TEST_F(PmehStoreTest, OwnersStartAndStopWithTheStore) {
  ASSERT_EQ(owner_threads(), 0u);
  create();
  EXPECT_EQ(owner_threads(), 2u);
  ASSERT_TRUE(store_->close().ok());
  EXPECT_EQ(owner_threads(), 0u);
  store_.reset();
  Options o = options_;
  o.engine.clear();
  ASSERT_TRUE(Store::open(path_, o, &store_).ok());
  EXPECT_EQ(owner_threads(), 2u);
  store_.reset();  // destroying the store closes it
  EXPECT_EQ(owner_threads(), 0u);
}

TEST_F(PmehStoreTest, UncleanReopenRecountsAndFreesNothingLive) {
  create();
  const int n = 1200;
  for (int i = 0; i < n; ++i) ASSERT_TRUE(store_->insert(key(i), value(i)).ok());
  for (int i = 0; i < n; i += 4) ASSERT_TRUE(store_->remove(key(i)).ok());
  // Every write is durable when it returns: a copy of the file now is what
  // a crash now would leave (the pool is not marked clean).
  std::filesystem::copy_file(path_, path_ + ".copy");
  store_.reset();
  Options o = options_;
  o.engine.clear();
  ASSERT_TRUE(Store::open(path_ + ".copy", o, &store_).ok());
  EXPECT_FALSE(store_->stats().clean_shutdown);
  EXPECT_EQ(store_->size(), static_cast<std::uint64_t>(n - n / 4));
  for (int i = 0; i < n; ++i) {
    if (i % 4 == 0) {
      std::string v;
      EXPECT_TRUE(store_->get(key(i), &v).is_not_found()) << i;
    } else {
      ASSERT_EQ(get(key(i)), value(i)) << i;
    }
  }
  expect_check();  // no leak, nothing live freed
}

TEST_F(PmehStoreTest, ForEachVisitsEveryKeyOnce) {
  create();
  const int n = 2000;
  std::map<std::string, std::string> want;
  for (int i = 0; i < n; ++i) {
    ASSERT_TRUE(store_->insert(key(i), value(i)).ok());
    want[key(i)] = value(i);
  }
  std::map<std::string, std::string> got;
  unsigned twice = 0;
  ASSERT_TRUE(store_->for_each([&](std::string_view k, std::string_view v) {
                      twice += got.count(std::string(k));
                      got[std::string(k)] = std::string(v);
                      return true;
                    })
                  .ok());
  EXPECT_EQ(twice, 0u);
  EXPECT_EQ(got, want);
  unsigned calls = 0;
  ASSERT_TRUE(store_->for_each([&](std::string_view, std::string_view) { return ++calls < 10; }).ok());
  EXPECT_EQ(calls, 10u) << "stops when fn returns false";
}

// Splits and directory growth between the calls of one scan (each call
// passes 10 keys, then 500 more keys are inserted): every key present from
// the first call on is passed exactly once.
TEST_F(PmehStoreTest, AScanAcrossSplitsAndDirectoryGrowthPassesEveryKeyOnce) {
  create();
  const int n = 3000;
  for (int i = 0; i < n; ++i) ASSERT_TRUE(store_->insert(key(i), value(i)).ok()) << i;
  const std::uint64_t splits = store_->stats().property("pmeh.splits");
  const std::uint64_t installs = store_->stats().property("pmeh.directory_installs");
  std::map<std::string, int> seen;
  std::uint64_t cursor = 0;
  int next_key = n;
  for (int calls = 0;; ++calls) {
    ASSERT_LT(calls, 10 * n) << "no end";
    std::uint64_t next = 0;
    ASSERT_TRUE(store_->scan(cursor, 10, [&](std::string_view k, std::string_view) {
      ++seen[std::string(k)];
    }, &next).ok());
    if (next == 0) break;
    cursor = next;
    for (int j = 0; j < 500; ++j, ++next_key) {
      ASSERT_TRUE(store_->insert(key(next_key), value(next_key)).ok());
    }
  }
  EXPECT_GT(store_->stats().property("pmeh.splits"), splits);
  EXPECT_GT(store_->stats().property("pmeh.directory_installs"), installs);
  for (int i = 0; i < n; ++i) EXPECT_EQ(seen[key(i)], 1) << i;
  for (const auto& [k, times] : seen) EXPECT_EQ(times, 1) << k;
}

TEST_F(PmehStoreTest, SplitThatCannotAllocateReturnsNoSpaceAndKeepsEverything) {
  // A small pool of 64 KiB segments and inline pairs only: the first
  // allocation refused is a split's (a directory's or a child's), and a
  // split refused part-way frees the children it had.
  options_.pool_size = 4u << 20;
  options_.set("pmeh.zone_bits", 0);
  options_.set("pmeh.segment_kib", 64);
  create();
  int inserted = 0;
  Status s;
  auto small_key = [](int i) { return "k" + std::to_string(i); };
  auto small_value = [](int i) { return "v" + std::to_string(i % 100); };
  for (int i = 0; i < 1000000; ++i) {
    s = store_->insert(small_key(i), small_value(i));
    if (!s.ok()) break;
    ++inserted;
  }
  ASSERT_TRUE(s.is_no_space()) << s.to_string();
  EXPECT_NE(s.message().find("pool"), std::string::npos) << s.message();
  EXPECT_GT(store_->stats().property("pmeh.splits"), 0u);
  EXPECT_EQ(store_->size(), static_cast<std::uint64_t>(inserted));
  for (int i = 0; i < inserted; ++i) ASSERT_EQ(get(small_key(i)), small_value(i)) << i;
  std::string v;
  EXPECT_TRUE(store_->get(small_key(inserted), &v).is_not_found());
  expect_check();  // no child of the refused split is left allocated
  reopen();
  EXPECT_EQ(store_->size(), static_cast<std::uint64_t>(inserted));
  expect_check();
}

TEST_F(PmehStoreTest, WritesAreDelegatedAndReadsRunOnTheCaller) {
  options_.set("pmeh.write_mode", pm::kWriteDelegated);
  create();
  for (int i = 0; i < 100; ++i) ASSERT_TRUE(store_->insert(key(i), value(i)).ok());
  for (int i = 0; i < 100; ++i) ASSERT_EQ(get(key(i)), value(i));
  Stats st = store_->stats();
  EXPECT_EQ(st.property("pmeh.delegated_ops"), 100u) << "the 100 inserts; no read";
  ASSERT_TRUE(store_->close().ok());
  store_.reset();
  Options o = options_;
  o.engine.clear();
  o.set("pmeh.delegate_reads", true);
  ASSERT_TRUE(Store::open(path_, o, &store_).ok());
  for (int i = 0; i < 100; ++i) ASSERT_EQ(get(key(i)), value(i));
  st = store_->stats();
  EXPECT_EQ(st.property("pmeh.delegated_ops"), 100u) << "the 100 reads";
}

// Many callers, few owners: each caller's result is its own.
void run_callers(Store* store, unsigned callers, int per_caller) {
  std::atomic<unsigned> wrong{0};
  std::vector<std::thread> threads;
  for (unsigned t = 0; t < callers; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < per_caller; ++i) {
        const std::string k = "c" + std::to_string(t) + "-" + std::to_string(i);
        const std::string v = i % 2 == 0 ? std::to_string(t) : "value of caller " + std::to_string(t);
        if (!store->insert(k, v).ok()) ++wrong;
        if (!store->insert(k, v).is_already_exists()) ++wrong;
        std::string got;
        if (!store->get(k, &got).ok() || got != v) ++wrong;
        if (i % 3 == 0 && !store->remove(k).ok()) ++wrong;
        if (i % 3 == 0 && !store->remove(k).is_not_found()) ++wrong;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(wrong.load(), 0u);
}

TEST_F(PmehStoreTest, EachCallerGetsItsOwnResult) {
  options_.set("pmeh.workers", 1);
  create();
  const unsigned callers = 32;
  const int per = 150;
  run_callers(store_.get(), callers, per);
  EXPECT_EQ(store_->size(), callers * static_cast<std::uint64_t>(per - (per + 2) / 3));
  expect_check();
}

TEST_F(PmehStoreTest, MoreCallersThanOwnersAllComplete) {
  options_.set("pmeh.workers", 2);
  create();
  const unsigned callers = 200;
  const int per = 12;
  run_callers(store_.get(), callers, per);
  EXPECT_EQ(store_->size(), callers * static_cast<std::uint64_t>(per - (per + 2) / 3));
  expect_check();
}

// Write mode auto (pmeh.h, "Write mode"): the writes stay delegated while
// the owners and the callers leave a hardware thread spare, and every zone
// goes direct for good once they do not. W = the hardware threads and one
// caller never leave one; W = 1 with one caller does from 3 hardware
// threads on.
TEST_F(PmehStoreTest, AutoWriteModeGoesDirectWhenOwnersAndCallersFillTheCores) {
  const unsigned hw = std::max(1u, std::thread::hardware_concurrency());
  for (const unsigned workers : {std::min(hw, pm::kMaxWorkers), 1u}) {
    SCOPED_TRACE("workers " + std::to_string(workers));
    const bool direct = workers + 1 >= hw;
    options_.set("pmeh.workers", workers);
    create();
    // The first write counts this thread; with direct due, it asks every
    // owner to switch its zones, and is itself delegated or direct
    // depending on whether its zone's owner switched first.
    ASSERT_TRUE(store_->insert(key(0), value(0)).ok());
    if (direct) {
      // Polls the owners' switch (no timing: each owner applies its
      // requests at its next loop round).
      while (store_->stats().property("pmeh.shared_zones") < 16) std::this_thread::yield();
    }
    const Stats before = store_->stats();
    for (int i = 1; i < 200; ++i) ASSERT_TRUE(store_->insert(key(i), value(i)).ok());
    const Stats after = store_->stats();
    EXPECT_EQ(after.property("pmeh.shared_zones"), direct ? 16u : 0u);
    // No split at 200 keys in 16 segments of 16 KiB: with every zone
    // SHARED, no write needs an owner.
    EXPECT_EQ(after.property("pmeh.splits"), 0u);
    EXPECT_EQ(after.property("pmeh.direct_ops") - before.property("pmeh.direct_ops"), direct ? 199u : 0u);
    EXPECT_EQ(after.property("pmeh.delegated_ops") - before.property("pmeh.delegated_ops"), direct ? 0u : 199u);
    for (int i = 0; i < 200; ++i) ASSERT_EQ(get(key(i)), value(i)) << i;
    expect_check();
    store_.reset();
    ::unlink(path_.c_str());
  }
  // Forced: delegated stays delegated, direct starts direct.
  options_.set("pmeh.workers", std::min(hw, pm::kMaxWorkers));
  options_.set("pmeh.write_mode", pm::kWriteDelegated);
  create();
  for (int i = 0; i < 50; ++i) ASSERT_TRUE(store_->insert(key(i), value(i)).ok());
  EXPECT_EQ(store_->stats().property("pmeh.direct_ops"), 0u);
  EXPECT_EQ(store_->stats().property("pmeh.shared_zones"), 0u);
  store_.reset();
  ::unlink(path_.c_str());
  options_.set("pmeh.workers", 1);
  options_.set("pmeh.write_mode", pm::kWriteDirect);
  create();
  EXPECT_EQ(store_->stats().property("pmeh.shared_zones"), 16u);
  for (int i = 0; i < 50; ++i) ASSERT_TRUE(store_->insert(key(i), value(i)).ok());
  EXPECT_EQ(store_->stats().property("pmeh.direct_ops"), 50u);
  EXPECT_EQ(store_->stats().property("pmeh.delegated_ops"), 0u);
  expect_check();
}

// Direct writes (every zone SHARED from the start) by several callers into
// one zone of 4 KiB segments: they race on the segments' versions, for the
// same keys too, while the owner splits the segments under them (gradual
// splits, directory growth). Every answer and the end state match a model.
TEST_F(PmehStoreTest, DirectWritersToOneZoneDuringSplitsKeepEveryKey) {
  options_.set("pmeh.zone_bits", 0);
  options_.set("pmeh.segment_kib", 4);
  options_.set("pmeh.workers", 1);
  options_.set("pmeh.write_mode", pm::kWriteDirect);
  create();
  const unsigned writers = 3;
  const int per = 1200;
  std::atomic<unsigned> wrong{0};
  std::vector<std::thread> threads;
  for (unsigned t = 0; t < writers; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < per; ++i) {
        // Own keys: insert, update to the other form, remove every third.
        const std::string k = "d" + std::to_string(t) + "-" + std::to_string(i);
        if (!store_->insert(k, value(i)).ok()) ++wrong;
        if (!store_->update(k, value(i + 1)).ok()) ++wrong;
        std::string got;
        if (!store_->get(k, &got).ok() || got != value(i + 1)) ++wrong;
        if (i % 3 == 0 && !store_->remove(k).ok()) ++wrong;
        // Shared keys: every writer upserts the same 64 keys, in both forms.
        const std::string s = "shared-" + std::to_string(i % 64);
        if (!store_->upsert(s, i % 2 == 0 ? "v" : "a value that needs an item").ok()) ++wrong;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(wrong.load(), 0u);
  const Stats st = store_->stats();
  EXPECT_GT(st.property("pmeh.splits"), 0u) << "the zone split while its callers wrote directly";
  EXPECT_GT(st.property("pmeh.direct_ops"), 0u);
  EXPECT_EQ(st.property("pmeh.shared_zones"), 1u);
  for (unsigned t = 0; t < writers; ++t) {
    for (int i = 0; i < per; ++i) {
      const std::string k = "d" + std::to_string(t) + "-" + std::to_string(i);
      std::string v;
      if (i % 3 == 0) {
        ASSERT_TRUE(store_->get(k, &v).is_not_found()) << k;
      } else {
        ASSERT_EQ(get(k), value(i + 1)) << k;
      }
    }
  }
  for (int i = 0; i < 64; ++i) {
    const std::string v = get("shared-" + std::to_string(i));
    EXPECT_TRUE(v == "v" || v == "a value that needs an item") << i << " " << v;
  }
  EXPECT_EQ(store_->size(), writers * static_cast<std::uint64_t>(per - (per + 2) / 3) + 64);
  expect_check();
  reopen();
  EXPECT_EQ(store_->size(), writers * static_cast<std::uint64_t>(per - (per + 2) / 3) + 64);
  expect_check();
}

TEST_F(PmehStoreTest, ReadersDuringWritesToTheSameSegmentSeeEveryStableKey) {
  // One zone and one segment: every write bumps the version the readers
  // validate against, so reads retry, and must still see each stable key
  // with its value (a torn read would show a wrong or missing value).
  options_.set("pmeh.zone_bits", 0);
  options_.set("pmeh.segment_kib", 64);
  options_.set("pmeh.workers", 1);
  create();
  const int stable = 200;
  for (int i = 0; i < stable; ++i) ASSERT_TRUE(store_->insert(key(i), value(i)).ok());
  std::atomic<bool> stop{false};
  std::atomic<unsigned> wrong{0};
  std::atomic<std::uint64_t> reads{0};
  std::thread writer([&] {
    for (int round = 0; round < 60; ++round) {
      for (int i = 0; i < 40; ++i) {
        const std::string k = "w" + std::to_string(i);
        if (!store_->upsert(k, round % 2 ? "short" : "a value that needs an item").ok()) ++wrong;
      }
      for (int i = 0; i < 40; i += 2) {
        if (!store_->remove("w" + std::to_string(i)).ok()) ++wrong;
      }
    }
    stop = true;
  });
  // The reader reads every stable key at least once, however late the
  // scheduler starts it (a reader started after the writer ended read
  // nothing, and the test had nothing to check).
  std::thread reader([&] {
    for (int i = 0, n = 0; n < stable || !stop.load(); i = (i + 1) % stable, n = std::min(n + 1, stable)) {
      std::string v;
      if (!store_->get(key(i), &v).ok() || v != value(i)) ++wrong;
      ++reads;
    }
  });
  writer.join();
  reader.join();
  EXPECT_EQ(wrong.load(), 0u);
  EXPECT_GE(reads.load(), static_cast<std::uint64_t>(stable));
  EXPECT_EQ(store_->size(), static_cast<std::uint64_t>(stable + 20));
  expect_check();
}


// --- multi-split and directories, through the engine ----------------------------

class PmehEngineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = testing::scratch_path("pmhash-pmeh-engine") + ".pool";
    ::unlink(path_.c_str());
    options_.engine = "pmeh";
    options_.pool_size = 64u << 20;
    options_.set("pmeh.zone_bits", 1);
    options_.set("pmeh.segment_kib", 4);
    options_.set("pmeh.workers", 2);
    // Only operations move buckets of a split in flight (deterministic).
    options_.set("pmeh.idle_steps", false);
  }
  void TearDown() override {
    shut();
    ::unlink(path_.c_str());
  }
  void create() {
    const engine::EngineInfo* info = engine::find_engine("pmeh");
    ASSERT_NE(info, nullptr);
    pool::CreateParams p;
    p.engine = "pmeh";
    p.size = options_.pool_size;
    p.format_heap = heap::Heap::format;
    ASSERT_TRUE(info->encode_params(options_, p.engine_params.data()).ok());
    ASSERT_TRUE(pool::Pool::create(path_, p, &pool_).ok());
    const Status s = attach(info->create);
    ASSERT_TRUE(s.ok()) << s.to_string();
  }
  Status attach(Status (*make)(const engine::Env&, std::unique_ptr<engine::Index>*)) {
    if (Status s = heap::Heap::open(pool_->region(), pool_->heap_offset(), pool_->heap_size(), &heap_);
        !s.ok()) {
      return s;
    }
    engine::Env env{pool_.get(), heap_.get(), options_};
    std::unique_ptr<engine::Index> index;
    if (Status s = make(env, &index); !s.ok()) return s;
    index_ = std::move(index);
    pool_->begin_session();
    return Status::OK();
  }
  // A clean close, as Store::close does it.
  void shut() {
    if (index_) {
      index_->close();
      heap_->drain_all();
      pool_->mark_clean_shutdown();
    }
    index_.reset();
    heap_.reset();
    pool_.reset();
  }
  void reopen() {
    shut();
    ASSERT_TRUE(pool::Pool::open(path_, "pmeh", &pool_).ok());
    const Status s = attach(engine::find_engine("pmeh")->open);
    ASSERT_TRUE(s.ok()) << s.to_string();
  }
  pm::PmehIndex& pmeh() { return static_cast<pm::PmehIndex&>(*index_); }
  Stats stats() {
    Stats st;
    index_->fill_stats(&st);
    return st;
  }
  void expect_check() {
    const Status s = index_->check();
    EXPECT_TRUE(s.ok()) << s.to_string();
  }
  Status insert(const std::string& k, const std::string& v) {
    return index_->insert(engine::make_key(k), v);
  }
  std::string get(const std::string& k) {
    std::string v;
    const Status s = index_->get(engine::make_key(k), &v);
    return s.ok() ? v : "<" + s.to_string() + ">";
  }
  bool absent(const std::string& k) {
    std::string v;
    return index_->get(engine::make_key(k), &v).is_not_found();
  }
  // Keys "s<n>" whose h1 has top bit `zone` (Z = 1), in the order found.
  static std::vector<std::string> zone_keys(unsigned zone, std::size_t n, unsigned from = 0) {
    std::vector<std::string> out;
    for (unsigned i = from; out.size() < n; ++i) {
      std::string k = "s" + std::to_string(i);
      if ((engine::make_key(k).h1 >> 63) == zone) out.push_back(k);
    }
    return out;
  }

  std::string path_;
  Options options_;
  std::unique_ptr<pool::Pool> pool_;
  std::unique_ptr<heap::Heap> heap_;
  std::unique_ptr<engine::Index> index_;
};

class PmehSplitTest : public PmehEngineTest, public ::testing::WithParamInterface<unsigned> {};

TEST_P(PmehSplitTest, FirstSplitMovesEveryKeyToItsChildOnce) {
  const unsigned k = GetParam();
  options_.set("pmeh.split_bits", k);
  options_.set("pmeh.split_step", 0);  // the whole split at once
  create();
  const std::vector<std::string> keys = zone_keys(0, 2000);
  std::size_t n = 0;
  for (; n < keys.size(); ++n) {
    ASSERT_TRUE(insert(keys[n], "v" + std::to_string(n)).ok()) << n;
    if (stats().property("pmeh.splits") > 0) break;
  }
  ASSERT_LT(n, keys.size()) << "no split";
  const Stats st = stats();
  EXPECT_EQ(st.property("pmeh.splits"), 1u);
  // The insert that found its window full split first, then went into a
  // child: the n keys before it were moved.
  EXPECT_EQ(st.property("pmeh.items_moved"), n);
  EXPECT_EQ(st.property("pmeh.bytes_moved"), 18 * n);
  EXPECT_EQ(st.property("pmeh.segments"), 2 + (1u << k) - 1) << "zone 1's segment and the 2^k children";
  EXPECT_EQ(pmeh().segment_depth(engine::make_key(keys[0]).h1), 1 + k);
  EXPECT_EQ(st.items, n + 1);
  for (std::size_t i = 0; i <= n; ++i) ASSERT_EQ(get(keys[i]), "v" + std::to_string(i)) << i;
  expect_check();
  reopen();
  for (std::size_t i = 0; i <= n; ++i) ASSERT_EQ(get(keys[i]), "v" + std::to_string(i)) << i;
  expect_check();
}

INSTANTIATE_TEST_SUITE_P(K, PmehSplitTest, ::testing::Values(1u, 2u, 3u),
                         [](const auto& info) { return std::to_string(1u << info.param) + "Split"; });

TEST_F(PmehEngineTest, DirectoryGrowsOnceAndEachZoneFillsAtItsOwnNextWrite) {
  options_.set("pmeh.split_bits", 3);
  create();
  EXPECT_EQ(pmeh().zone_dir_id(0), 0u);
  EXPECT_EQ(pmeh().zone_dir_id(1), 0u);
  const std::vector<std::string> z0 = zone_keys(0, 2000);
  std::size_t n = 0;
  for (; n < z0.size() && stats().property("pmeh.splits") == 0; ++n) ASSERT_TRUE(insert(z0[n], "x").ok());
  ASSERT_EQ(stats().property("pmeh.splits"), 1u);
  // The split of a depth-1 segment into 8 needs G = 4: one new directory,
  // and only the splitting zone moved into it.
  EXPECT_EQ(stats().property("pmeh.directories"), 2u);
  EXPECT_EQ(stats().property("pmeh.directory_installs"), 1u);
  EXPECT_EQ(pmeh().dir_depth(1), 4u);
  EXPECT_EQ(pmeh().zone_dir_id(0), 1u);
  EXPECT_EQ(pmeh().zone_dir_id(1), 0u) << "zone 1 has not written since";
  // Reads of zone 1 still go through directory 0.
  const std::vector<std::string> z1 = zone_keys(1, 3);
  EXPECT_EQ(get(z1[0]), "<" + Status::NotFound().to_string() + ">");
  EXPECT_EQ(pmeh().zone_dir_id(1), 0u) << "a read does not fill";
  ASSERT_TRUE(insert(z1[0], "y").ok());
  EXPECT_EQ(pmeh().zone_dir_id(1), 1u) << "zone 1's first write filled it";
  EXPECT_EQ(stats().property("pmeh.splits"), 1u) << "without a split";
  EXPECT_EQ(get(z1[0]), "y");
  for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(get(z0[i]), "x") << i;
  expect_check();
  // Every zone left directory 0: zone 1's fill retired it.
  EXPECT_EQ(stats().property("pmeh.directories"), 1u);
  reopen();
  EXPECT_EQ(stats().property("pmeh.directories"), 1u);
  EXPECT_EQ(pmeh().zone_dir_id(0), 1u);
  EXPECT_EQ(pmeh().zone_dir_id(1), 1u);
  EXPECT_EQ(get(z1[0]), "y");
  expect_check();
}

TEST_F(PmehEngineTest, ZoneThatNeverWritesKeepsTheOldDirectoryAcrossReopen) {
  create();
  const std::vector<std::string> z0 = zone_keys(0, 2000);
  for (std::size_t n = 0; n < z0.size() && stats().property("pmeh.splits") == 0; ++n) {
    ASSERT_TRUE(insert(z0[n], "x").ok());
  }
  ASSERT_EQ(pmeh().zone_dir_id(1), 0u);
  reopen();
  EXPECT_EQ(stats().property("pmeh.directories"), 2u) << "zone 1 still lives in directory 0";
  EXPECT_EQ(pmeh().zone_dir_id(0), 1u);
  EXPECT_EQ(pmeh().zone_dir_id(1), 0u);
  expect_check();
}

TEST_F(PmehEngineTest, ManySplitsAndDirectoriesKeepEveryKey) {
  options_.set("pmeh.split_bits", 2);
  create();
  const int n = 20000;
  for (int i = 0; i < n; ++i) {
    const std::string k = "key-" + std::to_string(i);
    ASSERT_TRUE(insert(k, i % 2 ? "v" : "a value longer than eight").ok()) << i;
  }
  const Stats st = stats();
  EXPECT_GT(st.property("pmeh.splits"), 20u);
  EXPECT_GE(st.property("pmeh.directory_installs"), 2u);
  EXPECT_EQ(st.items, static_cast<std::uint64_t>(n));
  for (int i = 0; i < n; ++i) {
    ASSERT_EQ(get("key-" + std::to_string(i)), i % 2 ? "v" : "a value longer than eight") << i;
  }
  expect_check();
  reopen();
  EXPECT_EQ(stats().items, static_cast<std::uint64_t>(n));
  expect_check();
}

TEST_F(PmehEngineTest, ReadersDuringSplitsFindEveryStableKey) {
  options_.set("pmeh.zone_bits", 0);
  options_.set("pmeh.split_bits", 3);
  options_.set("pmeh.workers", 1);  // writer, reader and owner: more would oversubscribe 2 cores
  create();
  const int stable = 300;
  for (int i = 0; i < stable; ++i) ASSERT_TRUE(insert("st" + std::to_string(i), "s").ok());
  std::atomic<bool> stop{false};
  std::atomic<unsigned> wrong{0};
  std::thread writer([&] {
    for (int i = 0; i < 3000; ++i) {
      if (!insert("new" + std::to_string(i), "n").ok()) ++wrong;
    }
    stop = true;
  });
  std::thread reader([&] {
    for (int i = 0; !stop.load(); i = (i + 1) % stable) {
      if (get("st" + std::to_string(i)) != "s") ++wrong;
    }
  });
  writer.join();
  reader.join();
  EXPECT_EQ(wrong.load(), 0u);
  EXPECT_GT(stats().property("pmeh.splits"), 3u);
  expect_check();
}

TEST_F(PmehEngineTest, ForEachAfterSplitsReportsEveryKeyOnce) {
  options_.set("pmeh.split_bits", 3);
  create();
  std::set<std::string> want;
  for (int i = 0; i < 3000; ++i) {
    want.insert("f" + std::to_string(i));
    ASSERT_TRUE(insert("f" + std::to_string(i), "v").ok());
  }
  ASSERT_GT(stats().property("pmeh.splits"), 1u);
  std::set<std::string> got;
  unsigned twice = 0;
  ASSERT_TRUE(index_
                  ->for_each([&](std::string_view k, std::string_view) {
                    twice += !got.insert(std::string(k)).second;
                    return true;
                  })
                  .ok());
  EXPECT_EQ(twice, 0u);
  EXPECT_EQ(got, want);
}

// --- gradual splits (§5.3) ----------------------------------------------------------

// Keys "<tag><n>" whose h1 starts with bit `top` (when top < 2) and whose
// home bucket is `home` (when home < nb), in the order found.
std::vector<std::string> placed_keys(const std::string& tag, unsigned top, unsigned home,
                                     unsigned nb, std::size_t n) {
  std::vector<std::string> out;
  for (unsigned i = 0; out.size() < n; ++i) {
    std::string k = tag + std::to_string(i);
    const std::uint64_t h1 = engine::make_key(k).h1;
    if (top < 2 && (h1 >> 63) != top) continue;
    if (home < nb && pm::home_bucket(h1, nb) != home) continue;
    out.push_back(std::move(k));
  }
  return out;
}

struct Moved {
  std::uint64_t w[4] = {};
  unsigned count() const {
    return static_cast<unsigned>(std::popcount(w[0]) + std::popcount(w[1]) + std::popcount(w[2]) +
                                 std::popcount(w[3]));
  }
  bool has(unsigned j) const { return ((w[j / 64] >> (j % 64)) & 1) != 0; }
  void add(unsigned j) { w[j / 64] |= std::uint64_t{1} << (j % 64); }
  bool covers(const Moved& o) const {
    for (unsigned i = 0; i < 4; ++i) {
      if ((w[i] & o.w[i]) != o.w[i]) return false;
    }
    return true;
  }
};

class PmehGradualTest : public PmehEngineTest {
 protected:
  void SetUp() override {
    PmehEngineTest::SetUp();
    // Gradual splits are an OWNED zone's (a SHARED zone splits at once,
    // pmeh.h "Writes during a split"): delegated, whatever the machine.
    options_.set("pmeh.write_mode", pm::kWriteDelegated);
  }
  Moved moved(unsigned z) {
    Moved m;
    for (unsigned w = 0; w < 4; ++w) m.w[w] = pmeh().moved_word(z, w);
    return m;
  }
  unsigned home(const std::string& k) { return pm::home_bucket(engine::make_key(k).h1, pmeh().nb()); }
};

TEST_F(PmehGradualTest, GradualSplitMovesWindowPlusStepPerWrite) {
  const unsigned b = 2;
  options_.set("pmeh.split_bits", 3);
  options_.set("pmeh.split_step", b);
  create();
  const unsigned nb = pmeh().nb();
  const std::vector<std::string> z0 = zone_keys(0, 3000);
  std::size_t n = 0;
  while (!pmeh().split_in_flight(0)) ASSERT_TRUE(insert(z0[n++], "v").ok()) << n;
  // The start moved only the window of the insert that found it full.
  const std::string& trigger = z0[n - 1];
  Moved want;
  want.add(home(trigger));
  want.add((home(trigger) + 1) % nb);
  EXPECT_EQ(moved(0).count(), 2u);
  EXPECT_TRUE(moved(0).covers(want));
  EXPECT_EQ(stats().property("pmeh.splits"), 0u) << "not complete";
  // A write in another zone does not step zone 0's split.
  const Moved before_other = moved(0);
  ASSERT_TRUE(insert(zone_keys(1, 1)[0], "z1").ok());
  EXPECT_EQ(moved(0).count(), before_other.count());
  unsigned steps = 0;
  while (pmeh().split_in_flight(0)) {
    const Moved before = moved(0);
    Moved with_window = before;
    with_window.add(home(z0[n]));
    with_window.add((home(z0[n]) + 1) % nb);
    ASSERT_TRUE(insert(z0[n], "v").ok());
    ++n;
    ++steps;
    if (!pmeh().split_in_flight(0)) {
      // The last step moved what was left and completed the split.
      EXPECT_GE(with_window.count() + b, nb);
      break;
    }
    const Moved after = moved(0);
    EXPECT_TRUE(after.covers(with_window)) << "the write's window moved first";
    EXPECT_EQ(after.count(), with_window.count() + b) << "plus B from the cursor";
    // Every key so far is found, through the moved bitmap.
    for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(get(z0[i]), "v") << i;
    if (steps == 2) expect_check();  // check() with a split in flight
  }
  EXPECT_GE(steps, (nb - 2) / (b + 2));
  EXPECT_LE(steps, (nb - 2 + b - 1) / b);
  const Stats st = stats();
  EXPECT_EQ(st.property("pmeh.splits"), 1u);
  EXPECT_EQ(st.property("pmeh.eager_split_completions"), 0u);
  for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(get(z0[i]), "v") << i;
  expect_check();
}

TEST_F(PmehGradualTest, StepZeroSplitsAtOnce) {
  options_.set("pmeh.split_bits", 2);
  options_.set("pmeh.split_step", 0);
  create();
  const std::vector<std::string> z0 = zone_keys(0, 3000);
  std::size_t n = 0;
  while (stats().property("pmeh.splits") == 0) {
    ASSERT_TRUE(insert(z0[n++], "v").ok());
    ASSERT_FALSE(pmeh().split_in_flight(0)) << "a split is never left in flight with B = 0";
  }
  // Every key of S was moved by the one insert that split.
  EXPECT_EQ(stats().property("pmeh.items_moved"), n - 1);
  EXPECT_EQ(pmeh().segment_depth(engine::make_key(z0[0]).h1), 3u);
  for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(get(z0[i]), "v") << i;
  expect_check();
}

TEST_F(PmehGradualTest, ReadsDuringGradualSplitSeeEveryKey) {
  options_.set("pmeh.zone_bits", 0);
  options_.set("pmeh.split_bits", 3);
  options_.set("pmeh.split_step", 1);
  options_.set("pmeh.workers", 1);
  create();
  // Until the first split starts.
  std::vector<std::string> keys;
  for (int i = 0; !pmeh().split_in_flight(0); ++i) {
    keys.push_back("r" + std::to_string(i));
    ASSERT_TRUE(insert(keys.back(), "v" + std::to_string(i)).ok());
  }
  const std::size_t stable = keys.size();
  // Every key, from the caller's optimistic reads and from for_each, while
  // the split moves one bucket per write.
  auto all_there = [&](std::size_t upto) {
    for (std::size_t i = 0; i < upto; ++i) {
      if (get(keys[i]) != "v" + std::to_string(i)) return false;
    }
    std::multiset<std::string> seen;
    EXPECT_TRUE(index_->for_each([&](std::string_view k, std::string_view) {
      seen.insert(std::string(k));
      return true;
    }).ok());
    if (seen.size() != upto) return false;
    for (std::size_t i = 0; i < upto; ++i) {
      if (seen.count(keys[i]) != 1) return false;
    }
    return true;
  };
  unsigned checked_in_flight = 0;
  for (int i = static_cast<int>(stable); pmeh().split_in_flight(0); ++i) {
    ASSERT_TRUE(all_there(keys.size())) << "after " << keys.size() << " keys";
    ++checked_in_flight;
    keys.push_back("r" + std::to_string(i));
    ASSERT_TRUE(insert(keys.back(), "v" + std::to_string(i)).ok());
  }
  EXPECT_GE(checked_in_flight, 4u);
  // And while another thread inserts through a second gradual split.
  std::atomic<bool> stop{false};
  std::atomic<unsigned> wrong{0};
  std::thread writer([&] {
    for (int i = 0; i < 1500; ++i) {
      if (!insert("w" + std::to_string(i), "w").ok()) ++wrong;
    }
    stop = true;
  });
  std::uint64_t reads = 0;
  for (std::size_t i = 0; !stop.load(); i = (i + 1) % stable, ++reads) {
    if (get(keys[i]) != "v" + std::to_string(i)) ++wrong;
  }
  writer.join();
  EXPECT_EQ(wrong.load(), 0u);
  EXPECT_GT(reads, 0u);
  EXPECT_GT(stats().property("pmeh.splits"), 2u);
  expect_check();
}

TEST_F(PmehGradualTest, FullChildWindowCompletesParentSplitFirst) {
  options_.set("pmeh.zone_bits", 0);
  options_.set("pmeh.split_bits", 1);
  options_.set("pmeh.split_step", 1);
  options_.set("pmeh.segment_kib", 64);  // 255 buckets: the split stays in flight
  create();
  const unsigned nb = pmeh().nb();
  std::vector<std::string> keys;
  for (int i = 0; !pmeh().split_in_flight(0); ++i) {
    keys.push_back("p" + std::to_string(i));
    ASSERT_TRUE(insert(keys.back(), "v").ok());
  }
  // Fill one window of child 0 while S still splits.
  const std::vector<std::string> fill = placed_keys("c", 0, 7, nb, 2 * pm::kSlotsPerBucket + 1);
  std::size_t used = 0;
  while (stats().property("pmeh.splits") == 0) {
    ASSERT_LT(used, fill.size());
    ASSERT_TRUE(pmeh().split_in_flight(0));
    keys.push_back(fill[used++]);
    ASSERT_TRUE(insert(keys.back(), "v").ok());
  }
  // The insert that found child 0's window full completed S first, then
  // split child 0 (which is in flight now).
  const Stats st = stats();
  EXPECT_EQ(st.property("pmeh.eager_split_completions"), 1u);
  EXPECT_EQ(st.property("pmeh.splits"), 1u);
  EXPECT_TRUE(pmeh().split_in_flight(0));
  EXPECT_EQ(pmeh().segment_depth(engine::make_key(fill[0]).h1), 1u) << "child 0 of S, splitting";
  for (const std::string& k : keys) ASSERT_EQ(get(k), "v") << k;
  expect_check();
}

TEST_F(PmehGradualTest, SecondSplitInZoneCompletesTheFirstEagerly) {
  options_.set("pmeh.zone_bits", 0);
  options_.set("pmeh.split_bits", 1);
  options_.set("pmeh.split_step", 1);
  options_.set("pmeh.segment_kib", 64);
  create();
  const unsigned nb = pmeh().nb();
  std::vector<std::string> keys;
  // A first split, completed: children 0 and 1 are the zone's segments.
  for (int i = 0; stats().property("pmeh.splits") == 0; ++i) {
    keys.push_back("p" + std::to_string(i));
    ASSERT_TRUE(insert(keys.back(), "v").ok());
  }
  ASSERT_FALSE(pmeh().split_in_flight(0));
  // Child 0 splits (and stays in flight: one bucket per write).
  const std::vector<std::string> a = placed_keys("a", 0, 9, nb, 2 * pm::kSlotsPerBucket + 1);
  std::size_t used = 0;
  while (!pmeh().split_in_flight(0)) {
    ASSERT_LT(used, a.size());
    keys.push_back(a[used++]);
    ASSERT_TRUE(insert(keys.back(), "v").ok());
  }
  const std::uint64_t first = pmeh().split_segment(0);
  EXPECT_EQ(stats().property("pmeh.eager_split_completions"), 0u);
  // Child 1 fills a window: its split must first complete child 0's.
  const std::vector<std::string> b = placed_keys("b", 1, 20, nb, 2 * pm::kSlotsPerBucket + 1);
  used = 0;
  while (pmeh().split_segment(0) == first) {
    ASSERT_LT(used, b.size());
    keys.push_back(b[used++]);
    ASSERT_TRUE(insert(keys.back(), "v").ok());
  }
  const Stats st = stats();
  EXPECT_EQ(st.property("pmeh.eager_split_completions"), 1u);
  EXPECT_EQ(st.property("pmeh.splits"), 2u) << "the first split and child 0's";
  EXPECT_TRUE(pmeh().split_in_flight(0)) << "child 1's split";
  EXPECT_EQ(pmeh().segment_depth(engine::make_key(a[0]).h1), 2u);
  for (const std::string& k : keys) ASSERT_EQ(get(k), "v") << k;
  expect_check();
  // A clean reopen resumes child 1's split.
  reopen();
  EXPECT_TRUE(pmeh().split_in_flight(0));
  EXPECT_EQ(pmeh().open_counters().splits_resumed, 1u);
  for (const std::string& k : keys) ASSERT_EQ(get(k), "v") << k;
  expect_check();
}

TEST_F(PmehGradualTest, IdleOwnerStepsTheSplitToCompletion) {
  options_.set("pmeh.split_bits", 3);
  options_.set("pmeh.split_step", 1);
  options_.set("pmeh.workers", 1);
  options_.set("pmeh.idle_steps", true);
  create();
  const std::vector<std::string> z0 = zone_keys(0, 3000);
  std::size_t n = 0;
  while (!pmeh().split_in_flight(0) && stats().property("pmeh.splits") == 0) {
    ASSERT_TRUE(insert(z0[n], "v" + std::to_string(n)).ok());
    ++n;
  }
  // check() pauses the idle steps while it runs (§10).
  expect_check();
  // No more writes: the idle owner moves the rest and completes the split.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (pmeh().split_in_flight(0) && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::yield();
  }
  EXPECT_FALSE(pmeh().split_in_flight(0));
  EXPECT_EQ(stats().property("pmeh.splits"), 1u);
  EXPECT_EQ(stats().property("pmeh.eager_split_completions"), 0u);
  for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(get(z0[i]), "v" + std::to_string(i)) << i;
  expect_check();
}

TEST_F(PmehGradualTest, OldDirectoryFreedWhenEveryZoneFilled) {
  options_.set("pmeh.split_bits", 3);
  options_.set("pmeh.split_step", 0);
  create();
  const auto* root = reinterpret_cast<const pm::Root*>(pool_->root());
  const std::uint64_t dir0 = root->dir_array[0].load();
  ASSERT_NE(dir0, 0u);
  const std::vector<std::string> z0 = zone_keys(0, 2000);
  std::size_t n = 0;
  while (stats().property("pmeh.splits") == 0) ASSERT_TRUE(insert(z0[n++], "x").ok());
  ASSERT_EQ(pmeh().zone_dir_id(0), 1u);
  ASSERT_EQ(pmeh().zone_dir_id(1), 0u);
  EXPECT_EQ(stats().property("pmeh.directories"), 2u) << "zone 1 still uses directory 0";
  EXPECT_EQ(root->dir_array[0].load(), dir0);
  // Zone 1's first write fills it into directory 1: no zone uses 0 any more.
  const std::string k1 = zone_keys(1, 1)[0];
  ASSERT_TRUE(insert(k1, "y").ok());
  EXPECT_EQ(pmeh().zone_dir_id(1), 1u);
  EXPECT_EQ(stats().property("pmeh.directories"), 1u) << "directory 0 retired while the store runs";
  EXPECT_EQ(root->dir_array[0].load(), 0u);
  expect_check();  // empties the retire logs (after a grace period)
  EXPECT_FALSE(heap_->is_allocated(dir0)) << "directory 0's block is free";
  EXPECT_EQ(get(k1), "y");
  for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(get(z0[i]), "x") << i;
  reopen();
  EXPECT_EQ(pmeh().open_counters().directories_freed, 0u) << "nothing left for open to free";
  EXPECT_EQ(stats().property("pmeh.directories"), 1u);
  expect_check();
}

TEST_F(PmehGradualTest, DirectWriteIntoAMovedWindowGoesToTheChildAndAnUnmovedOneToTheOwner) {
  // A gradual split started in an OWNED zone (one bucket per owner write,
  // no idle steps), then the store opened again with every zone SHARED:
  // open resumes the split, and it stays in flight until the owner's next
  // step of it.
  options_.set("pmeh.zone_bits", 0);
  options_.set("pmeh.split_bits", 1);
  options_.set("pmeh.split_step", 1);
  options_.set("pmeh.segment_kib", 64);
  options_.set("pmeh.workers", 1);
  create();
  const unsigned nb = pmeh().nb();
  std::map<std::string, std::string> want;
  std::string trigger;
  for (int i = 0; !pmeh().split_in_flight(0); ++i) {
    trigger = "p" + std::to_string(i);
    ASSERT_TRUE(insert(trigger, "v").ok());
    want[trigger] = "v";
  }
  options_.set("pmeh.write_mode", pm::kWriteDirect);
  reopen();
  ASSERT_EQ(pmeh().open_counters().splits_resumed, 1u);
  ASSERT_TRUE(pmeh().split_in_flight(0));
  ASSERT_EQ(pmeh().zone_mode(0), pm::kShared);
  // The start moved the trigger's window {h, h + 1} only.
  const unsigned h = home(trigger);
  const Moved start = moved(0);
  ASSERT_EQ(start.count(), 2u);
  ASSERT_TRUE(start.has(h) && start.has((h + 1) % nb));
  // Keys whose window is {h, h + 1}: written by the caller, into the child.
  const std::vector<std::string> in = placed_keys("m", 2, h, nb, 3);
  const std::uint64_t delegated = pmeh().delegated_ops();
  const std::uint64_t direct = pmeh().direct_split_writes();
  for (const std::string& k : in) {
    ASSERT_TRUE(insert(k, "d").ok()) << k;
    want[k] = "d";
  }
  ASSERT_TRUE(index_->update(engine::make_key(in[0]), "a value that needs an item").ok());
  want[in[0]] = "a value that needs an item";
  ASSERT_TRUE(index_->update(engine::make_key(in[1]), "u").ok());
  want[in[1]] = "u";
  ASSERT_TRUE(index_->remove(engine::make_key(in[2])).ok());
  want.erase(in[2]);
  EXPECT_TRUE(index_->insert(engine::make_key(in[1]), "again").is_already_exists());
  EXPECT_EQ(pmeh().direct_split_writes(), direct + 7);
  EXPECT_EQ(pmeh().delegated_ops(), delegated) << "no write went to the owner";
  EXPECT_EQ(moved(0).count(), 2u) << "direct writers move no bucket";
  EXPECT_TRUE(pmeh().split_in_flight(0));
  EXPECT_TRUE(absent(in[2]));
  for (const auto& [k, v] : want) ASSERT_EQ(get(k), v) << k;
  // check() places every slot of a moved bucket in its key's child.
  expect_check();
  // A clean reopen resumes the split with the child's writes in it.
  reopen();
  EXPECT_EQ(pmeh().open_counters().splits_resumed, 1u);
  EXPECT_TRUE(pmeh().split_in_flight(0));
  for (const auto& [k, v] : want) ASSERT_EQ(get(k), v) << k;
  // A window with an unmoved bucket ({h + 1, h + 2}) goes to the owner,
  // which completes the split (a SHARED zone's rest moves at once), then
  // writes.
  const std::string out = placed_keys("u", 2, (h + 1) % nb, nb, 1)[0];
  const std::uint64_t delegated_after = pmeh().delegated_ops();
  ASSERT_TRUE(insert(out, "o").ok());
  want[out] = "o";
  EXPECT_EQ(pmeh().delegated_ops(), delegated_after + 1);
  EXPECT_FALSE(pmeh().split_in_flight(0));
  EXPECT_EQ(stats().property("pmeh.splits"), 1u);
  EXPECT_EQ(pmeh().segment_depth(engine::make_key(out).h1), 1u);
  for (const auto& [k, v] : want) ASSERT_EQ(get(k), v) << k;
  EXPECT_TRUE(absent(in[2]));
  EXPECT_EQ(index_->size(), want.size());
  expect_check();
}

// compare_and_swap in an OWNED zone with a gradual split in flight: each
// swap of a key in S is run by the owner, which moves the key's window to
// the child first (as for every write on S) and then compares there, so a
// swap decides on the child's copy, whether it succeeds, conflicts, removes
// or inserts; the split goes on and completes, and the swaps survive it
// and a reopen.
TEST_F(PmehGradualTest, CompareAndSwapDuringAGradualSplitDecidesInTheChild) {
  options_.set("pmeh.split_bits", 1);
  options_.set("pmeh.split_step", 1);
  create();
  const unsigned nb = pmeh().nb();
  const std::vector<std::string> z0 = zone_keys(0, 3000);
  std::map<std::string, std::string> want;
  std::size_t n = 0;
  while (!pmeh().split_in_flight(0)) {
    ASSERT_TRUE(insert(z0[n], "v").ok()) << n;
    want[z0[n++]] = "v";
  }
  // Keys in S whose windows are not moved yet, one per window.
  std::vector<std::string> in_s;
  Moved windows = moved(0);
  for (std::size_t i = 0; i < n && in_s.size() < 3; ++i) {
    const unsigned h = home(z0[i]);
    if (windows.has(h) || windows.has((h + 1) % nb)) continue;
    windows.add(h);
    windows.add((h + 1) % nb);
    in_s.push_back(z0[i]);
  }
  ASSERT_EQ(in_s.size(), 3u);
  auto cas = [&](const std::string& k, std::optional<std::string_view> e,
                 std::optional<std::string_view> d) {
    return index_->compare_and_swap(engine::make_key(k), e, d);
  };
  auto window_moved = [&](const std::string& k) {
    const Moved m = moved(0);
    return m.has(home(k)) && m.has((home(k) + 1) % nb);
  };
  ASSERT_TRUE(cas(in_s[0], std::string_view("v"), std::string_view("a value that needs an item")).ok());
  want[in_s[0]] = "a value that needs an item";
  EXPECT_TRUE(window_moved(in_s[0]));
  ASSERT_TRUE(pmeh().split_in_flight(0));
  EXPECT_TRUE(cas(in_s[1], std::string_view("w"), std::string_view("x")).is_conflict());
  EXPECT_TRUE(cas(in_s[1], std::nullopt, std::string_view("x")).is_conflict());
  EXPECT_TRUE(window_moved(in_s[1])) << "a swap that conflicts steps the split like any write";
  ASSERT_TRUE(cas(in_s[2], std::string_view("v"), std::nullopt).ok());
  want.erase(in_s[2]);
  const std::string fresh = z0[n];
  ASSERT_TRUE(cas(fresh, std::nullopt, std::string_view("new")).ok());
  want[fresh] = "new";
  EXPECT_TRUE(cas(fresh, std::nullopt, std::nullopt).is_conflict());
  ASSERT_TRUE(pmeh().split_in_flight(0));
  EXPECT_EQ(stats().property("pmeh.splits"), 0u);
  for (const auto& [k, v] : want) ASSERT_EQ(get(k), v) << k;
  EXPECT_TRUE(absent(in_s[2]));
  EXPECT_EQ(index_->size(), want.size());
  expect_check();
  // Swaps of the child's copies go on until the split completes.
  for (std::size_t i = 0; pmeh().split_in_flight(0); ++i) {
    ASSERT_LT(i, n);
    if (want.count(z0[i]) == 0 || want[z0[i]] != "v") continue;
    ASSERT_TRUE(cas(z0[i], std::string_view("v"), std::string_view("s")).ok()) << z0[i];
    want[z0[i]] = "s";
  }
  EXPECT_EQ(stats().property("pmeh.splits"), 1u);
  for (const auto& [k, v] : want) ASSERT_EQ(get(k), v) << k;
  EXPECT_EQ(index_->size(), want.size());
  expect_check();
  reopen();
  for (const auto& [k, v] : want) ASSERT_EQ(get(k), v) << k;
  EXPECT_TRUE(absent(in_s[2]));
  EXPECT_EQ(index_->size(), want.size());
  expect_check();
}

// compare_and_swap by a direct writer in a SHARED zone whose split is in
// flight: a key whose window is moved is swapped by the caller itself in
// the child, under S's version (rule 2 of "Writes during a split"), for
// every outcome; a key whose window is not moved goes to the owner, which
// completes the split first.
TEST_F(PmehGradualTest, DirectCompareAndSwapIntoAMovedWindowGoesToTheChild) {
  options_.set("pmeh.zone_bits", 0);
  options_.set("pmeh.split_bits", 1);
  options_.set("pmeh.split_step", 1);
  options_.set("pmeh.segment_kib", 64);
  options_.set("pmeh.workers", 1);
  create();
  const unsigned nb = pmeh().nb();
  std::map<std::string, std::string> want;
  std::string trigger;
  for (int i = 0; !pmeh().split_in_flight(0); ++i) {
    trigger = "p" + std::to_string(i);
    ASSERT_TRUE(insert(trigger, "v").ok());
    want[trigger] = "v";
  }
  options_.set("pmeh.write_mode", pm::kWriteDirect);
  reopen();
  ASSERT_TRUE(pmeh().split_in_flight(0));
  ASSERT_EQ(pmeh().zone_mode(0), pm::kShared);
  const unsigned h = home(trigger);
  ASSERT_EQ(moved(0).count(), 2u);
  auto cas = [&](const std::string& k, std::optional<std::string_view> e,
                 std::optional<std::string_view> d) {
    return index_->compare_and_swap(engine::make_key(k), e, d);
  };
  const std::vector<std::string> in = placed_keys("m", 2, h, nb, 2);
  const std::uint64_t delegated = pmeh().delegated_ops();
  const std::uint64_t direct = pmeh().direct_split_writes();
  ASSERT_TRUE(cas(in[0], std::nullopt, std::string_view("d")).ok());
  ASSERT_TRUE(cas(in[1], std::nullopt, std::string_view("a value that needs an item")).ok());
  EXPECT_TRUE(cas(in[0], std::string_view("e"), std::string_view("x")).is_conflict());
  EXPECT_TRUE(cas(in[1], std::nullopt, std::nullopt).is_conflict());
  ASSERT_TRUE(cas(in[0], std::string_view("d"), std::string_view("a longer value, an item")).ok());
  ASSERT_TRUE(cas(in[1], std::string_view("a value that needs an item"), std::nullopt).ok());
  want[in[0]] = "a longer value, an item";
  EXPECT_EQ(pmeh().direct_split_writes(), direct + 6);
  EXPECT_EQ(pmeh().delegated_ops(), delegated) << "no swap went to the owner";
  EXPECT_EQ(moved(0).count(), 2u) << "direct writers move no bucket";
  EXPECT_TRUE(pmeh().split_in_flight(0));
  EXPECT_TRUE(absent(in[1]));
  for (const auto& [k, v] : want) ASSERT_EQ(get(k), v) << k;
  expect_check();
  // A window with an unmoved bucket: the owner completes the split, then
  // swaps.
  const std::string out = placed_keys("u", 2, (h + 1) % nb, nb, 1)[0];
  ASSERT_TRUE(cas(out, std::nullopt, std::string_view("o")).ok());
  want[out] = "o";
  EXPECT_EQ(pmeh().delegated_ops(), delegated + 1);
  EXPECT_FALSE(pmeh().split_in_flight(0));
  for (const auto& [k, v] : want) ASSERT_EQ(get(k), v) << k;
  EXPECT_EQ(index_->size(), want.size());
  expect_check();
  reopen();
  for (const auto& [k, v] : want) ASSERT_EQ(get(k), v) << k;
  EXPECT_TRUE(absent(in[1]));
  EXPECT_EQ(index_->size(), want.size());
  expect_check();
}

TEST_F(PmehGradualTest, SharedZoneSplitCompletesRightAfterTheWriteThatStartedIt) {
  // B = 1 and no idle steps: in an OWNED zone this split would stay in
  // flight until the zone's next writes. In a SHARED zone the owner moves
  // the rest once it has answered the write that started the split.
  options_.set("pmeh.zone_bits", 0);
  options_.set("pmeh.split_bits", 1);
  options_.set("pmeh.split_step", 1);
  options_.set("pmeh.segment_kib", 64);
  options_.set("pmeh.workers", 1);
  options_.set("pmeh.write_mode", pm::kWriteDirect);
  create();
  std::vector<std::string> keys;
  for (int i = 0; !pmeh().split_in_flight(0) && stats().property("pmeh.splits") == 0; ++i) {
    keys.push_back("p" + std::to_string(i));
    ASSERT_TRUE(insert(keys.back(), "v").ok());
  }
  EXPECT_EQ(pmeh().delegated_ops(), 1u) << "only the write that found its window full";
  // No more writes: the owner completes the split by itself.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (pmeh().split_in_flight(0) && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::yield();
  }
  EXPECT_FALSE(pmeh().split_in_flight(0));
  EXPECT_EQ(stats().property("pmeh.splits"), 1u);
  EXPECT_EQ(stats().property("pmeh.eager_split_completions"), 0u);
  EXPECT_EQ(pmeh().delegated_ops(), 1u);
  EXPECT_EQ(pmeh().segment_depth(engine::make_key(keys[0]).h1), 1u);
  for (const std::string& k : keys) ASSERT_EQ(get(k), "v") << k;
  expect_check();
}

TEST_F(PmehGradualTest, DirectWritersRacingSplitsKeepEveryKey) {
  // Three callers write one SHARED zone directly while its segments split
  // (a split resumed by open in flight first, then splits at once), a
  // fourth reads.
  options_.set("pmeh.zone_bits", 0);
  options_.set("pmeh.split_bits", 1);
  options_.set("pmeh.split_step", 1);
  options_.set("pmeh.segment_kib", 16);
  options_.set("pmeh.workers", 1);
  create();
  int stable = 0;
  for (; !pmeh().split_in_flight(0); ++stable) {
    ASSERT_TRUE(insert("s" + std::to_string(stable), "s").ok());
  }
  options_.set("pmeh.write_mode", pm::kWriteDirect);
  options_.set("pmeh.idle_steps", true);
  reopen();
  ASSERT_EQ(pmeh().open_counters().splits_resumed, 1u);
  const unsigned writers = 3;
  const int per = 2500;
  auto key_of = [](unsigned t, int i) { return "w" + std::to_string(t) + "-" + std::to_string(i); };
  auto final_value = [](int i) { return i % 2 == 0 ? std::string("a value that needs an item") : "v"; };
  std::atomic<unsigned> wrong{0};
  std::atomic<unsigned> done{0};
  std::vector<std::thread> threads;
  for (unsigned t = 0; t < writers; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < per; ++i) {
        const std::string name = key_of(t, i);
        const engine::Key k = engine::make_key(name);  // views `name`
        if (!index_->insert(k, "v").ok()) ++wrong;
        if (i % 2 == 0 && !index_->update(k, final_value(i)).ok()) ++wrong;
        if (i % 5 == 0 && !index_->remove(k).ok()) ++wrong;
      }
      done.fetch_add(1);
    });
  }
  std::uint64_t reads = 0;
  for (int i = 0; done.load() < writers || reads < static_cast<std::uint64_t>(stable);
       i = (i + 1) % stable, ++reads) {
    if (get("s" + std::to_string(i)) != "s") ++wrong;
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(wrong.load(), 0u);
  EXPECT_GT(stats().property("pmeh.splits"), 1u);
  EXPECT_GT(pmeh().direct_ops(), 0u);
  auto verify = [&] {
    for (unsigned t = 0; t < writers; ++t) {
      for (int i = 0; i < per; ++i) {
        if (i % 5 == 0) {
          ASSERT_TRUE(absent(key_of(t, i))) << key_of(t, i);
        } else {
          ASSERT_EQ(get(key_of(t, i)), final_value(i)) << key_of(t, i);
        }
      }
    }
    for (int i = 0; i < stable; ++i) ASSERT_EQ(get("s" + std::to_string(i)), "s") << i;
    EXPECT_EQ(index_->size(), stable + writers * static_cast<std::uint64_t>(per - per / 5));
  };
  verify();
  expect_check();
  reopen();
  verify();
  expect_check();
}

// --- check() (§10 items 1, 2, 4, 8) ------------------------------------------------

// --- scan (pmeh.h, "Scan"): position = h1, whole segment ranges per call -------------

class PmehScanTest : public PmehGradualTest {
 protected:
  void SetUp() override {
    PmehGradualTest::SetUp();
    options_.set("pmeh.split_bits", 1);
    options_.set("pmeh.split_step", 1);
    options_.set("pmeh.segment_kib", 64);  // 255 buckets: a split stays in flight for long
    // Zone 0 takes most writes: the monitor would make it SHARED, where a
    // split moves whole at once.
    options_.set("pmeh.opportunistic", false);
  }
  void TearDown() override {
    pm::testing::set_segment_copy_hook(nullptr);
    PmehGradualTest::TearDown();
  }
  // Scan calls of `count` from `cursor` until the scan ends, or until
  // `max_calls` calls were made (0: no limit, but a failure after 10000);
  // counts each key passed into *seen and checks its value ("v"). Returns
  // the cursor it stopped at (0: the end).
  std::uint64_t scan(std::uint64_t cursor, std::size_t count, std::map<std::string, int>* seen,
                     int max_calls = 0) {
    for (int c = 0; max_calls == 0 ? c < 10000 : c < max_calls; ++c) {
      std::uint64_t next = 0;
      std::size_t passed = 0;
      const Status s = index_->scan(
          cursor, count,
          [&](std::string_view k, std::string_view v) {
            ++passed;
            ++(*seen)[std::string(k)];
            EXPECT_EQ(v, "v") << k;
          },
          &next);
      EXPECT_TRUE(s.ok()) << s.to_string();
      if (!s.ok() || next == 0) return 0;
      EXPECT_GE(passed, count) << "a call that did not end the scan passed too few keys";
      EXPECT_GT(next, cursor) << "the cursor went back";
      cursor = next;
    }
    if (max_calls == 0) ADD_FAILURE() << "the scan did not end in 10000 calls";
    return cursor;
  }
  // Every key of `keys` passed exactly once, and nothing else but keys of
  // `maybe` (each at most once).
  static void expect_exactly(const std::map<std::string, int>& seen, const std::set<std::string>& keys,
                             const std::set<std::string>& maybe, const std::string& when) {
    for (const auto& k : keys) {
      const auto it = seen.find(k);
      ASSERT_TRUE(it != seen.end() && it->second == 1)
          << when << ": key " << k << " passed " << (it == seen.end() ? 0 : it->second) << " times";
    }
    for (const auto& [k, n] : seen) {
      if (keys.count(k) != 0) continue;
      ASSERT_TRUE(maybe.count(k) != 0) << when << ": key " << k << " is not in the index";
      ASSERT_EQ(n, 1) << when << ": key " << k;
    }
  }
  // Inserts zone-0 keys "<tag><n>" (value "v") into *keys until zone 0 has
  // a split in flight.
  void until_split_in_flight(const std::string& tag, std::set<std::string>* keys) {
    for (int i = 0; !pmeh().split_in_flight(0); ++i) {
      ASSERT_LT(i, 100000) << "no split";
      const std::string k = tag + std::to_string(i);
      if ((engine::make_key(k).h1 >> 63) != 0) continue;
      ASSERT_TRUE(insert(k, "v").ok()) << k;
      keys->insert(k);
    }
  }
};

// A gradual split moves one bucket (plus the write's window) per write in
// zone 0; between two writes whole scans pass every key once, removed keys
// (also from moved windows, whose stale copies stay in S) never; and scans
// begun at different steps, each going on by one call per step, also across
// a clean reopen that resumes the split, the completion and the directory
// growth the split needed, pass each key present throughout once.
TEST_F(PmehScanTest, EveryKeyIsPassedOnceAtEachStepOfAGradualSplit) {
  create();
  std::set<std::string> keys;
  until_split_in_flight("c", &keys);
  ASSERT_EQ(stats().property("pmeh.directory_installs"), 1u) << "the split needed G = 2";
  ASSERT_EQ(pmeh().zone_dir_id(1), 0u) << "zone 1 fills at its next write";
  struct Long {
    std::set<std::string> stable;  // present from its first call on
    std::map<std::string, int> seen;
    std::uint64_t cursor = 0;
    bool done = false;
  };
  std::deque<Long> longs;
  std::set<std::string> removed;
  unsigned steps = 0;
  auto scans_hold = [&](const std::string& when) {
    for (std::size_t count : {std::size_t{1}, std::size_t{7}, std::size_t{1} << 20}) {
      std::map<std::string, int> seen;
      scan(0, count, &seen);
      expect_exactly(seen, keys, {}, when + ", count " + std::to_string(count));
    }
    for (Long& l : longs) {
      if (l.done) continue;
      l.cursor = scan(l.cursor, 50, &l.seen, 1);
      l.done = l.cursor == 0;
    }
    if (steps % 8 == 0) {
      longs.emplace_back();
      longs.back().stable = keys;
    }
  };
  for (int i = 0; pmeh().split_in_flight(0); ++i) {
    ASSERT_LT(i, 1000);
    ++steps;
    scans_hold("step " + std::to_string(steps));
    if (steps == 10) {
      reopen();
      ASSERT_TRUE(pmeh().split_in_flight(0)) << "the split resumes";
    }
    if (steps == 20) {
      // Zone 1 moves into the deeper directory.
      for (const std::string& k : zone_keys(1, 40)) {
        ASSERT_TRUE(insert(k, "v").ok());
        keys.insert(k);
      }
      ASSERT_EQ(pmeh().zone_dir_id(1), 1u);
      continue;
    }
    // One write per step: an insert, or every third step a remove of a key
    // inserted after the split began (its window moved: it lives in a child).
    if (i % 3 == 2) {
      const std::string k = "n" + std::to_string(i - 1);
      if (keys.count(k) != 0) {
        ASSERT_TRUE(index_->remove(engine::make_key(k)).ok());
        keys.erase(k);
        removed.insert(k);
        for (Long& l : longs) l.stable.erase(k);
        continue;
      }
    }
    const std::string k = "n" + std::to_string(i);
    if ((engine::make_key(k).h1 >> 63) != 0) continue;
    ASSERT_TRUE(insert(k, "v").ok());
    keys.insert(k);
  }
  EXPECT_GE(steps, 20u);
  EXPECT_FALSE(removed.empty());
  scans_hold("after the split");
  for (Long& l : longs) {
    if (!l.done) scan(l.cursor, 50, &l.seen);
    std::set<std::string> maybe = keys;
    maybe.insert(removed.begin(), removed.end());
    expect_exactly(l.seen, l.stable, maybe, "a long scan");
  }
  EXPECT_GE(longs.size(), 3u);
  expect_check();
}

// A cursor no call returned, inside a segment's range: before, during and
// after that segment's split, the scan passes exactly the keys from the
// cursor on, once each.
TEST_F(PmehScanTest, ACursorInsideASegmentThatSplitsPassesTheKeysFromItOn) {
  create();
  std::set<std::string> keys;
  until_split_in_flight("c", &keys);
  std::vector<std::uint64_t> cursors = {1, (std::uint64_t{1} << 63) + 1, ~std::uint64_t{0}};
  std::mt19937_64 rng(37);
  std::vector<std::string> sample(keys.begin(), keys.end());
  std::shuffle(sample.begin(), sample.end(), rng);
  for (std::size_t i = 0; i < 20; ++i) cursors.push_back(engine::make_key(sample[i]).h1);
  cursors.push_back(std::uint64_t{1} << 62);  // child 1's start once split
  auto from_each = [&](const std::string& when) {
    for (std::uint64_t c : cursors) {
      std::set<std::string> want;
      for (const auto& k : keys) {
        if (engine::make_key(k).h1 >= c) want.insert(k);
      }
      for (std::size_t count : {std::size_t{1}, std::size_t{100}}) {
        std::map<std::string, int> seen;
        scan(c, count, &seen);
        expect_exactly(seen, want, {}, when + ", from cursor " + std::to_string(c));
      }
    }
  };
  from_each("split in flight");
  for (int i = 0; pmeh().split_in_flight(0); ++i) {
    const std::string k = "m" + std::to_string(i);
    if ((engine::make_key(k).h1 >> 63) != 0) continue;
    ASSERT_TRUE(insert(k, "v").ok());
    keys.insert(k);
  }
  ASSERT_EQ(stats().property("pmeh.splits"), 1u);
  from_each("split complete");
}

// A split completes between a copy's directory lookup and its load of S's
// version (the copy hook): S is DEAD, and its buckets lack every key written
// into the children while it split. The copy must start over from the
// directory, at the children, or those keys are lost (and the part would
// end at S's end, past the children).
TEST_F(PmehScanTest, ACopyThatMeetsACompletedSplitStartsOverAtTheChildren) {
  for (std::size_t count : {std::size_t{1}, std::size_t{1} << 20}) {
    if (count != 1) {
      TearDown();
      SetUp();
    }
    create();
    std::set<std::string> keys;
    until_split_in_flight("h", &keys);
    // Written after the split began: each insert moved its window first, so
    // these live only in the children.
    for (int i = 0, late = 0; late < 40; ++i) {
      const std::string k = "late" + std::to_string(i);
      if ((engine::make_key(k).h1 >> 63) != 0) continue;
      ASSERT_TRUE(insert(k, "v").ok());
      keys.insert(k);
      ++late;
    }
    ASSERT_TRUE(pmeh().split_in_flight(0));
    std::set<std::string> completing;
    std::atomic<int> fired{0};
    pm::testing::set_segment_copy_hook([&](std::uint64_t x) {
      if (x != 0 || fired.exchange(1) != 0) return;
      // Inline pairs, and zone 0's owner retires nothing before the
      // completion: no write here waits for this read section.
      for (int i = 0; pmeh().split_in_flight(0); ++i) {
        const std::string k = "done" + std::to_string(i);
        if ((engine::make_key(k).h1 >> 63) != 0) continue;
        ASSERT_TRUE(insert(k, "v").ok());
        completing.insert(k);
      }
    });
    std::map<std::string, int> seen;
    scan(0, count, &seen);
    pm::testing::set_segment_copy_hook(nullptr);
    EXPECT_EQ(fired.load(), 1);
    ASSERT_EQ(stats().property("pmeh.splits"), 1u);
    expect_exactly(seen, keys, completing, "count " + std::to_string(count));
  }
}

class PmehCheckTest : public PmehGradualTest {
 protected:
  // A store with a split in flight in zone 0; returns S.
  pm::SegmentHeader* splitting() {
    options_.set("pmeh.split_bits", 2);
    options_.set("pmeh.split_step", 1);
    create();
    const std::vector<std::string> z0 = zone_keys(0, 3000);
    for (std::size_t n = 0; !pmeh().split_in_flight(0); ++n) EXPECT_TRUE(insert(z0[n], "v").ok());
    EXPECT_TRUE(index_->check().ok());
    return pool_->region().at<pm::SegmentHeader>(pmeh().split_segment(0));
  }
  void expect_corruption(const std::string& what) {
    const Status s = index_->check();
    EXPECT_TRUE(s.is_corruption()) << s.to_string();
    EXPECT_NE(s.to_string().find(what), std::string::npos) << s.to_string();
  }
};

TEST_F(PmehCheckTest, CheckReportsMovedBitsThatDifferFromTheSplitInFlight) {
  pm::SegmentHeader* s = splitting();
  s->moved[0].fetch_xor(std::uint64_t{1} << 5);
  expect_corruption("moved word 0");
  s->moved[0].fetch_xor(std::uint64_t{1} << 5);
  expect_check();
}

TEST_F(PmehCheckTest, CheckReportsAChildWithTheWrongDepth) {
  pm::SegmentHeader* s = splitting();
  auto* c = pool_->region().at<pm::SegmentHeader>(s->children[1].load());
  c->depth = static_cast<std::uint8_t>(c->depth + 1);
  expect_corruption("child 1");
  c->depth = static_cast<std::uint8_t>(c->depth - 1);
  expect_check();
}

TEST_F(PmehCheckTest, CheckReportsAChildSlotSetBeyondTwoToTheK) {
  pm::SegmentHeader* s = splitting();
  s->children[5].store(s->children[0].load());
  expect_corruption("child slot 5 is set beyond 2^k");
  s->children[5].store(0);
  expect_check();
}

TEST_F(PmehCheckTest, CheckReportsASplitRecordWithoutASplitInFlight) {
  splitting();
  auto* root = reinterpret_cast<pm::Root*>(pool_->root());
  ASSERT_EQ(pmeh().zone_dir_id(1), 0u);
  const std::uint64_t seg1 =  // zone 1's segment, in directory 0
      pm::dir_entries(pool_->region().at<pm::DirHeader>(root->dir_array[0].load()))[1].load();
  root->split[1].store(seg1);
  expect_corruption("zone 1 has split record");
  root->split[1].store(0);
  expect_check();
}

TEST_F(PmehCheckTest, CheckReportsASegmentWithAChildButNoSplit) {
  splitting();
  auto* root = reinterpret_cast<pm::Root*>(pool_->root());
  auto* d0 = pool_->region().at<pm::DirHeader>(root->dir_array[0].load());
  auto* seg1 = pool_->region().at<pm::SegmentHeader>(pm::dir_entries(d0)[1].load());
  seg1->children[0].store(pmeh().split_segment(0));
  expect_corruption("names a segment with a child set");
  seg1->children[0].store(0);
  expect_check();
}

TEST_F(PmehCheckTest, CheckReportsAZoneBitInANewerDirectoryThanTheZoneUses) {
  splitting();
  ASSERT_EQ(pmeh().zone_dir_id(1), 0u);
  auto* root = reinterpret_cast<pm::Root*>(pool_->root());
  auto* d1 = pool_->region().at<pm::DirHeader>(root->dir_array[1].load());
  d1->zone_filled[0].fetch_or(2);
  expect_corruption("the newer directory 1 has its bit");
  d1->zone_filled[0].fetch_and(~std::uint64_t{2});
  expect_check();
}

// Open reads one header per split record and one per child: the same
// splits in flight cost the same with eight times the keys (§9).
TEST_F(PmehGradualTest, OpenReadsNoSegmentButSplitting) {
  options_.set("pmeh.zone_bits", 2);
  options_.set("pmeh.split_bits", 2);
  options_.set("pmeh.split_step", 1);
  options_.set("pmeh.workers", 1);
  create();
  std::uint64_t inserted = 0;
  // Puts a split in flight in every zone (zones whose split completes meanwhile
  // start another), then reopens cleanly.
  auto splits_everywhere_then_reopen = [&](std::uint64_t keys) {
    for (std::uint64_t i = 0; i < keys; ++i, ++inserted) {
      ASSERT_TRUE(insert("o" + std::to_string(inserted), "v").ok());
    }
    for (unsigned z = 0; z < 4; ++z) {
      while (!pmeh().split_in_flight(z)) {
        const std::string k = "o" + std::to_string(inserted++);
        if ((engine::make_key(k).h1 >> 62) != z) continue;
        ASSERT_TRUE(insert(k, "v").ok());
      }
    }
    reopen();
  };
  splits_everywhere_then_reopen(2000);
  const auto first = pmeh().open_counters();
  EXPECT_EQ(first.splits_resumed, 4u);
  EXPECT_EQ(first.segments_read, 4u * (1 + 4));
  expect_check();
  splits_everywhere_then_reopen(8 * 2000);
  const auto second = pmeh().open_counters();
  EXPECT_EQ(second.splits_resumed, 4u);
  EXPECT_EQ(second.segments_read, first.segments_read) << "independent of the key count";
  EXPECT_GT(stats().property("pmeh.segments"), 40u) << "many segments, none read by open";
  expect_check();
}

TEST_F(PmehCheckTest, CheckReportsAKeyOfAMovedBucketInTheWrongChild) {
  pm::SegmentHeader* s = splitting();
  // Find a VALID slot in a moved bucket and copy it to the same position
  // of a sibling child (whose range does not hold its key).
  const unsigned nb = pmeh().nb();
  bool planted = false;
  for (unsigned j = 0; j < nb && !planted; ++j) {
    if (((s->moved[j / 64].load() >> (j % 64)) & 1) == 0) continue;
    for (unsigned i = 0; i < 4 && !planted; ++i) {
      pm::Bucket& b = pm::segment_buckets(pool_->region().at<pm::SegmentHeader>(s->children[i].load()))[j];
      pm::Bucket& o = pm::segment_buckets(pool_->region().at<pm::SegmentHeader>(s->children[(i + 1) % 4].load()))[j];
      for (unsigned p = 0; p < pm::kSlotsPerBucket && !planted; ++p) {
        if (!pm::meta_valid(b.meta[p].load()) || pm::meta_valid(o.meta[p].load())) continue;
        o.slot[p].w0.store(b.slot[p].w0.load());
        o.slot[p].w1.store(b.slot[p].w1.load());
        o.meta[p].store(b.meta[p].load());
        planted = true;
      }
    }
  }
  ASSERT_TRUE(planted);
  expect_corruption("outside its segment's range");
}

// --- recovery from crash images (§8.2, §9) ---------------------------------------

class PmehCrashTest : public PmehEngineTest {
 protected:
  void SetUp() override {
    PmehEngineTest::SetUp();
    granularity_.force("cache_line");
    options_.pool_size = pool::kMinPoolSize;
    options_.set("pmeh.workers", 1);
  }
  struct Recovered {
    Status open, check;
    pm::PmehIndex::OpenCounters counters;
    std::map<std::string, std::string> values;
  };
  // Opens a copy of a crash image as a pool of its own, and reads it back.
  // With `crashes`, a simulator watches the recovery and adds crash images
  // taken at each of its drains.
  Recovered recover(const std::vector<std::byte>& image, const std::vector<std::string>& keys,
                    std::vector<std::vector<std::byte>>* crashes = nullptr) {
    Recovered r;
    const std::string copy = path_ + ".image";
    {
      std::ofstream out(copy, std::ios::binary | std::ios::trunc);
      out.write(reinterpret_cast<const char*>(image.data()), static_cast<std::streamsize>(image.size()));
    }
    std::unique_ptr<pool::Pool> p;
    std::unique_ptr<heap::Heap> h;
    std::unique_ptr<engine::Index> index;
    r.open = pool::Pool::open(copy, "pmeh", &p);
    if (r.open.ok()) r.open = heap::Heap::open(p->region(), p->heap_offset(), p->heap_size(), &h);
    if (r.open.ok()) {
      engine::Env env{p.get(), h.get(), options_};
      std::optional<testing::PersistenceSim> sim;
      std::mt19937_64 rng(crashes == nullptr ? 0 : crashes->size());
      if (crashes != nullptr) {
        sim.emplace(p->region());
        sim->set_crash_point_hook([&](const testing::PersistenceSim& s) {
          for (const testing::CrashChoice& c : testing::crash_choices(s, s.dirty_units(), 3, 2, rng, 4)) {
            crashes->push_back(s.crash_image(c));
          }
        });
      }
      r.open = engine::find_engine("pmeh")->open(env, &index);
      if (sim) sim->set_crash_point_hook(nullptr);
    }
    if (r.open.ok()) {
      p->begin_session();
      r.counters = static_cast<pm::PmehIndex&>(*index).open_counters();
      r.check = index->check();
      for (const std::string& k : keys) {
        std::string v;
        if (index->get(engine::make_key(k), &v).ok()) r.values[k] = v;
      }
      index->close();
      h->drain_all();
      p->mark_clean_shutdown();
    }
    index.reset();
    h.reset();
    p.reset();
    ::unlink(copy.c_str());
    return r;
  }
  // Every crash choice at one crash point: the sim's choices, plus each
  // dirty word of a multi-word line torn alone.
  static std::vector<testing::CrashChoice> choices(const testing::PersistenceSim& s,
                                                   std::mt19937_64& rng) {
    const std::vector<std::uint64_t> dirty = s.dirty_units();
    std::vector<testing::CrashChoice> out = testing::crash_choices(s, dirty, 4, 6, rng, 8);
    for (std::uint64_t line : dirty) {
      const std::uint8_t words = s.dirty_words(line);
      if (std::popcount(words) < 2) continue;
      for (unsigned w = 0; w < 8; ++w) {
        const auto bit = static_cast<std::uint8_t>(1u << w);
        if (words & bit) out.push_back({{}, {{line, bit}}});
      }
    }
    return out;
  }
  testing::GranularityGuard granularity_;
};

// Crashes at every drain of the split a zone-0 insert triggers (with k = 3
// and Z = 1 it also installs a directory and fills the zone into it).
struct SplitExploration {
  std::uint64_t images = 0, violations = 0, drains = 0;
  std::uint64_t recovery_images = 0;  // crashed during the recovery of a split in flight
  std::uint64_t rollbacks_crashed = 0, last_rollback_drain = 0;
  std::string first;
  pm::PmehIndex::OpenCounters rows;
};

class PmehSplitCrashTest : public PmehCrashTest {
 protected:
  // With `crash_recovery`, the first images whose recovery undoes or
  // resumes the split (one per drain, up to 6) are also crashed at every
  // drain of that recovery, and those images are recovered and checked the
  // same way.
  SplitExploration explore_split(unsigned k, bool crash_recovery = false) {
    SplitExploration out;
    options_.set("pmeh.split_bits", k);
    options_.set("pmeh.split_step", 0);  // start, every move and completion in one insert
    // The number of zone-0 inserts before the first split: the same keys in
    // a fresh pool land in the same places, so the n-th insert splits again.
    const std::vector<std::string> keys = zone_keys(0, 2000);
    std::size_t n = 0;
    create();
    while (stats().property("pmeh.splits") == 0) EXPECT_TRUE(insert(keys[n++], "v").ok());
    shut();
    ::unlink(path_.c_str());
    create();
    EXPECT_EQ(pool_->region().granularity(), media::Granularity::kCacheLine);
    --n;  // keys[n] splits
    for (std::size_t i = 0; i < n; ++i) EXPECT_TRUE(insert(keys[i], "v" + std::to_string(i)).ok());
    const std::vector<std::string> probe(keys.begin(), keys.begin() + static_cast<long>(n) + 1);
    pool_->region().persist_all();
    testing::PersistenceSim sim(pool_->region());
    std::mt19937_64 rng(7);
    sim.set_crash_point_hook([&](const testing::PersistenceSim& s) {
      // The split runs outside any read section: recover at once.
      if (!pm::testing_in_split.load()) return;
      ++out.drains;
      for (const testing::CrashChoice& c : choices(s, rng)) {
        const std::vector<std::byte> image = s.crash_image(c);
        const Recovered r = recover(image, probe);
        ++out.images;
        const std::string where = "drain " + std::to_string(out.drains) + ", " + c.describe();
        auto violation = [&](const std::string& what) {
          if (++out.violations <= 3) out.first += where + ": " + what + "\n";
        };
        auto verify = [&](const Recovered& got, const std::string& how) {
          if (!got.open.ok() || !got.check.ok()) {
            violation(how + got.open.to_string() + " / " + got.check.to_string());
            return false;
          }
          for (std::size_t i = 0; i < n; ++i) {
            auto it = got.values.find(keys[i]);
            if (it == got.values.end() || it->second != "v" + std::to_string(i)) {
              violation(how + "key " + std::to_string(i) + " lost or changed");
            }
          }
          if (got.values.count(keys[n]) != 0) violation(how + "the insert that split is there");
          return true;
        };
        if (!verify(r, "")) continue;
        if (crash_recovery && r.counters.splits_not_started + r.counters.splits_resumed > 0 && out.rollbacks_crashed < 6 &&
            out.last_rollback_drain != out.drains) {
          ++out.rollbacks_crashed;
          out.last_rollback_drain = out.drains;
          std::vector<std::vector<std::byte>> second;
          (void)recover(image, probe, &second);
          for (std::size_t j = 0; j < second.size(); ++j) {
            ++out.recovery_images;
            verify(recover(second[j], probe), "crash " + std::to_string(j) + " during its recovery: ");
          }
        }
        out.rows.splits_not_started += r.counters.splits_not_started;
        out.rows.splits_resumed += r.counters.splits_resumed;
        out.rows.splits_completed += r.counters.splits_completed;
        out.rows.directories_freed += r.counters.directories_freed;
        out.rows.segments_read = std::max(out.rows.segments_read, r.counters.segments_read);
      }
    });
    EXPECT_TRUE(insert(keys[n], "last").ok());
    sim.set_crash_point_hook(nullptr);
    EXPECT_EQ(stats().property("pmeh.splits"), 1u);
    return out;
  }
};

TEST_F(PmehSplitCrashTest, RecoverSplitRecordAtEveryDrainOfAnEightSplit) {
  const SplitExploration e = explore_split(3);
  EXPECT_GE(e.drains, 8u + 6u);
  EXPECT_GT(e.images, 50u);
  EXPECT_EQ(e.violations, 0u) << e.first;
  EXPECT_GE(e.rows.splits_not_started, 1u) << "R = S, not MOVING";
  EXPECT_GE(e.rows.splits_resumed, 1u) << "MOVING, not COMPLETING";
  EXPECT_GE(e.rows.splits_completed, 1u) << "COMPLETING";
  // Open reads one header per split record and one per child, no more.
  EXPECT_LE(e.rows.segments_read, 1u + 8u);
  expect_check();
}

// A crash during the recovery of a split in flight (undone when S is not
// MOVING yet, resumed when it is) recovers again. While MOVING splits were
// rolled back, recovery freed the children before clearing S's MOVING word,
// so a crash in between left a MOVING split naming a free block, and every
// later open refused the pool ("child 0 of segment ... is not a segment");
// found by the crash explorer. Resuming keeps the children; this test keeps
// any recovery of a split restartable.
TEST_F(PmehSplitCrashTest, ACrashDuringTheRecoveryOfASplitRecoversAgain) {
  const SplitExploration e = explore_split(1, /*crash_recovery=*/true);
  EXPECT_GE(e.rows.splits_resumed, 1u);
  EXPECT_GT(e.recovery_images, 20u);
  EXPECT_EQ(e.violations, 0u) << e.first;
}

TEST_F(PmehSplitCrashTest, RecoverSplitRecordAtEveryDrainOfATwoSplit) {
  const SplitExploration e = explore_split(1);
  EXPECT_EQ(e.violations, 0u) << e.first;
  EXPECT_GE(e.rows.splits_not_started, 1u);
  EXPECT_GE(e.rows.splits_resumed, 1u);
  EXPECT_GE(e.rows.splits_completed, 1u);
  EXPECT_LE(e.rows.segments_read, 1u + 2u);
}

// Crashes every write form at each of its drains, the write made by
// insert, update and remove, or (CompareAndSwap) by compare_and_swap from
// the acknowledged state, which follows the persist order of the write it
// makes. The owner runs writes inside a read section, so the images are
// recovered after the write.
class PmehWriteFormCrashTest : public PmehCrashTest, public ::testing::WithParamInterface<bool> {};

TEST_P(PmehWriteFormCrashTest, RecoverEveryWriteFormAtEachDrainToBeforeOrAfter) {
  create();
  struct Step {
    std::string key, before, after;  // "" = absent
    bool remove = false;
  };
  const std::vector<Step> steps = {
      {"i1", "", "v1"},                                   // insert inline
      {"item-key-1", "", "a value that needs an item"},   // insert pointer
      {"i1", "v1", "v2"},                                 // update (a)
      {"i1", "v2", "longer"},                             // update (c), length
      {"i1", "longer", "now a value with an item"},       // update (c), form
      {"item-key-1", "a value that needs an item", "another item value"},  // (b)
      {"item-key-1", "another item value", "short"},      // update (c), form
      {"i1", "now a value with an item", "", true},       // remove pointer
      {"item-key-1", "short", "", true},                  // remove inline
  };
  std::vector<std::string> keys = {"i1", "item-key-1", "stable", "stable-item-key"};
  ASSERT_TRUE(insert("stable", "s").ok());
  ASSERT_TRUE(insert("stable-item-key", "a stable value with an item").ok());
  std::uint64_t replayed = 0;
  std::mt19937_64 rng(11);
  for (const Step& st : steps) {
    pool_->region().persist_all();
    testing::PersistenceSim sim(pool_->region());
    std::vector<std::vector<std::byte>> images;
    sim.set_crash_point_hook([&](const testing::PersistenceSim& s) {
      for (const testing::CrashChoice& c : choices(s, rng)) images.push_back(s.crash_image(c));
    });
    Status s;
    if (GetParam()) {
      const auto state = [](const std::string& v, bool absent) {
        return absent ? std::nullopt : std::optional<std::string_view>(v);
      };
      s = index_->compare_and_swap(engine::make_key(st.key), state(st.before, st.before.empty()),
                                   state(st.after, st.remove));
    } else if (st.remove) {
      s = index_->remove(engine::make_key(st.key));
    } else if (st.before.empty()) {
      s = insert(st.key, st.after);
    } else {
      s = index_->update(engine::make_key(st.key), st.after);
    }
    sim.set_crash_point_hook(nullptr);
    ASSERT_TRUE(s.ok()) << st.key << ": " << s.to_string();
    ASSERT_FALSE(images.empty());
    for (const auto& image : images) {
      const Recovered r = recover(image, keys);
      ASSERT_TRUE(r.open.ok()) << st.key << " -> " << st.after << ": " << r.open.to_string();
      EXPECT_TRUE(r.check.ok()) << st.key << " -> " << st.after << ": " << r.check.to_string();
      const auto it = r.values.find(st.key);
      const std::string got = it == r.values.end() ? "" : it->second;
      EXPECT_TRUE(got == st.before || got == st.after)
          << st.key << ": '" << got << "', not '" << st.before << "' or '" << st.after << "'";
      EXPECT_EQ(r.values.count("stable") ? r.values.at("stable") : "", "s");
      EXPECT_EQ(r.values.count("stable-item-key") ? r.values.at("stable-item-key") : "",
                "a stable value with an item");
      replayed += r.counters.slot_updates_replayed;
    }
  }
  EXPECT_GE(replayed, 1u) << "some image held a committed slot update";
  expect_check();
}

INSTANTIATE_TEST_SUITE_P(ByWriteOrSwap, PmehWriteFormCrashTest, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "CompareAndSwap" : "Write"; });

// Crashes at every drain of a gradual split (start, each move batch,
// completion) while the writes between the steps land in moved child
// buckets: every acknowledged key must survive, whichever row of §8.2 the
// image is in.
struct GradualExploration {
  std::uint64_t images = 0, violations = 0, drains = 0, batches = 0;
  std::uint64_t resumed_with_child_writes = 0;  // resumed images holding writes after the start
  std::string first;
  pm::PmehIndex::OpenCounters rows;
};

class PmehGradualCrashTest : public PmehCrashTest {
 protected:
  // Recovers the images of every `sample`-th drain (1: all of them).
  GradualExploration explore_gradual(unsigned k, unsigned step, unsigned sample) {
    GradualExploration out;
    options_.set("pmeh.split_bits", k);
    options_.set("pmeh.split_step", step);
    // Gradual: an OWNED zone's split (pmeh.h, "Writes during a split").
    options_.set("pmeh.write_mode", pm::kWriteDelegated);
    const std::vector<std::string> keys = zone_keys(0, 3000);
    // A dry run finds the insert that starts the split (n) and the one
    // after which it is complete (end): a fresh pool places keys the same.
    std::size_t n = 0, end = 0;
    create();
    while (!pmeh().split_in_flight(0)) EXPECT_TRUE(insert(keys[n++], "v").ok());
    for (end = n; pmeh().split_in_flight(0); ++end) EXPECT_TRUE(insert(keys[end], "v").ok());
    shut();
    ::unlink(path_.c_str());
    create();
    --n;  // keys[n] starts the split
    for (std::size_t i = 0; i < n; ++i) EXPECT_TRUE(insert(keys[i], "v" + std::to_string(i)).ok());
    const std::vector<std::string> probe(keys.begin(), keys.begin() + static_cast<long>(end));
    pool_->region().persist_all();
    testing::PersistenceSim sim(pool_->region());
    std::mt19937_64 rng(13);
    std::atomic<std::size_t> acked{n};  // keys[0 .. acked) were acknowledged
    std::uint64_t prev_moved = 0;
    sim.set_crash_point_hook([&](const testing::PersistenceSim& s) {
      if (!pm::testing_in_split.load()) return;
      ++out.drains;
      if ((out.drains - 1) % sample != 0) return;
      const std::size_t a = acked.load();
      for (const testing::CrashChoice& c : choices(s, rng)) {
        const Recovered r = recover(s.crash_image(c), probe);
        ++out.images;
        const std::string where = "drain " + std::to_string(out.drains) + ", " + c.describe();
        auto violation = [&](const std::string& what) {
          if (++out.violations <= 3) out.first += where + ": " + what + "\n";
        };
        if (!r.open.ok() || !r.check.ok()) {
          violation(r.open.to_string() + " / " + r.check.to_string());
          continue;
        }
        for (std::size_t i = 0; i < end; ++i) {
          auto it = r.values.find(keys[i]);
          const std::string want = "v" + std::to_string(i);
          if (i < a && (it == r.values.end() || it->second != want)) {
            violation("acknowledged key " + std::to_string(i) + " lost or changed");
          } else if (i > a && it != r.values.end()) {
            violation("key " + std::to_string(i) + " is there before its insert");
          } else if (i == a && it != r.values.end() && it->second != want) {
            violation("the key in flight has a wrong value");
          }
        }
        if (r.counters.splits_resumed != 0 && a > n + 1) ++out.resumed_with_child_writes;
        out.rows.splits_not_started += r.counters.splits_not_started;
        out.rows.splits_resumed += r.counters.splits_resumed;
        out.rows.splits_completed += r.counters.splits_completed;
        out.rows.segments_read = std::max(out.rows.segments_read, r.counters.segments_read);
      }
    });
    for (std::size_t i = n; i < end; ++i) {
      const std::uint64_t before = stats().property("pmeh.items_moved");
      EXPECT_TRUE(insert(keys[i], "v" + std::to_string(i)).ok()) << i;
      out.batches += stats().property("pmeh.items_moved") != before || prev_moved != before;
      prev_moved = stats().property("pmeh.items_moved");
      acked.store(i + 1);
    }
    sim.set_crash_point_hook(nullptr);
    EXPECT_FALSE(pmeh().split_in_flight(0));
    EXPECT_EQ(stats().property("pmeh.splits"), 1u);
    return out;
  }
};

#if defined(__SANITIZE_THREAD__)
constexpr unsigned kDrainSample = 3;  // TSan: every third drain (release covers all)
#else
constexpr unsigned kDrainSample = 1;
#endif

TEST_F(PmehGradualCrashTest, RecoverMoveBatchAtEachDrain) {
  const GradualExploration e = explore_gradual(/*k=*/1, /*step=*/1, kDrainSample);
  EXPECT_GE(e.drains, 4u + 6u * 2u) << "the start, six batches or more, the completion";
  EXPECT_GT(e.images, 40u / kDrainSample);
  EXPECT_EQ(e.violations, 0u) << e.first;
  EXPECT_GE(e.rows.splits_not_started, 1u) << "R = S, not MOVING";
  EXPECT_GE(e.rows.splits_resumed, 1u) << "MOVING: resumed";
  EXPECT_GE(e.rows.splits_completed, 1u) << "COMPLETING";
  EXPECT_LE(e.rows.segments_read, 1u + 2u);
  expect_check();
}

TEST_F(PmehGradualCrashTest, RecoverSplitRecordMovingResumesSplit) {
  const GradualExploration e = explore_gradual(/*k=*/3, /*step=*/2, kDrainSample);
  EXPECT_EQ(e.violations, 0u) << e.first;
  EXPECT_GE(e.rows.splits_resumed, 1u);
  // Images where writes had gone into moved child buckets before the
  // crash: a rolled-back split would lose them.
  EXPECT_GT(e.resumed_with_child_writes, 0u);
  EXPECT_LE(e.rows.segments_read, 1u + 8u);
  expect_check();
}

TEST_F(PmehGradualCrashTest, PlantedMovedBeforeCopyDurableIsCaught) {
  engine::planted::bugs.store(pm::testing::kMovedBeforeCopyDurable);
  const GradualExploration e = explore_gradual(/*k=*/1, /*step=*/1, kDrainSample);
  engine::planted::bugs.store(engine::planted::kNone);
  EXPECT_GT(e.violations, 0u) << "a bucket marked moved whose copy was lost";
}

// Crashes at every drain of direct writes into a moved window of a split in
// flight (every form of write, as RecoverEveryWriteFormAtEachDrainToBeforeOrAfter
// does it outside a split): each image holds the write or not, every other
// key as it was, and recovery resumes the split with the child's slots.
TEST_F(PmehCrashTest, RecoverDirectWritesIntoAMovedWindowAtEachDrain) {
  // A gradual split started in an OWNED zone, resumed by an open with
  // every zone SHARED (it stays in flight: no idle steps, and these writes
  // never reach the owner).
  options_.set("pmeh.split_bits", 1);
  options_.set("pmeh.split_step", 1);
  options_.set("pmeh.write_mode", pm::kWriteDelegated);
  create();
  const unsigned nb = pmeh().nb();
  std::map<std::string, std::string> state;
  std::vector<std::string> keys;
  std::string trigger;
  for (const std::string& k : zone_keys(0, 3000)) {
    if (pmeh().split_in_flight(0)) break;
    ASSERT_TRUE(insert(k, "v").ok());
    state[k] = "v";
    keys.push_back(k);
    trigger = k;
  }
  options_.set("pmeh.write_mode", pm::kWriteDirect);
  reopen();
  ASSERT_TRUE(pmeh().split_in_flight(0));
  const unsigned h = pm::home_bucket(engine::make_key(trigger).h1, nb);
  const std::vector<std::string> m = placed_keys("m", 0, h, nb, 2);
  keys.insert(keys.end(), m.begin(), m.end());
  struct Step {
    std::string key, after;  // "" = absent
    bool remove = false;
  };
  const std::vector<Step> steps = {
      {m[0], "v1"},                                // insert inline
      {m[1], "a value that needs an item"},        // insert pointer
      {m[0], "v2"},                                // update (a)
      {m[0], "now a value with an item"},          // update (c), form
      {m[1], "another item value"},                // update (b)
      {m[1], "short"},                             // update (c), form
      {m[0], "", true},                            // remove pointer
      {m[1], "", true},                            // remove inline
  };
  std::uint64_t resumed = 0, replayed = 0, images_seen = 0;
  std::mt19937_64 rng(17);
  for (const Step& st : steps) {
    const std::map<std::string, std::string> before = state;
    std::map<std::string, std::string> after = state;
    if (st.remove) {
      after.erase(st.key);
    } else {
      after[st.key] = st.after;
    }
    const std::uint64_t direct = pmeh().direct_split_writes();
    pool_->region().persist_all();
    testing::PersistenceSim sim(pool_->region());
    std::vector<std::vector<std::byte>> images;
    sim.set_crash_point_hook([&](const testing::PersistenceSim& s) {
      for (const testing::CrashChoice& c : choices(s, rng)) images.push_back(s.crash_image(c));
    });
    Status s;
    if (st.remove) {
      s = index_->remove(engine::make_key(st.key));
    } else if (before.count(st.key) == 0) {
      s = insert(st.key, st.after);
    } else {
      s = index_->update(engine::make_key(st.key), st.after);
    }
    sim.set_crash_point_hook(nullptr);
    ASSERT_TRUE(s.ok()) << st.key << ": " << s.to_string();
    ASSERT_EQ(pmeh().direct_split_writes(), direct + 1) << st.key << " -> " << st.after;
    ASSERT_TRUE(pmeh().split_in_flight(0));
    ASSERT_FALSE(images.empty());
    for (const auto& image : images) {
      const Recovered r = recover(image, keys);
      ++images_seen;
      ASSERT_TRUE(r.open.ok()) << st.key << " -> " << st.after << ": " << r.open.to_string();
      EXPECT_TRUE(r.check.ok()) << st.key << " -> " << st.after << ": " << r.check.to_string();
      EXPECT_TRUE(r.values == before || r.values == after)
          << st.key << " -> '" << st.after << "': the image holds neither the state before nor after";
      resumed += r.counters.splits_resumed;
      replayed += r.counters.slot_updates_replayed;
    }
    state = after;
  }
  EXPECT_EQ(resumed, images_seen) << "every image resumed the split in flight";
  EXPECT_GE(replayed, 1u) << "some image held a committed slot update";
  for (const auto& [k, v] : state) ASSERT_EQ(get(k), v) << k;
  expect_check();
}

// Crashes at every drain of the write that fills the last zone into the
// newest directory and so retires the old one (§6, §8.2 "Old directory
// retirement").
TEST_F(PmehCrashTest, RecoverOldDirectoryRetirement) {
  options_.set("pmeh.split_bits", 3);
  options_.set("pmeh.split_step", 0);
  create();
  const std::vector<std::string> z0 = zone_keys(0, 2000);
  std::vector<std::string> keys;
  while (stats().property("pmeh.splits") == 0) {
    keys.push_back(z0[keys.size()]);
    ASSERT_TRUE(insert(keys.back(), "x").ok());
  }
  ASSERT_EQ(pmeh().zone_dir_id(1), 0u);
  const std::string k1 = zone_keys(1, 1)[0];
  std::vector<std::string> probe = keys;
  probe.push_back(k1);
  pool_->region().persist_all();
  testing::PersistenceSim sim(pool_->region());
  std::mt19937_64 rng(17);
  std::uint64_t images = 0, freed_by_open = 0, violations = 0, drains = 0;
  std::string first;
  sim.set_crash_point_hook([&](const testing::PersistenceSim& s) {
    // The fill and the retirement run before the write's read section.
    if (!pm::testing_in_split.load()) return;
    ++drains;
    for (const testing::CrashChoice& c : choices(s, rng)) {
      const Recovered r = recover(s.crash_image(c), probe);
      ++images;
      freed_by_open += r.counters.directories_freed;
      std::string bad;
      if (!r.open.ok() || !r.check.ok()) bad = r.open.to_string() + " / " + r.check.to_string();
      for (const std::string& k : keys) {
        if (r.values.count(k) == 0 || r.values.at(k) != "x") bad = "key " + k + " lost";
      }
      if (r.values.count(k1) != 0) bad = "the write in flight is there before its insert";
      if (!bad.empty() && ++violations <= 3) first += "drain " + std::to_string(drains) + ": " + bad + "\n";
    }
  });
  ASSERT_TRUE(insert(k1, "y").ok());
  sim.set_crash_point_hook(nullptr);
  EXPECT_EQ(stats().property("pmeh.directories"), 1u);
  EXPECT_EQ(violations, 0u) << first;
  EXPECT_GE(drains, 3u) << "fill entries, fill bit, retire entries, the cleared word";
  EXPECT_GT(images, 10u);
  EXPECT_GE(freed_by_open, 1u) << "a crash after the fill, before the word was cleared";
  expect_check();
}

// A reader racing a write never answers what the write's drains have not
// made durable yet. At each drain of the write (a crash point, before the
// drain takes effect: the media hold the state before the write), a reader
// thread is started and given a bounded time to answer; an answer given
// there must be that state. (A reader that waits for the drain gives none
// there; the bound only limits how hard the test looks.) Inline pairs: the
// insert, the update of the value word and the remove each become durable
// at their last drain.
TEST_F(PmehCrashTest, AReaderRacingAWriteNeverAnswersWhatItsDrainsHaveNotMadeDurable) {
  create();
  pool_->region().persist_all();
  testing::PersistenceSim sim(pool_->region());
  struct Answer {
    std::atomic<bool> done{false};
    std::string value;
  };
  auto race = [&](const std::string& k, const std::function<Status()>& op,
                  const std::string& durable) {
    std::deque<Answer> answers;
    std::vector<std::thread> readers;
    int drains = 0;
    std::vector<std::string> wrong;
    sim.set_crash_point_hook([&](const testing::PersistenceSim&) {
      ++drains;
      Answer& a = answers.emplace_back();
      readers.emplace_back([&a, &k, this] {
        a.value = get(k);
        a.done.store(true, std::memory_order_release);
      });
      const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(20);
      while (!a.done.load(std::memory_order_acquire) && std::chrono::steady_clock::now() < until) {
        std::this_thread::yield();
      }
      if (a.done.load(std::memory_order_acquire) && a.value != durable) wrong.push_back(a.value);
    });
    const Status s = op();
    sim.set_crash_point_hook(nullptr);
    for (std::thread& t : readers) t.join();
    EXPECT_TRUE(s.ok()) << s.to_string();
    EXPECT_GT(drains, 0);
    EXPECT_TRUE(wrong.empty()) << "a reader answered '" << (wrong.empty() ? "" : wrong[0])
                               << "' while the media held '" << durable << "'";
  };
  const std::string absent = "<" + Status::NotFound().to_string() + ">";
  for (int i = 0; i < 4; ++i) {
    const std::string k = "k" + std::to_string(i);
    const engine::Key key = engine::make_key(k);
    race(k, [&] { return index_->insert(key, "v1"); }, absent);
    race(k, [&] { return index_->update(key, "v2"); }, "v1");
    race(k, [&] { return index_->remove(key); }, "v2");
  }
}

// ReadOptions::snapshot reads the latest durable state, and every write is
// durable when it returns: a snapshot read sees each acknowledged insert,
// update (every form) and remove at once, like a plain read.
TEST_F(PmehStoreTest, SnapshotReadsSeeEveryAcknowledgedWrite) {
  create();
  const ReadOptions snapshot{.snapshot = true};
  auto both = [&](const std::string& k) {
    std::string a, b;
    const Status sa = store_->get(k, &a);
    const Status sb = store_->get(k, &b, snapshot);
    EXPECT_EQ(sa.to_string(), sb.to_string()) << k;
    return sb.ok() ? b : "<" + sb.to_string() + ">";
  };
  for (int i = 0; i < 300; ++i) {
    ASSERT_TRUE(store_->insert(key(i), value(i)).ok()) << i;
    EXPECT_EQ(both(key(i)), value(i));
  }
  for (int i = 0; i < 300; ++i) {
    // Inline to item, item to item, item to inline, inline to inline.
    const std::string fresh = value(i + 1);
    ASSERT_TRUE(store_->update(key(i), fresh).ok()) << i;
    EXPECT_EQ(both(key(i)), fresh);
  }
  for (int i = 0; i < 300; i += 2) {
    ASSERT_TRUE(store_->remove(key(i)).ok()) << i;
    EXPECT_EQ(both(key(i)), "<" + Status::NotFound().to_string() + ">");
  }
  expect_check();
}

}  // namespace
}  // namespace pmhash
