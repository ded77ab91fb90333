// Stress test of sephash's scan (sephash.h, "Scan"): clients scan whole
// while another client's threads merge and split the segments, update
// the keys that stay and remove others; every scan passes every key
// present throughout. Run under TSan too (smaller).
#include <gtest/gtest.h>

#include "engine/sephash/layout.h"
#include "remote_engine_test.h"
#include "stress/stress_common.h"

namespace pmhash {
namespace {

class SepHashScanStress : public testing::RemoteEngineTest {
 protected:
  Options options() const override {
    Options o;
    o.engine = "sephash";
    o.memnodes = "shm:" + nodes_[0] + ",shm:" + nodes_[1];
    // Small segments: thousands of keys merge and split often.
    o.set("sephash.initial_depth", 1);
    o.set("sephash.main_max_slots", 2 * engine::sephash::kCurSlots);
    o.set("sephash.max_depth", 12);
    return o;
  }
};

TEST_F(SepHashScanStress, ScannersPassEveryStableKeyWhileWritersMergeAndSplit) {
  scan_while_writers_resize(400 * stress::kScale, 2, 2, "sephash.splits", 5);
}

}  // namespace
}  // namespace pmhash
