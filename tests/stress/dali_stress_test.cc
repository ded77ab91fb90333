// Stress tests of the dali engine: threads of mixed operations, transactions
// and lock-free snapshot readers while epochs end every millisecond, the
// table grows by splits and garbage collection unlinks and frees records.
//
// Each writer owns the keys k with k % writers == its index, so a
// thread-local map is an exact model of them: a lost insert or update, or
// a resurrected remove, is a mismatch. Transactions move money between
// accounts: any interleaving that is not serializable shows up as a total
// that is not the one the accounts started with, in the end or in a
// snapshot a reader took. Counters incremented by swaps and transactions at
// once lose no increment.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <barrier>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "pmhash/store.h"
#include "pmhash/transaction.h"
#include "stress/stress_common.h"

namespace pmhash {
namespace {

using stress::key_of;
using stress::kScale;
using stress::value_of;

class DaliStress : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = "/dev/shm/pmhash-dali-stress-" + std::to_string(getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name() + ".pool";
    ::unlink(path_.c_str());
  }
  void TearDown() override {
    store_.reset();
    ::unlink(path_.c_str());
  }
  // Tiny table (4 buckets, 4 lock stripes), epochs of 1 ms: splits, lock
  // collisions, epoch ends and garbage collection all the time.
  void create(Durability durability = Durability::kEpoch, unsigned initial_log2 = 2) {
    Options o;
    o.engine = "dali";
    o.pool_size = 256u << 20;
    o.durability = durability;
    o.epoch_ms = 1;
    o.set("dali.initial_log2", initial_log2);
    o.set("dali.lock_timeout_ms", 60000);
    Status created = Store::create(path_, o, &store_);
    ASSERT_TRUE(created.ok()) << created.to_string();
  }

  // A mismatch seen by a worker thread (not the main one).
  void report(const std::string& what) { mismatches_.report(0, what); }

  // Counters incremented at once by read_modify_write (a get, then a
  // compare_and_swap from the value read) and by transactions (which lock
  // the counter's stripe from their read to their commit), while keys are
  // toggled present and absent by swaps, a filler grows the table by
  // splits, epochs end every millisecond and garbage collection unlinks
  // the counters' old versions. A swap that is not atomic with the other
  // writes of its key (the transactions', a split's copy, an in-place
  // rewrite of the same epoch) loses an increment or a toggle; a reader
  // checks that no counter ever goes back, in the newest state and in
  // snapshots.
  void increments_lose_nothing(Durability durability, int increments, int fill);

