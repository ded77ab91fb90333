// Unit tests of the remote-memory layer (src/remote) on the shm transport:
// memory-node pools, the four verbs and their ordering in a batch, bad
// verbs rejected before anything runs, durability across a reopen,
// coroutines keeping many batches in flight on one thread, atomics from
// several threads and several processes, injected latency, and each
// node's random id.
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "pool/pool.h"
#include "remote/client.h"
#include "remote/memnode.h"
#include "scratch_file.h"

namespace pmhash {
namespace {

using remote::Batch;
using remote::Client;
using remote::Task;

constexpr std::uint64_t kNodeSize = 8u << 20;

class RemoteTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = dir_.str() + "/mn0";
    const Status s = remote::create_memnode(path_, kNodeSize, false);
    ASSERT_TRUE(s.ok()) << s.to_string();
  }
  std::unique_ptr<Client> client(remote::ConnectOptions o = {}) {
    std::unique_ptr<Client> c;
    const Status s = Client::connect({"shm:" + path_}, o, &c);
    EXPECT_TRUE(s.ok()) << s.to_string();
    return c;
  }
  // A free 8-byte-aligned block of the node (above the allocator's start;
  // these tests do not allocate).
  static std::uint64_t at(std::uint64_t i) { return remote::kFirstAllocatable + 8 * i; }
  // The word at `off`, read in a batch of its own.
  static std::uint64_t word(Client& c, std::uint64_t off) {
    std::uint64_t v = ~std::uint64_t{0};
    Batch r;
    r.read(0, off, &v, 8);
    const Status s = c.exec_sync(r);
    EXPECT_TRUE(s.ok()) << s.to_string();
    return v;
  }

  testing::ScratchDir dir_{"pmhash-remote"};
  std::string path_;
};

TEST_F(RemoteTest, CreatedNodeHasTheRootAndAnEmptyAllocator) {
  auto c = client();
  ASSERT_TRUE(c);
  EXPECT_EQ(c->nodes(), 1u);
  EXPECT_EQ(c->node_size(0), kNodeSize);
  EXPECT_EQ(c->node_name(0), "shm:" + path_);
  EXPECT_EQ(word(*c, remote::kBumpOffset), remote::kFirstAllocatable);
}

// Every memory node gets its own random node id at create, also a pool
// made again at the same path; the membership record starts empty.
TEST_F(RemoteTest, EveryCreatedNodeHasItsOwnRandomNodeId) {
  auto node_id = [](const std::string& path) {
    std::unique_ptr<Client> c;
    EXPECT_TRUE(Client::connect({"shm:" + path}, {}, &c).ok());
    std::string id(remote::kNodeIdBytes, '\0');
    std::string member(64, 'x');
    Batch b;
    b.read(0, remote::kNodeIdOffset, id.data(), remote::kNodeIdBytes);
    b.read(0, remote::kMembershipOffset, member.data(), 64);
    EXPECT_TRUE(c && c->exec_sync(b).ok());
    EXPECT_EQ(member, std::string(64, '\0'));
    return id;
  };
  const std::string zero(remote::kNodeIdBytes, '\0');
  const std::string first = node_id(path_);
  const std::string other = dir_.str() + "/mn1";
  ASSERT_TRUE(remote::create_memnode(other, kNodeSize, false).ok());
  const std::string second = node_id(other);
  ASSERT_TRUE(remote::create_memnode(other, kNodeSize, /*force=*/true).ok());
  const std::string again = node_id(other);
  EXPECT_NE(first, zero);
  EXPECT_NE(second, zero);
  EXPECT_NE(again, zero);
  EXPECT_NE(first, second);
  EXPECT_NE(second, again);
}

