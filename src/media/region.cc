// media/region.cc - Region over libpmem2, and the flush/fence counters.
//
// File regions: libpmem2 maps the file and decides the granularity (it
// honours PMEM2_FORCE_GRANULARITY, which the tests and the benchmarks use).
// We require only page granularity, the weakest, so that any file maps; the
// granularity libpmem2 reports is the strongest the platform offers for it.
// For cache_line and byte, the flush and drain functions libpmem2 hands back
// already do the right thing (clwb/clflushopt for cache_line, nothing for
// byte; sfence as drain), so Region only forwards to them, counts, and tells
// the observer.
//
// Page granularity (an ordinary file) is ours. libpmem2 would msync a shared
// mapping, and msync write-protects every page it cleans so that the next
// store to the page takes a fault; on a multi-core machine that is also a
// TLB shootdown (an interrupt to every core) per msync. An epoch engine on
// an ordinary file spent most of its time there (perf: about 40% in IPIs and
// write faults). Instead the file is mapped MAP_PRIVATE: a page's first
// store copies it once (copy-on-write) and after that stores never fault.
//   flush(p, n)   copies the 64-byte lines of [p, p+n) with one 8-byte load
//                 per word (a word stored concurrently reaches the file whole,
//                 as with a cache line's write-back) and pwrites them
//   drain()       fdatasync, shared by the threads draining at the same
//                 time (sync_file below)
//   persist_all() every page this process has stored to (the private copies,
//                 found in /proc/self/pagemap), then fdatasync
// So a store never flushed never reaches the file, not even at a clean
// unmap: the same discipline as persistent memory, where an unflushed line
// may be lost, and which the crash checker verifies for every engine. The
// cost: a written page lives twice in memory (the private copy and the page
// cache) until the region is unmapped. A failed pwrite or fdatasync (EIO,
// ENOSPC) is kept and reported by write_back_error(); the primitives stay
// void, as on persistent memory. From that error on, nothing more is
// written to the file (fail-stop): the engine goes on as if its lines had
// reached media, so a later write could depend on one that never did, and
// a clean close would mark the pool clean over data that is not there.
// Stopping leaves the file as a crash at the failed write would: every
// earlier write-back, and none after. The next open recovers it as such.
//
// A shared file region (map_file's `shared`: a memory node that several
// processes map) keeps libpmem2's shared mapping and its flush at every
// granularity, msync included: the private copy would hide each process's
// stores from the others.
//
// Anonymous regions are plain mmap(MAP_PRIVATE | MAP_ANONYMOUS) and nothing
// in them is ever durable, so flush and drain are no-ops.
//
// Counting: every flush() and drain() call is counted, whatever the
// granularity, kNone and kByte included (where the primitive itself does
// nothing). The counters therefore measure what an engine asks of the media
// layer, which is what the benchmarks compare across engines and regions.
// persist_all() counts as one flush and one fence.
//
// The counters live in a thread_local block owned by the thread that
// increments it: the hot path is a relaxed load and a relaxed store of a
// word no other thread writes (no locked read-modify-write, no shared cache
// line). Blocks are linked into a registry on first use; counters() sums the
// live blocks plus the totals of threads that have already exited.
#include "media/region.h"

#include <fcntl.h>
#include <libpmem2.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <vector>

namespace pmhash::media {

namespace {

// ---------------------------------------------------------------------------
// Per-thread counters.

struct ThreadCounters;

struct CounterRegistry {
  std::mutex mu;
  std::vector<ThreadCounters*> live;
  Counters retired;  // sums of the threads that have exited
};

// Never destroyed: threads that outlive static destruction (detached ones)
// may still retire their counters into it.
CounterRegistry& registry() {
  static CounterRegistry* r = new CounterRegistry;
  return *r;
}

struct ThreadCounters {
  // Written only by the owning thread; atomic so that counters() may read
  // them concurrently without a data race.
  std::atomic<std::uint64_t> flushes{0};
  std::atomic<std::uint64_t> fences{0};

