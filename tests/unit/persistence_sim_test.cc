// tests/unit/persistence_sim_test.cc - the crash simulator's model of the
// persistence domain (tests/crash/persistence_sim.h): what each granularity
// makes durable, what a crash may keep, and the crash choices it enumerates.
#include "crash/persistence_sim.h"
#include "scratch_file.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

namespace pmhash::testing {
namespace {

using media::Granularity;
using media::Region;

constexpr std::size_t kFileSize = 64 * 1024;

// A zeroed file under /dev/shm mapped with a forced granularity.
class PersistenceSimTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = scratch_path("pmhash-sim");
    create_zero_file(path_, kFileSize);
  }
  void TearDown() override {
    region_.reset();
    ::unlink(path_.c_str());
  }

  Region& map(const char* granularity) {
    granularity_.force(granularity);
    EXPECT_TRUE(Region::map_file(path_, 0, &region_).ok());
    return *region_;
  }

  static void store(Region& r, std::uint64_t off, std::uint64_t value) {
    std::memcpy(r.at(off), &value, sizeof value);
  }
  static std::uint64_t word(const std::vector<std::byte>& image, std::uint64_t off) {
    std::uint64_t v = 0;
    std::memcpy(&v, image.data() + off, sizeof v);
    return v;
  }

  std::string path_;
  GranularityGuard granularity_;
  std::unique_ptr<Region> region_;
};

TEST_F(PersistenceSimTest, AStoreNeverFlushedIsDirtyAndMayOrMayNotSurvive) {
  Region& r = map("cache_line");
  PersistenceSim sim(r);
  store(r, 128 + 8, 42);
  EXPECT_EQ(sim.dirty_units(), (std::vector<std::uint64_t>{128}));
  EXPECT_EQ(word(sim.crash_image({}), 136), 0u);
  EXPECT_EQ(word(sim.crash_image({{128}, {}}), 136), 42u);
  EXPECT_EQ(word(sim.durable(), 136), 0u);
}

TEST_F(PersistenceSimTest, CacheLineFlushAloneIsNotDurableUntilTheDrain) {
  Region& r = map("cache_line");
  PersistenceSim sim(r);
  store(r, 64, 7);
  r.flush(r.at(64), 8);
  EXPECT_EQ(sim.dirty_units(), (std::vector<std::uint64_t>{64}));
  r.drain();
  EXPECT_TRUE(sim.dirty_units().empty());
  EXPECT_EQ(word(sim.durable(), 64), 7u);
}

TEST_F(PersistenceSimTest, ADrainPersistsOnlyTheLinesItsThreadFlushed) {
  Region& r = map("cache_line");
  PersistenceSim sim(r);
  store(r, 0, 1);
  store(r, 4096, 2);
  r.flush(r.at(0), 8);
  std::thread other([&] {
    r.flush(r.at(4096), 8);
    // This thread never drains.
  });
  other.join();
  r.drain();
  EXPECT_EQ(word(sim.durable(), 0), 1u);
  EXPECT_EQ(sim.dirty_units(), (std::vector<std::uint64_t>{4096}));
}

TEST_F(PersistenceSimTest, AFlushCoversEveryLineOfItsRange) {
  Region& r = map("cache_line");
  PersistenceSim sim(r);
  for (std::uint64_t off = 56; off < 56 + 80; off += 8) store(r, off, off);
  r.persist(r.at(56), 80);  // lines 0, 64 and 128
  EXPECT_TRUE(sim.dirty_units().empty());
}

TEST_F(PersistenceSimTest, PageGranularityWritesBackFlushedLinesAtTheDrain) {
  // A page region writes back with pwrite and fdatasync: the line model.
  Region& r = map("page");
  PersistenceSim sim(r);
  ASSERT_EQ(sim.unit(), 64u);
  store(r, 4096 + 8, 5);
  store(r, 4096 + 4000, 6);  // same page, not in the flushed range
  r.flush(r.at(4096 + 8), 8);
  EXPECT_EQ(word(sim.durable(), 4096 + 8), 0u);  // written, not yet synced
  r.drain();
  EXPECT_EQ(word(sim.durable(), 4096 + 8), 5u);
  EXPECT_EQ(word(sim.durable(), 4096 + 4000), 0u);
  EXPECT_EQ(sim.dirty_units(), (std::vector<std::uint64_t>{4096 + 3968}));
  r.persist_all();
  EXPECT_TRUE(sim.dirty_units().empty());
}

