// Unit tests for media::Region: file and anonymous mappings, granularity
// detection (and PMEM2_FORCE_GRANULARITY), the flush/fence counters and the
// observer hook.
#include <fcntl.h>
#include <sys/stat.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "media/region.h"
#include "scratch_file.h"

namespace pmhash::media {
namespace {

constexpr std::size_t kFileSize = 64 * 1024;

// A file under /dev/shm, unique to this process and test, removed at the end.
class MediaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = testing::scratch_path("pmhash-media");
    testing::create_zero_file(path_, kFileSize);
  }
  void TearDown() override { ::unlink(path_.c_str()); }

  std::string read_back(std::size_t off, std::size_t n) const {
    std::string buf(n, '\0');
    const int fd = ::open(path_.c_str(), O_RDONLY);
    EXPECT_GE(fd, 0);
    EXPECT_EQ(::pread(fd, buf.data(), n, static_cast<off_t>(off)), static_cast<ssize_t>(n));
    ::close(fd);
    return buf;
  }

  std::string path_;
  testing::GranularityGuard granularity_;
};

TEST_F(MediaTest, MappedFileWritesReachTheFile) {
  std::unique_ptr<Region> r;
  ASSERT_TRUE(Region::map_file(path_, 0, &r).ok());
  ASSERT_EQ(r->size(), kFileSize);
  EXPECT_EQ(r->path(), path_);
  EXPECT_NE(r->granularity(), Granularity::kNone);

  const std::string msg = "durable bytes";
  std::memcpy(r->at<char>(4096 + 100), msg.data(), msg.size());
  r->persist(r->at(4096 + 100), msg.size());
  r.reset();  // unmaps

  EXPECT_EQ(read_back(4096 + 100, msg.size()), msg);
}

TEST_F(MediaTest, MapFileMapsOnlyTheRequestedPrefix) {
  std::unique_ptr<Region> r;
  ASSERT_TRUE(Region::map_file(path_, 8192, &r).ok());
  EXPECT_EQ(r->size(), 8192u);
}

TEST_F(MediaTest, OffsetHelpersAreInverse) {
  std::unique_ptr<Region> r;
  ASSERT_TRUE(Region::map_file(path_, 0, &r).ok());
  EXPECT_EQ(r->offset_of(r->at(12345)), 12345u);
  EXPECT_EQ(r->at(0), r->base());
}

TEST_F(MediaTest, FlushAndDrainAreCounted) {
  std::unique_ptr<Region> r;
  ASSERT_TRUE(Region::map_file(path_, 0, &r).ok());

  const Counters c0 = counters();
  r->flush(r->base(), 64);
  const Counters c1 = counters();
  EXPECT_EQ(c1.flushes, c0.flushes + 1);
  EXPECT_EQ(c1.fences, c0.fences);

  r->drain();
  const Counters c2 = counters();
  EXPECT_EQ(c2.flushes, c1.flushes);
  EXPECT_EQ(c2.fences, c1.fences + 1);

  r->persist(r->base(), 128);
  const Counters c3 = counters();
  EXPECT_EQ(c3.flushes, c2.flushes + 1);
  EXPECT_EQ(c3.fences, c2.fences + 1);

  r->persist_all();
  const Counters c4 = counters();
  EXPECT_EQ(c4.flushes, c3.flushes + 1);
  EXPECT_EQ(c4.fences, c3.fences + 1);
}

TEST_F(MediaTest, CountsOfExitedThreadsAreKept) {
  std::unique_ptr<Region> r;
  ASSERT_TRUE(Region::map_file(path_, 0, &r).ok());
  constexpr int kThreads = 4;
  constexpr int kPerThread = 25;

  const Counters before = counters();
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&r, t] {
      for (int i = 0; i < kPerThread; ++i) {
        r->flush(r->at(static_cast<std::uint64_t>(t) * kCacheLineSize), kCacheLineSize);
        r->drain();
      }
    });
  }
  for (auto& th : threads) th.join();
  // Every thread has exited: its counts must have moved to the retired total.
  const Counters after = counters();
  EXPECT_EQ(after.flushes - before.flushes, std::uint64_t{kThreads * kPerThread});
  EXPECT_EQ(after.fences - before.fences, std::uint64_t{kThreads * kPerThread});
}

