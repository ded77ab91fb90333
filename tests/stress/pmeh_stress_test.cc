// Stress tests of the pmeh engine (design/pmeh.md §13.2): more callers than
// owner threads (8 callers, W = 2), 4 KiB segments in four zones (Z = 2), so
// that segments split and directories grow throughout; each test checked
// against a model.
//
// Each writer owns its keys, so a map of its own is an exact model of them:
// a lost insert, update or remove, or a resurrected key, is a mismatch.
// Keys of at most 8 bytes with values of at most 8 bytes are stored inline
// in the slot, the others as items; writers draw both forms, so updates
// also change a slot's form (through the op log).
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <barrier>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "pmhash/store.h"
#include "scratch_file.h"
#include "stress/stress_common.h"

namespace pmhash {
namespace {

using stress::kScale;

constexpr unsigned kCallers = 8;

// The value of `key` at `version`: short ("v<version>", at most 8 bytes
// below 10^7: inline with a short key) or long (always an item).
std::string value_for(std::string_view key, std::uint64_t version, bool long_form) {
  if (!long_form) return "v" + std::to_string(version);
  return "V" + std::to_string(version) + "/" + std::string(key) + std::string(5 + version % 31, '+');
}

// Whether `v` is value_for(key, n, ...) for some n in [low, high).
bool version_within(std::string_view key, std::string_view v, std::uint64_t low, std::uint64_t high) {
  if (v.size() < 2 || (v[0] != 'v' && v[0] != 'V')) return false;
  std::uint64_t n = 0;
  std::size_t i = 1;
  while (i < v.size() && i < 9 && v[i] >= '0' && v[i] <= '9') n = n * 10 + static_cast<unsigned>(v[i++] - '0');
  if (i == 1 || value_for(key, n, v[0] == 'V') != v) return false;
  return n >= low && n < high;
}

// Key i of set `tag`: short (inline-capable) for three in four, long (an
// item whatever the value) for the fourth.
std::string key_for(char tag, std::size_t i) {
  return i % 4 == 3 ? std::string(1, tag) + "-longer-key-" + std::to_string(i) : std::string(1, tag) + std::to_string(i);
}

// One writer's keys and its exact model of them; nobody else writes them.
class OwnedKeys {
 public:
  OwnedKeys(char tag, std::size_t n, unsigned thread) : thread_(thread) {
    for (std::size_t i = 0; i < n; ++i) keys_.push_back(key_for(tag, i));
  }

  // One random operation on key i, its answer checked against the model.
  void op(Store& store, std::size_t i, std::mt19937_64& rng, stress::Mismatches& m) {
    const std::string& key = keys_[i];
    const auto it = model_.find(i);
    const bool present = it != model_.end();
    const unsigned r = static_cast<unsigned>(rng() % 100);
    const std::string value = value_for(key, ++version_, rng() % 2 == 0);
    auto fail = [&](const std::string& what, const Status& s) {
      m.report(thread_, what + " " + key + (present ? " (present)" : " (absent)") + ": " + s.to_string());
    };
    if (r < 15) {
      std::string got;
      const Status s = store.get(key, &got);
      if (present ? !s.ok() : !s.is_not_found()) fail("get", s);
      if (present && s.ok() && got != it->second) fail("get saw " + got + ", not " + it->second + ", of", s);
    } else if (r < 50) {
      const Status s = store.insert(key, value);
      if (present ? !s.is_already_exists() : !s.ok()) fail("insert", s);
      if (!present && s.ok()) model_[i] = value;
    } else if (r < 65) {
      const Status s = store.update(key, value);
      if (present ? !s.ok() : !s.is_not_found()) fail("update", s);
      if (present && s.ok()) it->second = value;
    } else if (r < 80) {
      const Status s = store.upsert(key, value);
      if (!s.ok()) fail("upsert", s);
      if (s.ok()) model_[i] = value;
    } else {
      const Status s = store.remove(key);
      if (present ? !s.ok() : !s.is_not_found()) fail("remove", s);
      if (s.ok()) model_.erase(i);
    }
  }

  // Random operations in a window that slides from the first keys to the
  // last as `step` goes from 0 to `steps`: the live keys keep growing, so
  // segments keep splitting.
  void op_at(Store& store, std::uint64_t step, std::uint64_t steps, std::size_t window, std::mt19937_64& rng,
             stress::Mismatches& m) {
    const std::size_t base = static_cast<std::size_t>(step * (keys_.size() - window) / steps);
    op(store, base + rng() % window, rng, m);
  }