TEST_F(PersistenceSimTest, ByteGranularityMakesEveryStoreDurableAtTheFence) {
  Region& r = map("byte");
  PersistenceSim sim(r);
  ASSERT_EQ(sim.unit(), 8u);
  store(r, 1000, 3);
  store(r, 50'000, 4);
  EXPECT_EQ(sim.dirty_units(), (std::vector<std::uint64_t>{1000, 50'000}));
  r.drain();
  EXPECT_TRUE(sim.dirty_units().empty());
  EXPECT_EQ(word(sim.durable(), 50'000), 4u);
}

TEST_F(PersistenceSimTest, EveryDrainIsACrashPointSeenBeforeItTakesEffect) {
  Region& r = map("cache_line");
  PersistenceSim sim(r);
  std::vector<std::vector<std::uint64_t>> seen;
  sim.set_crash_point_hook([&](const PersistenceSim& s) { seen.push_back(s.dirty_units()); });
  store(r, 0, 1);
  r.persist(r.at(0), 8);
  store(r, 64, 2);
  store(r, 128, 3);
  r.persist(r.at(64), 8);
  r.drain();
  EXPECT_EQ(sim.crash_points(), 3u);
  ASSERT_EQ(seen.size(), 3u);
  EXPECT_EQ(seen[0], (std::vector<std::uint64_t>{0}));
  EXPECT_EQ(seen[1], (std::vector<std::uint64_t>{64, 128}));
  EXPECT_EQ(seen[2], (std::vector<std::uint64_t>{128}));
}

TEST_F(PersistenceSimTest, ATornLineKeepsExactlyTheChosenWords) {
  Region& r = map("cache_line");
  PersistenceSim sim(r);
  for (unsigned w = 0; w < 8; ++w) store(r, 192 + 8 * w, 100 + w);
  EXPECT_EQ(sim.dirty_words(192), 0xff);
  const auto image = sim.crash_image({{}, {{192, 0x05}}});
  for (unsigned w = 0; w < 8; ++w) {
    EXPECT_EQ(word(image, 192 + 8 * w), (w == 0 || w == 2) ? 100u + w : 0u) << w;
  }
  EXPECT_THROW(sim.crash_image({{100}, {}}), std::out_of_range);
}

TEST_F(PersistenceSimTest, FewDirtyUnitsAreExploredExhaustively) {
  Region& r = map("cache_line");
  PersistenceSim sim(r);
  for (std::uint64_t line : {0, 64, 640}) store(r, line, 9);
  std::mt19937_64 rng(1);
  const auto choices = crash_choices(sim, sim.dirty_units(), 12, 10, rng);
  ASSERT_EQ(choices.size(), 8u);
  std::set<std::vector<std::uint64_t>> distinct;
  for (const auto& c : choices) distinct.insert(c.written);
  EXPECT_EQ(distinct.size(), 8u);
}

TEST_F(PersistenceSimTest, SinglesWriteEachUnitAloneAndLeaveEachOutAlone) {
  Region& r = map("cache_line");
  PersistenceSim sim(r);
  for (std::uint64_t line = 0; line < 6 * 64; line += 64) store(r, line, 7);
  const std::vector<std::uint64_t> dirty = sim.dirty_units();
  ASSERT_EQ(dirty.size(), 6u);
  std::mt19937_64 rng(3);
  const auto choices = crash_choices(sim, dirty, 2, 0, rng, 8);
  ASSERT_EQ(choices.size(), 2u + 2 * 6);
  std::set<std::vector<std::uint64_t>> written;
  for (const auto& c : choices) written.insert(c.written);
  for (std::uint64_t u : dirty) {
    EXPECT_TRUE(written.count({u})) << "unit " << u << " alone";
    std::vector<std::uint64_t> rest;
    for (std::uint64_t v : dirty) {
      if (v != u) rest.push_back(v);
    }
    EXPECT_TRUE(written.count(rest)) << "all but unit " << u;
  }
  // Above the limit only the extremes and the samples remain.
  EXPECT_EQ(crash_choices(sim, dirty, 2, 0, rng, 5).size(), 2u);
}

TEST_F(PersistenceSimTest, ManyDirtyUnitsAreSampledWithBothExtremesAndTornLines) {
  Region& r = map("cache_line");
  PersistenceSim sim(r);
  for (std::uint64_t line = 0; line < 20 * 64; line += 64) {
    store(r, line, 1);
    store(r, line + 16, 2);
  }
  const auto dirty = sim.dirty_units();
  ASSERT_EQ(dirty.size(), 20u);
  std::mt19937_64 rng(2);
  const auto choices = crash_choices(sim, dirty, 12, 50, rng);
  ASSERT_EQ(choices.size(), 52u);
  EXPECT_TRUE(choices[0].written.empty());
  EXPECT_EQ(choices[1].written, dirty);
  bool torn = false;
  for (const auto& c : choices) {
    for (const auto& [line, mask] : c.torn) {
      torn = true;
      EXPECT_EQ(mask & ~0x05, 0) << "only dirty words can be torn";
      EXPECT_EQ(std::count(c.written.begin(), c.written.end(), line), 0);
    }
  }
  EXPECT_TRUE(torn);
}

TEST_F(PersistenceSimTest, ChoicesNameThemselvesForReproducers) {
  CrashChoice c{{0x40, 0x1c0}, {{0x80, 0x0f}}};
  EXPECT_EQ(c.describe(), "written 0x40,0x1c0 torn 0x80/0xf");
  EXPECT_EQ(CrashChoice{}.describe(), "written -");
}

TEST_F(PersistenceSimTest, AnAnonymousRegionCannotBeSimulated) {
  std::unique_ptr<Region> anon;
  ASSERT_TRUE(Region::anonymous(kFileSize, &anon).ok());
  EXPECT_THROW(PersistenceSim sim(*anon), std::invalid_argument);
}

}  // namespace
}  // namespace pmhash::testing
