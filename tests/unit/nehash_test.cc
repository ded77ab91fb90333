// Unit tests of the nehash engine (src/engine/nehash/nehash.h).
//
// Most tests drive the engine through engine::find_engine("nehash") with
// keys placed exactly: real keys (so check() applies) found by searching for
// ones whose XXH3 h1 has the wanted top bits, bucket and slot. A fake clock
// drives the expansion-rate times; split hooks park a split at step 9 and
// at the other steps a scan can meet.
// The rest go through the public Store API or edit the pool's bytes to build
// states only a crash or damage can make.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <bit>
#include <deque>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "engine/hash.h"
#include "engine/planted.h"
#include "engine/index.h"
#include "engine/nehash/nehash.h"
#include "engine/nehash/nehash_index.h"
#include "engine/nehash/nehash_testing.h"
#include "engine/option_values.h"
#include "heap/heap.h"
#include "pmhash/store.h"
#include "pool/pool.h"
#include "crash/persistence_sim.h"
#include "scratch_file.h"
#include "sync/rcu.h"

namespace pmhash {
namespace {

namespace nh = engine::nehash;
using nh::GroupHeader;
using nh::NehashIndex;

std::atomic<std::int64_t> fake_now{1};
std::int64_t fake_clock() { return fake_now.load(); }

std::string file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// Real keys whose h1 satisfies `want`, `len` bytes each (<= 8: inline with a
// small value; more: an item). Unique across the whole test binary.
std::vector<std::string> find_keys(const std::function<bool(std::uint64_t)>& want, std::size_t n,
                                   std::size_t len = 12) {
  static std::uint64_t counter = 0;
  std::vector<std::string> out;
  while (out.size() < n) {
    std::string k = std::to_string(counter++);
    k = "k" + std::string(len > k.size() + 1 ? len - k.size() - 1 : 0, '0') + k;
    if (want(engine::make_key(k).h1)) out.push_back(k);
  }
  return out;
}

// h1 has these top `depth` bits, and its home is (bucket, slot) with b bits.
std::function<bool(std::uint64_t)> at(std::uint64_t top, unsigned depth, unsigned b,
                                      unsigned bucket, unsigned slot) {
  return [=](std::uint64_t h1) {
    return nh::top_bits(h1, depth) == top && nh::home_bucket(h1, b) == bucket &&
           nh::home_slot(h1) == slot;
  };
}

class NehashEngineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = testing::scratch_path("pmhash-nehash") + ".pool";
    ::unlink(path_.c_str());
    options_.engine = "nehash";
    options_.pool_size = 32u << 20;
    options_.set("nehash.bucket_bits", 1);
    options_.set("nehash.initial_dir_bits", 1);
    fake_now = 1;
    nh::testing::set_clock(&fake_clock);
  }
  void TearDown() override {
    shut();
    ::unlink(path_.c_str());
    nh::testing::set_clock(nullptr);
    nh::testing::set_max_main_bits(0);
    nh::testing::set_split_hook(nullptr);
  }