  ThreadCounters() {
    CounterRegistry& r = registry();
    std::lock_guard<std::mutex> lock(r.mu);
    r.live.push_back(this);
  }
  ~ThreadCounters() {
    CounterRegistry& r = registry();
    std::lock_guard<std::mutex> lock(r.mu);
    r.retired.flushes += flushes.load(std::memory_order_relaxed);
    r.retired.fences += fences.load(std::memory_order_relaxed);
    r.live.erase(std::find(r.live.begin(), r.live.end(), this));
  }
};

ThreadCounters& my_counters() {
  thread_local ThreadCounters c;
  return c;
}

// Single-writer increment: no lock prefix needed.
inline void bump(std::atomic<std::uint64_t>& c) {
  c.store(c.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
}

// ---------------------------------------------------------------------------

void noop_flush(const void*, std::size_t) {}
void noop_drain() {}

std::string errno_text(int err) { return std::strerror(err); }

std::string pmem2_text() {
  const char* m = pmem2_errormsg();
  return (m != nullptr && *m != '\0') ? std::string(m) : std::string("unknown libpmem2 error");
}

Granularity from_pmem2(pmem2_granularity g) {
  switch (g) {
    case PMEM2_GRANULARITY_BYTE:
      return Granularity::kByte;
    case PMEM2_GRANULARITY_CACHE_LINE:
      return Granularity::kCacheLine;
    case PMEM2_GRANULARITY_PAGE:
      return Granularity::kPage;
  }
  return Granularity::kPage;
}

}  // namespace

std::string_view granularity_name(Granularity g) {
  switch (g) {
    case Granularity::kByte:
      return "byte";
    case Granularity::kCacheLine:
      return "cache_line";
    case Granularity::kPage:
      return "page";
    case Granularity::kNone:
      return "none";
  }
  return "unknown";
}

Counters counters() {
  CounterRegistry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  Counters sum = r.retired;
  for (const ThreadCounters* t : r.live) {
    sum.flushes += t->flushes.load(std::memory_order_relaxed);
    sum.fences += t->fences.load(std::memory_order_relaxed);
  }
  return sum;
}

// What a Region owns besides its address range: either a libpmem2 mapping
// of a file, or an anonymous mapping.
struct Region::Impl {
  int fd = -1;
  pmem2_source* source = nullptr;
  pmem2_config* config = nullptr;
  pmem2_map* map = nullptr;
  void* anon = nullptr;  // anonymous mapping, when there is no file
  std::size_t anon_size = 0;
  void* copy = nullptr;  // page granularity: the private (copy-on-write) mapping
  std::size_t copy_size = 0;
  std::atomic<int> error{0};  // first errno of a write-back, 0: none

  // Shared file syncs (region.h). Tickets are numbered from 1; every ticket
  // <= synced is covered by an fdatasync that began after it was taken.
  std::mutex sync_mu;
  std::condition_variable sync_done;
  std::uint64_t tickets = 0;  // taken so far
  std::uint64_t synced = 0;
  bool syncing = false;  // one fdatasync at a time
  std::atomic<std::uint64_t> syncs{0};

