// scripts/cluster.sh: several pmhash-servers behind twemproxy (Debian's
// nutcracker). Through the proxy, clients write and read every key; in
// the shard shape the keys spread over the servers' pools (each key on one
// server), in the shared shape every server sees every key of the one index
// on the memory nodes.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "resp_client.h"
#include "scratch_file.h"
#include "subprocess.h"

namespace pmhash::server {
namespace {

using test::RespClient;

const std::string kScript = std::string(PMHASH_SOURCE_DIR) + "/scripts/cluster.sh";

// The cluster of one test: started in a scratch directory, stopped at the end.
class Cluster {
 public:
  explicit Cluster(const std::string& dir, std::vector<std::string> extra) : dir_(dir) {
    std::vector<std::string> args = {kScript, "start", "--dir", dir, "--port", "0", "--size", "64M",
                                     "--server", PMHASH_SERVER_PATH};
    args.insert(args.end(), extra.begin(), extra.end());
    started_ = pmhash::testing::run_program("/bin/bash", args);
    std::ifstream env(dir + "/cluster.env");
    std::string line;
    while (std::getline(env, line)) {
      const auto eq = line.find('=');
      if (eq == std::string::npos) continue;
      std::string value = line.substr(eq + 1);
      if (!value.empty() && value.front() == '"') value = value.substr(1, value.size() - 2);
      env_[line.substr(0, eq)] = value;
    }
  }
  ~Cluster() { pmhash::testing::run_program("/bin/bash", {kScript, "stop", "--dir", dir_}); }

  bool ok() const { return started_.exit_code == 0 && env_.count("PROXY_PORT") != 0; }
  std::string output() const { return started_.out + started_.err; }
  std::uint16_t proxy_port() const { return static_cast<std::uint16_t>(std::stoul(env_.at("PROXY_PORT"))); }
  std::vector<std::uint16_t> server_ports() const {
    std::vector<std::uint16_t> out;
    std::istringstream in(env_.at("SERVER_PORTS"));
    unsigned p = 0;
    while (in >> p) out.push_back(static_cast<std::uint16_t>(p));
    return out;
  }

 private:
  std::string dir_;
  pmhash::testing::SpawnResult started_;
  std::map<std::string, std::string> env_;
};

std::int64_t dbsize(std::uint16_t port) {
  RespClient c(port);
  const std::string r = c.call({"DBSIZE"});
  return r.rfind("(integer) ", 0) == 0 ? std::stoll(r.substr(10)) : -1;
}

TEST(ServerCluster, ShardsBehindNutcrackerHoldEachKeyOnce) {
  pmhash::testing::GranularityGuard granularity;
  granularity.force("cache_line");
  pmhash::testing::ScratchDir dir("pmhash-cluster");
  Cluster cluster(dir.str(), {"--servers", "3"});
  ASSERT_TRUE(cluster.ok()) << cluster.output();
  constexpr int kKeys = 3000;
  {
    RespClient c(cluster.proxy_port());
    for (int i = 0; i < kKeys; ++i) {
      ASSERT_EQ(c.call({"SET", "user:" + std::to_string(i), "v" + std::to_string(i)}), "OK") << i;
    }
    for (int i = 0; i < kKeys; i += 7) ASSERT_EQ(c.call({"GET", "user:" + std::to_string(i)}), "v" + std::to_string(i));
    // The proxy splits a multi-key command over the shards and joins the replies.
    EXPECT_EQ(c.call({"MGET", "user:1", "user:2", "nobody", "user:3"}), "[v1, v2, (nil), v3]");
    EXPECT_EQ(c.call({"DEL", "user:1", "user:2", "nobody"}), "(integer) 2");
  }
  const auto ports = cluster.server_ports();
  ASSERT_EQ(ports.size(), 3u);
  std::int64_t total = 0;
  for (std::uint16_t p : ports) {
    const std::int64_t n = dbsize(p);
    EXPECT_GT(n, kKeys / 10) << "server on port " << p << " got too few keys";
    total += n;
  }
  EXPECT_EQ(total, kKeys - 2) << "each key on exactly one server";
}

TEST(ServerCluster, ServersOverOneIndexOnMemoryNodesEachSeeEveryKey) {
  pmhash::testing::ScratchDir dir("pmhash-cluster-mn");
  const std::string node = dir.str() + "/node0";
  const auto made =
      pmhash::testing::run_program(PMHASH_MEMNODE_PATH, {"--pool", node, "--create", "--size", "128M"});
  ASSERT_EQ(made.exit_code, 0) << made.out << made.err;
  Cluster cluster(dir.str() + "/cluster", {"--servers", "3", "--memnodes", "shm:" + node});
  ASSERT_TRUE(cluster.ok()) << cluster.output();
  constexpr int kKeys = 500;
  {
    RespClient c(cluster.proxy_port());
    for (int i = 0; i < kKeys; ++i) {
      ASSERT_EQ(c.call({"SET", "s:" + std::to_string(i), std::to_string(i * i)}), "OK") << i;
    }
  }
  for (std::uint16_t p : cluster.server_ports()) {
    EXPECT_EQ(dbsize(p), kKeys);
    RespClient c(p);
    EXPECT_EQ(c.call({"GET", "s:21"}), "441");
  }
}

}  // namespace
}  // namespace pmhash::server
