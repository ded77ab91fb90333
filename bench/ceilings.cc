// bench/ceilings.cc - measuring the ceilings declared in bench/ceilings.h.
//
// Region. A file-backed region is a fresh file in config.dir, opened with
// O_EXCL under a name unique to this process and call
// ("pmhash-limits-<pid>-<n>.tmp"), unlinked as soon as it is open (so even a
// killed benchmark leaves nothing behind; the mapping keeps the blocks),
// sized with posix_fallocate (ftruncate where the file system cannot
// allocate; on tmpfs ftruncate, then every page allocated through the
// advised mapping with MADV_POPULATE_WRITE, as a pool is) and mapped by libpmem2 exactly as media::Region maps a pool:
// page granularity required, PMEM2_FORCE_GRANULARITY set to the requested
// granularity while the mapping is made. Persists and the sequential writes
// go through the functions libpmem2 hands back for that mapping (clwb/
// clflushopt + sfence on cache_line, sfence on byte, msync on page). A
// "none" region is an anonymous private mapping: a persist there is the
// bare store and the sequential write a plain memset. Region releases what
// it acquired in its destructor, so every error path cleans up.
//
// Set-up, before any clock runs. Every byte of the region is written once,
// so no test pays for page faults. Then the chase ring is laid: the region's
// lines are split into at most kMaxChasedLines equal groups, one random line
// is picked in each (all lines when the region is small enough), the picked
// lines are shuffled (Fisher-Yates) and each one stores the offset of the
// next in that order, the last pointing back to the first. Closing a random
// order into a ring yields a uniformly random single cycle (the cycles
// Sattolo's algorithm draws), and it tells us the cycle order, so thread t
// starts t/threads of the way round and no thread trails another through
// lines the other just cached. Finally a file region is made durable once,
// so that the write-back of the set-up does not leak into the tests.
//
// Tests, in this order (the chase must run before anything overwrites the
// ring): dependent reads, independent reads, sequential read, persists,
// non-temporal 8-byte and 16-byte persists (byte and cache_line only),
// sequential write.
//
// Huge pages: a file region gets madvise(MADV_HUGEPAGE) as a pool does
// (media/region.h); the share mapped with huge pages is the sum of the
// ShmemPmdMapped, FilePmdMapped and AnonHugePages lines of the region's
// entry in /proc/self/smaps, read after the set-up touched every page. Each runs on config.threads threads released together
// by a latch; each thread stops on its own once seconds_per_test have
// passed since the release (TimeBox), and the rate is the operations of all
// threads divided by the wall time from the release to the last join.
// Results of loads are folded into a global sink, so the compiler cannot
// drop them.
//
// Clock reads. TimeBox reads steady_clock after a number of operations that
// adapts: it doubles while clock reads come less than kClockInterval apart
// and halves when they come far more apart. Fast loops (a cached line read)
// thus read the clock every few hundred operations, slow ones (an msync per
// persist) after every operation, and every test ends within about
// 2 x kClockInterval of its deadline.
#include "ceilings.h"

#include <fcntl.h>
#include <libpmem2.h>
#if defined(__x86_64__)
#include <immintrin.h>
#endif
#include <sys/mman.h>
#include <linux/magic.h>
#include <sys/statvfs.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <latch>
#include <sstream>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace pmhash::bench {

