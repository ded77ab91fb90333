// tests/unit/fault_injection_test.cc - faults from outside the index, for
// every engine in Store::engines(): a pool that fills up while the table
// grows, and files, mappings, threads and file sizes the system refuses.
//
// Pool full. Small pools (4 to 9 MiB; 4 MiB is the smallest create accepts)
// and a first level of 4 buckets make the pool run out while the table
// grows. Where it runs out depends on the pool size, the workload and the
// timing of the rehash thread; with clevel these sizes have been seen to
// fail on a new level (4, 6, 9 MiB), on an item while a rehash thread was
// moving items into a new level (5 MiB), on an item of a size class with no
// chunk left (all of them). A model keeps every acknowledged write; after the
// NoSpace the tests assert that the failing call changed nothing, that
// every acknowledged key has its value (get, for_each, size) and check()
// passes, that removes make room for inserts again, and that all of it
// holds after a clean reopen and in a simulated crash image. Two threads
// filling one pool, and large values (whose old versions are garbage until
// a grace period ends), get the same checks.
//
// Simulated crash. Every call is strict-durability, so a copy of the pool
// file taken while the store is open must recover to everything
// acknowledged. Copies are taken only at quiescent points: no call in
// flight, and no resize (Stats::resizing), whose background threads write
// to the pool; check() in between waits for a rehash thread that is just
// finishing. /dev/shm files with PMEM2_FORCE_GRANULARITY=cache_line, so that
// the engine flushes lines as on ADR persistent memory.
//
// System refusals that need resource limits (RLIMIT_AS for the mapping,
// RLIMIT_AS with a huge RLIMIT_STACK for the engine's threads (an engine
// without threads must work under it), RLIMIT_FSIZE for the file) run the `pmhash` command under prlimit(1), so the test
// process keeps its own limits; those with an address-space limit are
// skipped under ASan and TSan, whose runtimes need terabytes of it. Tests
// run as root, so permission errors cannot be provoked and are not tested.
#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "pmhash/store.h"
#include "scratch_file.h"
#include "subprocess.h"

namespace pmhash::testing {
namespace {

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool kSanitized = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
constexpr bool kSanitized = true;
#else
constexpr bool kSanitized = false;
#endif
#else
constexpr bool kSanitized = false;
#endif

constexpr std::uint64_t kMiB = std::uint64_t{1} << 20;
constexpr const char* kPrlimit = "/usr/bin/prlimit";

using Model = std::map<std::string, std::string>;

// ---------------------------------------------------------------------------
// Helpers

std::string engine_name(const ::testing::TestParamInfo<std::string>& info) { return info.param; }

std::string read_file(const std::string& path) {
  std::string data;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  EXPECT_GE(fd, 0) << path << ": " << std::strerror(errno);
  if (fd < 0) return data;
  char buf[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    EXPECT_GE(n, 0) << path << ": " << std::strerror(errno);
    if (n <= 0) break;
    data.append(buf, static_cast<std::size_t>(n));
  }
  ::close(fd);
  return data;
}

void write_file(const std::string& path, const std::string& bytes) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  ASSERT_GE(fd, 0) << path << ": " << std::strerror(errno);
  std::size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    ASSERT_GT(n, 0) << path << ": " << std::strerror(errno);
    done += static_cast<std::size_t>(n);
  }
  ::close(fd);
}

