// Stats: every engine of the registry reports exactly the properties its
// descriptor declares, in the descriptor's order, each named
// "<engine>.<counter>" and documented; the lookups tell an absent name
// from a zero.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "pmhash/engines.h"
#include "pmhash/stats.h"
#include "pmhash/store.h"
#include "remote/memnode.h"
#include "scratch_file.h"

namespace pmhash {
namespace {

// A fresh store of `engine` with a few hundred keys written, in `dir`:
// a pool file, or two memory nodes.
std::unique_ptr<Store> filled_store(const EngineDescriptor& engine, const testing::ScratchDir& dir) {
  Options o;
  o.engine = std::string(engine.name);
  std::string path;
  if (engine.location == Location::kMemoryNodes) {
    for (int n = 0; n < 2; ++n) {
      const std::string node = dir.str() + "/mn" + std::to_string(n);
      const Status s = remote::create_memnode(node, 64u << 20, false);
      EXPECT_TRUE(s.ok()) << s.to_string();
      o.memnodes += (n == 0 ? "shm:" : ",shm:") + node;
    }
  } else {
    path = dir.str() + "/pool";
    o.pool_size = 64u << 20;
  }
  std::unique_ptr<Store> store;
  const Status s = Store::create(path, o, &store);
  EXPECT_TRUE(s.ok()) << engine.name << ": " << s.to_string();
  if (!s.ok()) return nullptr;
  for (int i = 0; i < 500; ++i) {
    const Status s2 = store->upsert("key-" + std::to_string(i), "value-" + std::to_string(i));
    EXPECT_TRUE(s2.ok()) << engine.name << ": " << s2.to_string();
  }
  return store;
}

TEST(StatsProperties, EveryEngineReportsExactlyItsDescriptorsPropertiesInOrder) {
  ASSERT_FALSE(all_engines().empty());
  for (const EngineDescriptor* engine : all_engines()) {
    SCOPED_TRACE(std::string(engine->name));
    EXPECT_FALSE(engine->properties.empty());
    const std::string prefix = std::string(engine->name) + ".";
    std::set<std::string_view> seen;
    for (const PropertySpec& spec : engine->properties) {
      EXPECT_EQ(spec.name.substr(0, prefix.size()), prefix) << spec.name;
      EXPECT_GT(spec.name.size(), prefix.size()) << spec.name;
      EXPECT_FALSE(spec.doc.empty()) << spec.name;
      EXPECT_TRUE(seen.insert(spec.name).second) << "declared twice: " << spec.name;
    }

    testing::ScratchDir dir("pmhash-props");
    std::unique_ptr<Store> store = filled_store(*engine, dir);
    ASSERT_NE(store, nullptr);
    const Stats st = store->stats();
    EXPECT_EQ(st.engine, engine->name);
    std::vector<std::string> reported;
    for (const Property& p : st.properties) reported.push_back(p.name);
    std::vector<std::string> declared;
    for (const PropertySpec& spec : engine->properties) declared.emplace_back(spec.name);
    EXPECT_EQ(reported, declared);
    EXPECT_TRUE(store->close().ok());
  }
}

// describe() says what stats() says of the engine, the media and the last
// open, without counting: on a fresh store of every engine, and on every
// pool engine's store reopened after a crash (a child killed mid-use),
// where stats() may have to count the keys first.
TEST(StatsProperties, DescribeAgreesWithStatsFreshAndAfterACrash) {
  for (const EngineDescriptor* engine : all_engines()) {
    SCOPED_TRACE(std::string(engine->name));
    testing::ScratchDir dir("pmhash-describe");
    std::unique_ptr<Store> store = filled_store(*engine, dir);
    ASSERT_NE(store, nullptr);
    const auto agree = [](const Store& s) {
      const Store::Description d = s.describe();
      const Stats st = s.stats();
      EXPECT_EQ(d.engine, st.engine);
      EXPECT_EQ(d.granularity, st.granularity);
      EXPECT_EQ(d.clean_shutdown, st.clean_shutdown);
      EXPECT_EQ(d.recovery_ns, st.recovery_ns);
      return d;
    };
    EXPECT_EQ(agree(*store).engine, engine->name);
    EXPECT_TRUE(store->close().ok());
    if (engine->location == Location::kMemoryNodes) continue;

    Options o;
    o.engine = std::string(engine->name);
    const std::string path = dir.str() + "/pool";
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      std::unique_ptr<Store> child;
      if (!Store::open(path, o, &child).ok()) _exit(3);
      for (int i = 0; i < 100; ++i) {
        if (!child->upsert("more-" + std::to_string(i), "v").ok()) _exit(4);
      }
      ::kill(::getpid(), SIGKILL);
    }
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFSIGNALED(status)) << "the child failed with status " << WEXITSTATUS(status);
    std::unique_ptr<Store> reopened;
    const Status s = Store::open(path, o, &reopened);
    ASSERT_TRUE(s.ok()) << s.to_string();
    const Store::Description d = agree(*reopened);
    EXPECT_FALSE(d.clean_shutdown);
    EXPECT_GT(d.recovery_ns, 0u);
    EXPECT_EQ(reopened->size(), 600u);
    EXPECT_TRUE(reopened->close().ok());
  }
}