  void create() {
    const engine::EngineInfo* info = engine::find_engine("nehash");
    ASSERT_NE(info, nullptr);
    pool::CreateParams p;
    p.engine = "nehash";
    p.size = options_.pool_size;
    p.format_heap = heap::Heap::format;
    ASSERT_TRUE(info->encode_params(options_, p.engine_params.data()).ok());
    ASSERT_TRUE(pool::Pool::create(path_, p, &pool_).ok());
    ASSERT_TRUE(attach(info->create).ok());
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
  Status reopen() {
    shut();
    if (Status s = pool::Pool::open(path_, "nehash", &pool_); !s.ok()) return s;
    Status s = attach(engine::find_engine("nehash")->open);
    if (!s.ok()) {
      heap_.reset();
      pool_.reset();
    }
    return s;
  }
  // Closes cleanly, then runs fn over the mapped pool and its root.
  template <typename Fn>
  void edit(Fn&& fn) {
    shut();
    ASSERT_TRUE(pool::Pool::open(path_, "nehash", &pool_).ok());
    fn(*pool_, *reinterpret_cast<nh::Root*>(pool_->root()));
    pool_->region().persist_all();
    pool_.reset();
  }
  void expect_open_rejects(const std::string& what) {
    const std::string before = file_bytes(path_);
    ASSERT_FALSE(before.empty());
    const Status s = reopen();
    EXPECT_TRUE(s.is_corruption()) << s.to_string();
    EXPECT_NE(s.message().find(what), std::string::npos) << s.message();
    EXPECT_TRUE(file_bytes(path_) == before) << "a failed open changed the pool";
  }

  NehashIndex& nx() { return static_cast<NehashIndex&>(*index_); }
  Status put(const std::string& k, std::string_view v) { return index_->insert(engine::make_key(k), v); }
  Status upd(const std::string& k, std::string_view v) { return index_->update(engine::make_key(k), v); }
  Status del(const std::string& k) { return index_->remove(engine::make_key(k)); }
  Status get(const std::string& k, std::string* v) { return index_->get(engine::make_key(k), v); }
  std::string value_of(const std::string& k) {
    std::string v;
    const Status s = get(k, &v);
    return s.ok() ? v : "<" + s.to_string() + ">";
  }
  Stats stats() {
    Stats st;
    index_->fill_stats(&st);
    return st;
  }
  void expect_check() {
    const Status s = index_->check();
    EXPECT_TRUE(s.ok()) << s.to_string();
  }
  nh::Probe probe(std::uint64_t h1) {
    rcu::ReadGuard guard;
    return nx().directory().probe(h1);
  }
  nh::Probe probe_top(std::uint64_t top, unsigned depth) { return probe(top << (64 - depth)); }
  nh::GroupRef* group_of(const std::string& k) {
    rcu::ReadGuard guard;
    return nx().directory().find(engine::make_key(k).h1).group;
  }
  static std::uint16_t meta(nh::GroupRef* g, unsigned bucket, unsigned slot) {
    return nh::group_metas(g->hdr)[bucket].meta[slot].load();
  }
  nh::Slot& slot(nh::GroupRef* g, unsigned bucket, unsigned slot) {
    return nh::group_buckets(g->hdr, bucket_bits())[bucket].slot[slot];
  }
  unsigned conflict_bucket() const { return 1u << bucket_bits(); }
  // The fixture's nehash.bucket_bits, as the engine reads it.
  unsigned bucket_bits() const {
    return static_cast<unsigned>(engine::option_unsigned(options_, "nehash.bucket_bits"));
  }
  unsigned valid_slots(nh::GroupRef* g) {
    unsigned n = 0;
    for (unsigned k = 0; k <= conflict_bucket(); ++k) {
      for (unsigned s = 0; s < nh::kSlotsPerBucket; ++s) n += nh::meta_valid(meta(g, k, s));
    }
    return n;
  }

  // Splits the group covering (top, depth), which must be at that depth:
  // inserts keys of that prefix whose next bit alternates, all with home
  // (0, 0), until one split happened. Returns the keys inserted.
  std::vector<std::string> split_group_at(std::uint64_t top, unsigned depth) {
    const unsigned b = bucket_bits();
    const auto lower = find_keys(at(top << 1, depth + 1, b, 0, 0), 20);
    const auto upper = find_keys(at((top << 1) | 1, depth + 1, b, 0, 0), 20);
    const std::uint64_t before = stats().property("nehash.splits");
    std::vector<std::string> keys;
    for (std::size_t i = 0; i < 40 && stats().property("nehash.splits") == before; ++i) {
      const std::string& k = i % 2 == 0 ? lower[i / 2] : upper[i / 2];
      EXPECT_TRUE(put(k, "v-" + k).ok()) << k;
      keys.push_back(k);
    }
    EXPECT_EQ(stats().property("nehash.splits"), before + 1);
    return keys;
  }
  void expect_all_found(const std::vector<std::string>& keys) {
    for (const std::string& k : keys) EXPECT_EQ(value_of(k), "v-" + k);
  }

  std::string path_;
  Options options_;
  std::unique_ptr<pool::Pool> pool_;
  std::unique_ptr<heap::Heap> heap_;
  std::unique_ptr<engine::Index> index_;
};

// ---------------------------------------------------------------------------
// Directory transitions (§2.5, §2.6)
// ---------------------------------------------------------------------------

TEST_F(NehashEngineTest, FirstInsertUnderEmptyMainEntryCreatesGroupAtMainDepth) {
  options_.set("nehash.initial_dir_bits", 2);
  create();
  EXPECT_FALSE(probe_top(0b10, 2).has_group);
  fake_now = 1000;
  const auto keys = find_keys(at(0b10, 2, 1, 0, 3), 1);
  ASSERT_TRUE(put(keys[0], "v").ok());
  const nh::Probe p = probe_top(0b10, 2);
  EXPECT_TRUE(p.has_group);
  EXPECT_EQ(p.levels, 1u);
  EXPECT_EQ(p.bits[0], 2u);
  EXPECT_EQ(p.group_depth, 2u);
  EXPECT_EQ(p.group_entries, 1u);
  EXPECT_EQ(p.time[0], 1000) << "Step 1: t0 of the main entry";
  EXPECT_FALSE(probe_top(0b01, 2).has_group);
  EXPECT_EQ(stats().property("nehash.groups"), 1u);
  EXPECT_EQ(value_of(keys[0]), "v");
  expect_check();
}

TEST_F(NehashEngineTest, SplitAtMainDepthCreatesOneTimeDirectoryOfTwoEntries) {
  create();
  fake_now = 100;
  const auto first = find_keys(at(0b1, 1, 1, 1, 5), 1);
  ASSERT_TRUE(put(first[0], "v-" + first[0]).ok());
  fake_now = 500;
  const auto keys = split_group_at(0b1, 1);
  const nh::Probe lo = probe_top(0b10, 2);
  const nh::Probe hi = probe_top(0b11, 2);
  ASSERT_EQ(lo.levels, 2u);
  EXPECT_EQ(lo.bits[1], 1u);
  EXPECT_EQ(lo.depth[1], 2u);
  EXPECT_EQ(lo.time[0], 400) << "Step 2: dt_i = 500 - 100";
  EXPECT_EQ(lo.group_depth, 2u);
  EXPECT_EQ(hi.levels, 2u);
  EXPECT_EQ(hi.group_depth, 2u);
  EXPECT_NE(lo.bg_id, hi.bg_id);
  EXPECT_EQ(probe_top(0b0, 1).levels, 1u) << "the other main entry did not grow";
  EXPECT_EQ(stats().property("nehash.depth"), 2u);
  expect_all_found(keys);
  expect_all_found(first);
  expect_check();
}

class NehashSpreadTest : public NehashEngineTest {
 protected:
  // Main entry 1 splits at t = 500 with t0 = 100 (dt_i = 400); both halves
  // of its one-time node get keys, so t1 = 500 for both.
  void grow_one_time_node() {
    create();
    fake_now = 100;
    keys_ = find_keys(at(0b1, 1, 1, 1, 5), 1);
    ASSERT_TRUE(put(keys_[0], "v-" + keys_[0]).ok());
    fake_now = 500;
    for (const auto& k : split_group_at(0b1, 1)) keys_.push_back(k);
    ASSERT_EQ(probe_top(0b10, 2).time[1], 500);
    ASSERT_EQ(probe_top(0b11, 2).time[1], 500);
  }
  std::vector<std::string> keys_;
};

TEST_F(NehashSpreadTest, TwoTimeDirectoryHasFourEntriesWhenSpreadRateIsOne) {
  grow_one_time_node();
  fake_now = 1500;  // dt_ij = 1000 > dt_i = 400: Spread_rate 1, Rule 1
  for (const auto& k : split_group_at(0b11, 2)) keys_.push_back(k);
  const nh::Probe p = probe_top(0b110, 3);
  ASSERT_EQ(p.levels, 3u);
  EXPECT_EQ(p.bits[2], 2u);
  EXPECT_EQ(p.depth[2], 4u);
  EXPECT_EQ(p.group_depth, 3u);
  EXPECT_EQ(p.group_entries, 2u) << "[g, g, g1, g1]";
  EXPECT_EQ(p.time[1], 1000) << "Step 4: dt_ij";
  EXPECT_NE(probe_top(0b111, 3).bg_id, p.bg_id);
  EXPECT_EQ(stats().property("nehash.rule1_nodes"), 1u);
  EXPECT_EQ(stats().property("nehash.rule2_nodes"), 0u);
  expect_all_found(keys_);
  expect_check();
}

TEST_F(NehashSpreadTest, TwoTimeDirectoryHasTwoEntriesWhenSpreadRateIsZero) {
  grow_one_time_node();
  fake_now = 600;  // dt_ij = 100 < dt_i = 400: Rule 2
  for (const auto& k : split_group_at(0b11, 2)) keys_.push_back(k);
  fake_now = 900;  // dt_ij = 400 == dt_i: a tie is Rule 2 too
  for (const auto& k : split_group_at(0b10, 2)) keys_.push_back(k);
  for (std::uint64_t top : {0b110u, 0b100u}) {
    const nh::Probe p = probe_top(top, 3);
    ASSERT_EQ(p.levels, 3u);
    EXPECT_EQ(p.bits[2], 1u);
    EXPECT_EQ(p.depth[2], 3u);
    EXPECT_EQ(p.group_entries, 1u);
  }
  EXPECT_EQ(probe_top(0b110, 3).time[1], 100);
  EXPECT_EQ(probe_top(0b100, 3).time[1], 400);
  EXPECT_EQ(stats().property("nehash.rule2_nodes"), 2u);
  EXPECT_EQ(stats().property("nehash.rule1_nodes"), 0u);
  expect_all_found(keys_);
  expect_check();
}

TEST_F(NehashEngineTest, TimeValuesFollowSteps1To4) {
  create();
  const unsigned b = 1;
  fake_now = 10;
  const auto first = find_keys(at(0b10, 2, b, 1, 1), 1);
  const auto second = find_keys(at(0b10, 2, b, 1, 2), 1);
  ASSERT_TRUE(put(first[0], "v").ok());
  EXPECT_EQ(probe_top(0b1, 1).time[0], 10) << "Step 1";
  fake_now = 20;
  ASSERT_TRUE(put(second[0], "v").ok());
  EXPECT_EQ(probe_top(0b1, 1).time[0], 10) << "Step 1 stamps the first key only";
  // Fill the group with lower-half keys; the key that splits it is the first
  // of the upper half, which therefore starts empty.
  const auto lower = find_keys(at(0b10, 2, b, 0, 0), 32);
  const auto upper = find_keys(at(0b11, 2, b, 0, 0), 1);
  for (const auto& k : lower) ASSERT_TRUE(put(k, "v").ok());
  fake_now = 50;
  nh::testing::set_split_hook([] { fake_now = 70; });  // the split is stamped at 50
  ASSERT_TRUE(put(upper[0], "v").ok());
  nh::testing::set_split_hook(nullptr);
  EXPECT_EQ(stats().property("nehash.splits"), 1u);
  EXPECT_EQ(probe_top(0b10, 2).time[0], 40) << "Step 2: dt_i = 50 - 10";
  EXPECT_EQ(probe_top(0b10, 2).time[1], 50) << "Step 3: the non-empty half starts at the split";
  EXPECT_EQ(probe_top(0b11, 2).time[1], 70) << "Step 3: the empty half starts at its first key";
  fake_now = 200;
  split_group_at(0b11, 2);
  EXPECT_EQ(probe_top(0b110, 3).time[1], 130) << "Step 4: dt_ij = 200 - 70";
  expect_check();
}

TEST_F(NehashSpreadTest, FullTwoTimeDirectoryExpandsMainToDeepestLeaf) {
  grow_one_time_node();
  const auto zero = find_keys(at(0b0, 1, 1, 1, 1), 1);
  ASSERT_TRUE(put(zero[0], "v-" + zero[0]).ok());
  keys_.push_back(zero[0]);
  fake_now = 600;  // Rule 2: a two-time node of depth 3 under 0b11
  for (const auto& k : split_group_at(0b11, 2)) keys_.push_back(k);
  ASSERT_EQ(probe_top(0b111, 3).depth[2], 3u);
  ASSERT_EQ(stats().property("nehash.full_expansions"), 0u);
  // Group 0b111 fills its two-time node's depth: case D, then case B.
  for (const auto& k : split_group_at(0b111, 3)) keys_.push_back(k);
  EXPECT_EQ(stats().property("nehash.full_expansions"), 1u);
  EXPECT_EQ(nx().directory().main_bits(), 3u) << "the deepest leaf before the expansion";
  const nh::Probe p = probe_top(0b1110, 4);
  ASSERT_EQ(p.levels, 2u) << "after the expansion the split hung a one-time node";
  EXPECT_EQ(p.depth[0], 3u);
  EXPECT_EQ(p.depth[1], 4u);
  EXPECT_EQ(probe_top(0b0, 1).group_entries, 4u) << "a depth-1 group names 2^(3-1) entries";
  EXPECT_EQ(probe_top(0b10, 2).group_entries, 2u);
  EXPECT_EQ(probe_top(0b110, 3).levels, 1u);
  expect_all_found(keys_);
  expect_check();
}

TEST_F(NehashEngineTest, OnlyTheExpandingEntryIsLocked) {
  create();
  const unsigned b = 1;
  // A group under main entry 0 with keys, and one under entry 1 that is
  // full for home (0, 0).
  const auto other = find_keys(at(0b0, 1, b, 1, 2), 3);
  for (const auto& k : other) ASSERT_TRUE(put(k, "v-" + k).ok());
  const auto lower = find_keys(at(0b10, 2, b, 0, 0), 17);
  const auto upper = find_keys(at(0b11, 2, b, 0, 0), 16);
  for (int i = 0; i < 17; ++i) {
    ASSERT_TRUE(put(lower[i], "v-" + lower[i]).ok());
    if (i < 15) {
      ASSERT_TRUE(put(upper[i], "v-" + upper[i]).ok());
    }
  }
  std::atomic<int> parked{0};
  std::atomic<int> release{0};
  nh::testing::set_split_hook([&] {
    parked.store(1);
    parked.notify_all();
    release.wait(0);
  });
  Status splitter_status;
  std::thread splitter([&] { splitter_status = put(upper[15], "v-" + upper[15]); });
  parked.wait(0);
  // The split of entry 1's group is parked at step 9. Everything else works.
  for (const auto& k : other) EXPECT_EQ(value_of(k), "v-" + k);
  const auto fresh = find_keys(at(0b0, 1, b, 0, 7), 1);
  EXPECT_TRUE(put(fresh[0], "v").ok());
  EXPECT_TRUE(upd(other[0], "changed").ok());
  EXPECT_EQ(value_of(other[0]), "changed");
  // Reads of the parked group's keys, both halves, complete too.
  for (int i = 0; i < 17; ++i) EXPECT_EQ(value_of(lower[i]), "v-" + lower[i]);
  for (int i = 0; i < 15; ++i) EXPECT_EQ(value_of(upper[i]), "v-" + upper[i]);
  release.store(1);
  release.notify_all();
  splitter.join();
  nh::testing::set_split_hook(nullptr);
  EXPECT_TRUE(splitter_status.ok()) << splitter_status.to_string();
  EXPECT_EQ(value_of(upper[15]), "v-" + upper[15]);
  expect_check();
}

// compare_and_swap is a write like the others while a group splits. The
// split of entry 1's group g is parked at step 9: the directory already
// names the new group g1 for the upper half, whose keys g1 holds (g still
// holds stale copies, step 10 has not cleaned them). Swaps of upper-half
// keys run in g1 at once (one from the key's value, one from a wrong
// value); swaps of lower-half keys reach g, take the key's home bucket,
// see SPLITTING, back off and wait, and decide after the split (one
// changing a key of the home bucket, one removing a key from the conflict
// bucket). Each swap that backs off bumps the version of g's bucket-0 lock
// word once (nothing else takes that bucket while the split is parked),
// which is how the test knows both wait. The stale copies g cleans later do
// not bring back the values the swaps in g1 replaced.
TEST_F(NehashEngineTest, CompareAndSwapDuringASplitDecidesInTheGroupThatCoversTheKey) {
  create();
  const unsigned b = 1;
  const auto other = find_keys(at(0b0, 1, b, 1, 2), 1);
  ASSERT_TRUE(put(other[0], "v-" + other[0]).ok());
  const auto lower = find_keys(at(0b10, 2, b, 0, 0), 17);
  const auto upper = find_keys(at(0b11, 2, b, 0, 0), 16);
  for (int i = 0; i < 17; ++i) {
    ASSERT_TRUE(put(lower[i], "v-" + lower[i]).ok());
    if (i < 15) {
      ASSERT_TRUE(put(upper[i], "v-" + upper[i]).ok());
    }
  }
  // Bucket 0 (16 slots) and the conflict bucket (16) are full; lower[16],
  // inserted last, sits in the conflict bucket.
  nh::GroupRef* g = group_of(lower[0]);
  ASSERT_EQ(nh::conflict_count(g->lock[0].load()), 16u);
  std::atomic<int> parked{0};
  std::atomic<int> release{0};
  nh::testing::set_split_hook([&] {
    parked.store(1);
    parked.notify_all();
    release.wait(0);
  });
  Status splitter_status;
  std::thread splitter([&] { splitter_status = put(upper[15], "v-" + upper[15]); });
  parked.wait(0);
  auto cas = [&](const std::string& k, std::optional<std::string_view> e,
                 std::optional<std::string_view> d) {
    return index_->compare_and_swap(engine::make_key(k), e, d);
  };
  const std::string moved_value = "a value long enough for an item";
  ASSERT_NE(group_of(upper[0]), g);
  EXPECT_TRUE(cas(upper[0], std::string_view("v-" + upper[0]), std::string_view(moved_value)).ok());
  EXPECT_TRUE(cas(upper[1], std::string_view("not its value"), std::string_view("x")).is_conflict());
  EXPECT_TRUE(cas(upper[2], std::string_view("v-" + upper[2]), std::nullopt).ok());
  EXPECT_EQ(value_of(upper[0]), moved_value);
  const std::uint64_t version = g->lock[0].load() >> nh::kVersionShift;
  Status changed, removed;
  std::vector<std::thread> swappers;
  swappers.emplace_back([&] {
    changed = cas(lower[0], std::string_view("v-" + lower[0]), std::string_view("w"));
  });
  swappers.emplace_back([&] {
    removed = cas(lower[16], std::string_view("v-" + lower[16]), std::nullopt);
  });
  while ((g->lock[0].load() >> nh::kVersionShift) < version + 2) std::this_thread::yield();
  // A swap on another group does not wait for the split either.
  EXPECT_TRUE(cas(other[0], std::string_view("v-" + other[0]), std::string_view("swapped")).ok());
  EXPECT_EQ(value_of(other[0]), "swapped");
  release.store(1);
  release.notify_all();
  splitter.join();
  for (std::thread& t : swappers) t.join();
  nh::testing::set_split_hook(nullptr);
  ASSERT_TRUE(splitter_status.ok()) << splitter_status.to_string();
  EXPECT_TRUE(changed.ok()) << changed.to_string();
  EXPECT_TRUE(removed.ok()) << removed.to_string();
  ASSERT_EQ(stats().property("nehash.splits"), 1u);
  const std::string absent = "<" + Status::NotFound().to_string() + ">";
  auto expect_state = [&] {
    EXPECT_EQ(value_of(upper[0]), moved_value);
    EXPECT_EQ(value_of(upper[1]), "v-" + upper[1]);
    EXPECT_EQ(value_of(upper[2]), absent);
    EXPECT_EQ(value_of(upper[15]), "v-" + upper[15]);
    EXPECT_EQ(value_of(lower[0]), "w");
    EXPECT_EQ(value_of(lower[16]), absent);
    EXPECT_EQ(index_->size(), 1u + 17 + 16 - 2);
    expect_check();
  };
  expect_state();
  ASSERT_TRUE(reopen().ok());
  expect_state();
}

// Each form a swap can take, on a home slot, a conflict slot and a group
// not yet created: a swap that fails changes nothing and writes nothing
// (the pool's bytes stay), one from absent to absent writes nothing either,
// and the conflict counts follow swaps that insert into and remove from
// the conflict bucket (check() verifies them).
TEST_F(NehashEngineTest, CompareAndSwapInEveryPlaceAKeyCanLive) {
  create();
  const unsigned b = 1;
  // Main entry 1 has no group yet.
  const auto nowhere = find_keys(at(0b1, 1, b, 0, 0), 1);
  auto cas = [&](const std::string& k, std::optional<std::string_view> e,
                 std::optional<std::string_view> d) {
    return index_->compare_and_swap(engine::make_key(k), e, d);
  };
  EXPECT_TRUE(cas(nowhere[0], std::string_view("v"), std::string_view("w")).is_conflict());
  EXPECT_TRUE(cas(nowhere[0], std::string_view("v"), std::nullopt).is_conflict());
  EXPECT_TRUE(cas(nowhere[0], std::nullopt, std::nullopt).ok());
  EXPECT_EQ(group_of(nowhere[0]), nullptr) << "nothing was created";
  // Bucket 0 of entry 0's group full of inline pairs, then three keys in
  // the conflict bucket (items).
  const auto home = find_keys(at(0b0, 1, b, 0, 3), 16, 8);
  const auto short_value = [&](std::size_t i) { return "h" + std::to_string(i); };
  for (std::size_t i = 0; i < home.size(); ++i) {
    ASSERT_TRUE(cas(home[i], std::nullopt, std::string_view(short_value(i))).ok());
  }
  const auto spill = find_keys(at(0b0, 1, b, 0, 5), 3);
  for (const auto& k : spill) ASSERT_TRUE(cas(k, std::nullopt, std::string_view("v-" + k)).ok());
  nh::GroupRef* g = group_of(home[0]);
  EXPECT_EQ(nh::conflict_count(g->lock[0].load()), 3u);
  EXPECT_EQ(stats().property("nehash.splits"), 0u);
  const auto group_image = [&] {
    return std::string(reinterpret_cast<const char*>(g->hdr), nh::group_bytes(b));
  };
  const std::string before = group_image();
  // Failing swaps on a home slot (inline) and a conflict slot (an item).
  EXPECT_TRUE(cas(home[2], std::string_view(short_value(3)), std::string_view("x")).is_conflict());
  EXPECT_TRUE(cas(home[2], std::nullopt, std::string_view("x")).is_conflict());
  EXPECT_TRUE(cas(spill[1], std::string_view("v-" + spill[1] + "!"), std::nullopt).is_conflict());
  EXPECT_TRUE(cas(spill[1], std::nullopt, std::nullopt).is_conflict());
  EXPECT_EQ(group_image(), before) << "a failed swap wrote to the group";
  // Successful swaps: inline to inline, inline to an item, an item to an
  // item, and a removal from the conflict bucket.
  EXPECT_TRUE(cas(home[0], std::string_view(short_value(0)), std::string_view("short")).ok());
  EXPECT_TRUE(cas(home[1], std::string_view(short_value(1)), std::string_view("now an item value")).ok());
  EXPECT_TRUE(cas(spill[0], std::string_view("v-" + spill[0]), std::string_view("another item")).ok());
  EXPECT_TRUE(cas(spill[1], std::string_view("v-" + spill[1]), std::nullopt).ok());
  EXPECT_EQ(nh::conflict_count(g->lock[0].load()), 2u);
  EXPECT_EQ(value_of(home[0]), "short");
  EXPECT_EQ(value_of(home[1]), "now an item value");
  EXPECT_EQ(value_of(spill[0]), "another item");
  EXPECT_EQ(value_of(spill[1]), "<" + Status::NotFound().to_string() + ">");
  EXPECT_EQ(index_->size(), 16u + 2);
  expect_check();
  ASSERT_TRUE(reopen().ok());
  EXPECT_EQ(value_of(home[1]), "now an item value");
  EXPECT_EQ(index_->size(), 16u + 2);
  expect_check();
}

// ---------------------------------------------------------------------------
// Groups, slots, splits
// ---------------------------------------------------------------------------

TEST_F(NehashEngineTest, KeyLandsInTheSlotNamedByItsLowestHashBits) {
  create();
  const auto keys = find_keys(at(0b0, 1, 1, 1, 7), 1);
  ASSERT_TRUE(put(keys[0], "a value longer than eight bytes").ok());
  nh::GroupRef* g = group_of(keys[0]);
  ASSERT_NE(g, nullptr);
  EXPECT_TRUE(nh::meta_valid(meta(g, 1, 7)));
  EXPECT_EQ(slot(g, 1, 7).w1.load(), engine::make_key(keys[0]).h1);
  EXPECT_EQ(valid_slots(g), 1u);
  expect_check();
}

TEST_F(NehashEngineTest, CollidingKeyTakesTheNextFreeSlotOfItsHomeBucket) {
  create();
  const auto keys = find_keys(at(0b0, 1, 1, 0, 9), 3);
  for (const auto& k : keys) ASSERT_TRUE(put(k, "v-" + k).ok());
  nh::GroupRef* g = group_of(keys[0]);
  EXPECT_EQ(slot(g, 0, 9).w1.load(), engine::make_key(keys[0]).h1);
  EXPECT_EQ(slot(g, 0, 10).w1.load(), engine::make_key(keys[1]).h1);
  EXPECT_EQ(slot(g, 0, 11).w1.load(), engine::make_key(keys[2]).h1);
  EXPECT_EQ(valid_slots(g), 3u) << "nothing in the conflict bucket";
  EXPECT_EQ(nh::conflict_count(g->lock[0].load()), 0u);
  expect_all_found(keys);
  EXPECT_TRUE(put(keys[2], "again").is_already_exists());
  expect_check();
}

// Slot indexes wrap around: a key whose home slot is 15 goes on at 0.
TEST_F(NehashEngineTest, FreeSlotSearchWrapsAroundTheBucket) {
  create();
  const auto keys = find_keys(at(0b0, 1, 1, 1, 15), 2);
  for (const auto& k : keys) ASSERT_TRUE(put(k, "v-" + k).ok());
  nh::GroupRef* g = group_of(keys[0]);
  EXPECT_EQ(slot(g, 1, 15).w1.load(), engine::make_key(keys[0]).h1);
  EXPECT_EQ(slot(g, 1, 0).w1.load(), engine::make_key(keys[1]).h1);
  expect_all_found(keys);
  expect_check();
}

// The conflict bucket takes a key only when its home bucket is full, and
// the key is counted in its home word; a slot freed in the bucket is used
// again before the conflict bucket.
TEST_F(NehashEngineTest, FullHomeBucketSendsKeysToTheConflictBucket) {
  create();
  // Keys of bucket 0 with assorted home slots, enough to fill it and more.
  const auto keys = find_keys([](std::uint64_t h1) {
    return nh::top_bits(h1, 1) == 0 && nh::home_bucket(h1, 1) == 0;
  }, 19);
  for (int i = 0; i < 16; ++i) ASSERT_TRUE(put(keys[i], "v-" + keys[i]).ok());
  nh::GroupRef* g = group_of(keys[0]);
  for (unsigned s = 0; s < nh::kSlotsPerBucket; ++s) EXPECT_TRUE(nh::meta_valid(meta(g, 0, s))) << s;
  for (unsigned s = 0; s < nh::kSlotsPerBucket; ++s) {
    EXPECT_FALSE(nh::meta_valid(meta(g, conflict_bucket(), s))) << s;
  }
  ASSERT_TRUE(put(keys[16], "v-" + keys[16]).ok());
  ASSERT_TRUE(put(keys[17], "v-" + keys[17]).ok());
  EXPECT_EQ(slot(g, conflict_bucket(), 0).w1.load(), engine::make_key(keys[16]).h1);
  EXPECT_EQ(slot(g, conflict_bucket(), 1).w1.load(), engine::make_key(keys[17]).h1);
  EXPECT_EQ(nh::conflict_count(g->lock[0].load()), 2u);
  EXPECT_EQ(nh::conflict_count(g->lock[1].load()), 0u);
  EXPECT_EQ(stats().property("nehash.splits"), 0u);
  expect_all_found(std::vector<std::string>(keys.begin(), keys.begin() + 18));
  EXPECT_TRUE(put(keys[17], "again").is_already_exists()) << "found in the conflict bucket";
  // A key of the bucket leaves: the next one takes its slot, not the
  // conflict bucket.
  unsigned freed = nh::kSlotsPerBucket;
  for (unsigned s = 0; s < nh::kSlotsPerBucket; ++s) {
    if (slot(g, 0, s).w1.load() == engine::make_key(keys[5]).h1) freed = s;
  }
  ASSERT_LT(freed, nh::kSlotsPerBucket);
  ASSERT_TRUE(del(keys[5]).ok());
  EXPECT_FALSE(nh::meta_valid(meta(g, 0, freed)));
  ASSERT_TRUE(put(keys[18], "v-" + keys[18]).ok());
  EXPECT_EQ(slot(g, 0, freed).w1.load(), engine::make_key(keys[18]).h1);
  EXPECT_EQ(nh::conflict_count(g->lock[0].load()), 2u);
  // The conflict keys stay where they are, and are still found.
  ASSERT_TRUE(del(keys[16]).ok());
  EXPECT_EQ(nh::conflict_count(g->lock[0].load()), 1u);
  EXPECT_TRUE(get(keys[16], nullptr).is_not_found());
  EXPECT_EQ(value_of(keys[17]), "v-" + keys[17]);
  EXPECT_EQ(value_of(keys[18]), "v-" + keys[18]);
  ASSERT_TRUE(reopen().ok());
  g = group_of(keys[0]);
  EXPECT_EQ(nh::conflict_count(g->lock[0].load()), 1u) << "rebuilt at open";
  EXPECT_EQ(value_of(keys[17]), "v-" + keys[17]);
  EXPECT_EQ(index_->size(), 17u);
  expect_check();
}

// A reader of one bucket while its keys move around it: one writer inserts
// keys that all share a home slot (so each lands off it, wherever a slot is
// free at that moment), another inserts and removes keys of the same bucket
// (which also spill into the conflict bucket). Every key acknowledged before
// a get starts is found with its value, and no removed key is ever seen
// with another key's value. Built for TSan: the bucket's seqlock is the
// only thing between the reader and the writers' stores.
TEST_F(NehashEngineTest, ReaderNeverMissesAKeyPlacedOffItsHomeSlotWhileTheBucketChurns) {
  create();
  const unsigned b = 1;
  const auto anchor = find_keys(at(0b0, 1, b, 0, 3), 1, 8);
  const auto placed = find_keys(at(0b0, 1, b, 0, 3), 8, 8);  // each off home slot 3
  const auto churn = find_keys(at(0b0, 1, b, 0, 4), 12, 8);
  ASSERT_TRUE(put(anchor[0], "a").ok());
  auto value = [](const std::string& k) { return k.substr(k.size() - 7); };
  std::atomic<int> acknowledged{0};  // placed[0 .. acknowledged) are in
  std::atomic<bool> done{false};
  std::atomic<int> misses{0}, wrong{0};
  std::thread inserter([&] {
    for (const auto& k : placed) {
      EXPECT_TRUE(put(k, value(k)).ok()) << k;
      acknowledged.fetch_add(1, std::memory_order_release);
    }
  });
  std::thread churner([&] {
    for (int round = 0; round < 200; ++round) {
      for (const auto& k : churn) EXPECT_TRUE(put(k, value(k)).ok()) << k;
      for (const auto& k : churn) EXPECT_TRUE(del(k).ok()) << k;
    }
    done.store(true, std::memory_order_release);
  });
  std::thread reader([&] {
    for (unsigned rounds = 0; !done.load(std::memory_order_acquire) || rounds < 100; ++rounds) {
      const int n = acknowledged.load(std::memory_order_acquire);
      for (int i = 0; i < n; ++i) {
        std::string v;
        const Status st = get(placed[i], &v);
        if (!st.ok()) {
          misses.fetch_add(1);
        } else if (v != value(placed[i])) {
          wrong.fetch_add(1);
        }
      }
      for (const auto& k : churn) {
        std::string v;
        if (get(k, &v).ok() && v != value(k)) wrong.fetch_add(1);
      }
    }
  });
  inserter.join();
  churner.join();
  reader.join();
  EXPECT_EQ(misses.load(), 0);
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_EQ(stats().property("nehash.splits"), 0u) << "the keys stayed within one bucket and its conflict bucket";
  nh::GroupRef* g = group_of(anchor[0]);
  EXPECT_EQ(slot(g, 0, 3).w0.load(), nh::pack_word(anchor[0]));
  for (const auto& k : placed) EXPECT_EQ(value_of(k), value(k));
  // The churn keys are all gone. Which keys spilled into the conflict bucket
  // depends on the interleaving (a placed key inserted while churn keys
  // filled the home bucket stays there): the conflict count follows what the
  // conflict bucket holds, and the two buckets hold the nine keys left.
  for (const auto& k : churn) {
    std::string v;
    EXPECT_TRUE(get(k, &v).is_not_found()) << k;
  }
  unsigned home = 0, spilled = 0;
  for (unsigned s = 0; s < nh::kSlotsPerBucket; ++s) {
    home += nh::meta_valid(meta(g, 0, s));  // the keys' bucket: 0 of 2^b
    spilled += nh::meta_valid(meta(g, conflict_bucket(), s));
  }
  EXPECT_EQ(nh::conflict_count(g->lock[0].load()), spilled);
  EXPECT_EQ(home + spilled, 9u);
  EXPECT_EQ(index_->size(), 9u);
  expect_check();
}

// A pool of layout 1 (each key in its home slot) is refused by name, and
// left as it was: by its pool header and root, or by its root alone.
TEST_F(NehashEngineTest, PoolOfTheOldLayoutIsRefusedWithTheLayoutVersions) {
  const engine::EngineInfo* info = engine::find_engine("nehash");
  pool::CreateParams p;
  p.engine = "nehash";
  p.size = options_.pool_size;
  ASSERT_TRUE(info->encode_params(options_, p.engine_params.data()).ok());
  EXPECT_EQ(p.engine_params[0], nh::kLayoutVersion);
  p.engine_params[0] = nh::kLayoutVersionV1;
  p.format_heap = heap::Heap::format;
  ASSERT_TRUE(pool::Pool::create(path_, p, &pool_).ok());
  ASSERT_TRUE(attach(info->create).ok());
  edit([](pool::Pool&, nh::Root& root) {
    root.magic = nh::kRootMagicV1;
    root.layout_version = nh::kLayoutVersionV1;
  });
  auto expect_refused = [&] {
    const std::string before = file_bytes(path_);
    const Status s = reopen();
    EXPECT_TRUE(s.is_invalid_argument()) << s.to_string();
    EXPECT_NE(s.message().find("nehash layout version 1"), std::string::npos) << s.message();
    EXPECT_NE(s.message().find("layout version 2"), std::string::npos) << s.message();
    EXPECT_TRUE(file_bytes(path_) == before) << "a refused open changed the pool";
  };
  expect_refused();
  // The pool header of layout 2, the root of layout 1.
  ::unlink(path_.c_str());
  create();
  edit([](pool::Pool&, nh::Root& root) {
    root.magic = nh::kRootMagicV1;
    root.layout_version = nh::kLayoutVersionV1;
  });
  expect_refused();
}

TEST_F(NehashEngineTest, ConflictBucketOverflowSplitsTheGroupAndLosesNoInsert) {
  options_.set("nehash.initial_dir_bits", 0);
  create();
  // The home bucket's 16 slots and the 16 conflict slots hold 32 keys of
  // one home.
  const auto keys = find_keys(at(0, 0, 1, 1, 4), 33);
  for (int i = 0; i < 32; ++i) ASSERT_TRUE(put(keys[i], "v-" + keys[i]).ok());
  EXPECT_EQ(stats().property("nehash.splits"), 0u);
  EXPECT_EQ(stats().property("nehash.groups"), 1u);
  ASSERT_TRUE(put(keys[32], "v-" + keys[32]).ok());
  EXPECT_GE(stats().property("nehash.splits"), 1u);
  expect_all_found(keys);
  EXPECT_EQ(index_->size(), 33u);
  expect_check();
}

// Keys of one home slot, lower and upper halves alternating: the bucket
// holds them at slots 0, 1, 2, ... (the upper ones all off their home slot),
// the conflict bucket the rest. The split copies each upper key of the
// bucket to the same slot of g1's bucket, and the conflict bucket's upper
// keys to the free slots of their home bucket in g1.
TEST_F(NehashEngineTest, SplitRedistributesKeysPlacedOffTheirHomeSlot) {
  create();
  const unsigned b = 1;
  const auto lower = find_keys(at(0b10, 2, b, 0, 0), 16);
  const auto upper = find_keys(at(0b11, 2, b, 0, 0), 16);
  const auto upper_elsewhere = find_keys(at(0b11, 2, b, 1, 3), 1);
  for (int i = 0; i < 16; ++i) {
    ASSERT_TRUE(put(lower[i], "v-" + lower[i]).ok());
    ASSERT_TRUE(put(upper[i], "v-" + upper[i]).ok());
  }
  ASSERT_TRUE(put(upper_elsewhere[0], "v-" + upper_elsewhere[0]).ok());
  nh::GroupRef* g = group_of(lower[0]);
  const std::uint64_t g_off = g->off;
  ASSERT_EQ(valid_slots(g), 33u);
  for (unsigned s = 0; s < nh::kSlotsPerBucket; ++s) {
    const std::string& k = s % 2 == 0 ? lower[s / 2] : upper[s / 2];
    ASSERT_EQ(slot(g, 0, s).w1.load(), engine::make_key(k).h1) << "bucket slot " << s;
    const std::string& c = s % 2 == 0 ? lower[8 + s / 2] : upper[8 + s / 2];
    ASSERT_EQ(slot(g, conflict_bucket(), s).w1.load(), engine::make_key(c).h1) << "conflict slot " << s;
  }
  EXPECT_EQ(nh::conflict_count(g->lock[0].load()), 16u);
  const auto trigger = find_keys(at(0b10, 2, b, 0, 0), 1);
  ASSERT_TRUE(put(trigger[0], "v-" + trigger[0]).ok());
  ASSERT_EQ(stats().property("nehash.splits"), 1u);
  EXPECT_EQ(group_of(lower[0])->off, g_off) << "the lower half stays in place";
  nh::GroupRef* g1 = group_of(upper[0]);
  ASSERT_NE(g1, g);
  EXPECT_EQ(g1->hdr->prefix, std::uint64_t{0b11} << 62);
  EXPECT_EQ(g1->hdr->create_depth, 2u);
  for (unsigned i = 0; i < 8; ++i) {
    // A key of the bucket keeps its slot index.
    EXPECT_EQ(slot(g1, 0, 2 * i + 1).w1.load(), engine::make_key(upper[i]).h1) << i;
    // A conflict key goes to the first free slot of its bucket from its
    // home slot on: 0, 2, 4, ...
    EXPECT_EQ(slot(g1, 0, 2 * i).w1.load(), engine::make_key(upper[8 + i]).h1) << i;
  }
  EXPECT_EQ(slot(g1, 1, 3).w1.load(), engine::make_key(upper_elsewhere[0]).h1);
  EXPECT_EQ(valid_slots(g1), 17u);
  EXPECT_EQ(nh::conflict_count(g1->lock[0].load()), 0u) << "g1's conflict bucket is empty";
  // g keeps the lower keys where they were; the trigger takes the first
  // slot the split freed in its bucket.
  EXPECT_EQ(slot(g, 0, 1).w1.load(), engine::make_key(trigger[0]).h1);
  EXPECT_TRUE(nh::meta_valid(meta(g, 0, 1)));
  EXPECT_EQ(valid_slots(g), 17u) << "sixteen lower keys and the trigger";
  EXPECT_EQ(nh::conflict_count(g->lock[0].load()), 8u);
  EXPECT_EQ(stats().property("nehash.items_moved"), 17u) << "the upper half's slots, copied once";
  EXPECT_EQ(stats().property("nehash.bytes_moved"), 17u * 18) << "a 16-byte slot and its 2-byte meta each";
  expect_all_found(lower);
  expect_all_found(upper);
  expect_all_found(upper_elsewhere);
  expect_all_found(trigger);
  expect_check();
  ASSERT_TRUE(reopen().ok());
  expect_all_found(upper);
  expect_check();
}

// The conflict counts in the home lock words (nehash.h, "Conflict counts"):
// one per VALID conflict slot of the bucket, through inserts, removes, a
// split (both halves) and an open.
TEST_F(NehashEngineTest, ConflictCountsFollowTheConflictBucket) {
  create();
  const unsigned b = 1;
  const auto lower = find_keys(at(0b10, 2, b, 0, 0), 9);
  const auto upper = find_keys(at(0b11, 2, b, 0, 0), 23);
  const auto other = find_keys(at(0b10, 2, b, 1, 5), 1);
  auto count = [&](nh::GroupRef* g, unsigned k) { return nh::conflict_count(g->lock[k].load()); };
  for (int i = 0; i < 16; ++i) ASSERT_TRUE(put(upper[i], "v-" + upper[i]).ok());
  for (const auto& k : lower) ASSERT_TRUE(put(k, "v-" + k).ok());
  ASSERT_TRUE(put(other[0], "v-" + other[0]).ok());
  nh::GroupRef* g = group_of(lower[0]);
  EXPECT_EQ(count(g, 0), 9u) << "bucket 0 full of upper keys, the lower ones in the conflict bucket";
  EXPECT_EQ(count(g, 1), 0u);
  ASSERT_TRUE(del(lower[8]).ok());
  EXPECT_EQ(count(g, 0), 8u);
  ASSERT_TRUE(put(lower[8], "v-" + lower[8]).ok());
  for (int i = 16; i < 23; ++i) ASSERT_TRUE(put(upper[i], "v-" + upper[i]).ok());
  EXPECT_EQ(count(g, 0), 16u);
  const auto trigger = find_keys(at(0b10, 2, b, 0, 0), 1);
  ASSERT_TRUE(put(trigger[0], "v-" + trigger[0]).ok());
  ASSERT_EQ(stats().property("nehash.splits"), 1u);
  nh::GroupRef* g1 = group_of(upper[0]);
  ASSERT_NE(g1, g);
  EXPECT_EQ(count(g, 0), 9u) << "the nine lower conflict keys; the trigger went to the emptied bucket";
  EXPECT_EQ(count(g1, 0), 7u) << "g1's bucket 0 holds sixteen upper keys, the other seven did not fit";
  EXPECT_EQ(count(g1, 1), 0u);
  // A miss in a bucket with no conflict keys, and one in a bucket with some.
  const auto absent_home = find_keys(at(0b10, 2, b, 0, 0), 1);
  const auto absent_other = find_keys(at(0b10, 2, b, 1, 5), 1);
  EXPECT_TRUE(index_->get(engine::make_key(absent_home[0]), nullptr).is_not_found());
  EXPECT_TRUE(index_->get(engine::make_key(absent_other[0]), nullptr).is_not_found());
  ASSERT_TRUE(reopen().ok());
  g = group_of(lower[0]);
  g1 = group_of(upper[0]);
  EXPECT_EQ(count(g, 0), 9u) << "rebuilt at open";
  EXPECT_EQ(count(g1, 0), 7u);
  EXPECT_EQ(count(g, 1), 0u);
  expect_all_found(lower);
  expect_all_found(upper);
  expect_all_found(other);
  expect_all_found(trigger);
  expect_check();
}

TEST_F(NehashEngineTest, SplitClearsStaleSlots) {
  create();
  const unsigned b = 1;
  const auto lower = find_keys(at(0b10, 2, b, 0, 0), 1);
  const auto upper = find_keys(at(0b11, 2, b, 0, 0), 31);
  ASSERT_TRUE(put(lower[0], "v").ok());
  for (const auto& k : upper) ASSERT_TRUE(put(k, "v").ok());
  nh::GroupRef* g = group_of(lower[0]);
  const auto trigger = find_keys(at(0b10, 2, b, 0, 0), 1);
  ASSERT_TRUE(put(trigger[0], "v").ok());
  ASSERT_EQ(stats().property("nehash.splits"), 1u);
  // The upper keys' old slots, in the bucket and the conflict bucket, keep
  // their words but are not VALID.
  unsigned stale_words = 0;
  for (unsigned k : {0u, conflict_bucket()}) {
    for (unsigned s = 0; s < nh::kSlotsPerBucket; ++s) {
      const std::uint64_t w1 = slot(g, k, s).w1.load();
      if (nh::top_bits(w1, 2) == 0b11) {
        ++stale_words;
        EXPECT_FALSE(nh::meta_valid(meta(g, k, s))) << "bucket " << k << " slot " << s;
      }
    }
  }
  EXPECT_GE(stale_words, 30u) << "the trigger reused one of them";
  EXPECT_EQ(valid_slots(g), 2u);
  expect_check();
}

// A writer that reaches a splitting group takes its home bucket's lock,
// sees SPLITTING and unlocks (which subtracts its bits). When that lock is
// held while step 10 locks the same bucket to clear its stale slots, the
// split must wait for it: taking the bits over would release them twice,
// and the borrow would leave slot locks set for good (every later reader
// and writer of the bucket would spin) and the conflict count wrong. The
// hook plays that writer on bucket 1, with the lock word operations of
// NehashIndex::lock_bucket and unlock_bucket, and lets it go once the split
// has cleaned bucket 0 (step 10 cleans the buckets in order).
TEST_F(NehashEngineTest, SplitCleaningWaitsForAWriterBackingOffItsHomeLock) {
  create();
  const unsigned b = 1;
  const auto lower = find_keys(at(0b10, 2, b, 0, 0), 2);
  const auto upper = find_keys(at(0b11, 2, b, 0, 0), 31);
  // Stale in bucket 1 after the split, so step 10 locks bucket 1.
  const auto upper_in_bucket_1 = find_keys(at(0b11, 2, b, 1, 15), 1);
  ASSERT_TRUE(put(lower[0], "v").ok());
  ASSERT_TRUE(put(upper_in_bucket_1[0], "v").ok());
  for (const auto& k : upper) ASSERT_TRUE(put(k, "v").ok());
  nh::GroupRef* g = group_of(lower[0]);
  std::atomic<std::uint64_t>& word = g->lock[1];
  const std::uint64_t count_before = nh::conflict_count(word.load());
  std::thread writer;
  nh::testing::set_split_hook([&] {
    // Step 9: the writer takes its home bucket (nobody else holds it).
    std::uint64_t cur = word.load();
    ASSERT_EQ(cur & nh::kSlotLockMask, 0u);
    ASSERT_TRUE(word.compare_exchange_strong(cur, cur | nh::kSlotLockMask));
    writer = std::thread([&word, g] {
      // Bucket 0 cleaned: only lower[0] is left VALID there.
      for (;;) {
        unsigned valid = 0;
        for (unsigned s = 0; s < nh::kSlotsPerBucket; ++s) {
          valid += nh::meta_valid(nh::group_metas(g->hdr)[0].meta[s].load());
        }
        if (valid == 1 && (g->lock[0].load() & nh::kSlotLockMask) == 0) break;
        std::this_thread::yield();
      }
      word.fetch_add(nh::kVersionOne - nh::kSlotLockMask);  // the writer backs off: unlock
    });
  });
  const Status s = put(lower[1], "v");  // home bucket 0 and no free conflict slot: splits
  if (writer.joinable()) writer.join();
  nh::testing::set_split_hook(nullptr);
  ASSERT_TRUE(s.ok()) << s.to_string();
  ASSERT_EQ(stats().property("nehash.splits"), 1u);
  // Checked before any read: a slot whose lock stayed set would hang it.
  for (unsigned k = 0; k <= conflict_bucket(); ++k) {
    ASSERT_EQ(g->lock[k].load() & nh::kSlotLockMask, 0u) << "bucket " << k;
  }
  EXPECT_EQ(nh::conflict_count(word.load()), count_before);
  EXPECT_FALSE(nh::meta_valid(meta(g, 1, 15))) << "the stale copy is cleared";
  EXPECT_EQ(value_of(upper_in_bucket_1[0]), "v");
  const auto fresh = find_keys(at(0b10, 2, b, 1, 15), 1);
  EXPECT_TRUE(put(fresh[0], "v").ok());  // home bucket 1 of g, which the writer held
  EXPECT_EQ(value_of(fresh[0]), "v");
  expect_check();
}

// ---------------------------------------------------------------------------
// Scan (nehash.h, "Scan"): position = h1, whole group ranges per call
// ---------------------------------------------------------------------------

// A group g at depth 1 (prefix 1) that the next insert of a key with home
// bucket 0 and top bits 10 splits: bucket 0 and the conflict bucket are
// full, and bucket 1 holds keys of both halves (so step 10 cleans buckets
// 0, 1 and the conflict bucket, in that order). Group 0 holds a few keys
// below it. `splitter` is the insert that splits.
class NehashScanTest : public NehashEngineTest {
 protected:
  void SetUp() override {
    NehashEngineTest::SetUp();
    create();
    const unsigned b = 1;
    below_ = find_keys([](std::uint64_t h1) { return (h1 >> 63) == 0; }, 5);
    const auto lower = find_keys(at(0b10, 2, b, 0, 0), 2);
    const auto upper = find_keys(at(0b11, 2, b, 0, 0), 31);
    splitter_ = lower[1];
    present_ = below_;
    present_.push_back(lower[0]);
    present_.insert(present_.end(), upper.begin(), upper.end());
    for (const auto& k : find_keys(at(0b10, 2, b, 1, 3), 3)) present_.push_back(k);
    for (const auto& k : find_keys(at(0b11, 2, b, 1, 7), 3)) present_.push_back(k);
    for (const auto& k : present_) ASSERT_TRUE(put(k, "v-" + k).ok()) << k;
    g_ = group_of(lower[0]);
    ASSERT_EQ(g_->depth.load(), 1u);
    ASSERT_EQ(stats().property("nehash.splits"), 0u);
  }
  void TearDown() override {
    nh::testing::set_split_step_hook(nullptr);
    nh::testing::set_range_copy_hook(nullptr);
    NehashEngineTest::TearDown();
  }

