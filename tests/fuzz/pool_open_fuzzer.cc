// tests/fuzz/pool_open_fuzzer.cc - libFuzzer target: opening a pool whose
// header and metadata are damaged.
//
// Property: for any damage, Store::open either returns an error and leaves
// the file unchanged, or gives a store on which check() runs; when check()
// passes, get, for_each, insert, update, remove and close work, agree with
// each other, check() still passes after them, and the pool opens again.
// Never a crash, a hang or an out-of-bounds access (the fuzz build runs
// under ASan and UBSan; libFuzzer's -timeout catches hangs).
//
// A pool is megabytes, mostly zeros, so the input is not a pool but a list
// of patches to one of a few valid pool images that LLVMFuzzerInitialize
// builds once per process (deterministically: the same input always damages
// the same bytes):
//
//   image 0  "clean"      300 keys (values of 1 byte to just over 256 KiB),
//                         some updated and removed, then closed
//   image 1  "crashed"    the same, copied while the store was still open:
//                         unclean, item count not saved, retired blocks in
//                         the heap logs
//   image 2  "expanding"  image 1 plus a level linked above the first and
//                         named by the context, as an expansion leaves it
//                         right before its first bucket moves (so open
//                         resumes a resize)
//
// Input format (a truncated last patch is ignored):
//
//   byte 0     bits 0-1  image (mod 3)
//              bit 2     recompute the pool header checksum after patching,
//                        so that the fields it guards get fuzzed too
//              bit 3     open without tag filters
//   patches    byte      bits 0-3 region (mod kRegionCount, see Region)
//                        bits 4-5 operation: 0 overwrite, 1 xor, 2 add the
//                        data (little-endian, sign-extended) to the aligned
//                        8-byte word, 3 overwrite
//              3 bytes   offset in the region, little-endian, mod its size
//              byte      data length - 1 (mod 8)
//              n bytes   data
//
// Regions put the patches where open and recovery read: the pool header and
// shutdown state, the clevel root, the heap header, the first thread logs,
// the chunk table, the slab bitmaps, the level headers, the level buckets,
// the items, and anywhere in the pool.
//
// The patched image is written to /dev/shm/pmhash-fuzz-<pid>.pool
// (PMEM2_FORCE_GRANULARITY=cache_line unless set), which is removed at exit
// (scripts/fuzz.sh also removes it after a crash).
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>
#include <xxhash.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "engine/clevel/layout.h"
#include "heap/layout.h"
#include "pmhash/store.h"
#include "pool/pool.h"

namespace {

using pmhash::Options;
using pmhash::Status;
using pmhash::Store;
namespace clevel = pmhash::engine::clevel;
namespace heap_layout = pmhash::heap::layout;
namespace pool = pmhash::pool;

constexpr std::uint64_t kPoolSize = pool::kMinPoolSize;
constexpr unsigned kKeys = 300;

[[noreturn]] void fail(const std::string& what) {
  std::fprintf(stderr, "pool_open_fuzzer: %s\n", what.c_str());
  std::abort();
}

void expect_ok(const Status& s, const std::string& what) {
  if (!s.ok()) fail(what + ": " + s.to_string());
}

std::string key_of(unsigned i) { return "key-" + std::to_string(i); }

// Mostly small values; two that need runs of one and of two chunks.
std::string value_of(unsigned i, unsigned version) {
  std::size_t n = 1 + (i * 37 + version * 11) % 60;
  if (i == 17) n = pmhash::heap::kMaxSmallSize + 1;
  if (i == 42) n = pmhash::heap::kChunkSize + 1;
  return std::string(n, static_cast<char>('a' + (i + version) % 26));
}

template <typename T>
T read_at(const std::vector<std::byte>& image, std::uint64_t off) {
  T v;
  std::memcpy(&v, image.data() + off, sizeof(T));
  return v;
}

template <typename T>
void write_at(std::vector<std::byte>* image, std::uint64_t off, const T& v) {
  std::memcpy(image->data() + off, &v, sizeof(T));
}

std::vector<std::byte> read_file(const std::string& path) {
  std::vector<std::byte> bytes(kPoolSize);
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0 || ::pread(fd, bytes.data(), bytes.size(), 0) != static_cast<ssize_t>(bytes.size())) {
    fail("cannot read " + path + ": " + std::strerror(errno));
  }
  ::close(fd);
  return bytes;
}

