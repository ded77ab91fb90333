// Unit tests for heap::Heap: allocation and free of slab blocks and runs,
// pool-full behaviour, reopen, crash recovery from the thread logs, thread
// caches and their slots, and concurrent use. Each test maps its own file
// under /dev/shm and formats a heap in it (no pool header: the heap starts at
// the same offset a pool would use).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <barrier>
#include <cstring>
#include <latch>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "heap/heap.h"
#include "heap/heap_testing.h"
#include "heap/layout.h"
#include "media/region.h"
#include "sync/rcu.h"

namespace pmhash::heap {
namespace {

constexpr std::uint64_t kHeapOff = 16384;  // where a pool puts its heap
constexpr std::size_t kMiB = 1024 * 1024;

bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

// Fills a block with a pattern derived from `tag`, and checks it.
void fill(std::byte* p, std::size_t n, std::uint64_t tag) {
  for (std::size_t i = 0; i < n; i += 8) {
    const std::uint64_t v = tag * 0x9e3779b97f4a7c15ull + i;
    std::memcpy(p + i, &v, std::min<std::size_t>(8, n - i));
  }
}
bool intact(const std::byte* p, std::size_t n, std::uint64_t tag) {
  for (std::size_t i = 0; i < n; i += 8) {
    const std::uint64_t v = tag * 0x9e3779b97f4a7c15ull + i;
    if (std::memcmp(p + i, &v, std::min<std::size_t>(8, n - i)) != 0) return false;
  }
  return true;
}

class HeapTest : public ::testing::Test {
 protected:
  void TearDown() override {
    heap_.reset();
    region_.reset();
    for (const std::string& p : paths_) ::unlink(p.c_str());
  }

  // A fresh file of `size` bytes, mapped, with a formatted heap, opened.
  void make(std::size_t size = 64 * kMiB) {
    ASSERT_TRUE(make_region(size, &region_));
    ASSERT_TRUE(Heap::format(*region_, kHeapOff, size - kHeapOff).ok());
    reopen_clean();
  }

  bool make_region(std::size_t size, std::unique_ptr<media::Region>* out) {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    const std::string path = "/dev/shm/pmhash-heap-" + std::to_string(::getpid()) + "-" +
                             info->name() + "-" + std::to_string(paths_.size());
    const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) return false;
    paths_.push_back(path);
    const bool sized = ::ftruncate(fd, static_cast<off_t>(size)) == 0;
    ::close(fd);
    return sized && media::Region::map_file(path, 0, out).ok();
  }

  std::uint64_t heap_size() const { return region_->size() - kHeapOff; }
  layout::Layout geometry() const { return layout::compute_layout(kHeapOff, heap_size()); }

  // Closes the heap cleanly (destructor) and opens it again.
  void reopen_clean() {
    heap_.reset();
    Status s = Heap::open(*region_, kHeapOff, heap_size(), &heap_);
    ASSERT_TRUE(s.ok()) << s.to_string();
  }

  // Drops the heap as a crash would (all stores reached the file) and opens
  // it again, without recovery.
  void crash_and_open() {
    testing::abandon(std::move(heap_));
    Status s = Heap::open(*region_, kHeapOff, heap_size(), &heap_);
    ASSERT_TRUE(s.ok()) << s.to_string();
  }

  ThreadCache* tc() {
    Status s;
    ThreadCache* c = heap_->thread(&s);
    EXPECT_NE(c, nullptr) << s.to_string();
    return c;
  }

  std::uint64_t alloc(std::size_t n, unsigned intent = 0, bool zero = false) {
    std::uint64_t off = 0;
    Status s = tc()->allocate(n, &off, zero, intent);
    EXPECT_TRUE(s.ok()) << n << " bytes: " << s.to_string();
    return off;
  }

  void expect_consistent() {
    Status s = heap_->check();
    EXPECT_TRUE(s.ok()) << s.to_string();
    s = testing::check_accounting(*heap_);
    EXPECT_TRUE(s.ok()) << s.to_string();
  }

  const layout::ThreadLog& log(unsigned slot) const {
    return region_->at<layout::ThreadLog>(geometry().logs_offset)[slot];
  }
  // The word that says whether the block at `off` is allocated, and the bits
  // of it that do: its bit in the slab bitmap, or the run's head entry.
  std::pair<const std::uint64_t*, std::uint64_t> state_bits(std::uint64_t off) const {
    const layout::Layout g = geometry();
    const std::uint64_t chunk = (off - g.chunks_offset) / kChunkSize;
    const std::uint64_t within = (off - g.chunks_offset) % kChunkSize;
    const auto* entry = region_->at<std::uint64_t>(g.table_offset) + chunk;
    if (layout::entry_kind(*entry) != layout::kChunkSlab) return {entry, ~std::uint64_t{0}};
    const layout::SizeClass& k = layout::kSizeClasses[layout::entry_class(*entry)];
    const std::uint64_t b = (within - k.first) / k.size;
    const auto* bits = region_->at<std::uint64_t>(g.chunks_offset + chunk * kChunkSize);
    return {bits + b / 64, std::uint64_t{1} << (b % 64)};
  }
  // Whether p is an 8-byte word of the heap area.
  bool in_heap(const void* p) const {
    if (p == nullptr) return false;
    const std::uint64_t at = region_->offset_of(p);
    return at >= kHeapOff && at + 8 <= kHeapOff + heap_size() && at % 8 == 0;
  }

  bool all_logs_empty() const {
    for (unsigned s = 0; s < kMaxThreads; ++s) {
      const layout::ThreadLog& l = log(s);
      if (l.alloc_intent[0] != 0 || l.alloc_intent[1] != 0 || l.retired_count != 0) return false;
    }
    return true;
  }

