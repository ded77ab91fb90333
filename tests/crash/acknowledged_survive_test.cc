// tests/crash/acknowledged_survive_test.cc - strict durability checked with
// the persistence simulator (persistence_sim.h): after every acknowledged
// operation, a crash that loses every line not yet made durable must still
// recover to exactly the acknowledged state. For every registered engine
// (Store::engines()).
//
// Between operations (and once no resize is running) the test builds two
// crash images: the pessimistic one (only what the simulator knows to be
// durable) and the optimistic one (every dirty line written back too).
// Each is written to its own pool file, opened (which runs recovery),
// compared key by key with a model of the acknowledged operations, checked
// with Store::check(), and given one more insert to show it keeps working.
// Crashes *inside* operations are the exploration's job (issue 4); this
// test pins the promise at operation boundaries.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "crash/persistence_sim.h"
#include "crash/workload.h"
#include "scratch_file.h"
#include "pmhash/store.h"
#include "store/store_testing.h"

namespace pmhash::testing {
namespace {

using Model = std::map<std::string, std::string>;

class AcknowledgedSurvive : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    base_ = scratch_path("pmhash-ack");
    granularity_.force("cache_line");
  }
  void TearDown() override {
    ::unlink((base_ + ".pool").c_str());
    ::unlink((base_ + "-crash.pool").c_str());
  }

  // Recovers `image` as a pool and compares it with the model.
  void verify_image(const std::vector<std::byte>& image, const Model& model,
                    const std::string& what) {
    const std::string path = base_ + "-crash.pool";
    {
      std::ofstream out(path, std::ios::binary | std::ios::trunc);
      out.write(reinterpret_cast<const char*>(image.data()),
                static_cast<std::streamsize>(image.size()));
      ASSERT_TRUE(out.good()) << path;
    }
    std::unique_ptr<Store> store;
    const Status open = Store::open(path, Options{.engine = ""}, &store);
    ASSERT_TRUE(open.ok()) << what << ": " << open.to_string();
    for (const auto& [key, value] : model) {
      std::string got;
      const Status s = store->get(key, &got);
      ASSERT_TRUE(s.ok()) << what << ": acknowledged key " << key << " lost: " << s.to_string();
      ASSERT_EQ(got, value) << what << ": key " << key;
    }
    std::size_t seen = 0;
    ASSERT_TRUE(store
                    ->for_each([&](std::string_view key, std::string_view) {
                      ++seen;
                      EXPECT_TRUE(model.count(std::string(key))) << what << ": key " << key
                                                                 << " was deleted or never acknowledged";
                      return true;
                    })
                    .ok());
    EXPECT_EQ(seen, model.size()) << what;
    EXPECT_EQ(store->size(), model.size()) << what;
    const Status check = store->check();
    EXPECT_TRUE(check.ok()) << what << ": " << check.to_string();
    EXPECT_TRUE(store->insert("after-recovery", "works").ok()) << what;
  }

  std::string base_;
  GranularityGuard granularity_;
};

// Waits until no resize runs, so that no background thread writes the pool
// while a crash image is copied.
void wait_until_quiet(Store& store) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (store.stats().resizing) {
    ASSERT_LT(std::chrono::steady_clock::now(), deadline) << "resize never finished";
    std::this_thread::yield();
  }
}

TEST_P(AcknowledgedSurvive, EveryAcknowledgedOperationSurvivesACrashRightAfterIt) {
  Options options;
  options.engine = GetParam();
  options.pool_size = 16 << 20;
  options.set("clevel.initial_level_log2", 4);  // tiny: the workload expands several times
  options.set("nehash.bucket_bits", 1);         // tiny groups: the workload splits them often
  options.set("nehash.initial_dir_bits", 0);
  options.set("pmeh.segment_kib", 4);           // small segments in two zones: the workload splits them
  options.set("pmeh.zone_bits", 1);
  std::unique_ptr<Store> store;
  const Status created = Store::create(base_ + ".pool", options, &store);
  ASSERT_TRUE(created.ok()) << created.to_string();
  PersistenceSim sim(store::testing::region(*store));

  Model model;
  std::vector<std::string> keys;
  std::mt19937_64 rng(11);
  constexpr int kOps = 900;
  constexpr int kCheckEvery = 15;
  for (int i = 0; i < kOps; ++i) {
    const unsigned dice = static_cast<unsigned>(rng() % 10);
    std::string what;
    if (keys.empty() || dice < 6) {
      const std::string key = "key-" + std::to_string(i);
      const std::string value = "value-" + std::to_string(rng() % 100000) + std::string(rng() % 40, 'v');
      ASSERT_TRUE(store->insert(key, value).ok()) << i;
      model[key] = value;
      keys.push_back(key);
      what = "after insert " + key;
    } else {
      const std::size_t pick = static_cast<std::size_t>(rng() % keys.size());
      const std::string key = keys[pick];
      if (dice < 8) {
        const std::string value = "updated-" + std::to_string(i);
        ASSERT_TRUE(store->update(key, value).ok()) << i;
        model[key] = value;
        what = "after update " + key;
      } else {
        ASSERT_TRUE(store->remove(key).ok()) << i;
        model.erase(key);
        keys[pick] = keys.back();
        keys.pop_back();
        what = "after remove " + key;
      }
    }
    if (i % kCheckEvery != kCheckEvery - 1) continue;
    wait_until_quiet(*store);
    verify_image(sim.crash_image({}), model, what + " (op " + std::to_string(i) +
                                                 ", only durable lines)");
    verify_image(sim.crash_image({sim.dirty_units(), {}}), model,
                 what + " (op " + std::to_string(i) + ", every dirty line)");
    if (HasFatalFailure()) return;
  }
  EXPECT_GT(sim.crash_points(), static_cast<std::uint64_t>(kOps));
}

INSTANTIATE_TEST_SUITE_P(Engines, AcknowledgedSurvive, ::testing::ValuesIn(Store::engines()),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace pmhash::testing