  void add_to(std::map<std::string, std::string>* expected) const {
    for (const auto& [i, v] : model_) expected->emplace(keys_[i], v);
  }

 private:
  std::vector<std::string> keys_;
  unsigned thread_;
  std::unordered_map<std::size_t, std::string> model_;
  std::uint64_t version_ = 0;
};

class PmehStress : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = testing::scratch_path("pmhash-pmeh-stress") + ".pool";
    ::unlink(path_.c_str());
  }
  void TearDown() override {
    store_.reset();
    ::unlink(path_.c_str());
  }
  Options options(unsigned split_bits) const {
    Options o;
    o.engine = "pmeh";
    o.pool_size = 256u << 20;
    o.set("pmeh.workers", 2);
    o.set("pmeh.segment_kib", 4);
    o.set("pmeh.zone_bits", 2);
    o.set("pmeh.split_bits", split_bits);
    return o;
  }
  void create(unsigned split_bits = 3) {
    const Status s = Store::create(path_, options(split_bits), &store_);
    ASSERT_TRUE(s.ok()) << s.to_string();
  }
  void reopen(unsigned split_bits = 3) {
    ASSERT_TRUE(store_->close().ok());
    store_.reset();
    const Status s = Store::open(path_, options(split_bits), &store_);
    ASSERT_TRUE(s.ok()) << s.to_string();
  }
  // The store holds exactly `model` (by for_each, get and size), and
  // check() passes.
  void expect_store_is(const std::map<std::string, std::string>& model) {
    std::map<std::string, std::string> got;
    const Status s = store_->for_each([&](std::string_view k, std::string_view v) {
      if (!got.emplace(k, v).second) ADD_FAILURE() << "for_each visited " << k << " twice";
      return true;
    });
    EXPECT_TRUE(s.ok()) << s.to_string();
    int shown = 0;
    for (const auto& [k, v] : model) {
      const auto it = got.find(k);
      if (it == got.end()) {
        if (shown++ < 10) ADD_FAILURE() << k << " is missing (model: " << v << ")";
      } else if (it->second != v) {
        if (shown++ < 10) ADD_FAILURE() << k << " holds " << it->second << ", model " << v;
      }
      std::string value;
      const Status g = store_->get(k, &value);
      if ((!g.ok() || value != v) && shown++ < 10) ADD_FAILURE() << "get " << k << ": " << g.to_string();
    }
    for (const auto& [k, v] : got) {
      if (!model.contains(k) && shown++ < 10) ADD_FAILURE() << k << " -> " << v << " is not in the model";
    }
    EXPECT_EQ(got.size(), model.size());
    EXPECT_EQ(store_->size(), model.size());
    const Status c = store_->check();
    EXPECT_TRUE(c.ok()) << c.to_string();
  }

  std::string path_;
  std::unique_ptr<Store> store_;
  stress::Mismatches mismatches_;
};

// 1. Eight callers, each with its own keys and an exact model of them, run
// inserts, updates (form-changing half of the time), upserts, removes and
// gets through two owners, with a growing live set: segments split into
// 2^k and directories grow under them. The store must equal the union of
// the models, before and after a reopen.
class PmehWriters : public PmehStress, public ::testing::WithParamInterface<unsigned> {};

TEST_P(PmehWriters, ConcurrentWritersMatchModel) {
  const unsigned k = GetParam();
  ASSERT_NO_FATAL_FAILURE(create(k));
  const std::uint64_t steps = 600 * kScale;
  const std::size_t window = 48;
  std::vector<OwnedKeys> owned;
  for (unsigned t = 0; t < kCallers; ++t) {
    owned.emplace_back(static_cast<char>('a' + t), window + steps / 4, t);
  }
  std::barrier start(kCallers);
  std::vector<std::thread> threads;
  for (unsigned t = 0; t < kCallers; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937_64 rng(100 + t);
      start.arrive_and_wait();
      for (std::uint64_t i = 0; i < steps; ++i) owned[t].op_at(*store_, i, steps, window, rng, mismatches_);
    });
  }
  for (std::thread& th : threads) th.join();
  EXPECT_EQ(mismatches_.count(), 0);
  std::map<std::string, std::string> model;
  for (const OwnedKeys& o : owned) o.add_to(&model);
  const Stats st = store_->stats();
  // The test covers what it says only if these happened while it ran.
  EXPECT_GT(st.property("pmeh.splits"), 0u);
  EXPECT_GT(st.property("pmeh.directory_installs"), 0u);
  EXPECT_GT(st.property("pmeh.delegated_ops"), 0u);
  expect_store_is(model);
  ASSERT_NO_FATAL_FAILURE(reopen(k));
  expect_store_is(model);
}

