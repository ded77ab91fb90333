// tests/unit/planted_bug_bits_test.cc - the planted bugs' bits: each engine
// declares its bugs in its own <engine>_testing.h, and engine/planted.h the
// bugs of no engine, all over one process-wide mask. A bug that is not a
// single bit, or a bit two bugs share, would plant (or test for) another
// bug than the one named.
#include <gtest/gtest.h>

#include <bit>
#include <span>
#include <string>
#include <vector>

#include "engine/clevel/clevel_testing.h"
#include "engine/dali/dali_testing.h"
#include "engine/nehash/nehash_testing.h"
#include "engine/planted.h"
#include "engine/pmeh/pmeh_testing.h"
#include "engine/race/race_testing.h"
#include "engine/sephash/sephash_testing.h"

namespace pmhash {
namespace {

struct Declared {
  std::string where;
  std::span<const engine::planted::Bug> bugs;
};

std::vector<Declared> every_declaration() {
  return {
      {"engine/planted.h", engine::planted::kPlantedBugs},
      {"clevel", engine::clevel::testing::kPlantedBugs},
      {"dali", engine::dali::testing::kPlantedBugs},
      {"nehash", engine::nehash::testing::kPlantedBugs},
      {"pmeh", engine::pmeh::testing::kPlantedBugs},
      {"race", engine::race::testing::kPlantedBugs},
      {"sephash", engine::sephash::testing::kPlantedBugs},
  };
}

TEST(PlantedBugBits, EveryDeclaredBugIsOneBitNoOtherBugUses) {
  unsigned seen = 0;
  unsigned count = 0;
  for (const Declared& d : every_declaration()) {
    EXPECT_FALSE(d.bugs.empty()) << d.where << " lists no planted bug";
    for (const engine::planted::Bug bug : d.bugs) {
      const unsigned bits = bug;
      ++count;
      EXPECT_EQ(std::popcount(bits), 1) << d.where << ": bug 0x" << std::hex << bits
                                        << " is not a single bit";
      EXPECT_EQ(seen & bits, 0u) << d.where << ": bug 0x" << std::hex << bits
                                 << " shares a bit with a bug declared before it";
      seen |= bits;
    }
  }
  EXPECT_EQ(static_cast<unsigned>(std::popcount(seen)), count);
}

// With one bug planted, active() is true for it and for no other declared
// bug; with none (kNone), for none.
TEST(PlantedBugBits, SettingOneBugActivatesItAlone) {
  const std::vector<Declared> all = every_declaration();
  for (const Declared& d : all) {
    for (const engine::planted::Bug bug : d.bugs) {
      engine::planted::bugs.store(bug);
      for (const Declared& other : all) {
        for (const engine::planted::Bug b : other.bugs) {
          EXPECT_EQ(engine::planted::active(b), b == bug)
              << "with " << d.where << "'s 0x" << std::hex << static_cast<unsigned>(bug)
              << " planted, " << other.where << "'s 0x" << static_cast<unsigned>(b);
        }
      }
    }
  }
  engine::planted::bugs.store(engine::planted::kNone);
  for (const Declared& d : all) {
    for (const engine::planted::Bug b : d.bugs) EXPECT_FALSE(engine::planted::active(b));
  }
}

}  // namespace
}  // namespace pmhash
