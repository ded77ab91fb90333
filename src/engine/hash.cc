// engine/hash.cc - the one hash of pmhash: XXH3-128 of the key bytes.
#include "engine/hash.h"

// The implementation compiled in here rather than called through the shared
// library: every store call hashes once, and a key of 8-16 bytes takes a few
// instructions that a call through the PLT would dominate. The result is
// the same function (XXH3-128, seed 0) either way.
#define XXH_INLINE_ALL
#include <xxhash.h>

namespace pmhash::engine {

Key make_key(std::string_view bytes) {
  const XXH128_hash_t h = XXH3_128bits(bytes.data(), bytes.size());
  // The two halves of XXH3-128 are independent enough to serve as the two
  // hash functions (or hash + tag) the engines need.
  return Key{bytes, h.low64, h.high64};
}

}  // namespace pmhash::engine
