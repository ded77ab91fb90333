// Tests of Table::transact (bench/table.h), the operation of the txn
// workload, on every table that has transactions: a pmhash store of engine
// dali (bench/pmhash_table.h, in DRAM), LMDB and RocksDB (bench/peers_files.cc)
// in both durabilities; and of the refusal of every table that has none.
//
// A transaction reads its keys and then updates one: it commits and the
// update is visible; a read of an absent key makes it NotFound and applies
// nothing; transactions contending for a few keys from several threads all
// commit, the aborted attempts (lock timeouts, deadlocks) being retried
// inside transact() and counted.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <barrier>
#include <chrono>
#include <filesystem>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "bench/pmhash_table.h"
#include "bench/table.h"
#include "scratch_file.h"

namespace pmhash::bench {
namespace {

namespace fs = std::filesystem;
using pmhash::testing::ScratchDir;

struct TxnCase {
  std::string table;  // "dali", "lmdb" or "rocksdb"
  Durability durability;
};

std::string case_name(const ::testing::TestParamInfo<TxnCase>& info) {
  return info.param.table + (info.param.durability == Durability::kEpoch ? "_epoch" : "_strict");
}

std::vector<TxnCase> txn_cases() {
  std::vector<TxnCase> cases;
  for (const char* table : {"dali", "lmdb", "rocksdb"}) {
    for (Durability d : {Durability::kStrict, Durability::kEpoch}) cases.push_back({table, d});
  }
  return cases;
}

std::string key_of(unsigned i) {
  std::string digits = std::to_string(i);
  return "key-" + std::string(12 - std::min<std::size_t>(12, digits.size()), '0') + digits;
}


TableConfig base_config(const ScratchDir& scratch) {
  TableConfig config;
  config.files_dir = (scratch.path() / "files").string();
  config.granularity = "none";  // pmhash: a store in DRAM, the same transactions
  config.epoch_interval = std::chrono::milliseconds(5);
  config.capacity_hint = 10000;
  config.threads = 4;
  config.transactions = true;
  return config;
}

class TransactionTest : public ::testing::TestWithParam<TxnCase> {
 protected:
  std::unique_ptr<Table> make(unsigned lock_timeout_ms = 100) const {
    TableConfig config = base_config(scratch_);
    config.durability = GetParam().durability;
    config.lock_timeout_ms = lock_timeout_ms;
    if (GetParam().table == "dali") return std::make_unique<PmhashTable>("dali", config);
    return make_peer(GetParam().table, config);
  }

  // Inserts key_of(0 .. n-1) with value "v<i>".
  static void load(Table& table, unsigned n) {
    for (unsigned i = 0; i < n; ++i) {
      ASSERT_TRUE(table.insert(key_of(i), "v" + std::to_string(i)).ok()) << i;
    }
  }

