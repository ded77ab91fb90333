// pmhash-server under many clients: 10,000 connections open at once are
// all served, and the server answers a newcomer while they stay open.
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <memory>
#include <string>
#include <vector>

#include "resp_client.h"
#include "scratch_file.h"
#include "server_process.h"

namespace pmhash::server {
namespace {

using test::RespClient;
using test::ServerProcess;

TEST(ServerConnections, TenThousandClientsAreServedAtOnce) {
  constexpr int kClients = 10000;
  // This process holds one descriptor per client, the server another.
  rlimit lim{};
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &lim), 0);
  lim.rlim_cur = lim.rlim_max;
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &lim), 0);
  ASSERT_GE(lim.rlim_cur, static_cast<rlim_t>(kClients + 64))
      << "the test needs an open-file limit above " << kClients;

  pmhash::testing::ScratchDir dir("pmhash-server-conns");
  ServerProcess server({"--pool", dir.str() + "/server.pool", "--create", "--size", "64M", "--max-clients",
                        std::to_string(kClients + 1)});
  ASSERT_TRUE(server.ok()) << server.output();
  EXPECT_EQ(server.output().find("serving at most"), std::string::npos) << server.output();

  std::vector<std::unique_ptr<RespClient>> clients;
  clients.reserve(kClients);
  for (int i = 0; i < kClients; ++i) {
    clients.push_back(std::make_unique<RespClient>(server.port()));
    ASSERT_TRUE(clients.back()->ok()) << "connection " << i;
  }
  // Every client sends before any reads, then every one gets its answer.
  for (int i = 0; i < kClients; ++i) {
    ASSERT_TRUE(clients[i]->send_raw(RespClient::encode({"SET", "c" + std::to_string(i), std::to_string(i)})));
  }
  for (int i = 0; i < kClients; ++i) ASSERT_EQ(clients[i]->reply(), "OK") << i;
  RespClient newcomer(server.port());
  EXPECT_EQ(newcomer.call({"DBSIZE"}), "(integer) " + std::to_string(kClients));
  EXPECT_NE(newcomer.call({"INFO", "clients"}).find("connected_clients:" + std::to_string(kClients + 1)),
            std::string::npos);
}

}  // namespace
}  // namespace pmhash::server