  ~Impl() {
    if (copy != nullptr) ::munmap(copy, copy_size);
    if (map != nullptr) pmem2_map_delete(&map);
    if (config != nullptr) pmem2_config_delete(&config);
    if (source != nullptr) pmem2_source_delete(&source);
    if (fd >= 0) ::close(fd);
    if (anon != nullptr) ::munmap(anon, anon_size);
  }
};

Region::~Region() = default;

namespace {
std::atomic<Region::MapHook> map_hook{nullptr};
}  // namespace

void Region::set_map_hook(MapHook hook) { map_hook.store(hook); }

namespace {
std::atomic<Region::SyncHook> sync_hook{nullptr};
}  // namespace

void Region::set_sync_hook(SyncHook hook) { sync_hook.store(hook); }

Status Region::map_file(const std::string& path, std::size_t size,
                        std::unique_ptr<Region>* out, bool shared) {
  auto fail = [&](const std::string& why) {
    return Status::IOError("region " + path + ": " + why);
  };

  auto impl = std::make_unique<Impl>();
  impl->fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (impl->fd < 0) return fail("cannot open: " + errno_text(errno));

  struct stat st {};
  if (::fstat(impl->fd, &st) != 0) return fail("cannot stat: " + errno_text(errno));
  const auto file_size = static_cast<std::uint64_t>(st.st_size);
  if (size == 0 && file_size == 0) return fail("file is empty, nothing to map");
  if (size > file_size) {
    return fail("file is " + std::to_string(file_size) + " bytes, asked to map " +
                std::to_string(size));
  }

  if (pmem2_source_from_fd(&impl->source, impl->fd) != 0) {
    return fail("libpmem2 rejects the file: " + pmem2_text());
  }
  if (pmem2_config_new(&impl->config) != 0) {
    return fail("libpmem2 config: " + pmem2_text());
  }
  // Page is the weakest granularity: asking for it lets every file map,
  // while libpmem2 still reports (and flushes for) the strongest it finds.
  if (pmem2_config_set_required_store_granularity(impl->config, PMEM2_GRANULARITY_PAGE) != 0) {
    return fail("libpmem2 granularity: " + pmem2_text());
  }
  if (size != 0) {
    std::size_t align = 0;
    if (pmem2_source_alignment(impl->source, &align) == 0 && align != 0 && size % align != 0) {
      return fail("length " + std::to_string(size) +
                  " is not a multiple of the mapping alignment " + std::to_string(align));
    }
    if (pmem2_config_set_length(impl->config, size) != 0) {
      return fail("libpmem2 length: " + pmem2_text());
    }
  }
  if (const int err = pmem2_map_new(&impl->map, impl->config, impl->source); err != 0) {
    // libpmem2 returns -errno when the system refused the mapping; its own
    // text then names an internal step ("mmap MAP_ANONYMOUS"), so ENOMEM,
    // the common case, is said in the user's terms.
    const std::string what = "cannot map " + std::to_string(size != 0 ? size : file_size) +
                              " bytes: ";
    if (err == -ENOMEM) {
      return fail(what + errno_text(ENOMEM) +
                  " (the process's address space is full or limited: see ulimit -v)");
    }
    return fail(what + pmem2_text());
  }

  std::unique_ptr<Region> r(new Region());
  r->base_ = static_cast<std::byte*>(pmem2_map_get_address(impl->map));
  r->size_ = pmem2_map_get_size(impl->map);
  r->granularity_ = from_pmem2(pmem2_map_get_store_granularity(impl->map));
  r->path_ = path;
  r->flush_fn_ = pmem2_get_flush_fn(impl->map);
  r->drain_fn_ = pmem2_get_drain_fn(impl->map);
  if (r->granularity_ != Granularity::kPage || shared) {
    // Huge pages where the file system gives them (region.h, "Page size").
    // Advice: where it does not apply the kernel ignores it or says EINVAL,
    // and the mapping works as before with 4 KiB pages.
    (void)::madvise(r->base_, r->size_, MADV_HUGEPAGE);
  }
  if (r->granularity_ == Granularity::kPage && !shared) {
    // An ordinary file: map it privately and write back with pwrite (see
    // the head of this file). libpmem2's shared mapping only told us the
    // granularity.
    pmem2_map_delete(&impl->map);
    void* p = ::mmap(nullptr, r->size_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_NORESERVE,
                     impl->fd, 0);
    if (p == MAP_FAILED) {
      return fail("cannot map " + std::to_string(r->size_) + " bytes: " + errno_text(errno));
    }
    impl->copy = p;
    impl->copy_size = r->size_;
    r->base_ = static_cast<std::byte*>(p);
    r->flush_fn_ = noop_flush;
    r->drain_fn_ = noop_drain;
    r->write_back_fd_ = impl->fd;
  }
  r->impl_ = std::move(impl);
  if (MapHook hook = map_hook.load()) hook(*r);
  *out = std::move(r);
  return Status::OK();
}

Status Region::populate() {
#ifndef MADV_POPULATE_WRITE
  constexpr int MADV_POPULATE_WRITE = 23;  // Linux 5.14 and later
#endif
  const std::string what = "region " + path_ + ": cannot allocate its " + std::to_string(size_) +
                           " bytes: ";
  if (impl_ == nullptr || impl_->map == nullptr) {
    // Anonymous, or the private copy of page granularity: write faults
    // there would copy pages, not allocate the file's.
    return Status::NotSupported(what + "not a shared file mapping");
  }
  if (::madvise(base_, size_, MADV_POPULATE_WRITE) == 0) return Status::OK();
  const int err = errno;
  if (err == EINVAL) {
    return Status::NotSupported(what + "the kernel has no MADV_POPULATE_WRITE (Linux 5.14+)");
  }
  // A page that cannot be allocated would be a SIGBUS on access (EFAULT),
  // or the memory behind tmpfs is exhausted (ENOMEM).
  if (err == EFAULT || err == ENOMEM || err == ENOSPC) {
    return Status::IOError(what + errno_text(ENOSPC) + " (" + errno_text(err) +
                           " while allocating: free space or use a smaller pool)");
  }
  return Status::IOError(what + errno_text(err));
}

Status Region::anonymous(std::size_t size, std::unique_ptr<Region>* out) {
  if (size == 0) return Status::InvalidArgument("anonymous region: size must be positive");
  void* p = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    return Status::IOError("anonymous region of " + std::to_string(size) +
                           " bytes: cannot map: " + errno_text(errno));
  }
  auto impl = std::make_unique<Impl>();
  impl->anon = p;
  impl->anon_size = size;