TEST_F(MediaTest, AnonymousRegionIsZeroedAndVolatile) {
  constexpr std::size_t kSize = 1 << 20;
  std::unique_ptr<Region> r;
  ASSERT_TRUE(Region::anonymous(kSize, &r).ok());
  ASSERT_EQ(r->size(), kSize);
  EXPECT_EQ(r->granularity(), Granularity::kNone);
  EXPECT_TRUE(r->path().empty());
  for (std::size_t i = 0; i < kSize; ++i) ASSERT_EQ(r->base()[i], std::byte{0}) << "at " << i;

  // The primitives are no-ops but still counted (see region.cc).
  r->base()[10] = std::byte{7};
  const Counters c0 = counters();
  r->persist(r->at(10), 1);
  r->persist_all();
  const Counters c1 = counters();
  EXPECT_EQ(c1.flushes, c0.flushes + 2);
  EXPECT_EQ(c1.fences, c0.fences + 2);
  EXPECT_EQ(r->base()[10], std::byte{7});
}

TEST_F(MediaTest, AnonymousRegionOfZeroBytesIsRejected) {
  std::unique_ptr<Region> r;
  EXPECT_TRUE(Region::anonymous(0, &r).is_invalid_argument());
  EXPECT_EQ(r, nullptr);
}

TEST(MediaGranularity, NamesMatchThePmem2Spelling) {
  EXPECT_EQ(granularity_name(Granularity::kByte), "byte");
  EXPECT_EQ(granularity_name(Granularity::kCacheLine), "cache_line");
  EXPECT_EQ(granularity_name(Granularity::kPage), "page");
  EXPECT_EQ(granularity_name(Granularity::kNone), "none");
}

TEST_F(MediaTest, ForcedGranularityIsHonoured) {
  const struct {
    const char* env;
    Granularity want;
  } cases[] = {
      {"page", Granularity::kPage},
      {"cache_line", Granularity::kCacheLine},
      {"byte", Granularity::kByte},
  };
  for (const auto& c : cases) {
    ASSERT_EQ(::setenv("PMEM2_FORCE_GRANULARITY", c.env, 1), 0);
    std::unique_ptr<Region> r;
    const Status s = Region::map_file(path_, 0, &r);
    ASSERT_TRUE(s.ok()) << c.env << ": " << s.to_string();
    EXPECT_EQ(r->granularity(), c.want) << c.env;

    // Each forced mode must still make writes reach the file.
    r->at<char>(0)[0] = c.env[0];
    r->persist(r->base(), 1);
    r->persist_all();
    r.reset();
    EXPECT_EQ(read_back(0, 1), std::string(1, c.env[0])) << c.env;
  }
}

// The VmFlags line of the mapping that starts at `base` in
// /proc/self/smaps ("" when there is none).
std::string vm_flags_of(const void* base) {
  std::ifstream smaps("/proc/self/smaps");
  const auto start = reinterpret_cast<std::uintptr_t>(base);
  bool ours = false;
  for (std::string line; std::getline(smaps, line);) {
    const std::size_t dash = line.find('-');
    if (dash != std::string::npos && dash > 0 &&
        line.find_first_not_of("0123456789abcdef") == dash) {
      ours = std::stoull(line.substr(0, dash), nullptr, 16) == start;
    } else if (ours && line.rfind("VmFlags:", 0) == 0) {
      return line;
    }
  }
  return "";
}

