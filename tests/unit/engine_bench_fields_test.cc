// tests/unit/engine_bench_fields_test.cc - what the descriptors tell a
// benchmark (pmhash/engines.h): how large a pool an engine needs
// (EngineDescriptor::pool_bytes, generic_pool_bytes), the workloads of its
// paper (PaperWorkload) and the option that holds its lock lease
// (lease_option). Each is checked against the registry's engines, so an
// engine added later is checked too.
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "pmhash/engines.h"
#include "pmhash/options.h"
#include "pmhash/store.h"

namespace pmhash {
namespace {

// The pool bytes a front end gives `engine` for `demand`: its own estimate,
// else the generic one.
std::uint64_t estimate(const EngineDescriptor& engine, const PoolDemand& demand,
                       const Options& options) {
  return engine.pool_bytes != nullptr ? engine.pool_bytes(demand, options)
                                      : generic_pool_bytes(demand);
}

// Fills a store of `engine` with `keys` distinct keys in a pool of exactly
// the estimated size (no floor); every insert must succeed.
void fill_estimated_pool(const EngineDescriptor& engine, Options options, std::uint64_t keys,
                         std::size_t key_size, std::size_t value_size) {
  const PoolDemand demand{keys, key_size, value_size};
  options.engine = std::string(engine.name);
  options.pool_size = estimate(engine, demand, options);
  std::unique_ptr<Store> store;
  const Status created = Store::create_volatile(options, &store);
  ASSERT_TRUE(created.ok()) << engine.name << " in " << options.pool_size
                            << " bytes: " << created.to_string();
  const std::string value(value_size, 'v');
  for (std::uint64_t i = 0; i < keys; ++i) {
    std::string key = std::to_string(i);
    key.resize(key_size, '.');
    const Status s = store->insert(key, value);
    ASSERT_TRUE(s.ok()) << engine.name << ": key " << i << " of " << keys << " in a pool of "
                        << options.pool_size << " bytes: " << s.to_string();
  }
  EXPECT_EQ(store->size(), keys) << engine.name;
  EXPECT_TRUE(store->close().ok()) << engine.name;
}

TEST(PoolEstimate, EveryFinishedPoolEngineTakesTheKeysItsEstimateIsFor) {
  constexpr std::uint64_t kKeys = 200'000;
  for (const EngineDescriptor* e : finished_engines()) {
    if (e->location != Location::kPoolFile) continue;
    SCOPED_TRACE(std::string(e->name));
    fill_estimated_pool(*e, Options{}, kKeys, 8, 8);
    fill_estimated_pool(*e, Options{}, kKeys / 4, 16, 100);
  }
}

// An engine's own estimate is at least the generic one, and grows with the
// keys and with the options it reads.
TEST(PoolEstimate, OwnEstimatesAddToTheGenericOne) {
  const PoolDemand small{1000, 8, 8};
  const PoolDemand large{1'000'000, 8, 8};
  EXPECT_EQ(generic_pool_bytes(large), 1'000'000u * (200 + 2 * 16));
  for (const EngineDescriptor* e : all_engines()) {
    if (e->pool_bytes == nullptr) continue;
    SCOPED_TRACE(std::string(e->name));
    EXPECT_EQ(e->location, Location::kPoolFile);
    EXPECT_GE(e->pool_bytes(large, Options{}), generic_pool_bytes(large));
    EXPECT_GT(e->pool_bytes(large, Options{}), e->pool_bytes(small, Options{}));
  }
  // nehash's groups grow with the bucket bits; pmeh's split margin with the
  // segment size.
  Options wide;
  wide.set("nehash.bucket_bits", 8);
  const EngineDescriptor* nehash = find_engine("nehash");
  ASSERT_NE(nehash, nullptr);
  ASSERT_NE(nehash->pool_bytes, nullptr);
  EXPECT_GT(nehash->pool_bytes(large, wide), nehash->pool_bytes(large, Options{}));
  const EngineDescriptor* pmeh = find_engine("pmeh");
  ASSERT_NE(pmeh, nullptr);
  ASSERT_NE(pmeh->pool_bytes, nullptr);
  Options small_segments;
  small_segments.set("pmeh.segment_kib", 4).set("pmeh.split_bits", 1);
  EXPECT_LT(pmeh->pool_bytes(large, small_segments), pmeh->pool_bytes(large, Options{}));
}

// The pool engine with the largest split margin still takes its keys with
// the options that make its margin smallest.
TEST(PoolEstimate, PmehTakesItsKeysWithSmallSegmentsAndTwoWaySplits) {
  const EngineDescriptor* pmeh = find_engine("pmeh");
  ASSERT_NE(pmeh, nullptr);
  Options o;
  o.set("pmeh.segment_kib", 4).set("pmeh.split_bits", 1);
  fill_estimated_pool(*pmeh, o, 200'000, 8, 8);
}

TEST(PaperWorkloads, AreNamedAfterTheirEngineUniqueAndSumTo100) {
  std::set<std::string> names;
  for (const EngineDescriptor* e : all_engines()) {
    for (const PaperWorkload& w : e->workloads) {
      SCOPED_TRACE(std::string(w.name));
      EXPECT_EQ(w.name.rfind(std::string(e->name) + "-", 0), 0u);
      EXPECT_GT(w.name.size(), e->name.size() + 1);
      EXPECT_FALSE(w.doc.empty());
      EXPECT_EQ(w.read + w.update + w.insert + w.remove, 100u);
      EXPECT_TRUE(names.insert(std::string(w.name)).second) << "named twice";
      EXPECT_EQ(find_paper_workload(w.name), &w);
    }
  }
  EXPECT_EQ(names.size(), paper_workloads().size());
  EXPECT_EQ(find_paper_workload("no-such-workload"), nullptr);
}

// The NEHASH paper's workloads a, b and g: reads and inserts of new keys,
// uniform.
TEST(PaperWorkloads, NehashContributesThePapersMixes) {
  const PaperWorkload* a = find_paper_workload("nehash-a");
  const PaperWorkload* b = find_paper_workload("nehash-b");
  const PaperWorkload* g = find_paper_workload("nehash-g");
  ASSERT_TRUE(a != nullptr && b != nullptr && g != nullptr);
  EXPECT_EQ(a->read, 50u);
  EXPECT_EQ(a->insert, 50u);
  EXPECT_EQ(b->read, 95u);
  EXPECT_EQ(b->insert, 5u);
  EXPECT_EQ(g->read, 5u);
  EXPECT_EQ(g->insert, 95u);
  for (const PaperWorkload* w : {a, b, g}) EXPECT_EQ(w->keys, KeyChoice::kUniform);
}

// A lease option is an unsigned option of its own engine, which lives on
// memory nodes, and it takes twice the longest remote timeout a front end
// sets by default (10 s).
TEST(LeaseOption, NamesAnUnsignedOptionOfAMemoryNodeEngine) {
  unsigned with_lease = 0;
  for (const EngineDescriptor* e : all_engines()) {
    if (e->lease_option.empty()) continue;
    ++with_lease;
    SCOPED_TRACE(std::string(e->name));
    EXPECT_EQ(e->location, Location::kMemoryNodes);
    const OptionSpec* spec = find_option(*e, e->lease_option);
    ASSERT_NE(spec, nullptr);
    EXPECT_EQ(spec->type, OptionType::kUnsigned);
    EXPECT_TRUE(check_option(e->lease_option, "20000").ok());
  }
  EXPECT_GE(with_lease, 1u);
  EXPECT_EQ(find_engine("sephash")->lease_option, "sephash.lock_lease_ms");
}

}  // namespace
}  // namespace pmhash
