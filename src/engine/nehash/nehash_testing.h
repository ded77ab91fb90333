// engine/nehash/nehash_testing.h - nehash's test hooks (docs/architecture.md,
// "Test hooks"). Process-wide; set while no operation runs.
#pragma once

#include <cstdint>
#include <functional>

namespace pmhash::engine::nehash::testing {

// Replaces the clock of the expansion-rate algorithm (nanoseconds, §2.6);
// nullptr restores std::chrono::steady_clock.
using ClockFn = std::int64_t (*)();
void set_clock(ClockFn fn);

// Replaces the main-node bound (Directory::max_main_bits); 0 restores the
// default. For tests that drive a group to overflow blocks.
void set_max_main_bits(unsigned bits);

// Called at step 9 of every split, after the directory action, while the
// group is still SPLITTING (tests park a split there); nullptr removes it.
void set_split_hook(std::function<void()> hook);

}  // namespace pmhash::engine::nehash::testing
