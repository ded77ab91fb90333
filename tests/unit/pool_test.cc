// Unit tests for pool::Pool: create/open round trips, the shutdown state,
// and every way open() and create() refuse a file, each checked to leave the
// file byte-for-byte unchanged.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <cstddef>
#include <cstring>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "pool/pool.h"

namespace pmhash::pool {
namespace {

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  EXPECT_TRUE(in.good()) << path;
  std::string bytes(static_cast<std::size_t>(in.tellg()), '\0');
  in.seekg(0);
  in.read(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  EXPECT_TRUE(in.good()) << path;
  return bytes;
}

void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  ASSERT_TRUE(out.good()) << path;
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << path;
}

bool exists(const std::string& path) { return ::access(path.c_str(), F_OK) == 0; }

bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

// Reads the on-file header out of a byte image.
PoolHeader header_of(const std::string& bytes) {
  PoolHeader h{};
  EXPECT_GE(bytes.size(), sizeof(h));
  std::memcpy(&h, bytes.data(), sizeof(h));
  return h;
}

void put_header(std::string* bytes, const PoolHeader& h) {
  std::memcpy(bytes->data(), &h, sizeof(h));
}

std::uint64_t checksum_of(const PoolHeader& h) {
  return XXH3_64bits(&h, offsetof(PoolHeader, checksum));
}

class PoolTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    prefix_ = "/dev/shm/pmhash-pool-" + std::to_string(::getpid()) + "-" + info->name();
    path_ = temp("pool");
  }
  void TearDown() override {
    for (const auto& p : temps_) ::unlink(p.c_str());
  }

  // A unique path under /dev/shm, removed after the test.
  std::string temp(const std::string& what) {
    temps_.push_back(prefix_ + "-" + what);
    return temps_.back();
  }

  static CreateParams params(const std::string& engine = "clevel",
                             std::uint64_t size = kMinPoolSize) {
    CreateParams p;
    p.engine = engine;
    p.size = size;
    for (std::size_t i = 0; i < p.engine_params.size(); ++i) {
      p.engine_params[i] = static_cast<std::uint8_t>(i * 7 + 1);
    }
    return p;
  }

  // Creates a pool at path_ and closes it cleanly.
  void make_pool(const std::string& engine = "clevel") {
    std::unique_ptr<Pool> p;
    const Status s = Pool::create(path_, params(engine), &p);
    ASSERT_TRUE(s.ok()) << s.to_string();
    p->mark_clean_shutdown();
  }

  // Expects open(path, engine) to fail with `code` and a message holding
  // every string of `want`, without changing a byte of the file.
  void expect_open_rejects(const std::string& path, const std::string& engine, Status::Code code,
                           const std::vector<std::string>& want) {
    const std::string before = read_file(path);
    std::unique_ptr<Pool> p;
    const Status s = Pool::open(path, engine, &p);
    EXPECT_EQ(s.code(), code) << s.to_string();
    EXPECT_EQ(p, nullptr);
    EXPECT_TRUE(contains(s.message(), path)) << s.message();
    for (const auto& w : want) EXPECT_TRUE(contains(s.message(), w)) << s.message();
    const std::string after = read_file(path);
    EXPECT_EQ(before.size(), after.size());
    EXPECT_TRUE(before == after) << "open modified a file it rejected";
  }

  std::string prefix_;
  std::string path_;
  std::vector<std::string> temps_;
};