  // Scan calls of `count` from `cursor` until the scan ends, or until
  // `max_calls` calls were made (0: no limit, but a failure after 1000);
  // counts each key passed into *seen and checks its value. Returns the
  // cursor it stopped at (0: the end).
  std::uint64_t scan(std::uint64_t cursor, std::size_t count, std::map<std::string, int>* seen,
                     int max_calls = 0) {
    for (int c = 0; max_calls == 0 ? c < 1000 : c < max_calls; ++c) {
      std::uint64_t next = 0;
      std::size_t passed = 0;
      const Status s = index_->scan(
          cursor, count,
          [&](std::string_view k, std::string_view v) {
            ++passed;
            ++(*seen)[std::string(k)];
            EXPECT_EQ(v, "v-" + std::string(k));
          },
          &next);
      EXPECT_TRUE(s.ok()) << s.to_string();
      if (!s.ok() || next == 0) return 0;
      EXPECT_GE(passed, count) << "a call that did not end the scan passed too few keys";
      EXPECT_GT(next, cursor) << "the cursor went back";
      cursor = next;
    }
    if (max_calls == 0) ADD_FAILURE() << "the scan did not end in 1000 calls";
    return cursor;
  }
  // Every key of `keys` passed exactly once, and nothing else but `maybe`
  // (at most once).
  static void expect_exactly(const std::map<std::string, int>& seen,
                             const std::vector<std::string>& keys, const std::string& maybe,
                             const std::string& when) {
    for (const auto& k : keys) {
      const auto it = seen.find(k);
      EXPECT_TRUE(it != seen.end() && it->second == 1)
          << when << ": key " << k << " passed " << (it == seen.end() ? 0 : it->second) << " times";
    }
    std::size_t extra = 0;
    for (const auto& [k, n] : seen) {
      if (k == maybe) {
        EXPECT_EQ(n, 1) << when;
        ++extra;
      }
    }
    EXPECT_EQ(seen.size(), keys.size() + extra) << when << ": a key nobody inserted";
  }