INSTANTIATE_TEST_SUITE_P(SplitBits, PmehWriters, ::testing::Values(1u, 2u, 3u),
                         [](const auto& info) { return "k" + std::to_string(info.param); });

// 2. Keys inserted before the readers start and never touched again must
// always be found, with their value, while writers add keys fast enough to
// split segments and grow the directory again and again; so must every key
// a writer has acknowledged.
TEST_F(PmehStress, ReadersDuringSplitsAndGrowthFindEveryStableKey) {
  ASSERT_NO_FATAL_FAILURE(create(/*split_bits=*/1));
  constexpr unsigned kWriters = 4, kReaders = kCallers - kWriters;
  const std::size_t per_writer = 400 * kScale;
  std::map<std::string, std::string> model;
  std::vector<std::string> stable;
  for (std::size_t i = 0; i < 300; ++i) {
    stable.push_back(key_for('s', i));
    const std::string v = value_for(stable[i], i, i % 3 == 0);
    ASSERT_TRUE(store_->insert(stable[i], v).ok());
    model[stable[i]] = v;
  }
  const Stats before = store_->stats();

  std::vector<std::atomic<std::size_t>> acked(kWriters);
  std::atomic<bool> done{false};
  std::atomic<std::uint64_t> reads{0};
  std::barrier start(kWriters + kReaders);
  std::vector<std::thread> threads;
  for (unsigned w = 0; w < kWriters; ++w) {
    threads.emplace_back([&, w] {
      start.arrive_and_wait();
      for (std::size_t i = 0; i < per_writer; ++i) {
        const std::string key = key_for(static_cast<char>('a' + w), i);
        const Status s = store_->insert(key, value_for(key, i, i % 2 == 0));
        if (!s.ok()) mismatches_.report(w, "insert " + key + ": " + s.to_string());
        acked[w].store(i + 1, std::memory_order_release);
      }
    });
  }
  for (unsigned r = 0; r < kReaders; ++r) {
    threads.emplace_back([&, r] {
      const unsigned me = kWriters + r;
      std::mt19937_64 rng(300 + r);
      std::string got;
      start.arrive_and_wait();
      std::uint64_t n = 0;
      while (!done.load()) {
        const std::size_t i = rng() % stable.size();
        Status s = store_->get(stable[i], &got);
        if (!s.ok() || got != model.at(stable[i])) {
          mismatches_.report(me, "stable get " + stable[i] + ": " + s.to_string() + " " + got);
        }
        const unsigned w = static_cast<unsigned>(rng() % kWriters);
        const std::size_t upto = acked[w].load(std::memory_order_acquire);
        if (upto > 0) {
          const std::size_t j = rng() % upto;
          const std::string key = key_for(static_cast<char>('a' + w), j);
          s = store_->get(key, &got);
          if (!s.ok() || got != value_for(key, j, j % 2 == 0)) {
            mismatches_.report(me, "acknowledged " + key + ": " + s.to_string() + " " + got);
          }
        }
        n += 2;
        // Four readers spinning on two cores would starve the owners that
        // run the writers' inserts.
        std::this_thread::yield();
      }
      reads.fetch_add(n);
    });
  }
  for (unsigned w = 0; w < kWriters; ++w) threads[w].join();
  done.store(true);
  for (std::size_t i = kWriters; i < threads.size(); ++i) threads[i].join();
  EXPECT_EQ(mismatches_.count(), 0);
  EXPECT_GT(reads.load(), 0u);
  const Stats after = store_->stats();
  EXPECT_GT(after.property("pmeh.splits"), before.property("pmeh.splits"));
  EXPECT_GT(after.property("pmeh.directory_installs"), before.property("pmeh.directory_installs"));
  for (unsigned w = 0; w < kWriters; ++w) {
    for (std::size_t i = 0; i < per_writer; ++i) {
      const std::string key = key_for(static_cast<char>('a' + w), i);
      model[key] = value_for(key, i, i % 2 == 0);
    }
  }
  expect_store_is(model);
}

