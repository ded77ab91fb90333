// engine/planted.h - the mechanism of planted bugs: test-only switches that
// plant classic crash-consistency mistakes in the engines (and in the memory
// node's verb executor, which the engines on memory nodes stand on), so that
// the crash checker (tests/crash) can show it catches each one. Nothing
// outside tests sets them; with no bug planted each switch costs one relaxed
// load on a path that already persists.
//
// A bug is one bit of `bugs`. Each engine declares its own bugs in its
// folder, in `<engine>_testing.h` (namespace `<engine>::testing`, a comment
// on each naming the mistake, and the list kPlantedBugs), and tests the
// switch where the mistake would be made:
//
//   if (!planted::active(testing::kMetaBeforeSlotDurable)) region_.drain();
//
// This file declares only the bugs that belong to no engine. A bit names
// one bug across the whole process: a new bug takes a bit that no engine
// and no bug here uses (tests/unit/planted_bug_bits_test.cc checks that
// every declared bug is one bit, and no bit is declared twice).
#pragma once

#include <atomic>

namespace pmhash::engine::planted {

enum Bug : unsigned {
  kNone = 0,
  // memory node (remote/verbs.cc): execute() fences once at the end of a
  // batch instead of before every writing verb that follows another, so a
  // node that loses power mid-batch may keep a later write without an
  // earlier one.
  kMemnodeOneFencePerBatch = 1u << 26,
};

// The bug of bit `n` (0-31), for the engines' declarations.
consteval Bug bit(unsigned n) { return static_cast<Bug>(1u << n); }

// The bugs this file declares, for the test of the bits.
inline constexpr Bug kPlantedBugs[] = {kMemnodeOneFencePerBatch};

// The planted bugs (a mask of Bug), process-wide.
inline std::atomic<unsigned> bugs{kNone};

inline bool active(Bug b) { return (bugs.load(std::memory_order_relaxed) & b) != 0; }

}  // namespace pmhash::engine::planted
