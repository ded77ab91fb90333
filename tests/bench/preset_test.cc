// Tests of pmhash-bench's presets (bench/preset.h): what --preset peers-8b
// expands to, that flags given explicitly (after the preset or before it)
// replace the preset's value instead of being given twice, that the other
// arguments keep their places, and that an unknown or missing preset name is
// an error naming the known presets. The figures the preset produces are
// benchmarks, not tested here.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "bench/preset.h"
#include "bench/workload.h"
#include "pmhash/engines.h"

namespace pmhash::bench {
namespace {

using Args = std::vector<std::string>;

// The value following `flag` in `args`, "" when the flag has none, or
// "<absent>"; fails the test when the flag appears more than once.
std::string value_of(const Args& args, const std::string& flag) {
  EXPECT_LE(std::count(args.begin(), args.end(), flag), 1) << flag << " given twice";
  const auto it = std::find(args.begin(), args.end(), flag);
  if (it == args.end()) return "<absent>";
  if (it + 1 == args.end() || (it + 1)->rfind("--", 0) == 0) return "";
  return *(it + 1);
}

TEST(Preset, Peers8bSetsTheShape) {
  const Args out = expand_presets({"--preset", "peers-8b"});
  // Every finished pool engine in each durability it offers, from the
  // registry: today every strict engine, and dali in epoch mode too.
  std::string modes;
  for (const std::string& m : pmhash::engine_modes(pmhash::Location::kPoolFile)) {
    modes += (modes.empty() ? "" : ",") + m;
  }
  EXPECT_EQ(value_of(out, "--engine"), modes);
  for (const char* mode :
       {"clevel:strict", "nehash:strict", "pmeh:strict", "dali:strict", "dali:epoch"}) {
    EXPECT_NE(("," + modes + ",").find(std::string(",") + mode + ","), std::string::npos) << mode;
  }
  EXPECT_EQ(value_of(out, "--workload"), "read,read-neg,update,insert,delete");
  EXPECT_EQ(value_of(out, "--sequence"), "");
  EXPECT_EQ(value_of(out, "--records"), "4000000");
  EXPECT_EQ(value_of(out, "--key-size"), "8");
  EXPECT_EQ(value_of(out, "--value-size"), "8");
  EXPECT_EQ(value_of(out, "--threads"), "2");
  EXPECT_EQ(value_of(out, "--distribution"), "uniform");
  EXPECT_EQ(value_of(out, "--pool"), "/dev/shm");
  EXPECT_EQ(value_of(out, "--granularity"), "cache_line");
  EXPECT_EQ(value_of(out, "--preset"), "<absent>");
  EXPECT_EQ(value_of(out, "--ops"), "<absent>");  // as many operations as records
}

TEST(Preset, EqualsFormIsTheSame) {
  EXPECT_EQ(expand_presets({"--preset=peers-8b"}), expand_presets({"--preset", "peers-8b"}));
}

TEST(Preset, ExplicitFlagsAfterThePresetWin) {
  const Args out = expand_presets(
      {"--preset", "peers-8b", "--records", "1000000", "--engine=clevel", "--threads", "1"});
  EXPECT_EQ(value_of(out, "--records"), "1000000");
  EXPECT_EQ(value_of(out, "--threads"), "1");
  EXPECT_EQ(value_of(out, "--engine"), "<absent>");
  EXPECT_EQ(std::count(out.begin(), out.end(), "--engine=clevel"), 1);
  // The rest of the preset stays.
  EXPECT_EQ(value_of(out, "--key-size"), "8");
  EXPECT_EQ(value_of(out, "--workload"), "read,read-neg,update,insert,delete");
}

TEST(Preset, ExplicitFlagsBeforeThePresetWinToo) {
  const Args out = expand_presets({"--records", "5000", "--preset", "peers-8b"});
  EXPECT_EQ(value_of(out, "--records"), "5000");
  EXPECT_EQ(value_of(out, "--value-size"), "8");
}

TEST(Preset, OtherArgumentsKeepTheirPlaces) {
  const Args out = expand_presets({"--json", "x.json", "--preset", "peers-8b", "--no-ceilings"});
  ASSERT_GE(out.size(), 3u);
  EXPECT_EQ(out[0], "--json");
  EXPECT_EQ(out[1], "x.json");
  EXPECT_EQ(out.back(), "--no-ceilings");
}

TEST(Preset, WithoutAPresetNothingChanges) {
  const Args in = {"--engine", "clevel", "--records", "10"};
  EXPECT_EQ(expand_presets(in), in);
}

TEST(Preset, UnknownOrMissingNameIsAnError) {
  try {
    expand_presets({"--preset", "peers-9b"});
    ADD_FAILURE() << "no error for an unknown preset";
  } catch (const Failure& e) {
    EXPECT_NE(std::string(e.what()).find("peers-9b"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("peers-8b"), std::string::npos) << e.what();
  }
  EXPECT_THROW(expand_presets({"--preset"}), Failure);
  EXPECT_THROW(expand_presets({"--preset="}), Failure);
}

}  // namespace
}  // namespace pmhash::bench