  // Runs the splitting insert in a thread that parks where `park` is
  // called (from a hook the test sets), runs `while_parked`, then lets the
  // split finish.
  void while_split_parked(const std::function<void()>& while_parked) {
    Status st;
    std::thread t([&] { st = put(splitter_, "v-" + splitter_); });
    parked_.wait(0);
    while_parked();
    release_.store(1);
    release_.notify_all();
    t.join();
    ASSERT_TRUE(st.ok()) << st.to_string();
    ASSERT_EQ(stats().property("nehash.splits"), 1u);
  }
  // For hooks: parks the splitting thread (the first time only).
  void park() {
    if (parked_.exchange(1) != 0) return;
    parked_.notify_all();
    release_.wait(0);
  }

  std::vector<std::string> below_, present_;
  std::string splitter_;
  nh::GroupRef* g_ = nullptr;
  std::atomic<int> parked_{0};
  std::atomic<int> release_{0};
};

// At each step of a split a scanner can meet (g1 copied but not named; g
// deepened with stale copies of the upper half; step 10 part way), whole
// scans pass every key once, a scan that began before the split and goes
// on across it does too, and a scan that began while it was parked and
// ends after it as well.
TEST_F(NehashScanTest, EveryKeyIsPassedOnceAtEachStepOfAParkedSplit) {
  for (int step = 0; step < 3; ++step) {
    if (step > 0) {
      TearDown();
      parked_ = 0;
      release_ = 0;
      SetUp();
    }
    const std::string when = "parked at " + std::string(step == 0   ? "kCopied"
                                                        : step == 1 ? "step 9"
                                                                    : "kBucketCleaned");
    if (step == 1) {
      nh::testing::set_split_hook([&] { park(); });
    } else {
      const auto at_step = step == 0 ? nh::testing::SplitStep::kCopied
                                     : nh::testing::SplitStep::kBucketCleaned;
      nh::testing::set_split_step_hook([&, at_step](nh::testing::SplitStep s) {
        if (s == at_step) park();
      });
    }
    // A scan that began before the split: its first call covers group 0.
    std::map<std::string, int> across;
    const std::uint64_t before = scan(0, 1, &across, 1);
    ASSERT_EQ(before, std::uint64_t{1} << 63);
    std::map<std::string, int> began_parked;
    std::uint64_t across_cursor = 0, began_cursor = 0;
    while_split_parked([&] {
      EXPECT_EQ(g_->depth.load(), step == 0 ? 1u : 2u) << when;
      for (std::size_t count : {std::size_t{1}, std::size_t{3}, std::size_t{1000}}) {
        std::map<std::string, int> seen;
        scan(0, count, &seen);
        expect_exactly(seen, present_, "", when + ", count " + std::to_string(count));
      }
      // The scan that began before goes on by one call: g's whole range
      // at kCopied (the end), its lower half once g is deeper.
      across_cursor = scan(before, 3, &across, 1);
      EXPECT_EQ(across_cursor, step == 0 ? 0 : std::uint64_t{3} << 62) << when;
      began_cursor = scan(0, 1, &began_parked, 1);
      EXPECT_EQ(began_cursor, std::uint64_t{1} << 63) << when;
    });
    if (across_cursor != 0) scan(across_cursor, 3, &across);
    expect_exactly(across, present_, splitter_, when + ", scan across the split");
    scan(began_cursor, 2, &began_parked);
    expect_exactly(began_parked, present_, splitter_, when + ", scan begun while parked");
    nh::testing::set_split_hook(nullptr);
    nh::testing::set_split_step_hook(nullptr);
    expect_check();
  }
}

// A cursor no call returned, inside a group's range, and the range split
// since: the scan passes exactly the keys from the cursor on, once each.
TEST_F(NehashScanTest, ACursorInsideARangeThatSplitSincePassesTheKeysFromItOn) {
  std::vector<std::uint64_t> cursors;
  for (const auto& k : present_) cursors.push_back(engine::make_key(k).h1);
  cursors.push_back(std::uint64_t{3} << 62);  // g1's start once split
  ASSERT_TRUE(put(splitter_, "v-" + splitter_).ok());
  ASSERT_EQ(stats().property("nehash.splits"), 1u);
  std::vector<std::string> all = present_;
  all.push_back(splitter_);
  for (std::uint64_t c : cursors) {
    std::vector<std::string> from;
    for (const auto& k : all) {
      if (engine::make_key(k).h1 >= c) from.push_back(k);
    }
    for (std::size_t count : {std::size_t{1}, std::size_t{100}}) {
      std::map<std::string, int> seen;
      scan(c, count, &seen);
      expect_exactly(seen, from, "", "from cursor " + std::to_string(c));
    }
  }
}

// A split that runs to its end between a range copy's first depth load and
// its reads (the copy hook) has cleared the upper half out of g before the
// copy reads it: the copy must see the depth move and start over, or the
// upper half is lost (and the range would end the scan at depth 1).
TEST_F(NehashScanTest, ARangeCopyOvertakenByASplitStartsOver) {
  for (std::size_t count : {std::size_t{1}, std::size_t{1000}}) {
    if (count != 1) {
      TearDown();
      SetUp();
    }
    std::atomic<int> fired{0};
    Status st;
    nh::testing::set_range_copy_hook([&](std::uint64_t x) {
      if (x != (std::uint64_t{1} << 63) || fired.exchange(1) != 0) return;
      std::thread t([&] { st = put(splitter_, "v-" + splitter_); });
      t.join();
    });
    std::map<std::string, int> seen;
    scan(0, count, &seen);
    nh::testing::set_range_copy_hook(nullptr);
    EXPECT_EQ(fired.load(), 1);
    ASSERT_TRUE(st.ok()) << st.to_string();
    ASSERT_EQ(stats().property("nehash.splits"), 1u);
    expect_exactly(seen, present_, splitter_, "count " + std::to_string(count));
  }
}

// Damage: a slot whose item lies outside the heap ends the call with
// Corruption naming the group, and no crash.
TEST_F(NehashScanTest, ADamagedSlotEndsTheCallWithCorruption) {
  nh::GroupRef* g = group_of(below_[0]);
  bool damaged = false;
  unsigned damaged_k = 0, damaged_s = 0;
  std::uint64_t saved = 0;
  for (unsigned k = 0; k <= conflict_bucket() && !damaged; ++k) {
    for (unsigned s = 0; s < nh::kSlotsPerBucket && !damaged; ++s) {
      const std::uint16_t m = meta(g, k, s);
      if (nh::meta_valid(m) && !nh::meta_is_inline(m)) {
        saved = slot(g, k, s).w0.load();
        slot(g, k, s).w0.store(pool::pptr_make(std::uint64_t{1} << 40, 0));
        damaged = true;
        damaged_k = k;
        damaged_s = s;
      }
    }
  }
  ASSERT_TRUE(damaged);
  std::uint64_t next = 42;
  const Status s = index_->scan(0, 10, [](std::string_view, std::string_view) {}, &next);
  EXPECT_TRUE(s.is_corruption()) << s.to_string();
  EXPECT_NE(s.message().find("group " + std::to_string(g->bg_id)), std::string::npos)
      << s.message();
  EXPECT_EQ(next, 0u);
  slot(g, damaged_k, damaged_s).w0.store(saved);  // a clean close for TearDown
}

TEST_F(NehashEngineTest, KeysWithIdenticalHashUseOverflowBlocksWhenTheDirectoryCannotGrow) {
  options_.set("nehash.initial_dir_bits", 0);
  nh::testing::set_max_main_bits(3);
  create();
  // Keys that no split can separate (hand-made hashes: only reads and
  // writes are checked here, not check(), which rehashes keys).
  std::deque<std::string> names;
  auto key = [&](int i) {
    names.push_back("identical-hash-" + std::to_string(i));
    return engine::Key{names.back(), 0xF00DF00DF00DF00Dull, 0x1234};
  };
  for (int i = 0; i < 60; ++i) ASSERT_TRUE(index_->insert(key(i), "v" + std::to_string(i)).ok()) << i;
  EXPECT_EQ(index_->size(), 60u);
  {
    rcu::ReadGuard guard;
    nh::GroupRef* g = nx().directory().find(0xF00DF00DF00DF00Dull).group;
    ASSERT_NE(g, nullptr);
    EXPECT_NE(g->overflow.load(), nullptr);
    EXPECT_NE(g->hdr->overflow.load(), 0u);
  }
  for (int i = 0; i < 60; i += 7) ASSERT_TRUE(index_->remove(key(i)).ok()) << i;
  for (int i = 0; i < 60; ++i) {
    std::string v;
    const Status s = index_->get(key(i), &v);
    if (i % 7 == 0) {
      EXPECT_TRUE(s.is_not_found()) << i;
    } else {
      EXPECT_EQ(v, "v" + std::to_string(i)) << i;
    }
  }
  ASSERT_TRUE(index_->insert(key(7), "back").ok());
  ASSERT_TRUE(reopen().ok());
  std::string v;
  ASSERT_TRUE(index_->get(key(7), &v).ok());
  EXPECT_EQ(v, "back");
  for (int i = 1; i < 60; i += 7) {
    ASSERT_TRUE(index_->get(key(i), &v).ok());
    EXPECT_EQ(v, "v" + std::to_string(i));
  }
}

// Open rebuilds a directory no deeper than a full expansion may make it: a
// group below a main node at the bound hangs again in one-time and
// two-time nodes, instead of a main node 2^3 times the bound.
TEST_F(NehashEngineTest, OpenHangsGroupsDeeperThanTheMainNodeBoundBelowIt) {
  options_.set("nehash.initial_dir_bits", 2);  // the main node starts at its bound
  nh::testing::set_max_main_bits(2);
  create();
  // The same 3000 keys whichever tests ran before in this process (the depth
  // reached depends on the keys' hashes): "k" and the number, 12 bytes.
  auto numbered = [](std::uint64_t from, std::uint64_t n) {
    std::vector<std::string> out;
    for (std::uint64_t i = from; i < from + n; ++i) {
      const std::string digits = std::to_string(i);
      out.push_back("k" + std::string(11 - digits.size(), '0') + digits);
    }
    return out;
  };
  const auto keys = numbered(0, 3000);
  for (const auto& k : keys) {
    fake_now += 1000;  // one-time entries that fill slower than their main entry spread (rule 1)
    const Status s = put(k, "v-" + k);
    ASSERT_TRUE(s.ok()) << s.to_string();
  }
  auto deepest_group = [&] {
    unsigned d = 0;
    nx().directory().for_each_group([&](nh::GroupRef& g) { d = std::max<unsigned>(d, g.depth.load()); });
    return d;
  };
  ASSERT_EQ(deepest_group(), 5u) << "three levels below the main node's bound of 2";
  expect_check();
  const std::uint64_t groups = stats().property("nehash.groups");

  ASSERT_TRUE(reopen().ok());
  EXPECT_EQ(nx().directory().main_bits(), 2u);
  EXPECT_EQ(stats().property("nehash.depth"), 3u) << "one-time and two-time nodes below the main node";
  EXPECT_EQ(stats().property("nehash.groups"), groups);
  EXPECT_EQ(deepest_group(), 5u);
  expect_check();
  for (const auto& k : keys) ASSERT_EQ(value_of(k), "v-" + k) << k;
  for (unsigned i = 0; i < keys.size(); i += 5) ASSERT_TRUE(del(keys[i]).ok()) << keys[i];
  for (const auto& k : numbered(3000, 300)) ASSERT_TRUE(put(k, "w").ok()) << k;
  expect_check();
  ASSERT_TRUE(reopen().ok());
  expect_check();
  for (unsigned i = 0; i < keys.size(); ++i) {
    if (i % 5 == 0) {
      ASSERT_TRUE(get(keys[i], nullptr).is_not_found()) << keys[i];
    } else {
      ASSERT_EQ(value_of(keys[i]), "v-" + keys[i]) << keys[i];
    }
  }
}

TEST_F(NehashEngineTest, SplitThatCannotAllocateReturnsNoSpaceAndKeepsEverything) {
  options_.pool_size = pool::kMinPoolSize;
  options_.set("nehash.bucket_bits", 8);  // a group is a run of one 256 KiB chunk
  options_.set("nehash.initial_dir_bits", 0);
  create();
  const unsigned b = 8;
  // The home bucket's 16 slots and the 16 conflict slots: 32 keys.
  const auto same_home = find_keys(at(0, 0, b, 3, 3), 33, 8);
  for (int i = 0; i < 32; ++i) ASSERT_TRUE(put(same_home[i], "v").ok());
  // Fill the pool with large values under other homes until it refuses.
  std::vector<std::string> big;
  const auto homes = find_keys([](std::uint64_t h1) { return nh::home_bucket(h1, 8) != 3; }, 64);
  for (const auto& k : homes) {
    const Status s = put(k, std::string(100000, 'b'));
    if (s.is_no_space()) break;
    ASSERT_TRUE(s.ok()) << s.to_string();
    big.push_back(k);
  }
  ASSERT_FALSE(big.empty());
  const std::uint64_t used = heap_->used_bytes();
  const Status s = put(same_home[32], "v");  // inline: only the split allocates
  EXPECT_TRUE(s.is_no_space()) << s.to_string();
  EXPECT_EQ(heap_->used_bytes(), used);
  EXPECT_EQ(stats().property("nehash.splits"), 0u);
  EXPECT_EQ(stats().property("nehash.groups"), 1u);
  EXPECT_TRUE(get(same_home[32], nullptr).is_not_found());
  for (int i = 0; i < 32; ++i) EXPECT_EQ(value_of(same_home[i]), "v");
  for (const auto& k : big) EXPECT_EQ(value_of(k), std::string(100000, 'b'));
  expect_check();
  // Room again: the same insert succeeds.
  ASSERT_TRUE(del(big[0]).ok());
  ASSERT_TRUE(del(big[1]).ok());
  heap_->drain_all();
  EXPECT_TRUE(put(same_home[32], "v").ok());
  expect_check();
}

// ---------------------------------------------------------------------------
// Inline and pointer slots, update, remove
// ---------------------------------------------------------------------------

TEST_F(NehashEngineTest, SmallPairsAreInlineLargeOnesUseItems) {
  create();
  const auto short_keys = find_keys(at(0, 1, 1, 0, 1), 2, 8);
  const auto long_keys = find_keys(at(0, 1, 1, 0, 2), 1, 9);
  const std::uint64_t used0 = heap_->used_bytes();
  ASSERT_TRUE(put(short_keys[0], "12345678").ok());
  nh::GroupRef* g = group_of(short_keys[0]);
  const std::uint64_t used1 = heap_->used_bytes();  // the group and the table segment
  EXPECT_GT(used1, used0);
  const std::uint16_t m = meta(g, 0, 1);
  EXPECT_TRUE(nh::meta_is_inline(m));
  EXPECT_EQ(nh::meta_key_len(m), 8u);
  EXPECT_EQ(nh::meta_value_len(m), 8u);
  EXPECT_EQ(slot(g, 0, 1).w0.load(), nh::pack_word(short_keys[0]));
  EXPECT_EQ(slot(g, 0, 1).w1.load(), nh::pack_word("12345678"));
  ASSERT_TRUE(put(short_keys[1], "123456789").ok());  // 9-byte value: an item
  EXPECT_FALSE(nh::meta_is_inline(meta(g, conflict_bucket(), 0)));
  EXPECT_GT(heap_->used_bytes(), used1);
  const std::uint64_t used2 = heap_->used_bytes();
  ASSERT_TRUE(put(long_keys[0], "x").ok());  // 9-byte key: an item
  EXPECT_FALSE(nh::meta_is_inline(meta(g, 0, 2)));
  EXPECT_GT(heap_->used_bytes(), used2);
  EXPECT_EQ(value_of(short_keys[0]), "12345678");
  EXPECT_EQ(value_of(short_keys[1]), "123456789");
  EXPECT_EQ(value_of(long_keys[0]), "x");
  expect_check();
}

TEST_F(NehashEngineTest, UpdateInlineSameLengthIsInPlace) {
  create();
  const auto k = find_keys(at(0, 1, 1, 1, 1), 1, 6);
  ASSERT_TRUE(put(k[0], "abc").ok());
  nh::GroupRef* g = group_of(k[0]);
  const std::uint16_t m = meta(g, 1, 1);
  const std::uint64_t used = heap_->used_bytes();
  ASSERT_TRUE(upd(k[0], "xyz").ok());
  EXPECT_EQ(meta(g, 1, 1), m);
  EXPECT_EQ(slot(g, 1, 1).w1.load(), nh::pack_word("xyz"));
  EXPECT_EQ(heap_->used_bytes(), used);
  EXPECT_EQ(value_of(k[0]), "xyz");
  expect_check();
}

TEST_F(NehashEngineTest, UpdateAcrossInlineLimitChangesForm) {
  create();
  const auto k = find_keys(at(0, 1, 1, 1, 2), 1, 6);
  ASSERT_TRUE(put(k[0], "abc").ok());
  nh::GroupRef* g = group_of(k[0]);
  auto form = [&] { return nh::meta_is_inline(meta(g, 1, 2)) ? "inline" : "pointer"; };
  struct Step {
    std::string value;
    const char* form;
  };
  const std::vector<Step> steps = {
      {"abcdefgh", "inline"},                // inline, other length
      {"abcdefghi", "pointer"},              // inline -> pointer
      {std::string(300, 'p'), "pointer"},    // pointer -> pointer
      {"", "inline"},                        // pointer -> inline, empty value
      {std::string(70000, 'q'), "pointer"},  // inline -> a large item
      {"z", "inline"},
  };
  for (const Step& s : steps) {
    ASSERT_TRUE(upd(k[0], s.value).ok()) << s.value.size();
    EXPECT_STREQ(form(), s.form) << s.value.size();
    EXPECT_EQ(value_of(k[0]), s.value);
    EXPECT_EQ(nx().open_counters().slot_updates_replayed, 0u);
    for (const auto& log : reinterpret_cast<nh::Root*>(pool_->root())->op_log) {
      EXPECT_EQ(log.op.load(), 0u) << "the op log is cleared when an update returns";
    }
  }
  expect_check();  // also: every replaced item was freed (no leak)
}

TEST_F(NehashEngineTest, UpdateMissingKeyIsNotFound) {
  options_.set("nehash.initial_dir_bits", 0);
  create();
  EXPECT_TRUE(upd("absent", "v").is_not_found());
  EXPECT_EQ(stats().property("nehash.groups"), 0u) << "an update creates no group";
  ASSERT_TRUE(put("present", "v").ok());
  EXPECT_TRUE(upd("absent", "v").is_not_found());
  EXPECT_TRUE(upd("absent-and-long-enough-for-an-item", std::string(100, 'x')).is_not_found());
  EXPECT_EQ(index_->size(), 1u);
  expect_check();  // the prepared item was freed
}

TEST_F(NehashEngineTest, RemoveInline) {
  create();
  const auto k = find_keys(at(0, 1, 1, 0, 5), 1, 4);
  ASSERT_TRUE(put(k[0], "v").ok());
  nh::GroupRef* g = group_of(k[0]);
  ASSERT_TRUE(del(k[0]).ok());
  EXPECT_FALSE(nh::meta_valid(meta(g, 0, 5)));
  EXPECT_TRUE(get(k[0], nullptr).is_not_found());
  EXPECT_TRUE(del(k[0]).is_not_found());
  EXPECT_EQ(index_->size(), 0u);
  expect_check();
}

TEST_F(NehashEngineTest, RemovePointerRetiresItsItem) {
  create();
  const auto k = find_keys(at(0, 1, 1, 0, 6), 2);
  ASSERT_TRUE(put(k[0], "v").ok());
  heap_->drain_all();
  const std::uint64_t used = heap_->used_bytes();
  ASSERT_TRUE(put(k[1], std::string(1000, 'i')).ok());
  EXPECT_GT(heap_->used_bytes(), used);
  ASSERT_TRUE(del(k[1]).ok());
  heap_->drain_all();
  EXPECT_EQ(heap_->used_bytes(), used) << "the item is freed after a grace period";
  EXPECT_EQ(value_of(k[0]), "v");
  expect_check();
}

TEST_F(NehashEngineTest, RemoveOffItsHomeSlotKeepsTheHomeKey) {
  create();
  const auto k = find_keys(at(0, 1, 1, 1, 8), 3);
  for (const auto& x : k) ASSERT_TRUE(put(x, "v-" + x).ok());
  nh::GroupRef* g = group_of(k[0]);
  ASSERT_TRUE(del(k[1]).ok());
  EXPECT_FALSE(nh::meta_valid(meta(g, 1, 9)));
  EXPECT_TRUE(nh::meta_valid(meta(g, 1, 8)));
  EXPECT_EQ(value_of(k[0]), "v-" + k[0]);
  EXPECT_EQ(value_of(k[2]), "v-" + k[2]);
  EXPECT_TRUE(get(k[1], nullptr).is_not_found());
  // And the home key goes while the key off its home slot stays.
  ASSERT_TRUE(del(k[0]).ok());
  EXPECT_EQ(value_of(k[2]), "v-" + k[2]);
  expect_check();
}

TEST_F(NehashEngineTest, ReinsertAfterRemoveReusesTheSlot) {
  create();
  const auto k = find_keys(at(0, 1, 1, 1, 10), 2);
  ASSERT_TRUE(put(k[0], "first").ok());
  ASSERT_TRUE(put(k[1], "conflict").ok());
  nh::GroupRef* g = group_of(k[0]);
  ASSERT_TRUE(del(k[0]).ok());
  ASSERT_TRUE(put(k[0], "second").ok());
  EXPECT_TRUE(nh::meta_valid(meta(g, 1, 10)));
  EXPECT_EQ(slot(g, 1, 10).w1.load(), engine::make_key(k[0]).h1);
  EXPECT_EQ(value_of(k[0]), "second");
  EXPECT_EQ(valid_slots(g), 2u);
  expect_check();
}

TEST_F(NehashEngineTest, UpsertInsertsThenUpdates) {
  create();
  const auto k = find_keys(at(0, 1, 1, 0, 11), 1);
  ASSERT_TRUE(index_->upsert(engine::make_key(k[0]), "one").ok());
  EXPECT_EQ(value_of(k[0]), "one");
  ASSERT_TRUE(index_->upsert(engine::make_key(k[0]), std::string(50, 't')).ok());
  EXPECT_EQ(value_of(k[0]), std::string(50, 't'));
  EXPECT_EQ(index_->size(), 1u);
  expect_check();
}

// ---------------------------------------------------------------------------
// Rebuild from Rec_BG_TABLE (§5)
// ---------------------------------------------------------------------------

class NehashRebuildTest : public NehashSpreadTest {
 protected:
  // Groups of depth 1 (prefix 0), 2 (prefix 10) and 3 (110 and 111).
  void grow_mixed_depths() {
    grow_one_time_node();
    fake_now = 600;
    for (const auto& k : split_group_at(0b11, 2)) keys_.push_back(k);
    const auto zero = find_keys(at(0b0, 1, 1, 1, 1), 3);
    for (const auto& k : zero) {
      ASSERT_TRUE(put(k, "v-" + k).ok());
      keys_.push_back(k);
    }
  }
};

TEST_F(NehashRebuildTest, RebuildSizesMainDirectoryByDeepestGroup) {
  grow_mixed_depths();
  ASSERT_EQ(nx().directory().main_bits(), 1u);
  const std::uint64_t groups = stats().property("nehash.groups");
  ASSERT_TRUE(reopen().ok());
  EXPECT_EQ(nx().directory().main_bits(), 3u) << "Steps 2-3: 2^D_L_Max entries";
  EXPECT_EQ(stats().property("nehash.depth"), 1u) << "every group hangs from the main node";
  EXPECT_EQ(stats().property("nehash.groups"), groups);
  expect_all_found(keys_);
  expect_check();
}

TEST_F(NehashRebuildTest, RebuildAttachesShallowGroupToAllItsEntries) {
  grow_mixed_depths();
  const std::uint32_t shallow = probe_top(0b0, 1).bg_id;
  ASSERT_TRUE(reopen().ok());
  for (std::uint64_t top = 0; top < 4; ++top) {
    const nh::Probe p = probe_top(top, 3);
    EXPECT_EQ(p.bg_id, shallow) << top;
    EXPECT_EQ(p.group_entries, 4u);
    EXPECT_EQ(p.group_depth, 1u);
  }
  EXPECT_EQ(probe_top(0b100, 3).group_entries, 2u);
  EXPECT_EQ(probe_top(0b110, 3).group_entries, 1u);
  // The shallow group splits in the directory it has now (case A).
  auto nodes_made = [&] {
    const Stats st = stats();
    return st.property("nehash.one_time_nodes") + st.property("nehash.two_time_nodes") +
           st.property("nehash.full_expansions");
  };
  const std::uint64_t nodes = nodes_made();
  for (const auto& k : split_group_at(0b0, 1)) keys_.push_back(k);
  EXPECT_EQ(nodes_made(), nodes) << "case A creates no node";
  EXPECT_EQ(probe_top(0b000, 3).group_entries, 2u);
  EXPECT_NE(probe_top(0b010, 3).bg_id, shallow);
  EXPECT_EQ(probe_top(0b010, 3).group_entries, 2u);
  expect_all_found(keys_);
  expect_check();
}

// Step 6 done physically (nehash_split_shallow_on_open): after open a
// thread splits the depth-1 group (4 main entries) and the depth-2 group
// (2 entries) until each of the 8 entries has its own group.
TEST_F(NehashRebuildTest, SplitShallowOnOpenGivesEveryMainEntryItsOwnGroup) {
  grow_mixed_depths();
  const std::uint64_t groups = stats().property("nehash.groups");
  options_.set("nehash.split_shallow_on_open", true);
  ASSERT_TRUE(reopen().ok());
  const Status s = nx().wait_shallow_splits();
  ASSERT_TRUE(s.ok()) << s.to_string();
  ASSERT_EQ(nx().directory().main_bits(), 3u);
  for (std::uint64_t top = 0; top < 8; ++top) {
    const nh::Probe p = probe_top(top, 3);
    EXPECT_EQ(p.group_entries, 1u) << top;
    EXPECT_EQ(p.group_depth, 3u) << top;
  }
  EXPECT_EQ(stats().property("nehash.groups"), groups + 3 + 1);
  EXPECT_EQ(stats().property("nehash.splits"), 4u);
  EXPECT_EQ(stats().property("nehash.depth"), 1u) << "case A only: no node hangs from the main node";
  expect_all_found(keys_);
  expect_check();
  // The splits are durable: a plain open finds the same shape.
  options_.set("nehash.split_shallow_on_open", false);
  ASSERT_TRUE(reopen().ok());
  EXPECT_EQ(stats().property("nehash.groups"), groups + 4);
  for (std::uint64_t top = 0; top < 8; ++top) EXPECT_EQ(probe_top(top, 3).group_entries, 1u);
  expect_all_found(keys_);
  expect_check();
}

TEST_F(NehashRebuildTest, SplitShallowOnOpenRunsAlongsideWriters) {
  grow_mixed_depths();
  options_.set("nehash.split_shallow_on_open", true);
  ASSERT_TRUE(reopen().ok());
  // Writers go on while the thread splits (no wait before them): keys of
  // the shallow group's range, which its splits move between groups.
  const auto more = find_keys([](std::uint64_t h1) { return nh::top_bits(h1, 1) == 0; }, 12);
  for (const auto& k : more) {
    ASSERT_TRUE(put(k, "v-" + k).ok()) << k;
    keys_.push_back(k);
  }
  for (std::size_t i = 0; i < keys_.size(); i += 3) {
    ASSERT_TRUE(upd(keys_[i], "v-" + keys_[i]).ok()) << keys_[i];
  }
  ASSERT_TRUE(nx().wait_shallow_splits().ok());
  for (std::uint64_t top = 0; top < 8; ++top) EXPECT_GE(probe_top(top, 3).group_depth, 3u) << top;
  expect_all_found(keys_);
  EXPECT_EQ(index_->size(), keys_.size());
  expect_check();
}

TEST_F(NehashRebuildTest, CloseStopsTheShallowSplitAndTheRestWaitsForTheNextOpen) {
  grow_mixed_depths();
  options_.set("nehash.split_shallow_on_open", true);
  ASSERT_TRUE(reopen().ok());
  shut();  // at any point of the background work: at most the split in progress finishes
  options_.set("nehash.split_shallow_on_open", false);
  ASSERT_TRUE(reopen().ok());
  expect_all_found(keys_);
  expect_check();
  options_.set("nehash.split_shallow_on_open", true);
  ASSERT_TRUE(reopen().ok());
  ASSERT_TRUE(nx().wait_shallow_splits().ok());
  for (std::uint64_t top = 0; top < 8; ++top) EXPECT_EQ(probe_top(top, 3).group_entries, 1u) << top;
  expect_all_found(keys_);
  expect_check();
}

TEST_F(NehashEngineTest, RebuildOfEmptyPoolUsesInitialDirectoryBits) {
  options_.set("nehash.initial_dir_bits", 5);
  create();
  ASSERT_TRUE(reopen().ok());
  EXPECT_EQ(nx().directory().main_bits(), 5u);
  EXPECT_EQ(stats().property("nehash.groups"), 0u);
  EXPECT_EQ(index_->size(), 0u);
  EXPECT_EQ(nx().open_counters().groups_read, 0u);
  expect_check();
}

TEST_F(NehashEngineTest, RebuildAttachesEmptyGroups) {
  create();
  const auto k = find_keys(at(0b1, 1, 1, 0, 0), 1);
  ASSERT_TRUE(put(k[0], "v").ok());
  ASSERT_TRUE(del(k[0]).ok());
  const std::uint32_t id = probe_top(0b1, 1).bg_id;
  ASSERT_TRUE(reopen().ok());
  const nh::Probe p = probe_top(0b1, 1);
  EXPECT_TRUE(p.has_group) << "an empty group is attached by its header's prefix";
  EXPECT_EQ(p.bg_id, id);
  ASSERT_TRUE(put(k[0], "w").ok());
  EXPECT_EQ(stats().property("nehash.groups"), 1u);
  expect_check();
}

TEST_F(NehashEngineTest, OpenReadsOneHeaderPerGroupAndNoSlot) {
  options_.set("nehash.initial_dir_bits", 0);
  create();
  for (const auto& k : find_keys([](std::uint64_t) { return true; }, 3000)) {
    ASSERT_TRUE(put(k, "v").ok());
  }
  const std::uint64_t groups = stats().property("nehash.groups");
  ASSERT_GT(groups, 20u);
  ASSERT_TRUE(reopen().ok());
  EXPECT_EQ(nx().open_counters().groups_read, groups);
  EXPECT_EQ(nx().open_counters().slots_read, 0u);
  EXPECT_LE(std::uint64_t{1} << nx().directory().main_bits(), 8 * groups);
  EXPECT_EQ(index_->size(), 3000u);
  expect_check();
}

// The slot of an inline key and its meta, for op-log records made by hand.
struct SlotAddress {
  std::uint64_t slot = 0, meta = 0;
};

class NehashOpLogTest : public NehashEngineTest {
 protected:
  SlotAddress address_of(const std::string& k, unsigned bucket, unsigned s) {
    nh::GroupRef* g = group_of(k);
    return {pool_->region().offset_of(&slot(g, bucket, s)),
            pool_->region().offset_of(&nh::group_metas(g->hdr)[bucket].meta[s])};
  }
  // Writes a slot-update record into op log 3: the key's new value `v`
  // (inline), committed or not.
  void write_record(const std::string& k, const SlotAddress& a, const std::string& v,
                    bool committed) {
    const engine::Key key = engine::make_key(k);
    edit([&](pool::Pool&, nh::Root& root) {
      nh::OpLog& log = root.op_log[3];
      log.meta.store(nh::log_meta(nh::meta_inline(k.size(), v.size(), nh::fingerprint(key.h2)), a.meta));
      log.w0.store(nh::pack_word(k));
      log.w1.store(nh::pack_word(v));
      log.op.store(committed ? nh::op_slot_update(a.slot) : 0);
    });
  }
};

TEST_F(NehashOpLogTest, RebuildReplaysCommittedSlotUpdate) {
  create();
  const auto k = find_keys(at(0, 1, 1, 1, 12), 1, 5);
  ASSERT_TRUE(put(k[0], "old").ok());
  const SlotAddress a = address_of(k[0], 1, 12);
  write_record(k[0], a, "newval", /*committed=*/true);
  ASSERT_TRUE(reopen().ok());
  EXPECT_EQ(nx().open_counters().slot_updates_replayed, 1u);
  EXPECT_EQ(value_of(k[0]), "newval");
  EXPECT_EQ(reinterpret_cast<nh::Root*>(pool_->root())->op_log[3].op.load(), 0u);
  expect_check();
}

TEST_F(NehashOpLogTest, RebuildIgnoresUncommittedSlotUpdate) {
  create();
  const auto k = find_keys(at(0, 1, 1, 1, 13), 1, 5);
  ASSERT_TRUE(put(k[0], "old").ok());
  const SlotAddress a = address_of(k[0], 1, 13);
  write_record(k[0], a, "newval", /*committed=*/false);
  ASSERT_TRUE(reopen().ok());
  EXPECT_EQ(nx().open_counters().slot_updates_replayed, 0u);
  EXPECT_EQ(value_of(k[0]), "old");
  expect_check();
}

TEST_F(NehashOpLogTest, SlotUpdateNamingNoSlotIsRejectedUnchanged) {
  create();
  const auto k = find_keys(at(0, 1, 1, 1, 14), 1, 5);
  ASSERT_TRUE(put(k[0], "old").ok());
  SlotAddress a = address_of(k[0], 1, 14);
  a.slot += 4096 * 16;  // far outside any group
  write_record(k[0], a, "newval", /*committed=*/true);
  expect_open_rejects("names no slot of a live group");
}

TEST_F(NehashEngineTest, OverlappingGroupsAreRejectedUnchanged) {
  create();
  const auto k0 = find_keys(at(0b0, 1, 1, 0, 0), 1);
  const auto k1 = find_keys(at(0b1, 1, 1, 0, 0), 1);
  ASSERT_TRUE(put(k0[0], "v").ok());
  ASSERT_TRUE(put(k1[0], "v").ok());
  const std::uint64_t g1 = group_of(k1[0])->off;
  // Group 1's header now claims prefix 0, like group 0: consistent with its
  // own entry, but both cover prefix 0b0.
  edit([&](pool::Pool& p, nh::Root&) { p.region().at<GroupHeader>(g1)->prefix = 0; });
  expect_open_rejects("both cover prefix 0b0");
}

TEST_F(NehashEngineTest, GroupHeaderNotMatchingItsEntryIsRejectedUnchanged) {
  create();
  const auto k = find_keys(at(0b1, 1, 1, 0, 0), 1);
  ASSERT_TRUE(put(k[0], "v").ok());
  const std::uint64_t off = group_of(k[0])->off;
  edit([&](pool::Pool& p, nh::Root&) { p.region().at<GroupHeader>(off)->bg_id += 7; });
  expect_open_rejects("does not match recovery-table entry 0");
}

TEST_F(NehashEngineTest, CheckReportsSlotOutsideItsGroupRange) {
  create();
  const auto k0 = find_keys(at(0b0, 1, 1, 0, 3), 1, 4);
  const auto k1 = find_keys(at(0b1, 1, 1, 0, 4), 1, 4);
  ASSERT_TRUE(put(k0[0], "v").ok());
  ASSERT_TRUE(put(k1[0], "v").ok());
  expect_check();
  // Copy k0's inline slot into group 1, at k0's home.
  nh::GroupRef* g0 = group_of(k0[0]);
  nh::GroupRef* g1 = group_of(k1[0]);
  slot(g1, 0, 3).w0.store(slot(g0, 0, 3).w0.load());
  slot(g1, 0, 3).w1.store(slot(g0, 0, 3).w1.load());
  nh::group_metas(g1->hdr)[0].meta[3].store(meta(g0, 0, 3));
  const Status s = index_->check();
  EXPECT_TRUE(s.is_corruption());
  EXPECT_NE(s.message().find("outside its group's range"), std::string::npos) << s.to_string();
}

TEST_F(NehashEngineTest, CheckReportsLeafNotCoveringItsGroup) {
  create();
  const auto k0 = find_keys(at(0b0, 1, 1, 0, 3), 1);
  const auto k1 = find_keys(at(0b1, 1, 1, 0, 4), 1);
  ASSERT_TRUE(put(k0[0], "v").ok());
  ASSERT_TRUE(put(k1[0], "v").ok());
  {
    rcu::ReadGuard guard;
    const nh::Leaf leaf = nx().directory().find(engine::make_key(k1[0]).h1);
    leaf.node()->point(leaf.entry()).store(reinterpret_cast<std::uintptr_t>(group_of(k0[0])));
  }
  const Status s = index_->check();
  EXPECT_TRUE(s.is_corruption());
  EXPECT_NE(s.message().find("does not cover it"), std::string::npos) << s.to_string();
}

// ---------------------------------------------------------------------------
// Crash images taken mid-split (§4.2)
// ---------------------------------------------------------------------------

class NehashCrashTest : public NehashEngineTest {
 protected:
  struct Recovered {
    Status open, check;
    NehashIndex::OpenCounters counters;
    std::map<std::string, std::string> values;
    // With crash_recovery: the images a crash at each drain of this
    // recovery may leave, each recovered in turn.
    std::vector<Recovered> again;
  };
  // Opens a copy of a crash image as a pool of its own, and reads it back.
  // With `crash_recovery`, the recovery is crashed too: at each of its
  // drains, every image the crash may leave (any subset of the dirty lines,
  // torn lines) is recovered again, into `again`.
  Recovered recover(const std::vector<std::byte>& image, const std::vector<std::string>& keys,
                    bool crash_recovery = false) {
    Recovered r;
    const std::string copy = path_ + (crash_recovery ? ".image-crashed" : ".image");
    {
      std::ofstream out(copy, std::ios::binary | std::ios::trunc);
      out.write(reinterpret_cast<const char*>(image.data()), static_cast<std::streamsize>(image.size()));
    }
    std::unique_ptr<pool::Pool> p;
    std::unique_ptr<heap::Heap> h;
    std::unique_ptr<engine::Index> index;
    std::vector<std::vector<std::byte>> crashed;
    r.open = pool::Pool::open(copy, "nehash", &p);
    if (r.open.ok()) r.open = heap::Heap::open(p->region(), p->heap_offset(), p->heap_size(), &h);
    if (r.open.ok()) {
      engine::Env env{p.get(), h.get(), options_};
      // The image is what media holds; the recovery's drains are the crash
      // points.
      std::unique_ptr<testing::PersistenceSim> sim;
      std::mt19937_64 rng(17);
      if (crash_recovery) {
        sim = std::make_unique<testing::PersistenceSim>(p->region());
        sim->set_crash_point_hook([&](const testing::PersistenceSim& s) {
          const std::vector<std::uint64_t> dirty = s.dirty_units();
          for (const testing::CrashChoice& c : testing::crash_choices(s, dirty, 5, 8, rng, 12)) {
            crashed.push_back(s.crash_image(c));
          }
        });
      }
      r.open = engine::find_engine("nehash")->open(env, &index);
      sim.reset();
    }
    if (r.open.ok()) {
      p->begin_session();
      r.counters = static_cast<NehashIndex&>(*index).open_counters();
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
    for (const std::vector<std::byte>& c : crashed) r.again.push_back(recover(c, keys));
    return r;
  }
};

// What a crash at the split's drains leaves, over every image: violations
// (an image that does not open, fails check(), or lost or changed a key)
// and the recovery rows taken.
struct SplitExploration {
  std::uint64_t images = 0;
  std::uint64_t recovery_images = 0;  // images of a crashed recovery
  std::uint64_t violations = 0;
  std::string first;
  int split_drains = 0;
  NehashIndex::OpenCounters rows;
};

class NehashSplitCrashTest : public NehashCrashTest {
 protected:
  void TearDown() override {
    engine::planted::bugs.store(engine::planted::kNone);
    NehashCrashTest::TearDown();
  }
  // With crash_recovery, each image's recovery is crashed at its drains
  // too, and every image that leaves is judged the same way.
  SplitExploration explore_split(bool crash_recovery = false) {
    SplitExploration out;
    testing::GranularityGuard granularity;
    granularity.force("cache_line");
    options_.pool_size = pool::kMinPoolSize;
    options_.set("nehash.initial_dir_bits", 0);
    create();
    EXPECT_EQ(pool_->region().granularity(), media::Granularity::kCacheLine);
    // 32 inline keys of one home bucket fill it and the conflict bucket;
    // the 33rd splits the group.
    const auto keys = find_keys(at(0, 0, 1, 1, 6), 33, 8);
    for (int i = 0; i < 32; ++i) EXPECT_TRUE(put(keys[i], "v" + std::to_string(i)).ok());
    pool_->region().persist_all();
    testing::PersistenceSim sim(pool_->region());
    const auto* root = reinterpret_cast<const nh::Root*>(pool_->root());
    std::mt19937_64 rng(6);
    auto violation = [&](const std::string& what) {
      if (++out.violations <= 3) out.first += what + "\n";
    };
    // The split runs outside any read-side section, so its images are
    // recovered right at the crash point.
    sim.set_crash_point_hook([&](const testing::PersistenceSim& s) {
      // The split's drains are the ones made while its record is set.
      bool in_split = false;
      for (const auto& log : root->op_log) in_split |= nh::op_kind(log.op.load()) == nh::kOpSplit;
      if (!in_split) return;
      ++out.split_drains;
      const std::vector<std::uint64_t> dirty = s.dirty_units();
      std::vector<testing::CrashChoice> choices = testing::crash_choices(s, dirty, 5, 8, rng, 12);
      // A line may reach media in part (the two table words of a split
      // share a line): each dirty word of a line alone, and all but it,
      // the rest of the dirty lines written or not.
      for (std::uint64_t line : dirty) {
        const std::uint8_t words = s.dirty_words(line);
        if (std::popcount(words) < 2) continue;
        std::vector<std::uint64_t> others;
        for (std::uint64_t o : dirty) {
          if (o != line) others.push_back(o);
        }
        for (unsigned w = 0; w < 8; ++w) {
          const auto bit = static_cast<std::uint8_t>(1u << w);
          if ((words & bit) == 0) continue;
          for (const auto& rest : {std::vector<std::uint64_t>{}, others}) {
            choices.push_back({rest, {{line, bit}}});
            choices.push_back({rest, {{line, static_cast<std::uint8_t>(words & ~bit)}}});
          }
        }
      }
      auto judge = [&](const Recovered& r, const std::string& where) {
        if (!r.open.ok() || !r.check.ok()) {
          violation(where + ": " + r.open.to_string() + " / " + r.check.to_string());
          return;
        }
        for (int i = 0; i < 32; ++i) {
          if (!r.values.count(keys[i]) || r.values.at(keys[i]) != "v" + std::to_string(i)) {
            violation(where + ": key " + std::to_string(i) + " lost or changed");
          }
        }
        if (r.values.count(keys[32])) violation(where + ": the unacknowledged insert is there");
      };
      for (const testing::CrashChoice& c : choices) {
        const Recovered r = recover(s.crash_image(c), keys, crash_recovery);
        ++out.images;
        const std::string where = "split drain " + std::to_string(out.split_drains) + ", " + c.describe();
        judge(r, where);
        for (std::size_t k = 0; k < r.again.size(); ++k) {
          judge(r.again[k], where + ", then its recovery crashed (image " + std::to_string(k) + ")");
        }
        out.recovery_images += r.again.size();
        if (!r.open.ok() || !r.check.ok()) continue;
        out.rows.splits_not_committed += r.counters.splits_not_committed;
        out.rows.splits_bump_lost += r.counters.splits_bump_lost;
        out.rows.splits_rolled_back += r.counters.splits_rolled_back;
        out.rows.splits_committed += r.counters.splits_committed;
      }
    });
    EXPECT_TRUE(put(keys[32], "v32").ok());
    sim.set_crash_point_hook(nullptr);
    return out;
  }
};

TEST_F(NehashSplitCrashTest, RebuildFromCrashImagesTakenMidSplit) {
  const SplitExploration e = explore_split();
  EXPECT_EQ(e.split_drains, 3) << "drains #1, #2 and #3 of the split";
  EXPECT_GT(e.images, 20u);
  EXPECT_EQ(e.violations, 0u) << e.first;
  EXPECT_GE(e.rows.splits_not_committed, 1u) << "NotCommitted";
  EXPECT_GE(e.rows.splits_bump_lost, 1u) << "CommittedBumpLost";
  EXPECT_GE(e.rows.splits_rolled_back, 1u) << "BumpAloneRollsBack";
  EXPECT_GE(e.rows.splits_committed, 1u) << "Committed";
  expect_check();
}

// Recovery finishes a committed split (it cleans the group's stale slots)
// and must be restartable: a crash at any drain of it leaves an image that
// recovers again. (Recovery once cleared the split record in the same drain
// as the cleaning: an image with the cleared record and a stale slot kept a
// key outside its group's range.)
TEST_F(NehashSplitCrashTest, ACrashDuringRecoveryOfASplitRecoversAgain) {
  const SplitExploration e = explore_split(/*crash_recovery=*/true);
  EXPECT_GT(e.recovery_images, 100u);
  EXPECT_EQ(e.violations, 0u) << e.first;
  EXPECT_GE(e.rows.splits_bump_lost + e.rows.splits_committed, 1u) << "no recovery cleaned a group";
}

TEST_F(NehashSplitCrashTest, PlantedSplitNotFinishedIsCaught) {
  engine::planted::bugs.store(nh::testing::kSplitNotFinished);
  EXPECT_GT(explore_split().violations, 0u);
}

TEST_F(NehashSplitCrashTest, PlantedTableBeforeGroupDurableIsCaught) {
  engine::planted::bugs.store(nh::testing::kTableBeforeGroupDurable);
  const SplitExploration e = explore_split();
  EXPECT_EQ(e.split_drains, 2) << "drain #1 left out";
  EXPECT_GT(e.violations, 0u);
}

// Crashes every write form at each of its drains: every image a crash may
// leave (any subset of the dirty lines, torn lines) must recover, pass
// check(), and show the written key as before or after the write and every
// other key as before. Returns the violations (the first few described).
struct Exploration {
  std::uint64_t images = 0;
  std::uint64_t recovery_images = 0;  // images of a crashed recovery
  std::uint64_t violations = 0;
  std::string first;
};

class NehashWriteCrashTest : public NehashCrashTest {
 protected:
  // With crash_recovery, each image's recovery is crashed at its drains
  // too, and every image that leaves is judged the same way. With by_swap,
  // every write is made by compare_and_swap from the acknowledged state.
  Exploration explore_every_write_form(bool crash_recovery = false, bool by_swap = false) {
    Exploration out;
    testing::GranularityGuard granularity;
    granularity.force("cache_line");
    options_.pool_size = pool::kMinPoolSize;
    options_.set("nehash.initial_dir_bits", 0);
    create();
    // Two keys sharing a home bucket that 15 others fill up to one slot (so
    // the second lives in the conflict bucket), a third elsewhere that no
    // operation touches, and one written last.
    const auto pair = find_keys(at(0, 0, 1, 0, 9), 2, 8);
    const auto other = find_keys(at(0, 0, 1, 1, 2), 2, 8);
    const auto fillers =
        find_keys([](std::uint64_t h1) { return nh::home_bucket(h1, 1) == 0; }, 15, 8);
    std::vector<std::string> keys = {pair[0], pair[1], other[0], other[1]};
    std::map<std::string, std::string> now;  // acknowledged state
    EXPECT_TRUE(put(other[0], "stays").ok());
    now[other[0]] = "stays";
    for (const std::string& f : fillers) {
      EXPECT_TRUE(put(f, "f").ok());
      now[f] = "f";
      keys.push_back(f);
    }
    pool_->region().persist_all();
    testing::PersistenceSim sim(pool_->region());
    // The images of one drain, kept until the write returns: recovery may
    // not run inside the write's read-side section (it waits for grace
    // periods).
    struct Point {
      std::vector<std::byte> durable;
      std::map<std::uint64_t, std::vector<std::byte>> visible;  // dirty line -> bytes
      std::vector<testing::CrashChoice> choices;
    };
    std::vector<Point> points;
    std::mt19937_64 rng(9);
    sim.set_crash_point_hook([&](const testing::PersistenceSim& s) {
      Point p;
      p.durable = s.durable();
      const std::vector<std::uint64_t> dirty = s.dirty_units();
      for (std::uint64_t line : dirty) {
        const std::byte* from = pool_->region().base() + line;
        p.visible[line].assign(from, from + media::kCacheLineSize);
      }
      p.choices = testing::crash_choices(s, dirty, 6, 10, rng, 16);
      points.push_back(std::move(p));
    });
    struct Op {
      const char* what;
      std::string key;
      std::function<Status()> run;
      std::optional<std::string> after;  // nullopt: removed
    };
    const std::string long1(40, 'L'), long2(200, 'M');
    const std::vector<Op> ops = {
        {"insert inline", pair[0], [&] { return put(pair[0], "a"); }, "a"},
        {"insert pointer into the conflict bucket", pair[1], [&] { return put(pair[1], long1); }, long1},
        {"update a", pair[0], [&] { return upd(pair[0], "b"); }, "b"},
        {"update b", pair[1], [&] { return upd(pair[1], long2); }, long2},
        {"update c inline -> pointer", pair[0], [&] { return upd(pair[0], long1); }, long1},
        {"update c pointer -> inline", pair[1], [&] { return upd(pair[1], "s"); }, "s"},
        {"update c inline length", pair[1], [&] { return upd(pair[1], "12345678"); }, "12345678"},
        {"remove pointer", pair[0], [&] { return del(pair[0]); }, std::nullopt},
        {"remove inline from the conflict bucket", pair[1], [&] { return del(pair[1]); }, std::nullopt},
        {"insert after all of them", other[1], [&] { return put(other[1], "last"); }, "last"},
    };
    auto violation = [&](const std::string& what) {
      if (++out.violations <= 3) out.first += what + "\n";
    };
    for (const Op& op : ops) {
      points.clear();
      if (by_swap) {
        const auto it = now.find(op.key);
        const std::optional<std::string_view> expected =
            it == now.end() ? std::nullopt : std::optional<std::string_view>(it->second);
        const std::optional<std::string_view> desired =
            op.after ? std::optional<std::string_view>(*op.after) : std::nullopt;
        EXPECT_TRUE(index_->compare_and_swap(engine::make_key(op.key), expected, desired).ok())
            << op.what;
      } else {
        EXPECT_TRUE(op.run().ok()) << op.what;
      }
      EXPECT_FALSE(points.empty()) << op.what;
      for (std::size_t i = 0; i < points.size(); ++i) {
        const Point& p = points[i];
        for (const testing::CrashChoice& c : p.choices) {
          std::vector<std::byte> image = p.durable;
          for (std::uint64_t line : c.written) {
            std::copy(p.visible.at(line).begin(), p.visible.at(line).end(), image.begin() + line);
          }
          for (const auto& [line, mask] : c.torn) {
            for (unsigned w = 0; w < 8; ++w) {
              if (mask & (1u << w)) {
                std::copy_n(p.visible.at(line).begin() + 8 * w, 8, image.begin() + line + 8 * w);
              }
            }
          }
          const Recovered r = recover(image, keys, crash_recovery);
          ++out.images;
          const std::string where =
              std::string(op.what) + ", drain " + std::to_string(i + 1) + ", " + c.describe();
          auto judge = [&](const Recovered& rec, const std::string& at) {
            if (!rec.open.ok() || !rec.check.ok()) {
              violation(at + ": " + rec.open.to_string() + " / " + rec.check.to_string());
              return;
            }
            for (const std::string& k : keys) {
              const std::optional<std::string> got =
                  rec.values.count(k) ? std::optional<std::string>(rec.values.at(k)) : std::nullopt;
              const std::optional<std::string> before =
                  now.count(k) ? std::optional<std::string>(now.at(k)) : std::nullopt;
              if (got != before && !(k == op.key && got == op.after)) {
                violation(at + ": key " + k + " is " + got.value_or("<absent>"));
              }
            }
          };
          judge(r, where);
          for (std::size_t k = 0; k < r.again.size(); ++k) {
            judge(r.again[k], where + ", then its recovery crashed (image " + std::to_string(k) + ")");
          }
          out.recovery_images += r.again.size();
        }
      }
      if (op.after) {
        now[op.key] = *op.after;
      } else {
        now.erase(op.key);
      }
    }
    sim.set_crash_point_hook(nullptr);
    for (const auto& [k, v] : now) EXPECT_EQ(value_of(k), v);
    return out;
  }
  void TearDown() override {
    engine::planted::bugs.store(engine::planted::kNone);
    NehashCrashTest::TearDown();
  }
};

TEST_F(NehashWriteCrashTest, EveryDrainOfEveryWriteFormRecoversToBeforeOrAfter) {
  const Exploration e = explore_every_write_form();
  EXPECT_GT(e.images, 100u);
  EXPECT_EQ(e.violations, 0u) << e.first;
  expect_check();
}

// The same writes made by compare_and_swap (expecting the acknowledged
// state): a swap that writes follows the persist order of the write it
// makes, so every crash image recovers to before or after it.
TEST_F(NehashWriteCrashTest, EveryDrainOfEveryCompareAndSwapFormRecoversToBeforeOrAfter) {
  const Exploration e = explore_every_write_form(/*crash_recovery=*/false, /*by_swap=*/true);
  EXPECT_GT(e.images, 100u);
  EXPECT_EQ(e.violations, 0u) << e.first;
  expect_check();
}

// Recovery replays a committed slot update (case c) and must be
// restartable: a crash at any drain of it leaves an image that recovers to
// before or after the write. (Recovery once cleared the record in the same
// drain as the replayed slot: an image with the cleared record and the
// slot's meta but not its words held a torn slot.)
TEST_F(NehashWriteCrashTest, ACrashDuringRecoveryOfASlotUpdateRecoversAgain) {
  const Exploration e = explore_every_write_form(/*crash_recovery=*/true);
  EXPECT_GT(e.recovery_images, 100u);
  EXPECT_EQ(e.violations, 0u) << e.first;
}

TEST_F(NehashWriteCrashTest, PlantedMetaBeforeSlotDurableIsCaught) {
  engine::planted::bugs.store(nh::testing::kMetaBeforeSlotDurable);
  EXPECT_GT(explore_every_write_form().violations, 0u);
}

TEST_F(NehashWriteCrashTest, PlantedOpLogClearNotPersistedIsCaught) {
  engine::planted::bugs.store(nh::testing::kOpLogClearNotPersisted);
  const Exploration e = explore_every_write_form();
  EXPECT_GT(e.violations, 0u);
}

// ---------------------------------------------------------------------------
// Through the Store
// ---------------------------------------------------------------------------

class NehashStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = testing::scratch_path("pmhash-nehash-store") + ".pool";
    ::unlink(path_.c_str());
    options_.engine = "nehash";
    options_.pool_size = 64u << 20;
    options_.set("nehash.bucket_bits", 1);
    options_.set("nehash.initial_dir_bits", 0);
  }
  void TearDown() override {
    store_.reset();
    ::unlink(path_.c_str());
  }
  void create() {
    const Status s = Store::create(path_, options_, &store_);
    ASSERT_TRUE(s.ok()) << s.to_string();
  }
  void reopen() {
    ASSERT_TRUE(store_->close().ok());
    store_.reset();
    Options o = options_;
    o.engine.clear();
    const Status s = Store::open(path_, o, &store_);
    ASSERT_TRUE(s.ok()) << s.to_string();
  }
  static std::string key(int i) { return "key-" + std::to_string(i); }
  static std::string value(int i) {
    return i % 3 == 0 ? "v" + std::to_string(i % 1000) : std::string(10 + i % 40, 'a' + i % 26);
  }
  void expect_check() {
    const Status s = store_->check();
    EXPECT_TRUE(s.ok()) << s.to_string();
  }

