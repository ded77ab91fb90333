// tests/fuzz/pool_open_fuzzer.cc - libFuzzer target: opening a pool whose
// header and metadata are damaged.
//
// Property: for any damage, Store::open either returns an error and leaves
// the file unchanged, or gives a store on which check() runs and on which,
// whatever check() says, stats() returns and for_each, Store::salvage and
// get (with a value and with none) return OK, NotFound or Corruption (see
// read_damaged()); when check()
// passes, get, for_each, insert, update, remove, a transaction (engines that
// have them), a snapshot read and close work, agree with each other,
// check() still passes after them, and the pool opens again.
// Never a crash, a hang or an out-of-bounds access (the fuzz build runs
// under ASan and UBSan; libFuzzer's -timeout catches hangs).
//
// A pool is megabytes, mostly zeros, so the input is not a pool but a list
// of patches to one of a few valid pool images that LLVMFuzzerInitialize
// builds once per process (deterministically: the same input always damages
// the same bytes), three per engine:
//
//   clevel   300 keys (values of 1 byte to just over 256 KiB)
//     0  "clean"            some keys updated and removed, then closed
//     1  "crashed"          the same, copied while the store was still
//                           open: unclean, item count not saved, retired
//                           blocks in the heap logs
//     2  "expanding"        image 1 plus a level linked above the first and
//                           named by the context, as an expansion leaves it
//                           right before its first bucket moves (so open
//                           resumes a resize)
//   dali     a table of 2^3 buckets at first, Durability::kEpoch
//     3  "dali clean"       300 keys (values of 1 byte to just over 64 KiB)
//                           inserted, updated and removed over epochs that
//                           sync() ends (two at a time), closed; reopened
//                           with epochs of 100 ms for three batches of
//                           writes in three consecutive epochs c, c+1, c+2
//                           (upserts, removes, 210 new keys: the batches
//                           of c+1 and c+2 split buckets), closed: 446
//                           keys in 203 buckets, six segments
//     4  "dali crashed"     image 3 copied in epoch c+2, before the close:
//                           every batch's records are in the file, but
//                           recovery fails c+1 and c+2 and so ignores them
//                           (a bucket last written in c+1 has its valid
//                           head in its in-flight pointer; the shape
//                           reverts to its version of c), notes every
//                           allocated block and sweeps the unreachable
//                           ones in the background
//     5  "dali full failure list"  image 4 recovered (failure list c+1,
//                           c+2) and swept, two synced epochs of writes,
//                           then unsynced writes that split buckets, copied
//                           (a second crash); then its failure list filled
//                           to 999 entries, as ~1000 opens would leave it
//                           that each crashed before its first epoch ended
//                           (see fill_failure_list). Its next open finds no
//                           room for two more entries: it first rewrites
//                           every bucket and the shape to their valid
//                           values (normalize_all), then empties the list
//   nehash   groups of 2^1 buckets under a main directory of 2^1 entries, a
//            constant clock for the expansion-rate rules (the directory's
//            shape is then the same in every process)
//     6  "nehash clean"     300 keys (values of 1 byte to just over 256 KiB:
//                           pairs of at most 8 bytes sit in their slots,
//                           the others in items), some updated (across the
//                           inline limit too: slot updates through the op
//                           log) and removed, then closed: a dozen groups
//     7  "nehash crashed"   the same, copied while the store was still open:
//                           unclean, item count not saved, retired items in
//                           the heap logs
//     8  "nehash mid-split" copied in the middle of the 8th split, after
//                           its commit (the split record in op log 0, the
//                           new group and both table words durable, the
//                           old group's moved slots not yet cleared), with
//                           a committed slot update of an inline key added
//                           to op log 1: recovery finishes the split and
//                           replays the update
//   pmeh     4 KiB segments in 2^1 zones, 2-splits (k = 1); opened with one
//            owner thread (bit 3: two, naming the engine, k = 3)
//     9  "pmeh clean"       600 keys (values of 1 byte to just over 256 KiB:
//                           pairs of at most 8 bytes inline), some updated
//                           (across the inline limit too: slot updates
//                           through the op log) and removed, then closed:
//                           four segments (a 2-split in each zone), two
//                           directories
//     10 "pmeh crashed"     the same, copied while the store was still open
//                           (owners running, none inside an operation):
//                           unclean, item count not saved, retired items in
//                           the heap logs
//     11 "pmeh mid-split"   copied in the middle of the 2nd split, right
//                           after its record said COMPLETING (children all
//                           moved, no directory entry re-pointed yet), with
//                           a committed slot update of an inline key of
//                           another segment added to op log 1: recovery
//                           re-points the range and replays the update
//
// Every image opens, settles and passes check() and exercise() unpatched;
// LLVMFuzzerInitialize makes sure of it.
//
// Input format (a truncated last patch is ignored):
//
//   byte 0     bits 0-1  image of the engine (mod 3): clean, crashed, and
//                        expanding (clevel) or full failure list (dali)
//              bit 2     recompute the pool header checksum after patching,
//                        so that the fields it guards get fuzzed too
//              bit 3     clevel: open without tag filters; dali: open with
//                        Durability::kEpoch instead of kStrict; nehash: open
//                        naming the engine instead of accepting any
//                        pmeh: two owner threads and k = 3, naming the
//                        engine, instead of one and k = 1
//              bits 4-5  engine: clevel (0), dali (1), nehash (2), pmeh (3)
//   patches    byte      bits 0-3 region (mod kRegionCount, see Region)
//                        bits 4-5 operation: 0 overwrite, 1 xor, 2 add the
//                        data (little-endian, sign-extended) to the aligned
//                        8-byte word, 3 overwrite
//              3 bytes   offset in the region, little-endian, mod its size
//              byte      data length - 1 (mod 8)
//              n bytes   data
//
// Regions put the patches where open and recovery read. Every engine has
// the pool header, the shutdown state, the heap header, the first four
// thread logs, the chunk table, the slab bitmaps and "anywhere in the
// pool"; the other four regions are the engine's own:
//
//   region          clevel                     dali
//   root            clevel::Root               dali::Root, but of its
//                                              failure list only the first
//                                              two entries, the last two in
//                                              use and the two after them
//   level headers   level headers              segment headers
//   level buckets   level buckets              the buckets of each segment
//                                              that the shape's three
//                                              versions reach
//   items           slabs of item sizes        slabs holding no segment
//                   (< 512 bytes)              (records), and the first 64
//                                              bytes of every run (records
//                                              of values over 64 KiB)
//
//   region          nehash
//   root            nehash::Root up to the first four op logs
//   level headers   recovery-table segment headers and the entries in
//                   use, group headers
//   level buckets   each group's bucket directory (slot metas) and buckets
//   items           slabs of item sizes (< 512 bytes), and the first 64
//                   bytes of every run that is no group or segment
//
//   region          pmeh
//   root            pmeh::Root up to the first four op logs (directory
//                   array, count, split records)
//   level headers   each live directory's header and the entries of the
//                   zones it holds, each segment's header (the children of
//                   a split in flight too)
//   level buckets   each segment's buckets
//   items           slabs of item sizes (< 512 bytes), and the first 64
//                   bytes of every run
//
// After a successful open the target waits, boundedly, for background work
// the open started, watching without reading what check() has not yet
// validated, and calls the store settled once it has ended:
//
//   clevel  a resize open resumed (the context and the level ring, read
//           from the pool's bytes; at most 1 s). Damage can keep it from
//           finishing (a plausible but wrong progress entry), so an
//           unsettled store whose check() passes is exercised without the
//           checks that need a quiet table (see exercise()).
//   nehash  nothing: it starts no background work.
//   pmeh    nothing: its owner threads run only the store's own calls.
//   dali    the sweep of the blocks a crash leaked, which an unclean open
//           or a pending sweep starts (Stats::swept; at most 5 s). check()
//           reports leaks only once it has ended, and the sweep frees blocks
//           concurrently with anything else. Its walks are bounded by the
//           heap's size, and on a pool check() accepts they are short, so a
//           sweep still running then is a failure (a hang).
//
// The patched image is written to /dev/shm/pmhash-fuzz-<pid>.pool
// (PMEM2_FORCE_GRANULARITY=cache_line unless set), which is removed at exit
// (scripts/fuzz.sh also removes it after a crash).
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>
#include <xxhash.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "engine/clevel/layout.h"
#include "engine/dali/layout.h"
#include "engine/nehash/directory.h"
#include "engine/nehash/layout.h"
#include "engine/nehash/nehash_index.h"
#include "engine/nehash/nehash_testing.h"
#include "engine/pmeh/layout.h"
#include "heap/heap.h"
#include "media/region.h"
#include "heap/layout.h"
#include "pmhash/store.h"
#include "pool/pool.h"
#include "store/store_testing.h"

