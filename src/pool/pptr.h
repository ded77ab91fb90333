// pool/pptr.h - relative persistent pointers with a 16-bit tag.
//
// A pool maps at a different address on every open, so everything stored in
// it refers to other parts of it by offset from the pool base. A persistent
// pointer is one 64-bit word, so it can be read, written and CASed
// atomically:
//
//   63            48 47                                   0
//   +---------------+--------------------------------------+
//   |   tag (16)    |        offset from pool base (48)     |
//   +---------------+--------------------------------------+
//
// Offset 0 is the pool header, never an object, so offset 0 means null.
// The tag is free for the engine (clevel stores a summary of the key's hash
// there). Objects are at least 16-byte aligned, so engines may also use the
// low 4 bits of the offset as flags; each such bit is named where it is used.
#pragma once

#include <cstdint>

namespace pmhash::pool {

inline constexpr unsigned kTagShift = 48;
inline constexpr std::uint64_t kOffsetMask = (std::uint64_t{1} << kTagShift) - 1;

constexpr std::uint64_t pptr_make(std::uint64_t offset, std::uint16_t tag) {
  return (std::uint64_t{tag} << kTagShift) | (offset & kOffsetMask);
}
constexpr std::uint64_t pptr_offset(std::uint64_t p) { return p & kOffsetMask; }
constexpr std::uint16_t pptr_tag(std::uint64_t p) {
  return static_cast<std::uint16_t>(p >> kTagShift);
}

}  // namespace pmhash::pool