namespace {

using Clock = std::chrono::steady_clock;

constexpr std::uint64_t kLine = 64;
constexpr std::uint64_t kMiB = 1ull << 20;
constexpr std::uint64_t kRegionAlign = 2 * kMiB;   // regions are whole huge pages
constexpr std::uint64_t kMinRegion = 16 * kMiB;
constexpr std::uint64_t kMinSlice = kMiB;          // each thread's share of the region
constexpr std::uint64_t kSeqWriteChunk = kMiB;     // one libpmem2 memset call
constexpr std::uint64_t kSeqReadChunk = 64 * 1024; // bytes summed between TimeBox checks
constexpr std::uint64_t kMaxChasedLines = 1ull << 22;  // 4 Mi lines; ring index is 32 MiB
constexpr unsigned kReadBatch = 16;                // loads per batch, both read tests
constexpr std::uint64_t kSeed = 0x6c696d697473ull; // "limits"
constexpr auto kClockInterval = std::chrono::microseconds(50);

const char* const kForceEnv = "PMEM2_FORCE_GRANULARITY";

// Folds a value computed from loads into something the compiler must keep.
std::atomic<std::uint64_t> g_sink{0};
void keep(std::uint64_t v) { g_sink.fetch_xor(v, std::memory_order_relaxed); }

// ---------------------------------------------------------------------------
// Small helpers.

std::string errno_text(int err) { return std::strerror(err); }

std::string pmem2_text() {
  const char* m = pmem2_errormsg();
  return (m != nullptr && *m != '\0') ? std::string(m) : std::string("unknown libpmem2 error");
}

std::string mib(std::uint64_t bytes) { return std::to_string(bytes / kMiB) + " MiB"; }

std::string granularity_name(pmem2_granularity g) {
  switch (g) {
    case PMEM2_GRANULARITY_BYTE:
      return "byte";
    case PMEM2_GRANULARITY_CACHE_LINE:
      return "cache_line";
    case PMEM2_GRANULARITY_PAGE:
      return "page";
  }
  return "unknown";
}

std::string join_path(const std::string& dir, const std::string& name) {
  return (!dir.empty() && dir.back() == '/') ? dir + name : dir + "/" + name;
}

std::uint64_t load_word(const std::byte* p) { return *reinterpret_cast<const std::uint64_t*>(p); }

void store_word(std::byte* p, std::uint64_t v) { *reinterpret_cast<std::uint64_t*>(p) = v; }

// SplitMix64: one add on the critical path, so the addresses of the
// independent-read test do not wait for each other or for the loads.
class Random {
 public:
  explicit Random(std::uint64_t seed) : state_(seed) {}

  std::uint64_t next() {
    state_ += 0x9e3779b97f4a7c15ull;
    std::uint64_t z = state_;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }

  // Uniform enough in [0, n): the high half of next() * n.
  std::uint64_t below(std::uint64_t n) {
    __extension__ typedef unsigned __int128 Wide;
    return static_cast<std::uint64_t>((static_cast<Wide>(next()) * n) >> 64);
  }

 private:
  std::uint64_t state_;
};

// ---------------------------------------------------------------------------
// Configuration.

bool is_file_granularity(const std::string& g) {
  return g == "byte" || g == "cache_line" || g == "page";
}

// Checks `config` and returns the region size: region_bytes rounded up to
// a multiple of 2 MiB.
std::uint64_t checked_region_bytes(const CeilingConfig& config) {
  auto bad = [](const std::string& what) {
    throw std::invalid_argument("ceilings: " + what);
  };
  if (!is_file_granularity(config.granularity) && config.granularity != "none") {
    bad("unknown granularity '" + config.granularity +
        "' (use byte, cache_line, page or none)");
  }
  if (is_file_granularity(config.granularity) && config.dir.empty()) {
    bad("no directory for the region's file (set dir, e.g. /dev/shm)");
  }
  if (config.threads == 0) bad("threads is 0 (use at least 1)");
  if (!(config.seconds_per_test > 0) || !std::isfinite(config.seconds_per_test)) {
    bad("seconds_per_test " + std::to_string(config.seconds_per_test) +
        " is not a positive number of seconds");
  }
  if (config.region_bytes < kMinRegion) {
    bad("region of " + std::to_string(config.region_bytes) + " bytes is too small (use at least " +
        mib(kMinRegion) + ")");
  }
  const std::uint64_t bytes = (config.region_bytes + kRegionAlign - 1) / kRegionAlign * kRegionAlign;
  if (bytes / config.threads < kMinSlice) {
    bad(std::to_string(config.threads) + " threads need a region of at least " +
        mib(kMinSlice * config.threads) + " (1 MiB each); region is " + mib(bytes));
  }
  return bytes;
}

// Sets an environment variable for the life of the object, then puts back
// what was there (or removes it).
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const std::string& value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (::setenv(name, value.c_str(), 1) != 0) {
      throw std::runtime_error(std::string("ceilings: cannot set ") + name + ": " +
                               errno_text(errno));
    }
  }
  ~ScopedEnv() {
    if (old_) {
      ::setenv(name_, old_->c_str(), 1);
    } else {
      ::unsetenv(name_);
    }
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
  std::optional<std::string> old_;
};

// ---------------------------------------------------------------------------
// The region.