bool exists(const std::string& path) {
  struct stat st {};
  return ::lstat(path.c_str(), &st) == 0;
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// Every key of `model` has its value, no other key is there, size() agrees
// and check() passes.
::testing::AssertionResult holds(const Store& store, const Model& model) {
  if (store.size() != model.size()) {
    return ::testing::AssertionFailure()
           << "size() " << store.size() << ", model " << model.size();
  }
  for (const auto& [key, value] : model) {
    std::string got;
    const Status s = store.get(key, &got);
    if (!s.ok()) return ::testing::AssertionFailure() << "get(" << key << "): " << s.to_string();
    if (got != value) {
      return ::testing::AssertionFailure() << "get(" << key << ") = '" << got << "', model '"
                                           << value << "'";
    }
  }
  std::size_t visited = 0;
  std::string wrong;
  const Status each = store.for_each([&](std::string_view k, std::string_view v) {
    ++visited;
    const auto it = model.find(std::string(k));
    if (it == model.end() || it->second != v) {
      wrong = std::string(k);
      return false;
    }
    return true;
  });
  if (!each.ok()) return ::testing::AssertionFailure() << "for_each: " << each.to_string();
  if (!wrong.empty()) {
    return ::testing::AssertionFailure() << "for_each visits '" << wrong
                                         << "', absent from the model or with another value";
  }
  if (visited != model.size()) {
    return ::testing::AssertionFailure() << "for_each visits " << visited << " keys, model "
                                         << model.size();
  }
  if (const Status s = store.check(); !s.ok()) {
    return ::testing::AssertionFailure() << "check(): " << s.to_string();
  }
  return ::testing::AssertionSuccess();
}

// Aborts the test binary, naming the test, when the test outlives `limit`:
// a call that hangs instead of failing is reported as such, not as a
// timeout of the whole binary.
class Watchdog {
 public:
  explicit Watchdog(std::chrono::seconds limit)
      : name_(::testing::UnitTest::GetInstance()->current_test_info()->name()),
        thread_([this, limit] {
          std::unique_lock lock(mu_);
          if (!cv_.wait_for(lock, limit, [this] { return done_; })) {
            std::fprintf(stderr, "%s: still running after %lld s: a call hangs\n", name_.c_str(),
                         static_cast<long long>(limit.count()));
            std::abort();
          }
        }) {}
  ~Watchdog() {
    {
      std::lock_guard lock(mu_);
      done_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

 private:
  std::string name_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::thread thread_;
};

constexpr std::chrono::seconds kHangLimit{300};

// ---------------------------------------------------------------------------
// Pool full

// What fills the pool.
enum class Workload {
  kInsert,   // new keys with small values: many items, many expansions
  kGrowing,  // every other step a new key (insert or upsert), the others an
             // existing key with a longer value than before (update or upsert)
};

std::string workload_name(Workload w) {
  return w == Workload::kInsert ? "Insert" : "UpdateUpsertGrowing";
}

std::uint64_t mix(std::uint64_t x) {  // splitmix64
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// A value that names its key and version, `len` bytes long (longer if the
// name does not fit).
std::string make_value(const std::string& key, unsigned version, std::size_t len) {
  std::string v = key + "#" + std::to_string(version) + ":";
  if (v.size() < len) v.append(len - v.size(), static_cast<char>('a' + (version + len) % 26));
  return v;
}

// One writer of a workload and its model of what was acknowledged.
class Writer {
 public:
  Writer(Store& store, Workload workload, std::string prefix)
      : store_(store), workload_(workload), prefix_(std::move(prefix)) {}

  // Runs step `i`; on success the model follows. Remembers what the step
  // tried, for unchanged_by_last_step().
  Status step(std::uint64_t i) {
    // Growing: steps 4n and 4n+2 add a key (by insert, by upsert), 4n+1 and
    // 4n+3 give an existing key a longer value (by update, by upsert).
    const bool upsert = workload_ == Workload::kGrowing && i % 4 >= 2;
    if (workload_ == Workload::kInsert || keys_.empty() || i % 2 == 0) {
      last_key_ = prefix_ + std::to_string(keys_.size());
      last_value_ = make_value(last_key_, 0, workload_ == Workload::kInsert ? 24 : 16);
      const Status s =
          upsert ? store_.upsert(last_key_, last_value_) : store_.insert(last_key_, last_value_);
      if (s.ok()) {
        keys_.push_back(last_key_);
        versions_.push_back(0);
        model_[last_key_] = last_value_;
      }
      return s;
    }
    // Longer with every version, so that values move through the heap's
    // size classes. (Large values, runs of whole chunks, are GarbageTest's.)
    const std::size_t j = mix(i) % keys_.size();
    last_key_ = keys_[j];
    const unsigned version = versions_[j] + 1;
    const std::size_t len = 16 + 48 * std::size_t{version};
    last_value_ = make_value(last_key_, version, len);
    const Status s =
        upsert ? store_.upsert(last_key_, last_value_) : store_.update(last_key_, last_value_);
    if (s.ok()) {
      versions_[j] = version;
      model_[last_key_] = last_value_;
    }
    return s;
  }

  // The last (failed) step left its key as the model has it.
  ::testing::AssertionResult unchanged_by_last_step() const {
    std::string got;
    const Status s = store_.get(last_key_, &got);
    const auto it = model_.find(last_key_);
    if (it == model_.end()) {
      if (s.is_not_found()) return ::testing::AssertionSuccess();
      return ::testing::AssertionFailure()
             << "failed write of new key " << last_key_ << " left get() = " << s.to_string();
    }
    if (s.ok() && got == it->second) return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure() << "failed write of " << last_key_ << " left get() = "
                                         << s.to_string() << " '" << got.substr(0, 40) << "'";
  }

  const Model& model() const { return model_; }
  Model& model() { return model_; }

 private:

  Store& store_;
  Workload workload_;
  std::string prefix_;
  std::vector<std::string> keys_;
  std::vector<unsigned> versions_;
  Model model_;
  std::string last_key_;
  std::string last_value_;
};

// A copy of the pool file taken at a quiescent point, with the model then.
struct CrashImage {
  std::string bytes;
  Model model;
};

class PoolFullBase {
 protected:
  void set_up(const std::string& engine, std::uint64_t pool_size) {
    base_ = scratch_path("pmhash-fault");
    path_ = base_ + ".pool";
    crash_path_ = base_ + "-crash.pool";
    ::unlink(path_.c_str());
    ::unlink(crash_path_.c_str());
    granularity_.force("cache_line");
    options_.engine = engine;
    options_.pool_size = pool_size;
    options_.set("clevel.initial_level_log2", 2);
    options_.set("clevel.min_level_log2", 1);
  }
  void tear_down() {
    store_.reset();
    ::unlink(path_.c_str());
    ::unlink(crash_path_.c_str());
  }

  // Copies the pool file if no resize runs; false if one does. No call may
  // be in flight.
  bool try_crash_image(const Model& model, CrashImage* image) {
    if (store_->stats().resizing) return false;
    // check() waits for a rehash thread still finishing the resize that
    // just ended (it pauses them), and the pool must be sound anyway.
    const Status c = store_->check();
    EXPECT_TRUE(c.ok()) << c.to_string();
    if (store_->stats().resizing) return false;
    image->bytes = read_file(path_);
    image->model = model;
    return true;
  }

  // Opens a copy of `image`, which recovers it, and compares it with its
  // model.
  void verify_crash_image(const CrashImage& image) {
    ASSERT_FALSE(image.bytes.empty());
    ASSERT_NO_FATAL_FAILURE(write_file(crash_path_, image.bytes));
    Options o;
    o.engine = options_.engine;
    std::unique_ptr<Store> copy;
    const Status s = Store::open(crash_path_, o, &copy);
    ASSERT_TRUE(s.ok()) << s.to_string();
    EXPECT_FALSE(copy->stats().clean_shutdown) << "the copy was not a crash image";
    EXPECT_TRUE(holds(*copy, image.model)) << "after recovering a copy taken while open";
    ASSERT_TRUE(copy->close().ok());
    copy.reset();
    ::unlink(crash_path_.c_str());
  }

  void reopen() {
    ASSERT_TRUE(store_->close().ok());
    store_.reset();
    Options o;
    o.engine = options_.engine;
    const Status s = Store::open(path_, o, &store_);
    ASSERT_TRUE(s.ok()) << s.to_string();
  }

  // Removes every second key of `model` (asserting each), then inserts a
  // quarter of them again with their old values: the room removes free is
  // used again. The others stay out of the store, in left_out_.
  void remove_and_refill(Model* model) {
    std::vector<std::pair<std::string, std::string>> removed;
    bool odd = false;
    for (auto it = model->begin(); it != model->end();) {
      odd = !odd;
      if (!odd) {
        ++it;
        continue;
      }
      const Status s = store_->remove(it->first);
      ASSERT_TRUE(s.ok()) << "remove(" << it->first << "): " << s.to_string();
      removed.emplace_back(*it);
      it = model->erase(it);
    }
    ASSERT_FALSE(removed.empty());
    for (std::size_t i = 0; i < removed.size() / 4; ++i) {
      const auto& [key, value] = removed[i];
      const Status s = store_->insert(key, value);
      ASSERT_TRUE(s.ok()) << "insert(" << key << ") after removing " << removed.size()
                          << " keys: " << s.to_string();
      (*model)[key] = value;
    }
    left_out_.assign(removed.begin() + static_cast<std::ptrdiff_t>(removed.size() / 4), removed.end());
  }

  // Waits (yielding) until no resize runs; a rehash thread that found no
  // room retries by itself once removes have made some.
  void wait_until_no_resize() {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (store_->stats().resizing) {
      ASSERT_LT(std::chrono::steady_clock::now(), deadline) << "a resize never ends";
      std::this_thread::yield();
    }
  }

  // After NoSpace: the model holds, in the store and in a crash image;
  // removes make room for inserts; all of it survives a clean reopen.
  void check_after_no_space(Model* model) {
    ASSERT_TRUE(holds(*store_, *model)) << "right after NoSpace";
    CrashImage image;
    if (try_crash_image(*model, &image)) {  // unless a resize still runs
      ASSERT_NO_FATAL_FAILURE(verify_crash_image(image));
    }

    // (The crash image and the reopen below compare the store with the
    // model after these.)
    ASSERT_NO_FATAL_FAILURE(remove_and_refill(model));
    ASSERT_NO_FATAL_FAILURE(wait_until_no_resize());
    ASSERT_TRUE(try_crash_image(*model, &image));
    ASSERT_NO_FATAL_FAILURE(verify_crash_image(image));

    ASSERT_NO_FATAL_FAILURE(reopen());
    EXPECT_TRUE(store_->stats().clean_shutdown);
    ASSERT_TRUE(holds(*store_, *model)) << "after a clean reopen";
    // The store takes writes after the reopen: a removed key that was not
    // inserted again goes back in the room its remove freed. (Not any new
    // pair: the heap keeps slabs per size class, so once the pool's chunks
    // are all taken only sizes it has slab room for fit. An engine that
    // gives chunks back when its table shrinks (clevel) has room for more,
    // one whose index only grows (nehash) has not.)
    ASSERT_FALSE(left_out_.empty());
    const auto& [key, value] = left_out_.back();
    const Status s = store_->insert(key, value);
    ASSERT_TRUE(s.ok()) << "insert(" << key << ") after the reopen: " << s.to_string();
    std::string got;
    ASSERT_TRUE(store_->get(key, &got).ok());
    EXPECT_EQ(got, value);
    (*model)[key] = value;
    EXPECT_TRUE(holds(*store_, *model)) << "after an insert following the reopen";
    ASSERT_TRUE(store_->close().ok());
  }

  std::string base_;
  std::string path_;
  std::string crash_path_;
  std::vector<std::pair<std::string, std::string>> left_out_;  // see remove_and_refill
  GranularityGuard granularity_;
  Options options_;
  std::unique_ptr<Store> store_;
};

constexpr std::uint64_t kMaxSteps = 2'000'000;  // a pool that never fills fails the test

using PoolFullParam = std::tuple<std::string, unsigned /* MiB */, Workload>;

class PoolFullTest : public PoolFullBase, public ::testing::TestWithParam<PoolFullParam> {
 protected:
  void SetUp() override {
    set_up(std::get<0>(GetParam()), std::get<1>(GetParam()) * kMiB);
  }
  void TearDown() override { tear_down(); }
};

TEST_P(PoolFullTest, NoSpaceWhileGrowingKeepsEveryAcknowledgedWrite) {
  const Watchdog watchdog(kHangLimit);
  Status s = Store::create(path_, options_, &store_);
  ASSERT_TRUE(s.ok()) << s.to_string();
  Writer writer(*store_, std::get<2>(GetParam()), "key-");
  unsigned images = 0;
  bool want_image = false;
  std::uint64_t acknowledged = 0;
  for (std::uint64_t i = 0; i < kMaxSteps; ++i) {
    s = writer.step(i);
    if (!s.ok()) break;
    // A crash image after 4^5, 4^6, ... acknowledged writes, once the
    // resize they may have started has ended (waited for: on a loaded
    // machine the rehash threads can lag the writer until the pool fills).
    ++acknowledged;
    want_image |= acknowledged >= 1024 && std::has_single_bit(acknowledged) &&
                  std::countr_zero(acknowledged) % 2 == 0;
    CrashImage image;
    if (want_image) {
      ASSERT_NO_FATAL_FAILURE(wait_until_no_resize());
    }
    if (want_image && try_crash_image(writer.model(), &image)) {
      ++images;
      want_image = false;
      ASSERT_NO_FATAL_FAILURE(verify_crash_image(image)) << "after " << acknowledged << " writes";
    }
  }
  ASSERT_TRUE(s.is_no_space()) << "after " << acknowledged << " writes: " << s.to_string();
  EXPECT_TRUE(contains(s.message(), "full")) << s.to_string();
  ASSERT_GT(acknowledged, 1024u) << s.to_string();
  EXPECT_GT(images, 0u) << "no quiescent point while filling";
  EXPECT_TRUE(writer.unchanged_by_last_step());
  check_after_no_space(&writer.model());
}

INSTANTIATE_TEST_SUITE_P(
    EveryEngine, PoolFullTest,
    ::testing::Combine(::testing::ValuesIn(Store::engines()), ::testing::Values(4u, 5u, 6u, 9u),
                       ::testing::Values(Workload::kInsert, Workload::kGrowing)),
    [](const ::testing::TestParamInfo<PoolFullParam>& info) {
      return std::get<0>(info.param) + "_" + std::to_string(std::get<1>(info.param)) + "MiB_" +
             workload_name(std::get<2>(info.param));
    });

class PoolFullConcurrentTest : public PoolFullBase,
                               public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override { set_up(GetParam(), 6 * kMiB); }
  void TearDown() override { tear_down(); }
};

TEST_P(PoolFullConcurrentTest, TwoInsertersBothSeeNoSpaceAndEveryAcknowledgedInsertSurvives) {
  const Watchdog watchdog(kHangLimit);
  const Status created = Store::create(path_, options_, &store_);
  ASSERT_TRUE(created.ok()) << created.to_string();
  constexpr unsigned kThreads = 2;
  std::vector<std::unique_ptr<Writer>> writers;
  std::vector<Status> failures(kThreads);
  std::vector<std::uint64_t> acknowledged(kThreads, 0);
  for (unsigned t = 0; t < kThreads; ++t) {
    writers.push_back(std::make_unique<Writer>(*store_, Workload::kInsert,
                                               "thread" + std::to_string(t) + "-"));
  }
  {
    std::vector<std::thread> threads;
    for (unsigned t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        for (std::uint64_t i = 0; i < kMaxSteps; ++i) {
          const Status s = writers[t]->step(i);
          if (!s.ok()) {
            failures[t] = s;
            return;
          }
          ++acknowledged[t];
        }
      });
    }
    for (std::thread& th : threads) th.join();
  }
  Model model;
  for (unsigned t = 0; t < kThreads; ++t) {
    ASSERT_TRUE(failures[t].is_no_space())
        << "thread " << t << " after " << acknowledged[t] << " inserts: "
        << failures[t].to_string();
    EXPECT_TRUE(contains(failures[t].message(), "full")) << failures[t].to_string();
    EXPECT_GT(acknowledged[t], 100u);
    EXPECT_TRUE(writers[t]->unchanged_by_last_step()) << "thread " << t;
    model.insert(writers[t]->model().begin(), writers[t]->model().end());
  }
  check_after_no_space(&model);
}

INSTANTIATE_TEST_SUITE_P(EveryEngine, PoolFullConcurrentTest,
                         ::testing::ValuesIn(Store::engines()), engine_name);

// Large values: each is a run of whole heap chunks, and what an update
// replaces or a remove takes away is garbage until a grace period has
// passed. A pool whose room is such garbage is not full.
class GarbageTest : public PoolFullBase, public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override { set_up(GetParam(), 8 * kMiB); }
  void TearDown() override { tear_down(); }

  static constexpr std::size_t kLarge = 100'000;
};