  std::string path_;
  Options options_;
  std::unique_ptr<Store> store_;
};

TEST_F(NehashStoreTest, EngineIsListedAndCreatedByName) {
  const auto engines = Store::engines();
  EXPECT_NE(std::find(engines.begin(), engines.end(), "nehash"), engines.end());
  create();
  EXPECT_EQ(store_->stats().engine, "nehash");
}

TEST_F(NehashStoreTest, BadOptionsAreRefusedWithClearErrors) {
  std::unique_ptr<Store> s;
  Options o = options_;
  o.set("nehash.bucket_bits", 11);
  Status st = Store::create(path_, o, &s);
  EXPECT_TRUE(st.is_invalid_argument());
  EXPECT_NE(st.message().find("nehash.bucket_bits must be 1..10, got 11"), std::string::npos) << st.message();
  o = options_;
  o.set("nehash.bucket_bits", 0);
  EXPECT_TRUE(Store::create(path_, o, &s).is_invalid_argument());
  o = options_;
  o.set("nehash.initial_dir_bits", 17);
  EXPECT_TRUE(Store::create(path_, o, &s).is_invalid_argument());
  o = options_;
  o.durability = Durability::kEpoch;
  st = Store::create(path_, o, &s);
  EXPECT_TRUE(st.is_invalid_argument());
  EXPECT_NE(st.message().find("durability strict"), std::string::npos) << st.message();
  EXPECT_NE(::access(path_.c_str(), F_OK), 0) << "no file left behind";
}