// The counters every memory-node engine shares are filled under its own
// prefix with what its sessions did: writes took round trips.
TEST(StatsProperties, MemoryNodeEnginesCountTheirRoundTripsUnderTheirOwnPrefix) {
  unsigned engines = 0;
  for (const EngineDescriptor* engine : all_engines()) {
    if (engine->location != Location::kMemoryNodes) continue;
    SCOPED_TRACE(std::string(engine->name));
    ++engines;
    testing::ScratchDir dir("pmhash-props");
    std::unique_ptr<Store> store = filled_store(*engine, dir);
    ASSERT_NE(store, nullptr);
    const Stats st = store->stats();
    const std::string prefix(engine->name);
    EXPECT_GE(st.property(prefix + ".round_trips"), 500u);
    EXPECT_GE(st.property(prefix + ".remote_verbs"), st.property(prefix + ".round_trips"));
    EXPECT_GT(st.property(prefix + ".remote_bytes"), 0u);
    EXPECT_TRUE(store->close().ok());
  }
  EXPECT_GE(engines, 1u);
}

// docs/engines.md's table of properties names each engine's, in order.
TEST(StatsProperties, EnginesDocListsEveryEnginesPropertiesInOrder) {
  std::ifstream in(std::string(PMHASH_SOURCE_DIR) + "/docs/engines.md");
  ASSERT_TRUE(in) << "docs/engines.md";
  std::set<std::string> rows;
  for (std::string line; std::getline(in, line);) rows.insert(line);
  for (const EngineDescriptor* engine : all_engines()) {
    const std::string prefix = std::string(engine->name) + ".";
    std::string row = "| " + std::string(engine->name) + " | ";
    for (std::size_t i = 0; i < engine->properties.size(); ++i) {
      row += (i == 0 ? "" : ", ") + std::string(engine->properties[i].name.substr(prefix.size()));
    }
    row += " |";
    EXPECT_EQ(rows.count(row), 1u) << "docs/engines.md lacks the row\n" << row;
  }
}

TEST(StatsProperties, LookupTellsAnAbsentNameFromZero) {
  Stats st;
  st.add_property("e.zero", 0);
  st.add_property("e.seven", 7);
  ASSERT_TRUE(st.find_property("e.zero").has_value());
  EXPECT_EQ(*st.find_property("e.zero"), 0u);
  EXPECT_EQ(st.find_property("e.seven"), std::optional<std::uint64_t>(7));
  EXPECT_FALSE(st.find_property("e.absent").has_value());
  EXPECT_FALSE(st.find_property("seven").has_value());
  EXPECT_EQ(st.property("e.absent"), 0u);
  EXPECT_EQ(st.property("e.seven"), 7u);
}

}  // namespace
}  // namespace pmhash