TEST_P(GarbageTest, UpdatingOneLargeValueOverAndOverNeverFillsThePool) {
  const Watchdog watchdog(kHangLimit);
  const Status created = Store::create(path_, options_, &store_);
  ASSERT_TRUE(created.ok()) << created.to_string();
  Model model;
  // 300 versions of 100 kB are 30 MB, four times the pool.
  for (unsigned version = 0; version < 300; ++version) {
    const std::string value = make_value("big", version, kLarge);
    const Status s = version == 0 ? store_->insert("big", value)
                     : version % 2 ? store_->update("big", value)
                                   : store_->upsert("big", value);
    ASSERT_TRUE(s.ok()) << "version " << version << ": " << s.to_string();
    model["big"] = value;
  }
  // Small writes find room too.
  for (int i = 0; i < 1000; ++i) {
    const std::string key = "small-" + std::to_string(i);
    const Status s = store_->upsert(key, make_value(key, 0, 100));
    ASSERT_TRUE(s.ok()) << key << ": " << s.to_string();
    model[key] = make_value(key, 0, 100);
  }
  EXPECT_TRUE(holds(*store_, model));
  ASSERT_NO_FATAL_FAILURE(reopen());
  EXPECT_TRUE(holds(*store_, model));
}

TEST_P(GarbageTest, RemovingALargeValueMakesRoomForTheNextAtOnce) {
  const Watchdog watchdog(kHangLimit);
  const Status created = Store::create(path_, options_, &store_);
  ASSERT_TRUE(created.ok()) << created.to_string();
  Model model;
  Status s;
  int n = 0;
  for (; n < 1000; ++n) {
    const std::string key = "big-" + std::to_string(n);
    s = store_->insert(key, make_value(key, 0, kLarge));
    if (!s.ok()) break;
    model[key] = make_value(key, 0, kLarge);
  }
  ASSERT_TRUE(s.is_no_space()) << s.to_string();
  ASSERT_GT(n, 5);
  // Remove the oldest, insert a new one of the same size, 50 times: each
  // insert has exactly the room the remove before it gave back.
  for (int i = 0; i < 50; ++i) {
    const std::string old_key = "big-" + std::to_string(i);
    ASSERT_TRUE(store_->remove(old_key).ok()) << old_key;
    model.erase(old_key);
    const std::string key = "big-" + std::to_string(n + i);
    s = store_->insert(key, make_value(key, 0, kLarge));
    ASSERT_TRUE(s.ok()) << key << " after removing " << old_key << ": " << s.to_string();
    model[key] = make_value(key, 0, kLarge);
  }
  EXPECT_TRUE(holds(*store_, model));
  CrashImage image;
  ASSERT_TRUE(try_crash_image(model, &image));
  ASSERT_NO_FATAL_FAILURE(verify_crash_image(image));
  ASSERT_NO_FATAL_FAILURE(reopen());
  EXPECT_TRUE(holds(*store_, model));
}

