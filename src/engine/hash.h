// engine/hash.h - the one hash of pmhash (docs/architecture.md, "Keys and hashing").
//
// Every key is hashed once, by the store, with XXH3-128. `h1` is the 64-bit
// hash engines use first; engines that need a second independent hash (two
// candidate buckets) or a tag take it from `h2`. Never std::hash.
#pragma once

#include <cstdint>
#include <string_view>

namespace pmhash::engine {

struct Key {
  std::string_view bytes;
  std::uint64_t h1 = 0;
  std::uint64_t h2 = 0;
};

Key make_key(std::string_view bytes);

}  // namespace pmhash::engine
