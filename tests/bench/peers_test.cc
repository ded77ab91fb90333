// Tests of the benchmark peers (bench/peers*.cc) through bench/table.h.
//
// Every peer, in each durability it offers, must give pmhash's meanings
// (insert of a present key is AlreadyExists and changes nothing; get, update
// and remove of an absent key are NotFound), count its items, and stay
// correct under concurrent threads, including threads racing to insert one
// key (exactly one wins). The file peers (lmdb, rocksdb) must also own their
// directory: create it, refuse one that exists without touching it, remove
// it when destroyed, and, in epoch mode, stop their sync thread promptly.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "bench/table.h"
#include "scratch_file.h"

namespace pmhash::bench {
namespace {

namespace fs = std::filesystem;
using pmhash::testing::ScratchDir;

struct PeerCase {
  std::string peer;
  Durability durability;
};

bool keeps_files(const std::string& peer) { return peer == "lmdb" || peer == "rocksdb"; }

std::string case_name(const ::testing::TestParamInfo<PeerCase>& info) {
  if (!keeps_files(info.param.peer)) return info.param.peer;
  return info.param.peer + (info.param.durability == Durability::kEpoch ? "_epoch" : "_strict");
}

// The DRAM maps once (durability does not apply), the file peers in both modes.
std::vector<PeerCase> all_cases() {
  std::vector<PeerCase> cases;
  for (const std::string& peer : peer_names()) {
    cases.push_back({peer, Durability::kStrict});
    if (keeps_files(peer)) cases.push_back({peer, Durability::kEpoch});
  }
  return cases;
}

std::vector<PeerCase> file_cases() {
  std::vector<PeerCase> cases;
  for (const PeerCase& c : all_cases()) {
    if (keeps_files(c.peer)) cases.push_back(c);
  }
  return cases;
}

std::string key_of(unsigned i) {
  std::string digits = std::to_string(i);
  return "key-" + std::string(12 - std::min<std::size_t>(12, digits.size()), '0') + digits;
}

// Runs fn(t) on `n` fresh threads, each between thread_begin() and
// thread_end(), and joins them.
template <typename Fn>
void on_threads(Table& table, unsigned n, Fn fn) {
  std::vector<std::thread> threads;
  for (unsigned t = 0; t < n; ++t) {
    threads.emplace_back([&table, &fn, t] {
      table.thread_begin();
      fn(t);
      table.thread_end();
    });
  }
  for (std::thread& thread : threads) thread.join();
}


class PeerTest : public ::testing::TestWithParam<PeerCase> {
 protected:
  TableConfig config() const {
    TableConfig config;
    config.files_dir = (scratch_.path() / "files").string();
    config.durability = GetParam().durability;
    config.epoch_interval = std::chrono::milliseconds(5);
    config.capacity_hint = 10000;
    config.threads = 4;
    return config;
  }
  std::unique_ptr<Table> make() const { return make_peer(GetParam().peer, config()); }
  bool exact_count() const { return GetParam().peer != "rocksdb"; }

