// Process-kill test: a child process (tests/crash_child/kill_child.cc) runs
// the crash checker's workload (crash/workload.h) on a real pool file, one
// or two threads, with strict durability and, for engines that persist by
// epochs, with epoch durability too, and reports each acknowledged operation
// (with the epoch it ran in) through a pipe; the parent SIGKILLs it at a random instant,
// reopens the pool (crash recovery) and verifies it with the checker's
// oracle (crash/oracle.h): everything acknowledged is there, each operation
// in flight wholly or not at all, check() passes. The next child continues
// the workload from the state the pool holds, so the pool is crashed and
// recovered again and again, including during its own recovery (one round
// in ten is killed before its first acknowledgement). For every engine, on
// /dev/shm with cache_line granularity and on the normal disk with page
// granularity. pmeh runs with 4 KiB segments in two zones, so that its
// workloads split segments and grow the directory.
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "crash/oracle.h"
#include "crash/workload.h"
#include "pmhash/store.h"

extern char** environ;

namespace pmhash::crashtest {
namespace {

using Param = std::tuple<std::string, std::string, std::string>;  // engine, directory, durability

class KillTest : public ::testing::TestWithParam<Param> {};

TEST_P(KillTest, AcknowledgedWritesSurviveSigkillAtRandomInstants) {
  const auto& [engine, dir, durability] = GetParam();
  const bool epochs = durability == "epoch";
  const bool on_disk = dir != "/dev/shm";
  const std::string path =
      dir + "/pmhash-kill-" + engine + "-" + durability + "-" + std::to_string(getpid()) + ".pool";
  bool transactions = false;
  ::unlink(path.c_str());
  // On /dev/shm exercise the cache-line flush path; on disk, page (msync).
  setenv("PMEM2_FORCE_GRANULARITY", on_disk ? "page" : "cache_line", 1);
  // PMHASH_KILLS (make crash-long) scales the rounds; CI runs 200 + 40.
  int kills = on_disk ? 40 : 200;
  if (const char* k = std::getenv("PMHASH_KILLS")) kills = std::max(1, std::atoi(k) / (on_disk ? 5 : 1));
  {
    Options o;
    o.engine = engine;
    o.pool_size = 32u << 20;
    o.set("clevel.initial_level_log2", 3);  // small: the children resize all the time
    o.set("clevel.min_level_log2", 2);
    o.set("clevel.shrink_threshold", 0.1);
    o.set("dali.initial_log2", 3);
    o.set("nehash.bucket_bits", 1);  // groups of two buckets: the children split them all the time
    o.set("nehash.initial_dir_bits", 0);
    o.set("pmeh.segment_kib", 4);  // 4 KiB segments in two zones: the children split them all the time
    o.set("pmeh.zone_bits", 1);
    std::unique_ptr<Store> store;
    Status created = Store::create(path, o, &store);
    ASSERT_TRUE(created.ok()) << created.to_string();
    transactions = has_transactions(*store);
    ASSERT_TRUE(store->close().ok());
  }
  std::mt19937_64 rng(42);
  const char* child = PMHASH_KILL_CHILD_PATH;

  // Rounds alternate between one and two threads; each thread's operations
  // continue from where the pool's state says the last round got.
  WorkloadSpec w;
  w.seed = 7;
  w.threads = 2;
  w.keys = 600;
  w.period = 3000;  // grow, churn, empty, again
  w.ops = std::uint64_t{1} << 40;
  w.transactions = transactions;
  // Epochs of 2 ms: a round of a few thousand operations spans several.
  const unsigned epoch_ms = 2;
  Oracle oracle(w);
  std::vector<std::uint64_t> next(w.threads, 0);
  std::uint64_t acked_total = 0;

  for (int round = 0; round < kills; ++round) {
    const unsigned threads = round % 2 == 0 ? 1 : 2;
    int fds[2];
    ASSERT_EQ(pipe(fds), 0);
    // Thread 1 sits out odd rounds: it starts at its current index and the
    // child runs only thread 0 (THREADS=1 in the child means thread 0 only).
    std::string starts = std::to_string(next[0]);
    if (threads == 2) starts += "," + std::to_string(next[1]);
    std::vector<std::string> args = {child,
                                     path,
                                     std::to_string(fds[1]),
                                     std::to_string(w.seed),
                                     std::to_string(threads),
                                     std::to_string(w.ops),
                                     std::to_string(w.keys),
                                     std::to_string(w.period),
                                     transactions ? "1" : "0",
                                     durability,
                                     std::to_string(epoch_ms),
                                     starts};
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    pid_t pid;
    ASSERT_EQ(posix_spawn(&pid, child, nullptr, nullptr, argv.data(), environ), 0);
    close(fds[1]);

    // Kill after a random number of acks; one round in ten before the first
    // ack (during open and recovery). On disk every persist is an msync, so
    // rounds there are shorter.
    const std::uint64_t max_acks = on_disk ? 300 : 3000;
    const std::uint64_t kill_after = rng() % 10 == 0 ? 0 : 1 + rng() % max_acks;
    FILE* in = fdopen(fds[0], "r");
    // What the round starts from is durable (the last verification closed
    // the pool); with epochs, each acknowledgement adds (its epoch, count).
    std::vector<Window> windows(w.threads);
    for (unsigned t = 0; t < w.threads; ++t) {
      windows[t].done = windows[t].seen = windows[t].synced = next[t];
      if (epochs) windows[t].by_epoch.emplace_back(0, next[t]);
    }
    std::uint64_t acks = 0;
    auto read_ack = [&]() -> bool {
      unsigned t = 0;
      unsigned long long i = 0, e = 0;
      if (fscanf(in, "%u %llu %llu", &t, &i, &e) != 3) return false;
      EXPECT_LT(t, threads);
      if (t < w.threads) {
        Window& win = windows[t];
        EXPECT_EQ(i, win.seen) << "thread " << t << " acknowledged out of order";
        win.done = win.seen = i + 1;
        if (op_at(w, t, i).kind == Op::kSync) win.synced = i;
        if (epochs) {
          // The first epoch of the window must be one this crash cannot
          // fail: the one before this round's first acknowledgement.
          if (win.by_epoch.size() == 1 && win.by_epoch[0].first == 0) win.by_epoch[0].first = e - 1;
          if (win.by_epoch.back().first == e) {
            win.by_epoch.back().second = i + 1;
          } else {
            win.by_epoch.emplace_back(e, i + 1);
          }
        }
      }
      ++acks;
      return true;
    };
    if (kill_after == 0) {
      // Spin a random, short while so the kill lands inside open/recovery.
      const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(rng() % 3000);
      while (std::chrono::steady_clock::now() < until) {
      }
    } else {
      while (acks < kill_after && read_ack()) {
      }
    }
    kill(pid, SIGKILL);
    while (read_ack()) {
    }
    fclose(in);
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFSIGNALED(status)) << "child ended by itself, status " << status;
    acked_total += acks;

    std::unique_ptr<Store> store;
    const Status s = Store::open(path, Options{.engine = ""}, &store);
    ASSERT_TRUE(s.ok()) << "round " << round << ": " << s.to_string();
    std::vector<std::uint64_t> matched;
    const std::string violation = oracle.verify(*store, windows, /*further=*/false, &matched);
    ASSERT_EQ(violation, "") << "round " << round << " (" << durability << ", " << threads << " threads, " << acks
                             << " acks, acknowledged per thread " << windows[0].done << ","
                             << windows[1].done << ")";
    next = matched;
    ASSERT_TRUE(store->close().ok());
  }
  EXPECT_GT(acked_total, static_cast<std::uint64_t>(kills));
  ::unlink(path.c_str());
  // make crash-long collects what every run explored.
  if (const char* summary = std::getenv("PMHASH_CRASH_SUMMARY")) {
    if (FILE* f = std::fopen(summary, "a")) {
      std::fprintf(f,
                   "{\"engine\":\"%s\",\"kills\":%d,\"media\":\"%s\",\"durability\":\"%s\",\"acks\":%llu,"
                   "\"violations\":0}\n",
                   engine.c_str(), kills, on_disk ? "disk-page" : "shm-cache_line", durability.c_str(),
                   static_cast<unsigned long long>(acked_total));
      std::fclose(f);
    }
  }
}

// Every engine on both media with strict durability, and with epoch
// durability where the engine accepts it.
std::vector<Param> kill_params() {
  std::vector<Param> out;
  for (const std::string& engine : Store::engines()) {
    for (const char* durability : {"strict", "epoch"}) {
      if (std::string(durability) == "epoch" && !accepts_epoch_durability(engine)) continue;
      for (const char* dir : {"/dev/shm", "/var/tmp"}) out.emplace_back(engine, dir, durability);
    }
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(EnginesAndMedia, KillTest, ::testing::ValuesIn(kill_params()),
                         [](const auto& info) {
                           return std::get<0>(info.param) +
                                  (std::get<1>(info.param) == "/dev/shm" ? "_ShmCacheLine" : "_DiskPage") +
                                  (std::get<2>(info.param) == "epoch" ? "_Epoch" : "");
                         });

}  // namespace
}  // namespace pmhash::crashtest