// 3. Eight callers insert the same fresh key at once, each with its own
// value (of either form): exactly one insert succeeds, the others answer
// AlreadyExists and find the key right after, and the key holds the
// winner's value. Rounds run into segment splits.
TEST_F(PmehStress, SameKeyInsertRaceHasExactlyOneWinner) {
  ASSERT_NO_FATAL_FAILURE(create());
  // Enough keys for splits in four zones at any scale.
  const std::size_t rounds = 1000;
  std::vector<std::string> keys;
  for (std::size_t r = 0; r < rounds; ++r) keys.push_back(key_for('r', r));
  auto value = [&](std::size_t r, unsigned t) { return value_for(keys[r], r * kCallers + t, t % 2 == 1); };
  std::vector<std::vector<char>> won(kCallers, std::vector<char>(rounds, 0));
  std::barrier sync(kCallers);
  std::vector<std::thread> threads;
  for (unsigned t = 0; t < kCallers; ++t) {
    threads.emplace_back([&, t] {
      std::string got;
      for (std::size_t r = 0; r < rounds; ++r) {
        sync.arrive_and_wait();
        const Status s = store_->insert(keys[r], value(r, t));
        if (s.ok()) {
          won[t][r] = 1;
          continue;
        }
        if (!s.is_already_exists()) mismatches_.report(t, "insert " + keys[r] + ": " + s.to_string());
        const Status g = store_->get(keys[r], &got);
        if (!g.ok() || !version_within(keys[r], got, r * kCallers, (r + 1) * kCallers)) {
          mismatches_.report(t, "get " + keys[r] + " after AlreadyExists: " + g.to_string() + " " + got);
        }
      }
    });
  }
  for (std::thread& th : threads) th.join();
  EXPECT_EQ(mismatches_.count(), 0);
  std::map<std::string, std::string> model;
  for (std::size_t r = 0; r < rounds; ++r) {
    unsigned winners = 0, winner = 0;
    for (unsigned t = 0; t < kCallers; ++t) {
      if (won[t][r]) {
        ++winners;
        winner = t;
      }
    }
    ASSERT_EQ(winners, 1u) << keys[r];
    model[keys[r]] = value(r, winner);
  }
  EXPECT_GT(store_->stats().property("pmeh.splits"), 0u);
  expect_store_is(model);
  ASSERT_NO_FATAL_FAILURE(reopen());
  expect_store_is(model);
}

