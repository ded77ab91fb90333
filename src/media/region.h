// media/region.h - a mapped byte range and how its bytes become durable.
//
// A Region is the only way engines reach persistence (docs/architecture.md, "Layers").
// Its *granularity* says what makes a store durable:
//
//   kByte       eADR, or CXL with global persistent flush: a store is durable
//               once a fence (drain) orders it; flush is a no-op.
//   kCacheLine  ADR persistent memory: a line must be written back (clwb or
//               clflushopt, issued by flush) and fenced (drain, sfence).
//   kPage       an ordinary file: flush writes the lines that cover the
//               range back to the file (pwrite from a private mapping);
//               drain waits until everything written back is on media
//               (fdatasync). A store never flushed does not reach the file.
//               Drains of concurrent threads share their fdatasyncs (group
//               commit, "Shared file syncs" below).
//   kNone       anonymous DRAM: nothing is ever durable; every primitive is a
//               no-op. Used for volatile stores and benchmarks.
//
// The file-backed granularity comes from libpmem2, which honours the
// PMEM2_FORCE_GRANULARITY environment variable (byte, cache_line, page).
//
// Primitives (as in libpmem2): flush(p, n) starts write-back of the lines of
// [p, p+n); drain() waits until all flushes issued by this thread are durable;
// persist(p, n) = flush + drain; persist_all() makes the whole region durable
// (the "global fence" of periodic-persistence engines).
//
// Shared file syncs (page granularity). An fdatasync makes durable every
// write-back of the file that completed before it began, whichever thread
// issued it, and costs about a millisecond on a disk, so threads that drain
// at the same time share one: a drain takes a ticket after its thread's
// write-backs returned; one drainer at a time runs fdatasync, covering every
// ticket taken before it began; the others wait for a sync that covers
// theirs (one that was already running when they took their ticket does
// not) and the first of them to find none running starts the next for all.
// So drain() keeps its contract, per thread, and N threads draining
// together pay about two fdatasyncs, not N (file_syncs() counts them). What
// it buys: docs/server.md, "Group commit".
//
// Counters: every flush and drain is counted in per-thread counters that are
// summed by counters(); benchmarks report flushes and fences per operation.
//
// Page size. An index lookup touches a few random lines of a pool of
// gigabytes, so with 4 KiB pages nearly every lookup also misses the TLB
// and walks the page table (more dependent memory reads). A file region
// therefore asks for 2 MiB pages: map_file() advises the shared mapping
// with madvise(MADV_HUGEPAGE). What that gives depends on the file system:
//   tmpfs huge=advise   2 MiB pages (the advice is what this mount waits for)
//   tmpfs huge=always   2 MiB pages with or without the advice
//   tmpfs huge=never    4 KiB pages (the default mount, /dev/shm on most
//                       systems; shmem_enabled=force overrides it)
//   DAX (fsdax, devdax) the advice does not matter: a DAX fault maps 2 MiB
//                       at once when the file's extent under that 2 MiB of
//                       the mapping is one 2 MiB-aligned physical extent
//                       (ext4/xfs with -o dax on a namespace of 2 MiB
//                       alignment, files allocated in 2 MiB extents, as
//                       posix_fallocate of a 2 MiB multiple usually gives)
//                       and the mapping address is 2 MiB aligned (libpmem2
//                       aligns it); not measurable without such a device.
// On huge=advise the kernel picks the page size when a page is first
// allocated, and only a fault through an advised mapping asks for 2 MiB:
// pages that posix_fallocate allocated beforehand stay 4 KiB. So a pool
// created on tmpfs is sized with ftruncate, mapped, advised and then
// populate()d, which allocates every page through the mapping (and, like
// fallocate, reports a full file system as an error instead of a SIGBUS at
// the first store; pool.cc).
// The advice changes neither the bytes nor the persistence: flush and
// drain work on cache lines whatever the page size. The private mapping of
// an ordinary file (kPage) is not advised: it is written back by page and
// would copy 2 MiB on a first store. Measurements: docs/results/costs.md.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "pmhash/status.h"