class Region {
 public:
  // Creates and maps the region `config` asks for, of `bytes` bytes.
  // Throws std::runtime_error naming the path (or the anonymous mapping)
  // and the reason.
  static std::unique_ptr<Region> create(const CeilingConfig& config, std::uint64_t bytes);

  ~Region();
  Region(const Region&) = delete;
  Region& operator=(const Region&) = delete;

  std::byte* base() const { return base_; }
  std::uint64_t size() const { return size_; }
  const std::string& granularity() const { return granularity_; }
  const std::string& description() const { return description_; }
  // False for anonymous DRAM, where nothing is durable.
  bool durable() const { return map_ != nullptr; }
  // libpmem2's functions for this mapping; only when durable().
  pmem2_persist_fn persist_fn() const { return persist_; }
  pmem2_memset_fn memset_fn() const { return memset_; }

 private:
  Region() = default;
  void open_file(const std::string& dir);
  void size_file(const std::string& dir, std::uint64_t bytes);
  void map_file(const std::string& granularity);
  void map_anonymous(std::uint64_t bytes);
  [[noreturn]] void fail(const std::string& why) const;

  std::string path_;
  int fd_ = -1;
  bool populate_ = false;  // tmpfs: allocate the pages through the mapping
  pmem2_source* source_ = nullptr;
  pmem2_config* config_ = nullptr;
  pmem2_map* map_ = nullptr;
  void* anon_ = nullptr;

  std::byte* base_ = nullptr;
  std::uint64_t size_ = 0;
  std::string granularity_;
  std::string description_;
  pmem2_persist_fn persist_ = nullptr;
  pmem2_memset_fn memset_ = nullptr;
};

std::unique_ptr<Region> Region::create(const CeilingConfig& config, std::uint64_t bytes) {
  std::unique_ptr<Region> r(new Region());
  if (config.granularity == "none") {
    r->map_anonymous(bytes);
    return r;
  }
  r->open_file(config.dir);
  r->size_file(config.dir, bytes);
  r->map_file(config.granularity);
  return r;
}

Region::~Region() {
  if (map_ != nullptr) pmem2_map_delete(&map_);
  if (config_ != nullptr) pmem2_config_delete(&config_);
  if (source_ != nullptr) pmem2_source_delete(&source_);
  if (fd_ >= 0) ::close(fd_);
  if (anon_ != nullptr) ::munmap(anon_, size_);
}

void Region::fail(const std::string& why) const {
  throw std::runtime_error("ceilings: region file " + path_ + ": " + why);
}

void Region::open_file(const std::string& dir) {
  static std::atomic<unsigned> next_number{0};
  const std::string prefix = "pmhash-limits-" + std::to_string(::getpid()) + "-";
  // O_EXCL: never reuse a file someone else left; try the next number.
  for (int attempt = 0; attempt < 100; ++attempt) {
    path_ = join_path(dir, prefix + std::to_string(next_number.fetch_add(1)) + ".tmp");
    fd_ = ::open(path_.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd_ >= 0) break;
    const int err = errno;
    if (err == EEXIST) continue;
    if (err == ENOENT || err == ENOTDIR) {
      fail("cannot create: " + errno_text(err) + " (directory " + dir +
           " does not exist; pass an existing, writable directory)");
    }
    fail("cannot create: " + errno_text(err) + " (pass a writable directory other than " + dir +
         ")");
  }
  if (fd_ < 0) fail("cannot create: 100 names in a row are taken (clean up " + dir + ")");
  // The open descriptor and later the mapping keep the file's blocks; the
  // name is not needed, and without it nothing outlives this process.
  if (::unlink(path_.c_str()) != 0) fail("cannot unlink after creating: " + errno_text(errno));
}