  ScratchDir scratch_{"pmhash-txn-test"};
};

TEST_P(TransactionTest, IsSupported) {
  auto table = make();
  EXPECT_TRUE(table->transactions_supported().ok()) << table->transactions_supported().to_string();
}

TEST_P(TransactionTest, ReadsThenUpdateCommitsAndTheUpdateIsVisible) {
  auto table = make();
  load(*table, 4);
  table->thread_begin();
  const std::string keys[3] = {key_of(0), key_of(1), key_of(2)};
  const std::string_view reads[3] = {keys[0], keys[1], keys[2]};
  const std::string write_key = key_of(3);
  std::string buffer;
  std::uint64_t aborts = 0;
  const Status s = table->transact({reads, write_key, "new value"}, &buffer, &aborts);
  ASSERT_TRUE(s.ok()) << s.to_string();
  EXPECT_EQ(aborts, 0u);  // nobody else holds a lock
  EXPECT_EQ(buffer, "v2");  // the last read
  std::string value;
  ASSERT_TRUE(table->get(write_key, &value).ok());
  EXPECT_EQ(value, "new value");
  ASSERT_TRUE(table->get(keys[0], &value).ok());
  EXPECT_EQ(value, "v0");
  table->thread_end();
}

TEST_P(TransactionTest, AbsentReadIsNotFoundNamingTheKeyAndAppliesNothing) {
  auto table = make();
  load(*table, 4);
  table->thread_begin();
  const std::string present = key_of(0);
  const std::string absent = key_of(99);
  const std::string_view reads[3] = {present, absent, present};
  const std::string write_key = key_of(3);
  std::string buffer;
  std::uint64_t aborts = 0;
  const Status s = table->transact({reads, write_key, "must not appear"}, &buffer, &aborts);
  EXPECT_TRUE(s.is_not_found()) << s.to_string();
  EXPECT_NE(s.message().find(absent), std::string::npos) << s.message();
  std::string value;
  ASSERT_TRUE(table->get(write_key, &value).ok());
  EXPECT_EQ(value, "v3");
  EXPECT_TRUE(table->get(absent, &value).is_not_found());
  table->thread_end();
}

// Four threads run transactions over sixteen keys, each locking four of
// them in random orders, so lock waits and deadlocks happen; with a 10 ms
// lock timeout the attempts that wait too long abort and are retried
// (short enough to keep the test fast, long enough for a lock holder that a
// busy machine deschedules). Every transaction must commit, and every key
// must end with a value some transaction wrote.
TEST_P(TransactionTest, ContendingTransactionsAllCommitAfterRetries) {
  constexpr unsigned kKeys = 16;
  constexpr unsigned kThreads = 4;
  constexpr unsigned kPerThread = 150;
  auto table = make(/*lock_timeout_ms=*/10);
  load(*table, kKeys);
  std::atomic<std::uint64_t> committed{0};
  std::atomic<std::uint64_t> aborts{0};
  std::barrier start(kThreads);
  std::vector<std::thread> threads;
  for (unsigned t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      table->thread_begin();
      start.arrive_and_wait();  // run together, not one after another
      std::string buffer;
      std::mt19937 rng(t);
      unsigned order[kKeys];
      std::iota(order, order + kKeys, 0u);
      for (unsigned i = 0; i < kPerThread; ++i) {
        // Four distinct keys in a random order of this thread's own.
        std::shuffle(order, order + kKeys, rng);
        std::string keys[4];
        std::string_view reads[3];
        for (unsigned k = 0; k < 4; ++k) keys[k] = key_of(order[k]);
        for (unsigned k = 0; k < 3; ++k) reads[k] = keys[k];
        std::uint64_t mine = 0;
        const Status s = table->transact(
            {reads, keys[3], "t" + std::to_string(t) + "-" + std::to_string(i)}, &buffer, &mine);
        EXPECT_TRUE(s.ok()) << s.to_string();
        committed.fetch_add(s.ok() ? 1 : 0);
        aborts.fetch_add(mine);
      }
      table->thread_end();
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(committed.load(), kThreads * kPerThread);
  if (GetParam().table == "lmdb") {
    EXPECT_EQ(aborts.load(), 0u);  // one writer at a time
  }
  for (unsigned k = 0; k < kKeys; ++k) {
    std::string value;
    ASSERT_TRUE(table->get(key_of(k), &value).ok());
    EXPECT_TRUE(value == "v" + std::to_string(k) || value.starts_with("t")) << value;
  }
}

INSTANTIATE_TEST_SUITE_P(Tables, TransactionTest, ::testing::ValuesIn(txn_cases()), case_name);

TEST(TransactionRefusal, TablesWithoutTransactionsSayNotSupportedAndWhy) {
  ScratchDir scratch{"pmhash-txn-test"};
  TableConfig config = base_config(scratch);
  std::vector<std::unique_ptr<Table>> tables;
  tables.push_back(std::make_unique<PmhashTable>("clevel", config));
  for (const char* peer : {"libcuckoo", "tbb", "std"}) tables.push_back(make_peer(peer, config));
  for (const auto& table : tables) {
    const Status supported = table->transactions_supported();
    EXPECT_TRUE(supported.is_not_supported()) << table->name() << ": " << supported.to_string();
    EXPECT_NE(supported.message().find(table->name()), std::string::npos) << supported.message();
    const std::string key = "k";
    const std::string_view reads[3] = {key, key, key};
    std::string buffer;
    std::uint64_t aborts = 0;
    EXPECT_TRUE(table->transact({reads, key, "v"}, &buffer, &aborts).is_not_supported())
        << table->name();
    EXPECT_EQ(aborts, 0u);
  }
}

TEST(TransactionRefusal, RocksdbOpenedWithoutTransactionsRefuses) {
  ScratchDir scratch{"pmhash-txn-test"};
  TableConfig config = base_config(scratch);
  config.transactions = false;
  auto table = make_peer("rocksdb", config);
  EXPECT_TRUE(table->transactions_supported().is_not_supported());
}

TEST(RetryAborted, RetriesAbortedAttemptsAndCountsThem) {
  unsigned calls = 0;
  std::uint64_t aborts = 0;
  const Status s = retry_aborted(
      [&] { return ++calls < 3 ? Status::Aborted("lock wait") : Status::OK(); }, &aborts);
  EXPECT_TRUE(s.ok());
  EXPECT_EQ(calls, 3u);
  EXPECT_EQ(aborts, 2u);
}

TEST(RetryAborted, PassesOtherErrorsThroughWithoutRetrying) {
  unsigned calls = 0;
  std::uint64_t aborts = 0;
  const Status s = retry_aborted([&] { return ++calls, Status::NotFound("gone"); }, &aborts);
  EXPECT_TRUE(s.is_not_found());
  EXPECT_EQ(calls, 1u);
  EXPECT_EQ(aborts, 0u);
}

TEST(RetryAborted, GivesUpAfterTheMaximumOfAttempts) {
  unsigned calls = 0;
  std::uint64_t aborts = 0;
  const Status s = retry_aborted([&] { return ++calls, Status::Aborted("always"); }, &aborts);
  EXPECT_TRUE(s.is_aborted());
  EXPECT_NE(s.message().find("always"), std::string::npos) << s.message();
  EXPECT_EQ(calls, kTxnMaxAttempts);
  EXPECT_EQ(aborts, kTxnMaxAttempts);
}

}  // namespace
}  // namespace pmhash::bench