  std::unique_ptr<media::Region> region_;
  std::unique_ptr<Heap> heap_;
  std::vector<std::string> paths_;
};

// ---------------------------------------------------------------------------
// Size classes.

TEST(HeapSizeClassTest, ClassesFitTheirChunkAndAreAligned) {
  for (unsigned c = 0; c < layout::kClassCount; ++c) {
    const layout::SizeClass& k = layout::kSizeClasses[c];
    SCOPED_TRACE(k.size);
    EXPECT_GT(k.blocks, 0u);
    EXPECT_EQ(k.words, (k.blocks + 63) / 64);
    EXPECT_GE(k.first, k.words * 8);
    EXPECT_LE(k.first + std::uint64_t{k.blocks} * k.size, kChunkSize);
    // One more block would not fit.
    const std::uint32_t more = k.blocks + 1;
    EXPECT_GT(((more + 63) / 64) * 8 + std::uint64_t{more} * k.size, kChunkSize);
    const std::uint32_t align = k.size >= 64 ? 64 : 16;
    EXPECT_EQ(k.size % align, 0u);
    EXPECT_EQ(k.first % align, 0u);
    if (c > 0) {
      EXPECT_GT(k.size, layout::kSizeClasses[c - 1].size);
    }
  }
}

TEST(HeapSizeClassTest, ClassIndexPicksTheSmallestClassThatFits) {
  for (std::size_t n = 1; n <= kMaxSmallSize; ++n) {
    const unsigned c = layout::class_index(n);
    ASSERT_LT(c, layout::kClassCount) << n;
    ASSERT_GE(layout::kSizeClasses[c].size, n) << n;
    if (c > 0) {
      ASSERT_LT(layout::kSizeClasses[c - 1].size, n) << n;
    }
  }
}

// ---------------------------------------------------------------------------
// Format and open.

TEST_F(HeapTest, FormatRejectsAHeapOfFewerThanFourChunks) {
  ASSERT_TRUE(make_region(kMiB, &region_));
  Status s = Heap::format(*region_, kHeapOff, kMiB - kHeapOff);
  EXPECT_TRUE(s.is_invalid_argument()) << s.to_string();
  EXPECT_TRUE(contains(s.message(), "at least 4")) << s.message();
}

TEST_F(HeapTest, FormatAcceptsTheSmallestPool) {
  make(4 * kMiB);
  EXPECT_GE(geometry().chunk_count, layout::kMinChunks);
  EXPECT_EQ(heap_->used_bytes(), 0u);
  EXPECT_EQ(heap_->free_bytes(), geometry().chunk_count * kChunkSize);
  EXPECT_EQ(geometry().chunks_offset % kChunkSize, 0u);
  expect_consistent();
}

TEST_F(HeapTest, OpenRejectsAnUnformattedArea) {
  ASSERT_TRUE(make_region(8 * kMiB, &region_));
  Status s = Heap::open(*region_, kHeapOff, heap_size(), &heap_);
  EXPECT_TRUE(s.is_corruption()) << s.to_string();
  EXPECT_TRUE(contains(s.message(), "bad magic")) << s.message();
}

TEST_F(HeapTest, OpenRejectsAHeaderThatDisagreesWithTheArea) {
  make(8 * kMiB);
  heap_.reset();
  auto* h = region_->at<layout::HeapHeader>(kHeapOff);
  ++h->chunk_count;
  Status s = Heap::open(*region_, kHeapOff, heap_size(), &heap_);
  EXPECT_TRUE(s.is_corruption()) << s.to_string();
  EXPECT_TRUE(contains(s.message(), "chunk_count")) << s.message();
  --h->chunk_count;
  // The heap size recorded by the pool must match too.
  s = Heap::open(*region_, kHeapOff, heap_size() - kChunkSize, &heap_);
  EXPECT_TRUE(s.is_corruption()) << s.to_string();
  EXPECT_TRUE(contains(s.message(), "heap_size")) << s.message();
}

TEST_F(HeapTest, OpenRejectsADamagedChunkTableWithoutWriting) {
  make(8 * kMiB);
  const std::uint64_t a = alloc(100);
  heap_.reset();
  auto* table = region_->at<std::uint64_t>(geometry().table_offset);
  const std::uint32_t chunk = static_cast<std::uint32_t>((a - geometry().chunks_offset) / kChunkSize);
  // Unknown kind.
  const std::uint64_t saved = table[chunk];
  table[chunk] = 7;
  Status s = Heap::open(*region_, kHeapOff, heap_size(), &heap_);
  EXPECT_TRUE(s.is_corruption()) << s.to_string();
  EXPECT_TRUE(contains(s.message(), "unknown chunk kind")) << s.message();
  table[chunk] = saved;
  // A bitmap bit beyond the chunk's blocks.
  const layout::SizeClass& k = layout::kSizeClasses[layout::class_index(100)];
  auto* bits = region_->at<std::uint64_t>(geometry().chunks_offset + std::uint64_t{chunk} * kChunkSize);
  ASSERT_NE(k.blocks % 64, 0u);
  const std::uint64_t stray = std::uint64_t{1} << 63;
  bits[k.words - 1] |= stray;
  const std::vector<std::uint64_t> before(table, table + geometry().chunk_count);
  s = Heap::open(*region_, kHeapOff, heap_size(), &heap_);
  EXPECT_TRUE(s.is_corruption()) << s.to_string();
  EXPECT_TRUE(contains(s.message(), "beyond its blocks")) << s.message();
  EXPECT_EQ(std::vector<std::uint64_t>(table, table + geometry().chunk_count), before);
  bits[k.words - 1] &= ~stray;
  reopen_clean();
  EXPECT_TRUE(heap_->is_allocated(a));
}

TEST_F(HeapTest, OpenFreesRunsACrashLeftHalfWrittenAndRecoverRepairsThem) {
  make(8 * kMiB);
  heap_.reset();
  auto* table = region_->at<std::uint64_t>(geometry().table_offset);
  // A head of 3 chunks with one of its two body entries, then an orphan body.
  table[0] = layout::head_entry(3);
  table[1] = layout::body_entry(1);
  table[4] = layout::body_entry(2);
  reopen_clean();
  // Open writes nothing (the engine may still reject the pool), but the
  // chunks are free from now on.
  EXPECT_EQ(table[0], layout::head_entry(3));
  EXPECT_EQ(table[4], layout::body_entry(2));
  EXPECT_EQ(heap_->used_bytes(), 0u);
  EXPECT_FALSE(heap_->is_allocated(geometry().chunks_offset));
  heap_->recover([](std::uint64_t) { return true; });
  EXPECT_EQ(table[0], 0u);
  EXPECT_EQ(table[1], 0u);
  EXPECT_EQ(table[4], 0u);
  EXPECT_EQ(heap_->used_bytes(), 0u);
  EXPECT_FALSE(heap_->is_allocated(geometry().chunks_offset));
  expect_consistent();
}

// ---------------------------------------------------------------------------
// Allocation and free.

TEST_F(HeapTest, AllocateThenFreeRoundTrip) {
  make();
  const std::uint64_t off = alloc(100);
  EXPECT_NE(off, 0u);
  EXPECT_TRUE(heap_->is_allocated(off));
  EXPECT_GE(heap_->block_size(off), 100u);
  EXPECT_EQ(heap_->used_bytes(), heap_->block_size(off));
  EXPECT_EQ(log(tc()->slot()).alloc_intent[0], off);
  tc()->clear_intent();
  EXPECT_EQ(log(tc()->slot()).alloc_intent[0], 0u);
  expect_consistent();
  tc()->free_unpublished(off);
  EXPECT_FALSE(heap_->is_allocated(off));
  EXPECT_EQ(heap_->block_size(off), 0u);
  EXPECT_EQ(heap_->used_bytes(), 0u);
  expect_consistent();
}

TEST_F(HeapTest, RejectsZeroBytesOversizedRequestsAndBadIntentSlots) {
  make(8 * kMiB);
  std::uint64_t off = 0;
  EXPECT_TRUE(tc()->allocate(0, &off).is_invalid_argument());
  Status s = tc()->allocate(9 * kMiB, &off);
  EXPECT_TRUE(s.is_invalid_argument()) << s.to_string();
  EXPECT_TRUE(tc()->allocate(16, &off, false, kIntentSlots).is_invalid_argument());
  EXPECT_EQ(heap_->used_bytes(), 0u);
}

TEST_F(HeapTest, BlocksOfManySizesAreDistinctDisjointAlignedAndLargeEnough) {
  make();
  const std::vector<std::size_t> sizes = {1,    15,   16,    17,    48,    49,     64,
                                          65,   100,  255,   256,   257,   1000,   4096,
                                          5000, 65535, 65536, 65537, 262144, 300000, kMiB};
  std::map<std::uint64_t, std::size_t> blocks;  // off -> usable size
  for (int round = 0; round < 3; ++round) {
    for (std::size_t n : sizes) {
      const std::uint64_t off = alloc(n);
      tc()->clear_intent();
      ASSERT_FALSE(blocks.contains(off)) << "block " << off << " handed out twice";
      const std::size_t usable = heap_->block_size(off);
      EXPECT_GE(usable, n);
      EXPECT_EQ(off % 16, 0u) << n;
      if (n >= 64) {
        EXPECT_EQ(off % 64, 0u) << n;
      }
      if (n > kMaxSmallSize) {
        EXPECT_EQ(off % kChunkSize, 0u) << n;
      }
      EXPECT_GE(off, geometry().chunks_offset);
      EXPECT_LE(off + usable, geometry().chunks_offset + geometry().chunk_count * kChunkSize);
      blocks[off] = usable;
      fill(region_->at(off), usable, off);
    }
  }
  std::uint64_t end = 0;
  std::uint64_t sum = 0;
  for (const auto& [off, usable] : blocks) {
    EXPECT_GE(off, end) << "block " << off << " overlaps its predecessor";
    EXPECT_TRUE(intact(region_->at(off), usable, off)) << "block " << off << " was overwritten";
    end = off + usable;
    sum += usable;
  }
  EXPECT_EQ(heap_->used_bytes(), sum);
  expect_consistent();
}

TEST_F(HeapTest, EveryRequestedSizeGetsEnoughUsableBytes) {
  make();
  for (std::size_t n = 1; n <= 3 * 4096; n += 7) {
    const std::uint64_t off = alloc(n);
    ASSERT_GE(heap_->block_size(off), n);
    tc()->free_unpublished(off);
  }
  tc()->clear_intent();
  EXPECT_EQ(heap_->used_bytes(), 0u);
  expect_consistent();
}

TEST_F(HeapTest, ZeroedAllocationsAreZeroEvenWhenReused) {
  make();
  for (std::size_t n : {std::size_t{40}, std::size_t{3000}, std::size_t{500000}}) {
    const std::uint64_t dirty = alloc(n);
    std::memset(region_->at(dirty), 0xab, heap_->block_size(dirty));
    tc()->free_unpublished(dirty);
    const std::uint64_t off = alloc(n, 0, /*zero=*/true);
    EXPECT_EQ(off, dirty) << "the freed block is reused first";
    const std::size_t usable = heap_->block_size(off);
    const std::vector<std::byte> zeros(usable);
    EXPECT_EQ(std::memcmp(region_->at(off), zeros.data(), usable), 0) << n;
  }
  tc()->clear_intent();
}

TEST_F(HeapTest, FullHeapReturnsNoSpaceAndKeepsEveryBlock) {
  make(4 * kMiB);
  std::vector<std::uint64_t> blocks;
  Status s;
  for (;;) {
    std::uint64_t off = 0;
    s = tc()->allocate(1024, &off);
    if (!s.ok()) break;
    fill(region_->at(off), 1024, off);
    blocks.push_back(off);
  }
  tc()->clear_intent();
  EXPECT_TRUE(s.is_no_space()) << s.to_string();
  EXPECT_TRUE(contains(s.message(), "pool full: cannot allocate 1024 bytes")) << s.message();
  const std::size_t per_chunk = layout::kSizeClasses[layout::class_index(1024)].blocks;
  EXPECT_EQ(blocks.size(), per_chunk * geometry().chunk_count);
  const std::uint64_t used = heap_->used_bytes();
  EXPECT_EQ(used, blocks.size() * 1024);
  // A failed allocation changed nothing.
  std::uint64_t off = 0;
  EXPECT_TRUE(tc()->allocate(1024, &off).is_no_space());
  EXPECT_TRUE(tc()->allocate(16, &off).is_no_space());
  EXPECT_TRUE(tc()->allocate(kMiB, &off).is_no_space());
  EXPECT_EQ(heap_->used_bytes(), used);
  for (std::uint64_t b : blocks) {
    ASSERT_TRUE(heap_->is_allocated(b));
    ASSERT_TRUE(intact(region_->at(b), 1024, b)) << b;
  }
  expect_consistent();
  // One free makes room for exactly one more.
  tc()->free_unpublished(blocks[blocks.size() / 2]);
  ASSERT_TRUE(tc()->allocate(1000, &off).ok());
  EXPECT_EQ(off, blocks[blocks.size() / 2]);
  EXPECT_TRUE(tc()->allocate(1000, &off).is_no_space());
  tc()->clear_intent();
  expect_consistent();
}

TEST_F(HeapTest, RunsAreAllocatedFirstFitAndReused) {
  make(16 * kMiB);
  const std::uint64_t a = alloc(3 * kChunkSize);
  const std::uint64_t b = alloc(kChunkSize + 1);
  tc()->clear_intent();
  EXPECT_EQ(heap_->block_size(a), 3 * kChunkSize);
  EXPECT_EQ(heap_->block_size(b), 2 * kChunkSize);
  EXPECT_EQ(b, a + 3 * kChunkSize);
  EXPECT_FALSE(heap_->is_allocated(a + kChunkSize)) << "a run body is not a block start";
  EXPECT_EQ(heap_->used_bytes(), 5 * kChunkSize);
  tc()->free_unpublished(a);
  EXPECT_FALSE(heap_->is_allocated(a));
  // Two chunks fit in the hole a left; four do not.
  EXPECT_EQ(alloc(2 * kChunkSize), a);
  EXPECT_EQ(alloc(4 * kChunkSize), b + 2 * kChunkSize);
  tc()->clear_intent();
  expect_consistent();
  // Freeing everything coalesces: the whole chunk area is one run again.
  tc()->free_unpublished(a);
  tc()->free_unpublished(b);
  tc()->free_unpublished(b + 2 * kChunkSize);
  EXPECT_EQ(heap_->used_bytes(), 0u);
  EXPECT_EQ(alloc(geometry().chunk_count * kChunkSize), geometry().chunks_offset);
  tc()->clear_intent();
  expect_consistent();
}

TEST_F(HeapTest, EmptiedSlabChunksCanHoldRunsAgain) {
  make(8 * kMiB);
  // Fill the heap with small blocks from a thread that then exits, so that
  // no chunk stays active.
  std::vector<std::uint64_t> blocks;
  std::thread t([&] {
    ThreadCache* c = heap_->thread();
    std::uint64_t off = 0;
    while (c->allocate(200, &off).ok()) blocks.push_back(off);
    c->clear_intent();
  });
  t.join();
  ASSERT_FALSE(blocks.empty());
  EXPECT_EQ(heap_->free_bytes() / kChunkSize, 0u);
  for (std::uint64_t b : blocks) tc()->free_unpublished(b);
  EXPECT_EQ(heap_->used_bytes(), 0u);
  EXPECT_EQ(heap_->free_bytes(), geometry().chunk_count * kChunkSize);
  EXPECT_EQ(alloc(geometry().chunk_count * kChunkSize), geometry().chunks_offset);
  tc()->clear_intent();
  expect_consistent();
}

TEST_F(HeapTest, ForEachAllocatedVisitsEachBlockOnce) {
  make();
  std::map<std::uint64_t, std::size_t> want;
  for (std::size_t n : {16, 100, 100, 2000, 70000, 600000}) {
    const std::uint64_t off = alloc(n);
    want[off] = heap_->block_size(off);
  }
  tc()->free_unpublished(want.begin()->first);
  want.erase(want.begin());
  tc()->clear_intent();
  std::map<std::uint64_t, std::size_t> got;
  heap_->for_each_allocated([&](std::uint64_t off, std::size_t size) {
    EXPECT_TRUE(got.emplace(off, size).second) << off;
  });
  EXPECT_EQ(got, want);
}

// ---------------------------------------------------------------------------
// Unlogged allocation (epoch engines).

TEST_F(HeapTest, UnloggedAllocateThenFreeRoundTrip) {
  make();
  ThreadCache* c = tc();
  struct Block {
    std::uint64_t off;
    std::size_t usable;
    std::pair<const std::uint64_t*, std::uint64_t> state;
  };
  std::vector<Block> blocks;
  std::set<std::uint64_t> seen;
  std::uint64_t sum = 0;
  for (std::size_t n : {std::size_t{1}, std::size_t{16}, std::size_t{100}, std::size_t{100},
                        std::size_t{4096}, kMaxSmallSize, kMaxSmallSize + 1, 3 * kChunkSize}) {
    SCOPED_TRACE(n);
    std::uint64_t off = 0;
    const void* dirty = nullptr;
    const media::Counters before = media::counters();
    Status s = c->allocate_unlogged(n, &off, &dirty);
    ASSERT_TRUE(s.ok()) << s.to_string();
    // A run's table entries are durable, head and body together, before the
    // call returns.
    if (n > kMaxSmallSize) {
      EXPECT_GT(media::counters().fences, before.fences);
    }
    ASSERT_TRUE(seen.insert(off).second) << "block " << off << " handed out twice";
    ASSERT_TRUE(heap_->is_allocated(off));
    const std::size_t usable = heap_->block_size(off);
    if (n > kMaxSmallSize) {
      EXPECT_EQ(usable, (n + kChunkSize - 1) / kChunkSize * kChunkSize);
    } else {
      EXPECT_EQ(usable, layout::kSizeClasses[layout::class_index(n)].size);
    }
    // *dirty is the word the allocation changed: the block's bitmap word,
    // or the run's head entry.
    const auto state = state_bits(off);
    EXPECT_TRUE(in_heap(dirty));
    EXPECT_EQ(dirty, state.first);
    EXPECT_NE(*state.first & state.second, 0u);
    if (n > kMaxSmallSize) {
      EXPECT_EQ(*state.first, layout::head_entry(usable / kChunkSize));
    }
    fill(region_->at(off), usable, off);
    blocks.push_back({off, usable, state});
    sum += usable;
  }
  for (const Block& b : blocks) {
    EXPECT_TRUE(intact(region_->at(b.off), b.usable, b.off)) << "block " << b.off << " was overwritten";
  }
  EXPECT_EQ(heap_->used_bytes(), sum);
  EXPECT_TRUE(all_logs_empty());
  expect_consistent();

  for (const Block& b : blocks) {
    const void* dirty = nullptr;
    const media::Counters before = media::counters();
    c->free_unlogged(b.off, &dirty);
    const media::Counters after = media::counters();
    if (b.usable > kMaxSmallSize) {
      // A run is freed durably before its chunks change hands: nothing is
      // left for the caller's fence.
      EXPECT_EQ(dirty, nullptr) << b.off;
      EXPECT_GT(after.fences, before.fences) << b.off;
    } else {
      EXPECT_EQ(dirty, b.state.first) << b.off;
      EXPECT_EQ(after.fences, before.fences) << b.off;
    }
    EXPECT_EQ(*b.state.first & b.state.second, 0u) << b.off;
    EXPECT_FALSE(heap_->is_allocated(b.off));
  }
  EXPECT_EQ(heap_->used_bytes(), 0u);
  expect_consistent();
  // A repeated free changes nothing, and says so.
  const void* dirty = &sum;
  c->free_unlogged(blocks[0].off, &dirty);
  EXPECT_EQ(dirty, nullptr);
  c->free_unlogged(blocks.back().off, &dirty);
  EXPECT_EQ(dirty, nullptr);
  EXPECT_EQ(heap_->used_bytes(), 0u);

  // Blocks from allocate() are freed the same way.
  const std::uint64_t logged = alloc(200);
  c->clear_intent();
  const auto state = state_bits(logged);
  c->free_unlogged(logged, &dirty);
  EXPECT_EQ(dirty, state.first);
  EXPECT_FALSE(heap_->is_allocated(logged));
  EXPECT_EQ(heap_->used_bytes(), 0u);
  expect_consistent();
}

TEST_F(HeapTest, UnloggedAllocationNamesTheBlockInNoLog) {
  make();
  ThreadCache* c = tc();
  const layout::ThreadLog& l = log(c->slot());
  std::vector<std::uint64_t> blocks;
  for (std::size_t n : {std::size_t{48}, std::size_t{3000}, kMiB}) {
    std::uint64_t off = 0;
    const void* dirty = nullptr;
    ASSERT_TRUE(c->allocate_unlogged(n, &off, &dirty).ok());
    blocks.push_back(off);
    EXPECT_EQ(l.alloc_intent[0], 0u) << n;
    EXPECT_EQ(l.alloc_intent[1], 0u) << n;
    EXPECT_EQ(l.retired_count, 0u) << n;
  }
  EXPECT_TRUE(all_logs_empty());
  // Nor does it replace a logged allocation's intent.
  const std::uint64_t logged = alloc(100, 1);
  std::uint64_t off = 0;
  const void* dirty = nullptr;
  ASSERT_TRUE(c->allocate_unlogged(100, &off, &dirty).ok());
  blocks.push_back(off);
  EXPECT_EQ(l.alloc_intent[0], 0u);
  EXPECT_EQ(l.alloc_intent[1], logged);
  c->clear_intent(1);
  c->free_unlogged(logged, &dirty);
  EXPECT_TRUE(all_logs_empty());
  expect_consistent();
  // After a crash, recovery knows nothing of them: they stay allocated for
  // the engine's own sweep.
  crash_and_open();
  std::vector<std::uint64_t> asked;
  heap_->recover([&](std::uint64_t b) {
    asked.push_back(b);
    return false;
  });
  EXPECT_TRUE(asked.empty());
  for (std::uint64_t b : blocks) EXPECT_TRUE(heap_->is_allocated(b)) << b;
  expect_consistent();
}

TEST_F(HeapTest, UnloggedSmallBlocksIssueNoFlushAndNoFence) {
  make();
  ThreadCache* c = tc();
  // The first block activates a chunk, which persists its table entry.
  std::uint64_t first = 0;
  const void* dirty = nullptr;
  ASSERT_TRUE(c->allocate_unlogged(48, &first, &dirty).ok());
  ASSERT_GT(layout::kSizeClasses[layout::class_index(48)].blocks, 1001u)
      << "the blocks below must come from the same chunk";
  std::vector<std::uint64_t> blocks(1000);
  const media::Counters before = media::counters();
  for (std::uint64_t& b : blocks) {
    ASSERT_TRUE(c->allocate_unlogged(48, &b, &dirty).ok());
  }
  for (std::uint64_t b : blocks) {
    c->free_unlogged(b, &dirty);
    ASSERT_NE(dirty, nullptr);
  }
  const media::Counters after = media::counters();
  EXPECT_EQ(after.flushes, before.flushes);
  EXPECT_EQ(after.fences, before.fences);
  // The logged path on the same chunk does both: the counters see this heap.
  const std::uint64_t logged = alloc(48);
  const media::Counters then = media::counters();
  EXPECT_GT(then.flushes, after.flushes);
  EXPECT_GT(then.fences, after.fences);
  c->clear_intent();
  EXPECT_TRUE(heap_->is_allocated(first));
  EXPECT_TRUE(heap_->is_allocated(logged));
  EXPECT_EQ(heap_->used_bytes(), 2u * 48);
  expect_consistent();
}

TEST_F(HeapTest, UnloggedAllocationOnAFullHeapReturnsNoSpaceAndChangesNothing) {
  make(4 * kMiB);
  ThreadCache* c = tc();
  std::vector<std::uint64_t> blocks;
  Status s;
  for (;;) {
    std::uint64_t off = 0;
    const void* dirty = nullptr;
    s = c->allocate_unlogged(1024, &off, &dirty);
    if (!s.ok()) break;
    fill(region_->at(off), 1024, off);
    blocks.push_back(off);
  }
  EXPECT_TRUE(s.is_no_space()) << s.to_string();
  EXPECT_TRUE(contains(s.message(), "pool full: cannot allocate 1024 bytes")) << s.message();
  const std::size_t per_chunk = layout::kSizeClasses[layout::class_index(1024)].blocks;
  EXPECT_EQ(blocks.size(), per_chunk * geometry().chunk_count);
  const std::uint64_t used = heap_->used_bytes();
  const std::uint64_t free = heap_->free_bytes();
  EXPECT_EQ(used, blocks.size() * 1024);
  // A failed allocation changes nothing, its outputs included.
  std::uint64_t off = 1;
  const void* dirty = &off;
  for (std::size_t n : {std::size_t{1024}, std::size_t{16}, kMiB}) {
    s = c->allocate_unlogged(n, &off, &dirty);
    EXPECT_TRUE(s.is_no_space()) << n << ": " << s.to_string();
  }
  EXPECT_TRUE(c->allocate_unlogged(0, &off, &dirty).is_invalid_argument());
  EXPECT_TRUE(c->allocate_unlogged(5 * kMiB, &off, &dirty).is_invalid_argument());
  EXPECT_EQ(off, 1u);
  EXPECT_EQ(dirty, &off);
  EXPECT_EQ(heap_->used_bytes(), used);
  EXPECT_EQ(heap_->free_bytes(), free);
  for (std::uint64_t b : blocks) {
    ASSERT_TRUE(heap_->is_allocated(b));
    ASSERT_TRUE(intact(region_->at(b), 1024, b)) << b;
  }
  EXPECT_TRUE(all_logs_empty());
  expect_consistent();
  // One free makes room for exactly one more.
  c->free_unlogged(blocks[blocks.size() / 2], &dirty);
  EXPECT_NE(dirty, nullptr);
  ASSERT_TRUE(c->allocate_unlogged(1000, &off, &dirty).ok());
  EXPECT_EQ(off, blocks[blocks.size() / 2]);
  EXPECT_TRUE(c->allocate_unlogged(1000, &off, &dirty).is_no_space());
  EXPECT_EQ(heap_->used_bytes(), used);
  expect_consistent();
}

// Where a small block goes: a roomy slab (a quarter or more free) first,
// then a fresh chunk, and a tight slab (a few scattered free blocks) only
// when no free chunk is left, so that a burst of allocations lands side by
// side and dirties few pages.
TEST_F(HeapTest, AllocationFillsRoomySlabsAndFreshChunksBeforeTightOnes) {
  make(8 * kMiB);
  ThreadCache* c = tc();
  const layout::SizeClass& k = layout::kSizeClasses[layout::class_index(64)];
  const std::uint64_t chunks_off = geometry().chunks_offset;
  auto chunk_of = [&](std::uint64_t off) { return (off - chunks_off) / kChunkSize; };
  auto allocate = [&](std::uint64_t* off) {
    const void* dirty = nullptr;
    return c->allocate_unlogged(64, off, &dirty);
  };
  // Fill every chunk with 64-byte blocks, grouped by chunk.
  std::map<std::uint64_t, std::vector<std::uint64_t>> by_chunk;
  for (std::uint64_t off = 0; allocate(&off).ok();) by_chunk[chunk_of(off)].push_back(off);
  ASSERT_EQ(by_chunk.size(), geometry().chunk_count);
  ASSERT_GE(by_chunk.size(), 4u);
  auto it = by_chunk.begin();
  const std::uint64_t tight = it->first;
  const std::uint64_t roomy = (++it)->first;
  const std::uint64_t emptied = (++it)->first;
  auto free_every = [&](std::uint64_t chunk, std::size_t stride) {
    std::set<std::uint64_t> freed;
    for (std::size_t i = 0; i < by_chunk[chunk].size(); i += stride) {
      const void* dirty = nullptr;
      c->free_unlogged(by_chunk[chunk][i], &dirty);
      freed.insert(by_chunk[chunk][i]);
    }
    return freed;
  };
  const std::set<std::uint64_t> tight_free = free_every(tight, 8);  // an eighth: tight
  const std::set<std::uint64_t> roomy_free = free_every(roomy, 2);  // a half: roomy
  free_every(emptied, 1);                                           // back to the free set
  expect_consistent();

  // The roomy slab first, to the last block.
  for (std::size_t i = 0; i < roomy_free.size(); ++i) {
    std::uint64_t off = 0;
    ASSERT_TRUE(allocate(&off).ok());
    ASSERT_EQ(chunk_of(off), roomy) << "allocation " << i;
    ASSERT_TRUE(roomy_free.contains(off));
  }
  // Then the free chunk, though the tight slab has room.
  for (std::uint32_t i = 0; i < k.blocks; ++i) {
    std::uint64_t off = 0;
    ASSERT_TRUE(allocate(&off).ok());
    ASSERT_EQ(chunk_of(off), emptied) << "allocation " << i;
  }
  // With no free chunk left, the tight slab's blocks are all still usable.
  for (std::size_t i = 0; i < tight_free.size(); ++i) {
    std::uint64_t off = 0;
    ASSERT_TRUE(allocate(&off).ok()) << "allocation " << i;
    ASSERT_TRUE(tight_free.contains(off));
  }
  std::uint64_t off = 0;
  EXPECT_TRUE(allocate(&off).is_no_space());
  expect_consistent();
}

// A fresh slab brings spares: empty slabs formatted in the same two fences,
// so filling the next chunks costs no fence; they count as free, and an
// allocation that needs their chunks gets them back.
TEST_F(HeapTest, SparesAreFormattedInOneBatchAndGiveWayToRuns) {
  make(64 * kMiB);
  ThreadCache* c = tc();
  const layout::SizeClass& k = layout::kSizeClasses[layout::class_index(64)];
  const std::uint64_t total = geometry().chunk_count * kChunkSize;
  const void* dirty = nullptr;
  std::uint64_t first = 0;
  const media::Counters before = media::counters();
  ASSERT_TRUE(c->allocate_unlogged(64, &first, &dirty).ok());
  const media::Counters formatted = media::counters();
  EXPECT_EQ(formatted.fences - before.fences, 2u) << "one fence for the bitmaps, one for the entries";
  const std::uint64_t slack = kChunkSize - std::uint64_t{k.blocks} * k.size;
  EXPECT_EQ(heap_->free_bytes(), total - 64 - slack) << "spares count as whole free chunks";
  expect_consistent();

  // Three more chunks' worth of blocks: all from spares, no fence.
  std::set<std::uint64_t> chunks;
  for (std::uint32_t i = 0; i < 3 * k.blocks; ++i) {
    std::uint64_t off = 0;
    ASSERT_TRUE(c->allocate_unlogged(64, &off, &dirty).ok());
    chunks.insert((off - geometry().chunks_offset) / kChunkSize);
  }
  EXPECT_EQ(media::counters().fences, formatted.fences);
  EXPECT_GE(chunks.size(), 3u);
  expect_consistent();

  // A run as large as every chunk but the four in use: the spares make way.
  const std::uint64_t run_bytes = (geometry().chunk_count - 4) * kChunkSize;
  std::uint64_t run = 0;
  Status s = c->allocate(run_bytes, &run, false, 0);
  ASSERT_TRUE(s.ok()) << s.to_string();
  c->clear_intent();
  EXPECT_EQ(heap_->free_bytes(), 4 * (kChunkSize - slack) - (3 * std::uint64_t{k.blocks} + 1) * k.size);
  expect_consistent();
  // A clean close keeps no spare: the reopened heap checks clean.
  reopen_clean();
  expect_consistent();
}

// ---------------------------------------------------------------------------
// Reopen and recovery.

TEST_F(HeapTest, ReopenPreservesAllocationState) {
  make();
  std::mt19937_64 rng(7);
  std::vector<std::uint64_t> live;
  std::vector<std::uint64_t> freed;
  for (int i = 0; i < 3000; ++i) {
    const std::size_t n = (rng() % 64 == 0) ? 1 + rng() % (300 * 1024) : 1 + rng() % 2048;
    const std::uint64_t off = alloc(n);
    fill(region_->at(off), std::min<std::size_t>(heap_->block_size(off), 64), off);
    live.push_back(off);
    if (rng() % 3 == 0) {
      const std::size_t victim = rng() % live.size();
      tc()->free_unpublished(live[victim]);
      freed.push_back(live[victim]);
      live.erase(live.begin() + static_cast<std::ptrdiff_t>(victim));
    }
  }
  tc()->clear_intent();
  const std::uint64_t used = heap_->used_bytes();
  const std::uint64_t free = heap_->free_bytes();
  reopen_clean();
  EXPECT_EQ(heap_->used_bytes(), used);
  // Slab chunks the cache held active but empty are whole free chunks now,
  // without the slack at their end.
  EXPECT_GE(heap_->free_bytes(), free);
  for (std::uint64_t off : live) {
    ASSERT_TRUE(heap_->is_allocated(off)) << off;
    ASSERT_TRUE(intact(region_->at(off), std::min<std::size_t>(heap_->block_size(off), 64), off));
  }
  const std::set<std::uint64_t> live_set(live.begin(), live.end());
  for (std::uint64_t off : freed) {
    if (!live_set.contains(off)) {
      ASSERT_FALSE(heap_->is_allocated(off)) << off;
    }
  }
  expect_consistent();
  // New blocks do not collide with the old ones.
  for (int i = 0; i < 500; ++i) {
    const std::uint64_t off = alloc(1 + rng() % 4096);
    ASSERT_FALSE(live_set.contains(off));
  }
  tc()->clear_intent();
  expect_consistent();
}

TEST_F(HeapTest, CleanCloseLeavesEveryLogEmpty) {
  make();
  alloc(100, 0);
  alloc(kMiB, 1);
  tc()->reserve_retire(1);
  tc()->retire(alloc(50));
  reopen_clean();
  EXPECT_TRUE(all_logs_empty());
  expect_consistent();
}

TEST_F(HeapTest, RecoveryFreesRejectedBlocksAndKeepsTheRest) {
  make();
  ThreadCache* c = tc();
  const unsigned slot = c->slot();
  const std::uint64_t kept_item = alloc(100, 0);
  const std::uint64_t lost_level = alloc(kMiB, 1);
  std::vector<std::uint64_t> retired;
  c->reserve_retire(6);
  for (int i = 0; i < 6; ++i) {
    const std::uint64_t off = alloc(64 + 100 * static_cast<std::size_t>(i));
    c->clear_intent();
    c->retire(off);
    retired.push_back(off);
  }
  // Intents are set last, so restore them after the retire loop's allocations.
  auto* l = region_->at<layout::ThreadLog>(geometry().logs_offset) + slot;
  l->alloc_intent[0] = kept_item;
  // Stale entries recovery must skip: the middle of a block, a run body, an
  // offset outside the heap.
  auto* other = region_->at<layout::ThreadLog>(geometry().logs_offset) + 200;
  other->alloc_intent[0] = kept_item + 16;
  other->alloc_intent[1] = lost_level + kChunkSize;
  other->retired[0] = 12345;
  other->retired_count = 1;
  crash_and_open();

  const std::set<std::uint64_t> keep = {kept_item, retired[1], retired[4]};
  std::vector<std::uint64_t> asked;
  heap_->recover([&](std::uint64_t off) {
    asked.push_back(off);
    return keep.contains(off);
  });
  std::sort(asked.begin(), asked.end());
  std::vector<std::uint64_t> want = retired;
  want.push_back(kept_item);
  want.push_back(lost_level);
  std::sort(want.begin(), want.end());
  EXPECT_EQ(asked, want) << "keep() is asked about exactly the logged, allocated blocks";
  for (std::uint64_t off : want) EXPECT_EQ(heap_->is_allocated(off), keep.contains(off)) << off;
  EXPECT_TRUE(all_logs_empty());
  expect_consistent();
  std::uint64_t sum = 0;
  for (std::uint64_t off : keep) sum += heap_->block_size(off);
  EXPECT_EQ(heap_->used_bytes(), sum);
}

TEST_F(HeapTest, RecoveryIsIdempotentAfterACrashDuringRecovery) {
  make();
  ThreadCache* c = tc();
  std::vector<std::uint64_t> retired;
  c->reserve_retire(10);
  for (int i = 0; i < 10; ++i) {
    const std::uint64_t off = alloc(32);
    c->retire(off);
    retired.push_back(off);
  }
  const std::uint64_t intent = alloc(kMiB);
  crash_and_open();
  const auto logs_off = geometry().logs_offset;
  const std::vector<std::byte> logs(region_->at(logs_off),
                                    region_->at(logs_off) + kMaxThreads * layout::kLogSize);
  auto keep = [&](std::uint64_t off) {
    return off == retired[3] || off == retired[7];
  };
  heap_->recover(keep);
  // A crash after the frees but before the emptied logs reached the media.
  std::memcpy(region_->at(logs_off), logs.data(), logs.size());
  crash_and_open();
  std::vector<std::uint64_t> asked;
  heap_->recover([&](std::uint64_t off) {
    asked.push_back(off);
    return keep(off);
  });
  EXPECT_EQ(asked, (std::vector<std::uint64_t>{retired[3], retired[7]}))
      << "freed blocks are skipped the second time";
  EXPECT_FALSE(heap_->is_allocated(intent));
  for (std::size_t i = 0; i < retired.size(); ++i) {
    EXPECT_EQ(heap_->is_allocated(retired[i]), i == 3 || i == 7) << i;
  }
  EXPECT_TRUE(all_logs_empty());
  expect_consistent();
  // And once more with empty logs: nothing to ask.
  asked.clear();
  heap_->recover([&](std::uint64_t off) {
    asked.push_back(off);
    return true;
  });
  EXPECT_TRUE(asked.empty());
}

// ---------------------------------------------------------------------------
// Retired blocks.

TEST_F(HeapTest, RetiredBlocksAreFreedByDrainAndWhenTheLogFills) {
  make();
  ThreadCache* c = tc();
  const std::uint64_t a = alloc(48);
  c->clear_intent();
  c->reserve_retire(1);
  c->retire(a);
  EXPECT_TRUE(heap_->is_allocated(a)) << "freed only after a grace period";
  EXPECT_EQ(log(c->slot()).retired_count, 1u);
  c->drain_retired();
  EXPECT_FALSE(heap_->is_allocated(a));
  EXPECT_EQ(log(c->slot()).retired_count, 0u);

  std::vector<std::uint64_t> blocks;
  for (unsigned i = 0; i < kRetireLogCapacity; ++i) {
    blocks.push_back(alloc(48));
    c->reserve_retire(1);
    c->retire(blocks.back());
  }
  c->clear_intent();
  for (std::uint64_t b : blocks) ASSERT_TRUE(heap_->is_allocated(b));
  c->reserve_retire(2);  // the log is full: reserving drains it
  for (std::uint64_t b : blocks) ASSERT_FALSE(heap_->is_allocated(b));
  EXPECT_EQ(heap_->used_bytes(), 0u);
  expect_consistent();
}

TEST_F(HeapTest, DrainAllFreesEveryThreadsRetiredBlocks) {
  make();
  std::vector<std::uint64_t> blocks(3);
  std::latch retired(3);
  std::latch done(1);
  std::vector<std::thread> threads;
  for (int i = 0; i < 3; ++i) {
    threads.emplace_back([&, i] {
      ThreadCache* c = heap_->thread();
      c->allocate(100, &blocks[static_cast<std::size_t>(i)]);
      c->clear_intent();
      c->reserve_retire(1);
      c->retire(blocks[static_cast<std::size_t>(i)]);
      retired.count_down();
      done.wait();  // stay alive: exit would drain the log itself
    });
  }
  retired.wait();
  for (std::uint64_t b : blocks) EXPECT_TRUE(heap_->is_allocated(b));
  heap_->drain_all();
  for (std::uint64_t b : blocks) EXPECT_FALSE(heap_->is_allocated(b));
  done.count_down();
  for (std::thread& t : threads) t.join();
  expect_consistent();
}

// ---------------------------------------------------------------------------
// Thread caches.

TEST_F(HeapTest, ThreadExitDrainsItsLogAndReleasesItsSlot) {
  make();
  std::uint64_t off = 0;
  unsigned slot = kMaxThreads;
  std::thread t([&] {
    ThreadCache* c = heap_->thread();
    slot = c->slot();
    ASSERT_TRUE(c->allocate(500, &off).ok());
    c->clear_intent();
    c->reserve_retire(1);
    c->retire(off);
  });
  t.join();
  EXPECT_FALSE(heap_->is_allocated(off));
  EXPECT_EQ(log(slot).retired_count, 0u);
  EXPECT_EQ(heap_->used_bytes(), 0u);
  expect_consistent();
  // The slot is free again: the next thread gets it.
  unsigned next = kMaxThreads;
  std::thread u([&] { next = heap_->thread()->slot(); });
  u.join();
  EXPECT_EQ(next, slot);
}

TEST_F(HeapTest, TheThreadBeyondKMaxThreadsGetsBusy) {
  make();
  std::latch all_in(kMaxThreads);
  std::latch release(1);
  std::vector<std::thread> threads;
  std::vector<unsigned> slots(kMaxThreads, kMaxThreads);
  for (unsigned i = 0; i < kMaxThreads; ++i) {
    threads.emplace_back([&, i] {
      ThreadCache* c = heap_->thread();
      if (c != nullptr) slots[i] = c->slot();
      all_in.count_down();
      release.wait();
    });
  }
  all_in.wait();
  Status s;
  ThreadCache* extra = nullptr;
  std::thread late([&] { extra = heap_->thread(&s); });
  late.join();
  EXPECT_EQ(extra, nullptr);
  EXPECT_TRUE(s.is_busy()) << s.to_string();
  EXPECT_TRUE(contains(s.message(), "too many threads (256)")) << s.message();
  release.count_down();
  for (std::thread& t : threads) t.join();
  std::sort(slots.begin(), slots.end());
  for (unsigned i = 0; i < kMaxThreads; ++i) EXPECT_EQ(slots[i], i);
  std::thread again([&] { extra = heap_->thread(&s); });
  again.join();
  EXPECT_NE(extra, nullptr);
}

TEST_F(HeapTest, OneThreadUsesTwoHeapsAndOutlivesOne) {
  make();
  std::unique_ptr<media::Region> region2;
  ASSERT_TRUE(make_region(8 * kMiB, &region2));
  ASSERT_TRUE(Heap::format(*region2, kHeapOff, 8 * kMiB - kHeapOff).ok());
  std::unique_ptr<Heap> heap2;
  ASSERT_TRUE(Heap::open(*region2, kHeapOff, 8 * kMiB - kHeapOff, &heap2).ok());

  std::latch first_closed(1);
  std::latch used_both(1);
  std::thread t([&] {
    for (int i = 0; i < 100; ++i) {
      std::uint64_t a = 0;
      std::uint64_t b = 0;
      ASSERT_TRUE(heap_->thread()->allocate(64, &a).ok());
      ASSERT_TRUE(heap2->thread()->allocate(64, &b).ok());
      EXPECT_TRUE(heap_->is_allocated(a));
      EXPECT_TRUE(heap2->is_allocated(b));
    }
    EXPECT_NE(static_cast<void*>(heap_->thread()), static_cast<void*>(heap2->thread()));
    heap2->thread()->clear_intent();
    used_both.count_down();
    first_closed.wait();
    // Heap 2 is gone; this thread still uses heap 1 and then exits.
    std::uint64_t c = 0;
    ASSERT_TRUE(heap_->thread()->allocate(64, &c).ok());
    heap_->thread()->clear_intent();
  });
  used_both.wait();
  EXPECT_EQ(heap2->used_bytes(), 100u * 64);
  heap2.reset();
  first_closed.count_down();
  t.join();
  EXPECT_EQ(heap_->used_bytes(), 101u * 64);
  expect_consistent();
  // Heap 2 was closed cleanly while the thread still had a cache in it.
  ASSERT_TRUE(Heap::open(*region2, kHeapOff, 8 * kMiB - kHeapOff, &heap2).ok());
  EXPECT_EQ(heap2->used_bytes(), 100u * 64);
  EXPECT_TRUE(heap2->check().ok());
}

// ---------------------------------------------------------------------------
// Concurrency.

// Threads allocate blocks of mixed sizes, stamp each with its own offset,
// hand some to other threads to free, retire others; every block is checked
// to be intact before it is freed. A block handed out twice would be
// overwritten by its second owner's stamp.
TEST_F(HeapTest, ConcurrentAllocateFreeAndRetireNeverShareABlock) {
  make(128 * kMiB);
  constexpr int kThreads = 4;
  constexpr int kOps = 20000;
  std::mutex handoff_mu;
  std::vector<std::pair<std::uint64_t, std::size_t>> handoff;
  std::atomic<int> corrupt{0};
  std::atomic<int> failures{0};
  std::vector<std::vector<std::pair<std::uint64_t, std::size_t>>> kept(kThreads);
  std::barrier start(kThreads);

  auto stamp_size = [](std::size_t n) { return std::min<std::size_t>(n, 256); };
  auto worker = [&](int id) {
    std::mt19937_64 rng(static_cast<std::uint64_t>(id) + 1);
    ThreadCache* c = heap_->thread();
    auto& mine = kept[static_cast<std::size_t>(id)];
    start.arrive_and_wait();
    for (int i = 0; i < kOps; ++i) {
      const std::size_t n = (rng() % 200 == 0) ? kChunkSize + rng() % kChunkSize
                                               : 1 + rng() % ((rng() % 10 == 0) ? 8192 : 300);
      std::uint64_t off = 0;
      if (!c->allocate(n, &off).ok()) {
        failures.fetch_add(1);
        continue;
      }
      fill(region_->at(off), stamp_size(n), off);
      c->clear_intent();
      mine.emplace_back(off, n);
      const unsigned action = static_cast<unsigned>(rng() % 4);
      if (mine.size() < 64 && action != 0) continue;
      const std::size_t victim = rng() % mine.size();
      const auto [voff, vn] = mine[victim];
      mine[victim] = mine.back();
      mine.pop_back();
      if (!intact(region_->at(voff), stamp_size(vn), voff)) corrupt.fetch_add(1);
      switch (action) {
        case 0:
        case 1:
          c->free_unpublished(voff);
          break;
        case 2: {
          c->reserve_retire(1);
          c->retire(voff);
          break;
        }
        default: {
          std::lock_guard lock(handoff_mu);
          handoff.emplace_back(voff, vn);
        }
      }
      std::pair<std::uint64_t, std::size_t> theirs{0, 0};
      {
        std::lock_guard lock(handoff_mu);
        if (!handoff.empty()) {
          theirs = handoff.back();
          handoff.pop_back();
        }
      }
      if (theirs.first != 0) {
        if (!intact(region_->at(theirs.first), stamp_size(theirs.second), theirs.first)) {
          corrupt.fetch_add(1);
        }
        c->free_unpublished(theirs.first);
      }
    }
    c->drain_retired();
  };
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) threads.emplace_back(worker, i);
  for (std::thread& t : threads) t.join();