TEST_F(PoolTest, CreateThenOpenRoundTripsHeaderAndParams) {
  const CreateParams cp = params("clevel");
  PoolHeader created{};
  {
    std::unique_ptr<Pool> p;
    const Status s = Pool::create(path_, cp, &p);
    ASSERT_TRUE(s.ok()) << s.to_string();
    EXPECT_EQ(p->engine(), "clevel");
    EXPECT_EQ(p->path(), path_);
    EXPECT_TRUE(p->was_clean());
    EXPECT_EQ(p->generation(), 1u);
    EXPECT_TRUE(p->verify_header().ok());
    EXPECT_EQ(p->root(), p->region().base() + kRootOffset);
    EXPECT_EQ(p->heap_offset(), kHeapOffset);
    EXPECT_EQ(p->heap_size(), kMinPoolSize - kHeapOffset);
    EXPECT_EQ(p->region().size(), kMinPoolSize);
    for (std::uint64_t i = 0; i < kRootSize; ++i) ASSERT_EQ(p->root()[i], std::byte{0});
    created = p->header();
    p->mark_clean_shutdown();
  }

  // The file holds exactly the header create reported, with a valid XXH3.
  const PoolHeader on_file = header_of(read_file(path_));
  EXPECT_EQ(std::memcmp(&on_file, &created, sizeof(PoolHeader)), 0);
  EXPECT_EQ(on_file.checksum, checksum_of(on_file));
  EXPECT_EQ(std::memcmp(on_file.magic, kMagic, sizeof(kMagic)), 0);
  EXPECT_EQ(on_file.layout_version, kLayoutVersion);
  EXPECT_EQ(on_file.header_size, sizeof(PoolHeader));
  EXPECT_EQ(on_file.pool_size, kMinPoolSize);
  EXPECT_EQ(std::string(on_file.engine), "clevel");
  EXPECT_NE(on_file.create_time_ns, 0u);

  std::unique_ptr<Pool> p;
  const Status s = Pool::open(path_, "", &p);  // "" accepts any engine
  ASSERT_TRUE(s.ok()) << s.to_string();
  EXPECT_EQ(p->engine(), "clevel");
  EXPECT_EQ(std::memcmp(&p->header(), &created, sizeof(PoolHeader)), 0);
  EXPECT_EQ(std::memcmp(p->header().uuid, created.uuid, sizeof(created.uuid)), 0);
  EXPECT_EQ(std::memcmp(p->header().engine_params, cp.engine_params.data(), kEngineParamsSize), 0);
  EXPECT_TRUE(p->verify_header().ok());
}

TEST_F(PoolTest, GenerationGrowsWithEveryOpenAndCleanFlagTracksShutdown) {
  {
    std::unique_ptr<Pool> p;
    ASSERT_TRUE(Pool::create(path_, params(), &p).ok());
    EXPECT_EQ(p->generation(), 1u);
    p->mark_clean_shutdown();
  }
  {
    std::unique_ptr<Pool> p;
    ASSERT_TRUE(Pool::open(path_, "clevel", &p).ok());
    EXPECT_EQ(p->generation(), 2u);
    EXPECT_TRUE(p->was_clean());
    p->begin_session();
    // Dropped without mark_clean_shutdown: a crash as far as the file knows.
  }
  {
    std::unique_ptr<Pool> p;
    ASSERT_TRUE(Pool::open(path_, "clevel", &p).ok());
    EXPECT_EQ(p->generation(), 3u);
    EXPECT_FALSE(p->was_clean());
    p->begin_session();
    p->mark_clean_shutdown();
  }
  std::unique_ptr<Pool> p;
  ASSERT_TRUE(Pool::open(path_, "clevel", &p).ok());
  EXPECT_EQ(p->generation(), 4u);
  EXPECT_TRUE(p->was_clean());
}

// The heap or the engine may still reject a pool that Pool::open accepted;
// only begin_session() writes, so a rejected pool stays unchanged.
TEST_F(PoolTest, OpenWritesNothingUntilTheSessionBegins) {
  make_pool();
  const std::string before = read_file(path_);
  for (int i = 0; i < 2; ++i) {
    std::unique_ptr<Pool> p;
    ASSERT_TRUE(Pool::open(path_, "clevel", &p).ok());
    EXPECT_EQ(p->generation(), 2u);  // the same every time: never persisted
    EXPECT_TRUE(p->was_clean());
  }
  EXPECT_TRUE(read_file(path_) == before) << "open wrote to the pool";
  {
    std::unique_ptr<Pool> p;
    ASSERT_TRUE(Pool::open(path_, "clevel", &p).ok());
    p->begin_session();
  }
  EXPECT_FALSE(read_file(path_) == before);
  std::unique_ptr<Pool> p;
  ASSERT_TRUE(Pool::open(path_, "clevel", &p).ok());
  EXPECT_EQ(p->generation(), 3u);
  EXPECT_FALSE(p->was_clean());
}

