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
//              +0    magic "PMHMNODE" (8 bytes), layout version (4), zero (4)
//              +16   node id: 16 random bytes (getrandom(2)) drawn when the
//                    pool is created and never written again; what tells
//                    one memory node from another, whatever spec reaches it
//              +32   zero
//              +64   bump: the offset of the next unallocated byte (FAA)
//              +72   zero
//              +128  index root: kIndexRootSize bytes for the index above
//                    (zero at create; its layout is the index's)
//              +4224 membership record: kMembershipSize bytes (zero at
//                    create): which index this node belongs to, at which
//                    position, in which generation. The same for every
//                    engine; its layout is engine/remote_common/remote_index.h's.
//   16384    allocatable bytes (zero at create), handed out by bump, up to
//            the pool's size
//
// Verbs may address anything from kFirstUsable (the root) to the pool's
// size; the header below it is rejected, so no client can damage what
// identifies the pool.
//
// Layout versions: 1 had no node id and no membership record (an index
// could not tell its nodes apart); 2 has both. A pool of version 1 is
// refused at open (Corruption) with the advice to create it again.
//
// Durability: create_memnode() makes the pool (Pool::create persists its
// header last), then writes and persists the root, its magic last. A crash
// between the two leaves a pool with a blank root, which open_memnode()
// rejects as an unfinished create (Corruption), never as an empty node.
// Allocation by FAA on `bump` is durable when the FAA's batch completes; a
// client that crashes between the FAA and publishing its block leaks the
// block (reclaiming it needs the index's epoch scheme above this layer).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "pmhash/memnode.h"
#include "pmhash/status.h"
#include "pool/pool.h"

namespace pmhash::remote {

inline constexpr char kMemNodeEngine[] = "memnode";
inline constexpr char kMemNodeMagic[8] = {'P', 'M', 'H', 'M', 'N', 'O', 'D', 'E'};
inline constexpr std::uint32_t kMemNodeLayoutVersion = 2;
inline constexpr std::size_t kNodeIdBytes = 16;

// Offsets from the start of the pool (node-relative verb addresses).
inline constexpr std::uint64_t kFirstUsable = pool::kRootOffset;
inline constexpr std::uint64_t kNodeIdOffset = pool::kRootOffset + 16;
inline constexpr std::uint64_t kBumpOffset = pool::kRootOffset + 64;
inline constexpr std::uint64_t kIndexRootOffset = pool::kRootOffset + 128;
inline constexpr std::uint64_t kIndexRootSize = 4096;
inline constexpr std::uint64_t kMembershipOffset = kIndexRootOffset + kIndexRootSize;
// A 64-byte head and the node ids of up to 255 nodes, rounded to 64 bytes.
inline constexpr std::uint64_t kMembershipSize = 4160;
inline constexpr std::uint64_t kFirstAllocatable = pool::kHeapOffset;

struct MemNodeRoot {
  char magic[8];
  std::uint32_t layout_version;
  std::uint32_t reserved0;
  std::uint8_t node_id[kNodeIdBytes];  // random at create, then never written
  std::uint8_t reserved1[32];
  std::uint64_t bump;  // next unallocated byte; starts at kFirstAllocatable
  std::uint8_t reserved2[56];
  std::uint8_t index_root[kIndexRootSize];
  std::uint8_t membership[kMembershipSize];
};
static_assert(sizeof(MemNodeRoot) <= pool::kRootSize);
static_assert(offsetof(MemNodeRoot, node_id) == kNodeIdOffset - pool::kRootOffset);
static_assert(offsetof(MemNodeRoot, bump) == kBumpOffset - pool::kRootOffset);
static_assert(offsetof(MemNodeRoot, index_root) == kIndexRootOffset - pool::kRootOffset);
static_assert(offsetof(MemNodeRoot, membership) == kMembershipOffset - pool::kRootOffset);
static_assert(kMembershipOffset % 64 == 0 && kMembershipSize % 64 == 0);

// create_memnode() is public: pmhash/memnode.h.

// Fills `out` with `n` random bytes from getrandom(2) (node and index ids).
// IOError naming `who` when the system gives none.
Status random_bytes(const std::string& who, std::uint8_t* out, std::size_t n);

// Opens a memory-node pool, exclusively (the daemon) or shared (shm
// clients). Errors: those of Pool::open; InvalidArgument for a pool of
// another engine; Corruption for a bad memory-node root, or one of another
// layout version (the message says to create the node again).
Status open_memnode(const std::string& path, bool shared, std::unique_ptr<pool::Pool>* out);

}  // namespace pmhash::remote
