// Unit tests of pmeh's opportunistic switch (docs/design/pmeh.md §7,
// §13.1): forced switches both ways with writes and reads in between, the
// monitor's detection rule driven window by window on given counts,
// pmeh.opportunistic = false, and the direct-op counters.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "engine/hash.h"
#include "engine/pmeh/pmeh_index.h"
#include "pmeh_harness.h"

namespace pmhash {
namespace {

namespace pm = engine::pmeh;

class PmehZonesTest : public ::testing::Test {
 protected:
  PmehZonesTest() : h_("pmhash-pmeh-zones") {}
  void create() {
    const Status s = h_.create();
    ASSERT_TRUE(s.ok()) << s.to_string();
    // The tests drive the monitor themselves.
    h_.pmeh().enable_monitor(false);
  }
  Status put(const std::string& k, const std::string& v) {
    return h_.index().upsert(engine::make_key(k), v);
  }
  std::string get(const std::string& k) {
    std::string v;
    const Status s = h_.index().get(engine::make_key(k), &v);
    if (s.is_not_found()) return "<absent>";
    return s.ok() ? v : "<" + s.to_string() + ">";
  }
  void expect_model(const std::map<std::string, std::string>& model) {
    for (const auto& [k, v] : model) ASSERT_EQ(get(k), v) << k;
    EXPECT_EQ(h_.index().size(), model.size());
    const Status s = h_.index().check();
    EXPECT_TRUE(s.ok()) << s.to_string();
  }
  // Per-zone op counts of one window: `hot` gets `hot_ops`, every other
  // zone `other_ops`.
  std::vector<std::uint64_t> counts(int hot, std::uint64_t hot_ops, std::uint64_t other_ops) const {
    std::vector<std::uint64_t> c(1u << engine::option_unsigned(h_.options, "pmeh.zone_bits"), other_ops);
    if (hot >= 0) c[hot] = hot_ops;
    return c;
  }
  std::vector<double> no_backlog() { return std::vector<double>(h_.pmeh().workers(), 0.0); }