TEST_F(NehashStoreTest, ManyKeysWithUpdatesRemovesAndReopen) {
  create();
  const int n = 8000;
  for (int i = 0; i < n; ++i) ASSERT_TRUE(store_->insert(key(i), value(i)).ok()) << i;
  EXPECT_GT(store_->stats().property("nehash.splits"), 100u);
  for (int i = 0; i < n; i += 2) ASSERT_TRUE(store_->update(key(i), value(i + 1)).ok()) << i;
  for (int i = 0; i < n; i += 5) ASSERT_TRUE(store_->remove(key(i)).ok()) << i;
  expect_check();
  auto expected = [&](int i) { return i % 2 == 0 ? value(i + 1) : value(i); };
  reopen();
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

TEST_F(NehashStoreTest, FullExpansionRepointsEveryGroupAndKeepsEveryKey) {
  create();
  const int n = 20000;
  for (int i = 0; i < n; ++i) ASSERT_TRUE(store_->insert(key(i), value(i)).ok()) << i;
  const Stats st = store_->stats();
  EXPECT_GE(st.property("nehash.full_expansions"), 1u);
  EXPECT_GE(st.property("nehash.rule1_nodes") + st.property("nehash.rule2_nodes"), 1u);
  EXPECT_EQ(st.items, static_cast<std::uint64_t>(n));
  EXPECT_EQ(st.slots, st.property("nehash.groups") * 3 * 16);
  for (int i = 0; i < n; ++i) {
    std::string v;
    ASSERT_TRUE(store_->get(key(i), &v).ok()) << i;
    ASSERT_EQ(v, value(i)) << i;
  }
  expect_check();  // every group named by exactly its run of entries
}

TEST_F(NehashStoreTest, ConcurrentWritersAndReadersLoseNoAcknowledgedKey) {
  // Two writers on disjoint keys (splits, expansions and conflict overflow
  // all the time at b = 1) and a reader of what they acknowledged. Small and
  // bounded: the stress suite is where this runs at length.
  create();
  constexpr int kPerWriter = 3000;
  std::atomic<int> acked[2] = {0, 0};
  auto writer = [&](int w) {
    for (int i = 0; i < kPerWriter; ++i) {
      const int k = 2 * i + w;
      ASSERT_TRUE(store_->insert(key(k), value(k)).ok()) << k;
      if (i % 4 == 0) {
        ASSERT_TRUE(store_->update(key(k), value(k + 1)).ok()) << k;
      }
      acked[w].store(i + 1, std::memory_order_release);
    }
  };
  std::atomic<bool> stop{false};
  std::uint64_t reads = 0;
  std::thread reader([&] {
    while (!stop.load()) {
      for (int w = 0; w < 2; ++w) {
        const int n = acked[w].load(std::memory_order_acquire);
        if (n == 0) continue;
        const int i = static_cast<int>(reads % static_cast<std::uint64_t>(n));
        const int k = 2 * i + w;
        std::string v;
        const Status s = store_->get(key(k), &v);
        ASSERT_TRUE(s.ok()) << k << ": " << s.to_string();
        ASSERT_TRUE(v == value(k) || v == value(k + 1)) << k;
        ++reads;
      }
    }
  });
  std::thread w0(writer, 0), w1(writer, 1);
  w0.join();
  w1.join();
  stop.store(true);
  reader.join();
  EXPECT_GT(reads, 0u);
  EXPECT_EQ(store_->size(), 2u * kPerWriter);
  for (int k = 0; k < 2 * kPerWriter; ++k) {
    std::string v;
    ASSERT_TRUE(store_->get(key(k), &v).ok()) << k;
    EXPECT_EQ(v, (k / 2) % 4 == 0 ? value(k + 1) : value(k)) << k;
  }
  expect_check();
}

TEST_F(NehashStoreTest, ForEachVisitsEveryKeyOnce) {
  create();
  const int n = 5000;
  for (int i = 0; i < n; ++i) ASSERT_TRUE(store_->insert(key(i), value(i)).ok());
  std::map<std::string, std::string> seen;
  std::size_t calls = 0;
  ASSERT_TRUE(store_->for_each([&](std::string_view k, std::string_view v) {
    ++calls;
    seen.emplace(std::string(k), std::string(v));
    return true;
  }).ok());
  EXPECT_EQ(calls, static_cast<std::size_t>(n));
  ASSERT_EQ(seen.size(), static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) EXPECT_EQ(seen[key(i)], value(i));
  std::size_t stopped = 0;
  ASSERT_TRUE(store_->for_each([&](std::string_view, std::string_view) { return ++stopped < 10; }).ok());
  EXPECT_EQ(stopped, 10u);
}

// Splits and full main expansions between the calls of one scan (each of
// the first 40 calls passes 10 keys or more, then 200 more keys are
// inserted): every key present from the first call on is passed once.
TEST_F(NehashStoreTest, AScanAcrossSplitsAndFullExpansionsPassesEveryKeyOnce) {
  create();
  const int n = 3000;
  for (int i = 0; i < n; ++i) ASSERT_TRUE(store_->insert(key(i), value(i)).ok()) << i;
  const std::uint64_t expansions = store_->stats().property("nehash.full_expansions");
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
    // Growth for the first 40 calls (more would outrun the scan for good).
    for (int j = 0; j < 200 && calls < 40; ++j, ++next_key) {
      ASSERT_TRUE(store_->insert(key(next_key), value(next_key)).ok());
    }
  }
  EXPECT_GT(store_->stats().property("nehash.full_expansions"), expansions);
  for (int i = 0; i < n; ++i) EXPECT_EQ(seen[key(i)], 1) << i;
  for (const auto& [k, times] : seen) EXPECT_EQ(times, 1) << k;
}

