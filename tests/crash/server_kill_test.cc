// pmhash-server killed with SIGKILL while clients write: every SET the
// server acknowledged is in the store after it starts again with the same
// command, the store's check() passes, and the restart reports a recovery.
// For every pool engine, strict durability, on /dev/shm with cache_line
// granularity (the flush path of persistent memory).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "pmhash/store.h"
#include "resp_client.h"
#include "scratch_file.h"
#include "server_process.h"

namespace pmhash::server {
namespace {

using test::RespClient;
using test::ServerProcess;

class ServerKillTest : public ::testing::TestWithParam<std::string> {};

std::string key_of(int writer, int i) { return "w" + std::to_string(writer) + ":" + std::to_string(i); }
std::string value_of(int writer, int i) { return std::string(static_cast<std::size_t>(8 + i % 200), 'a' + i % 26) + std::to_string(writer); }

TEST_P(ServerKillTest, EveryAcknowledgedSetSurvivesSigkill) {
  const std::string& engine = GetParam();
  pmhash::testing::GranularityGuard granularity;
  granularity.force("cache_line");
  pmhash::testing::ScratchDir dir("pmhash-server-kill");
  const std::string pool = dir.str() + "/server.pool";
  const std::vector<std::string> command = {"--pool", pool, "--create", "--engine", engine, "--size", "256M"};

  constexpr int kWriters = 4;
  std::vector<std::atomic<int>> acked(kWriters);
  {
    ServerProcess server(command);
    ASSERT_TRUE(server.ok()) << server.output();
    std::atomic<int> total{0};
    std::vector<std::thread> writers;
    for (int w = 0; w < kWriters; ++w) {
      writers.emplace_back([&, w] {
        RespClient c(server.port());
        for (int i = 0;; ++i) {
          // Acknowledged means the reply arrived; the kill may come between
          // a request and its reply, and then the key may or may not exist.
          if (c.call({"SET", key_of(w, i), value_of(w, i)}) != "OK") return;
          acked[w].store(i + 1);
          total.fetch_add(1);
        }
      });
    }
    // Kill in the middle of the writes, after some thousands of replies.
    while (total.load() < 4000) std::this_thread::yield();
    const int status = server.stop(SIGKILL);
    EXPECT_TRUE(WIFSIGNALED(status)) << server.output();
    for (std::thread& t : writers) t.join();
  }

  ServerProcess again(command);
  ASSERT_TRUE(again.ok()) << again.output();
  EXPECT_NE(again.output().find("recovered in"), std::string::npos) << again.output();
  {
    RespClient c(again.port());
    for (int w = 0; w < kWriters; ++w) {
      for (int i = 0; i < acked[w].load(); ++i) {
        ASSERT_EQ(c.call({"GET", key_of(w, i)}), value_of(w, i)) << key_of(w, i);
      }
    }
    ASSERT_TRUE(c.send_raw(RespClient::encode({"SHUTDOWN"})));
    EXPECT_TRUE(c.closed_by_server());
  }
  const int status = again.wait();
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << again.output();

  std::unique_ptr<Store> store;
  Options options;
  options.engine = engine;
  ASSERT_TRUE(Store::open(pool, options, &store).ok());
  EXPECT_TRUE(store->stats().clean_shutdown) << "SHUTDOWN closes the store cleanly";
  const Status check = store->check();
  EXPECT_TRUE(check.ok()) << check.to_string();
  std::uint64_t at_least = 0;
  for (int w = 0; w < kWriters; ++w) at_least += static_cast<std::uint64_t>(acked[w].load());
  EXPECT_GE(store->size(), at_least);
  EXPECT_TRUE(store->close().ok());
}

INSTANTIATE_TEST_SUITE_P(PoolEngines, ServerKillTest, ::testing::ValuesIn(Store::engines()),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace pmhash::server