namespace pmhash::media {

enum class Granularity : unsigned char { kByte, kCacheLine, kPage, kNone };

std::string_view granularity_name(Granularity g);

inline constexpr std::size_t kCacheLineSize = 64;

struct Counters {
  std::uint64_t flushes = 0;  // flush() calls that reached the media layer
  std::uint64_t fences = 0;   // drain() calls
};

// Process-wide totals over all threads and regions, including exited threads.
Counters counters();

class Region {
 public:
  // Opens `path` read-write and maps its first `size` bytes (0: the whole
  // file). The file must already exist with at least `size` bytes.
  // Errors: IOError naming the path and the reason.
  // `shared`: several processes map the file at once and must see each
  // other's stores (memory-node pools, remote/memnode.h), so the mapping
  // stays shared at every granularity; at page granularity flush() is then
  // libpmem2's msync instead of the private copy's pwrite (region.cc).
  static Status map_file(const std::string& path, std::size_t size,
                         std::unique_ptr<Region>* out, bool shared = false);

  // An anonymous, zero-filled, volatile mapping (granularity kNone).
  static Status anonymous(std::size_t size, std::unique_ptr<Region>* out);

  ~Region();
  Region(const Region&) = delete;
  Region& operator=(const Region&) = delete;

  std::byte* base() const { return base_; }
  std::size_t size() const { return size_; }
  Granularity granularity() const { return granularity_; }
  const std::string& path() const { return path_; }

  void flush(const void* p, std::size_t n);
  void drain();
  // The first error a write-back to the file met (page granularity), or OK.
  // flush() and drain() cannot fail in their signatures, as on persistent
  // memory; a file can (EIO, ENOSPC), and the error stays here for good.
  // Nothing is written to the file after it (region.cc: fail-stop).
  Status write_back_error() const;
  void persist(const void* p, std::size_t n) {
    flush(p, n);
    drain();
  }
  // Allocates every page of the file behind the region by write-faulting it
  // through the (advised) mapping, without changing a byte: madvise
  // MADV_POPULATE_WRITE. For a new file on tmpfs (see "Page size").
  // Errors: IOError saying "No space left on device" when the file system
  // has no room for the pages (the message names the path and the size);
  // NotSupported when the kernel
  // lacks MADV_POPULATE_WRITE (before Linux 5.14: allocate with
  // posix_fallocate instead), also for a region that is not a shared file
  // mapping (anonymous, or page granularity's private copy); IOError
  // otherwise.
  Status populate();

  // Makes every byte of the region durable (on page granularity: every page
  // stored to since the mapping was made is written back, then fdatasync; a
  // fence otherwise, after flushing everything on cache_line granularity).
  void persist_all();

  // Offset <-> address helpers for relative pointers.
  std::uint64_t offset_of(const void* p) const {
    return static_cast<std::uint64_t>(static_cast<const std::byte*>(p) - base_);
  }
  template <typename T = std::byte>
  T* at(std::uint64_t off) const {
    return reinterpret_cast<T*>(base_ + off);
  }

  // Hooks for the crash simulator (tests/crash): when set, every flush and
  // drain is reported to it after the real primitive ran.
  struct Observer {
    virtual ~Observer() = default;
    virtual void on_flush(std::uint64_t off, std::size_t n) = 0;
    virtual void on_drain() = 0;
  };
  void set_observer(Observer* o) { observer_ = o; }
  // Test hook: when set, map_file() calls it with every region it maps
  // before handing the region out, so that a simulator can watch a pool's
  // recovery from its first write. Process-wide; nullptr removes it.
  using MapHook = void (*)(Region&);
  static void set_map_hook(MapHook hook);

  // Page granularity: how many fdatasyncs drains have run on this region
  // (fewer than its drains when threads shared them); 0 otherwise.
  std::uint64_t file_syncs() const;
  // How many drains have asked this region for a file sync (page
  // granularity); each is covered by one of file_syncs().
  std::uint64_t file_sync_requests() const;
  // Test hook: when set, called at the start of every file sync (page
  // granularity), after the sync has fixed which drains it covers and
  // before fdatasync. Process-wide; nullptr removes it.
  using SyncHook = void (*)(Region&);
  static void set_sync_hook(SyncHook hook);

 private:
  Region() = default;
  struct Impl;

  void write_back(std::uint64_t off, std::size_t n);
  void write_back_touched();
  void sync_file();

  std::byte* base_ = nullptr;
  std::size_t size_ = 0;
  Granularity granularity_ = Granularity::kNone;
  std::string path_;
  void (*flush_fn_)(const void*, std::size_t) = nullptr;
  void (*drain_fn_)() = nullptr;
  int write_back_fd_ = -1;  // page granularity: flush = pwrite, drain = fdatasync
  Observer* observer_ = nullptr;
  std::unique_ptr<Impl> impl_;
};

}  // namespace pmhash::media