void Region::size_file(const std::string& dir, std::uint64_t bytes) {
  // tmpfs: as a pool (pool.cc), sized sparse and allocated through the
  // advised mapping (map_file), so that huge=advise gives huge pages.
  struct statfs fs {};
  if (::fstatfs(fd_, &fs) == 0 && fs.f_type == TMPFS_MAGIC) {
    if (::ftruncate(fd_, static_cast<off_t>(bytes)) != 0) {
      fail("cannot size to " + mib(bytes) + ": " + errno_text(errno));
    }
    populate_ = true;
    return;
  }
  int err = ::posix_fallocate(fd_, 0, static_cast<off_t>(bytes));
  if (err == EOPNOTSUPP || err == EINVAL) {
    // A file system that cannot allocate ahead: a sparse file will do; the
    // set-up writes every page before any test runs.
    err = (::ftruncate(fd_, static_cast<off_t>(bytes)) == 0) ? 0 : errno;
  }
  if (err == ENOSPC) {
    struct statvfs fs {};
    const std::string free_text =
        (::statvfs(dir.c_str(), &fs) == 0) ? mib(std::uint64_t{fs.f_bavail} * fs.f_frsize) + " free"
                                            : "free space unknown";
    fail("no room for " + mib(bytes) + " in " + dir + " (" + free_text +
         "); pass a smaller region or another directory");
  }
  if (err != 0) fail("cannot size to " + mib(bytes) + ": " + errno_text(err));
}

void Region::map_file(const std::string& granularity) {
  // libpmem2 reads the variable when it maps; the driver forces the
  // indexes' pools the same way, so both see the same granularity.
  ScopedEnv force(kForceEnv, granularity);
  if (pmem2_source_from_fd(&source_, fd_) != 0) fail("libpmem2 rejects the file: " + pmem2_text());
  if (pmem2_config_new(&config_) != 0) fail("libpmem2 config: " + pmem2_text());
  // Page, the weakest, so that any file maps; the forced value decides.
  if (pmem2_config_set_required_store_granularity(config_, PMEM2_GRANULARITY_PAGE) != 0) {
    fail("libpmem2 granularity: " + pmem2_text());
  }
  if (pmem2_map_new(&map_, config_, source_) != 0) {
    fail("cannot map with granularity " + granularity + ": " + pmem2_text());
  }
  base_ = static_cast<std::byte*>(pmem2_map_get_address(map_));
  size_ = pmem2_map_get_size(map_);
  // As a pool's mapping (media/region.cc): huge pages where the file system
  // allows them. Advice only; a refusal changes nothing measured here
  // except the page size, which the result reports.
  (void)::madvise(base_, size_, MADV_HUGEPAGE);
  if (populate_) {
#ifndef MADV_POPULATE_WRITE
    constexpr int MADV_POPULATE_WRITE = 23;  // Linux 5.14 and later
#endif
    if (::madvise(base_, size_, MADV_POPULATE_WRITE) != 0) {
      const int err = errno;
      if (err != EINVAL) {
        fail("cannot allocate " + mib(size_) + ": " + errno_text(err) +
             " (the file system is full? pass a smaller region or another directory)");
      }
      // An older kernel: allocate ahead as on any other file system.
      if (const int e = ::posix_fallocate(fd_, 0, static_cast<off_t>(size_)); e != 0) {
        fail("cannot allocate " + mib(size_) + ": " + errno_text(e));
      }
    }
  }
  granularity_ = granularity_name(pmem2_map_get_store_granularity(map_));
  description_ = "file " + path_;
  persist_ = pmem2_get_persist_fn(map_);
  memset_ = pmem2_get_memset_fn(map_);
}

void Region::map_anonymous(std::uint64_t bytes) {
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    throw std::runtime_error("ceilings: anonymous region of " + mib(bytes) +
                             ": cannot map: " + errno_text(errno) + " (pass a smaller region)");
  }
  anon_ = p;
  base_ = static_cast<std::byte*>(p);
  size_ = bytes;
  granularity_ = "none";
  description_ = "anonymous DRAM";
}

// ---------------------------------------------------------------------------
// Set-up.

// Lays the chase ring (see the file comment) and returns the offset of each
// thread's first line.
std::vector<std::uint64_t> lay_chase_ring(const Region& region, unsigned threads) {
  const std::uint64_t lines = region.size() / kLine;
  const std::uint64_t chased = std::min(lines, kMaxChasedLines);
  const std::uint64_t group = lines / chased;

  Random rng(kSeed);
  std::vector<std::uint64_t> ring(chased);
  for (std::uint64_t g = 0; g < chased; ++g) ring[g] = g * group + rng.below(group);
  for (std::uint64_t i = chased - 1; i > 0; --i) std::swap(ring[i], ring[rng.below(i + 1)]);

  for (std::uint64_t i = 0; i < chased; ++i) {
    const std::uint64_t next = ring[(i + 1) % chased];
    store_word(region.base() + ring[i] * kLine, next * kLine);
  }
  std::vector<std::uint64_t> starts(threads);
  for (unsigned t = 0; t < threads; ++t) starts[t] = ring[chased * t / threads] * kLine;
  return starts;
}