// A shared file mapping (byte, cache_line) is advised to use huge pages
// (VmFlags "hg"), and over several 2 MiB extents every word stored and
// persisted reaches the file and reads back the same through a new mapping.
// The private mapping of page granularity is not advised.
TEST_F(MediaTest, HugePageAdviceKeepsTheDataRoundTripping) {
  constexpr std::size_t kBig = 6 << 20;
  const std::string big = path_ + ".big";
  struct Remove {
    std::string path;
    ~Remove() { ::unlink(path.c_str()); }
  } remove{big};
  testing::create_zero_file(big, kBig);
  const auto word_for = [](std::size_t page) { return 0x9e3779b97f4a7c15ull * (page + 1); };
  for (const char* g : {"cache_line", "byte"}) {
    granularity_.force(g);
    {
      std::unique_ptr<Region> r;
      const Status s = Region::map_file(big, 0, &r);
      ASSERT_TRUE(s.ok()) << g << ": " << s.to_string();
      EXPECT_NE(vm_flags_of(r->base()).find(" hg"), std::string::npos)
          << g << ": " << vm_flags_of(r->base());
      for (std::size_t page = 0; page < kBig / 4096; ++page) {
        const std::uint64_t w = word_for(page) ^ static_cast<std::uint64_t>(g[0]);
        std::memcpy(r->at(page * 4096 + 8), &w, sizeof(w));
        r->flush(r->at(page * 4096 + 8), sizeof(w));
      }
      r->drain();
    }
    std::unique_ptr<Region> again;
    ASSERT_TRUE(Region::map_file(big, 0, &again).ok()) << g;
    for (std::size_t page = 0; page < kBig / 4096; ++page) {
      std::uint64_t w = 0;
      std::memcpy(&w, again->at(page * 4096 + 8), sizeof(w));
      ASSERT_EQ(w, word_for(page) ^ static_cast<std::uint64_t>(g[0])) << g << " page " << page;
    }
  }
  granularity_.force("page");
  std::unique_ptr<Region> r;
  ASSERT_TRUE(Region::map_file(big, 0, &r).ok());
  EXPECT_EQ(vm_flags_of(r->base()).find(" hg"), std::string::npos) << vm_flags_of(r->base());
}

// populate() allocates every page of a sparse file through a shared
// mapping (as a pool on tmpfs is created) without changing a byte, and
// refuses mappings where write faults would not allocate the file's pages.
TEST_F(MediaTest, PopulateAllocatesEveryPageOfASharedFileMapping) {
  constexpr std::size_t kSize = 4 << 20;
  const std::string sparse = path_ + ".sparse";
  struct Remove {
    std::string path;
    ~Remove() { ::unlink(path.c_str()); }
  } remove{sparse};
  testing::create_zero_file(sparse, kSize);  // ftruncate: no blocks yet
  const auto blocks = [&] {
    struct stat st {};
    EXPECT_EQ(::stat(sparse.c_str(), &st), 0);
    return static_cast<std::uint64_t>(st.st_blocks) * 512;
  };
  ASSERT_LT(blocks(), kSize);
  granularity_.force("cache_line");
  std::unique_ptr<Region> r;
  ASSERT_TRUE(Region::map_file(sparse, 0, &r).ok());
  const Status s = r->populate();
  if (s.is_not_supported()) {
    // A kernel before 5.14: the message says what is missing.
    EXPECT_NE(s.message().find("MADV_POPULATE_WRITE"), std::string::npos) << s.to_string();
  } else {
    ASSERT_TRUE(s.ok()) << s.to_string();
    EXPECT_GE(blocks(), kSize);
    for (std::size_t off = 0; off < kSize; off += 4096) ASSERT_EQ(r->at<char>(off)[0], 0) << off;
  }
  r.reset();

  granularity_.force("page");
  ASSERT_TRUE(Region::map_file(sparse, 0, &r).ok());
  EXPECT_TRUE(r->populate().is_not_supported());
  std::unique_ptr<Region> anon;
  ASSERT_TRUE(Region::anonymous(kSize, &anon).ok());
  EXPECT_TRUE(anon->populate().is_not_supported());
}

