// pmhash/options.h - how a Store is created and opened.
#pragma once

#include <cstdint>
#include <string>

namespace pmhash {

// Size limits of keys and values (DESIGN.md, "Hashing and keys"). Longer
// keys or values are refused with Status::InvalidArgument.
inline constexpr std::size_t kMaxKeySize = 64 * 1024;
inline constexpr std::size_t kMaxValueSize = 64 * 1024 * 1024;

// When the effect of a call becomes durable.
enum class Durability : unsigned char {
  // When a call returns, its effect survives any crash.
  kStrict,
  // A call's effect survives a crash once its epoch has been made durable;
  // Store::sync() waits for that. Only engines built for it accept it.
  kEpoch,
};

struct Options {
  // Engine to create the pool with. On open, empty means "whatever the pool
  // holds"; a name that differs from the pool's is refused.
  std::string engine = "clevel";

  // Size of the pool file to create, in bytes (create only).
  std::uint64_t pool_size = std::uint64_t{1} << 30;

  // Replace an existing file on create. Without it, create refuses to touch
  // an existing file.
  bool force = false;

  Durability durability = Durability::kStrict;

  // --- clevel ---------------------------------------------------------
  // Buckets of the first level of a new table, as a power of two: the table
  // starts with levels of 2^n and 2^(n-1) buckets of 8 slots.
  unsigned clevel_initial_level_log2 = 10;
  // Background threads that move items during a resize (paper: 1).
  unsigned clevel_rehash_threads = 1;
  // Start a shrink when items / slots falls below this (0 disables).
  double clevel_shrink_threshold = 0.05;
  // Never shrink the first level below 2^n buckets.
  unsigned clevel_min_level_log2 = 4;
  // Keep a DRAM summary of each bucket's tags (8 bytes per 64-byte bucket)
  // so that searches skip buckets that cannot hold the key; rebuilt in the
  // background after open. Costs one atomic OR per insert.
  bool clevel_tag_filter = true;
};

}  // namespace pmhash
