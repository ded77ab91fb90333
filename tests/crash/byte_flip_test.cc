// Byte-flip test: damaged pools give an error, never a crash or a hang.
//
// For every pool engine, two base pools are made once: a clean one (records
// loaded, closed) and a crashed one (records loaded, then the process is
// SIGKILLed while two threads write, so the pool was open when it died).
// Each trial copies a base pool, flips 1, 10 or 100 bytes at offsets drawn
// from a seeded generator in the 64-byte lines of the file that hold any
// data (not in its free space), and then:
//   1. opens it in a child process: an open that refuses the pool must leave
//      every byte of the file as it was (hash before and after);
//   2. runs the `pmhash` tool on it: check, info, scan, scan --skip-damaged,
//      get of present and absent keys. Each must end by itself (a timeout
//      kills one that hangs) with exit status 0 or 1, never by a signal,
//      and with exit 1 print exactly one line on stderr starting "pmhash: ".
//      A pool that check passes must scan without error.
// Trials per engine, state and flip count: PMHASH_FLIP_SEEDS (default 1,
// 24 trials in all; `make crash-long` runs 15, the 360 of the experiment).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "pmhash/store.h"
#include "scratch_file.h"
#include "subprocess.h"

namespace pmhash::crashtest {
namespace {

constexpr int kRecords = 1500;
constexpr int kTimeoutSeconds = 60;

std::string key_of(int i) {
  // Short keys for nehash's and pmeh's inline slots, long ones for items.
  char buf[48];
  std::snprintf(buf, sizeof buf, i % 4 == 0 ? "k%05d" : "key-with-a-longer-name-%06d", i);
  return buf;
}

std::string value_of(int i, int round = 0) {
  // Values of up to 8 bytes fit inline; most are larger.
  const std::size_t n = i % 3 == 0 ? 6 : 20 + static_cast<std::size_t>((i * 7 + round) % 90);
  return std::string(n, static_cast<char>('a' + (i + round) % 26));
}

Options pool_options(const std::string& engine) {
  Options o;
  o.engine = engine;
  o.pool_size = 8u << 20;
  o.set("clevel.initial_level_log2", 3);  // small tables: resizes and splits happen
  o.set("clevel.min_level_log2", 2);
  o.set("dali.initial_log2", 3);
  o.set("nehash.bucket_bits", 1);
  o.set("nehash.initial_dir_bits", 0);
  o.set("pmeh.segment_kib", 4);
  o.set("pmeh.zone_bits", 1);
  return o;
}

using pmhash::testing::read_file;
using pmhash::testing::write_file;

// FNV-1a: enough to see whether any byte changed.
std::uint64_t hash_bytes(const std::string& bytes) {
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : bytes) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

// Runs fn in a forked child that must _exit itself; returns its wait status.
// The child gets SIGALRM after the timeout, so a hang shows as a signal.
template <typename Fn>
int in_child(Fn&& fn) {
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::alarm(kTimeoutSeconds);
    fn();
    ::_exit(0);
  }
  int status = 0;
  EXPECT_EQ(::waitpid(pid, &status, 0), pid);
  return status;
}

// A pool with kRecords records, closed cleanly.
void make_clean(const std::string& engine, const std::string& path) {
  std::unique_ptr<Store> store;
  Status s = Store::create(path, pool_options(engine), &store);
  ASSERT_TRUE(s.ok()) << s.to_string();
  for (int i = 0; i < kRecords; ++i) {
    s = store->insert(key_of(i), value_of(i));
    ASSERT_TRUE(s.ok()) << s.to_string();
  }
  ASSERT_TRUE(store->close().ok());
}

// A pool whose process was SIGKILLed while two threads wrote to it: a child
// loads the records, starts the writers and kills itself once they have
// done 4000 operations (the kill lands amid their writes).
void make_crashed(const std::string& engine, const std::string& path) {
  make_clean(engine, path);
  const int status = in_child([&] {
    std::unique_ptr<Store> store;
    if (!Store::open(path, Options{.engine = ""}, &store).ok()) ::_exit(3);
    std::atomic<std::uint64_t> ops{0};
    auto writer = [&](int t) {
      std::mt19937_64 rng(static_cast<std::uint64_t>(t) + 1);
      for (int round = 1;; ++round) {
        const int i = static_cast<int>(rng() % (kRecords + 500));
        if (rng() % 4 == 0) {
          (void)store->remove(key_of(i));
        } else {
          (void)store->upsert(key_of(i), value_of(i, round));
        }
        ops.fetch_add(1, std::memory_order_relaxed);
      }
    };
    std::thread a(writer, 0), b(writer, 1);
    while (ops.load(std::memory_order_relaxed) < 4000) std::this_thread::yield();
    ::kill(::getpid(), SIGKILL);
    a.join();  // not reached
    b.join();
  });
  ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL)
      << "the writing child was not killed as planned (status " << status << ")";
}

struct Counts {
  int trials = 0, refused_opens = 0, check_failed = 0, scan_failed = 0;
};

class ByteFlipTest : public ::testing::TestWithParam<std::string> {};