TEST_F(PoolTest, PoolDroppedRightAfterCreateIsNotClean) {
  {
    std::unique_ptr<Pool> p;
    ASSERT_TRUE(Pool::create(path_, params(), &p).ok());
  }
  std::unique_ptr<Pool> p;
  ASSERT_TRUE(Pool::open(path_, "", &p).ok());
  EXPECT_FALSE(p->was_clean());
  EXPECT_EQ(p->generation(), 2u);
}

TEST_F(PoolTest, EveryPoolGetsItsOwnUuid) {
  const std::string other = temp("other");
  std::unique_ptr<Pool> a, b;
  ASSERT_TRUE(Pool::create(path_, params(), &a).ok());
  ASSERT_TRUE(Pool::create(other, params(), &b).ok());
  EXPECT_NE(std::memcmp(a->header().uuid, b->header().uuid, sizeof(a->header().uuid)), 0);
}

TEST_F(PoolTest, SizeIsRoundedUpToWholePages) {
  std::unique_ptr<Pool> p;
  ASSERT_TRUE(Pool::create(path_, params("clevel", kMinPoolSize + 1), &p).ok());
  const std::uint64_t size = p->header().pool_size;
  EXPECT_GT(size, kMinPoolSize);
  EXPECT_EQ(size % 4096, 0u);
  EXPECT_EQ(p->region().size(), size);
  EXPECT_EQ(p->heap_size(), size - kHeapOffset);
  struct stat st {};
  ASSERT_EQ(::stat(path_.c_str(), &st), 0);
  EXPECT_EQ(static_cast<std::uint64_t>(st.st_size), size);
}

TEST_F(PoolTest, OpenRejectsRandomBytesAsNotAPool) {
  std::string junk(8192, '\0');
  std::mt19937_64 rng(42);
  for (auto& c : junk) c = static_cast<char>(rng());
  write_file(path_, junk);
  expect_open_rejects(path_, "", Status::Code::kCorruption, {"not a pmhash pool", "bad magic"});
}

TEST_F(PoolTest, OpenRejectsEmptyFile) {
  write_file(path_, "");
  expect_open_rejects(path_, "", Status::Code::kCorruption,
                      {"truncated or not a pool", "file is 0 bytes", "needs 4096"});
}

TEST_F(PoolTest, OpenRejectsTruncatedPool) {
  make_pool();
  const std::string bytes = read_file(path_);
  const std::string cut = temp("cut");
  write_file(cut, bytes.substr(0, bytes.size() / 2));
  expect_open_rejects(cut, "", Status::Code::kCorruption,
                      {"truncated: file is " + std::to_string(bytes.size() / 2) + " bytes",
                       "header says " + std::to_string(bytes.size())});
}

TEST_F(PoolTest, OpenRejectsCorruptedHeaderByChecksum) {
  make_pool();
  std::string bytes = read_file(path_);
  bytes[offsetof(PoolHeader, engine)] ^= 0x20;  // "clevel" -> "Clevel"
  write_file(path_, bytes);
  expect_open_rejects(path_, "", Status::Code::kCorruption, {"header checksum mismatch"});
}

TEST_F(PoolTest, OpenRejectsOtherLayoutVersion) {
  make_pool();
  std::string bytes = read_file(path_);
  PoolHeader h = header_of(bytes);
  h.layout_version = kLayoutVersion + 1;
  h.checksum = checksum_of(h);  // so that only the version is wrong
  put_header(&bytes, h);
  write_file(path_, bytes);
  expect_open_rejects(path_, "", Status::Code::kCorruption,
                      {"layout version " + std::to_string(kLayoutVersion + 1),
                       "version " + std::to_string(kLayoutVersion)});
}

TEST_F(PoolTest, OpenRejectsInconsistentHeaderFields) {
  make_pool();
  std::string bytes = read_file(path_);
  PoolHeader h = header_of(bytes);
  h.heap_size += 4096;
  h.checksum = checksum_of(h);
  put_header(&bytes, h);
  write_file(path_, bytes);
  expect_open_rejects(path_, "", Status::Code::kCorruption, {"inconsistent header", "heap_size"});
}