INSTANTIATE_TEST_SUITE_P(EveryEngine, GarbageTest, ::testing::ValuesIn(Store::engines()),
                         engine_name);

// ---------------------------------------------------------------------------
// Files, mappings, threads and file sizes the system refuses

class SystemFaultTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    base_ = scratch_path("pmhash-fault");
    options_.engine = GetParam();
    options_.pool_size = 8 * kMiB;
  }
  void TearDown() override {
    for (const std::string& p : paths_) {
      if (::unlink(p.c_str()) != 0) ::rmdir(p.c_str());
    }
  }

  // A path of this test, removed when it ends.
  std::string path(const std::string& suffix) {
    paths_.push_back(base_ + "." + suffix);
    ::unlink(paths_.back().c_str());
    return paths_.back();
  }

  // A closed pool at `p` holding `model`.
  void make_pool(const std::string& p, Model* model) {
    std::unique_ptr<Store> store;
    const Status s = Store::create(p, options_, &store);
    ASSERT_TRUE(s.ok()) << s.to_string();
    for (int i = 0; i < 100; ++i) {
      const std::string key = "key-" + std::to_string(i);
      const std::string value = make_value(key, 0, 32);
      ASSERT_TRUE(store->insert(key, value).ok());
      (*model)[key] = value;
    }
    ASSERT_TRUE(store->close().ok());
  }

  void expect_opens_with(const std::string& p, const Model& model) {
    std::unique_ptr<Store> store;
    const Status s = Store::open(p, Options{.engine = GetParam()}, &store);
    ASSERT_TRUE(s.ok()) << s.to_string();
    EXPECT_TRUE(holds(*store, model));
  }

  static std::string reason(int err) { return std::strerror(err); }

  // `pmhash args...` under prlimit(1) with `limits` (e.g. "--as=...").
  static SpawnResult cli_limited(const std::vector<std::string>& limits,
                                 const std::vector<std::string>& args) {
    std::vector<std::string> all = limits;
    all.push_back("--");
    all.push_back(PMHASH_CLI_PATH);
    all.insert(all.end(), args.begin(), args.end());
    return run_program(kPrlimit, all);
  }

  static std::string describe(const SpawnResult& r) {
    return "exit " + std::to_string(r.exit_code) + "\n  stdout: " + r.out +
           "\n  stderr: " + r.err;
  }

  std::string base_;
  std::vector<std::string> paths_;
  Options options_;
};

