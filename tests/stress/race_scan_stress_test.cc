// Stress test of race's scan (race.h, "Scan"): clients scan whole while
// another client's threads split the subtables, update the keys that stay
// and remove others; every scan passes every key present throughout. Run
// under TSan too (smaller).
#include <gtest/gtest.h>

#include "remote_engine_test.h"
#include "stress/stress_common.h"

namespace pmhash {
namespace {

class RaceScanStress : public testing::RemoteEngineTest {
 protected:
  Options options() const override {
    Options o;
    o.engine = "race";
    o.memnodes = "shm:" + nodes_[0] + ",shm:" + nodes_[1];
    // Small subtables (4 groups, 84 slots): thousands of keys split often.
    o.set("race.initial_depth", 1);
    o.set("race.groups", 4);
    o.set("race.max_depth", 14);
    return o;
  }
};

TEST_F(RaceScanStress, ScannersPassEveryStableKeyWhileWritersSplit) {
  scan_while_writers_resize(400 * stress::kScale, 2, 2, "race.splits", 20);
}

}  // namespace
}  // namespace pmhash
