// tests/bench/ycsb_test.cc - workloads and operation streams of pmhash-bench
// (bench/ycsb.h): parsing, mixes, determinism, which keys each kind of
// operation touches and which outcomes are promised.
#include "bench/ycsb.h"

#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

namespace pmhash::bench {
namespace {

std::vector<OpStream> streams_for(const std::string& name, std::uint64_t records,
                                  std::uint64_t ops, unsigned threads, std::uint64_t seed,
                                  const KeySpace& space) {
  std::string error;
  const std::optional<WorkloadSpec> spec = parse_workload(name, &error);
  EXPECT_TRUE(spec.has_value()) << error;
  StreamParams p;
  p.records = records;
  p.ops = ops;
  p.threads = threads;
  p.distribution = spec->distribution;
  p.seed = seed;
  return generate_streams(*spec, space, p);
}

// Every operation of the streams as (type, must-succeed flag, key).
struct Op {
  OpType type;
  bool must;
  std::string key;
};

std::vector<Op> flatten(const std::vector<OpStream>& streams, std::size_t key_size) {
  std::vector<Op> ops;
  for (const OpStream& s : streams) {
    for (std::size_t i = 0; i < s.size(); ++i) {
      ops.push_back({static_cast<OpType>(s.ops[i] & OpStream::kTypeMask),
                     (s.ops[i] & OpStream::kMustSucceed) != 0,
                     std::string(s.keys.data() + i * key_size, key_size)});
    }
  }
  return ops;
}

std::set<std::string> loaded_keys(const KeySpace& space, std::uint64_t records) {
  std::set<std::string> keys;
  for (std::uint64_t r = 0; r < records; ++r) keys.insert(space.key(r));
  return keys;
}

TEST(Workloads, EveryDocumentedNameParses) {
  for (const char* name : {"load", "a", "b", "c", "d", "f", "insert", "read", "read-neg", "update",
                           "delete", "mixed:40/20/30/10", "mixed:0/0/0/100", "txn"}) {
    std::string error;
    const auto spec = parse_workload(name, &error);
    ASSERT_TRUE(spec.has_value()) << name << ": " << error;
    double total = 0;
    for (double s : spec->mix.share) total += s;
    EXPECT_DOUBLE_EQ(total, 1.0) << name;
  }
}

TEST(Workloads, BadNamesAreRefusedWithAReason) {
  for (const char* name : {"e", "", "A", "mixed:", "mixed:50/50/10/0", "mixed:1/2/3", "mixed:x/0/0/100",
                           "mixed:101/0/0/-1"}) {
    std::string error;
    EXPECT_FALSE(parse_workload(name, &error).has_value()) << name;
    EXPECT_FALSE(error.empty()) << name;
    EXPECT_EQ(error.find('\n'), std::string::npos) << error;
  }
}

TEST(Workloads, YcsbMixesAndDistributionsAreThePapers) {
  std::string error;
  const auto a = parse_workload("a", &error);
  EXPECT_DOUBLE_EQ(a->mix[OpType::kRead], 0.5);
  EXPECT_DOUBLE_EQ(a->mix[OpType::kUpdate], 0.5);
  EXPECT_EQ(a->distribution, Distribution::kZipfian);
  const auto d = parse_workload("d", &error);
  EXPECT_DOUBLE_EQ(d->mix[OpType::kInsert], 0.05);
  EXPECT_EQ(d->distribution, Distribution::kLatest);
  const auto f = parse_workload("f", &error);
  EXPECT_DOUBLE_EQ(f->mix[OpType::kRmw], 0.5);
  EXPECT_FALSE(parse_workload("load", &error)->run_phase);
}

TEST(Streams, AreDeterministicBySeedAndDifferAcrossSeeds) {
  const KeySpace space(16, 16, 1);
  const auto one = flatten(streams_for("a", 1000, 5000, 2, 9, space), 16);
  const auto again = flatten(streams_for("a", 1000, 5000, 2, 9, space), 16);
  const auto other = flatten(streams_for("a", 1000, 5000, 2, 10, space), 16);
  ASSERT_EQ(one.size(), 5000u);
  ASSERT_EQ(again.size(), one.size());
  bool same = true;
  bool differs = false;
  for (std::size_t i = 0; i < one.size(); ++i) {
    same = same && one[i].key == again[i].key && one[i].type == again[i].type;
    differs = differs || one[i].key != other[i].key;
  }
  EXPECT_TRUE(same);
  EXPECT_TRUE(differs);
}

TEST(Streams, AreDealtRoundRobinOverTheThreads) {
  const KeySpace space(16, 16, 1);
  const auto streams = streams_for("c", 100, 1001, 3, 1, space);
  ASSERT_EQ(streams.size(), 3u);
  EXPECT_EQ(streams[0].size(), 334u);
  EXPECT_EQ(streams[1].size(), 334u);
  EXPECT_EQ(streams[2].size(), 333u);
}

TEST(Streams, FollowTheMixWithinSamplingError) {
  const KeySpace space(16, 16, 1);
  const auto ops = flatten(streams_for("b", 10'000, 100'000, 1, 1, space), 16);
  std::size_t updates = 0;
  for (const Op& op : ops) updates += op.type == OpType::kUpdate;
  // 5% of 100,000: standard deviation about 69.
  EXPECT_NEAR(static_cast<double>(updates), 5000.0, 400.0);
}

TEST(Streams, ReadsAndUpdatesTouchLoadedKeysAndMustSucceed) {
  const KeySpace space(16, 16, 1);
  const auto loaded = loaded_keys(space, 2000);
  for (const char* name : {"a", "c", "f", "read", "update"}) {
    for (const Op& op : flatten(streams_for(name, 2000, 3000, 2, 1, space), 16)) {
      EXPECT_TRUE(loaded.count(op.key)) << name;
      EXPECT_TRUE(op.must) << name;
    }
  }
}

TEST(Streams, NegativeReadsNeverTouchALoadedKey) {
  const KeySpace space(16, 16, 1);
  const auto loaded = loaded_keys(space, 2000);
  std::set<std::string> seen;
  for (const Op& op : flatten(streams_for("read-neg", 2000, 3000, 2, 1, space), 16)) {
    EXPECT_EQ(op.type, OpType::kRead);
    EXPECT_FALSE(loaded.count(op.key));
    seen.insert(op.key);
  }
  EXPECT_EQ(seen.size(), 3000u);
}

TEST(Streams, InsertsUseNewDistinctKeys) {
  const KeySpace space(16, 16, 1);
  const auto loaded = loaded_keys(space, 2000);
  std::set<std::string> inserted;
  for (const Op& op : flatten(streams_for("insert", 2000, 3000, 2, 1, space), 16)) {
    EXPECT_EQ(op.type, OpType::kInsert);
    EXPECT_TRUE(op.must);
    EXPECT_FALSE(loaded.count(op.key));
    EXPECT_TRUE(inserted.insert(op.key).second);
  }
}

TEST(Streams, DeletesTouchEachLoadedKeyAtMostOnceAndAreCappedAtTheRecords) {
  const KeySpace space(16, 16, 1);
  const auto loaded = loaded_keys(space, 2000);
  const auto ops = flatten(streams_for("delete", 2000, 5000, 2, 1, space), 16);
  EXPECT_EQ(ops.size(), 2000u);
  std::set<std::string> deleted;
  for (const Op& op : ops) {
    EXPECT_TRUE(loaded.count(op.key));
    EXPECT_TRUE(deleted.insert(op.key).second);
  }
}

TEST(Streams, LatestReadsOfRunInsertedRecordsMayMiss) {
  const KeySpace space(16, 16, 1);
  const auto loaded = loaded_keys(space, 1000);
  std::size_t fresh_reads = 0;
  for (const Op& op : flatten(streams_for("d", 1000, 20'000, 2, 1, space), 16)) {
    if (op.type != OpType::kRead) continue;
    // A read is promised to find its key exactly when the key was loaded.
    EXPECT_EQ(op.must, loaded.count(op.key) == 1);
    fresh_reads += loaded.count(op.key) == 0;
  }
  // latest favours the newest records: most reads go to run-inserted ones.
  EXPECT_GT(fresh_reads, 0u);
}

TEST(Streams, MixesWithDeletesPromiseNothingButInserts) {
  const KeySpace space(16, 16, 1);
  for (const Op& op : flatten(streams_for("mixed:40/20/20/20", 1000, 5000, 2, 1, space), 16)) {
    EXPECT_EQ(op.must, op.type == OpType::kInsert);
  }
}

TEST(Workloads, TxnIsTransactionsOfUniformKeysAsInTheDaliPaper) {
  std::string error;
  const auto txn = parse_workload("txn", &error);
  ASSERT_TRUE(txn.has_value()) << error;
  EXPECT_DOUBLE_EQ(txn->mix[OpType::kTxn], 1.0);
  EXPECT_EQ(txn->distribution, Distribution::kUniform);
  EXPECT_FALSE(txn->distribution_fixed);  // --distribution applies
  EXPECT_TRUE(txn->run_phase);
  EXPECT_EQ(kTxnKeys, kTxnReads + kTxnWrites);
}

// Each transaction of a txn stream carries kTxnKeys distinct loaded keys
// inline and must commit; streams are dealt round-robin like the others.
TEST(Streams, TxnOperationsCarryDistinctLoadedKeysAndMustCommit) {
  const KeySpace space(16, 16, 1);
  const auto loaded = loaded_keys(space, 50);
  for (const char* distribution : {"uniform", "zipfian"}) {
    std::string error;
    const WorkloadSpec spec = *parse_workload("txn", &error);
    StreamParams p;
    p.records = 50;
    p.ops = 3001;
    p.threads = 2;
    p.distribution = *parse_distribution(distribution);
    const std::vector<OpStream> streams = generate_streams(spec, space, p);
    ASSERT_EQ(streams.size(), 2u);
    EXPECT_EQ(streams[0].size() + streams[1].size(), 3001u);
    std::set<std::string> touched;
    for (const OpStream& s : streams) {
      EXPECT_EQ(s.keys_per_op, kTxnKeys);
      ASSERT_EQ(s.keys.size(), s.size() * kTxnKeys * 16);
      for (std::size_t i = 0; i < s.size(); ++i) {
        EXPECT_EQ(static_cast<OpType>(s.ops[i] & OpStream::kTypeMask), OpType::kTxn);
        EXPECT_NE(s.ops[i] & OpStream::kMustSucceed, 0);
        std::set<std::string> mine;
        for (std::size_t k = 0; k < kTxnKeys; ++k) {
          const std::string key(s.keys.data() + (i * kTxnKeys + k) * 16, 16);
          EXPECT_TRUE(loaded.count(key)) << distribution;
          mine.insert(key);
          touched.insert(key);
        }
        EXPECT_EQ(mine.size(), kTxnKeys) << distribution << ": keys repeat in one transaction";
      }
    }
    // 12,000 uniform draws over 50 records reach every one (scrambled
    // zipfian ranks may collide and leave some records out).
    if (p.distribution == Distribution::kUniform) {
      EXPECT_EQ(touched.size(), 50u);
    }
  }
}

TEST(Streams, TxnStreamsAreDeterministicBySeed) {
  const KeySpace space(16, 16, 1);
  const auto first = streams_for("txn", 1000, 500, 2, 7, space);
  const auto again = streams_for("txn", 1000, 500, 2, 7, space);
  const auto other = streams_for("txn", 1000, 500, 2, 8, space);
  EXPECT_EQ(first[0].keys, again[0].keys);
  EXPECT_EQ(first[1].keys, again[1].keys);
  EXPECT_NE(first[0].keys, other[0].keys);
}

TEST(Streams, TxnNeedsAtLeastAsManyRecordsAsKeysPerTransaction) {
  const KeySpace space(16, 16, 1);
  std::string error;
  const WorkloadSpec spec = *parse_workload("txn", &error);
  StreamParams p;
  p.records = kTxnKeys - 1;
  p.ops = 10;
  EXPECT_THROW(generate_streams(spec, space, p), Failure);
  // Exactly enough: every transaction takes them all, under every
  // distribution (scrambled zipfian ranks collide on so few records).
  p.records = kTxnKeys;
  for (Distribution d : {Distribution::kUniform, Distribution::kZipfian, Distribution::kLatest}) {
    p.distribution = d;
    const std::vector<OpStream> streams = generate_streams(spec, space, p);
    ASSERT_EQ(streams[0].size(), 10u) << distribution_name(d);
    for (std::size_t i = 0; i < streams[0].size(); ++i) {
      std::set<std::string> keys;
      for (std::size_t k = 0; k < kTxnKeys; ++k) {
        keys.insert(std::string(streams[0].keys.data() + (i * kTxnKeys + k) * 16, 16));
      }
      EXPECT_EQ(keys.size(), kTxnKeys) << distribution_name(d);
    }
  }
}

}  // namespace
}  // namespace pmhash::bench
