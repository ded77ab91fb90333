// engine/saved_count.h - the item count a clean close leaves in an engine's
// root, so that the next open knows size() without counting.
//
// Two words of the root: the count, and a flag that vouches for it. The
// flag is 1 from a clean close until the next open, which clears it before
// the store serves anything.
#pragma once

#include <cstdint>
#include <optional>

#include "media/region.h"

namespace pmhash::engine {

// At a clean close, with the exact count `n`.
inline void save_count(media::Region& region, std::uint64_t& count, std::uint64_t& valid,
                       std::uint64_t n) {
  count = n;
  // The count is durable before the flag that vouches for it: the two words
  // may share a line, but a line may reach media in part (found by the crash
  // checker: a torn line with the flag and not the count).
  region.persist(&count, sizeof(std::uint64_t));
  valid = 1;
  // Both are durable before the store marks the pool clean (Store::close).
  region.persist(&valid, sizeof(std::uint64_t));
}

// At open: the count a clean close saved, if any; from then on the flag is
// 0 on media.
inline std::optional<std::uint64_t> take_count(media::Region& region, std::uint64_t& count,
                                               std::uint64_t& valid) {
  std::optional<std::uint64_t> saved;
  if (valid == 1) saved = count;
  if (valid != 0) {
    valid = 0;
    // Invalid on media before any write is served: else a crash in this
    // session would reopen with the old count taken for true.
    region.persist(&valid, sizeof(std::uint64_t));
  }
  return saved;
}

}  // namespace pmhash::engine
