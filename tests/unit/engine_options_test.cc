// tests/unit/engine_options_test.cc - engine options by name
// (pmhash/options.h, pmhash/engines.h): the typed setters, the getters,
// the descriptors' defaults against what the engines use, and the checks
// at create, open, create_volatile and the start of an index on memory
// nodes (an option of the engine that is unknown or out of range, a name of
// no engine, another engine's options ignored).
#include <gtest/gtest.h>

#include <unistd.h>

#include <map>
#include <memory>
#include <string>

#include "engine/clevel/clevel.h"
#include "engine/dali/dali.h"
#include "engine/nehash/nehash.h"
#include "engine/option_values.h"
#include "engine/pmeh/pmeh.h"
#include "engine/race/race.h"
#include "engine/sephash/sephash.h"
#include "pmhash/engines.h"
#include "pmhash/options.h"
#include "pmhash/store.h"
#include "remote/memnode.h"
#include "scratch_file.h"

namespace pmhash {
namespace {

enum class Mode : unsigned { kZero = 0, kTwo = 2 };

TEST(EngineOptions, TypedSettersStoreTheirText) {
  Options o;
  o.set("pmeh.zone_bits", "6");  // a string literal is text, not a bool
  EXPECT_EQ(o.get("pmeh.zone_bits"), "6");
  o.set("pmeh.zone_bits", 7);
  EXPECT_EQ(o.get("pmeh.zone_bits"), "7");
  o.set("pmeh.workers", 3u);
  EXPECT_EQ(o.get("pmeh.workers"), "3");
  o.set("pmeh.split_step", std::uint64_t{12});
  EXPECT_EQ(o.get("pmeh.split_step"), "12");
  o.set("pmeh.idle_steps", false);
  EXPECT_EQ(o.get("pmeh.idle_steps"), "false");
  o.set("clevel.shrink_threshold", 0.25);
  EXPECT_EQ(o.get("clevel.shrink_threshold"), "0.25");
  o.set("pmeh.write_mode", Mode::kTwo);
  EXPECT_EQ(o.get("pmeh.write_mode"), "2");
  const std::string text = "9";
  o.set("nehash.bucket_bits", text);
  EXPECT_EQ(o.get("nehash.bucket_bits"), "9");
  // set returns the options, so that calls chain.
  o.set("dali.initial_log2", 5).set("dali.lock_timeout_ms", 50);
  EXPECT_EQ(o.get("dali.lock_timeout_ms"), "50");
  o.unset("dali.lock_timeout_ms");
  EXPECT_FALSE(o.get("dali.lock_timeout_ms").has_value());
}

TEST(EngineOptions, ValueIsWhatWasSetElseTheDescriptorsDefault) {
  Options o;
  for (const EngineDescriptor* e : all_engines()) {
    for (const OptionSpec& spec : e->options) {
      EXPECT_FALSE(o.get(spec.name).has_value()) << spec.name;
      EXPECT_EQ(o.value(spec.name), spec.default_value) << spec.name;
    }
  }
  o.set("pmeh.zone_bits", 3);
  EXPECT_EQ(o.value("pmeh.zone_bits"), "3");
  EXPECT_EQ(o.value("pmeh.no_such_option"), "");
  EXPECT_EQ(o.value("nosuchengine.x"), "");
}

// The defaults the options had as typed fields, before they were named:
// each descriptor declares the same, and each engine's typed view of empty
// Options reads them.
TEST(EngineOptions, DescriptorDefaultsAreTheEnginesFormerDefaults) {
  const std::map<std::string, std::string> former = {
      {"clevel.initial_level_log2", "10"}, {"clevel.rehash_threads", "1"},
      {"clevel.shrink_threshold", "0.05"}, {"clevel.min_level_log2", "4"},
      {"clevel.tag_filter", "true"},       {"nehash.bucket_bits", "6"},
      {"nehash.initial_dir_bits", "4"},    {"nehash.split_shallow_on_open", "false"},
      {"pmeh.zone_bits", "6"},             {"pmeh.segment_kib", "16"},
      {"pmeh.workers", "0"},               {"pmeh.split_bits", "1"},
      {"pmeh.split_step", "4"},            {"pmeh.idle_steps", "true"},
      {"pmeh.opportunistic", "true"},      {"pmeh.write_mode", "0"},
      {"pmeh.delegate_reads", "false"},    {"sephash.lock_lease_ms", "2000"},
      {"sephash.initial_depth", "4"},      {"sephash.main_max_slots", "6656"},
      {"sephash.max_depth", "16"},         {"race.initial_depth", "4"},
      {"race.max_depth", "16"},            {"race.groups", "256"},
      {"dali.initial_log2", "12"},         {"dali.lock_timeout_ms", "1000"}};
  std::size_t declared = 0;
  for (const EngineDescriptor* e : all_engines()) {
    for (const OptionSpec& spec : e->options) {
      ++declared;
      ASSERT_TRUE(former.contains(std::string(spec.name))) << spec.name;
      EXPECT_EQ(spec.default_value, former.at(std::string(spec.name))) << spec.name;
      EXPECT_TRUE(check_option(spec.name, spec.default_value).ok()) << spec.name;
    }
  }
  EXPECT_EQ(declared, former.size());

  const Options none;
  const engine::clevel::Config c = engine::clevel::Config::from(none);
  EXPECT_EQ(c.initial_level_log2, 10u);
  EXPECT_EQ(c.rehash_threads, 1u);
  EXPECT_DOUBLE_EQ(c.shrink_threshold, 0.05);
  EXPECT_EQ(c.min_level_log2, 4u);
  EXPECT_TRUE(c.tag_filter);
  const engine::nehash::Config n = engine::nehash::Config::from(none);
  EXPECT_EQ(n.bucket_bits, 6u);
  EXPECT_EQ(n.initial_dir_bits, 4u);
  EXPECT_FALSE(n.split_shallow_on_open);
  const engine::pmeh::Config p = engine::pmeh::Config::from(none);
  EXPECT_EQ(p.zone_bits, 6u);
  EXPECT_EQ(p.segment_kib, 16u);
  EXPECT_EQ(p.workers, 0u);
  EXPECT_EQ(p.split_bits, 1u);
  EXPECT_EQ(p.split_step, 4u);
  EXPECT_TRUE(p.idle_steps);
  EXPECT_TRUE(p.opportunistic);
  EXPECT_EQ(p.write_mode, 0u);
  EXPECT_FALSE(p.delegate_reads);
  const engine::sephash::Config s = engine::sephash::Config::from(none);
  EXPECT_EQ(s.lock_lease_ms, 2000u);
  EXPECT_EQ(s.initial_depth, 4u);
  EXPECT_EQ(s.main_max_slots, 64u * 104u);
  EXPECT_EQ(s.max_depth, 16u);
  const engine::race::Config r = engine::race::Config::from(none);
  EXPECT_EQ(r.initial_depth, 4u);
  EXPECT_EQ(r.max_depth, 16u);
  EXPECT_EQ(r.groups, 256u);
  const engine::dali::Config d = engine::dali::Config::from(none);
  EXPECT_EQ(d.initial_log2, 12u);
  EXPECT_EQ(d.lock_timeout_ms, 1000u);
}

// What an engine reads is what was set, typed.
TEST(EngineOptions, TheTypedViewReadsWhatWasSet) {
  Options o;
  o.set("pmeh.zone_bits", 2).set("pmeh.idle_steps", "off").set("pmeh.segment_kib", "64");
  o.set("clevel.shrink_threshold", "0.125");
  const engine::pmeh::Config p = engine::pmeh::Config::from(o);
  EXPECT_EQ(p.zone_bits, 2u);
  EXPECT_FALSE(p.idle_steps);
  EXPECT_EQ(p.segment_kib, 64u);
  EXPECT_DOUBLE_EQ(engine::clevel::Config::from(o).shrink_threshold, 0.125);
}

TEST(EngineOptions, CheckOptionNamesWhatIsValid) {
  EXPECT_TRUE(check_option("pmeh.zone_bits", "8").ok());
  EXPECT_TRUE(check_option("pmeh.idle_steps", "yes").ok());
  EXPECT_TRUE(check_option("clevel.shrink_threshold", "0.3").ok());

  Status s = check_option("pmeh.zone_bits", "9");
  EXPECT_TRUE(s.is_invalid_argument());
  EXPECT_EQ(s.message(), "pmeh.zone_bits must be 0..8, got 9");
  s = check_option("pmeh.zone_bits", "-1");
  EXPECT_TRUE(s.is_invalid_argument());
  EXPECT_NE(s.message().find("must be 0..8, got '-1'"), std::string::npos) << s.message();
  s = check_option("pmeh.zone_bits", "99999999999999999999999");
  EXPECT_TRUE(s.is_invalid_argument()) << s.message();
  s = check_option("pmeh.segment_kib", "12");
  EXPECT_EQ(s.message(), "pmeh.segment_kib must be one of 4, 8, 16, 32, 64, got 12");
  s = check_option("pmeh.idle_steps", "maybe");
  EXPECT_EQ(s.message(), "pmeh.idle_steps must be true or false, got 'maybe'");
  s = check_option("clevel.shrink_threshold", "0.9");
  EXPECT_TRUE(s.is_invalid_argument());
  s = check_option("clevel.shrink_threshold", "nan");
  EXPECT_TRUE(s.is_invalid_argument());

  s = check_option("pmeh.zone_bit", "6");
  EXPECT_TRUE(s.is_invalid_argument());
  std::string names;
  for (const OptionSpec& o : find_engine("pmeh")->options) {
    names += (names.empty() ? "" : ", ") + std::string(o.name);
  }
  EXPECT_EQ(s.message(), "pmeh has no option 'pmeh.zone_bit'; its options: " + names);

  s = check_option("nosuch.zone_bits", "6");
  EXPECT_TRUE(s.is_invalid_argument());
  for (const EngineDescriptor* e : all_engines()) {
    EXPECT_NE(s.message().find(e->name), std::string::npos) << e->name << ": " << s.message();
  }
  EXPECT_EQ(s.message().find('\n'), std::string::npos);
  EXPECT_TRUE(check_option("zone_bits", "6").is_invalid_argument());
}

TEST(EngineOptions, EveryOptionIsNamedForItsEngineAndHasADoc) {
  for (const EngineDescriptor* e : all_engines()) {
    for (const OptionSpec& o : e->options) {
      EXPECT_EQ(option_engine(o.name), e) << o.name;
      EXPECT_FALSE(o.doc.empty()) << o.name;
      EXPECT_LE(o.min, o.max) << o.name;
    }
  }
}

class EngineOptionsStore : public ::testing::Test {
 protected:
  std::string path(const std::string& name) const { return dir_.str() + "/" + name; }
  pmhash::testing::ScratchDir dir_{"pmhash-engine-options"};
};

TEST_F(EngineOptionsStore, CreateChecksTheEnginesOptionsAndIgnoresOthers) {
  const std::string p = path("pool");
  Options o;
  o.engine = "pmeh";
  o.pool_size = 64u << 20;
  std::unique_ptr<Store> store;

  Options bad = o;
  bad.set("pmeh.zone_bits", 9);
  Status s = Store::create(p, bad, &store);
  EXPECT_TRUE(s.is_invalid_argument()) << s.to_string();
  EXPECT_NE(s.message().find("pmeh.zone_bits must be 0..8, got 9"), std::string::npos) << s.message();
  EXPECT_NE(::access(p.c_str(), F_OK), 0) << "a refused create left a file";

  bad = o;
  bad.set("pmeh.zone_bit", 2);
  s = Store::create(p, bad, &store);
  EXPECT_TRUE(s.is_invalid_argument()) << s.to_string();
  EXPECT_NE(s.message().find("its options: pmeh.zone_bits"), std::string::npos) << s.message();

  bad = o;
  bad.set("pmhe.zone_bits", 2);
  s = Store::create(p, bad, &store);
  EXPECT_TRUE(s.is_invalid_argument()) << s.to_string();
  EXPECT_NE(s.message().find("names no engine"), std::string::npos) << s.message();

  // Other engines' options, even out of their range, are not this store's.
  Options mixed = o;
  mixed.set("pmeh.zone_bits", 1).set("clevel.initial_level_log2", 99).set("nehash.bucket_bits", "x");
  s = Store::create(p, mixed, &store);
  ASSERT_TRUE(s.ok()) << s.to_string();
  ASSERT_TRUE(store->insert("k", "v").ok());
  ASSERT_TRUE(store->close().ok());
  store.reset();

  // At open: the same checks; the pool is opened again afterwards intact.
  Options reopen;
  reopen.set("pmeh.workers", 65);
  s = Store::open(p, reopen, &store);
  EXPECT_TRUE(s.is_invalid_argument()) << s.to_string();
  EXPECT_NE(s.message().find("pmeh.workers must be 0..64, got 65"), std::string::npos) << s.message();
  reopen = Options{};
  reopen.set("pmeh.nope", 1);
  EXPECT_TRUE(Store::open(p, reopen, &store).is_invalid_argument());
  reopen = Options{};
  reopen.set("clevel.rehash_threads", 99).set("pmeh.workers", 2);
  s = Store::open(p, reopen, &store);
  ASSERT_TRUE(s.ok()) << s.to_string();
  std::string v;
  EXPECT_TRUE(store->get("k", &v).ok());
  EXPECT_EQ(v, "v");
  EXPECT_TRUE(store->check().ok());
}

TEST_F(EngineOptionsStore, CrossChecksStayWithTheEngine) {
  Options o;
  o.engine = "clevel";
  o.pool_size = 64u << 20;
  o.set("clevel.initial_level_log2", 4).set("clevel.min_level_log2", 5);
  std::unique_ptr<Store> store;
  const Status s = Store::create_volatile(o, &store);
  EXPECT_TRUE(s.is_invalid_argument()) << s.to_string();
  EXPECT_NE(s.message().find("clevel.min_level_log2"), std::string::npos) << s.message();
}

TEST_F(EngineOptionsStore, CreateVolatileChecksTheOptions) {
  Options o;
  o.engine = "nehash";
  o.pool_size = 64u << 20;
  o.set("nehash.bucket_bits", 11);
  std::unique_ptr<Store> store;
  Status s = Store::create_volatile(o, &store);
  EXPECT_TRUE(s.is_invalid_argument()) << s.to_string();
  EXPECT_NE(s.message().find("nehash.bucket_bits must be 1..10, got 11"), std::string::npos)
      << s.message();
  o.set("nehash.bucket_bits", 2);
  s = Store::create_volatile(o, &store);
  ASSERT_TRUE(s.ok()) << s.to_string();
  EXPECT_EQ(store->stats().engine, "nehash");
}

// An empty engine: create makes the default engine of where the index
// goes; open takes what the pool holds.
TEST_F(EngineOptionsStore, AnEmptyEngineCreatesTheDefaultAndOpensWhatIsThere) {
  Options o;
  o.pool_size = 64u << 20;
  EXPECT_TRUE(o.engine.empty());
  std::unique_ptr<Store> store;
  ASSERT_TRUE(Store::create(path("default"), o, &store).ok());
  EXPECT_EQ(store->stats().engine, default_engine(Location::kPoolFile)->name);
  store.reset();
  Options other;
  other.engine = "dali";
  other.pool_size = 64u << 20;
  ASSERT_TRUE(Store::create(path("dali"), other, &store).ok());
  store.reset();
  ASSERT_TRUE(Store::open(path("dali"), Options{}, &store).ok());
  EXPECT_EQ(store->stats().engine, "dali");
}

TEST_F(EngineOptionsStore, RemoteStartChecksTheEnginesOptions) {
  const std::string node = path("mn0");
  ASSERT_TRUE(remote::create_memnode(node, 16u << 20, false).ok());
  Options o;
  o.memnodes = "shm:" + node;
  o.set("sephash.initial_depth", 13);
  std::unique_ptr<Store> store;
  Status s = Store::create("", o, &store);
  EXPECT_TRUE(s.is_invalid_argument()) << s.to_string();
  EXPECT_NE(s.message().find("sephash.initial_depth must be 1..12, got 13"), std::string::npos)
      << s.message();
  o.set("sephash.initial_depth", 2).set("sephash.max_depth", 1);
  s = Store::create("", o, &store);
  EXPECT_TRUE(s.is_invalid_argument()) << s.to_string();
  EXPECT_NE(s.message().find("sephash.max_depth must be at least"), std::string::npos) << s.message();
  // Created with the default engine of memory nodes; race's options ignored.
  o.set("sephash.max_depth", 8).set("race.groups", 1);
  s = Store::create("", o, &store);
  ASSERT_TRUE(s.ok()) << s.to_string();
  EXPECT_EQ(store->stats().engine, default_engine(Location::kMemoryNodes)->name);
  ASSERT_TRUE(store->close().ok());
  store.reset();
  Options open;
  open.memnodes = o.memnodes;
  open.set("sephash.lock_lease_ms", 0);
  s = Store::open("", open, &store);
  EXPECT_TRUE(s.is_invalid_argument()) << s.to_string();
  open.set("sephash.lock_lease_ms", 1000).set("sephash.bogus", 1);
  s = Store::open("", open, &store);
  EXPECT_TRUE(s.is_invalid_argument()) << s.to_string();
  EXPECT_NE(s.message().find("sephash has no option 'sephash.bogus'"), std::string::npos)
      << s.message();
}

}  // namespace
}  // namespace pmhash
