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

// x with its bit order reversed (bit 0 becomes bit 63). Engines whose
// directory picks a part by the low bits of a hash order their scan
// positions by the reversed hash (Index::scan): a part then covers one
// contiguous range of positions, and the ranges of a part's halves after a
// split are the two halves of its range.
constexpr std::uint64_t reverse_bits(std::uint64_t x) {
  x = ((x >> 1) & 0x5555555555555555ull) | ((x & 0x5555555555555555ull) << 1);
  x = ((x >> 2) & 0x3333333333333333ull) | ((x & 0x3333333333333333ull) << 2);
  x = ((x >> 4) & 0x0f0f0f0f0f0f0f0full) | ((x & 0x0f0f0f0f0f0f0f0full) << 4);
  x = ((x >> 8) & 0x00ff00ff00ff00ffull) | ((x & 0x00ff00ff00ff00ffull) << 8);
  x = ((x >> 16) & 0x0000ffff0000ffffull) | ((x & 0x0000ffff0000ffffull) << 16);
  return (x >> 32) | (x << 32);
}
static_assert(reverse_bits(1) == 0x8000000000000000ull);
static_assert(reverse_bits(0x8000000000000000ull) == 1);
static_assert(reverse_bits(0x00000000000000f0ull) == 0x0f00000000000000ull);

}  // namespace pmhash::engine
