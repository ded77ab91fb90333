// tests/unit/volatile_store_test.cc - Store::create_volatile and
// Store::engines: a store in anonymous DRAM behaves like a pool-backed one.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <string>

#include "pmhash/store.h"

namespace pmhash {
namespace {

TEST(VolatileStore, ServesEveryOperationLikeAPoolBackedStore) {
  Options options;
  options.pool_size = 64 << 20;
  std::unique_ptr<Store> store;
  ASSERT_TRUE(Store::create_volatile(options, &store).ok());
  for (int i = 0; i < 20'000; ++i) {
    ASSERT_TRUE(store->insert("key" + std::to_string(i), "value" + std::to_string(i)).ok()) << i;
  }
  EXPECT_TRUE(store->insert("key7", "again").is_already_exists());
  ASSERT_TRUE(store->update("key7", "seven").ok());
  ASSERT_TRUE(store->remove("key8").ok());
  std::string value;
  ASSERT_TRUE(store->get("key7", &value).ok());
  EXPECT_EQ(value, "seven");
  EXPECT_TRUE(store->get("key8", &value).is_not_found());
  EXPECT_EQ(store->size(), 19'999u);
  EXPECT_TRUE(store->check().ok());
  const Stats st = store->stats();
  EXPECT_EQ(st.granularity, "none");
  EXPECT_EQ(st.engine, "clevel");
  EXPECT_GT(st.property("clevel.expansions"), 0u);
}

TEST(VolatileStore, RefusesWhatCreateRefuses) {
  std::unique_ptr<Store> store;
  Options unknown;
  unknown.engine = "nosuch";
  EXPECT_TRUE(Store::create_volatile(unknown, &store).is_invalid_argument());
  Options epoch;
  epoch.durability = Durability::kEpoch;
  EXPECT_TRUE(Store::create_volatile(epoch, &store).is_invalid_argument());
  Options tiny;
  tiny.pool_size = 4096;
  EXPECT_FALSE(Store::create_volatile(tiny, &store).ok());
  EXPECT_EQ(store, nullptr);
}

TEST(Engines, ListsEveryEngineCreateAccepts) {
  const std::vector<std::string> engines = Store::engines();
  ASSERT_FALSE(engines.empty());
  EXPECT_NE(std::find(engines.begin(), engines.end(), "clevel"), engines.end());
  for (const std::string& name : engines) {
    Options options;
    options.engine = name;
    options.pool_size = 32 << 20;
    std::unique_ptr<Store> store;
    EXPECT_TRUE(Store::create_volatile(options, &store).ok()) << name;
  }
}

}  // namespace
}  // namespace pmhash