namespace {

using pmhash::Durability;
using pmhash::Options;
using pmhash::Status;
using pmhash::Store;
namespace clevel = pmhash::engine::clevel;
namespace dali = pmhash::engine::dali;
namespace nehash = pmhash::engine::nehash;
namespace pmeh = pmhash::engine::pmeh;
namespace heap_layout = pmhash::heap::layout;
namespace pool = pmhash::pool;

constexpr std::uint64_t kPoolSize = pool::kMinPoolSize;
constexpr unsigned kKeys = 300;
constexpr unsigned kImagesPerEngine = 3;

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

void write_file(const std::string& path, const std::vector<std::byte>& bytes) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0 || ::pwrite(fd, bytes.data(), bytes.size(), 0) != static_cast<ssize_t>(bytes.size())) {
    fail("cannot write " + path + ": " + std::strerror(errno));
  }
  ::close(fd);
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

// The pool offset of a field of the engine's root.
constexpr std::uint64_t root_field(std::size_t offset_in_root) {
  return pool::kRootOffset + offset_in_root;
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

// Where the images are built, one after the other.
std::string base_path() {
  return "/dev/shm/pmhash-fuzz-" + std::to_string(::getpid()) + "-base.pool";
}

// ---------------------------------------------------------------------------
// Regions
// ---------------------------------------------------------------------------

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

using Regions = std::array<std::vector<Range>, kRegionCount>;

heap_layout::HeapHeader heap_header(const std::vector<std::byte>& image) {
  return read_at<heap_layout::HeapHeader>(image, pool::kHeapOffset);
}

// Calls fn(entry, offset) for every chunk of the image's heap, in order.
template <typename Fn>
void for_each_chunk(const std::vector<std::byte>& image, Fn&& fn) {
  const auto h = heap_header(image);
  for (std::uint64_t i = 0; i < h.chunk_count; ++i) {
    fn(read_at<std::uint64_t>(image, h.table_offset + heap_layout::kEntrySize * i),
       h.chunks_offset + i * pmhash::heap::kChunkSize);
  }
}

const heap_layout::SizeClass& slab_class(std::uint64_t entry) {
  return heap_layout::kSizeClasses[heap_layout::entry_class(entry)];
}

// The blocks of a slab chunk, after its bitmap.
Range slab_blocks(std::uint64_t chunk, const heap_layout::SizeClass& k) {
  return {chunk + k.first, std::uint64_t{k.blocks} * k.size};
}

// The regions every pool has: the pool's and the heap's.
void find_pool_and_heap_regions(const std::vector<std::byte>& b, Regions* r) {
  (*r)[kPoolHeader] = {{0, sizeof(pool::PoolHeader)}};
  (*r)[kShutdownState] = {{sizeof(pool::PoolHeader), 64}};
  const auto h = heap_header(b);
  (*r)[kHeapHeader] = {{pool::kHeapOffset, sizeof(heap_layout::HeapHeader)}};
  // The store's main thread and its background threads use the first slots.
  (*r)[kHeapLogs] = {{h.logs_offset, 4 * heap_layout::kLogSize}};
  (*r)[kChunkTable] = {{h.table_offset, h.chunk_count * heap_layout::kEntrySize}};
  for_each_chunk(b, [&](std::uint64_t e, std::uint64_t chunk) {
    if (heap_layout::entry_kind(e) == heap_layout::kChunkSlab) {
      (*r)[kSlabBitmaps].push_back({chunk, slab_class(e).first});
    }
  });
  (*r)[kAnywhere] = {{0, kPoolSize}};
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

// ---------------------------------------------------------------------------
// What the target knows of each engine
// ---------------------------------------------------------------------------

struct Image;

struct Engine {
  const char* name;
  // Builds the engine's kImagesPerEngine images, deterministically, in the
  // order of the input's image bits; their headers are normalised later.
  std::vector<Image> (*build)();
  // Adds the engine's own regions: kRoot, kLevelHeaders, kLevelBuckets,
  // kItems.
  void (*find_regions)(const std::vector<std::byte>& image, Regions* r);
  // Sets the options to open with; `variant` is bit 3 of the input.
  void (*open_options)(bool variant, Options* o);
  // Waits, boundedly, for the background work the open of `store` started
  // (`pool` maps its file); false if it is still running.
  bool (*settle)(const Store& store, const std::byte* pool);
  // Whether damage may legitimately keep that work from ending on a pool
  // check() accepts (else an unsettled store that passes check() is a
  // failure).
  bool may_stay_unsettled;
};

struct Image {
  const Engine* engine = nullptr;
  std::string name;
  std::vector<std::byte> bytes;
  Regions regions;
};

// ---------------------------------------------------------------------------
// clevel
// ---------------------------------------------------------------------------

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

// Image 2 from image 1: what expand() leaves once its context CAS is durable
// and before the rehash thread moves a bucket. The new level is a run of one
// free chunk (the heap places levels of up to 64 KiB in slabs, but a run is
// as valid a block), zeroed, with its header; the ring names it; the context
// names it as the first level and says resizing.
std::vector<std::byte> make_expanding(std::vector<std::byte> image) {
  const auto h = heap_header(image);
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

// An engine's images, named, in the order of the input's image bits.
std::vector<Image> images_of(std::array<const char*, kImagesPerEngine> names,
                             std::array<std::vector<std::byte>, kImagesPerEngine> bytes) {
  std::vector<Image> images(kImagesPerEngine);
  for (unsigned i = 0; i < kImagesPerEngine; ++i) {
    images[i].name = names[i];
    images[i].bytes = std::move(bytes[i]);
  }
  return images;
}

std::vector<Image> build_clevel_images() {
  const std::string path = base_path();
  ::unlink(path.c_str());
  Options o;
  o.pool_size = kPoolSize;
  o.set("clevel.initial_level_log2", 3);
  o.set("clevel.min_level_log2", 2);
  std::unique_ptr<Store> store;
  expect_ok(Store::create(path, o, &store), "create the clevel base pool");
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
  expect_ok(store->close(), "close the clevel base pool");
  store.reset();
  std::vector<std::byte> clean = read_file(path);
  ::unlink(path.c_str());
  std::vector<std::byte> expanding = make_expanding(crashed);
  return images_of({"clean", "crashed", "expanding"},
                   {std::move(clean), std::move(crashed), std::move(expanding)});
}

void find_clevel_regions(const std::vector<std::byte>& b, Regions* r) {
  (*r)[kRoot] = {{pool::kRootOffset, sizeof(clevel::Root)}};
  for_each_chunk(b, [&](std::uint64_t e, std::uint64_t chunk) {
    // Slabs of item sizes (levels are 576 bytes and more here).
    if (heap_layout::entry_kind(e) == heap_layout::kChunkSlab && slab_class(e).size < 512) {
      (*r)[kItems].push_back(slab_blocks(chunk, slab_class(e)));
    }
  });
  for (unsigned i = 0; i < clevel::kRingSize; ++i) {
    const std::uint64_t off = ring_entry(b, i);
    if (off == 0) continue;
    const auto l = read_at<clevel::LevelHeader>(b, off);
    (*r)[kLevelHeaders].push_back({off, sizeof(clevel::LevelHeader)});
    (*r)[kLevelBuckets].push_back(
        {off + sizeof(clevel::LevelHeader), sizeof(clevel::Bucket) << l.log2});
  }
}

void clevel_open_options(bool variant, Options* o) { o->set("clevel.tag_filter", !variant); }

// Waits for a resize that open resumed to finish, watching the pool's
// bytes: Store::stats() would scan a table check() has not yet validated.
// False if it still runs after a second (it takes milliseconds here, unless
// damage keeps it from finishing).
bool settle_clevel(const Store&, const std::byte* pool) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(1);
  while (!resize_settled(pool)) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::yield();
  }
  return true;
}

const Engine kClevel{"clevel", &build_clevel_images, &find_clevel_regions, &clevel_open_options,
                     &settle_clevel, /*may_stay_unsettled=*/true};

// ---------------------------------------------------------------------------
// dali
// ---------------------------------------------------------------------------

// Longer than building the images takes: an epoch then ends only when a
// caller waits for one (sync(), a strict write, the sweep, close), never on
// the worker's timer, so what each epoch holds is the same in every process.
// The target opens with it too, so that an input replays the same way.
constexpr unsigned kLongEpochMs = 60000;
// The epoch length of the one session that needs epochs to end one at a
// time (sync() ends two): long enough for a batch of writes to fit in one.
constexpr unsigned kTickMs = 100;

// Fields of the dali root, in the pool.
constexpr std::uint64_t kDaliEpochAt = root_field(offsetof(dali::Root, epoch));
constexpr std::uint64_t kDaliShapeAt = root_field(offsetof(dali::Root, shape));
constexpr std::uint64_t kDaliSegmentsAt = root_field(offsetof(dali::Root, segments));
constexpr std::uint64_t kDaliFailedCountAt = root_field(offsetof(dali::Root, failed_count));
constexpr std::uint64_t kDaliFailedAt = root_field(offsetof(dali::Root, failed));

// Mostly small values (records of 40 to 99 bytes); one of 400 bytes (a size
// class of its own) and one larger than heap::kMaxSmallSize (a run). No
// record shares a slab size class with a segment (320 bytes, then 640 times
// powers of two, here), which find_dali_regions relies on.
std::string dali_value_of(unsigned i, unsigned version) {
  std::size_t n = 1 + (i * 37 + version * 11) % 60;
  if (i == 17) n = pmhash::heap::kMaxSmallSize + 1;
  if (i == 99) n = 400;
  return std::string(n, static_cast<char>('A' + (i + version) % 26));
}

Options dali_build_options(unsigned epoch_ms) {
  Options o;
  o.engine = "dali";
  o.pool_size = kPoolSize;
  o.durability = Durability::kEpoch;
  o.epoch_ms = epoch_ms;
  // 300 keys split the 8 buckets into five segments, a few more into six.
  o.set("dali.initial_log2", 3);
  return o;
}

void dali_insert(Store& s, unsigned i, unsigned version) {
  expect_ok(s.insert(key_of(i), dali_value_of(i, version)), "dali: insert " + key_of(i));
}

void dali_upsert(Store& s, unsigned i, unsigned version) {
  expect_ok(s.upsert(key_of(i), dali_value_of(i, version)), "dali: upsert " + key_of(i));
}

// (Whether the key is still there depends on which epochs a crash lost.)
void dali_remove(Store& s, unsigned i) {
  const Status st = s.remove(key_of(i));
  if (!st.ok() && !st.is_not_found()) fail("dali: remove " + key_of(i) + ": " + st.to_string());
}

void dali_sync(Store& s) { expect_ok(s.sync(), "dali: sync"); }

// Epochs of inserts, updates and removes, each ended by sync(): records
// carry several written epochs, the table grows through five segments, and
// garbage collection unlinks superseded versions.
void dali_synced_writes(Store& s) {
  for (unsigned i = 0; i < kKeys; ++i) {
    dali_insert(s, i, 0);
    if (i % 50 == 49) dali_sync(s);
  }
  for (unsigned i = 0; i < kKeys; i += 7) dali_upsert(s, i, 1);
  dali_sync(s);
  for (unsigned i = 1; i < kKeys; i += 13) dali_remove(s, i);
  dali_sync(s);
}

// Batch b (0, 1, 2) of the session whose epochs end one at a time, each in
// the epoch after the last: a bucket that two batches write gets an
// in-flight pointer (the role table's rows 2 and 3), and a key that both
// write gets two records in consecutive epochs. Batches 1 and 2 insert 100
// new keys each (ids 1000 (b + 1) ...): enough to move the approximate
// count the growth trigger reads (batches of 64), so both split buckets and
// change the shape in epochs a crash then fails.
void dali_batch(Store& s, unsigned b) {
  const unsigned step = 11u << b;  // 11, 22, 44: keys the batch before wrote too
  for (unsigned i = 0; i < kKeys; i += step) dali_upsert(s, i, 2 + b);
  for (unsigned i = 3 + 2 * b; i < kKeys; i += 17 + 2 * b) dali_remove(s, i);
  const unsigned fresh = b == 0 ? 10 : 100;
  for (unsigned i = 0; i < fresh; ++i) dali_insert(s, 1000 * (b + 1) + i, b);
}

// Waits until the epoch worker's timer has ended epoch `e` - 1 and fenced
// it (durable_epoch is the counter's durable value minus two): the store's
// state, retirees freed included, then no longer depends on timing.
void wait_for_epoch(const Store& s, std::uint64_t e) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (s.stats().durable_epoch + 2 < e) {
    if (std::chrono::steady_clock::now() > deadline) fail("dali: the epoch timer does not fire");
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

// Images 3 and 4 from the pool `synced` (dali_synced_writes, closed): it
// opens in epoch c, batch b runs in epoch c + b, and the copy of image 4 is
// taken in c + 2. A crash there fails c + 1 and c + 2 (batches 1 and 2:
// a bucket last written in c + 1 then has its valid head in its in-flight
// pointer) and keeps batch 0. False when the timer ended an epoch inside a
// batch or the copy (a loaded machine): the caller tries again.
bool dali_batches(const std::vector<std::byte>& synced, std::vector<std::byte>* crashed,
                  std::vector<std::byte>* clean) {
  const std::string path = base_path();
  write_file(path, synced);
  std::unique_ptr<Store> store;
  expect_ok(Store::open(path, dali_build_options(kTickMs), &store), "dali: reopen the base pool");
  const std::uint64_t c = store->stats().epoch;
  bool on_time = true;
  for (unsigned b = 0; b < 3 && on_time; ++b) {
    wait_for_epoch(*store, c + b);
    dali_batch(*store, b);
    on_time = store->stats().epoch == c + b;
  }
  *crashed = read_file(path);
  on_time = on_time && store->stats().epoch == c + 2;
  expect_ok(store->close(), "dali: close the base pool");
  store.reset();
  *clean = read_file(path);
  ::unlink(path.c_str());
  return on_time;
}

// Waits for the sweep an unclean open started (bounded: it takes
// milliseconds on an undamaged pool).
void wait_for_sweep(const Store& s, const std::string& what) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (!s.stats().swept) {
    if (std::chrono::steady_clock::now() > deadline) fail(what + ": the sweep does not end");
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

// Image 4 recovered (failure list c+1, c+2) and swept before any write
// (the sweep frees blocks: allocation after it is deterministic), two
// synced epochs of writes, then writes that no fence covers, copied.
std::vector<std::byte> make_crashed_twice(const std::vector<std::byte>& crashed) {
  const std::string path = base_path();
  write_file(path, crashed);
  std::unique_ptr<Store> store;
  expect_ok(Store::open(path, dali_build_options(kLongEpochMs), &store),
            "dali: recover the crashed pool");
  wait_for_sweep(*store, "dali: recovering the crashed pool");
  Store& s = *store;
  for (unsigned i = 2; i < kKeys; i += 5) dali_upsert(s, i, 5);
  for (unsigned i = 0; i < 20; ++i) dali_insert(s, 4000 + i, 5);
  dali_sync(s);
  for (unsigned i = 4; i < kKeys; i += 19) dali_remove(s, i);
  dali_sync(s);
  // Enough new keys to split buckets in the epoch the next crash fails.
  for (unsigned i = 1; i < kKeys; i += 11) dali_upsert(s, i, 6);
  for (unsigned i = 0; i < 80; ++i) dali_insert(s, 5000 + i, 6);
  std::vector<std::byte> twice = read_file(path);
  expect_ok(store->close(), "dali: close the recovered pool");
  store.reset();
  ::unlink(path.c_str());
  return twice;
}

// Image 5 from a crashed pool: what a run of opens would leave that each
// recovered from the crash before it and crashed in turn before its first
// epoch ended (before its sweep freed anything), until the failure list
// holds kFailureListCapacity - 1 entries. Each such open fails the counter
// F and F-1 (one new entry after the first: F-1 is listed already), sets
// the counter to F+1, sets sweep_pending and counts a generation; nothing
// else. The next crashed open finds no room for two more entries, so it
// rewrites every bucket and the shape first (dali.h, "Failure list
// capacity"). (Written here: a thousand real recoveries would take seconds
// at every start, and the sweep each starts would race the copy.)
std::vector<std::byte> fill_failure_list(std::vector<std::byte> image) {
  std::uint64_t counter = read_at<std::uint64_t>(image, kDaliEpochAt);
  std::uint64_t count = read_at<std::uint64_t>(image, kDaliFailedCountAt);
  std::uint64_t opens = 0;
  while (count + 1 < dali::kFailureListCapacity) {
    for (std::uint64_t e : {counter - 1, counter}) {
      if (count == 0 || read_at<std::uint64_t>(image, kDaliFailedAt + 8 * (count - 1)) < e) {
        write_at(&image, kDaliFailedAt + 8 * count++, e);
      }
    }
    ++counter;
    ++opens;
  }
  write_at(&image, kDaliFailedCountAt, count);
  write_at(&image, kDaliEpochAt, counter);
  write_at<std::uint64_t>(&image, root_field(offsetof(dali::Root, sweep_pending)), 1);
  const std::uint64_t generation_at = sizeof(pool::PoolHeader) + offsetof(pool::ShutdownState, generation);
  write_at(&image, generation_at, read_at<std::uint64_t>(image, generation_at) + opens);
  return image;
}

std::vector<Image> build_dali_images() {
  const std::string path = base_path();
  ::unlink(path.c_str());
  std::unique_ptr<Store> store;
  expect_ok(Store::create(path, dali_build_options(kLongEpochMs), &store),
            "create the dali base pool");
  dali_synced_writes(*store);
  expect_ok(store->close(), "close the dali base pool");
  store.reset();
  const std::vector<std::byte> synced = read_file(path);
  ::unlink(path.c_str());
  std::vector<std::byte> crashed;
  std::vector<std::byte> clean;
  for (unsigned attempt = 0; !dali_batches(synced, &crashed, &clean); ++attempt) {
    if (attempt == 10) fail("dali: the epoch timer keeps firing in the middle of a batch");
  }
  std::vector<std::byte> full = fill_failure_list(make_crashed_twice(crashed));
  return images_of({"dali clean", "dali crashed", "dali full failure list"},
                   {std::move(clean), std::move(crashed), std::move(full)});
}

std::uint64_t dali_segment(const std::vector<std::byte>& image, unsigned j) {
  return read_at<std::uint64_t>(image, kDaliSegmentsAt + 8 * j);
}

// Buckets the table has under any of the shape's three versions (a failed
// epoch may make an older one valid).
std::uint64_t dali_buckets_in_use(const std::vector<std::byte>& image) {
  std::uint64_t most = 0;
  for (unsigned k = 0; k < 3; ++k) {
    const std::uint64_t w =
        read_at<std::uint64_t>(image, kDaliShapeAt + offsetof(dali::Bucket, ptr) + 8 * k);
    most = std::max(most, dali::Shape::decode(w).buckets());
  }
  return most;
}

void find_dali_regions(const std::vector<std::byte>& b, Regions* r) {
  // The root, of whose failure list only the first two entries, the last
  // two in use and the two after them (which a larger count would expose):
  // the rest is either zeros or a long sorted run, and patches there would
  // mostly be wasted.
  const auto failed = read_at<std::uint64_t>(b, kDaliFailedCountAt);
  const std::uint64_t end = std::min<std::uint64_t>(failed + 2, dali::kFailureListCapacity);
  if (end <= 6) {
    (*r)[kRoot] = {{pool::kRootOffset, offsetof(dali::Root, failed) + 8 * end}};
  } else {
    (*r)[kRoot] = {{pool::kRootOffset, offsetof(dali::Root, failed) + 16},
                   {kDaliFailedAt + 8 * (failed - 2), 8 * (end - (failed - 2))}};
  }

  const auto initial_log2 = read_at<std::uint32_t>(b, root_field(offsetof(dali::Root, initial_log2)));
  const std::uint64_t in_use = dali_buckets_in_use(b);
  const auto h = heap_header(b);
  std::set<std::uint64_t> segment_chunks;  // where segments are, by chunk start
  for (unsigned j = 0; j < dali::kMaxSegments; ++j) {
    const std::uint64_t off = dali_segment(b, j);
    if (off == 0) continue;
    segment_chunks.insert(off - (off - h.chunks_offset) % pmhash::heap::kChunkSize);
    (*r)[kLevelHeaders].push_back({off, sizeof(dali::SegmentHeader)});
    // Segment j holds buckets [first, first + n).
    const std::uint64_t n = dali::segment_buckets(initial_log2, j);
    const std::uint64_t first = j == 0 ? 0 : n;
    if (in_use > first) {
      (*r)[kLevelBuckets].push_back(
          {off + sizeof(dali::SegmentHeader), sizeof(dali::Bucket) * std::min(n, in_use - first)});
    }
  }

  for_each_chunk(b, [&](std::uint64_t e, std::uint64_t chunk) {
    if (segment_chunks.contains(chunk)) return;
    if (heap_layout::entry_kind(e) == heap_layout::kChunkSlab) {
      (*r)[kItems].push_back(slab_blocks(chunk, slab_class(e)));
    } else if (heap_layout::entry_kind(e) == heap_layout::kChunkRunHead) {
      // A large value's record: its header and key.
      (*r)[kItems].push_back({chunk, 64});
    }
  });
}

void dali_open_options(bool variant, Options* o) {
  o->durability = variant ? Durability::kEpoch : Durability::kStrict;
  o->epoch_ms = kLongEpochMs;
}

// Waits for the sweep that an unclean open (or one that finds a sweep
// pending) runs in the background (dali.h, Recovery 2). Stats::swept says
// when it has ended; stats() reads only DRAM counters and the key count,
// whose recount walks what it follows only as far as it holds records,
// like the sweep itself. False if it still runs after 5 s.
bool settle_dali(const Store& store, const std::byte*) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (!store.stats().swept) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

const Engine kDali{"dali", &build_dali_images, &find_dali_regions, &dali_open_options,
                   &settle_dali, /*may_stay_unsettled=*/false};

// ---------------------------------------------------------------------------
// nehash
// ---------------------------------------------------------------------------

constexpr unsigned kNehashBucketBits = 1;
constexpr unsigned kNehashSplitCopied = 4;  // the mid-split image is copied during this split (300 keys make 7 or 8)

constexpr std::uint64_t kNehashSegmentsAt = root_field(offsetof(nehash::Root, rec_segments));

std::int64_t constant_clock() { return 1; }

Options nehash_build_options() {
  Options o;
  o.engine = "nehash";
  o.pool_size = kPoolSize;
  o.set("nehash.bucket_bits", kNehashBucketBits);
  o.set("nehash.initial_dir_bits", 1);
  return o;
}

// Calls fn(offset of the table entry, entry) for every entry in use.
template <typename Fn>
void for_each_nehash_entry(const std::vector<std::byte>& image, Fn&& fn) {
  for (unsigned s = 0; s < nehash::kSegments; ++s) {
    const auto seg = read_at<std::uint64_t>(image, kNehashSegmentsAt + 8 * s);
    if (seg == 0) continue;
    for (std::uint64_t i = 0; i < nehash::segment_entries(s); ++i) {
      const std::uint64_t at = seg + sizeof(nehash::SegmentHeader) + 8 * i;
      const auto w = read_at<std::uint64_t>(image, at);
      if (w != 0) fn(at, w);
    }
  }
}

// Adds a committed slot update to op log 1 of `image`: the first VALID
// inline slot of the first group that op log 0's split does not name gets
// the value "fuzzed" (6 bytes), as if a thread had crashed right after the
// record's commit.
void add_slot_update(std::vector<std::byte>* image) {
  const auto split = read_at<std::uint64_t>(*image, root_field(offsetof(nehash::Root, op_log)));
  if (nehash::op_kind(split) != nehash::kOpSplit) fail("nehash: no split record in the mid-split image");
  std::uint64_t group = 0;
  for_each_nehash_entry(*image, [&](std::uint64_t, std::uint64_t w) {
    const std::uint64_t g = nehash::rec_offset(w);
    const auto id = read_at<std::uint32_t>(*image, g + offsetof(nehash::GroupHeader, bg_id));
    if (group == 0 && id != nehash::op_split_id(split)) group = g;
  });
  if (group == 0) fail("nehash: no group beside the splitting one in the mid-split image");
  const std::uint64_t metas = group + sizeof(nehash::GroupHeader);
  const std::uint64_t buckets = metas + nehash::bucket_dir_bytes(kNehashBucketBits);
  for (std::uint64_t n = 0; n < nehash::buckets_per_group(kNehashBucketBits) * nehash::kSlotsPerBucket; ++n) {
    const std::uint64_t meta_at =
        metas + n / nehash::kSlotsPerBucket * sizeof(nehash::BucketMeta) + n % nehash::kSlotsPerBucket * 2;
    const auto m = read_at<std::uint16_t>(*image, meta_at);
    if (!nehash::meta_valid(m) || !nehash::meta_is_inline(m)) continue;
    const std::uint64_t slot_at = buckets + n * sizeof(nehash::Slot);
    const std::string value = "fuzzed";
    const std::uint16_t fresh = nehash::meta_inline(nehash::meta_key_len(m), value.size(), nehash::meta_fp(m));
    const std::uint64_t log = root_field(offsetof(nehash::Root, op_log) + sizeof(nehash::OpLog));
    write_at(image, log + offsetof(nehash::OpLog, meta), nehash::log_meta(fresh, meta_at));
    write_at(image, log + offsetof(nehash::OpLog, w0), read_at<std::uint64_t>(*image, slot_at));
    write_at(image, log + offsetof(nehash::OpLog, w1), nehash::pack_word(value));
    write_at(image, log + offsetof(nehash::OpLog, op), nehash::op_slot_update(slot_at));
    return;
  }
  fail("nehash: no inline slot in the first group");
}

std::vector<Image> build_nehash_images() {
  nehash::testing::set_clock(&constant_clock);
  const std::string path = base_path();
  ::unlink(path.c_str());
  std::unique_ptr<Store> store;
  expect_ok(Store::create(path, nehash_build_options(), &store), "create the nehash base pool");
  std::vector<std::byte> mid_split;
  unsigned splits = 0;
  nehash::testing::set_split_hook([&] {
    if (++splits == kNehashSplitCopied) mid_split = read_file(path);
  });
  for (unsigned i = 0; i < kKeys; ++i) {
    expect_ok(store->insert(key_of(i), value_of(i, 0)), "nehash: insert " + key_of(i));
  }
  nehash::testing::set_split_hook(nullptr);
  if (mid_split.empty()) fail("nehash: fewer splits than " + std::to_string(kNehashSplitCopied));
  for (unsigned i = 0; i < kKeys; i += 7) {
    expect_ok(store->update(key_of(i), value_of(i, 1)), "nehash: update " + key_of(i));
  }
  for (unsigned i = 1; i < kKeys; i += 13) {
    if (i != 17 && i != 42) expect_ok(store->remove(key_of(i)), "nehash: remove " + key_of(i));
  }
  std::vector<std::byte> crashed = read_file(path);
  expect_ok(store->close(), "close the nehash base pool");
  store.reset();
  std::vector<std::byte> clean = read_file(path);
  ::unlink(path.c_str());
  add_slot_update(&mid_split);
  return images_of({"nehash clean", "nehash crashed", "nehash mid-split"},
                   {std::move(clean), std::move(crashed), std::move(mid_split)});
}

void find_nehash_regions(const std::vector<std::byte>& b, Regions* r) {
  (*r)[kRoot] = {{pool::kRootOffset, offsetof(nehash::Root, op_log) + 4 * sizeof(nehash::OpLog)}};
  const auto h = heap_header(b);
  auto chunk_of = [&](std::uint64_t off) { return off - (off - h.chunks_offset) % pmhash::heap::kChunkSize; };
  std::set<std::uint64_t> index_blocks;  // segments and groups
  for (unsigned s = 0; s < nehash::kSegments; ++s) {
    const auto seg = read_at<std::uint64_t>(b, kNehashSegmentsAt + 8 * s);
    if (seg == 0) continue;
    index_blocks.insert(seg);
    (*r)[kLevelHeaders].push_back({seg, sizeof(nehash::SegmentHeader)});
  }
  for_each_nehash_entry(b, [&](std::uint64_t at, std::uint64_t w) {
    const std::uint64_t g = nehash::rec_offset(w);
    index_blocks.insert(g);
    (*r)[kLevelHeaders].push_back({at, 8});
    (*r)[kLevelHeaders].push_back({g, sizeof(nehash::GroupHeader)});
    (*r)[kLevelBuckets].push_back(
        {g + sizeof(nehash::GroupHeader), nehash::group_bytes(kNehashBucketBits) - sizeof(nehash::GroupHeader)});
  });
  std::set<std::uint64_t> index_chunks;
  for (std::uint64_t off : index_blocks) index_chunks.insert(chunk_of(off));
  for_each_chunk(b, [&](std::uint64_t e, std::uint64_t chunk) {
    if (heap_layout::entry_kind(e) == heap_layout::kChunkSlab && slab_class(e).size < 512) {
      (*r)[kItems].push_back(slab_blocks(chunk, slab_class(e)));
    } else if (heap_layout::entry_kind(e) == heap_layout::kChunkRunHead && !index_chunks.contains(chunk)) {
      (*r)[kItems].push_back({chunk, 64});  // a large value's item: its header and key
    }
  });
}

void nehash_open_options(bool variant, Options* o) {
  if (variant) o->engine = "nehash";
}

bool settle_nehash(const Store&, const std::byte*) { return true; }

const Engine kNehash{"nehash", &build_nehash_images, &find_nehash_regions, &nehash_open_options,
                     &settle_nehash, /*may_stay_unsettled=*/false};

// ---------------------------------------------------------------------------
// pmeh
// ---------------------------------------------------------------------------

constexpr unsigned kPmehKeys = 600;
constexpr unsigned kPmehZoneBits = 1;
constexpr unsigned kPmehSegmentBytes = 4096;
constexpr unsigned kPmehSplitCopied = 2;  // image 11 is copied during this split

constexpr std::uint64_t kPmehDirArrayAt = root_field(offsetof(pmeh::Root, dir_array));
constexpr std::uint64_t kPmehSplitAt = root_field(offsetof(pmeh::Root, split));
constexpr std::uint64_t kPmehOpLogAt = root_field(offsetof(pmeh::Root, op_log));

Options pmeh_build_options() {
  Options o;
  o.engine = "pmeh";
  o.pool_size = kPoolSize;
  o.set("pmeh.zone_bits", kPmehZoneBits);
  o.set("pmeh.segment_kib", kPmehSegmentBytes / 1024);
  o.set("pmeh.split_bits", 1);
  o.set("pmeh.workers", 1);
  return o;
}

// Copies the pool file at the first drain that finds a split record saying
// COMPLETING in the n-th split to do so (the drain that persisted it).
class MidSplitCopier : public pmhash::media::Region::Observer {
 public:
  MidSplitCopier(pmhash::media::Region& region, std::string path) : region_(region), path_(std::move(path)) {}
  void on_flush(std::uint64_t, std::size_t) override {}
  void on_drain() override {
    if (!image.empty()) return;
    for (unsigned z = 0; z < (1u << kPmehZoneBits); ++z) {
      const std::uint64_t rec =
          region_.at<std::atomic<std::uint64_t>>(kPmehSplitAt + 8 * z)->load(std::memory_order_acquire);
      if ((rec & pmeh::kSplitCompleting) == 0 || rec == last_) continue;
      last_ = rec;
      if (++completing_ == kPmehSplitCopied) image = read_file(path_);
    }
  }
  std::vector<std::byte> image;
  unsigned seen() const { return completing_; }

 private:
  pmhash::media::Region& region_;
  std::string path_;
  std::uint64_t last_ = 0;
  unsigned completing_ = 0;
};

// Each zone's directory (the newest with its zone bit), as V1 finds it.
std::vector<std::uint64_t> pmeh_zone_dirs(const std::vector<std::byte>& image) {
  std::vector<std::uint64_t> dirs(1u << kPmehZoneBits, 0);
  for (unsigned id = pmeh::kMaxDirs; id-- > 0;) {
    const auto off = read_at<std::uint64_t>(image, kPmehDirArrayAt + 8 * id);
    if (off == 0) continue;
    for (unsigned z = 0; z < dirs.size(); ++z) {
      const auto filled = read_at<std::uint64_t>(image, off + offsetof(pmeh::DirHeader, zone_filled) + 8 * (z / 64));
      if (dirs[z] == 0 && ((filled >> (z % 64)) & 1)) dirs[z] = off;
    }
  }
  return dirs;
}

// Calls fn(directory, offset of the entry, segment) for every entry of
// every zone in its directory.
template <typename Fn>
void for_each_pmeh_entry(const std::vector<std::byte>& image, Fn&& fn) {
  const std::vector<std::uint64_t> dirs = pmeh_zone_dirs(image);
  for (unsigned z = 0; z < dirs.size(); ++z) {
    if (dirs[z] == 0) fail("pmeh: zone " + std::to_string(z) + " is in no directory");
    const auto depth = read_at<std::uint8_t>(image, dirs[z] + offsetof(pmeh::DirHeader, depth));
    const std::uint64_t per_zone = std::uint64_t{1} << (depth - kPmehZoneBits);
    for (std::uint64_t e = z * per_zone; e < (z + 1) * per_zone; ++e) {
      const std::uint64_t at = dirs[z] + sizeof(pmeh::DirHeader) + 8 * e;
      fn(dirs[z], at, read_at<std::uint64_t>(image, at));
    }
  }
}

// The segments of `image`: those the zones' entries name, and the
// children of a split in flight.
std::set<std::uint64_t> pmeh_segments(const std::vector<std::byte>& image) {
  std::set<std::uint64_t> segs;
  for_each_pmeh_entry(image, [&](std::uint64_t, std::uint64_t, std::uint64_t seg) { segs.insert(seg); });
  for (unsigned z = 0; z < (1u << kPmehZoneBits); ++z) {
    const std::uint64_t s = read_at<std::uint64_t>(image, kPmehSplitAt + 8 * z) & pmeh::kSplitOffsetMask;
    if (s == 0) continue;
    for (unsigned i = 0; i < 8; ++i) {
      const auto c = read_at<std::uint64_t>(image, s + offsetof(pmeh::SegmentHeader, children) + 8 * i);
      if (c != 0) segs.insert(c);
    }
  }
  return segs;
}

// Adds a committed slot update to op log 1 of `image`: the first VALID
// inline slot of a segment the split in flight does not involve gets the
// value "fuzzed" (6 bytes), as if its owner had crashed right after the
// record's commit.
void add_pmeh_slot_update(std::vector<std::byte>* image) {
  std::set<std::uint64_t> splitting;
  for (unsigned z = 0; z < (1u << kPmehZoneBits); ++z) {
    const std::uint64_t rec = read_at<std::uint64_t>(*image, kPmehSplitAt + 8 * z);
    if ((rec & pmeh::kSplitCompleting) != 0) splitting.insert(rec & pmeh::kSplitOffsetMask);
  }
  if (splitting.empty()) fail("pmeh: no COMPLETING split record in the mid-split image");
  for (std::uint64_t seg : pmeh_segments(*image)) {
    if (splitting.contains(seg)) continue;
    // Children of the split in flight sit under S; skip them too.
    bool child = false;
    for (std::uint64_t s : splitting) {
      for (unsigned i = 0; i < 8; ++i) {
        child |= read_at<std::uint64_t>(*image, s + offsetof(pmeh::SegmentHeader, children) + 8 * i) == seg;
      }
    }
    if (child) continue;
    for (unsigned j = 0; j < pmeh::buckets_per_segment(12); ++j) {
      const std::uint64_t bucket = seg + sizeof(pmeh::SegmentHeader) + sizeof(pmeh::Bucket) * j;
      for (unsigned p = 0; p < pmeh::kSlotsPerBucket; ++p) {
        const std::uint64_t meta_at = bucket + 2 * p;
        const auto m = read_at<std::uint16_t>(*image, meta_at);
        if (!pmeh::meta_valid(m) || !pmeh::meta_is_inline(m)) continue;
        const std::uint64_t slot_at = bucket + offsetof(pmeh::Bucket, slot) + sizeof(pmeh::Slot) * p;
        const std::string value = "fuzzed";
        const std::uint16_t fresh = pmeh::meta_inline(pmeh::meta_key_len(m), value.size(), pmeh::meta_fp(m));
        const std::uint64_t log = kPmehOpLogAt + sizeof(pmeh::OpLog);
        write_at(image, log + offsetof(pmeh::OpLog, meta), pmeh::log_meta(fresh, meta_at));
        write_at(image, log + offsetof(pmeh::OpLog, w0), read_at<std::uint64_t>(*image, slot_at));
        write_at(image, log + offsetof(pmeh::OpLog, w1), pmeh::pack_word(value));
        write_at(image, log + offsetof(pmeh::OpLog, op), pmeh::op_slot_update(slot_at));
        return;
      }
    }
  }
  fail("pmeh: no inline slot outside the split in flight");
}

std::vector<Image> build_pmeh_images() {
  const std::string path = base_path();
  ::unlink(path.c_str());
  std::unique_ptr<Store> store;
  expect_ok(Store::create(path, pmeh_build_options(), &store), "create the pmeh base pool");
  pmhash::media::Region& region = pmhash::store::testing::region(*store);
  MidSplitCopier copier(region, path);
  region.set_observer(&copier);
  for (unsigned i = 0; i < kPmehKeys; ++i) {
    expect_ok(store->insert(key_of(i), value_of(i, 0)), "pmeh: insert " + key_of(i));
  }
  region.set_observer(nullptr);
  std::vector<std::byte> mid_split = std::move(copier.image);
  if (mid_split.empty()) {
    fail("pmeh: " + std::to_string(store->stats().property("pmeh.splits")) + " splits, " + std::to_string(copier.seen()) +
         " seen completing: fewer than " + std::to_string(kPmehSplitCopied));
  }
  for (unsigned i = 0; i < kPmehKeys; i += 7) {
    expect_ok(store->update(key_of(i), value_of(i, 1)), "pmeh: update " + key_of(i));
  }
  for (unsigned i = 1; i < kPmehKeys; i += 13) {
    if (i != 17 && i != 42) expect_ok(store->remove(key_of(i)), "pmeh: remove " + key_of(i));
  }
  std::vector<std::byte> crashed = read_file(path);
  expect_ok(store->close(), "close the pmeh base pool");
  store.reset();
  std::vector<std::byte> clean = read_file(path);
  ::unlink(path.c_str());
  add_pmeh_slot_update(&mid_split);
  return images_of({"pmeh clean", "pmeh crashed", "pmeh mid-split"},
                   {std::move(clean), std::move(crashed), std::move(mid_split)});
}

void find_pmeh_regions(const std::vector<std::byte>& b, Regions* r) {
  (*r)[kRoot] = {{pool::kRootOffset, offsetof(pmeh::Root, op_log) + 4 * sizeof(pmeh::OpLog)}};
  std::set<std::uint64_t> dirs;
  for_each_pmeh_entry(b, [&](std::uint64_t dir, std::uint64_t at, std::uint64_t) {
    if (dirs.insert(dir).second) (*r)[kLevelHeaders].push_back({dir, sizeof(pmeh::DirHeader)});
    (*r)[kLevelHeaders].push_back({at, 8});
  });
  for (std::uint64_t seg : pmeh_segments(b)) {
    (*r)[kLevelHeaders].push_back({seg, sizeof(pmeh::SegmentHeader)});
    (*r)[kLevelBuckets].push_back({seg + sizeof(pmeh::SegmentHeader), kPmehSegmentBytes - sizeof(pmeh::SegmentHeader)});
  }
  for_each_chunk(b, [&](std::uint64_t e, std::uint64_t chunk) {
    if (heap_layout::entry_kind(e) == heap_layout::kChunkSlab && slab_class(e).size < 512) {
      (*r)[kItems].push_back(slab_blocks(chunk, slab_class(e)));
    } else if (heap_layout::entry_kind(e) == heap_layout::kChunkRunHead) {
      (*r)[kItems].push_back({chunk, 64});  // a large value's item: its header and key
    }
  });
}

void pmeh_open_options(bool variant, Options* o) {
  o->set("pmeh.workers", variant ? 2 : 1);
  o->set("pmeh.split_bits", variant ? 3 : 1);
  if (variant) o->engine = "pmeh";
}

bool settle_pmeh(const Store&, const std::byte*) { return true; }

const Engine kPmeh{"pmeh", &build_pmeh_images, &find_pmeh_regions, &pmeh_open_options, &settle_pmeh,
                   /*may_stay_unsettled=*/false};

// ---------------------------------------------------------------------------
// Images and patches
// ---------------------------------------------------------------------------

// In the order of bits 4-5 of an input's first byte.
const Engine* const kEngines[] = {&kClevel, &kDali, &kNehash, &kPmeh};
constexpr unsigned kEngineCount = std::size(kEngines);

std::vector<Image> g_images;  // kImagesPerEngine per engine, in engine order
PoolFile* g_file = nullptr;

void remove_file() { delete g_file; }

const Image& image_for(unsigned mode) {
  const unsigned engine = ((mode >> 4) & 3) % kEngineCount;
  return g_images[engine * kImagesPerEngine + (mode & 3) % kImagesPerEngine];
}

void build_images() {
  for (const Engine* engine : kEngines) {
    std::vector<Image> built = engine->build();
    if (built.size() != kImagesPerEngine) fail(std::string(engine->name) + ": wrong image count");
    for (Image& im : built) {
      im.engine = engine;
      normalise_header(&im.bytes);
      find_pool_and_heap_regions(im.bytes, &im.regions);
      engine->find_regions(im.bytes, &im.regions);
      for (unsigned k = 0; k < kRegionCount; ++k) {
        if (im.regions[k].empty()) fail(im.name + ": no region " + std::to_string(k));
      }
      g_images.push_back(std::move(im));
    }
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

// ---------------------------------------------------------------------------
// The property
// ---------------------------------------------------------------------------

// A transaction that reads a visited key and rewrites it commits (or finds
// the pool full), and the store then reads the new value; a snapshot read
// of the key works. Engines without transactions answer NotSupported.
void exercise_transaction(Store& store, const std::string& key, const std::string& value,
                          bool settled) {
  std::unique_ptr<pmhash::Transaction> txn;
  const Status begun = store.transaction(&txn);
  if (begun.is_not_supported()) return;
  expect_ok(begun, "transaction");
  std::string got;
  const Status g = txn->get(key, &got);
  if (settled) {
    expect_ok(g, "transaction get of a visited key");
    if (got != value) fail("transaction get disagrees with for_each");
  } else if (!g.ok() && !g.is_not_found()) {
    fail("transaction get: " + g.to_string());
  }
  expect_ok(txn->upsert(key, "fuzz-txn-value"), "transaction upsert");
  const Status c = txn->commit();
  if (!c.ok() && !c.is_no_space()) fail("commit: " + c.to_string());
  if (c.ok()) {
    expect_ok(store.get(key, &got), "get after commit");
    if (got != "fuzz-txn-value") fail("commit did not store its value");
  }
  // What a crash would keep: some version of the key, or none.
  pmhash::ReadOptions snapshot;
  snapshot.snapshot = true;
  const Status r = store.get(key, &got, snapshot);
  if (!r.ok() && !r.is_not_found()) fail("snapshot get: " + r.to_string());
}

// What a store that passed check() must do: reads and writes work. When no
// background work runs (`settled`), also: every visited key reads back with
// the value visited, for_each agrees with size(), and check() still passes
// after the writes. (A clevel resize resumed from a damaged but plausible
// progress entry can drop a level it has not emptied after check() passed;
// check() finds the lost items once the resize is over, which is why the
// caller waits for that first.)
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
  // (The second key: neither the one updated nor the one removed above.)
  if (seen.size() >= 3) {
    const auto& [k, v] = *std::next(seen.begin());
    exercise_transaction(store, k, v, settled);
  }
  if (settled) expect_ok(store.check(), "check after operations on a store that passed it");
}

// What any store that opened must survive, whatever check() says of it:
// stats() returns, and every read that follows the pool's offsets (for_each,
// salvage, get with and without a value) returns OK, NotFound or Corruption
// (damage is an error, never a crash). A scan that found no damage and a
// salvage that skipped entries contradict each other; on a store that
// passed check() (`checked`) no read finds damage at all.
void read_damaged(Store& store, bool checked) {
  (void)store.stats();
  std::uint64_t visited = 0;
  const Status f = store.for_each([&](std::string_view, std::string_view) {
    ++visited;
    return true;
  });
  if (!f.ok() && !f.is_corruption()) fail("for_each on an opened store: " + f.to_string());
  std::uint64_t skipped = 0, salvaged = 0;
  const Status g = store.salvage(
      [&](std::string_view, std::string_view) {
        ++salvaged;
        return true;
      },
      &skipped);
  if (!g.ok() && !g.is_corruption()) fail("salvage on an opened store: " + g.to_string());
  if (f.ok() && skipped != 0) {
    fail("for_each found no damage, but salvage skipped " + std::to_string(skipped) + " entries");
  }
  for (unsigned i = 0; i < 8; ++i) {
    std::string value;
    for (std::string* out : {&value, static_cast<std::string*>(nullptr)}) {
      const Status r = store.get(key_of(i * 37), out);
      if (!r.ok() && !r.is_not_found() && !r.is_corruption()) {
        fail("get of " + key_of(i * 37) + " on an opened store: " + r.to_string());
      }
      if (checked && r.is_corruption()) fail("get after check() passed: " + r.to_string());
    }
  }
  if (checked) {
    expect_ok(f, "for_each after check() passed");
    expect_ok(g, "salvage after check() passed");
    if (skipped != 0) fail("salvage after check() passed skipped entries");
  }
}

// Opens the pool file, which holds `image` (`base` patched), and checks the
// property. `mode` is the input's first byte. An undamaged image (`healthy`)
// must also open, settle and pass check().
void open_and_exercise(const Image& base, const std::vector<std::byte>& image, unsigned mode,
                       bool healthy) {
  const Engine& engine = *base.engine;
  const std::string& path = g_file->path();
  Options o;
  o.engine = "";
  engine.open_options((mode & 8) != 0, &o);
  std::unique_ptr<Store> store;
  const Status s = Store::open(path, o, &store);
  if (!s.ok()) {
    if (healthy) fail(base.name + " image: open: " + s.to_string());
    if (store != nullptr) fail("open failed (" + s.to_string() + ") but returned a store");
    // Store::open: a rejected pool is left byte-for-byte unchanged (an
    // engine that cannot start its threads, an IOError, may have recovered).
    if (!s.is_io_error() && !g_file->holds(image)) {
      fail("open failed (" + s.to_string() + ") and changed the file");
    }
    return;
  }
  if (store == nullptr) fail("open returned OK without a store");
  const bool settled = engine.settle(*store, g_file->data());
  const Status c = store->check();
  if (healthy && !settled) fail(base.name + " image: the background work of open does not end");
  if (healthy) expect_ok(c, base.name + " image: check");
  read_damaged(*store, c.ok());
  if (c.ok()) {
    if (!settled && !engine.may_stay_unsettled) {
      fail(std::string(engine.name) +
           ": the background work open started has not ended, though check() passes");
    }
    exercise(*store, settled);
    expect_ok(store->close(), "close");
    store.reset();
    // Closed cleanly: it opens again, and after a settled run passes.
    expect_ok(Store::open(path, o, &store), "reopen after a clean close");
    const Status again = store->check();
    if (settled && !again.ok()) fail("check after reopening: " + again.to_string());
  }
  (void)store->close();
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  // The fast path of the tests and benchmarks (clwb + sfence), unless the
  // caller chose another.
  ::setenv("PMEM2_FORCE_GRANULARITY", "cache_line", 0);
  build_images();
  g_file = new PoolFile("/dev/shm/pmhash-fuzz-" + std::to_string(::getpid()) + ".pool");
  std::atexit(remove_file);
  // Every image is a valid pool: else the inputs would only fuzz rejection.
  for (const Image& im : g_images) {
    g_file->write(im.bytes);
    open_and_exercise(im, im.bytes, /*mode=*/0, /*healthy=*/true);
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const unsigned mode = size > 0 ? data[0] : 0;
  const Image& base = image_for(mode);
  // One buffer for every input: no fresh 4 MiB allocation (and page faults)
  // per run.
  static std::vector<std::byte> image(kPoolSize);
  std::memcpy(image.data(), base.bytes.data(), kPoolSize);
  if (size > 0) apply_patches(data + 1, size - 1, base, &image);
  if (mode & 4) fix_checksum(&image);
  g_file->write(image);
  open_and_exercise(base, image, mode, /*healthy=*/false);
  return 0;
}