TEST_F(PoolTest, OpenRejectsEngineMismatch) {
  make_pool("clevel");
  expect_open_rejects(path_, "dali", Status::Code::kInvalidArgument,
                      {"engine mismatch", "file holds 'clevel', asked for 'dali'",
                       "--engine clevel"});
}

TEST_F(PoolTest, OpenOfMissingFileIsIOErrorNamingThePath) {
  std::unique_ptr<Pool> p;
  const Status s = Pool::open(path_, "", &p);
  EXPECT_TRUE(s.is_io_error()) << s.to_string();
  EXPECT_TRUE(contains(s.message(), path_)) << s.message();
  EXPECT_FALSE(exists(path_));
}

TEST_F(PoolTest, CreateOverExistingFileWithoutForceLeavesItUnchanged) {
  write_file(path_, "precious data, not a pool");
  const std::string before = read_file(path_);
  std::unique_ptr<Pool> p;
  const Status s = Pool::create(path_, params(), &p);
  EXPECT_TRUE(s.is_already_exists()) << s.to_string();
  EXPECT_TRUE(contains(s.message(), path_)) << s.message();
  EXPECT_TRUE(contains(s.message(), "--force")) << s.message();
  EXPECT_EQ(p, nullptr);
  EXPECT_TRUE(read_file(path_) == before);
}

TEST_F(PoolTest, CreateOverExistingPoolWithoutForceLeavesItUnchanged) {
  make_pool();
  const std::string before = read_file(path_);
  std::unique_ptr<Pool> p;
  EXPECT_TRUE(Pool::create(path_, params("dali"), &p).is_already_exists());
  EXPECT_TRUE(read_file(path_) == before);
}

TEST_F(PoolTest, CreateWithForceReplacesTheFile) {
  make_pool("clevel");
  const PoolHeader old = header_of(read_file(path_));
  {
    CreateParams cp = params("dali");
    cp.force = true;
    std::unique_ptr<Pool> p;
    const Status s = Pool::create(path_, cp, &p);
    ASSERT_TRUE(s.ok()) << s.to_string();
    EXPECT_EQ(p->generation(), 1u);
    p->mark_clean_shutdown();
  }
  std::unique_ptr<Pool> p;
  ASSERT_TRUE(Pool::open(path_, "dali", &p).ok());
  EXPECT_EQ(p->engine(), "dali");
  EXPECT_NE(std::memcmp(p->header().uuid, old.uuid, sizeof(old.uuid)), 0);
  EXPECT_EQ(p->generation(), 2u);
}

// A pool is held by one Pool at a time: a second open, or a create with
// force, fails with Busy and changes nothing, in this process or another one
// (flock locks belong to the open file, so both cases are the same here).
TEST_F(PoolTest, APoolThatIsOpenCannotBeOpenedOrReplacedAgain) {
  make_pool();
  std::unique_ptr<Pool> holder;
  ASSERT_TRUE(Pool::open(path_, "clevel", &holder).ok());
  holder->begin_session();
  const std::uint64_t generation = holder->generation();

  expect_open_rejects(path_, "", Status::Code::kBusy, {"in use"});
  const std::string before = read_file(path_);
  CreateParams cp = params("dali");
  cp.force = true;
  std::unique_ptr<Pool> p;
  const Status s = Pool::create(path_, cp, &p);
  EXPECT_EQ(s.code(), Status::Code::kBusy) << s.to_string();
  EXPECT_TRUE(contains(s.message(), path_)) << s.message();
  EXPECT_TRUE(read_file(path_) == before) << "create --force changed a pool in use";
  EXPECT_EQ(holder->engine(), "clevel");
  EXPECT_TRUE(holder->verify_header().ok());

  // Released when the holder goes away (a process's locks also go with it).
  holder->mark_clean_shutdown();
  holder.reset();
  ASSERT_TRUE(Pool::open(path_, "clevel", &p).ok());
  EXPECT_EQ(p->generation(), generation + 1);
}