  std::string path_;
  std::unique_ptr<Store> store_;
  stress::Mismatches mismatches_;
};

TEST_F(DaliStress, MixedOperationsMatchPerThreadModelsWhileTheTableGrows) {
  ASSERT_NO_FATAL_FAILURE(create());
  constexpr unsigned kWriters = 3;
  const int ops = 20000 * kScale;
  const std::uint64_t keys = 3000 * kScale;
  // Keys k >= keys stay present from the start: the readers must always
  // find them, however the table splits meanwhile.
  const std::uint64_t stable = 200;
  for (std::uint64_t k = keys; k < keys + stable; ++k) {
    ASSERT_TRUE(store_->insert(key_of(k), value_of(k, 0)).ok());
  }
  ASSERT_TRUE(store_->sync().ok());  // durable: snapshot readers see them
  std::vector<std::unordered_map<std::uint64_t, std::string>> models(kWriters);
  std::atomic<bool> done{false};
  std::barrier start(kWriters + 2);
  std::vector<std::thread> threads;
  for (unsigned w = 0; w < kWriters; ++w) {
    threads.emplace_back([&, w] {
      std::mt19937_64 rng(w + 1);
      auto& model = models[w];
      start.arrive_and_wait();
      for (int i = 0; i < ops; ++i) {
        const std::uint64_t k = (rng() % (keys / kWriters)) * kWriters + w;
        const std::string key = key_of(k);
        const std::string value = value_of(k, static_cast<std::uint64_t>(i));
        const bool present = model.contains(k);
        const unsigned r = static_cast<unsigned>(rng() % 100);
        Status s;
        if (r < 35) {
          s = store_->insert(key, value);
          if (present ? !s.is_already_exists() : !s.ok()) report("insert " + key + ": " + s.to_string());
          if (!present) model[k] = value;
        } else if (r < 50) {
          s = store_->update(key, value);
          if (present ? !s.ok() : !s.is_not_found()) report("update " + key + ": " + s.to_string());
          if (present) model[k] = value;
        } else if (r < 60) {
          s = store_->upsert(key, value);
          if (!s.ok()) report("upsert " + key + ": " + s.to_string());
          model[k] = value;
        } else if (r < 80) {
          s = store_->remove(key);
          if (present ? !s.ok() : !s.is_not_found()) report("remove " + key + ": " + s.to_string());
          model.erase(k);
        } else {
          std::string got;
          s = store_->get(key, &got);
          if (present ? !(s.ok() && got == model[k]) : !s.is_not_found()) {
            report("get " + key + ": " + s.to_string());
          }
        }
      }
    });
  }
  // A snapshot reader: every stable key, always, with its one value.
  threads.emplace_back([&] {
    start.arrive_and_wait();
    std::mt19937_64 rng(99);
    while (!done.load()) {
      const std::uint64_t k = keys + rng() % stable;
      std::string got;
      const Status s = store_->get(key_of(k), &got, ReadOptions{.snapshot = true});
      if (!s.ok() || got != value_of(k, 0)) report("snapshot get " + key_of(k) + ": " + s.to_string());
    }
  });
  // An iterator: each stable key exactly once per pass.
  threads.emplace_back([&] {
    start.arrive_and_wait();
    while (!done.load()) {
      std::vector<int> seen(stable, 0);
      const Status s = store_->for_each([&](std::string_view key, std::string_view) {
        const std::uint64_t k = std::stoull(std::string(key.substr(1)));
        if (k >= keys) ++seen[k - keys];
        return true;
      });
      if (!s.ok()) report("for_each: " + s.to_string());
      for (std::uint64_t i = 0; i < stable; ++i) {
        if (seen[i] != 1) report("for_each saw " + key_of(keys + i) + " " + std::to_string(seen[i]) + " times");
      }
    }
  });
  for (unsigned w = 0; w < kWriters; ++w) threads[w].join();
  done.store(true);
  for (std::size_t i = kWriters; i < threads.size(); ++i) threads[i].join();
  EXPECT_EQ(mismatches_.count(), 0);

  std::size_t expected = stable;
  for (const auto& model : models) {
    expected += model.size();
    for (const auto& [k, v] : model) {
      std::string got;
      ASSERT_TRUE(store_->get(key_of(k), &got).ok()) << key_of(k);
      EXPECT_EQ(got, v) << key_of(k);
    }
  }
  EXPECT_EQ(store_->size(), expected);
  EXPECT_GT(store_->stats().property("dali.splits"), 100u) << "the table did not grow under the writers";
  EXPECT_TRUE(store_->check().ok()) << store_->check().to_string();
  ASSERT_TRUE(store_->close().ok());
  Options o;
  o.engine = "dali";
  ASSERT_TRUE(Store::open(path_, o, &store_).ok());
  EXPECT_EQ(store_->size(), expected);
  EXPECT_TRUE(store_->check().ok()) << store_->check().to_string();
}

TEST_F(DaliStress, ConcurrentInsertsOfOneKeyHaveExactlyOneWinner) {
  ASSERT_NO_FATAL_FAILURE(create());
  constexpr unsigned kThreads = 4;
  const int rounds = 300 * kScale;
  std::vector<std::atomic<int>> winners(static_cast<std::size_t>(rounds));
  std::barrier start(kThreads);
  std::vector<std::thread> threads;
  for (unsigned t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      start.arrive_and_wait();
      for (int r = 0; r < rounds; ++r) {
        const Status s = store_->insert("shared" + std::to_string(r), std::to_string(t));
        if (s.ok()) {
          winners[static_cast<std::size_t>(r)].fetch_add(1);
        } else if (!s.is_already_exists()) {
          report(s.to_string());
        }
      }
    });
  }
  for (std::thread& th : threads) th.join();
  EXPECT_EQ(mismatches_.count(), 0);
  for (int r = 0; r < rounds; ++r) EXPECT_EQ(winners[static_cast<std::size_t>(r)].load(), 1) << r;
  EXPECT_EQ(store_->size(), static_cast<std::uint64_t>(rounds));
}