TEST_P(SystemFaultTest, CreateInAMissingDirectoryNamesThePathAndTheReason) {
  const std::string dir = path("no-such-dir");
  const std::string p = dir + "/x.pool";
  std::unique_ptr<Store> store;
  const Status s = Store::create(p, options_, &store);
  ASSERT_TRUE(s.is_io_error()) << s.to_string();
  EXPECT_TRUE(contains(s.message(), p)) << s.to_string();
  EXPECT_TRUE(contains(s.message(), reason(ENOENT))) << s.to_string();
  EXPECT_EQ(store, nullptr);
  EXPECT_FALSE(exists(dir));
}

TEST_P(SystemFaultTest, CreateOverAnExistingFileWithoutForceLeavesItUnchanged) {
  const std::string junk_path = path("junk");
  std::string junk(100'000, '\0');
  for (std::size_t i = 0; i < junk.size(); ++i) junk[i] = static_cast<char>(mix(i));
  ASSERT_NO_FATAL_FAILURE(write_file(junk_path, junk));
  const std::string pool_path = path("pool");
  Model model;
  ASSERT_NO_FATAL_FAILURE(make_pool(pool_path, &model));
  const std::string pool_bytes = read_file(pool_path);

  for (const std::string& p : {junk_path, pool_path}) {
    std::unique_ptr<Store> store;
    const Status s = Store::create(p, options_, &store);
    ASSERT_TRUE(s.is_already_exists()) << s.to_string();
    EXPECT_TRUE(contains(s.message(), p)) << s.to_string();
    EXPECT_TRUE(contains(s.message(), "force")) << "says what to do: " << s.to_string();
    EXPECT_EQ(store, nullptr);
  }
  EXPECT_EQ(read_file(junk_path), junk);
  EXPECT_EQ(read_file(pool_path), pool_bytes);
  expect_opens_with(pool_path, model);
}

TEST_P(SystemFaultTest, OpenOfAMissingFileNamesItAndCreatesNothing) {
  const std::string p = path("missing");
  std::unique_ptr<Store> store;
  const Status s = Store::open(p, Options{.engine = GetParam()}, &store);
  ASSERT_TRUE(s.is_io_error()) << s.to_string();
  EXPECT_TRUE(contains(s.message(), p)) << s.to_string();
  EXPECT_TRUE(contains(s.message(), reason(ENOENT))) << s.to_string();
  EXPECT_EQ(store, nullptr);
  EXPECT_FALSE(exists(p));
}

TEST_P(SystemFaultTest, OpenOfAnEmptyFileIsRefusedAndLeavesItEmpty) {
  const std::string p = path("empty");
  ASSERT_NO_FATAL_FAILURE(write_file(p, ""));
  std::unique_ptr<Store> store;
  const Status s = Store::open(p, Options{.engine = GetParam()}, &store);
  ASSERT_TRUE(s.is_corruption()) << s.to_string();
  EXPECT_TRUE(contains(s.message(), p)) << s.to_string();
  EXPECT_TRUE(contains(s.message(), "0 bytes")) << s.to_string();
  EXPECT_EQ(store, nullptr);
  EXPECT_EQ(read_file(p), "");
}

TEST_P(SystemFaultTest, OpenOfAPoolTruncatedToHalfIsRefusedAndLeavesItUnchanged) {
  const std::string p = path("pool");
  Model model;
  ASSERT_NO_FATAL_FAILURE(make_pool(p, &model));
  const std::string whole = read_file(p);
  ASSERT_EQ(::truncate(p.c_str(), static_cast<off_t>(whole.size() / 2)), 0);
  const std::string half = read_file(p);
  ASSERT_EQ(half, whole.substr(0, whole.size() / 2));

  for (int attempt = 0; attempt < 2; ++attempt) {  // a second try finds the same
    std::unique_ptr<Store> store;
    const Status s = Store::open(p, Options{.engine = GetParam()}, &store);
    ASSERT_TRUE(s.is_corruption()) << s.to_string();
    EXPECT_TRUE(contains(s.message(), p)) << s.to_string();
    EXPECT_TRUE(contains(s.message(), "truncated")) << s.to_string();
    EXPECT_TRUE(contains(s.message(), std::to_string(half.size()))) << s.to_string();
    EXPECT_EQ(store, nullptr);
    EXPECT_EQ(read_file(p), half) << "a refused open wrote to the file";
  }
  // Nothing was lost: with its tail back, the pool opens with every key.
  ASSERT_NO_FATAL_FAILURE(write_file(p, whole));
  expect_opens_with(p, model);
}

TEST_P(SystemFaultTest, OpenOrCreateOfADirectoryIsRefusedAndLeavesIt) {
  const std::string dir = path("dir");
  ASSERT_EQ(::mkdir(dir.c_str(), 0755), 0) << std::strerror(errno);
  std::unique_ptr<Store> store;
  const Status opened = Store::open(dir, Options{.engine = GetParam()}, &store);
  ASSERT_TRUE(opened.is_io_error()) << opened.to_string();
  EXPECT_TRUE(contains(opened.message(), dir)) << opened.to_string();
  EXPECT_TRUE(contains(opened.message(), "not a regular file")) << opened.to_string();

  const Status created = Store::create(dir, options_, &store);
  EXPECT_TRUE(created.is_already_exists()) << created.to_string();
  Options force = options_;
  force.force = true;
  const Status forced = Store::create(dir, force, &store);
  ASSERT_TRUE(forced.is_io_error()) << forced.to_string();
  EXPECT_TRUE(contains(forced.message(), dir)) << forced.to_string();
  EXPECT_TRUE(contains(forced.message(), reason(EISDIR))) << forced.to_string();
  EXPECT_EQ(store, nullptr);
  struct stat st {};
  ASSERT_EQ(::stat(dir.c_str(), &st), 0);
  EXPECT_TRUE(S_ISDIR(st.st_mode));
}

TEST_P(SystemFaultTest, CreateWithAPoolTooSmallIsRefusedAndLeavesNoFile) {
  const std::string p = path("pool");
  for (const std::uint64_t size : {std::uint64_t{0}, std::uint64_t{1} * kMiB, 4 * kMiB - 4096}) {
    Options o = options_;
    o.pool_size = size;
    std::unique_ptr<Store> store;
    const Status s = Store::create(p, o, &store);
    ASSERT_TRUE(s.is_invalid_argument()) << size << ": " << s.to_string();
    EXPECT_TRUE(contains(s.message(), p)) << s.to_string();
    EXPECT_TRUE(contains(s.message(), "minimum")) << s.to_string();
    EXPECT_EQ(store, nullptr);
    EXPECT_FALSE(exists(p)) << size;
  }
}

TEST_P(SystemFaultTest, CreateWithAnAbsurdPoolSizeFailsCleanlyAndLeavesNoFile) {
  const std::string p = path("pool");
  std::unique_ptr<Store> store;
  // Beyond what a persistent pointer reaches: refused before any file exists.
  Options o = options_;
  o.pool_size = std::uint64_t{1} << 60;
  Status s = Store::create(p, o, &store);
  ASSERT_TRUE(s.is_invalid_argument()) << s.to_string();
  EXPECT_TRUE(contains(s.message(), p)) << s.to_string();
  EXPECT_TRUE(contains(s.message(), "maximum")) << s.to_string();
  EXPECT_FALSE(exists(p));

  // Addressable but far beyond the file system: the file cannot be sized.
  // (tmpfs refuses a fallocate beyond its size at once; a file system with
  // more room than this would fill up first, so the case is skipped there.)
  o.pool_size = std::uint64_t{1} << 47;
  struct statvfs fs {};
  ASSERT_EQ(::statvfs("/dev/shm", &fs), 0);
  if (static_cast<std::uint64_t>(fs.f_blocks) * fs.f_frsize >= o.pool_size) {
    GTEST_SKIP() << "/dev/shm holds 2^47 bytes";
  }
  s = Store::create(p, o, &store);
  ASSERT_TRUE(s.is_io_error()) << s.to_string();
  EXPECT_TRUE(contains(s.message(), p)) << s.to_string();
  EXPECT_TRUE(contains(s.message(), std::to_string(o.pool_size))) << s.to_string();
  EXPECT_TRUE(contains(s.message(), reason(ENOSPC))) << s.to_string();
  EXPECT_EQ(store, nullptr);
  EXPECT_FALSE(exists(p)) << "a failed create left its file behind";
}

TEST_P(SystemFaultTest, CreateBeyondTheFileSizeLimitFailsAndLeavesNoFile) {
  // RLIMIT_FSIZE of 1 MiB for an 8 MiB pool, with SIGXFSZ ignored (sh's
  // trap '' survives exec), so the system call fails with EFBIG instead of
  // the signal killing the process.
  const std::string p = path("pool");
  const std::string cli = PMHASH_CLI_PATH;
  const SpawnResult r = run_program(
      "/bin/sh", {"-c", "trap '' XFSZ; exec \"$@\"", "sh", kPrlimit, "--fsize=1048576", "--",
                  cli, "create", p, "--engine", GetParam(), "--size", "8M"});
  EXPECT_EQ(r.exit_code, 1) << describe(r);
  EXPECT_TRUE(contains(r.err, p)) << describe(r);
  EXPECT_TRUE(contains(r.err, reason(EFBIG))) << describe(r);
  EXPECT_FALSE(exists(p)) << "a failed create left its file behind";
  // The same create without the limit works.
  std::unique_ptr<Store> store;
  const Status s = Store::create(p, options_, &store);
  EXPECT_TRUE(s.ok()) << s.to_string();
}

TEST_P(SystemFaultTest, CreateAndOpenWithoutAddressSpaceForTheMappingFailAndChangeNothing) {
  if (kSanitized) GTEST_SKIP() << "sanitizer runtimes do not run under an address-space limit";
  // 64 MiB of address space: the program runs, a 96 MiB mapping does not.
  const std::string as = "--as=" + std::to_string(64 * kMiB);
  const std::string p = path("pool");
  SpawnResult r = cli_limited({as}, {"create", p, "--engine", GetParam(), "--size", "96M"});
  EXPECT_EQ(r.exit_code, 1) << describe(r);
  EXPECT_TRUE(contains(r.err, p)) << describe(r);
  EXPECT_TRUE(contains(r.err, "cannot map")) << describe(r);
  EXPECT_TRUE(contains(r.err, reason(ENOMEM))) << describe(r);
  EXPECT_FALSE(exists(p)) << "a failed create left its file behind";

  // Opening an existing 96 MiB pool fails the same way and writes nothing.
  Options o = options_;
  o.pool_size = 96 * kMiB;
  Model model;
  {
    std::unique_ptr<Store> store;
    const Status s = Store::create(p, o, &store);
    ASSERT_TRUE(s.ok()) << s.to_string();
    ASSERT_TRUE(store->insert("k", "v").ok());
    model["k"] = "v";
    ASSERT_TRUE(store->close().ok());
  }
  const std::string before = read_file(p);
  r = cli_limited({as}, {"put", p, "k2", "v2"});
  EXPECT_EQ(r.exit_code, 1) << describe(r);
  EXPECT_TRUE(contains(r.err, p)) << describe(r);
  EXPECT_TRUE(contains(r.err, "cannot map")) << describe(r);
  EXPECT_TRUE(contains(r.err, reason(ENOMEM))) << describe(r);
  EXPECT_TRUE(read_file(p) == before) << "a refused open wrote to the pool";
  expect_opens_with(p, model);
}

// Threads of this process (entries of /proc/self/task).
std::size_t process_threads() {
  std::size_t n = 0;
  if (DIR* d = ::opendir("/proc/self/task")) {
    while (const dirent* e = ::readdir(d)) n += e->d_name[0] != '.';
    ::closedir(d);
  }
  return n;
}

TEST_P(SystemFaultTest, CreateAndOpenWhenTheEngineCannotStartAThreadFailCleanly) {
  if (kSanitized) GTEST_SKIP() << "sanitizer runtimes do not run under an address-space limit";
  // Threads get stacks of RLIMIT_STACK bytes (glibc); 8 GiB stacks in 4 GiB
  // of address space cannot be had, while the main thread and an 8 MiB
  // mapping can.
  const std::vector<std::string> limits = {"--as=" + std::to_string(std::uint64_t{4} << 30),
                                           "--stack=" + std::to_string(std::uint64_t{8} << 30)};
  const std::string p = path("pool");
  // Whether an open store of this engine runs threads of its own.
  bool starts_threads = false;
  {
    const std::size_t before = process_threads();
    ASSERT_GT(before, 0u);
    std::unique_ptr<Store> store;
    const Status s = Store::create(p, options_, &store);
    ASSERT_TRUE(s.ok()) << s.to_string();
    starts_threads = process_threads() > before;
    ASSERT_TRUE(store->close().ok());
    store.reset();
    ::unlink(p.c_str());
  }
  if (!starts_threads) {
    // An engine without threads of its own (nehash) has nothing to start:
    // the same limits must not stop it from creating and writing a pool.
    SpawnResult r = cli_limited(limits, {"create", p, "--engine", GetParam(), "--size", "8M"});
    ASSERT_EQ(r.exit_code, 0) << describe(r);
    r = cli_limited(limits, {"put", p, "k2", "v2"});
    ASSERT_EQ(r.exit_code, 0) << describe(r);
    expect_opens_with(p, Model{{"k2", "v2"}});
    return;
  }
  SpawnResult r = cli_limited(limits, {"create", p, "--engine", GetParam(), "--size", "8M"});
  EXPECT_EQ(r.exit_code, 1) << describe(r);
  EXPECT_TRUE(contains(r.err, p)) << describe(r);
  EXPECT_TRUE(contains(r.err, "cannot start")) << describe(r);
  EXPECT_FALSE(exists(p)) << "a failed create left its file behind";

  Model model;
  ASSERT_NO_FATAL_FAILURE(make_pool(p, &model));
  r = cli_limited(limits, {"put", p, "k2", "v2"});
  EXPECT_EQ(r.exit_code, 1) << describe(r);
  EXPECT_TRUE(contains(r.err, p)) << describe(r);
  EXPECT_TRUE(contains(r.err, "cannot start")) << describe(r);
  // The pool may have been recovered, but nothing in it changed.
  expect_opens_with(p, model);
}

TEST_P(SystemFaultTest, AFailedWriteBackIsReportedAndThePoolRecoversAsAfterACrash) {
  // A page-granularity pool (an ordinary file: /dev/shm without a forced
  // granularity) written back through pwrite. RLIMIT_FSIZE of 64 KiB, with
  // SIGXFSZ ignored: every write-back beyond the pool's first 64 KiB fails
  // with EFBIG, as a disk that fails part of a write would. The put's
  // record lies beyond it; the header, which a clean close marks, does not.
  const std::string p = path("pool");
  Model model;
  ASSERT_NO_FATAL_FAILURE(make_pool(p, &model));
  const std::string cli = PMHASH_CLI_PATH;
  const SpawnResult r = run_program(
      "/bin/sh", {"-c", "trap '' XFSZ; exec \"$@\"", "sh", kPrlimit, "--fsize=65536", "--",
                  cli, "put", p, "late-key", "late-value"});
  EXPECT_EQ(r.exit_code, 1) << describe(r);
  EXPECT_TRUE(contains(r.err, p)) << describe(r);
  EXPECT_TRUE(contains(r.err, reason(EFBIG))) << describe(r);
  EXPECT_TRUE(contains(r.err, "write-back")) << describe(r);

  // Nothing reached the file after the failure, the clean-shutdown mark
  // included: the pool opens as after a crash and holds every key it held
  // before, and the put's key whole or not at all.
  {
    std::unique_ptr<Store> store;
    const Status s = Store::open(p, Options{.engine = GetParam()}, &store);
    ASSERT_TRUE(s.ok()) << s.to_string();
    EXPECT_FALSE(store->stats().clean_shutdown) << "the failed session's close marked the pool clean";
    const Status c = store->check();
    EXPECT_TRUE(c.ok()) << c.to_string();
    std::string late;
    const Status g = store->get("late-key", &late);
    ASSERT_TRUE(g.ok() || g.is_not_found()) << g.to_string();
    Model expected = model;
    if (g.ok()) expected["late-key"] = "late-value";
    EXPECT_TRUE(holds(*store, expected));
    // And it takes writes again.
    ASSERT_TRUE(store->upsert("late-key", "late-value").ok());
    model["late-key"] = "late-value";
    ASSERT_TRUE(store->close().ok());
  }
  expect_opens_with(p, model);
}

INSTANTIATE_TEST_SUITE_P(EveryEngine, SystemFaultTest, ::testing::ValuesIn(Store::engines()),
                         engine_name);

}  // namespace
}  // namespace pmhash::testing