TEST_F(PoolTest, CreateWithForceReplacesANonPoolFile) {
  write_file(path_, std::string(100, 'x'));
  CreateParams cp = params();
  cp.force = true;
  std::unique_ptr<Pool> p;
  ASSERT_TRUE(Pool::create(path_, cp, &p).ok());
  EXPECT_EQ(read_file(path_).size(), kMinPoolSize);
}

TEST_F(PoolTest, CreateInMissingDirectoryIsIOErrorNamingThePath) {
  const std::string dir = prefix_ + "-no-such-dir";
  const std::string path = dir + "/pool";
  std::unique_ptr<Pool> p;
  const Status s = Pool::create(path, params(), &p);
  EXPECT_TRUE(s.is_io_error()) << s.to_string();
  EXPECT_TRUE(contains(s.message(), path)) << s.message();
  EXPECT_TRUE(contains(s.message(), "No such file or directory")) << s.message();
  EXPECT_FALSE(exists(dir));
}

TEST_F(PoolTest, CreateRejectsSizeBelowMinimum) {
  std::unique_ptr<Pool> p;
  const Status s = Pool::create(path_, params("clevel", kMinPoolSize - 1), &p);
  EXPECT_TRUE(s.is_invalid_argument()) << s.to_string();
  EXPECT_TRUE(contains(s.message(), std::to_string(kMinPoolSize))) << s.message();
  EXPECT_FALSE(exists(path_));
}

TEST_F(PoolTest, CreateRejectsSizeBeyondPointerReach) {
  std::unique_ptr<Pool> p;
  const Status s = Pool::create(path_, params("clevel", (std::uint64_t{1} << 48) + 1), &p);
  EXPECT_TRUE(s.is_invalid_argument()) << s.to_string();
  EXPECT_FALSE(exists(path_));
}

TEST_F(PoolTest, CreateRejectsBadEngineNames) {
  for (const std::string& name : {std::string(), std::string(kEngineNameSize, 'e')}) {
    std::unique_ptr<Pool> p;
    const Status s = Pool::create(path_, params(name), &p);
    EXPECT_TRUE(s.is_invalid_argument()) << "'" << name << "': " << s.to_string();
    EXPECT_FALSE(exists(path_));
  }
}

TEST_F(PoolTest, VerifyHeaderDetectsACorruptedMapping) {
  std::unique_ptr<Pool> p;
  ASSERT_TRUE(Pool::create(path_, params(), &p).ok());
  ASSERT_TRUE(p->verify_header().ok());
  p->region().base()[offsetof(PoolHeader, pool_size)] ^= std::byte{1};
  const Status s = p->verify_header();
  EXPECT_TRUE(s.is_corruption()) << s.to_string();
  EXPECT_TRUE(contains(s.message(), path_)) << s.message();
}

TEST(PoolVolatile, HasTheFileLayoutInAnonymousMemory) {
  CreateParams cp;
  cp.engine = "clevel";
  cp.size = kMinPoolSize;
  std::unique_ptr<Pool> p;
  const Status s = Pool::create_volatile(cp, &p);
  ASSERT_TRUE(s.ok()) << s.to_string();
  EXPECT_EQ(p->region().granularity(), media::Granularity::kNone);
  EXPECT_TRUE(p->path().empty());
  EXPECT_EQ(p->engine(), "clevel");
  EXPECT_TRUE(p->was_clean());
  EXPECT_EQ(p->generation(), 1u);
  EXPECT_EQ(p->heap_offset(), kHeapOffset);
  EXPECT_EQ(p->heap_size(), kMinPoolSize - kHeapOffset);
  EXPECT_EQ(std::memcmp(p->region().base(), &p->header(), sizeof(PoolHeader)), 0);
  EXPECT_TRUE(p->verify_header().ok());
  for (std::uint64_t i = 0; i < kRootSize; ++i) ASSERT_EQ(p->root()[i], std::byte{0});
}

TEST(PoolVolatile, RejectsSizeBelowMinimum) {
  CreateParams cp;
  cp.engine = "clevel";
  cp.size = kMinPoolSize / 2;
  std::unique_ptr<Pool> p;
  EXPECT_TRUE(Pool::create_volatile(cp, &p).is_invalid_argument());
}

}  // namespace
}  // namespace pmhash::pool
