// heap/heap.h - crash-safe concurrent allocator inside a pool.
//
// Layout of the heap area [heap_off, heap_off + heap_size) of a pool:
//
//   +--------------------------------------------------------------+
//   | HeapHeader (4 KiB): magic, chunk size, chunk count, offsets  |
//   +--------------------------------------------------------------+
//   | ThreadLog[kMaxThreads], 1 KiB each:                          |
//   |   alloc_intent[2] blocks this thread is about to publish (0) |
//   |   retired_count   entries used in retired[]                  |
//   |   retired[125]    blocks unlinked, awaiting a grace period   |
//   +--------------------------------------------------------------+
//   | ChunkTable: one 8-byte entry per chunk                       |
//   |   kind (free / slab / run head / run body), size class,      |
//   |   run length                                                 |
//   +--------------------------------------------------------------+
//   | chunks, kChunkSize each, aligned to kChunkSize in the file   |
//   |   slab chunk: allocation bitmap, then equal-size blocks      |
//   |   run: one block spanning run-length chunks                  |
//   +--------------------------------------------------------------+
//
// Blocks of up to kMaxSmallSize bytes come from slab chunks of their size
// class; each thread owns one active chunk per class (its per-thread cache),
// so the hot path takes no lock: it sets a bit in its own chunk's bitmap.
// A thread that needs a new active chunk takes one with at least a quarter
// of its blocks free, else a fresh chunk, and a fuller one only when no
// free chunk is left: consecutive allocations land side by side and dirty
// few pages (what an epoch engine's page fence writes back). Fresh slab
// chunks are formatted in batches (the spares wait, empty, for the next
// activations, and go back to the free set when a run needs the room).
// Larger blocks (levels, big values) are runs of whole chunks, found
// first-fit under a mutex. Blocks are 16-byte aligned, and 64-byte aligned
// when they are 64 bytes or larger, so the low 4 bits of a block offset are
// always free for engine flags.
//
// The persistent allocation state is the chunk table plus the slab bitmaps.
// Everything else (free lists, per-thread caches, used-byte counts) is
// rebuilt in DRAM by open(), in O(chunks).
//
// Crash rule: every block is either reachable from the index or named in
// some thread's log, except under the third protocol below. The protocols an
// engine follows:
//
//   insert:  allocate()          alloc_intent persisted, then the bitmap
//                                 bit set and flushed
//            write the object, flush it
//            drain()             <- bit, intent and object durable together
//            publish (CAS a pointer to it), persist the pointer
//            clear_intent()      (no flush needed: a stale intent names a
//                                 block that recovery finds reachable)
//   remove:  reserve_retire(n)   before entering an RCU read-side section
//            retire(block)       entry flushed
//            drain()             <- entry durable before the unlink
//            unlink (CAS the pointer away), persist it
//            ... the block is freed after a grace period, when the log fills
//            or the thread exits or the heap closes.
//
//   epoch engines (periodic persistence, e.g. Dali) issue no flush or fence
//   inside an operation, so a log entry would cost them the fence they avoid:
//            allocate_unlogged()  bit set; no log, no flush, no fence (a
//                                 run > kMaxSmallSize persists its table
//                                 entries, with a fence: rare)
//            free_unlogged()      bit cleared; likewise (a run is freed
//                                 durably before its chunks change hands)
//                                 (both report the word they changed: the
//                                 engine adds it to its epoch's dirty set)
//            global fence         Region::persist_all, or flush every dirty
//                                 word and drain: the epoch is durable
//            A crash may leave blocks allocated that nothing reaches; the
//            engine's own sweep reclaims them, recover() knows nothing of
//            them. A free may reach media before the fence, so such an
//            engine frees only blocks its durable state no longer reaches.
//
// recover(keep) runs once at open, before any operation: for every block
// named by any log (either intent, or a retired entry) that is still allocated, it asks the engine keep(off)
// ("is this block reachable from the index?") and frees the block when the
// answer is no. Then every log is emptied. That is O(threads x 127) calls.
//
// Pool full: allocate() and allocate_unlogged() return Status::NoSpace and
// change nothing. An engine may keep some free chunks back (set_reserve) for
// the allocations it must not refuse.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>

#include "media/region.h"
#include "pmhash/status.h"

namespace pmhash::heap {

inline constexpr std::size_t kChunkSize = 256 * 1024;
inline constexpr std::size_t kMaxSmallSize = 64 * 1024;
inline constexpr unsigned kRetireLogCapacity = 125;
// Intent slots per thread: an operation may hold one block in each at once
// (clevel: an insert's item in slot 0 while the expansion it triggers
// allocates a level in slot 1).
inline constexpr unsigned kIntentSlots = 2;

class Heap;

// The calling thread's view of a heap. Obtained from Heap::thread(); valid
// until the thread exits or the heap is destroyed. Not shared between
// threads.
class ThreadCache {
 public:
  virtual ~ThreadCache() = default;

  // Index of this thread's log, 0 .. kMaxThreads-1. Engines may use it to
  // index per-thread arrays.
  virtual unsigned slot() const = 0;

  // Reserves a block of at least `n` bytes and records it in this thread's
  // alloc intent slot `intent` (< kIntentSlots), replacing what was there.
  // The intent is persisted first (no crash leaks the block); the allocation
  // state is then flushed but not fenced: it is durable at this thread's
  // next drain, which the caller must issue before publishing the block.
  // With `zero`, the block is zero-filled and flushed too. Errors: NoSpace (nothing changed); InvalidArgument for
  // n == 0 or n beyond the heap.
  virtual Status allocate(std::size_t n, std::uint64_t* off, bool zero = false,
                          unsigned intent = 0) = 0;