// Page granularity maps the file privately: a store reaches the file only
// through flush (pwrite of its lines), so the write-back is exactly what the
// program asked for, and persist_all writes every page the program stored to.
TEST_F(MediaTest, PageGranularityWritesBackOnlyWhatIsFlushed) {
  granularity_.force("page");
  std::unique_ptr<Region> r;
  ASSERT_TRUE(Region::map_file(path_, 0, &r).ok());
  ASSERT_EQ(r->granularity(), Granularity::kPage);

  std::memcpy(r->at<char>(100), "flushed", 7);
  std::memcpy(r->at<char>(8192), "not yet", 7);
  r->flush(r->at(100), 7);
  EXPECT_EQ(read_back(100, 7), "flushed");               // pwrite: in the file
  EXPECT_EQ(read_back(8192, 7), std::string(7, '\0'));  // only in the mapping
  r->drain();
  EXPECT_TRUE(r->write_back_error().ok());
  EXPECT_EQ(r->at<char>(8192)[0], 'n');  // the program sees its own store

  // The line around a flushed range goes too, whole: a neighbour's bytes
  // in the same 64-byte line reach the file with it.
  std::memcpy(r->at<char>(130), "line", 4);
  r->persist(r->at(128), 1);
  EXPECT_EQ(read_back(130, 4), "line");
  r.reset();
  EXPECT_EQ(read_back(8192, 7), std::string(7, '\0'));  // never flushed: lost
}

// Group commit (region.h, "Shared file syncs"). The first drain's
// fdatasync is held at its start (the sync hook) until eight more threads
// have each written back a line and asked for a drain. A sync that was
// running when a thread asked does not cover it: none of the eight may
// return before a second sync, and that one covers all eight.
std::atomic<Region*> held_region{nullptr};
std::atomic<std::uint64_t> hold_until_requests{0};

void hold_first_sync(Region& r) {
  if (held_region.load() != &r) return;
  held_region.store(nullptr);  // only the first sync waits
  while (r.file_sync_requests() < hold_until_requests.load()) std::this_thread::yield();
}

TEST_F(MediaTest, PageGranularityDrainsOfConcurrentThreadsShareOneSync) {
  granularity_.force("page");
  std::unique_ptr<Region> r;
  ASSERT_TRUE(Region::map_file(path_, 0, &r).ok());
  ASSERT_EQ(r->granularity(), Granularity::kPage);
  constexpr int kThreads = 8;
  hold_until_requests.store(1 + kThreads);
  held_region.store(r.get());
  Region::set_sync_hook(hold_first_sync);

  std::memcpy(r->at<char>(0), "leader", 6);
  r->flush(r->at(0), 6);
  std::thread leader([&] { r->drain(); });
  while (r->file_sync_requests() < 1) std::this_thread::yield();

  std::vector<std::uint64_t> syncs_seen(kThreads, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      const std::size_t off = 4096 * static_cast<std::size_t>(t + 1);
      std::memcpy(r->at<char>(off), "drained", 7);
      r->flush(r->at(off), 7);
      r->drain();
      syncs_seen[static_cast<std::size_t>(t)] = r->file_syncs();
    });
  }
  leader.join();
  for (auto& th : threads) th.join();
  Region::set_sync_hook(nullptr);

  for (int t = 0; t < kThreads; ++t) {
    EXPECT_EQ(syncs_seen[static_cast<std::size_t>(t)], 2u) << "thread " << t;
    EXPECT_EQ(read_back(4096 * static_cast<std::size_t>(t + 1), 7), "drained");
  }
  EXPECT_EQ(r->file_sync_requests(), 1u + kThreads);
  EXPECT_EQ(r->file_syncs(), 2u);  // nine drains, two fdatasyncs
  EXPECT_TRUE(r->write_back_error().ok());
}

// One thread alone: every drain is a sync of its own (nothing to share).
TEST_F(MediaTest, PageGranularityDrainsOfOneThreadEachSync) {
  granularity_.force("page");
  std::unique_ptr<Region> r;
  ASSERT_TRUE(Region::map_file(path_, 0, &r).ok());
  for (int i = 0; i < 3; ++i) r->persist(r->at(64 * static_cast<std::size_t>(i)), 8);
  EXPECT_EQ(r->file_syncs(), 3u);
  EXPECT_EQ(r->file_sync_requests(), 3u);
}

