// remote/memnode.h - the memory node's region: a pmhash pool of engine
// "memnode".
//
// A memory node owns no index logic; it is a pool file whose bytes clients
// reach with one-sided verbs (remote/transport.h): mapped directly by every
// client process (shm), or served by the pmhash-memnode daemon (tcp). The
// pool's header, shutdown state and root are those of every pmhash pool
// (pool/pool.h); the heap area is not formatted for src/heap, because
// clients allocate from it themselves, with one FAA on a bump word:
//
//   0        pool header (pool/pool.h)                 read-only to verbs
//   4096     MemNodeRoot (in the pool's root object):
//              +0    magic "PMHMNODE", layout version
//              +64   bump: the offset of the next unallocated byte (FAA)
//              +128  index root: kIndexRootSize bytes for the index above
//                    (zero at create; its layout is the index's)
//   16384    allocatable bytes (zero at create), handed out by bump, up to
//            the pool's size
//
// Verbs may address anything from kFirstUsable (the root) to the pool's
// size; the header below it is rejected, so no client can damage what
// identifies the pool.
//
// Durability: create_memnode() makes the pool (Pool::create persists its
// header last), then writes and persists the root. A crash between the two
// leaves a pool with a blank root, which open_memnode() rejects as an
// unfinished create (Corruption), never as an empty node.
// Allocation by FAA on `bump` is durable when the FAA's batch completes; a
// client that crashes between the FAA and publishing its block leaks the
// block (reclaiming it needs the index's epoch scheme above this layer).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "pmhash/status.h"
#include "pool/pool.h"

namespace pmhash::remote {

inline constexpr char kMemNodeEngine[] = "memnode";
inline constexpr char kMemNodeMagic[8] = {'P', 'M', 'H', 'M', 'N', 'O', 'D', 'E'};
inline constexpr std::uint32_t kMemNodeLayoutVersion = 1;

// Offsets from the start of the pool (node-relative verb addresses).
inline constexpr std::uint64_t kFirstUsable = pool::kRootOffset;
inline constexpr std::uint64_t kBumpOffset = pool::kRootOffset + 64;
inline constexpr std::uint64_t kIndexRootOffset = pool::kRootOffset + 128;
inline constexpr std::uint64_t kIndexRootSize = 4096;
inline constexpr std::uint64_t kFirstAllocatable = pool::kHeapOffset;

struct MemNodeRoot {
  char magic[8];
  std::uint32_t layout_version;
  std::uint32_t reserved0;
  std::uint8_t reserved1[48];
  std::uint64_t bump;  // next unallocated byte; starts at kFirstAllocatable
  std::uint8_t reserved2[56];
  std::uint8_t index_root[kIndexRootSize];
};
static_assert(sizeof(MemNodeRoot) <= pool::kRootSize);
static_assert(offsetof(MemNodeRoot, bump) == kBumpOffset - pool::kRootOffset);
static_assert(offsetof(MemNodeRoot, index_root) == kIndexRootOffset - pool::kRootOffset);

// Creates a memory-node pool of `size` bytes at `path` (Pool::create's
// errors: AlreadyExists unless `force`, InvalidArgument for a size below
// pool::kMinPoolSize, IOError).
Status create_memnode(const std::string& path, std::uint64_t size, bool force);

// Opens a memory-node pool, exclusively (the daemon) or shared (shm
// clients). Errors: those of Pool::open; InvalidArgument for a pool of
// another engine; Corruption for a bad memory-node root.
Status open_memnode(const std::string& path, bool shared, std::unique_ptr<pool::Pool>* out);

}  // namespace pmhash::remote