// Faults in every page, lays the ring, and makes it all durable.
std::vector<std::uint64_t> prepare(const Region& region, unsigned threads) {
  std::memset(region.base(), 0, region.size());
  std::vector<std::uint64_t> starts = lay_chase_ring(region, threads);
  // The set-up's dirty lines (or pages) are written back now, not during
  // the tests that follow.
  if (region.durable()) region.persist_fn()(region.base(), region.size());
  return starts;
}

// The share of [base, base + size) mapped with huge pages, from the
// mapping's entry in /proc/self/smaps (0 when it cannot be read).
double huge_page_fraction(const std::byte* base, std::uint64_t size) {
  std::ifstream smaps("/proc/self/smaps");
  const auto start = reinterpret_cast<std::uintptr_t>(base);
  std::string line;
  bool ours = false;
  std::uint64_t huge_kib = 0;
  while (std::getline(smaps, line)) {
    // A mapping's header: "7f12...-7f13... rw-s 00000000 00:1a 123 /path".
    const std::size_t dash = line.find('-');
    if (dash != std::string::npos && dash > 0 &&
        line.find_first_not_of("0123456789abcdef") == dash) {
      if (ours) break;  // the next mapping: ours has been read
      ours = std::stoull(line.substr(0, dash), nullptr, 16) == start;
      continue;
    }
    if (!ours) continue;
    for (const char* field : {"ShmemPmdMapped:", "FilePmdMapped:", "AnonHugePages:"}) {
      if (line.rfind(field, 0) == 0) {
        std::istringstream value(line.substr(std::strlen(field)));
        std::uint64_t kib = 0;
        value >> kib;
        huge_kib += kib;
      }
    }
  }
  if (size == 0) return 0;
  return std::min(1.0, static_cast<double>(huge_kib) * 1024 / static_cast<double>(size));
}

std::string page_size_text(double huge_fraction) {
  if (huge_fraction >= 0.995) return "2 MiB";
  if (huge_fraction <= 0.005) return "4 KiB";
  return "2 MiB on " + std::to_string(static_cast<int>(huge_fraction * 100 + 0.5)) +
         "% of the region, else 4 KiB";
}

// ---------------------------------------------------------------------------
// Timing.

// Tells a measuring loop when its time is up; see "Clock reads" above.
class TimeBox {
 public:
  explicit TimeBox(double seconds)
      : last_(Clock::now()),
        end_(last_ + std::chrono::duration_cast<Clock::duration>(
                         std::chrono::duration<double>(seconds))) {}

  // Call after each operation (or batch); true once the time is up.
  bool done() {
    if (--until_check_ > 0) return false;
    return check();
  }

 private:
  bool check() {
    const Clock::time_point now = Clock::now();
    if (now >= end_) return true;
    const Clock::duration since = now - last_;
    if (since < kClockInterval && stride_ < (1u << 20)) {
      stride_ *= 2;
    } else if (since > 8 * kClockInterval && stride_ > 1) {
      stride_ /= 2;
    }
    last_ = now;
    until_check_ = stride_;
    return false;
  }

  Clock::time_point last_;
  Clock::time_point end_;
  std::uint64_t stride_ = 1;
  std::uint64_t until_check_ = 1;
};

// Runs per_thread(t, box) on `threads` threads released together, and
// returns the sum of what they return (operations or bytes) per second of
// wall time from the release to the last thread's end.
template <typename PerThread>
double rate_on_threads(unsigned threads, double seconds, PerThread per_thread) {
  std::latch release(threads + 1);
  std::atomic<bool> abandoned{false};
  std::vector<std::uint64_t> counts(threads, 0);
  std::vector<std::thread> workers;
  workers.reserve(threads);
  try {
    for (unsigned t = 0; t < threads; ++t) {
      workers.emplace_back([&, t] {
        release.arrive_and_wait();
        if (abandoned.load()) return;
        TimeBox box(seconds);
        counts[t] = per_thread(t, box);
      });
    }
  } catch (const std::exception& e) {
    // Let the threads already started go (they see `abandoned`), then report.
    abandoned.store(true);
    release.count_down(static_cast<std::ptrdiff_t>(threads + 1 - workers.size()));
    for (std::thread& w : workers) w.join();
    throw std::runtime_error("ceilings: cannot start thread " +
                             std::to_string(workers.size() + 1) + " of " +
                             std::to_string(threads) + ": " + e.what() + " (use fewer threads)");
  }
  release.arrive_and_wait();
  const Clock::time_point start = Clock::now();
  for (std::thread& w : workers) w.join();
  const std::chrono::duration<double> wall = Clock::now() - start;

  std::uint64_t total = 0;
  for (std::uint64_t c : counts) total += c;
  return static_cast<double>(total) / wall.count();
}