// A pool of the memory-node layout before node ids (version 1) is refused
// with the advice to create the node again; the file is left as it was.
TEST_F(RemoteTest, ANodeOfTheOldLayoutIsRefusedWithAdviceToCreateItAgain) {
  const int fd = ::open(path_.c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  const std::uint32_t old_version = 1;
  ASSERT_EQ(::pwrite(fd, &old_version, 4, static_cast<off_t>(remote::kFirstUsable + 8)), 4);
  ::close(fd);
  std::unique_ptr<Client> c;
  const Status s = Client::connect({"shm:" + path_}, {}, &c);
  EXPECT_TRUE(s.is_corruption()) << s.to_string();
  EXPECT_NE(s.message().find("layout version 1"), std::string::npos) << s.to_string();
  EXPECT_NE(s.message().find("create the node again"), std::string::npos) << s.to_string();
  std::unique_ptr<pool::Pool> p;
  EXPECT_TRUE(remote::open_memnode(path_, /*shared=*/false, &p).is_corruption());
}

TEST_F(RemoteTest, WriteThenReadFromAnotherClientSeesTheBytes) {
  auto a = client();
  auto b = client();
  // Ragged lengths and offsets, around word boundaries.
  std::string text = "the quick brown fox jumps over the lazy dog, 0123456789";
  for (std::uint64_t skew : {0u, 1u, 3u, 7u}) {
    Batch w;
    w.write(0, at(100) + skew, text.data(), static_cast<std::uint32_t>(text.size()));
    ASSERT_TRUE(a->exec_sync(w).ok());
    std::string back(text.size(), '\0');
    Batch r;
    r.read(0, at(100) + skew, back.data(), static_cast<std::uint32_t>(back.size()));
    ASSERT_TRUE(b->exec_sync(r).ok());
    EXPECT_EQ(back, text) << "skew " << skew;
    text[skew] ^= 0x20;
  }
}

TEST_F(RemoteTest, CasReturnsTheOldWordAndSwapsOnlyOnAMatch) {
  auto c = client();
  Batch b;
  b.cas(0, at(0), 0, 41).cas(0, at(0), 0, 99).cas(0, at(0), 41, 42);
  ASSERT_TRUE(c->exec_sync(b).ok());
  EXPECT_EQ(b.result(0), 0u);   // matched: 0 -> 41
  EXPECT_EQ(b.result(1), 41u);  // no match: stays 41
  EXPECT_EQ(b.result(2), 41u);  // matched: 41 -> 42
  EXPECT_EQ(word(*c, at(0)), 42u);
}

TEST_F(RemoteTest, FaaAddsAndReturnsTheOldWord) {
  auto c = client();
  Batch b;
  b.faa(0, at(1), 5).faa(0, at(1), 7).faa(0, at(1), ~std::uint64_t{0});  // + 5, + 7, - 1
  ASSERT_TRUE(c->exec_sync(b).ok());
  EXPECT_EQ(b.result(0), 0u);
  EXPECT_EQ(b.result(1), 5u);
  EXPECT_EQ(b.result(2), 12u);
  EXPECT_EQ(word(*c, at(1)), 11u);
}

TEST_F(RemoteTest, VerbsOfABatchRunInOrder) {
  auto c = client();
  const std::uint64_t seven = 7;
  std::uint64_t before = 1, after = 1;
  Batch b;
  b.read(0, at(2), &before, 8).write(0, at(2), &seven, 8).cas(0, at(2), 7, 8).read(0, at(2), &after, 8);
  ASSERT_TRUE(c->exec_sync(b).ok());
  EXPECT_EQ(before, 0u);
  EXPECT_EQ(b.result(2), 7u);
  EXPECT_EQ(after, 8u);
}

TEST_F(RemoteTest, BadVerbsAreRejectedAndNothingOfTheBatchRuns) {
  auto c = client();
  const std::uint64_t marker = 0xabcdef;
  std::uint64_t scratch = 0;
  struct Case {
    const char* what;
    std::uint64_t off;
    bool atomic;
    std::uint32_t len;
  };
  const Case cases[] = {
      {"past the end", kNodeSize - 4, false, 8},
      {"far past the end", kNodeSize * 4, false, 8},
      {"the pool header", 0, false, 8},
      {"a misaligned CAS", at(3) + 4, true, 8},
      {"a huge length", at(3), false, 0xffffffffu},
  };
  for (const Case& k : cases) {
    Batch b;
    b.write(0, at(3), &marker, 8);
    if (k.atomic) {
      b.cas(0, k.off, 0, 1);
    } else {
      b.read(0, k.off, &scratch, k.len);
    }
    const Status s = c->exec_sync(b);
    EXPECT_TRUE(s.is_invalid_argument()) << k.what << ": " << s.to_string();
    EXPECT_NE(s.to_string().find(path_), std::string::npos) << s.to_string();
    EXPECT_EQ(word(*c, at(3)), 0u) << k.what << ": the batch's first write ran";
  }
  // A node that is not connected.
  Batch b;
  b.read(1, at(3), &scratch, 8);
  EXPECT_TRUE(c->exec_sync(b).is_invalid_argument());
}

TEST_F(RemoteTest, CompletedWritesSurviveReopeningTheNode) {
  const std::string text = "durable once the batch completes";
  {
    auto c = client();
    Batch b;
    b.write(0, at(10), text.data(), static_cast<std::uint32_t>(text.size())).faa(0, remote::kBumpOffset, 4096);
    ASSERT_TRUE(c->exec_sync(b).ok());
  }
  // The "restart": the node's pool opened alone (as the daemon does).
  std::unique_ptr<pool::Pool> p;
  Status s = remote::open_memnode(path_, /*shared=*/false, &p);
  ASSERT_TRUE(s.ok()) << s.to_string();
  const std::byte* base = p->region().base();
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(base + at(10)), text.size()), text);
  std::uint64_t bump = 0;
  std::memcpy(&bump, base + remote::kBumpOffset, 8);
  EXPECT_EQ(bump, remote::kFirstAllocatable + 4096);
  // Held exclusively, the node cannot be mapped by a client meanwhile.
  std::unique_ptr<Client> c;
  s = Client::connect({"shm:" + path_}, {}, &c);
  EXPECT_TRUE(s.is_busy()) << s.to_string();
}