TEST_P(ByteFlipTest, DamagedPoolsGiveErrorsNeverSignalsOrHangs) {
  const std::string& engine = GetParam();
  int seeds = 1;
  if (const char* s = std::getenv("PMHASH_FLIP_SEEDS")) seeds = std::max(1, std::atoi(s));
  testing::ScratchDir dir("pmhash-flip");
  std::map<std::string, std::string> base;  // state -> bytes
  {
    const std::string clean = dir.str() + "/clean.pool";
    const std::string crashed = dir.str() + "/crashed.pool";
    ASSERT_NO_FATAL_FAILURE(make_clean(engine, clean));
    ASSERT_NO_FATAL_FAILURE(make_crashed(engine, crashed));
    base["clean"] = read_file(clean);
    base["crashed"] = read_file(crashed);
  }
  const std::string pool = dir.str() + "/trial.pool";
  const std::vector<std::vector<std::string>> commands = {
      {"check"}, {"info"}, {"info", "--json"}, {"scan"}, {"scan", "--skip-damaged"},
      {"get", key_of(0)}, {"get", key_of(1)}, {"get", key_of(kRecords - 1)}, {"get", "absent-key"}};
  Counts n;
  for (const auto& [state, bytes] : base) {
    // The 64-byte lines that hold anything: flips land where the pool keeps
    // its structures and records, not in the free space between them.
    std::vector<std::size_t> used;
    for (std::size_t line = 0; line < bytes.size(); line += 64) {
      const std::size_t end = std::min(bytes.size(), line + 64);
      if (std::any_of(bytes.begin() + static_cast<std::ptrdiff_t>(line),
                      bytes.begin() + static_cast<std::ptrdiff_t>(end), [](char c) { return c != 0; })) {
        used.push_back(line);
      }
    }
    ASSERT_FALSE(used.empty());
    for (int flips : {1, 10, 100}) {
      for (int seed = 1; seed <= seeds; ++seed) {
        const std::string trial = engine + " " + state + ", " + std::to_string(flips) +
                                  " flipped bytes, seed " + std::to_string(seed);
        SCOPED_TRACE(trial);
        std::mt19937_64 rng(static_cast<std::uint64_t>(seed) * 1000 + static_cast<std::uint64_t>(flips));
        std::string damaged = bytes;
        for (int f = 0; f < flips; ++f) {
          damaged[used[rng() % used.size()] + rng() % 64] ^= static_cast<char>(1 + rng() % 255);
        }
        ASSERT_NO_FATAL_FAILURE(write_file(pool, damaged));
        ++n.trials;
        // 1. An open that refuses the pool changes no byte of it.
        const std::uint64_t before = hash_bytes(damaged);
        const int status = in_child([&] {
          std::unique_ptr<Store> store;
          if (!Store::open(pool, Options{.engine = ""}, &store).ok()) ::_exit(3);
          ::_exit(store->close().ok() ? 0 : 4);
        });
        ASSERT_TRUE(WIFEXITED(status)) << trial << ": open died by signal "
                                       << (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
        if (WEXITSTATUS(status) == 3) {
          ++n.refused_opens;
          EXPECT_EQ(hash_bytes(read_file(pool)), before) << trial << ": a refused open wrote the pool";
        }
        // 2. The tool's commands.
        ASSERT_NO_FATAL_FAILURE(write_file(pool, damaged));
        std::map<std::string, int> exit_of;
        for (const std::vector<std::string>& cmd : commands) {
          std::vector<std::string> args = {"-s", "KILL", std::to_string(kTimeoutSeconds),
                                           PMHASH_CLI_PATH, cmd[0], pool};
          args.insert(args.end(), cmd.begin() + 1, cmd.end());
          const testing::SpawnResult r = testing::run_program("/usr/bin/timeout", args);
          std::string name;
          for (const std::string& w : cmd) name += (name.empty() ? "" : " ") + w;
          EXPECT_TRUE(r.exit_code == 0 || r.exit_code == 1)
              << trial << ": 'pmhash " << name << "' exited " << r.exit_code
              << (r.exit_code == 124 || r.exit_code == 137 ? " (timed out)" : "")
              << (r.exit_code > 128 ? " (signal)" : "") << "; stderr: " << r.err;
          if (r.exit_code == 1) {
            EXPECT_TRUE(r.err.rfind("pmhash: ", 0) == 0 &&
                        std::count(r.err.begin(), r.err.end(), '\n') == 1)
                << trial << ": 'pmhash " << name << "' stderr is not one error line: " << r.err;
          }
          exit_of[name] = r.exit_code;
        }
        n.check_failed += exit_of["check"] != 0;
        n.scan_failed += exit_of["scan"] != 0;
        if (exit_of["check"] == 0) {
          EXPECT_EQ(exit_of["scan"], 0) << trial << ": check passed but scan failed";
          EXPECT_EQ(exit_of["scan --skip-damaged"], 0) << trial << ": check passed but salvage skipped entries";
        }
        if (::testing::Test::HasFailure()) {
          // Keep the damaged pool for a reproduction.
          const std::string kept = "/tmp/pmhash-flip-" + engine + "-" + state + "-" +
                                    std::to_string(flips) + "-" + std::to_string(seed) + ".pool";
          write_file(kept, damaged);
          ADD_FAILURE() << trial << ": damaged pool kept as " << kept;
          return;
        }
      }
    }
  }
  std::printf("%s: %d trials, %d opens refused, %d failed check, %d failed scan\n", engine.c_str(),
              n.trials, n.refused_opens, n.check_failed, n.scan_failed);
  // The flips must reach the index, not only unused bytes.
  EXPECT_GT(n.check_failed, 0) << "no trial damaged anything check could see";
}

INSTANTIATE_TEST_SUITE_P(PoolEngines, ByteFlipTest,
                         ::testing::Values("clevel", "nehash", "pmeh", "dali"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace pmhash::crashtest