TEST_F(NehashStoreTest, CleanReopenRebuildsTheSameMapping) {
  create();
  for (int i = 0; i < 3000; ++i) ASSERT_TRUE(store_->insert(key(i), value(i)).ok());
  std::map<std::string, std::string> before;
  ASSERT_TRUE(store_->for_each([&](std::string_view k, std::string_view v) {
    before.emplace(k, v);
    return true;
  }).ok());
  const std::uint64_t groups = store_->stats().property("nehash.groups");
  reopen();
  std::map<std::string, std::string> after;
  ASSERT_TRUE(store_->for_each([&](std::string_view k, std::string_view v) {
    after.emplace(k, v);
    return true;
  }).ok());
  EXPECT_EQ(after, before);
  const Stats st = store_->stats();
  EXPECT_EQ(st.property("nehash.groups"), groups);
  EXPECT_GT(st.open_ns, 0u);
  EXPECT_EQ(st.items, 3000u);
  expect_check();
}

TEST_F(NehashStoreTest, EmptyAndBinaryKeysAndValues) {
  create();
  const std::string binary("\0\1\2\xff", 4);
  ASSERT_TRUE(store_->insert("", "empty key").ok());
  ASSERT_TRUE(store_->insert(binary, "").ok());
  ASSERT_TRUE(store_->insert(std::string(8, '\0'), std::string(8, '\0')).ok());
  std::string v;
  ASSERT_TRUE(store_->get("", &v).ok());
  EXPECT_EQ(v, "empty key");
  ASSERT_TRUE(store_->get(binary, &v).ok());
  EXPECT_EQ(v, "");
  ASSERT_TRUE(store_->get(std::string(8, '\0'), &v).ok());
  EXPECT_EQ(v, std::string(8, '\0'));
  EXPECT_TRUE(store_->get(std::string(7, '\0'), &v).is_not_found());
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
TEST_F(NehashEngineTest, AReaderRacingAWriteNeverAnswersWhatItsDrainsHaveNotMadeDurable) {
  testing::GranularityGuard granularity;
  granularity.force("cache_line");
  options_.pool_size = pool::kMinPoolSize;
  create();
  ASSERT_EQ(pool_->region().granularity(), media::Granularity::kCacheLine);
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
        a.value = value_of(k);
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
    race(k, [&] { return put(k, "v1"); }, absent);
    race(k, [&] { return upd(k, "v2"); }, "v1");
    race(k, [&] { return del(k); }, "v2");
  }
}