// Bank transfers: serializable transactions keep the total, in the end and
// in every snapshot, and deadlocks (two transfers locking the same two
// accounts in opposite order) are broken by the lock timeout, not hung.
TEST_F(DaliStress, TransfersBetweenAccountsKeepTheTotalInEverySnapshot) {
  // 256 lock stripes: transfers mostly lock different ones, and collide
  // with the locking auditor, which locks all of them.
  ASSERT_NO_FATAL_FAILURE(create(Durability::kEpoch, 8));
  constexpr int kAccounts = 64;
  constexpr long kStart = 1000;
  for (int a = 0; a < kAccounts; ++a) ASSERT_TRUE(store_->insert(key_of(a), std::to_string(kStart)).ok());
  ASSERT_TRUE(store_->sync().ok());
  constexpr unsigned kMovers = 3;
  const int transfers = 500 * kScale;
  std::atomic<bool> done{false};
  std::atomic<long> committed{0}, aborted{0};
  std::barrier start(kMovers + 2);
  std::vector<std::thread> threads;
  for (unsigned m = 0; m < kMovers; ++m) {
    threads.emplace_back([&, m] {
      std::mt19937_64 rng(m + 7);
      start.arrive_and_wait();
      for (int i = 0; i < transfers; ++i) {
        const int from = static_cast<int>(rng() % kAccounts);
        int to = static_cast<int>(rng() % (kAccounts - 1));
        if (to >= from) ++to;
        const long amount = static_cast<long>(rng() % 50);
        for (;;) {
          std::unique_ptr<Transaction> txn;
          if (Status s = store_->transaction({.lock_timeout_ms = 20}, &txn); !s.ok()) {
            report("begin: " + s.to_string());
            return;
          }
          std::string a, b;
          Status s = txn->get(key_of(from), &a);
          if (s.ok()) s = txn->get(key_of(to), &b);
          if (s.ok()) s = txn->update(key_of(from), std::to_string(std::stol(a) - amount));
          if (s.ok()) s = txn->update(key_of(to), std::to_string(std::stol(b) + amount));
          if (s.ok()) s = txn->commit();
          if (s.ok()) {
            committed.fetch_add(1);
            break;
          }
          if (!s.is_aborted()) {
            report("transfer: " + s.to_string());
            return;
          }
          aborted.fetch_add(1);
        }
      }
    });
  }
  // A snapshot auditor (lock-free) and a locking auditor: the total holds
  // in every state they see.
  for (const bool read_only : {true, false}) {
    threads.emplace_back([&, read_only] {
      start.arrive_and_wait();
      while (!done.load()) {
        if (!read_only) std::this_thread::yield();  // let the movers through between audits
        std::unique_ptr<Transaction> txn;
        if (Status s = store_->transaction({.read_only = read_only, .lock_timeout_ms = 20}, &txn); !s.ok()) {
          report("audit begin: " + s.to_string());
          return;
        }
        long total = 0;
        Status s;
        for (int a = 0; a < kAccounts && s.ok(); ++a) {
          std::string v;
          s = txn->get(key_of(a), &v);
          if (s.ok()) total += std::stol(v);
        }
        if (s.is_aborted()) continue;
        if (s.ok()) s = txn->commit();
        if (!s.ok()) {
          report("audit: " + s.to_string());
        } else if (total != kAccounts * kStart) {
          report(std::string(read_only ? "snapshot" : "locking") + " audit saw a total of " +
                        std::to_string(total));
        }
      }
    });
  }
  for (unsigned m = 0; m < kMovers; ++m) threads[m].join();
  done.store(true);
  for (std::size_t i = kMovers; i < threads.size(); ++i) threads[i].join();
  EXPECT_EQ(mismatches_.count(), 0);
  EXPECT_EQ(committed.load(), static_cast<long>(kMovers) * transfers);
  long total = 0;
  for (int a = 0; a < kAccounts; ++a) {
    std::string v;
    ASSERT_TRUE(store_->get(key_of(a), &v).ok());
    total += std::stol(v);
  }
  EXPECT_EQ(total, kAccounts * kStart);
  EXPECT_TRUE(store_->check().ok()) << store_->check().to_string();
}

