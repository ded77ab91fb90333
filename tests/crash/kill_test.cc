// Process-kill test: a child process runs strict-durability inserts, updates,
// upserts and removes on a real pool file and reports each acknowledged
// operation through a pipe; the parent SIGKILLs it at a random instant,
// reopens the pool (crash recovery), runs check(), and verifies that every
// acknowledged write is present with its last acknowledged value. The one
// operation that may have been in flight may be present or absent, whole.
//
// The child is tests/crash_child/kill_child.cc, spawned fresh (no fork of a
// threaded parent). Its operations are a deterministic function of (seed,
// index) (kill_ops.h), so the parent can replay exactly what each ack means.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <map>
#include <optional>
#include <random>
#include <string>

#include "crash/kill_ops.h"
#include "pmhash/store.h"

extern char** environ;

namespace pmhash {
namespace {

using killtest::kKeys;
using killtest::key_name;
using killtest::Op;
using killtest::op_at;

// --- parent ----------------------------------------------------------------

class KillTest : public ::testing::TestWithParam<const char*> {};

TEST_P(KillTest, AcknowledgedWritesSurviveSigkillAtRandomInstants) {
  const std::string dir = GetParam();
  const bool on_disk = dir != "/dev/shm";
  const std::string path = dir + "/pmhash-kill-" + std::to_string(getpid()) + ".pool";
  ::unlink(path.c_str());
  // On /dev/shm exercise the cache-line flush path; on disk, page (msync).
  setenv("PMEM2_FORCE_GRANULARITY", on_disk ? "page" : "cache_line", 1);
  const int kills = on_disk ? 40 : 200;
  {
    Options o;
    o.pool_size = 64u << 20;
    o.clevel_initial_level_log2 = 3;  // small: the children resize all the time
    o.clevel_min_level_log2 = 2;
    o.clevel_shrink_threshold = 0.1;
    std::unique_ptr<Store> store;
    Status created = Store::create(path, o, &store);
    ASSERT_TRUE(created.ok()) << created.to_string();
    ASSERT_TRUE(store->close().ok());
  }
  std::map<std::uint64_t, std::string> model;  // acknowledged state
  std::mt19937_64 rng(42);
  char child[] = PMHASH_KILL_CHILD_PATH;

  for (int round = 0; round < kills; ++round) {
    const std::uint64_t seed = static_cast<std::uint64_t>(round) + 1;
    int fds[2];
    ASSERT_EQ(pipe(fds), 0);
    std::string seed_arg = std::to_string(seed);
    std::string fd_arg = std::to_string(fds[1]);
    std::string path_arg = path;
    pid_t pid;
    char* argv[] = {child, path_arg.data(), seed_arg.data(), fd_arg.data(), nullptr};
    ASSERT_EQ(posix_spawn(&pid, child, nullptr, nullptr, argv, environ), 0);
    close(fds[1]);

    // Kill after a random number of acks; one round in ten before the first
    // ack (during open and recovery).
    // (On disk every persist is an msync, so rounds there are shorter.)
    const std::uint64_t max_acks = on_disk ? 300 : 4000;
    const std::uint64_t kill_after = rng() % 10 == 0 ? 0 : rng() % max_acks;
    FILE* in = fdopen(fds[0], "r");
    std::uint64_t acked = 0;  // ops acknowledged so far (indices 0..acked-1)
    std::vector<int> results;
    auto read_ack = [&]() -> bool {
      unsigned long long i;
      int changed;
      if (fscanf(in, "%llu %d", &i, &changed) != 2) return false;
      EXPECT_EQ(i, acked);
      results.push_back(changed);
      ++acked;
      return true;
    };
    if (kill_after == 0) {
      // Spin a random, short while so the kill lands inside open/recovery.
      const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(rng() % 3000);
      while (std::chrono::steady_clock::now() < until) {
      }
    } else {
      while (acked < kill_after && read_ack()) {
      }
    }
    kill(pid, SIGKILL);
    while (read_ack()) {
    }
    fclose(in);
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFSIGNALED(status)) << "child ended by itself, status " << status;

    // Apply acknowledged operations to the model.
    for (std::uint64_t i = 0; i < acked; ++i) {
      const Op op = op_at(seed, i);
      if (!results[i]) continue;
      if (op.kind == Op::kRemove) {
        model.erase(op.key);
      } else {
        model[op.key] = op.value;
      }
    }
    // The operation after the last ack may or may not have happened.
    const Op pending = op_at(seed, acked);

    std::unique_ptr<Store> store;
    Status s = Store::open(path, {}, &store);
    ASSERT_TRUE(s.ok()) << "round " << round << ": " << s.to_string();
    s = store->check();
    ASSERT_TRUE(s.ok()) << "round " << round << ": " << s.to_string();
    for (std::uint64_t k = 0; k < kKeys; ++k) {
      std::string v;
      const Status g = store->get(key_name(k), &v);
      ASSERT_TRUE(g.ok() || g.is_not_found()) << g.to_string();
      const auto it = model.find(k);
      const std::optional<std::string> expected =
          it == model.end() ? std::nullopt : std::optional<std::string>(it->second);
      const std::optional<std::string> actual = g.ok() ? std::optional<std::string>(v) : std::nullopt;
      if (actual == expected) continue;
      // Only the in-flight operation's key may differ, and only to its result.
      ASSERT_EQ(k, pending.key) << "round " << round << " seed " << seed << " key " << k
                                << ": expected " << expected.value_or("<absent>") << ", found "
                                << actual.value_or("<absent>");
      const std::optional<std::string> after =
          pending.kind == Op::kRemove ? std::nullopt : std::optional<std::string>(pending.value);
      ASSERT_EQ(actual, after) << "round " << round << ": torn or foreign value for key " << k;
      if (actual) {
        model[k] = *actual;
      } else {
        model.erase(k);
      }
    }
    ASSERT_EQ(store->size(), model.size()) << "round " << round;
    ASSERT_TRUE(store->close().ok());
  }
  ::unlink(path.c_str());
}

INSTANTIATE_TEST_SUITE_P(Media, KillTest, ::testing::Values("/dev/shm", "/var/tmp"),
                         [](const auto& info) {
                           return std::string(info.param) == "/dev/shm" ? "ShmCacheLine" : "DiskPage";
                         });

}  // namespace
}  // namespace pmhash