TEST_F(RemoteTest, ConnectNamesWhatIsWrongWithTheNode) {
  std::unique_ptr<Client> c;
  Status s = Client::connect({"shm:" + dir_.str() + "/missing"}, {}, &c);
  EXPECT_TRUE(s.is_io_error()) << s.to_string();
  EXPECT_NE(s.to_string().find("missing"), std::string::npos);
  s = Client::connect({"carrier-pigeon:x"}, {}, &c);
  EXPECT_TRUE(s.is_invalid_argument()) << s.to_string();
  s = Client::connect({"shm:"}, {}, &c);
  EXPECT_TRUE(s.is_invalid_argument()) << s.to_string();
  s = Client::connect({}, {}, &c);
  EXPECT_TRUE(s.is_invalid_argument()) << s.to_string();
  // A pool of another engine.
  pool::CreateParams params;
  params.engine = "clevel";
  params.size = pool::kMinPoolSize;
  std::unique_ptr<pool::Pool> other;
  const std::string other_path = dir_.str() + "/clevel";
  ASSERT_TRUE(pool::Pool::create(other_path, params, &other).ok());
  other.reset();
  s = Client::connect({"shm:" + other_path}, {}, &c);
  EXPECT_TRUE(s.is_invalid_argument()) << s.to_string();
  // A memory-node pool whose create stopped before its root was written.
  params.engine = remote::kMemNodeEngine;
  const std::string blank = dir_.str() + "/blank";
  ASSERT_TRUE(pool::Pool::create(blank, params, &other).ok());
  other.reset();
  s = Client::connect({"shm:" + blank}, {}, &c);
  EXPECT_TRUE(s.is_corruption()) << s.to_string();
  EXPECT_NE(s.to_string().find("--force"), std::string::npos) << s.to_string();
}

// Many coroutines on one thread, each a read-CAS loop incrementing one of
// a few shared words: every increment lands once, and the loop really had
// several batches in flight at a time.
Task<void> increment(Client& c, std::uint64_t off, int times) {
  for (int i = 0; i < times; ++i) {
    for (;;) {
      std::uint64_t v = 0;
      Batch r;
      r.read(0, off, &v, 8);
      Status s = co_await c.exec(r);
      EXPECT_TRUE(s.ok());
      Batch w;
      w.cas(0, off, v, v + 1);
      s = co_await c.exec(w);
      EXPECT_TRUE(s.ok());
      if (w.result(0) == v) break;
    }
  }
}