  std::unique_ptr<Region> r(new Region());
  r->base_ = static_cast<std::byte*>(p);
  r->size_ = size;
  r->granularity_ = Granularity::kNone;
  r->flush_fn_ = noop_flush;
  r->drain_fn_ = noop_drain;
  r->impl_ = std::move(impl);
  *out = std::move(r);
  return Status::OK();
}

namespace {

// Copies the words of [src, src + n) (8-byte aligned, n a multiple of 8)
// with one 8-byte load each, so that a word another thread stores
// concurrently is copied whole, as a cache line's write-back would carry it.
// The other thread's stores may be plain ones: the race is the one a
// hardware write-back has with them, so the thread sanitizer is not told.
__attribute__((no_sanitize("thread"))) void copy_words(std::uint64_t* dst,
                                                         const std::byte* src, std::size_t n) {
  const auto* words = reinterpret_cast<const std::uint64_t*>(src);
  for (std::size_t i = 0; i < n / 8; ++i) dst[i] = __atomic_load_n(&words[i], __ATOMIC_RELAXED);
}

}  // namespace

void Region::write_back(std::uint64_t off, std::size_t n) {
  if (impl_->error.load(std::memory_order_acquire) != 0) return;  // fail-stop
  std::uint64_t begin = off & ~std::uint64_t{kCacheLineSize - 1};
  const std::uint64_t end = std::min<std::uint64_t>(
      size_, (off + n + kCacheLineSize - 1) & ~std::uint64_t{kCacheLineSize - 1});
  thread_local std::vector<std::uint64_t> buffer;
  constexpr std::size_t kChunk = std::size_t{1} << 20;
  while (begin < end) {
    const std::size_t len = static_cast<std::size_t>(std::min<std::uint64_t>(end - begin, kChunk));
    buffer.resize(len / 8);
    copy_words(buffer.data(), base_ + begin, len);
    const auto* from = reinterpret_cast<const char*>(buffer.data());
    std::size_t done = 0;
    while (done < len) {
      const ssize_t w = ::pwrite(write_back_fd_, from + done, len - done,
                                 static_cast<off_t>(begin + done));
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) {
        int expected = 0;
        impl_->error.compare_exchange_strong(expected, w < 0 ? errno : EIO);
        return;
      }
      done += static_cast<std::size_t>(w);
    }
    begin += len;
  }
}