TEST_F(MediaTest, PageGranularityPersistAllWritesEveryTouchedPage) {
  granularity_.force("page");
  std::unique_ptr<Region> r;
  ASSERT_TRUE(Region::map_file(path_, 0, &r).ok());
  ASSERT_EQ(r->granularity(), Granularity::kPage);
  const std::size_t offsets[] = {0, 5000, 4096 * 7 + 3, kFileSize - 8};
  for (std::size_t off : offsets) r->at<char>(off)[0] = 'x';
  (void)r->at<volatile char>(4096 * 9)[0];  // read only: stays the file's page
  r->persist_all();
  EXPECT_TRUE(r->write_back_error().ok());
  r.reset();
  for (std::size_t off : offsets) EXPECT_EQ(read_back(off, 1), "x") << off;
}

// A store racing with the write-back of its line reaches the file whole:
// each 8-byte word is copied with one load, so the file holds the old or
// the new value of a word, never a mix (the model's 8-byte atomicity).
TEST_F(MediaTest, PageWriteBackNeverTearsAWord) {
  granularity_.force("page");
  std::unique_ptr<Region> r;
  ASSERT_TRUE(Region::map_file(path_, 0, &r).ok());
  auto* word = r->at<std::uint64_t>(64);
  std::atomic<bool> stop{false};
  std::thread writer([&] {
    for (std::uint64_t i = 0; !stop.load(std::memory_order_relaxed); ++i) {
      // Either all bytes 0x00..., or all 0xff...: a tear mixes them.
      __atomic_store_n(word, (i & 1) ? ~std::uint64_t{0} : 0, __ATOMIC_RELAXED);
    }
  });
  for (int i = 0; i < 2000; ++i) {
    r->flush(word, sizeof(*word));
    const std::string bytes = read_back(64, 8);
    const bool zeros = bytes == std::string(8, '\0');
    const bool ones = bytes == std::string(8, '\xff');
    EXPECT_TRUE(zeros || ones) << "torn word in the file at round " << i;
    if (!zeros && !ones) break;
  }
  stop = true;
  writer.join();
}

TEST_F(MediaTest, MapFileOnMissingPathIsIOErrorNamingThePath) {
  const std::string missing = path_ + "-missing";
  std::unique_ptr<Region> r;
  const Status s = Region::map_file(missing, 0, &r);
  EXPECT_TRUE(s.is_io_error()) << s.to_string();
  EXPECT_NE(s.message().find(missing), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("No such file"), std::string::npos) << s.message();
  EXPECT_EQ(r, nullptr);
}

TEST_F(MediaTest, MapFileBeyondTheFileIsIOError) {
  std::unique_ptr<Region> r;
  const Status s = Region::map_file(path_, 2 * kFileSize, &r);
  EXPECT_TRUE(s.is_io_error()) << s.to_string();
  EXPECT_NE(s.message().find(path_), std::string::npos) << s.message();
  EXPECT_EQ(r, nullptr);
}

TEST_F(MediaTest, MapFileOfEmptyFileIsIOError) {
  ASSERT_EQ(::truncate(path_.c_str(), 0), 0);
  std::unique_ptr<Region> r;
  const Status s = Region::map_file(path_, 0, &r);
  EXPECT_TRUE(s.is_io_error()) << s.to_string();
  EXPECT_NE(s.message().find(path_), std::string::npos) << s.message();
}

struct RecordingObserver : Region::Observer {
  std::vector<std::pair<std::uint64_t, std::size_t>> flushes;
  int drains = 0;
  void on_flush(std::uint64_t off, std::size_t n) override { flushes.emplace_back(off, n); }
  void on_drain() override { ++drains; }
};

TEST_F(MediaTest, ObserverSeesEveryFlushAndDrainByOffset) {
  std::unique_ptr<Region> r;
  ASSERT_TRUE(Region::map_file(path_, 0, &r).ok());
  RecordingObserver obs;
  r->set_observer(&obs);

  r->flush(r->at(128), 16);
  r->persist(r->at(4096), 64);
  r->drain();
  r->persist_all();
  r->set_observer(nullptr);
  r->persist(r->at(0), 8);  // not reported any more

  using P = std::pair<std::uint64_t, std::size_t>;
  EXPECT_EQ(obs.flushes, (std::vector<P>{{128, 16}, {4096, 64}, {0, kFileSize}}));
  EXPECT_EQ(obs.drains, 3);
}

}  // namespace
}  // namespace pmhash::media
