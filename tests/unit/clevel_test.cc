// Unit tests of the clevel engine through the public Store API, plus a few
// that look at the pool's bytes to build states only a crash can make.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "engine/clevel/clevel_testing.h"
#include "engine/clevel/layout.h"
#include "engine/hash.h"
#include "heap/layout.h"
#include "pmhash/store.h"
#include "pool/pool.h"
#include "pool/pptr.h"

namespace pmhash {
namespace {

using engine::clevel::Bucket;
using engine::clevel::Ctx;
using engine::clevel::LevelHeader;
using engine::clevel::Root;

class ClevelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = "/dev/shm/pmhash-clevel-" + std::to_string(getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name() + ".pool";
    ::unlink(path_.c_str());
    options_.pool_size = 64u << 20;
    options_.set("clevel.initial_level_log2", 4);
    options_.set("clevel.min_level_log2", 2);
  }
  void TearDown() override {
    store_.reset();
    ::unlink(path_.c_str());
  }

  void create() { ASSERT_TRUE(Store::create(path_, options_, &store_).ok()); }
  void reopen() {
    if (store_) {
      ASSERT_TRUE(store_->close().ok());
    }
    store_.reset();
    Options o = options_;
    o.engine.clear();
    Status s = Store::open(path_, o, &store_);
    ASSERT_TRUE(s.ok()) << s.to_string();
  }
  // Waits until no resize is in progress (background rehash threads).
  void wait_until_stable() {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (store_->stats().resizing) {
      ASSERT_LT(std::chrono::steady_clock::now(), deadline) << "resize never finished";
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

TEST_F(ClevelTest, InsertGetUpdateRemoveRoundTrip) {
  create();
  std::string v;
  EXPECT_TRUE(store_->get("a", &v).is_not_found());
  ASSERT_TRUE(store_->insert("a", "1").ok());
  EXPECT_TRUE(store_->insert("a", "2").is_already_exists());
  ASSERT_TRUE(store_->get("a", &v).ok());
  EXPECT_EQ(v, "1");
  ASSERT_TRUE(store_->update("a", "3").ok());
  ASSERT_TRUE(store_->get("a", &v).ok());
  EXPECT_EQ(v, "3");
  EXPECT_TRUE(store_->update("b", "x").is_not_found());
  ASSERT_TRUE(store_->upsert("b", "4").ok());
  ASSERT_TRUE(store_->upsert("a", "5").ok());
  ASSERT_TRUE(store_->get("a", &v).ok());
  EXPECT_EQ(v, "5");
  EXPECT_EQ(store_->size(), 2u);
  ASSERT_TRUE(store_->remove("a").ok());
  EXPECT_TRUE(store_->remove("a").is_not_found());
  EXPECT_TRUE(store_->get("a", &v).is_not_found());
  EXPECT_EQ(store_->size(), 1u);
  EXPECT_TRUE(store_->check().ok()) << store_->check().to_string();
}

TEST_F(ClevelTest, EmptyAndBinaryKeysAndValues) {
  create();
  const std::string binary("\0\1\2\xff", 4);
  ASSERT_TRUE(store_->insert("", "empty key").ok());
  ASSERT_TRUE(store_->insert(binary, "").ok());
  std::string v;
  ASSERT_TRUE(store_->get("", &v).ok());
  EXPECT_EQ(v, "empty key");
  ASSERT_TRUE(store_->get(binary, &v).ok());
  EXPECT_EQ(v, "");
}

TEST_F(ClevelTest, OversizedKeyAndValueAreRefusedAndChangeNothing) {
  create();
  ASSERT_TRUE(store_->insert("k", "v").ok());
  const std::string big_key(kMaxKeySize + 1, 'k');
  EXPECT_TRUE(store_->insert(big_key, "v").is_invalid_argument());
  EXPECT_TRUE(store_->get(big_key, nullptr).is_invalid_argument());
  const std::string big_value(kMaxValueSize + 1, 'v');
  EXPECT_TRUE(store_->update("k", big_value).is_invalid_argument());
  std::string v;
  ASSERT_TRUE(store_->get("k", &v).ok());
  EXPECT_EQ(v, "v");
  // The largest allowed key works.
  const std::string max_key(kMaxKeySize, 'm');
  ASSERT_TRUE(store_->insert(max_key, "big").ok());
  ASSERT_TRUE(store_->get(max_key, &v).ok());
  EXPECT_EQ(v, "big");
}

TEST_F(ClevelTest, LargeValuesSurviveReopen) {
  create();
  const std::string big(3u << 20, 'z');
  ASSERT_TRUE(store_->insert("big", big).ok());
  reopen();
  std::string v;
  ASSERT_TRUE(store_->get("big", &v).ok());
  EXPECT_EQ(v, big);
  EXPECT_TRUE(store_->check().ok());
}

TEST_F(ClevelTest, ExpansionKeepsEveryKeyAndEndsWithTwoLevels) {
  create();
  const int n = 20000;
  for (int i = 0; i < n; ++i) ASSERT_TRUE(store_->insert(key(i), value(i)).ok()) << i;
  const Stats during = store_->stats();
  EXPECT_GT(during.property("clevel.expansions"), 3u);
  wait_until_stable();
  const Stats st = store_->stats();
  EXPECT_EQ(st.property("clevel.levels"), 2u);
  EXPECT_EQ(st.items, static_cast<std::uint64_t>(n));
  EXPECT_GT(st.property("clevel.items_moved"), 0u);
  EXPECT_GT(st.load_factor, 0.2);
  for (int i = 0; i < n; ++i) {
    std::string v;
    ASSERT_TRUE(store_->get(key(i), &v).ok()) << i;
    ASSERT_EQ(v, value(i));
  }
  Status c = store_->check();
  EXPECT_TRUE(c.ok()) << c.to_string();
}

TEST_F(ClevelTest, ShrinkAfterMassDeleteKeepsTheRest) {
  options_.set("clevel.shrink_threshold", 0.1);
  create();
  const int n = 20000;
  for (int i = 0; i < n; ++i) ASSERT_TRUE(store_->insert(key(i), value(i)).ok());
  wait_until_stable();
  const std::uint64_t slots_before = store_->stats().slots;
  for (int i = 0; i < n; ++i) {
    if (i % 100 != 0) {
      ASSERT_TRUE(store_->remove(key(i)).ok()) << i;
    }
  }
  wait_until_stable();
  // Deleting more keeps triggering shrink checks until the table is small.
  for (int round = 0; round < 4; ++round) {
    for (int i = 0; i < 2000; ++i) {
      ASSERT_TRUE(store_->insert("tmp" + std::to_string(i), "t").ok());
    }
    for (int i = 0; i < 2000; ++i) {
      Status s = store_->remove("tmp" + std::to_string(i));
      ASSERT_TRUE(s.ok()) << "round " << round << " key " << i << ": " << s.to_string();
    }
    wait_until_stable();
  }
  const Stats st = store_->stats();
  EXPECT_GT(st.property("clevel.shrinks"), 0u);
  EXPECT_LT(st.slots, slots_before);
  EXPECT_EQ(st.items, static_cast<std::uint64_t>(n / 100));
  for (int i = 0; i < n; i += 100) {
    std::string v;
    ASSERT_TRUE(store_->get(key(i), &v).ok()) << i;
    EXPECT_EQ(v, value(i));
  }
  Status c = store_->check();
  EXPECT_TRUE(c.ok()) << c.to_string();
}

TEST_F(ClevelTest, ForEachVisitsEveryKeyOnce) {
  create();
  for (int i = 0; i < 5000; ++i) ASSERT_TRUE(store_->insert(key(i), value(i)).ok());
  std::map<std::string, std::string> seen;
  ASSERT_TRUE(store_->for_each([&](std::string_view k, std::string_view v) {
                      EXPECT_TRUE(seen.emplace(std::string(k), std::string(v)).second) << k;
                      return true;
                    }).ok());
  ASSERT_EQ(seen.size(), 5000u);
  for (int i = 0; i < 5000; ++i) EXPECT_EQ(seen[key(i)], value(i));
  // Early stop.
  int visited = 0;
  ASSERT_TRUE(store_->for_each([&](std::string_view, std::string_view) { return ++visited < 10; }).ok());
  EXPECT_EQ(visited, 10);
}

TEST_F(ClevelTest, CleanReopenKeepsDataAndCount) {
  create();
  for (int i = 0; i < 3000; ++i) ASSERT_TRUE(store_->insert(key(i), value(i)).ok());
  for (int i = 0; i < 3000; i += 3) ASSERT_TRUE(store_->update(key(i), value(i, 1)).ok());
  for (int i = 1; i < 3000; i += 3) ASSERT_TRUE(store_->remove(key(i)).ok());
  reopen();
  EXPECT_TRUE(store_->stats().clean_shutdown);
  EXPECT_EQ(store_->size(), 2000u);
  for (int i = 0; i < 3000; ++i) {
    std::string v;
    Status s = store_->get(key(i), &v);
    if (i % 3 == 1) {
      EXPECT_TRUE(s.is_not_found()) << i;
    } else {
      ASSERT_TRUE(s.ok()) << i;
      EXPECT_EQ(v, value(i, i % 3 == 0 ? 1 : 0));
    }
  }
  EXPECT_TRUE(store_->check().ok());
}

// The tag filters are a DRAM shortcut only: with them off, every answer is
// the same, and no DRAM is used. With them on, they take one word per bucket
// and are complete (check() verifies every slot's tag is in its bucket's
// filter), also after a reopen rebuilt them in the background.
TEST_F(ClevelTest, TagFiltersChangeNoAnswerAndAreRebuiltOnOpen) {
  for (bool filters : {true, false}) {
    SCOPED_TRACE(filters ? "filters on" : "filters off");
    options_.set("clevel.tag_filter", filters);
    options_.force = true;
    create();
    for (int i = 0; i < 4000; ++i) ASSERT_TRUE(store_->insert(key(i), value(i)).ok());
    for (int i = 0; i < 4000; i += 4) ASSERT_TRUE(store_->remove(key(i)).ok());
    wait_until_stable();
    Stats st = store_->stats();
    EXPECT_EQ(st.dram_bytes, filters ? st.slots : 0u);  // 8 bytes per 8-slot bucket
    for (int pass = 0; pass < 2; ++pass) {
      for (int i = 0; i < 8000; ++i) {
        std::string v;
        Status s = store_->get(key(i), &v);
        ASSERT_EQ(s.ok(), i < 4000 && i % 4 != 0) << i << " pass " << pass;
      }
      Status c = store_->check();
      ASSERT_TRUE(c.ok()) << c.to_string();
      reopen();  // the second pass runs on filters built after open
    }
    // Writes made while the rebuild may still run are found afterwards.
    for (int i = 4000; i < 5000; ++i) ASSERT_TRUE(store_->insert(key(i), value(i)).ok());
    for (int i = 0; i < 5000; ++i) {
      std::string v;
      ASSERT_EQ(store_->get(key(i), &v).ok(), i % 4 != 0 || i >= 4000) << i;
    }
    Status c = store_->check();
    ASSERT_TRUE(c.ok()) << c.to_string();
    store_.reset();
  }
}

// A child process writes and exits without close(); everything it was told
// is done must be there, and the store must recover and pass check().
TEST_F(ClevelTest, AcknowledgedWritesSurviveExitWithoutClose) {
  create();
  ASSERT_TRUE(store_->close().ok());
  store_.reset();
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    std::unique_ptr<Store> s;
    if (!Store::open(path_, {}, &s).ok()) _exit(2);
    for (int i = 0; i < 5000; ++i) {
      if (!s->insert(key(i), value(i)).ok()) _exit(3);
    }
    for (int i = 0; i < 5000; i += 2) {
      if (!s->update(key(i), value(i, 7)).ok()) _exit(4);
    }
    _exit(0);  // no close: the pool is not marked clean
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  reopen();
  const Stats st = store_->stats();
  EXPECT_FALSE(st.clean_shutdown);
  EXPECT_EQ(store_->size(), 5000u);
  for (int i = 0; i < 5000; ++i) {
    std::string v;
    ASSERT_TRUE(store_->get(key(i), &v).ok()) << i;
    EXPECT_EQ(v, value(i, i % 2 == 0 ? 7 : 0));
  }
  Status c = store_->check();
  EXPECT_TRUE(c.ok()) << c.to_string();
}

// --- states only a crash can make, built by editing the pool's bytes ------

class ClevelPoolEditTest : public ClevelTest {
 protected:
  // Runs fn over the mapped pool of a closed store.
  template <typename Fn>
  void edit_pool(Fn&& fn) {
    ASSERT_TRUE(store_->close().ok());
    store_.reset();
    std::unique_ptr<pool::Pool> p;
    ASSERT_TRUE(pool::Pool::open(path_, "clevel", &p).ok());
    fn(*p, *reinterpret_cast<Root*>(p->root()));
    p->mark_clean_shutdown();
  }
  // Slots whose item offset equals the key's item, over all levels.
  static std::vector<std::atomic<std::uint64_t>*> slots_of(pool::Pool& p, Root& root,
                                                           const std::string& k,
                                                           std::vector<std::atomic<std::uint64_t>*>* empties) {
    std::vector<std::atomic<std::uint64_t>*> out;
    const engine::Key key = engine::make_key(k);
    const Ctx c{root.context.load()};
    for (unsigned i = 0; i < c.levels(); ++i) {
      auto id = static_cast<std::uint16_t>(c.last() + i);
      auto* l = p.region().at<LevelHeader>(root.levels[id % engine::clevel::kRingSize].load());
      const std::uint64_t mask = (std::uint64_t{1} << l->log2) - 1;
      for (std::uint64_t b : {key.h1 & mask, key.h2 & mask}) {
        for (auto& s : engine::clevel::level_buckets(l)[b].slot) {
          const std::uint64_t v = s.load();
          if (v == 0) {
            if (empties) empties->push_back(&s);
            continue;
          }
          auto* item = p.region().at<engine::ItemHeader>(engine::clevel::slot_offset(v));
          if (engine::item_key(item) == k) out.push_back(&s);
        }
      }
    }
    return out;
  }
};

TEST_F(ClevelPoolEditTest, UpdateFixesDuplicatePointersLeftByACrashedMove) {
  create();
  ASSERT_TRUE(store_->insert("dup", "old").ok());
  edit_pool([&](pool::Pool& p, Root& root) {
    std::vector<std::atomic<std::uint64_t>*> empties;
    auto slots = slots_of(p, root, "dup", &empties);
    ASSERT_EQ(slots.size(), 1u);
    ASSERT_FALSE(empties.empty());
    // A rehash copied the pointer and crashed before clearing the source.
    empties.back()->store(slots[0]->load());
    p.region().persist(empties.back(), 8);
  });
  reopen();
  EXPECT_TRUE(store_->check().ok()) << store_->check().to_string();
  std::string v;
  ASSERT_TRUE(store_->get("dup", &v).ok());
  EXPECT_EQ(v, "old");
  ASSERT_TRUE(store_->update("dup", "new").ok());
  ASSERT_TRUE(store_->get("dup", &v).ok());
  EXPECT_EQ(v, "new");
  EXPECT_EQ(store_->size(), 1u);
  edit_pool([&](pool::Pool& p, Root& root) { EXPECT_EQ(slots_of(p, root, "dup", nullptr).size(), 1u); });
  reopen();
  EXPECT_TRUE(store_->check().ok());
}

TEST_F(ClevelPoolEditTest, RemoveClearsEveryDuplicatePointer) {
  create();
  ASSERT_TRUE(store_->insert("dup", "v").ok());
  edit_pool([&](pool::Pool& p, Root& root) {
    std::vector<std::atomic<std::uint64_t>*> empties;
    auto slots = slots_of(p, root, "dup", &empties);
    ASSERT_EQ(slots.size(), 1u);
    ASSERT_GE(empties.size(), 2u);
    empties[0]->store(slots[0]->load());
    empties[1]->store(slots[0]->load());
    p.region().persist_all();
  });
  reopen();
  ASSERT_TRUE(store_->remove("dup").ok());
  std::string v;
  EXPECT_TRUE(store_->get("dup", &v).is_not_found());
  EXPECT_TRUE(store_->remove("dup").is_not_found());
  edit_pool([&](pool::Pool& p, Root& root) { EXPECT_TRUE(slots_of(p, root, "dup", nullptr).empty()); });
  reopen();
  EXPECT_TRUE(store_->check().ok()) << store_->check().to_string();
}

TEST_F(ClevelPoolEditTest, CheckReportsATagThatDoesNotMatchItsKey) {
  create();
  ASSERT_TRUE(store_->insert("k", "v").ok());
  edit_pool([&](pool::Pool& p, Root& root) {
    auto slots = slots_of(p, root, "k", nullptr);
    ASSERT_EQ(slots.size(), 1u);
    slots[0]->store(slots[0]->load() ^ (std::uint64_t{1} << 60));
    p.region().persist_all();
  });
  reopen();
  Status c = store_->check();
  EXPECT_TRUE(c.is_corruption());
  EXPECT_NE(c.message().find("tag"), std::string::npos) << c.message();
}

TEST_F(ClevelTest, PoolFullReturnsNoSpaceAndKeepsEverything) {
  options_.pool_size = 8u << 20;
  create();
  int stored = 0;
  Status s;
  const std::string v(2000, 'v');
  for (int i = 0; i < 100000; ++i) {
    s = store_->insert(key(i), v);
    if (!s.ok()) break;
    ++stored;
  }
  ASSERT_TRUE(s.is_no_space()) << s.to_string();
  ASSERT_GT(stored, 100);
  wait_until_stable();
  for (int i = 0; i < stored; ++i) {
    std::string got;
    ASSERT_TRUE(store_->get(key(i), &got).ok()) << i;
    ASSERT_EQ(got, v);
  }
  EXPECT_EQ(store_->size(), static_cast<std::uint64_t>(stored));
  // Space comes back after removals.
  for (int i = 0; i < 50; ++i) ASSERT_TRUE(store_->remove(key(i)).ok());
  ASSERT_TRUE(store_->sync().ok());
  reopen();
  EXPECT_TRUE(store_->insert("after", v).ok());
  EXPECT_TRUE(store_->check().ok()) << store_->check().to_string();
}

// --- damaged pools (found by tests/fuzz/pool_open_fuzzer.cc) ---------------
// Open either rejects a damaged pool with Corruption and leaves every byte of
// it as it was, or gives a store that check() can judge and close() can
// close, without reading beyond what open validated.

std::string file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

class ClevelDamageTest : public ClevelPoolEditTest {
 protected:
  void SetUp() override {
    ClevelPoolEditTest::SetUp();
    options_.pool_size = pool::kMinPoolSize;  // small files to compare
  }
  // Closes the store, if any, and runs fn over the mapped pool.
  template <typename Fn>
  void edit(Fn&& fn) {
    if (store_) {
      ASSERT_TRUE(store_->close().ok());
    }
    store_.reset();
    std::unique_ptr<pool::Pool> p;
    ASSERT_TRUE(pool::Pool::open(path_, "clevel", &p).ok());
    fn(*p, *reinterpret_cast<Root*>(p->root()));
    p->region().persist_all();
  }
  // Expects open to fail with Corruption naming the pool and `what`, with
  // the file byte-for-byte unchanged.
  void expect_open_rejects(const std::string& what) {
    const std::string before = file_bytes(path_);
    ASSERT_FALSE(before.empty());
    Options o = options_;
    o.engine.clear();
    std::unique_ptr<Store> store;
    const Status s = Store::open(path_, o, &store);
    EXPECT_TRUE(s.is_corruption()) << s.to_string();
    EXPECT_EQ(store, nullptr);
    EXPECT_NE(s.message().find(path_), std::string::npos) << s.message();
    EXPECT_NE(s.message().find(what), std::string::npos) << s.message();
    EXPECT_TRUE(file_bytes(path_) == before) << "a failed open changed the pool";
  }
  static std::atomic<std::uint64_t>& first_level_entry(const Root& root) {
    const Ctx c{root.context.load()};
    return const_cast<Root&>(root).levels[c.first() % engine::clevel::kRingSize];
  }
};

TEST_F(ClevelDamageTest, LevelClaimingMoreBucketsThanItsBlockHoldsIsRejectedUnchanged) {
  create();
  for (int i = 0; i < 100; ++i) ASSERT_TRUE(store_->insert(key(i), value(i)).ok());
  unsigned log2 = 0;
  // Twice the buckets: more than the level's block holds.
  edit([&](pool::Pool& p, Root& root) {
    auto* l = p.region().at<LevelHeader>(first_level_entry(root).load());
    log2 = l->log2;
    ++l->log2;
  });
  expect_open_rejects("claims 2^" + std::to_string(log2 + 1) + " buckets");
  // Beyond any level (the tag filter made at open, and the count close()
  // took, used to index 2^63 buckets).
  auto set_log2 = [&](unsigned to) {
    edit([&](pool::Pool& p, Root& root) {
      p.region().at<LevelHeader>(first_level_entry(root).load())->log2 = to;
    });
  };
  set_log2(63);
  expect_open_rejects("claims 2^63 buckets");
  set_log2(log2);
  reopen();
  EXPECT_TRUE(store_->check().ok()) << store_->check().to_string();
  EXPECT_EQ(store_->size(), 100u);
}

TEST_F(ClevelDamageTest, RejectedPoolIsLeftByteForByteUnchanged) {
  create();
  for (int i = 0; i < 100; ++i) ASSERT_TRUE(store_->insert(key(i), value(i)).ok());
  std::uint64_t context = 0;
  edit([&](pool::Pool& p, Root& root) {
    // As after a crash: the pool is not clean, the count not saved, a run
    // half-allocated (its head without its body; open frees it), and the
    // context not yet durable (DIRTY: open persists and clears it).
    root.count_valid = 0;
    const auto* h = p.region().at<heap::layout::HeapHeader>(pool::kHeapOffset);
    auto* table = p.region().at<std::uint64_t>(h->table_offset);
    std::uint64_t i = h->chunk_count - 1;
    while (i > 0 && table[i] != 0) --i;
    ASSERT_EQ(table[i], 0u);
    table[i] = heap::layout::head_entry(2);
    // Damage: the context names a first level that was never linked.
    const Ctx c{root.context.load()};
    context = c.w;
    const auto next = static_cast<std::uint16_t>(c.first() + 1);
    ASSERT_EQ(root.levels[next % engine::clevel::kRingSize].load(), 0u);
    root.context.store(c.next(next, c.last(), true, false).w | engine::clevel::kCtxDirty);
  });
  expect_open_rejects("level " + std::to_string(Ctx{context}.first() + 1) + " is missing");
  // Repaired, the pool opens, recovers (and frees the half-made run).
  edit([&](pool::Pool&, Root& root) { root.context.store(context); });
  reopen();
  EXPECT_TRUE(store_->check().ok()) << store_->check().to_string();
  EXPECT_EQ(store_->size(), 100u);
}

TEST_F(ClevelDamageTest, GenerationBeyondTheItemStateIsRejectedUnchanged) {
  create();
  ASSERT_TRUE(store_->insert("k", "v").ok());
  edit([&](pool::Pool& p, Root&) {
    // Item states hold 61 bits of it; the next open would use 2^61.
    p.region().at<pool::ShutdownState>(sizeof(pool::PoolHeader))->generation =
        (std::uint64_t{1} << 61) - 1;
  });
  expect_open_rejects("generation " + std::to_string(std::uint64_t{1} << 61) + " does not fit");
}

TEST_F(ClevelDamageTest, StoreWhoseCheckFailsClosesWithoutReadingItsItems) {
  create();
  for (int i = 0; i < 100; ++i) ASSERT_TRUE(store_->insert(key(i), value(i)).ok());
  edit([&](pool::Pool& p, Root& root) {
    root.count_valid = 0;  // as after a crash: close() has no count to save
    auto slots = slots_of(p, root, key(7), nullptr);
    ASSERT_EQ(slots.size(), 1u);
    // The slot points far beyond the pool (open does not read slots).
    slots[0]->store(pool::pptr_make(std::uint64_t{1} << 46, pool::pptr_tag(slots[0]->load())));
  });
  reopen();
  const Status c = store_->check();
  EXPECT_TRUE(c.is_corruption()) << c.to_string();
  EXPECT_NE(c.message().find("free block"), std::string::npos) << c.message();
  // close() used to count the items to save the count: it read the slot.
  ASSERT_TRUE(store_->close().ok());
  store_.reset();
  edit([&](pool::Pool&, Root& root) { EXPECT_EQ(root.count_valid, 0u); });
}

TEST_F(ClevelDamageTest, StaleRingEntryNamingALiveLevelIsClearedNotFreed) {
  create();
  for (int i = 0; i < 100; ++i) ASSERT_TRUE(store_->insert(key(i), value(i)).ok());
  unsigned stale = 0;
  edit([&](pool::Pool&, Root& root) {
    // An entry outside the live range whose clearing was not durable when
    // its level's block was freed, reused for a level, and linked.
    const Ctx c{root.context.load()};
    stale = (c.first() + 3u) % engine::clevel::kRingSize;
    ASSERT_EQ(root.levels[stale].load(), 0u);
    root.levels[stale].store(first_level_entry(root).load());
  });
  reopen();
  EXPECT_TRUE(store_->check().ok()) << store_->check().to_string();
  EXPECT_EQ(store_->size(), 100u);
  edit([&](pool::Pool&, Root& root) { EXPECT_EQ(root.levels[stale].load(), 0u); });
}

// --- durable answers, the count after a crash, filters under churn ---------

TEST_F(ClevelDamageTest, PendingSlotOnMediaIsReadThroughAndClearedByTheFirstReader) {
  // A clean close may leave PENDING on a slot (the writer's clearing CAS lost
  // to a rehash thread that was copying the slot); the next session's first
  // reader takes it as "maybe not durable", makes it durable and clears it.
  create();
  for (int i = 0; i < 50; ++i) ASSERT_TRUE(store_->insert(key(i), value(i)).ok());
  edit([&](pool::Pool& p, Root& root) {
    auto slots = slots_of(p, root, key(7), nullptr);
    ASSERT_EQ(slots.size(), 1u);
    ASSERT_EQ(slots[0]->load() & engine::clevel::kPending, 0u) << "the writer cleared it";
    slots[0]->fetch_or(engine::clevel::kPending);
  });
  reopen();
  std::string v;
  ReadOptions snapshot;
  snapshot.snapshot = true;
  // The snapshot read answers from the latest durable state: here the item.
  ASSERT_TRUE(store_->get(key(7), &v, snapshot).ok());
  EXPECT_EQ(v, value(7));
  EXPECT_TRUE(store_->get("absent", &v, snapshot).is_not_found());
  ASSERT_TRUE(store_->get(key(7), &v).ok());
  EXPECT_EQ(v, value(7));
  EXPECT_TRUE(store_->check().ok()) << store_->check().to_string();
  edit([&](pool::Pool& p, Root& root) {
    auto slots = slots_of(p, root, key(7), nullptr);
    ASSERT_EQ(slots.size(), 1u);
    EXPECT_EQ(slots[0]->load() & engine::clevel::kPending, 0u) << "the reader did not clear it";
  });
}

TEST_F(ClevelDamageTest, OpenAfterACrashClearsPendingBits) {
  create();
  for (int i = 0; i < 50; ++i) ASSERT_TRUE(store_->insert(key(i), value(i)).ok());
  edit([&](pool::Pool& p, Root& root) {
    root.count_valid = 0;  // as after a crash: open counts, and clears PENDING
    for (int i = 0; i < 50; i += 5) {
      // (A key whose two candidate buckets coincide is listed twice.)
      auto slots = slots_of(p, root, key(i), nullptr);
      ASSERT_FALSE(slots.empty());
      for (auto* s : slots) s->fetch_or(engine::clevel::kPending);
    }
  });
  reopen();
  EXPECT_EQ(store_->size(), 50u);
  ASSERT_TRUE(store_->close().ok());
  store_.reset();
  edit([&](pool::Pool& p, Root& root) {
    for (int i = 0; i < 50; i += 5) {
      auto slots = slots_of(p, root, key(i), nullptr);
      ASSERT_FALSE(slots.empty());
      for (auto* s : slots) EXPECT_EQ(s->load() & engine::clevel::kPending, 0u) << key(i);
    }
  });
}

TEST_F(ClevelDamageTest, DeleteCrashedAfterItsRemovedStateIsFinishedByOpen) {
  // A delete's REMOVED state reached media, its retire entry did not (both
  // are covered by one drain), and the crash came before the unlink.
  create();
  for (int i = 0; i < 50; ++i) ASSERT_TRUE(store_->insert(key(i), value(i)).ok());
  edit([&](pool::Pool& p, Root& root) {
    root.count_valid = 0;
    auto slots = slots_of(p, root, key(9), nullptr);
    ASSERT_EQ(slots.size(), 1u);
    auto* item = p.region().at<engine::ItemHeader>(engine::clevel::slot_offset(slots[0]->load()));
    const std::uint64_t st = item->state.load();
    item->state.store(engine::clevel::make_state(engine::clevel::state_generation(st),
                                                 engine::clevel::kRemoved));
  });
  reopen();
  std::string v;
  EXPECT_TRUE(store_->get(key(9), &v).is_not_found());
  EXPECT_EQ(store_->size(), 49u);
  // Unlinked and freed: no slot names an unfinished item, no block leaks.
  EXPECT_TRUE(store_->check().ok()) << store_->check().to_string();
  ASSERT_TRUE(store_->insert(key(9), "again").ok());
  EXPECT_EQ(store_->size(), 50u);
}

TEST_F(ClevelTest, CountAfterACrashStaysExactWhileWritersRun) {
  // The count a crash loses used to be rebuilt by a scan running beside the
  // writers (the first size(), or a remove's shrink check): an insert the
  // scan saw and its counter counted again, a remove subtracted again. The
  // wrong base was saved by close and check() failed after the next open
  // (three rounds of crash, count, writers, reopen).
  options_.set("clevel.initial_level_log2", 12);
  options_.set("clevel.shrink_threshold", 0);
  create();
  ASSERT_TRUE(store_->close().ok());
  store_.reset();
  constexpr int kBase = 20000;
  constexpr int kChurn = 4000;
  std::uint64_t expect = 0;
  for (int round = 0; round < 3; ++round) {
    const std::string prefix = "r" + std::to_string(round) + "-";
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      std::unique_ptr<Store> s;
      if (!Store::open(path_, {}, &s).ok()) _exit(2);
      for (int i = 0; i < kBase; ++i) {
        if (!s->insert(prefix + key(i), value(i)).ok()) _exit(3);
      }
      _exit(0);  // a crash: no close, no saved count
    }
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
    expect += kBase;
    reopen();
    EXPECT_FALSE(store_->stats().clean_shutdown);
    // Two writers insert new keys while size() and stats() run (the old
    // code counted here: each insert ahead of its scan counted twice; it
    // failed 8 of 9 single rounds). Then deletes, counted as they go.
    std::atomic<int> ops{0};
    std::atomic<int> inserted{0};
    auto insert_range = [&](int from) {
      for (int i = from; i < from + kChurn; ++i) {
        if (store_->insert(prefix + key(i), value(i)).ok()) inserted.fetch_add(1);
        ops.fetch_add(1);
      }
    };
    std::thread w1(insert_range, kBase);
    std::thread w2(insert_range, kBase + kChurn);
    while (ops.load() < 200) std::this_thread::yield();
    for (int k = 0; k < 20; ++k) {
      (void)store_->size();
      (void)store_->stats();
    }
    w1.join();
    w2.join();
    EXPECT_EQ(inserted.load(), 2 * kChurn);
    expect += 2 * kChurn;
    for (int i = 0; i < kChurn; ++i) ASSERT_TRUE(store_->remove(prefix + key(i)).ok());
    expect -= kChurn;
    EXPECT_EQ(store_->size(), expect) << "round " << round;
    reopen();  // a clean close saves the count, the next open takes it
    EXPECT_TRUE(store_->stats().clean_shutdown);
    EXPECT_EQ(store_->size(), expect) << "round " << round;
    const Status c = store_->check();
    EXPECT_TRUE(c.ok()) << "round " << round << ": " << c.to_string();
    ASSERT_TRUE(store_->close().ok());
    store_.reset();
  }
}

TEST_F(ClevelTest, TagFiltersKeepRejectingUnderChurnWithoutResizes) {
  // Inserts and deletes of ever new keys at a steady, low load: no resize
  // rebuilds the filters, so a filter that only gains bits fills up and
  // stops sparing negative searches their bucket reads.
  options_.set("clevel.initial_level_log2", 10);  // 1536 buckets, 12288 slots
  options_.set("clevel.shrink_threshold", 0);
  create();
  constexpr int kLive = 1500;
  for (int i = 0; i < kLive; ++i) ASSERT_TRUE(store_->insert(key(i), value(i)).ok());
  for (int i = kLive; i < 40 * kLive; ++i) {
    ASSERT_TRUE(store_->insert(key(i), "v").ok());
    ASSERT_TRUE(store_->remove(key(i - kLive)).ok());
  }
  const Stats before = store_->stats();
  ASSERT_EQ(before.property("clevel.expansions"), 0u) << "the test needs a table that never resized";
  ASSERT_EQ(before.items, static_cast<std::uint64_t>(kLive));
  constexpr int kLookups = 10000;
  std::string v;
  for (int i = 0; i < kLookups; ++i) {
    ASSERT_TRUE(store_->get("absent-" + std::to_string(i), &v).is_not_found());
  }
  const Stats after = store_->stats();
  // Each negative search probes two buckets in each of two levels; with
  // about one live key per bucket nearly every probe is rejected. Counted
  // approximately (striped), so half suffices.
  EXPECT_GE(after.property("clevel.filter_rejections") - before.property("clevel.filter_rejections"), std::uint64_t{2} * kLookups);
  EXPECT_TRUE(store_->check().ok()) << store_->check().to_string();
  for (int i = 39 * kLive; i < 40 * kLive; ++i) {
    ASSERT_TRUE(store_->get(key(i), &v).ok()) << i;
  }
}


// ---------------------------------------------------------------------------
// compare_and_swap racing a rehash thread
// ---------------------------------------------------------------------------

namespace cl = engine::clevel;

// Parks the first rehash thread that reaches `step` for some item, until
// let_go(); writers' waits for held slots are seen meanwhile. The hooks are
// removed, and the rehash thread let go, on every way out of the test. The
// state is shared with the hooks: a rehash thread may still run a copy of
// one after the hooks are removed.
class ParkedMove {
 public:
  static constexpr int kParked = 1;
  static constexpr int kWriterWaited = 2;
  static constexpr int kWriterDone = 4;

  explicit ParkedMove(cl::testing::MoveStep step) {
    cl::testing::set_move_hook([st = st_, step](cl::testing::MoveStep at, std::string_view key) {
      if (at != step || !st->armed.exchange(false)) return;
      st->parked_key = std::string(key);
      st->events.fetch_or(kParked);
      st->events.notify_all();
      st->released.wait(false);
    });
    cl::testing::set_writer_wait_hook([st = st_] {
      if ((st->events.fetch_or(kWriterWaited) & kWriterWaited) == 0) st->events.notify_all();
    });
  }
  ~ParkedMove() {
    let_go();
    cl::testing::set_move_hook(nullptr);
    cl::testing::set_writer_wait_hook(nullptr);
  }
  // Blocks until a rehash thread is parked; the key of its item.
  std::string wait_parked() {
    wait_for(kParked);
    return st_->parked_key;
  }
  // Blocks until a writer waited for a held slot or `done_bit` was raised
  // (by the writer's thread when its call returned); true for the former.
  bool writer_waited_before(int done_bit) {
    wait_for(kWriterWaited | done_bit);
    return (st_->events.load() & kWriterWaited) != 0;
  }
  void raise(int bit) {
    st_->events.fetch_or(bit);
    st_->events.notify_all();
  }
  void let_go() {
    st_->released.store(true);
    st_->released.notify_all();
  }

 private:
  struct State {
    std::atomic<bool> armed{true};
    std::atomic<bool> released{false};
    std::atomic<int> events{0};
    std::string parked_key;  // written before kParked is raised
  };
  void wait_for(int bits) {
    for (int e = st_->events.load(); (e & bits) == 0; e = st_->events.load()) st_->events.wait(e);
  }
  std::shared_ptr<State> st_ = std::make_shared<State>();
};

// Inserts keys until a resize is in progress and `park` holds a rehash
// thread; returns the key of the item it holds.
std::string fill_until_parked(Store* store, ParkedMove* park, int* inserted) {
  int i = 0;
  while (!store->stats().resizing) {
    EXPECT_TRUE(store->insert("key-" + std::to_string(i), "value-" + std::to_string(i)).ok());
    ++i;
  }
  *inserted = i;
  return park->wait_parked();
}

// A swap of a key whose slot a rehash thread has frozen, its copy not made
// yet: the swap owns the item and compares at once, but replaces the
// pointer only after the move (a pointer changed under the mover would be
// overwritten by its copy of the old one). Swaps that fail, and swaps of
// other keys, do not wait for the mover at all.
TEST_F(ClevelTest, CompareAndSwapWaitsForAFrozenSlotAndLosesNothing) {
  create();
  int inserted = 0;
  std::string key;
  std::string before;
  Status swapped;
  {
    ParkedMove park(cl::testing::MoveStep::kFrozen);
    key = fill_until_parked(store_.get(), &park, &inserted);
    ASSERT_TRUE(store_->get(key, &before).ok()) << key;
    EXPECT_TRUE(store_->compare_and_swap(key, std::string_view("not it"), std::string_view("x"))
                    .is_conflict());
    EXPECT_TRUE(store_->compare_and_swap(key, std::nullopt, std::string_view("x")).is_conflict());
    EXPECT_TRUE(store_->compare_and_swap("fresh", std::nullopt, std::string_view("f")).ok());
    EXPECT_TRUE(store_->compare_and_swap("fresh", std::string_view("f"), std::string_view("g")).ok());
    std::thread writer([&] {
      swapped = store_->compare_and_swap(key, std::string_view(before), std::string_view("after"));
      park.raise(ParkedMove::kWriterDone);
    });
    EXPECT_TRUE(park.writer_waited_before(ParkedMove::kWriterDone))
        << "the swap completed while the slot was frozen";
    std::string v;
    EXPECT_TRUE(store_->get(key, &v).ok());
    EXPECT_EQ(v, before) << "the swap took effect while the slot was frozen";
    park.let_go();
    writer.join();
  }
  EXPECT_TRUE(swapped.ok()) << swapped.to_string();
  std::string v;
  EXPECT_TRUE(store_->get(key, &v).ok());
  EXPECT_EQ(v, "after");
  EXPECT_TRUE(store_->get("fresh", &v).ok());
  EXPECT_EQ(v, "g");
  wait_until_stable();
  EXPECT_EQ(store_->size(), static_cast<std::uint64_t>(inserted) + 1);
  Status c = store_->check();
  EXPECT_TRUE(c.ok()) << c.to_string();
  reopen();
  EXPECT_TRUE(store_->get(key, &v).ok());
  EXPECT_EQ(v, "after");
  EXPECT_EQ(store_->size(), static_cast<std::uint64_t>(inserted) + 1);
}

// A swap that removes a key whose item was just copied: the source slot is
// moved out but its clearing is not durable yet. The swap must not clear
// the copy before it is (a crash would keep the old pointer and bring the
// key back), so it waits, then removes it once and for all.
TEST_F(ClevelTest, CompareAndSwapRemovalWaitsForAMovedOutSlot) {
  create();
  int inserted = 0;
  std::string key;
  std::string before;
  Status swapped;
  {
    ParkedMove park(cl::testing::MoveStep::kMovedOut);
    key = fill_until_parked(store_.get(), &park, &inserted);
    ASSERT_TRUE(store_->get(key, &before).ok()) << key;
    EXPECT_TRUE(store_->compare_and_swap(key, std::string_view(before + "?"), std::nullopt)
                    .is_conflict());
    std::thread writer([&] {
      swapped = store_->compare_and_swap(key, std::string_view(before), std::nullopt);
      park.raise(ParkedMove::kWriterDone);
    });
    EXPECT_TRUE(park.writer_waited_before(ParkedMove::kWriterDone))
        << "the removal completed while the source slot was moved out";
    park.let_go();
    writer.join();
  }
  EXPECT_TRUE(swapped.ok()) << swapped.to_string();
  std::string v;
  EXPECT_TRUE(store_->get(key, &v).is_not_found());
  EXPECT_TRUE(store_->compare_and_swap(key, std::string_view(before), std::nullopt).is_conflict());
  EXPECT_TRUE(store_->compare_and_swap(key, std::nullopt, std::nullopt).ok());
  wait_until_stable();
  EXPECT_EQ(store_->size(), static_cast<std::uint64_t>(inserted) - 1);
  Status c = store_->check();
  EXPECT_TRUE(c.ok()) << c.to_string();
  reopen();
  EXPECT_TRUE(store_->get(key, &v).is_not_found());
  EXPECT_EQ(store_->size(), static_cast<std::uint64_t>(inserted) - 1);
}

// A swap that fails leaves the item as it was: owned for the comparison,
// then LIVE again, so later writers neither wait for it nor find it gone,
// and the pool after a reopen holds the value from before.
TEST_F(ClevelTest, FailedCompareAndSwapLeavesTheItemToOtherWriters) {
  create();
  ASSERT_TRUE(store_->insert("k", "v1").ok());
  EXPECT_TRUE(store_->compare_and_swap("k", std::string_view("v0"), std::string_view("v2")).is_conflict());
  EXPECT_TRUE(store_->compare_and_swap("k", std::string_view("v0"), std::nullopt).is_conflict());
  EXPECT_TRUE(store_->update("k", "v3").ok());
  EXPECT_TRUE(store_->compare_and_swap("k", std::string_view("v1"), std::nullopt).is_conflict());
  EXPECT_TRUE(store_->remove("k").ok());
  EXPECT_TRUE(store_->insert("k", "v4").ok());
  EXPECT_TRUE(store_->compare_and_swap("k", std::string_view("v3"), std::string_view("v5")).is_conflict());
  reopen();
  std::string v;
  EXPECT_TRUE(store_->get("k", &v).ok());
  EXPECT_EQ(v, "v4");
  EXPECT_EQ(store_->size(), 1u);
  Status c = store_->check();
  EXPECT_TRUE(c.ok()) << c.to_string();
}


// ---------------------------------------------------------------------------
// Scan (clevel.h, "Scan") across resize steps held by the test hooks
// ---------------------------------------------------------------------------

// One scan, call by call: the keys passed and how often.
struct ScanRun {
  explicit ScanRun(Store* s, std::uint64_t from = 0) : store(s), cursor(from) {}

  Store* store;
  std::uint64_t cursor;
  bool ended = false;
  std::map<std::string, int> seen;

  void step(std::size_t count) {
    std::uint64_t next = 0;
    const Status s = store->scan(
        cursor, count, [&](std::string_view k, std::string_view) { ++seen[std::string(k)]; },
        &next);
    EXPECT_TRUE(s.ok()) << s.to_string();
    if (!s.ok() || next == 0) {
      ended = true;
      return;
    }
    cursor = next;
  }
  void calls(std::size_t count, int n) {
    for (int i = 0; i < n && !ended; ++i) step(count);
  }
  void to_end(std::size_t count = 64) {
    for (int i = 0; i < 1000000 && !ended; ++i) step(count);
    EXPECT_TRUE(ended) << "the scan did not end";
  }
  // Keys "<prefix>0" .. "<prefix>(n-1)" that the scan never passed.
  int missed(const std::string& prefix, int n) const {
    int missing = 0;
    for (int i = 0; i < n; ++i) missing += seen.count(prefix + std::to_string(i)) == 0 ? 1 : 0;
    return missing;
  }
};

// A scan half-way when an expansion starts; a rehash thread is held inside
// a move (frozen, or moved out) while the scan goes on, then let go: every
// key present throughout is passed.
void scan_across_parked_expansion(Store* store, cl::testing::MoveStep step) {
  constexpr int kStable = 150;
  for (int i = 0; i < kStable; ++i) {
    ASSERT_TRUE(store->insert("stable-" + std::to_string(i), "s").ok());
  }
  while (store->stats().resizing) std::this_thread::yield();
  ScanRun run(store);
  run.calls(4, 3);
  ASSERT_FALSE(run.ended);
  {
    ParkedMove park(step);
    int inserted = 0;
    fill_until_parked(store, &park, &inserted);
    run.calls(4, 4);  // each waits for the held round a little, then reads on
    park.let_go();
  }
  run.to_end(8);
  EXPECT_EQ(run.missed("stable-", kStable), 0);
}

TEST_F(ClevelTest, ScanPassesEveryKeyAcrossAFrozenExpansionMove) {
  create();
  scan_across_parked_expansion(store_.get(), cl::testing::MoveStep::kFrozen);
}

TEST_F(ClevelTest, ScanPassesEveryKeyAcrossAMovedOutExpansionMove) {
  create();
  scan_across_parked_expansion(store_.get(), cl::testing::MoveStep::kMovedOut);
}

// A cursor left in the smallest level, which an expansion then empties and
// drops: the scan resumes at the start of the next larger level, where the
// items went, and still passes every key.
TEST_F(ClevelTest, ScanCursorInALevelSinceDroppedResumesInTheNextLarger) {
  create();
  constexpr int kStable = 150;
  for (int i = 0; i < kStable; ++i) {
    ASSERT_TRUE(store_->insert("stable-" + std::to_string(i), "s").ok());
  }
  wait_until_stable();
  ScanRun run(store_.get());
  run.calls(1, 1);  // one bucket of the smallest level (the scan goes up)
  ASSERT_FALSE(run.ended);
  const std::uint64_t expansions = store_->stats().property("clevel.expansions");
  for (int i = 0; store_->stats().property("clevel.expansions") == expansions; ++i) {
    ASSERT_TRUE(store_->insert(key(i), "v").ok());
  }
  wait_until_stable();  // the round ended: the smallest level is gone
  run.to_end(5);
  EXPECT_EQ(run.missed("stable-", kStable), 0);
}

// A scan that has passed the smaller level and is inside the largest when
// a shrink starts; its rehash thread is held inside its first move while
// the scan goes on, then let go and the shrink ends (the largest level is
// dropped). Every key present throughout is passed: the items moved down,
// into levels the scan had passed, so it must start over.
TEST_F(ClevelTest, ScanPassesEveryKeyAcrossAShrink) {
  options_.set("clevel.shrink_threshold", 0.1);
  create();
  constexpr int kStable = 200;
  constexpr int kDoomed = 6000;
  for (int i = 0; i < kStable; ++i) {
    ASSERT_TRUE(store_->insert("stable-" + std::to_string(i), "s").ok());
  }
  for (int i = 0; i < kDoomed; ++i) ASSERT_TRUE(store_->insert(key(i), "d").ok());
  wait_until_stable();
  ScanRun run(store_.get());
  // Past the smaller level (a third of the slots): inside the largest.
  while (!run.ended && run.seen.size() < (kStable + kDoomed) * 6 / 10) run.step(50);
  ASSERT_FALSE(run.ended);
  const std::uint64_t shrinks = store_->stats().property("clevel.shrinks");
  {
    ParkedMove park(cl::testing::MoveStep::kFrozen);
    // Remove until a shrink starts (a remove starts it), then no more: a
    // remove of the held item would wait for the held move.
    for (int i = 0; i < kDoomed && !store_->stats().resizing; ++i) {
      ASSERT_TRUE(store_->remove(key(i)).ok());
    }
    ASSERT_TRUE(store_->stats().resizing) << "no shrink started";
    park.wait_parked();
    run.calls(50, 3);
    park.let_go();
  }
  wait_until_stable();
  EXPECT_GT(store_->stats().property("clevel.shrinks"), shrinks);
  run.to_end(50);
  EXPECT_EQ(run.missed("stable-", kStable), 0);
  Status c = store_->check();
  EXPECT_TRUE(c.ok()) << c.to_string();
}

// Without writes during the scan, a round still running from earlier
// writes does not make the scan pass a key twice: the scan waits for it
// before reading the level it empties.
TEST_F(ClevelTest, ScanWithoutWritesPassesEachKeyOnceWhileARoundRuns) {
  create();
  int n = 0;
  for (; n < 3000 || !store_->stats().resizing; ++n) {
    ASSERT_TRUE(store_->insert(key(n), "v").ok());
  }
  ScanRun run(store_.get());
  run.to_end(10);
  EXPECT_EQ(run.seen.size(), static_cast<std::size_t>(n));
  for (const auto& [k, times] : run.seen) EXPECT_EQ(times, 1) << k;
}

// Hostile cursors: whatever the bits, the scan ends and passes no key twice
// (no writes); a cursor of another epoch starts over.
TEST_F(ClevelTest, ScanFromAnyCursorEndsWithoutDuplicates) {
  create();
  for (int i = 0; i < 500; ++i) ASSERT_TRUE(store_->insert(key(i), "v").ok());
  wait_until_stable();
  for (std::uint64_t cursor :
       {std::uint64_t{1}, std::uint64_t{63} << 42, (std::uint64_t{4} << 42) | 7,
        (std::uint64_t{41} << 42) | ((std::uint64_t{1} << 42) - 1), ~std::uint64_t{0},
        std::uint64_t{0x0001} << 48}) {
    ScanRun run(store_.get(), cursor);
    run.to_end(7);
    for (const auto& [k, times] : run.seen) EXPECT_EQ(times, 1) << k << " from " << cursor;
    if ((cursor >> 48) != 0) {
      // Another epoch (this pool's is 0): the whole scan.
      EXPECT_EQ(run.seen.size(), 500u) << "from " << cursor;
    }
  }
}

}  // namespace
}  // namespace pmhash