void Region::write_back_touched() {
  // Every page this process stored to is a private copy now: the kernel's
  // page map says so (present or swapped, and no longer the file's page).
  // Those pages, and only those, may differ from the file.
  const long page = ::sysconf(_SC_PAGESIZE);
  const int fd = ::open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
  if (page <= 0 || fd < 0) {
    if (fd >= 0) ::close(fd);
    write_back(0, size_);  // no page map: the whole region
    return;
  }
  const auto psize = static_cast<std::uint64_t>(page);
  const std::uint64_t pages = (size_ + psize - 1) / psize;
  const std::uint64_t first = reinterpret_cast<std::uintptr_t>(base_) / psize;
  constexpr std::uint64_t kPresent = std::uint64_t{1} << 63;
  constexpr std::uint64_t kSwapped = std::uint64_t{1} << 62;
  constexpr std::uint64_t kFileOrShared = std::uint64_t{1} << 61;
  std::vector<std::uint64_t> entries(4096);
  std::uint64_t run_begin = 0, run_len = 0;  // pages to write, coalesced
  auto flush_run = [&] {
    if (run_len != 0) write_back(run_begin * psize, run_len * psize);
    run_len = 0;
  };
  for (std::uint64_t i = 0; i < pages; i += entries.size()) {
    const std::size_t count = static_cast<std::size_t>(std::min<std::uint64_t>(entries.size(), pages - i));
    const ssize_t got = ::pread(fd, entries.data(), count * 8, static_cast<off_t>((first + i) * 8));
    if (got != static_cast<ssize_t>(count * 8)) {
      // Unreadable: write back the rest whole.
      flush_run();
      write_back(i * psize, size_ - i * psize);
      ::close(fd);
      return;
    }
    for (std::size_t j = 0; j < count; ++j) {
      const std::uint64_t e = entries[j];
      const bool copied = (e & (kPresent | kSwapped)) != 0 && (e & kFileOrShared) == 0;
      if (!copied) {
        flush_run();
        continue;
      }
      if (run_len == 0) run_begin = i + j;
      ++run_len;
    }
  }
  flush_run();
  ::close(fd);
}

Status Region::write_back_error() const {
  if (impl_ == nullptr) return Status::OK();
  const int err = impl_->error.load(std::memory_order_relaxed);
  if (err == 0) return Status::OK();
  return Status::IOError("region " + path_ + ": write-back to the file failed: " + errno_text(err) +
                         "; nothing was written to it since, and its next open recovers it as "
                         "after a crash");
}

void Region::flush(const void* p, std::size_t n) {
  if (write_back_fd_ >= 0) {
    write_back(offset_of(p), n);
  } else {
    flush_fn_(p, n);
  }
  bump(my_counters().flushes);
  if (observer_ != nullptr) observer_->on_flush(offset_of(p), n);
}

std::uint64_t Region::file_syncs() const {
  return impl_ == nullptr ? 0 : impl_->syncs.load(std::memory_order_relaxed);
}

std::uint64_t Region::file_sync_requests() const {
  if (impl_ == nullptr) return 0;
  std::lock_guard<std::mutex> lock(impl_->sync_mu);
  return impl_->tickets;
}

// Group commit (region.h, "Shared file syncs"). The caller's write-backs
// (pwrite) have returned, so they are in the page cache before its ticket
// is taken under sync_mu; a sync covers the tickets taken before it fixed
// `covers` under the same mutex, and fdatasync begins after that, so it
// writes every covered thread's write-backs to media. An error is recorded
// once for the region (fail-stop), whichever drainer met it.
void Region::sync_file() {
  Impl& g = *impl_;
  std::unique_lock<std::mutex> lock(g.sync_mu);
  const std::uint64_t ticket = ++g.tickets;
  while (g.synced < ticket) {
    if (g.syncing) {
      g.sync_done.wait(lock);
      continue;
    }
    g.syncing = true;
    const std::uint64_t covers = g.tickets;
    lock.unlock();
    if (SyncHook hook = sync_hook.load()) hook(*this);
    if (::fdatasync(write_back_fd_) != 0) {
      int expected = 0;
      g.error.compare_exchange_strong(expected, errno);
    }
    g.syncs.fetch_add(1, std::memory_order_relaxed);
    lock.lock();
    g.synced = covers;
    g.syncing = false;
    g.sync_done.notify_all();
  }
}

void Region::drain() {
  if (write_back_fd_ >= 0) {
    sync_file();
  } else {
    drain_fn_();
  }
  bump(my_counters().fences);
  if (observer_ != nullptr) observer_->on_drain();
}

void Region::persist_all() {
  if (write_back_fd_ >= 0) {
    // Page granularity: every page written since the mapping was made (a
    // superset of those written since the last persist_all), then one
    // fdatasync.
    write_back_touched();
    bump(my_counters().flushes);
    if (observer_ != nullptr) observer_->on_flush(0, size_);
    drain();
    return;
  }
  // libpmem2's flush function over the whole mapping is exactly the global
  // fence each granularity needs: write-back of every line (cache_line),
  // nothing (byte, none); the drain then orders it.
  flush(base_, size_);
  drain();
}

}  // namespace pmhash::media
