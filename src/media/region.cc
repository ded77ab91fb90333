// media/region.cc - Region over libpmem2, and the flush/fence counters.
//
// File regions: libpmem2 maps the file and decides the granularity (it
// honours PMEM2_FORCE_GRANULARITY, which the tests and the benchmarks use).
// We require only page granularity, the weakest, so that any file maps; the
// granularity libpmem2 reports is the strongest the platform offers for it.
// The flush and drain functions libpmem2 hands back already do the right
// thing for that granularity (msync for page, clwb/clflushopt for cache_line,
// nothing for byte; sfence as drain except for page), so Region only forwards
// to them, counts, and tells the observer.
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

  ~Impl() {
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

Status Region::map_file(const std::string& path, std::size_t size,
                        std::unique_ptr<Region>* out) {
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
  r->impl_ = std::move(impl);
  if (MapHook hook = map_hook.load()) hook(*r);
  *out = std::move(r);
  return Status::OK();
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

void Region::flush(const void* p, std::size_t n) {
  flush_fn_(p, n);
  bump(my_counters().flushes);
  if (observer_ != nullptr) observer_->on_flush(offset_of(p), n);
}

void Region::drain() {
  drain_fn_();
  bump(my_counters().fences);
  if (observer_ != nullptr) observer_->on_drain();
}

void Region::persist_all() {
  // libpmem2's flush function over the whole mapping is exactly the global
  // fence each granularity needs: msync of every page (page), write-back of
  // every line (cache_line), nothing (byte, none); the drain then orders it.
  flush(base_, size_);
  drain();
}

}  // namespace pmhash::media