// The pool file of the inputs, mapped here too. Between inputs only the
// pages that differ from the next image are copied: an input's store changes
// a few pages, and tmpfs keeps the rest from one input to the next.
class PoolFile {
 public:
  explicit PoolFile(std::string path) : path_(std::move(path)) {
    const int fd = ::open(path_.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0 || ::ftruncate(fd, static_cast<off_t>(kPoolSize)) != 0) {
      fail("cannot create " + path_ + ": " + std::strerror(errno));
    }
    void* p = ::mmap(nullptr, kPoolSize, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    ::close(fd);
    if (p == MAP_FAILED) fail("cannot map " + path_ + ": " + std::strerror(errno));
    map_ = static_cast<std::byte*>(p);
  }
  ~PoolFile() {
    ::munmap(map_, kPoolSize);
    ::unlink(path_.c_str());
  }

  const std::string& path() const { return path_; }

  const std::byte* data() const { return map_; }

  bool holds(const std::vector<std::byte>& image) const {
    return std::memcmp(map_, image.data(), kPoolSize) == 0;
  }

  void write(const std::vector<std::byte>& image) {
    constexpr std::size_t kPage = 4096;
    for (std::size_t off = 0; off < kPoolSize; off += kPage) {
      if (std::memcmp(map_ + off, image.data() + off, kPage) != 0) {
        std::memcpy(map_ + off, image.data() + off, kPage);
      }
    }
  }

 private:
  std::string path_;
  std::byte* map_ = nullptr;
};

void fix_checksum(std::vector<std::byte>* image) {
  write_at(image, offsetof(pool::PoolHeader, checksum),
           XXH3_64bits(image->data(), offsetof(pool::PoolHeader, checksum)));
}

// The uuid and creation time are random; fixed values make every image, and
// so every input's effect, the same in every process.
void normalise_header(std::vector<std::byte>* image) {
  std::memset(image->data() + offsetof(pool::PoolHeader, uuid), 0x5a, 16);
  write_at<std::uint64_t>(image, offsetof(pool::PoolHeader, create_time_ns), 1);
  fix_checksum(image);
}

// Offsets of the clevel root's fields in the pool.
constexpr std::uint64_t root_field(std::size_t offset_in_root) {
  return pool::kRootOffset + offset_in_root;
}
constexpr std::uint64_t kContextAt = root_field(offsetof(clevel::Root, context));
constexpr std::uint64_t kLevelsAt = root_field(offsetof(clevel::Root, levels));

std::uint64_t ring_entry(const std::vector<std::byte>& image, unsigned i) {
  return read_at<std::uint64_t>(image, kLevelsAt + 8 * i);
}

// Whether no resize runs and the last one has finished, in the pool mapped
// at `pool`, which a store may be changing: the context says not resizing
// and the ring holds exactly its levels (the rehash thread clears a dropped
// level's entry after the context stops naming it).
bool resize_settled(const std::byte* pool) {
  auto word = [&](std::uint64_t off) {
    return __atomic_load_n(reinterpret_cast<const std::uint64_t*>(pool + off), __ATOMIC_ACQUIRE);
  };
  const clevel::Ctx c{word(kContextAt)};
  unsigned entries = 0;
  for (unsigned i = 0; i < clevel::kRingSize; ++i) entries += word(kLevelsAt + 8 * i) != 0;
  return !c.resizing() && !(c.w & clevel::kCtxDirty) && entries == c.levels();
}

// Maps a pool file read-only (to watch a store at work).
const std::byte* map_readonly(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail("cannot open " + path + ": " + std::strerror(errno));
  void* p = ::mmap(nullptr, kPoolSize, PROT_READ, MAP_SHARED, fd, 0);
  ::close(fd);
  if (p == MAP_FAILED) fail("cannot map " + path + ": " + std::strerror(errno));
  return static_cast<const std::byte*>(p);
}

// Image 2 from image 1: what expand() leaves once its context CAS is durable
// and before the rehash thread moves a bucket. The new level is a run of one
// free chunk (the heap places levels of up to 64 KiB in slabs, but a run is
// as valid a block), zeroed, with its header; the ring names it; the context
// names it as the first level and says resizing.
std::vector<std::byte> make_expanding(std::vector<std::byte> image) {
  const auto h = read_at<heap_layout::HeapHeader>(image, pool::kHeapOffset);
  const clevel::Ctx c{read_at<std::uint64_t>(image, kContextAt)};
  const std::uint64_t first = ring_entry(image, c.first() % clevel::kRingSize);
  const auto first_header = read_at<clevel::LevelHeader>(image, first);
  const unsigned log2 = first_header.log2 + 1;
  if (clevel::level_bytes(log2) > pmhash::heap::kChunkSize) fail("first level too large");
  std::uint64_t chunk = h.chunk_count;
  for (std::uint64_t i = h.chunk_count; i-- > 0;) {
    if (read_at<std::uint64_t>(image, h.table_offset + 8 * i) == 0) {
      chunk = i;
      break;
    }
  }
  if (chunk == h.chunk_count) fail("no free chunk for the expanding image");
  const std::uint64_t off = h.chunks_offset + chunk * pmhash::heap::kChunkSize;
  write_at(&image, h.table_offset + 8 * chunk, heap_layout::head_entry(1));
  std::memset(image.data() + off, 0, clevel::level_bytes(log2));
  clevel::LevelHeader level{};
  level.magic = clevel::kLevelMagic;
  level.log2 = log2;
  level.id = static_cast<std::uint16_t>(c.first() + 1);
  write_at(&image, off, level);
  write_at(&image, kLevelsAt + 8 * (level.id % clevel::kRingSize), off);
  write_at(&image, kContextAt, c.next(level.id, c.last(), /*resizing=*/true, false).w);
  return image;
}

struct Range {
  std::uint64_t begin;
  std::uint64_t size;
};

enum Region : unsigned {
  kPoolHeader,
  kShutdownState,
  kRoot,
  kHeapHeader,
  kHeapLogs,
  kChunkTable,
  kSlabBitmaps,
  kLevelHeaders,
  kLevelBuckets,
  kItems,
  kAnywhere,
  kRegionCount,
};

struct Image {
  std::vector<std::byte> bytes;
  std::vector<Range> regions[kRegionCount];
};

// Where an image keeps its metadata, read from its own bytes.
void find_regions(Image* im) {
  const std::vector<std::byte>& b = im->bytes;
  auto& r = im->regions;
  r[kPoolHeader] = {{0, sizeof(pool::PoolHeader)}};
  r[kShutdownState] = {{sizeof(pool::PoolHeader), 64}};
  r[kRoot] = {{pool::kRootOffset, sizeof(clevel::Root)}};
  const auto h = read_at<heap_layout::HeapHeader>(b, pool::kHeapOffset);
  r[kHeapHeader] = {{pool::kHeapOffset, sizeof(heap_layout::HeapHeader)}};
  // The store's main thread and the rehash thread use the first slots.
  r[kHeapLogs] = {{h.logs_offset, 4 * heap_layout::kLogSize}};
  r[kChunkTable] = {{h.table_offset, h.chunk_count * heap_layout::kEntrySize}};
  for (std::uint64_t i = 0; i < h.chunk_count; ++i) {
    const std::uint64_t e = read_at<std::uint64_t>(b, h.table_offset + 8 * i);
    if (heap_layout::entry_kind(e) != heap_layout::kChunkSlab) continue;
    const heap_layout::SizeClass& k = heap_layout::kSizeClasses[heap_layout::entry_class(e)];
    const std::uint64_t chunk = h.chunks_offset + i * pmhash::heap::kChunkSize;
    r[kSlabBitmaps].push_back({chunk, k.first});
    // Slabs of item sizes (levels are 576 bytes and more here).
    if (k.size < 512) r[kItems].push_back({chunk + k.first, std::uint64_t{k.blocks} * k.size});
  }
  for (unsigned i = 0; i < clevel::kRingSize; ++i) {
    const std::uint64_t off = ring_entry(b, i);
    if (off == 0) continue;
    const auto l = read_at<clevel::LevelHeader>(b, off);
    r[kLevelHeaders].push_back({off, sizeof(clevel::LevelHeader)});
    r[kLevelBuckets].push_back(
        {off + sizeof(clevel::LevelHeader), sizeof(clevel::Bucket) << l.log2});
  }
  r[kAnywhere] = {{0, kPoolSize}};
  for (unsigned k = 0; k < kRegionCount; ++k) {
    if (r[k].empty()) fail("image without region " + std::to_string(k));
  }
}

// Maps an offset into the concatenation of a region's ranges.
std::uint64_t locate(const std::vector<Range>& ranges, std::uint64_t x) {
  std::uint64_t total = 0;
  for (const Range& rg : ranges) total += rg.size;
  x %= total;
  for (const Range& rg : ranges) {
    if (x < rg.size) return rg.begin + x;
    x -= rg.size;
  }
  return 0;
}

std::vector<Image> g_images;
PoolFile* g_file = nullptr;

void remove_file() { delete g_file; }

void build_images() {
  const std::string path = "/dev/shm/pmhash-fuzz-" + std::to_string(::getpid()) + "-base.pool";
  ::unlink(path.c_str());
  Options o;
  o.pool_size = kPoolSize;
  o.clevel_initial_level_log2 = 3;
  o.clevel_min_level_log2 = 2;
  std::unique_ptr<Store> store;
  expect_ok(Store::create(path, o, &store), "create the base pool");
  // One operation at a time, each after the resize it started: slot
  // placement and allocation are then the same in every process.
  const std::byte* watch = map_readonly(path);
  auto wait_settled = [&] {
    while (!resize_settled(watch)) std::this_thread::yield();
  };
  for (unsigned i = 0; i < kKeys; ++i) {
    expect_ok(store->insert(key_of(i), value_of(i, 0)), "insert " + key_of(i));
    wait_settled();
  }
  for (unsigned i = 0; i < kKeys; i += 7) {
    expect_ok(store->update(key_of(i), value_of(i, 1)), "update " + key_of(i));
  }
  for (unsigned i = 1; i < kKeys; i += 13) {
    if (i != 17 && i != 42) expect_ok(store->remove(key_of(i)), "remove " + key_of(i));
  }
  wait_settled();
  ::munmap(const_cast<std::byte*>(watch), kPoolSize);
  std::vector<std::byte> crashed = read_file(path);
  expect_ok(store->close(), "close the base pool");
  store.reset();
  std::vector<std::byte> clean = read_file(path);
  ::unlink(path.c_str());
  std::vector<std::byte> expanding = make_expanding(crashed);
  for (std::vector<std::byte>* image : {&clean, &crashed, &expanding}) {
    normalise_header(image);
    Image im;
    im.bytes = std::move(*image);
    find_regions(&im);
    g_images.push_back(std::move(im));
  }
}

void apply_patches(const std::uint8_t* data, std::size_t size, const Image& im,
                   std::vector<std::byte>* image) {
  std::vector<std::byte>& b = *image;
  std::size_t i = 0;
  while (i + 5 <= size) {
    const unsigned sel = data[i];
    const std::uint64_t x = data[i + 1] | (std::uint64_t{data[i + 2]} << 8) |
                            (std::uint64_t{data[i + 3]} << 16);
    const std::size_t n = (data[i + 4] & 7) + 1;
    i += 5;
    if (i + n > size) break;
    const std::uint8_t* bytes = data + i;
    i += n;
    std::uint64_t off = locate(im.regions[(sel & 15) % kRegionCount], x);
    switch ((sel >> 4) & 3) {
      case 1:
        for (std::size_t k = 0; k < n && off + k < b.size(); ++k) {
          b[off + k] ^= static_cast<std::byte>(bytes[k]);
        }
        break;
      case 2: {
        off &= ~std::uint64_t{7};
        std::uint64_t delta = 0;
        std::memcpy(&delta, bytes, n);
        if (n < 8 && (bytes[n - 1] & 0x80)) delta |= ~std::uint64_t{0} << (8 * n);
        write_at(&b, off, read_at<std::uint64_t>(b, off) + delta);
        break;
      }
      default:
        std::memcpy(b.data() + off, bytes, std::min<std::uint64_t>(n, b.size() - off));
        break;
    }
  }
}

// What a store that passed check() must do: reads and writes work. When no
// resize runs in the background (`settled`), also: every visited key reads
// back with the value visited, for_each agrees with size(), and check()
// still passes after the writes. (A resize resumed from a damaged but
// plausible progress entry can drop a level it has not emptied after
// check() passed; check() finds the lost items once the resize is over,
// which is why the caller waits for that first.)
void exercise(Store& store, bool settled) {
  std::map<std::string, std::string> seen;
  expect_ok(store.for_each([&](std::string_view k, std::string_view v) {
    if (!seen.emplace(k, v).second) fail("for_each visited a key twice");
    return true;
  }),
            "for_each");
  if (settled && seen.size() != store.size()) {
    fail("for_each visited " + std::to_string(seen.size()) + " keys, size() is " +
         std::to_string(store.size()));
  }
  unsigned probes = 0;
  for (const auto& [k, v] : seen) {
    if (probes++ == 16) break;
    std::string got;
    const Status s = store.get(k, &got);
    if (settled) {
      expect_ok(s, "get of a visited key");
      if (got != v) fail("get disagrees with for_each");
    } else if (!s.ok() && !s.is_not_found()) {
      fail("get: " + s.to_string());
    }
  }
  for (unsigned i = 0; i < 4; ++i) {
    std::string got;
    const Status s = store.get(key_of(i * 61), &got);
    if (!s.ok() && !s.is_not_found()) fail("get: " + s.to_string());
  }
  // Damage may have made a key into this one (the fuzzer is good at
  // matching compared strings).
  const std::string fresh = "fuzz-new-key";
  const Status ins = store.insert(fresh, "fuzz-new-value");
  if (!ins.ok() && !ins.is_no_space() && !(ins.is_already_exists() && seen.contains(fresh))) {
    fail("insert: " + ins.to_string());
  }
  if (ins.ok()) {
    std::string got;
    expect_ok(store.get(fresh, &got), "get after insert");
    if (got != "fuzz-new-value") fail("insert did not store its value");
  }
  if (!seen.empty()) {
    const std::string& k = seen.begin()->first;
    const Status up = store.update(k, "fuzz-updated");
    if (!up.ok() && !up.is_no_space() && !(up.is_not_found() && !settled)) {
      fail("update: " + up.to_string());
    }
    const std::string& last = seen.rbegin()->first;
    const Status rm = store.remove(last);
    if (last != k && !rm.ok() && !(rm.is_not_found() && !settled)) {
      fail("remove of a visited key: " + rm.to_string());
    }
  }
  if (settled) expect_ok(store.check(), "check after operations on a store that passed it");
}

// Waits (boundedly) for a resize that open resumed to finish, watching the
// pool's bytes: Store::stats() would scan a table check() has not yet
// validated. False if it still runs after a second (it takes milliseconds
// here, unless damage keeps it from finishing).
bool wait_for_resize(const std::byte* pool) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(1);
  while (!resize_settled(pool)) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::yield();
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  // The fast path of the tests and benchmarks (clwb + sfence), unless the
  // caller chose another.
  ::setenv("PMEM2_FORCE_GRANULARITY", "cache_line", 0);
  build_images();
  g_file = new PoolFile("/dev/shm/pmhash-fuzz-" + std::to_string(::getpid()) + ".pool");
  std::atexit(remove_file);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const unsigned mode = size > 0 ? data[0] : 0;
  const Image& base = g_images[(mode & 3) % g_images.size()];
  // One buffer for every input: no fresh 4 MiB allocation (and page faults)
  // per run.
  static std::vector<std::byte> image(kPoolSize);
  std::memcpy(image.data(), base.bytes.data(), kPoolSize);
  if (size > 0) apply_patches(data + 1, size - 1, base, &image);
  if (mode & 4) fix_checksum(&image);
  g_file->write(image);
  const std::string& path = g_file->path();

  Options o;
  o.engine = "";
  o.clevel_tag_filter = (mode & 8) == 0;
  std::unique_ptr<Store> store;
  const Status s = Store::open(path, o, &store);
  if (s.ok()) {
    if (store == nullptr) fail("open returned OK without a store");
    const bool settled = wait_for_resize(g_file->data());
    if (store->check().ok()) {
      exercise(*store, settled);
      expect_ok(store->close(), "close");
      store.reset();
      // Closed cleanly: it opens again, and after a settled run passes.
      expect_ok(Store::open(path, o, &store), "reopen after a clean close");
      const Status c = store->check();
      if (settled && !c.ok()) fail("check after reopening: " + c.to_string());
    }
    (void)store->close();
  } else {
    if (store != nullptr) fail("open failed (" + s.to_string() + ") but returned a store");
    // Store::open: a rejected pool is left byte-for-byte unchanged (an
    // engine that cannot start its threads, an IOError, may have recovered).
    if (!s.is_io_error() && !g_file->holds(image)) {
      fail("open failed (" + s.to_string() + ") and changed the file");
    }
  }
  return 0;
}