  EXPECT_EQ(corrupt.load(), 0);
  EXPECT_EQ(failures.load(), 0);
  std::map<std::uint64_t, std::size_t> live;
  for (const auto& v : kept) {
    for (const auto& [off, n] : v) {
      EXPECT_TRUE(live.emplace(off, n).second) << "block " << off << " owned twice";
    }
  }
  for (const auto& [off, n] : handoff) EXPECT_TRUE(live.emplace(off, n).second) << off;
  std::uint64_t sum = 0;
  std::uint64_t end = 0;
  for (const auto& [off, n] : live) {
    ASSERT_TRUE(heap_->is_allocated(off)) << off;
    EXPECT_TRUE(intact(region_->at(off), stamp_size(n), off)) << off;
    EXPECT_GE(off, end);
    end = off + heap_->block_size(off);
    sum += heap_->block_size(off);
  }
  EXPECT_EQ(heap_->used_bytes(), sum);
  std::size_t count = 0;
  heap_->for_each_allocated([&](std::uint64_t, std::size_t) { ++count; });
  EXPECT_EQ(count, live.size());
  expect_consistent();
  // The same after a clean reopen.
  reopen_clean();
  EXPECT_EQ(heap_->used_bytes(), sum);
  expect_consistent();
}

// Unlogged allocations and frees of mixed sizes; a quarter of the frees go
// to another thread, which then clears bits in chunks their owners are still
// allocating from. Each block carries its owner's pattern, checked before it
// is freed: a block handed out twice, or overlapping another, is overwritten.
TEST_F(HeapTest, ConcurrentUnloggedAllocateAndFreeNeverShareABlock) {
  make(128 * kMiB);
  constexpr int kThreads = 4;
  constexpr int kOps = 10000;
  struct Live {
    std::uint64_t off = 0;
    std::size_t n = 0;
    std::uint64_t tag = 0;
  };
  std::mutex handoff_mu;
  std::vector<Live> handoff;
  std::atomic<int> corrupt{0};
  std::atomic<int> failures{0};
  std::atomic<int> bad_dirty{0};
  std::vector<std::vector<Live>> kept(kThreads);
  std::barrier start(kThreads);

  auto stamp_size = [](std::size_t n) { return std::min<std::size_t>(n, 512); };
  auto worker = [&](int id) {
    std::mt19937_64 rng(static_cast<std::uint64_t>(id) + 7);
    ThreadCache* c = heap_->thread();
    auto& mine = kept[static_cast<std::size_t>(id)];
    auto release = [&](const Live& b) {
      if (!intact(region_->at(b.off), stamp_size(b.n), b.tag)) corrupt.fetch_add(1);
      const void* dirty = nullptr;
      c->free_unlogged(b.off, &dirty);
      // A run is freed durably (nothing left for a fence); a slab block
      // names its bitmap word.
      if (b.n > kMaxSmallSize ? dirty != nullptr : !in_heap(dirty)) bad_dirty.fetch_add(1);
    };
    start.arrive_and_wait();
    for (int i = 0; i < kOps; ++i) {
      Live b;
      b.n = (rng() % 200 == 0) ? kChunkSize + rng() % kChunkSize
                               : 1 + rng() % ((rng() % 10 == 0) ? 8192 : 300);
      const void* dirty = nullptr;
      if (!c->allocate_unlogged(b.n, &b.off, &dirty).ok()) {
        failures.fetch_add(1);
        continue;
      }
      if (!in_heap(dirty)) bad_dirty.fetch_add(1);
      b.tag = (static_cast<std::uint64_t>(id) << 56) | b.off;
      fill(region_->at(b.off), stamp_size(b.n), b.tag);
      mine.push_back(b);
      if (mine.size() < 64 && rng() % 2 == 0) continue;
      const std::size_t victim = rng() % mine.size();
      const Live v = mine[victim];
      mine[victim] = mine.back();
      mine.pop_back();
      if (rng() % 4 == 0) {
        std::lock_guard lock(handoff_mu);
        handoff.push_back(v);
      } else {
        release(v);
      }
      Live theirs;
      {
        std::lock_guard lock(handoff_mu);
        if (!handoff.empty()) {
          theirs = handoff.back();
          handoff.pop_back();
        }
      }
      if (theirs.off != 0) release(theirs);
    }
  };
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) threads.emplace_back(worker, i);
  for (std::thread& t : threads) t.join();

  EXPECT_EQ(corrupt.load(), 0);
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(bad_dirty.load(), 0);
  std::map<std::uint64_t, Live> live;
  for (const auto& v : kept) {
    for (const Live& b : v) EXPECT_TRUE(live.emplace(b.off, b).second) << "block " << b.off << " owned twice";
  }
  for (const Live& b : handoff) EXPECT_TRUE(live.emplace(b.off, b).second) << b.off;
  std::uint64_t sum = 0;
  std::uint64_t end = 0;
  for (const auto& [off, b] : live) {
    ASSERT_TRUE(heap_->is_allocated(off)) << off;
    EXPECT_TRUE(intact(region_->at(off), stamp_size(b.n), b.tag)) << off;
    EXPECT_GE(off, end) << "block " << off << " overlaps its predecessor";
    end = off + heap_->block_size(off);
    sum += heap_->block_size(off);
  }
  EXPECT_EQ(heap_->used_bytes(), sum);
  std::size_t count = 0;
  heap_->for_each_allocated([&](std::uint64_t, std::size_t) { ++count; });
  EXPECT_EQ(count, live.size());
  EXPECT_TRUE(all_logs_empty());
  expect_consistent();
  // Freeing the rest empties every slab chunk back into the free set.
  for (const auto& [off, b] : live) {
    const void* dirty = nullptr;
    tc()->free_unlogged(off, &dirty);
    EXPECT_NE(dirty, nullptr) << off;
  }
  EXPECT_EQ(heap_->used_bytes(), 0u);
  EXPECT_EQ(heap_->free_bytes(), geometry().chunk_count * kChunkSize);
  expect_consistent();
}

