// heap/checked.h - checked access to what a pool's bytes name.
//
// An engine follows offsets and lengths it reads from the pool: slot words
// that name items, directory entries that name segments, lengths in item
// headers. On a damaged pool any of them may hold anything, so every path
// that follows one (reads, scans, counting, check, recovery) goes through a
// PoolView first:
//
//   contains(off, len, align)  [off, off + len) lies inside the heap area of
//                              the mapped pool and off is a multiple of
//                              align: the bytes may be read without a fault.
//                              Computed without forming off + len, so no
//                              64-bit wrap-around can pass it.
//   at<T>(off, len)            the object at off when contains(off, len,
//                              alignof(T)) holds, nullptr otherwise.
//   block<T>(off, len)         the object at off when off starts an allocated
//                              heap block of at least len bytes (the chunk
//                              table and slab bitmap say so), nullptr
//                              otherwise. Stronger than at(): a damaged
//                              length cannot reach into a neighbouring
//                              block. One chunk-table lookup.
//
// The heap area is [heap_offset, heap_offset + heap_size) of the pool header,
// which Pool::open validated against the file size; PoolView clips it to the
// mapped region as well. A range check costs a few compares next to the
// cache miss of the object it guards, so read paths check every hop; the
// stronger block() is for scans, counts and check(), which read each object
// once.
//
// What a PoolView does not guarantee: that the object is the one the engine
// put there (a flipped offset may land on another valid object). It only
// rules out faults; engines compare keys, magics and states as before.
#pragma once

#include <cstddef>
#include <cstdint>

#include "heap/heap.h"
#include "media/region.h"

namespace pmhash::heap {

// Whether [off, off + len) lies inside [lo, hi); never overflows.
constexpr bool range_within(std::uint64_t off, std::uint64_t len, std::uint64_t lo,
                            std::uint64_t hi) {
  return lo <= off && off <= hi && len <= hi - off;
}

class PoolView {
 public:
  // `heap_off`/`heap_size`: the pool header's heap area; `heap` may be null
  // (then block() is at()).
  PoolView(const media::Region& region, std::uint64_t heap_off, std::uint64_t heap_size,
           const Heap* heap)
      : region_(&region), heap_(heap), lo_(heap_off) {
    const std::uint64_t mapped = region.size();
    hi_ = heap_off >= mapped ? heap_off
                             : heap_off + (heap_size < mapped - heap_off ? heap_size : mapped - heap_off);
  }

  std::uint64_t lo() const { return lo_; }
  std::uint64_t hi() const { return hi_; }

  bool contains(std::uint64_t off, std::uint64_t len, std::uint64_t align = 1) const {
    return range_within(off, len, lo_, hi_) && (off & (align - 1)) == 0;
  }

  template <typename T>
  T* at(std::uint64_t off, std::uint64_t len = sizeof(T)) const {
    if (len < sizeof(T) || !contains(off, len, alignof(T))) return nullptr;
    return region_->at<T>(off);
  }

  template <typename T>
  T* block(std::uint64_t off, std::uint64_t len = sizeof(T)) const {
    if (heap_ == nullptr) return at<T>(off, len);
    if (len < sizeof(T) || !contains(off, len, alignof(T)) || heap_->block_size(off) < len) {
      return nullptr;
    }
    return region_->at<T>(off);
  }

  // The usable size of the allocated block at off; 0 when off starts none.
  std::uint64_t block_size(std::uint64_t off) const {
    if (heap_ == nullptr) return contains(off, 1) ? hi_ - off : 0;
    return heap_->block_size(off);
  }

 private:
  const media::Region* region_;
  const Heap* heap_;
  std::uint64_t lo_;
  std::uint64_t hi_ = 0;
};

}  // namespace pmhash::heap