// 4. for_each's contract while segments split and directories grow: a key
// present for the whole iteration is visited exactly once, no key twice,
// every value whole. Writers insert fresh keys and remove some of them
// again (never inserting a key twice); one iterator passes over the store
// until the writers are done.
TEST_F(PmehStress, ForEachDuringSplitsReportsNoKeyTwice) {
  ASSERT_NO_FATAL_FAILURE(create());
  constexpr unsigned kWriters = kCallers - 1;
  const std::size_t per_writer = 600 * kScale;
  const std::size_t lag = 16;  // a writer removes the key it inserted `lag` keys ago, every other time
  const int min_passes = 3;
  std::unordered_map<std::string, std::string> value_of;  // of every key the test writes
  std::vector<std::string> stable;
  for (std::size_t i = 0; i < 200; ++i) {
    stable.push_back(key_for('s', i));
    value_of[stable[i]] = value_for(stable[i], i, i % 3 == 0);
  }
  for (unsigned w = 0; w < kWriters; ++w) {
    for (std::size_t i = 0; i < per_writer; ++i) {
      const std::string key = key_for(static_cast<char>('a' + w), i);
      value_of[key] = value_for(key, i, i % 2 == 0);
    }
  }
  for (const std::string& k : stable) ASSERT_TRUE(store_->insert(k, value_of.at(k)).ok());
  auto removed = [&](std::size_t i) { return i + lag < per_writer && i % 2 == 0; };

  std::atomic<bool> writers_done{false};
  std::atomic<int> passes{0}, passes_with_splits{0};
  std::barrier start(kWriters + 1);
  std::vector<std::thread> threads;
  for (unsigned w = 0; w < kWriters; ++w) {
    threads.emplace_back([&, w] {
      start.arrive_and_wait();
      for (std::size_t i = 0; i < per_writer; ++i) {
        const std::string key = key_for(static_cast<char>('a' + w), i);
        Status s = store_->insert(key, value_of.at(key));
        if (!s.ok()) mismatches_.report(w, "insert " + key + ": " + s.to_string());
        if (i >= lag && removed(i - lag)) {
          const std::string old = key_for(static_cast<char>('a' + w), i - lag);
          s = store_->remove(old);
          if (!s.ok()) mismatches_.report(w, "remove " + old + ": " + s.to_string());
        }
      }
    });
  }
  threads.emplace_back([&] {
    start.arrive_and_wait();
    // Passes until the writers are done, and at least min_passes.
    while (!writers_done.load() || passes.load() < min_passes) {
      const std::uint64_t splits_before = store_->stats().property("pmeh.splits");
      std::unordered_map<std::string, int> seen;
      const Status s = store_->for_each([&](std::string_view k, std::string_view v) {
        const std::string key(k);
        const auto it = value_of.find(key);
        if (it == value_of.end() || it->second != v) {
          mismatches_.report(kWriters, "for_each saw " + key + " -> " + std::string(v));
        }
        if (++seen[key] == 2) mismatches_.report(kWriters, "for_each saw " + key + " twice in one pass");
        return true;
      });
      if (!s.ok()) mismatches_.report(kWriters, "for_each: " + s.to_string());
      for (const std::string& k : stable) {
        if (!seen.contains(k)) mismatches_.report(kWriters, "for_each missed stable " + k);
      }
      if (store_->stats().property("pmeh.splits") != splits_before) passes_with_splits.fetch_add(1);
      passes.fetch_add(1);
    }
  });
  for (unsigned w = 0; w < kWriters; ++w) threads[w].join();
  writers_done.store(true);
  threads.back().join();
  EXPECT_EQ(mismatches_.count(), 0);
  EXPECT_GE(passes.load(), min_passes);
  EXPECT_GT(passes_with_splits.load(), 0) << "no pass ran while a segment split";
  std::map<std::string, std::string> model;
  for (const std::string& k : stable) model[k] = value_of.at(k);
  for (unsigned w = 0; w < kWriters; ++w) {
    for (std::size_t i = 0; i < per_writer; ++i) {
      const std::string key = key_for(static_cast<char>('a' + w), i);
      if (!removed(i)) model[key] = value_of.at(key);
    }
  }
  expect_store_is(model);
}

// 5. compare_and_swap against splits, directory growth and plain writes,
// delegated (OWNED zones, gradual splits: a swap on S moves its window
// first) and direct (SHARED zones: swaps by the callers under the segment's
// version, into the moved windows of a split in flight): three threads
// increment four counters per zone through read_modify_write, whose values
// switch between the inline form and an item every third increment; on
// four flags, two threads flip presence by read_modify_write (a swap that
// inserts or removes) and a third by plain insert and remove; two fillers
// insert keys that split every zone again and again. No increment is lost,
// each flag is present exactly when its successful flips are odd, and the
// store equals the model before and after a reopen.
class PmehSwaps : public PmehStress, public ::testing::WithParamInterface<unsigned> {};