// Few blocks per chunk and a small heap: chunks fill, go partial, empty out
// (freed by other threads), return to the free set and come back as slabs of
// another class or as runs, all concurrently. NoSpace is expected now and
// then; corruption never. Once every block is freed and the threads have
// exited, the whole heap is free chunks again.
TEST_F(HeapTest, ConcurrentChurnMovesChunksBetweenClassesAndRuns) {
  make(12 * kMiB);
  constexpr int kThreads = 4;
  constexpr int kOps = 4000;
  const std::size_t sizes[] = {9000, 20000, 40000, 65536, 200000, 600000};
  std::mutex handoff_mu;
  std::vector<std::uint64_t> handoff;
  std::atomic<int> corrupt{0};
  std::atomic<int> no_space{0};
  std::barrier start(kThreads);
  auto worker = [&](int id) {
    std::mt19937_64 rng(static_cast<std::uint64_t>(id) + 100);
    ThreadCache* c = heap_->thread();
    std::vector<std::uint64_t> mine;
    unsigned retired = 0;
    auto release = [&](std::uint64_t off) {
      if (!intact(region_->at(off), 64, off)) corrupt.fetch_add(1);
      switch (rng() % 3) {
        case 0:
          c->free_unpublished(off);
          break;
        case 1:
          c->reserve_retire(1);
          c->retire(off);
          // A full log holds 125 big blocks: drain sooner to leave room.
          if (++retired % 16 == 0) c->drain_retired();
          break;
        default: {
          std::lock_guard lock(handoff_mu);
          handoff.push_back(off);
        }
      }
    };
    start.arrive_and_wait();
    for (int i = 0; i < kOps; ++i) {
      std::uint64_t off = 0;
      Status s = c->allocate(sizes[rng() % std::size(sizes)], &off);
      if (s.ok()) {
        fill(region_->at(off), 64, off);
        c->clear_intent();
        mine.push_back(off);
      } else if (s.is_no_space()) {
        no_space.fetch_add(1);
      } else {
        corrupt.fetch_add(1);
      }
      if (mine.size() > 6 || (!s.ok() && !mine.empty())) {
        const std::size_t victim = rng() % mine.size();
        release(mine[victim]);
        mine[victim] = mine.back();
        mine.pop_back();
      }
      std::uint64_t theirs = 0;
      {
        std::lock_guard lock(handoff_mu);
        if (!handoff.empty()) {
          theirs = handoff.back();
          handoff.pop_back();
        }
      }
      if (theirs != 0) {
        if (!intact(region_->at(theirs), 64, theirs)) corrupt.fetch_add(1);
        c->free_unpublished(theirs);
      }
    }
    for (std::uint64_t off : mine) c->free_unpublished(off);
  };
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) threads.emplace_back(worker, i);
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(corrupt.load(), 0);
  for (std::uint64_t off : handoff) tc()->free_unpublished(off);
  tc()->clear_intent();
  EXPECT_EQ(heap_->used_bytes(), 0u);
  EXPECT_EQ(heap_->free_bytes(), geometry().chunk_count * kChunkSize)
      << "every emptied slab chunk went back to the free set";
  expect_consistent();
  std::uint64_t all = 0;
  EXPECT_TRUE(tc()->allocate(geometry().chunk_count * kChunkSize, &all).ok());
  tc()->clear_intent();
  RecordProperty("no_space", no_space.load());
}

}  // namespace
}  // namespace pmhash::heap