void DaliStress::increments_lose_nothing(Durability durability, int increments, int fill) {
  ASSERT_NO_FATAL_FAILURE(create(durability));
  constexpr unsigned kCounters = 3;
  constexpr unsigned kToggles = 2;
  constexpr unsigned kSwappers = 2;  // read_modify_write incrementers
  const auto counter = [](unsigned c) { return "counter" + std::to_string(c); };
  const auto toggle = [](unsigned k) { return "toggle" + std::to_string(k); };
  const auto number = [](std::optional<std::string_view> v) {
    return v ? std::stoll(std::string(*v)) : 0;
  };
  std::atomic<bool> done{false};
  std::atomic<long> txn_retries{0};
  std::vector<std::atomic<long>> flips(kToggles);
  std::barrier start(kSwappers + 5);
  std::vector<std::thread> threads;
  for (unsigned w = 0; w < kSwappers; ++w) {
    threads.emplace_back([&, w] {
      start.arrive_and_wait();
      for (int i = 0; i < increments; ++i) {
        const std::string key = counter((w + static_cast<unsigned>(i)) % kCounters);
        const Status s = store_->read_modify_write(key, [&](std::optional<std::string_view> cur) {
          return Modification::set(std::to_string(number(cur) + 1));
        });
        if (!s.ok()) report("increment " + key + ": " + s.to_string());
      }
    });
  }
  // Transactional increments of the same counters.
  threads.emplace_back([&] {
    start.arrive_and_wait();
    for (int i = 0; i < increments; ++i) {
      const std::string key = counter(static_cast<unsigned>(i) % kCounters);
      for (;;) {
        std::unique_ptr<Transaction> txn;
        Status s = store_->transaction({.lock_timeout_ms = 20}, &txn);
        if (!s.ok()) {
          report("begin: " + s.to_string());
          return;
        }
        std::string v;
        s = txn->get(key, &v);
        if (s.ok() || s.is_not_found()) {
          const long long n = s.ok() ? std::stoll(v) : 0;
          s = txn->upsert(key, std::to_string(n + 1));
        }
        if (s.ok()) s = txn->commit();
        if (s.ok()) break;
        if (!s.is_aborted()) {
          report("transaction " + key + ": " + s.to_string());
          return;
        }
        txn_retries.fetch_add(1);
      }
    }
  });
  // Two togglers flip the same keys: present -> absent -> present, each
  // flip a swap that inserts or removes.
  for (unsigned g = 0; g < 2; ++g) {
    threads.emplace_back([&, g] {
      start.arrive_and_wait();
      for (int i = 0; i < increments; ++i) {
        const unsigned k = (g + static_cast<unsigned>(i)) % kToggles;
        const Status s = store_->read_modify_write(toggle(k), [](std::optional<std::string_view> cur) {
          return cur ? Modification::remove() : Modification::set("on");
        });
        if (s.ok()) {
          flips[k].fetch_add(1);
        } else {
          report("toggle " + toggle(k) + ": " + s.to_string());
        }
      }
    });
  }
  // The filler: the table splits under the swaps.
  threads.emplace_back([&] {
    start.arrive_and_wait();
    for (int i = 0; i < fill; ++i) {
      const std::uint64_t k = static_cast<std::uint64_t>(i);
      if (Status s = store_->insert(key_of(k), value_of(k, 0)); !s.ok()) report("fill: " + s.to_string());
    }
  });
  // The reader: counters never go back, in the newest state or in a
  // snapshot (a later read runs in a later or the same epoch).
  threads.emplace_back([&] {
    start.arrive_and_wait();
    std::vector<long long> newest(kCounters, 0), durable(kCounters, 0);
    while (!done.load()) {
      for (unsigned c = 0; c < kCounters; ++c) {
        for (const bool snapshot : {false, true}) {
          std::string v;
          const Status s = store_->get(counter(c), &v, ReadOptions{.snapshot = snapshot});
          if (!s.ok() && !s.is_not_found()) report("read " + counter(c) + ": " + s.to_string());
          const long long n = s.ok() ? std::stoll(v) : 0;
          long long& last = snapshot ? durable[c] : newest[c];
          if (n < last) {
            report(counter(c) + (snapshot ? " (snapshot)" : "") + " went back from " +
                   std::to_string(last) + " to " + std::to_string(n));
          }
          last = std::max(last, n);
        }
      }
    }
  });
  for (std::size_t i = 0; i + 1 < threads.size(); ++i) threads[i].join();
  done.store(true);
  threads.back().join();
  EXPECT_EQ(mismatches_.count(), 0);

  const auto expect_state = [&] {
    long long total = 0;
    for (unsigned c = 0; c < kCounters; ++c) {
      std::string v;
      ASSERT_TRUE(store_->get(counter(c), &v).ok()) << counter(c);
      total += std::stoll(v);
    }
    EXPECT_EQ(total, static_cast<long long>(kSwappers + 1) * increments);
    std::uint64_t present = 0;
    for (unsigned k = 0; k < kToggles; ++k) {
      const bool on = flips[k].load() % 2 == 1;
      present += on ? 1 : 0;
      std::string v;
      const Status s = store_->get(toggle(k), &v);
      EXPECT_EQ(s.ok(), on) << toggle(k) << " after " << flips[k].load() << " flips: " << s.to_string();
    }
    EXPECT_EQ(store_->size(), kCounters + present + static_cast<std::uint64_t>(fill));
    EXPECT_TRUE(store_->check().ok()) << store_->check().to_string();
  };
  expect_state();
  EXPECT_GT(store_->stats().property("dali.splits"), 100u) << "the table did not grow under the swaps";
  ASSERT_TRUE(store_->close().ok());
  Options o;
  o.engine = "dali";
  ASSERT_TRUE(Store::open(path_, o, &store_).ok());
  expect_state();
}