// ReadOptions::snapshot reads the latest durable state, and every write is
// durable when it returns: a snapshot read sees each acknowledged insert,
// update (every form) and remove at once, like a plain read. Enough keys to
// split groups and use conflict slots.
TEST(NehashSnapshotTest, SnapshotReadsSeeEveryAcknowledgedWrite) {
  const std::string path = testing::scratch_path("pmhash-nehash-snapshot") + ".pool";
  ::unlink(path.c_str());
  Options options;
  options.engine = "nehash";
  options.pool_size = 32u << 20;
  options.set("nehash.bucket_bits", 1);
  options.set("nehash.initial_dir_bits", 1);
  std::unique_ptr<Store> store;
  ASSERT_TRUE(Store::create(path, options, &store).ok());
  const ReadOptions snapshot{.snapshot = true};
  auto both = [&](const std::string& k) {
    std::string a, b;
    const Status sa = store->get(k, &a);
    const Status sb = store->get(k, &b, snapshot);
    EXPECT_EQ(sa.to_string(), sb.to_string()) << k;
    return sb.ok() ? b : "<" + sb.to_string() + ">";
  };
  auto value = [](int i) {
    return i % 3 == 0 ? "v" + std::to_string(i % 100) : std::string(10 + i % 40, 'a' + i % 26);
  };
  for (int i = 0; i < 500; ++i) {
    ASSERT_TRUE(store->insert("key-" + std::to_string(i), value(i)).ok()) << i;
    EXPECT_EQ(both("key-" + std::to_string(i)), value(i));
  }
  for (int i = 0; i < 500; ++i) {
    ASSERT_TRUE(store->update("key-" + std::to_string(i), value(i + 1)).ok()) << i;
    EXPECT_EQ(both("key-" + std::to_string(i)), value(i + 1));
  }
  for (int i = 0; i < 500; i += 2) {
    ASSERT_TRUE(store->remove("key-" + std::to_string(i)).ok()) << i;
    EXPECT_EQ(both("key-" + std::to_string(i)), "<" + Status::NotFound().to_string() + ">");
  }
  EXPECT_TRUE(store->check().ok()) << store->check().to_string();
  ASSERT_TRUE(store->close().ok());
  store.reset();
  ::unlink(path.c_str());
}

}  // namespace
}  // namespace pmhash