// Thread t's share of the region for the tests that split it: [begin, end),
// whole pages.
struct Slice {
  std::uint64_t begin;
  std::uint64_t end;
};

Slice slice_of(const Region& region, unsigned t, unsigned threads) {
  const std::uint64_t size = region.size() / threads / 4096 * 4096;
  return {t * size, (t + 1) * size};
}

// ---------------------------------------------------------------------------
// The tests, each the body of one thread; each returns what it counted.

std::uint64_t dependent_reads(const Region& region, std::uint64_t start, TimeBox& box) {
  const std::byte* base = region.base();
  std::uint64_t off = start;
  std::uint64_t reads = 0;
  do {
    for (unsigned i = 0; i < kReadBatch; ++i) off = load_word(base + off);
    reads += kReadBatch;
  } while (!box.done());
  keep(off);
  return reads;
}

std::uint64_t independent_reads(const Region& region, unsigned t, TimeBox& box) {
  const std::byte* base = region.base();
  const std::uint64_t lines = region.size() / kLine;
  Random rng(kSeed + 1 + t);
  std::uint64_t folded = 0;
  std::uint64_t reads = 0;
  do {
    std::uint64_t offsets[kReadBatch];
    for (std::uint64_t& o : offsets) o = rng.below(lines) * kLine;
    for (std::uint64_t o : offsets) folded ^= load_word(base + o);
    reads += kReadBatch;
  } while (!box.done());
  keep(folded);
  return reads;
}

std::uint64_t sequential_read(const Region& region, Slice slice, TimeBox& box) {
  const std::byte* base = region.base();
  std::uint64_t sum = 0;
  std::uint64_t bytes = 0;
  std::uint64_t pos = slice.begin;
  do {
    const std::uint64_t end = std::min(pos + kSeqReadChunk, slice.end);
    for (std::uint64_t p = pos; p < end; p += sizeof(std::uint64_t)) sum += load_word(base + p);
    bytes += end - pos;
    pos = (end == slice.end) ? slice.begin : end;
  } while (!box.done());
  keep(sum);
  return bytes;
}

// `persist` makes the 8 stored bytes durable (or does nothing, for DRAM).
template <typename Persist>
std::uint64_t persists(const Region& region, Slice slice, unsigned t, TimeBox& box,
                       Persist persist) {
  std::byte* base = region.base() + slice.begin;
  const std::uint64_t words = (slice.end - slice.begin) / sizeof(std::uint64_t);
  Random rng(kSeed + 1000 + t);
  std::uint64_t done = 0;
  do {
    std::byte* p = base + rng.below(words) * sizeof(std::uint64_t);
    store_word(p, done);
    persist(p, sizeof(std::uint64_t));
    ++done;
  } while (!box.done());
  return done;
}

// Non-temporal stores: 8 bytes (movnti) or 16 (movntdq) at a random aligned
// place of the slice, each followed by sfence, which returns once the store
// has left the core's write-combining buffer for the memory controller (on
// ADR persistent memory: durable). Returns the stores made.
#if defined(__x86_64__)
template <unsigned kBytes>
std::uint64_t nt_persists(const Region& region, Slice slice, unsigned t, TimeBox& box) {
  static_assert(kBytes == 8 || kBytes == 16);
  std::byte* base = region.base() + slice.begin;
  const std::uint64_t units = (slice.end - slice.begin) / kBytes;
  Random rng(kSeed + 2000 + t);
  std::uint64_t done = 0;
  do {
    std::byte* p = base + rng.below(units) * kBytes;
    if constexpr (kBytes == 8) {
      _mm_stream_si64(reinterpret_cast<long long*>(p), static_cast<long long>(done));
    } else {
      _mm_stream_si128(reinterpret_cast<__m128i*>(p),
                       _mm_set_epi64x(static_cast<long long>(done), static_cast<long long>(t)));
    }
    _mm_sfence();
    ++done;
  } while (!box.done());
  return done;
}
#endif