TEST_F(DaliStress, IncrementsBySwapsAndTransactionsLoseNothingWhileTheTableGrows) {
  increments_lose_nothing(Durability::kEpoch, 1000 * kScale, 3000 * kScale);
}

TEST_F(DaliStress, StrictIncrementsBySwapsAndTransactionsLoseNothingWhileTheTableGrows) {
  increments_lose_nothing(Durability::kStrict, 150 * kScale, 1000 * kScale);
}

// Strict durability: a write is durable when it returns, so a snapshot
// read (which reads only the durable state) right after it finds it, while
// other writers keep the epochs moving.
TEST_F(DaliStress, StrictWritesAreInTheDurableStateWhenTheyReturn) {
  ASSERT_NO_FATAL_FAILURE(create(Durability::kStrict));
  constexpr unsigned kThreads = 4;
  const int ops = 300 * kScale;
  std::barrier start(kThreads);
  std::vector<std::thread> threads;
  for (unsigned t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      start.arrive_and_wait();
      for (int i = 0; i < ops; ++i) {
        const std::uint64_t k = static_cast<std::uint64_t>(i) * kThreads + t;
        if (Status s = store_->insert(key_of(k), value_of(k, 1)); !s.ok()) report(s.to_string());
        std::string got;
        const Status s = store_->get(key_of(k), &got, ReadOptions{.snapshot = true});
        if (!s.ok() || got != value_of(k, 1)) report("not durable on return: " + key_of(k));
      }
    });
  }
  for (std::thread& th : threads) th.join();
  EXPECT_EQ(mismatches_.count(), 0);
  EXPECT_EQ(store_->size(), std::uint64_t{kThreads} * ops);
  EXPECT_TRUE(store_->check().ok()) << store_->check().to_string();
}

}  // namespace
}  // namespace pmhash