  // For engines that persist by epochs: like allocate(), but names the block in
  // no log and issues no flush or fence. The allocation bit reaches media with
  // the caller's next global fence, or before it in any order; the caller makes
  // the word at *dirty durable with its epoch (it records it for its fence).
  // A crash may leave such a block allocated and unreachable: the engine must
  // reclaim those itself. Blocks larger than kMaxSmallSize (runs) persist their
  // chunk-table entries at once, with a fence (rare; *dirty is then the head
  // entry, already durable).
  // use_reserve: the allocation may take the free chunks set_reserve() keeps
  // back (an epoch engine's removes, which must succeed in a full pool).
  virtual Status allocate_unlogged(std::size_t n, std::uint64_t* off, const void** dirty,
                                   bool use_reserve = false) = 0;

  // Frees a block allocated either way, without flush or fence; *dirty as above
  // (nullptr if nothing changed, e.g. the block was not allocated). A run is
  // freed durably, with a fence, before its chunks can change hands (*dirty is
  // then nullptr). The caller guarantees no thread can still reach the block
  // and no crash can make it reachable again.
  virtual void free_unlogged(std::uint64_t off, const void** dirty) = 0;

  // The block in intent slot `intent` is published or freed; forget it.
  virtual void clear_intent(unsigned intent = 0) = 0;

  // Frees a block that was never published (no other thread can hold a
  // pointer to it). Durable when it returns (it drains), so that the intent
  // slot still naming the block may be reused at once.
  virtual void free_unpublished(std::uint64_t off) = 0;

  // Guarantees room for `n` retire() calls without waiting. May wait for a
  // grace period (rcu::synchronize) to empty the log, so it must be called
  // outside any RCU read-side section.
  virtual void reserve_retire(unsigned n) = 0;

  // Records an unlinked (or about-to-be-unlinked) block; it is freed once no
  // reader can hold it. The entry is flushed, not fenced: the caller drains
  // before making the unlink durable. Requires room (reserve_retire).
  virtual void retire(std::uint64_t off) = 0;

  // Waits for a grace period, then frees everything this thread retired.
  // Outside any read-side section.
  virtual void drain_retired() = 0;
};

class Heap {
 public:
  // Writes an empty heap into [off, off + size) of `region` and persists it.
  // Errors: InvalidArgument when the area holds fewer than 4 chunks.
  static Status format(media::Region& region, std::uint64_t off, std::uint64_t size);

  // Attaches to a formatted heap and rebuilds its volatile state (O(chunks)).
  // Writes nothing, so that a pool the engine then rejects stays unchanged:
  // the chunks of runs a crash left half-written are free from here on, and
  // recover() zeroes their stale table entries.
  // Errors: Corruption when the heap header or chunk table is inconsistent.
  static Status open(media::Region& region, std::uint64_t off, std::uint64_t size,
                     std::unique_ptr<Heap>* out);

  virtual ~Heap() = default;

  // Crash recovery, before any operation (see the file comment); also
  // writes the table repairs open() found.
  virtual void recover(const std::function<bool(std::uint64_t off)>& keep) = 0;

  // The calling thread's cache, created on first use. Returns nullptr and
  // sets *status to Busy when kMaxThreads threads already hold one.
  virtual ThreadCache* thread(Status* status = nullptr) = 0;

  // Whether `off` is the start of an allocated block, and its usable size.
  virtual bool is_allocated(std::uint64_t off) const = 0;
  virtual std::size_t block_size(std::uint64_t off) const = 0;

  // Calls fn(off, usable_size) for every allocated block. Quiescent heaps
  // only (check(), tests).
  virtual void for_each_allocated(
      const std::function<void(std::uint64_t off, std::size_t size)>& fn) const = 0;

  // Which blocks are allocated now, copied (the chunk table and every slab
  // bitmap): O(chunks) to take, so that an engine's sweep can go through the
  // blocks of a crash later, in the background, while the heap changes.
  // Quiescent heaps only (open).
  class AllocationSnapshot {
   public:
    virtual ~AllocationSnapshot() = default;
    // Calls fn(off) for every block that was allocated.
    virtual void for_each(const std::function<void(std::uint64_t off)>& fn) const = 0;
  };
  virtual std::unique_ptr<AllocationSnapshot> snapshot_allocated() const = 0;

  virtual std::uint64_t used_bytes() const = 0;  // sum of allocated block sizes
  // Keeps the last `chunks` free chunks for allocate_unlogged(use_reserve):
  // every other allocation that would need a new chunk gets NoSpace while no
  // more are free. Once a use_reserve allocation takes one of them, the
  // reserve is off (what it frees next is for everyone) until 2 x chunks + 1
  // chunks are free again. DRAM only (0 at open).
  virtual void set_reserve(std::uint32_t chunks) = 0;
  virtual std::uint32_t chunk_count() const = 0;
  virtual std::uint64_t free_bytes() const = 0;  // bytes in free chunks and free slab blocks

  // Waits for a grace period and frees every thread's retired blocks. Only
  // when no operation is in flight (close, tests).
  virtual void drain_all() = 0;

  // Verifies chunk table, bitmaps and logs; Corruption on the first problem.
  virtual Status check() const = 0;
};

}  // namespace pmhash::heap