TEST_P(PmehSwaps, IncrementsAndFlipsThroughSplitsMatchTheModel) {
  Options o = options(/*split_bits=*/1);
  o.set("pmeh.write_mode", GetParam());
  o.set("pmeh.split_step", 2);
  {
    const Status s = Store::create(path_, o, &store_);
    ASSERT_TRUE(s.ok()) << s.to_string();
  }
  constexpr unsigned kIncrementers = 3;
  constexpr unsigned kFlippers = 3;  // the last one with plain insert and remove
  constexpr unsigned kFillers = 2;
  const std::uint64_t increments = 300 * kScale;
  const std::uint64_t flips = 300 * kScale;
  const std::size_t per_filler = 1500 * kScale;
  std::vector<std::string> counters, flags;
  for (std::size_t i = 0; i < 16; ++i) counters.push_back(key_for('c', i));
  for (std::size_t i = 0; i < 4; ++i) flags.push_back(key_for('g', i));
  const auto encode = [](std::uint64_t n) {
    return n % 3 == 2 ? "N" + std::to_string(n) + "/" + std::string(10 + n % 7, '#') : std::to_string(n);
  };
  const auto decode = [](std::string_view v) -> std::int64_t {
    const std::size_t from = !v.empty() && v[0] == 'N' ? 1 : 0;
    std::int64_t n = 0;
    std::size_t i = from;
    for (; i < v.size() && v[i] >= '0' && v[i] <= '9'; ++i) n = n * 10 + (v[i] - '0');
    return i == from ? -1 : n;
  };
  std::vector<std::vector<std::int64_t>> flipped(kFlippers, std::vector<std::int64_t>(flags.size()));
  std::barrier sync(kIncrementers + kFlippers + kFillers);
  std::vector<std::thread> threads;
  for (unsigned t = 0; t < kIncrementers; ++t) {
    threads.emplace_back([&, t] {
      sync.arrive_and_wait();
      for (std::uint64_t i = 0; i < increments; ++i) {
        const std::string& key = counters[(t * 5 + i) % counters.size()];
        const Status s = store_->read_modify_write(key, [&](std::optional<std::string_view> cur) {
          const std::int64_t n = cur ? decode(*cur) : 0;
          if (n < 0) mismatches_.report(t, key + " holds " + std::string(*cur) + ", no counter value");
          return Modification::set(encode(static_cast<std::uint64_t>(n) + 1));
        });
        if (!s.ok()) mismatches_.report(t, "increment " + key + ": " + s.to_string());
      }
    });
  }
  for (unsigned t = 0; t < kFlippers; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937_64 rng(900 + t);
      sync.arrive_and_wait();
      for (std::uint64_t i = 0; i < flips; ++i) {
        const std::size_t k = rng() % flags.size();
        const std::string& key = flags[k];
        const std::string on = "on" + std::to_string(t);
        if (t + 1 < kFlippers) {
          const Status s = store_->read_modify_write(key, [&](std::optional<std::string_view> cur) {
            return cur ? Modification::remove() : Modification::set(on);
          });
          if (!s.ok()) mismatches_.report(t, "flip " + key + ": " + s.to_string());
          ++flipped[t][k];
          continue;
        }
        const Status s = rng() % 2 == 0 ? store_->insert(key, on) : store_->remove(key);
        if (s.ok()) {
          ++flipped[t][k];
        } else if (!s.is_already_exists() && !s.is_not_found()) {
          mismatches_.report(t, "plain flip " + key + ": " + s.to_string());
        }
      }
    });
  }
  for (unsigned f = 0; f < kFillers; ++f) {
    threads.emplace_back([&, f] {
      sync.arrive_and_wait();
      for (std::size_t i = 0; i < per_filler; ++i) {
        const std::string key = key_for(static_cast<char>('x' + f), i);
        const Status s = store_->insert(key, value_for(key, 1, key.size() > 8));
        if (!s.ok()) mismatches_.report(kIncrementers + kFlippers + f, "filler insert " + key + ": " + s.to_string());
      }
    });
  }
  for (std::thread& th : threads) th.join();
  EXPECT_EQ(mismatches_.count(), 0);
  EXPECT_GT(store_->stats().property("pmeh.splits"), 0u);

  std::map<std::string, std::string> model;
  for (unsigned f = 0; f < kFillers; ++f) {
    for (std::size_t i = 0; i < per_filler; ++i) {
      const std::string key = key_for(static_cast<char>('x' + f), i);
      model[key] = value_for(key, 1, key.size() > 8);
    }
  }
  std::uint64_t total = 0;
  for (const std::string& key : counters) {
    std::string got;
    const Status s = store_->get(key, &got);
    ASSERT_TRUE(s.ok()) << key << ": " << s.to_string();
    ASSERT_GE(decode(got), 0) << key << " holds " << got;
    total += static_cast<std::uint64_t>(decode(got));
    EXPECT_EQ(got, encode(static_cast<std::uint64_t>(decode(got)))) << key;
    model[key] = got;
  }
  EXPECT_EQ(total, kIncrementers * increments);
  for (std::size_t k = 0; k < flags.size(); ++k) {
    std::int64_t n = 0;
    for (unsigned t = 0; t < kFlippers; ++t) n += flipped[t][k];
    std::string got;
    const Status s = store_->get(flags[k], &got);
    ASSERT_TRUE(s.ok() || s.is_not_found()) << s.to_string();
    EXPECT_EQ(s.ok(), n % 2 == 1) << flags[k] << " after " << n << " successful flips";
    if (s.ok()) model[flags[k]] = got;
  }
  expect_store_is(model);
  ASSERT_NO_FATAL_FAILURE(reopen(/*split_bits=*/1));
  expect_store_is(model);
}

INSTANTIATE_TEST_SUITE_P(WriteModes, PmehSwaps, ::testing::Values(1u, 2u),
                         [](const auto& info) { return info.param == 1 ? "Delegated" : "Direct"; });

}  // namespace
}  // namespace pmhash