TEST_F(RemoteTest, CoroutinesKeepManyBatchesInFlightOnOneThread) {
  remote::ConnectOptions o;
  o.shm_latency = std::chrono::microseconds(50);
  auto c = client(o);
  constexpr int kTasks = 32, kTimes = 20;
  for (int t = 0; t < kTasks; ++t) c->spawn(increment(*c, at(20 + t % 4), kTimes));
  c->run();
  std::uint64_t total = 0;
  for (int w = 0; w < 4; ++w) {
    const std::uint64_t v = word(*c, at(20 + w));
    EXPECT_EQ(v, static_cast<std::uint64_t>(kTasks / 4 * kTimes)) << w;
    total += v;
  }
  EXPECT_EQ(total, static_cast<std::uint64_t>(kTasks * kTimes));
  EXPECT_GE(c->counters().max_in_flight, static_cast<std::uint64_t>(kTasks / 2));
  EXPECT_GE(c->counters().round_trips, static_cast<std::uint64_t>(2 * kTasks * kTimes));
}

TEST_F(RemoteTest, BlockOnReturnsTheTasksResult) {
  auto c = client();
  auto task = [](Client& cl, std::uint64_t off) -> Task<std::uint64_t> {
    Batch b;
    b.faa(0, off, 3);
    const Status s = co_await cl.exec(b);
    co_return s.ok() ? b.result(0) + 3 : 0;
  };
  EXPECT_EQ(c->block_on(task(*c, at(30))), 3u);
  EXPECT_EQ(c->block_on(task(*c, at(30))), 6u);
}

TEST_F(RemoteTest, CountersCountRoundTripsVerbsAndBytes) {
  auto c = client();
  char buf[100] = {};
  Batch b;
  b.read(0, at(40), buf, 100).write(0, at(60), buf, 24).cas(0, at(40), 0, 0).faa(0, at(41), 1);
  ASSERT_TRUE(c->exec_sync(b).ok());
  const remote::ClientCounters& k = c->counters();
  EXPECT_EQ(k.round_trips, 1u);
  EXPECT_EQ(k.posts, 1u);
  EXPECT_EQ(k.verbs, 4u);
  EXPECT_EQ(k.bytes, 100u + 24u + 24u + 16u);
  Batch empty;
  ASSERT_TRUE(c->exec_sync(empty).ok());
  EXPECT_EQ(c->counters().round_trips, 1u);
}

TEST_F(RemoteTest, InjectedLatencyDelaysEveryCompletion) {
  remote::ConnectOptions o;
  o.shm_latency = std::chrono::milliseconds(20);
  auto c = client(o);
  std::uint64_t v = 0;
  Batch b;
  b.read(0, at(50), &v, 8);
  const auto start = std::chrono::steady_clock::now();
  ASSERT_TRUE(c->exec_sync(b).ok());
  EXPECT_GE(std::chrono::steady_clock::now() - start, o.shm_latency);
}

TEST_F(RemoteTest, ThreadsWithTheirOwnClientsCountExactly) {
  constexpr int kThreads = 4, kTimes = 2000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      auto c = client();
      for (int i = 0; i < kTimes; ++i) {
        Batch b;
        b.faa(0, at(70), 1);
        ASSERT_TRUE(c->exec_sync(b).ok());
      }
      c->block_on(increment(*c, at(71), kTimes));
    });
  }
  for (auto& th : threads) th.join();
  auto c = client();
  std::uint64_t v[2] = {};
  Batch r;
  r.read(0, at(70), v, 16);
  ASSERT_TRUE(c->exec_sync(r).ok());
  EXPECT_EQ(v[0], static_cast<std::uint64_t>(kThreads * kTimes));
  EXPECT_EQ(v[1], static_cast<std::uint64_t>(kThreads * kTimes));
}

TEST_F(RemoteTest, ProcessesMappingOneNodeCountExactly) {
  constexpr int kProcesses = 3, kTimes = 3000;
  std::vector<pid_t> children;
  for (int p = 0; p < kProcesses; ++p) {
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      std::unique_ptr<Client> c;
      if (!Client::connect({"shm:" + path_}, {}, &c).ok()) ::_exit(2);
      for (int i = 0; i < kTimes; ++i) {
        Batch b;
        b.faa(0, at(80), 1);
        if (!c->exec_sync(b).ok()) ::_exit(3);
      }
      c.reset();
      ::_exit(0);
    }
    children.push_back(pid);
  }
  for (pid_t pid : children) {
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  }
  auto c = client();
  EXPECT_EQ(word(*c, at(80)), static_cast<std::uint64_t>(kProcesses * kTimes));
}

}  // namespace
}  // namespace pmhash