  testing::PmehHarness h_;
};

// Values alternate between inline (<= 8 bytes) and items, so that updates
// also change a slot's form (op log) in both modes.
std::string value(int i, int round) {
  return i % 2 == 0 ? "v" + std::to_string(round) : "value-" + std::to_string(i) + "-" + std::to_string(round);
}

TEST_F(PmehZonesTest, ForcedSwitchBothWaysKeepsKeys) {
  create();
  pm::PmehIndex& p = h_.pmeh();
  const unsigned zone = 5;
  // Enough keys for several splits of 4 KiB segments in the zone.
  const std::vector<std::string> keys = h_.zone_keys(zone, 1500, "z");
  const std::vector<std::string> others = h_.zone_keys(6, 100, "o");
  std::map<std::string, std::string> model;
  for (int i = 0; i < 300; ++i) {
    ASSERT_TRUE(put(keys[i], value(i, 0)).ok());
    model[keys[i]] = value(i, 0);
  }
  for (int i = 0; i < 100; ++i) {
    ASSERT_TRUE(put(others[i], value(i, 0)).ok());
    model[others[i]] = value(i, 0);
  }
  EXPECT_EQ(p.zone_mode(zone), pm::kOwned);

  p.force_mode(zone, true);
  EXPECT_EQ(p.zone_mode(zone), pm::kShared);
  EXPECT_EQ(p.zone_mode(6), pm::kOwned);
  Stats st = h_.stats();
  EXPECT_EQ(st.property("pmeh.zone_switches"), 1u);
  EXPECT_EQ(st.property("pmeh.shared_zones"), 1u);
  const std::uint64_t splits_before = st.property("pmeh.splits");
  // SHARED: new keys (their splits go to the owner), updates that change
  // form, removes, reads.
  for (int i = 300; i < 1200; ++i) {
    ASSERT_TRUE(put(keys[i], value(i, 1)).ok()) << i;
    model[keys[i]] = value(i, 1);
  }
  for (int i = 0; i < 300; i += 3) {
    ASSERT_TRUE(put(keys[i], value(i + 1, 2)).ok()) << i;
    model[keys[i]] = value(i + 1, 2);
  }
  for (int i = 1; i < 300; i += 3) {
    ASSERT_TRUE(h_.index().remove(engine::make_key(keys[i])).ok()) << i;
    model.erase(keys[i]);
  }
  EXPECT_TRUE(h_.index().insert(engine::make_key(keys[0]), "x").is_already_exists());
  EXPECT_TRUE(h_.index().update(engine::make_key(keys[1]), "x").is_not_found());
  EXPECT_TRUE(h_.index().remove(engine::make_key(keys[1])).is_not_found());
  st = h_.stats();
  EXPECT_GT(st.property("pmeh.splits"), splits_before) << "the zone split while SHARED";
  EXPECT_GT(st.property("pmeh.direct_ops"), 0u);
  expect_model(model);

  p.force_mode(zone, false);
  EXPECT_EQ(p.zone_mode(zone), pm::kOwned);
  st = h_.stats();
  EXPECT_EQ(st.property("pmeh.zone_switches"), 2u);
  EXPECT_EQ(st.property("pmeh.shared_zones"), 0u);
  const std::uint64_t direct = st.property("pmeh.direct_ops");
  for (int i = 1200; i < 1500; ++i) {
    ASSERT_TRUE(put(keys[i], value(i, 3)).ok()) << i;
    model[keys[i]] = value(i, 3);
  }
  for (int i = 2; i < 300; i += 3) {
    ASSERT_TRUE(put(keys[i], value(i + 1, 4)).ok()) << i;
    model[keys[i]] = value(i + 1, 4);
  }
  EXPECT_EQ(h_.stats().property("pmeh.direct_ops"), direct) << "OWNED again: every write is delegated";
  expect_model(model);

  // And once more to SHARED: the zone's keys are all there.
  p.force_mode(zone, true);
  expect_model(model);
  p.force_mode(zone, false);
  EXPECT_EQ(h_.stats().property("pmeh.zone_switches"), 4u);
}

TEST_F(PmehZonesTest, DirectOpsAreCountedAndNotDelegated) {
  create();
  pm::PmehIndex& p = h_.pmeh();
  const unsigned zone = 2;
  // Few keys: no split, so every write in the SHARED zone runs directly.
  const std::vector<std::string> keys = h_.zone_keys(zone, 20, "d");
  p.force_mode(zone, true);
  const Stats before = h_.stats();
  for (const std::string& k : keys) ASSERT_TRUE(put(k, "a").ok());
  for (const std::string& k : keys) ASSERT_TRUE(put(k, "bb").ok());       // update (c)
  for (const std::string& k : keys) ASSERT_TRUE(put(k, "cc").ok());       // update (a)
  for (std::size_t i = 0; i < keys.size(); i += 2) {
    ASSERT_TRUE(h_.index().remove(engine::make_key(keys[i])).ok());
  }
  const Stats after = h_.stats();
  EXPECT_EQ(after.property("pmeh.direct_ops") - before.property("pmeh.direct_ops"), 70u);
  EXPECT_EQ(after.property("pmeh.delegated_ops"), before.property("pmeh.delegated_ops"));
  EXPECT_EQ(after.property("pmeh.splits"), before.property("pmeh.splits"));
  for (std::size_t i = 0; i < keys.size(); ++i) {
    EXPECT_EQ(get(keys[i]), i % 2 == 0 ? "<absent>" : "cc") << i;
  }
  EXPECT_EQ(h_.index().size(), keys.size() / 2);
  // A write in an OWNED zone is delegated, not direct.
  ASSERT_TRUE(put(h_.zone_keys(zone + 1, 1, "e")[0], "x").ok());
  const Stats last = h_.stats();
  EXPECT_EQ(last.property("pmeh.direct_ops"), after.property("pmeh.direct_ops"));
  EXPECT_EQ(last.property("pmeh.delegated_ops"), after.property("pmeh.delegated_ops") + 1);
}

// Z = 4 (16 zones), W = 2: a zone goes SHARED at a share >= max(1/4, 2/16)
// of an overloaded owner in 2 consecutive windows, back at < max(1/8, 1/16)
// for 8 windows, at most once per 8 windows.
TEST_F(PmehZonesTest, MonitorSwitchesAHotSpotAndNotUniformLoad) {
  create();
  pm::PmehIndex& p = h_.pmeh();
  const unsigned zones = p.zones();
  ASSERT_EQ(zones, 16u);
  // Uniform load, even with a backlog: nothing is hot enough.
  for (int w = 0; w < 20; ++w) {
    EXPECT_TRUE(p.run_monitor_window(counts(-1, 0, 1000), {3.0, 3.0}).empty()) << w;
  }
  // A calm window (fewer than 1024 writes) decides nothing, however skewed.
  for (int w = 0; w < 4; ++w) {
    EXPECT_TRUE(p.run_monitor_window(counts(7, 900, 0), no_backlog()).empty()) << w;
  }
  // 90 % in zone 7: hot in the first window, switched in the second.
  EXPECT_TRUE(p.run_monitor_window(counts(7, 9000, 67), no_backlog()).empty());
  EXPECT_EQ(p.run_monitor_window(counts(7, 9000, 67), no_backlog()), std::vector<unsigned>{7});
  EXPECT_EQ(p.zone_mode(7), pm::kShared);
  // Still hot: stays SHARED; nothing else switches.
  for (int w = 0; w < 5; ++w) {
    EXPECT_TRUE(p.run_monitor_window(counts(7, 9000, 67), no_backlog()).empty()) << w;
  }
  // Uniform again: the zone's share (1/16) is below 1/8, back after 8 windows.
  for (int w = 0; w < 7; ++w) {
    EXPECT_TRUE(p.run_monitor_window(counts(-1, 0, 1000), no_backlog()).empty()) << w;
    EXPECT_EQ(p.zone_mode(7), pm::kShared) << w;
  }
  EXPECT_EQ(p.run_monitor_window(counts(-1, 0, 1000), no_backlog()), std::vector<unsigned>{7});
  EXPECT_EQ(p.zone_mode(7), pm::kOwned);
  // Hot again at once: no switch within 8 windows of the last one.
  for (int w = 1; w < 8; ++w) {
    EXPECT_TRUE(p.run_monitor_window(counts(7, 9000, 67), no_backlog()).empty()) << w;
  }
  EXPECT_EQ(p.run_monitor_window(counts(7, 9000, 67), no_backlog()), std::vector<unsigned>{7});
  EXPECT_EQ(h_.stats().property("pmeh.zone_switches"), 3u);
  // Zone 4 (owner 0) at 17 %: below the hot share of 1/4, and its owner
  // carries 20 % < 1.5 f: stays OWNED.
  std::vector<std::uint64_t> c(zones, 50);
  c[7] = 9000;
  c[4] = 2000;
  for (int w = 0; w < 4; ++w) {
    EXPECT_TRUE(p.run_monitor_window(c, no_backlog()).empty()) << w;
  }
  EXPECT_EQ(p.zone_mode(4), pm::kOwned);
}

TEST_F(PmehZonesTest, MonitorShedsTheHottestZoneOfABackloggedSingleOwner) {
  h_.options.set("pmeh.workers", 1);
  create();
  pm::PmehIndex& p = h_.pmeh();
  // W = 1: the owner's share is always 1 < 1.5, so only a backlog of >= 2
  // requests per round overloads it; then a zone with >= 1/2 goes SHARED.
  for (int w = 0; w < 6; ++w) {
    EXPECT_TRUE(p.run_monitor_window(counts(3, 6000, 100), {1.5}).empty()) << w;
  }
  EXPECT_TRUE(p.run_monitor_window(counts(3, 6000, 100), {2.5}).empty());
  EXPECT_EQ(p.run_monitor_window(counts(3, 6000, 100), {2.5}), std::vector<unsigned>{3});
  EXPECT_EQ(p.zone_mode(3), pm::kShared);
  // Below half: never, whatever the backlog (zone 3, now cold, may go back).
  for (int w = 0; w < 10; ++w) {
    for (unsigned z : p.run_monitor_window(counts(3, 0, 1000), {4.0})) EXPECT_EQ(z, 3u) << w;
  }
  for (unsigned z = 0; z < p.zones(); ++z) EXPECT_EQ(p.zone_mode(z), pm::kOwned) << z;
}

TEST_F(PmehZonesTest, SwitchOffNeverSwitches) {
  h_.options.set("pmeh.opportunistic", false);
  create();
  pm::PmehIndex& p = h_.pmeh();
  for (int w = 0; w < 30; ++w) {
    EXPECT_TRUE(p.run_monitor_window(counts(7, 90000, 10), {5.0, 5.0}).empty()) << w;
  }
  EXPECT_EQ(p.zone_mode(7), pm::kOwned);
  // The timed monitor too: a hot spot of real writes switches nothing.
  p.enable_monitor(true);
  const std::vector<std::string> keys = h_.zone_keys(7, 3000, "h");
  for (int round = 0; round < 3; ++round) {
    for (std::size_t i = 0; i < keys.size(); ++i) {
      ASSERT_TRUE(put(keys[i], value(static_cast<int>(i), round)).ok());
    }
  }
  const Stats st = h_.stats();
  EXPECT_EQ(st.property("pmeh.zone_switches"), 0u);
  EXPECT_EQ(st.property("pmeh.shared_zones"), 0u);
  EXPECT_EQ(st.property("pmeh.direct_ops"), 0u);
  EXPECT_EQ(st.property("pmeh.delegated_ops"), 3 * keys.size());
}

}  // namespace
}  // namespace pmhash