// `write` writes [p, p+n) and makes it durable (or just writes, for DRAM).
template <typename Write>
std::uint64_t sequential_write(const Region& region, Slice slice, TimeBox& box, Write write) {
  std::byte* base = region.base();
  std::uint64_t bytes = 0;
  std::uint64_t pos = slice.begin;
  int value = 1;
  do {
    const std::uint64_t end = std::min(pos + kSeqWriteChunk, slice.end);
    write(base + pos, value, end - pos);
    bytes += end - pos;
    if (end == slice.end) {
      pos = slice.begin;
      value = (value + 1) & 0xff;  // each pass writes bytes that differ from the last
    } else {
      pos = end;
    }
  } while (!box.done());
  return bytes;
}

// ---------------------------------------------------------------------------
// The seven measurements over one prepared region.

void measure_reads(const Region& region, const std::vector<std::uint64_t>& starts, unsigned threads,
                   double seconds, Ceilings* out) {
  out->dependent_reads_per_s = rate_on_threads(threads, seconds, [&](unsigned t, TimeBox& box) {
    return dependent_reads(region, starts[t], box);
  });
  out->independent_reads_per_s = rate_on_threads(
      threads, seconds, [&](unsigned t, TimeBox& box) { return independent_reads(region, t, box); });
  out->seq_read_bytes_per_s = rate_on_threads(threads, seconds, [&](unsigned t, TimeBox& box) {
    return sequential_read(region, slice_of(region, t, threads), box);
  });
}

void measure_writes(const Region& region, unsigned threads, double seconds, Ceilings* out) {
  const pmem2_persist_fn persist_fn = region.persist_fn();
  const pmem2_memset_fn memset_fn = region.memset_fn();
  const bool durable = region.durable();

  out->persists_per_s = rate_on_threads(threads, seconds, [&](unsigned t, TimeBox& box) {
    const Slice slice = slice_of(region, t, threads);
    if (!durable) return persists(region, slice, t, box, [](const void*, std::size_t) {});
    return persists(region, slice, t, box, persist_fn);
  });
#if defined(__x86_64__)
  // A non-temporal store is durable after the fence only where the cache is
  // the last volatile stage: byte and cache_line granularity.
  if (region.granularity() == "byte" || region.granularity() == "cache_line") {
    out->nt_persists_per_s = rate_on_threads(threads, seconds, [&](unsigned t, TimeBox& box) {
      return nt_persists<8>(region, slice_of(region, t, threads), t, box);
    });
    out->nt16_persists_per_s = rate_on_threads(threads, seconds, [&](unsigned t, TimeBox& box) {
      return nt_persists<16>(region, slice_of(region, t, threads), t, box);
    });
  }
#endif
  out->seq_write_bytes_per_s = rate_on_threads(threads, seconds, [&](unsigned t, TimeBox& box) {
    const Slice slice = slice_of(region, t, threads);
    if (!durable) {
      return sequential_write(region, slice, box,
                              [](void* p, int v, std::size_t n) { std::memset(p, v, n); });
    }
    // Flags 0: libpmem2 picks the stores and ends with the drain that makes
    // the chunk durable before the call returns.
    return sequential_write(region, slice, box, [&](void* p, int v, std::size_t n) {
      memset_fn(p, v, n, 0);
    });
  });
}

}  // namespace

Ceilings measure_ceilings(const CeilingConfig& config) {
  const std::uint64_t bytes = checked_region_bytes(config);
  const std::unique_ptr<Region> region = Region::create(config, bytes);
  const std::vector<std::uint64_t> starts = prepare(*region, config.threads);

  Ceilings c;
  c.threads = config.threads;
  c.granularity = region->granularity();
  c.region = region->description();
  c.region_bytes = region->size();
  c.huge_page_fraction = huge_page_fraction(region->base(), region->size());
  c.page_size = page_size_text(c.huge_page_fraction);
  measure_reads(*region, starts, config.threads, config.seconds_per_test, &c);
  measure_writes(*region, config.threads, config.seconds_per_test, &c);
  return c;
}

}  // namespace pmhash::bench
