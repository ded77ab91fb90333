// pmhash/limits.h - the limits every layer of pmhash shares.
//
// Keys and values longer than these are refused with
// Status::InvalidArgument before any engine sees them; engines rely on the
// bounds when they validate item headers read back from a pool.
//
// kMaxThreads is the number of threads that may use one Store at once. It
// is also a dimension of the on-media heap (one thread log per thread,
// heap/layout.h records it as log_count and open checks it): changing it
// changes the pool format. A thread beyond it gets Status::Busy.
#pragma once

#include <cstddef>

namespace pmhash {

inline constexpr std::size_t kMaxKeySize = 64 * 1024;
inline constexpr std::size_t kMaxValueSize = 64 * 1024 * 1024;
inline constexpr unsigned kMaxThreads = 256;

}  // namespace pmhash