  ScratchDir scratch_{"pmhash-peers-test"};
};

TEST_P(PeerTest, NameKindAndDurabilityAreStated) {
  auto table = make();
  EXPECT_EQ(table->name(), GetParam().peer);
  EXPECT_EQ(table->kind(), "peer");
  const std::string durability = table->durability();
  if (!keeps_files(GetParam().peer)) {
    EXPECT_EQ(durability, "none (volatile DRAM)");
  } else if (GetParam().durability == Durability::kStrict) {
    EXPECT_EQ(durability.rfind("strict: ", 0), 0u) << durability;
  } else {
    EXPECT_EQ(durability.rfind("epoch: ", 0), 0u) << durability;
    EXPECT_NE(durability.find("every 5 ms"), std::string::npos) << durability;
  }
}

TEST_P(PeerTest, InsertThenGetReturnsTheValue) {
  auto table = make();
  table->thread_begin();
  ASSERT_TRUE(table->insert("alpha", "one").ok());
  std::string value;
  ASSERT_TRUE(table->get("alpha", &value).ok());
  EXPECT_EQ(value, "one");
  EXPECT_TRUE(table->get("beta", &value).is_not_found());
  table->thread_end();
}

TEST_P(PeerTest, SecondInsertOfAKeyIsAlreadyExistsAndKeepsTheValue) {
  auto table = make();
  table->thread_begin();
  ASSERT_TRUE(table->insert("alpha", "one").ok());
  EXPECT_TRUE(table->insert("alpha", "two").is_already_exists());
  std::string value;
  ASSERT_TRUE(table->get("alpha", &value).ok());
  EXPECT_EQ(value, "one");
  table->thread_end();
}

TEST_P(PeerTest, UpdateOfAbsentKeyIsNotFoundAndInsertsNothing) {
  auto table = make();
  table->thread_begin();
  EXPECT_TRUE(table->update("alpha", "one").is_not_found());
  std::string value;
  EXPECT_TRUE(table->get("alpha", &value).is_not_found());
  table->thread_end();
}

TEST_P(PeerTest, UpdateOfPresentKeyChangesTheValue) {
  auto table = make();
  table->thread_begin();
  ASSERT_TRUE(table->insert("alpha", "one").ok());
  ASSERT_TRUE(table->update("alpha", "a much longer second value").ok());
  std::string value;
  ASSERT_TRUE(table->get("alpha", &value).ok());
  EXPECT_EQ(value, "a much longer second value");
  table->thread_end();
}

TEST_P(PeerTest, RemovedKeyIsNotFoundAndCanBeInsertedAgain) {
  auto table = make();
  table->thread_begin();
  ASSERT_TRUE(table->insert("alpha", "one").ok());
  ASSERT_TRUE(table->remove("alpha").ok());
  std::string value;
  EXPECT_TRUE(table->get("alpha", &value).is_not_found());
  EXPECT_TRUE(table->remove("alpha").is_not_found());
  ASSERT_TRUE(table->insert("alpha", "again").ok());
  ASSERT_TRUE(table->get("alpha", &value).ok());
  EXPECT_EQ(value, "again");
  table->thread_end();
}

TEST_P(PeerTest, RemoveOfAbsentKeyIsNotFound) {
  auto table = make();
  EXPECT_TRUE(table->remove("never-inserted").is_not_found());
}

TEST_P(PeerTest, GetWorksWithoutThreadBegin) {
  auto table = make();
  ASSERT_TRUE(table->insert("alpha", "one").ok());
  std::string value;
  ASSERT_TRUE(table->get("alpha", &value).ok());
  EXPECT_EQ(value, "one");
  EXPECT_TRUE(table->get("beta", &value).is_not_found());
}

TEST_P(PeerTest, StatsCountItems) {
  auto table = make();
  for (unsigned i = 0; i < 100; ++i) ASSERT_TRUE(table->insert(key_of(i), "v").ok());
  for (unsigned i = 0; i < 30; ++i) ASSERT_TRUE(table->remove(key_of(i)).ok());
  const TableStats stats = table->stats();
  ASSERT_TRUE(stats.items.has_value());
  // RocksDB's count is an estimate; only its presence is promised.
  if (exact_count()) {
    EXPECT_EQ(*stats.items, 70u);
  }
  if (keeps_files(GetParam().peer)) {
    EXPECT_EQ(stats.bytes_kind, "files");
    ASSERT_TRUE(stats.bytes.has_value());
    EXPECT_GT(*stats.bytes, 0u);
  } else {
    ASSERT_TRUE(stats.load_factor.has_value());
    EXPECT_GT(*stats.load_factor, 0.0);
  }
  EXPECT_TRUE(table->quiesce(std::chrono::seconds(30)));
}

TEST_P(PeerTest, ConcurrentInsertsOfDistinctKeysAllSucceedAndFreshThreadsReadThem) {
  constexpr unsigned kThreads = 4, kPerThread = 2000;
  auto table = make();
  std::atomic<unsigned> failures{0};
  on_threads(*table, kThreads, [&](unsigned t) {
    for (unsigned i = 0; i < kPerThread; ++i) {
      const unsigned k = t * kPerThread + i;
      if (!table->insert(key_of(k), "value-" + std::to_string(k)).ok()) ++failures;
    }
  });
  EXPECT_EQ(failures.load(), 0u);
  // A second phase on new threads, as the driver runs phases.
  on_threads(*table, kThreads, [&](unsigned t) {
    std::string value;
    for (unsigned i = 0; i < kPerThread; ++i) {
      const unsigned k = t * kPerThread + i;
      if (!table->get(key_of(k), &value).ok() || value != "value-" + std::to_string(k)) {
        ++failures;
      }
    }
  });
  EXPECT_EQ(failures.load(), 0u);
  if (exact_count()) {
    EXPECT_EQ(table->stats().items, kThreads * kPerThread);
  }
}

TEST_P(PeerTest, ConcurrentInsertsOfOneKeySucceedExactlyOnce) {
  constexpr unsigned kThreads = 4, kKeys = 200;
  auto table = make();
  // winner[k]: the threads whose insert of key k succeeded, one bit each.
  std::vector<std::atomic<unsigned>> winners(kKeys);
  std::atomic<unsigned> other_errors{0};
  on_threads(*table, kThreads, [&](unsigned t) {
    for (unsigned k = 0; k < kKeys; ++k) {
      const Status s = table->insert(key_of(k), "thread-" + std::to_string(t));
      if (s.ok()) {
        winners[k].fetch_or(1u << t);
      } else if (!s.is_already_exists()) {
        ++other_errors;
      }
    }
  });
  EXPECT_EQ(other_errors.load(), 0u);
  std::string value;
  for (unsigned k = 0; k < kKeys; ++k) {
    const unsigned w = winners[k].load();
    ASSERT_EQ(__builtin_popcount(w), 1) << key_of(k) << " winners mask " << w;
    ASSERT_TRUE(table->get(key_of(k), &value).ok());
    EXPECT_EQ(value, "thread-" + std::to_string(__builtin_ctz(w))) << key_of(k);
  }
  if (exact_count()) {
    EXPECT_EQ(table->stats().items, kKeys);
  }
}

TEST_P(PeerTest, ReadersSeeOnlyWrittenValuesWhileWritersUpdate) {
  constexpr unsigned kKeys = 64, kRounds = 50;
  auto table = make();
  for (unsigned k = 0; k < kKeys; ++k) ASSERT_TRUE(table->insert(key_of(k), "a").ok());
  std::atomic<unsigned> bad{0};
  on_threads(*table, 4, [&](unsigned t) {
    std::string value;
    for (unsigned r = 0; r < kRounds; ++r) {
      for (unsigned k = 0; k < kKeys; ++k) {
        if (t < 2) {  // writers
          if (!table->update(key_of(k), r % 2 == 0 ? "bb" : "ccc").ok()) ++bad;
        } else if (!table->get(key_of(k), &value).ok() ||
                   (value != "a" && value != "bb" && value != "ccc")) {
          ++bad;
        }
      }
    }
  });
  EXPECT_EQ(bad.load(), 0u);
}

INSTANTIATE_TEST_SUITE_P(Peers, PeerTest, ::testing::ValuesIn(all_cases()), case_name);

// --- the file peers ------------------------------------------------------------

class FilePeerTest : public PeerTest {};

TEST_P(FilePeerTest, CreatesItsDirectoryAndRemovesItWhenDestroyed) {
  const std::string dir = config().files_dir;
  ASSERT_FALSE(fs::exists(dir));
  auto table = make();
  EXPECT_TRUE(fs::is_directory(dir));
  ASSERT_TRUE(table->insert("alpha", "one").ok());
  EXPECT_FALSE(fs::is_empty(dir));
  table.reset();
  EXPECT_FALSE(fs::exists(dir));
}

TEST_P(FilePeerTest, CreatesMissingParentDirectories) {
  TableConfig cfg = config();
  cfg.files_dir = (scratch_.path() / "a" / "b" / "files").string();
  auto table = make_peer(GetParam().peer, cfg);
  EXPECT_TRUE(fs::is_directory(cfg.files_dir));
  table.reset();
  EXPECT_FALSE(fs::exists(cfg.files_dir));
}

TEST_P(FilePeerTest, RefusesAnExistingDirectoryAndLeavesItAlone) {
  const std::string dir = config().files_dir;
  fs::create_directories(dir);
  std::ofstream(fs::path(dir) / "precious") << "keep me";
  try {
    make();
    FAIL() << "created a table in the existing directory " << dir;
  } catch (const std::runtime_error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find(dir), std::string::npos) << what;
    EXPECT_NE(what.find("already exists"), std::string::npos) << what;
  }
  EXPECT_TRUE(fs::exists(fs::path(dir) / "precious"));
}

TEST_P(FilePeerTest, RefusesAnEmptyDirectoryName) {
  TableConfig cfg = config();
  cfg.files_dir.clear();
  EXPECT_THROW(make_peer(GetParam().peer, cfg), std::runtime_error);
}

TEST_P(FilePeerTest, TablesOneAfterAnotherInOneThreadEachWork) {
  // The same thread begins on each table; the second one it never ends, as a
  // careless driver might, and the tables after it must not be confused.
  for (int round = 0; round < 4; ++round) {
    auto table = make();
    table->thread_begin();
    const std::string value = "round-" + std::to_string(round);
    ASSERT_TRUE(table->insert("alpha", value).ok());
    std::string got;
    ASSERT_TRUE(table->get("alpha", &got).ok());
    EXPECT_EQ(got, value);
    if (round != 1) table->thread_end();
    table.reset();
    ASSERT_FALSE(fs::exists(config().files_dir));
  }
}

TEST_P(FilePeerTest, EpochIntervalMustBePositive) {
  TableConfig cfg = config();
  cfg.epoch_interval = std::chrono::milliseconds(0);
  if (GetParam().durability == Durability::kEpoch) {
    EXPECT_THROW(make_peer(GetParam().peer, cfg), std::runtime_error);
    EXPECT_FALSE(fs::exists(cfg.files_dir));
  } else {
    EXPECT_NO_THROW(make_peer(GetParam().peer, cfg));  // strict mode has no epochs
  }
}

TEST_P(FilePeerTest, DestroyingDoesNotWaitOutALongEpoch) {
  TableConfig cfg = config();
  cfg.epoch_interval = std::chrono::hours(1);
  auto table = make_peer(GetParam().peer, cfg);
  ASSERT_TRUE(table->insert("alpha", "one").ok());
  std::string value;
  ASSERT_TRUE(table->get("alpha", &value).ok());
  const auto start = std::chrono::steady_clock::now();
  table.reset();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
  EXPECT_FALSE(fs::exists(cfg.files_dir));
}

TEST_P(FilePeerTest, DataStaysVisibleAcrossEpochs) {
  TableConfig cfg = config();
  cfg.epoch_interval = std::chrono::milliseconds(1);
  auto table = make_peer(GetParam().peer, cfg);
  std::string value;
  for (unsigned i = 0; i < 200; ++i) {
    ASSERT_TRUE(table->insert(key_of(i), "v" + std::to_string(i)).ok());
    if (i % 50 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(3));
  }
  for (unsigned i = 0; i < 200; ++i) {
    ASSERT_TRUE(table->get(key_of(i), &value).ok());
    EXPECT_EQ(value, "v" + std::to_string(i));
  }
}

INSTANTIATE_TEST_SUITE_P(Peers, FilePeerTest, ::testing::ValuesIn(file_cases()), case_name);

TEST(LmdbPeerTest, FullMapIsNoSpace) {
  ScratchDir scratch{"pmhash-peers-test"};
  TableConfig cfg;
  cfg.files_dir = (scratch.path() / "files").string();
  cfg.capacity_hint = 0;  // the smallest map: 64 MiB and change
  auto table = make_peer("lmdb", cfg);
  const std::string value(1 << 20, 'x');
  Status status;
  for (unsigned i = 0; i < 200 && status.ok(); ++i) status = table->insert(key_of(i), value);
  EXPECT_TRUE(status.is_no_space()) << status.to_string();
  EXPECT_NE(status.message().find("capacity_hint"), std::string::npos) << status.message();
}

TEST(LmdbPeerTest, OverlongKeyIsInvalidArgument) {
  ScratchDir scratch{"pmhash-peers-test"};
  TableConfig cfg;
  cfg.files_dir = (scratch.path() / "files").string();
  auto table = make_peer("lmdb", cfg);
  EXPECT_TRUE(table->insert(std::string(4096, 'k'), "v").is_invalid_argument());
}

// oneTBB's map takes its memory from libtbbmalloc, which malloc's counters
// never see; with 8-byte keys and values (inside std::string, no malloc)
// the table must still report the bytes it holds, which grow with the keys
// and shrink when they go.
TEST(TbbPeerTest, ReportsTheBytesItsMapHoldsWithShortKeys) {
  auto table = make_peer("tbb", TableConfig{});
  const TableStats empty = table->stats();
  ASSERT_TRUE(empty.bytes.has_value());
  EXPECT_EQ(empty.bytes_kind, "dram");
  constexpr std::uint64_t kKeys = 20000;
  for (std::uint64_t i = 0; i < kKeys; ++i) {
    const std::string key(reinterpret_cast<const char*>(&i), sizeof(i));
    ASSERT_TRUE(table->insert(key, key).ok());
  }
  const TableStats full = table->stats();
  ASSERT_TRUE(full.bytes.has_value());
  // At least the two 8-byte halves of each pair.
  EXPECT_GE(*full.bytes, *empty.bytes + kKeys * 16);
  for (std::uint64_t i = 0; i < kKeys; ++i) {
    const std::string key(reinterpret_cast<const char*>(&i), sizeof(i));
    ASSERT_TRUE(table->remove(key).ok());
  }
  const TableStats after = table->stats();
  ASSERT_TRUE(after.bytes.has_value());
  EXPECT_LT(*after.bytes, *full.bytes);
}

// --- the registry --------------------------------------------------------------

TEST(PeerRegistryTest, NamesTheFivePeersInOrder) {
  EXPECT_EQ(peer_names(), (std::vector<std::string>{"libcuckoo", "tbb", "std", "lmdb", "rocksdb"}));
}

TEST(PeerRegistryTest, UnknownNameThrowsAndListsThePeers) {
  try {
    make_peer("nope", TableConfig{});
    FAIL() << "make_peer accepted an unknown name";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "unknown peer 'nope' (peers: libcuckoo, tbb, std, lmdb, rocksdb)");
  }
}

}  // namespace
}  // namespace pmhash::bench
